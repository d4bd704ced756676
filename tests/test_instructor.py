"""Instructor mode: grading a folder of submissions. Every failure kind becomes a row, every forgery and
sabotage in tests/submissions/ leaves honest classmates passed and the forger not passed, odd entries of the
folder each get a row, the CSV is always written; and the student edition holds no solution text."""
import csv
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

import lib
from lib.grading.exercises import EXERCISES
from lib.grading.grader import folder, remote, sandbox
from lib.grading.grader.folder import COLUMNS, grade_folder
from tools.notebooks import read, toc_chapters
from tools.student import build, is_solution

SUBMISSIONS = Path(__file__).parent / "submissions"
LIMIT_S = 30        # per notebook; frank.md never finishes
SECRET = "s3cret"
EXTRA = (5000,)     # one hidden size for vector_add
MARKERS = ("book-grader-daemon-marker", "book-grader-pipe-marker")


def _sandbox_problem():
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return sandbox.probe(Path(tmp))


needs_sandbox = pytest.mark.skipif(_sandbox_problem() is not None, reason=f"{_sandbox_problem()}: the "
                                   "forgers would damage this checkout unsandboxed")


def _odd_entries(dest: Path):
    """Entries a real submissions folder may hold, each of which must get a row that says what it is."""
    alice, bob = (SUBMISSIONS / "alice.md").read_bytes(), (SUBMISSIONS / "bob.ipynb").read_bytes()
    (dest / "=cmd.md").write_bytes(alice)                    # a name a spreadsheet reads as a formula
    Path(os.fsdecode(os.fsencode(dest) + b"/bad\xffname.md")).write_bytes(alice)  # not UTF-8
    (dest / "shout.IPYNB").write_bytes(bob)
    (dest / "dup.md").write_bytes(alice)
    (dest / "dup.ipynb").write_bytes(bob)
    (dest / "folder.md").mkdir()
    (dest / "gone.md").symlink_to(dest / "nowhere.md")
    (dest / "link.md").symlink_to(dest / "alice.md")         # a link to a classmate: refused too
    os.mkfifo(dest / "pipe.md")
    (dest / "notes.txt").write_text("not a notebook")
    (dest / ".hidden.md").write_bytes(alice)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One grading run over a copy of tests/submissions/ (the saboteurs only ever reach the copy) plus odd
    entries: (rows by student, stdout, the copied folder, seconds)."""
    subs = tmp_path_factory.mktemp("submissions")
    for src in SUBMISSIONS.iterdir():
        shutil.copy2(src, subs / src.name)
    _odd_entries(subs)
    out = tmp_path_factory.mktemp("report") / "report.csv"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "lib.grading.grader", str(subs), "--out", str(out), "--timeout",
                           str(LIMIT_S), "--jobs", "2", "--secret-seed", SECRET,
                           "--extra-size", "vector_add=" + "x".join(map(str, EXTRA))],
                          cwd=lib.ROOT, capture_output=True, timeout=900)
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "compare = lambda" not in (lib.ROOT / "lib" / "grading" / "check.py").read_text(), \
        "a submission edited the instructor's lib/grading/check.py"
    with open(out, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == COLUMNS
    by_student = {}
    for row in rows:
        assert row["student"] not in by_student, f"two rows for {row['student']}"
        by_student[row["student"]] = row
    return by_student, proc.stdout.decode(), subs, seconds


@needs_sandbox
@pytest.mark.parametrize("student,passed,status,words", [
    ("alice", True, "passed", ""),                                    # correct
    # blocks rounded down: 0 blocks at the simulator's n = 1; on a GPU the planner starts at n = 1000,
    # where 3 blocks of 256 leave the last 232 elements unwritten (the H200, 2026-12-02)
    ("bob", False, *(("error", "grid values must be >= 1") if lib.SIMULATOR else ("failed", "elements wrong"))),
    ("carol", False, "not attempted yet", "write vector_add"),        # the stub
    ("dave", False, "not graded", "never called grade('vector_add'); code cell 2 raised SyntaxError"),
    ("erin", False, "error", "NameError: name 'fast_add'"),           # import failed, then used
    ("frank", False, "not graded", f"did not finish within {LIMIT_S} s"),  # hangs
    ("grace", False, "not graded", "kernel died"),                    # kills its kernel
    ("heidi", False, "not graded", "empty"),                          # empty file
    ("ivan", False, "not graded", "not a readable notebook"),         # corrupt JSON
])
def test_each_kind_of_submission_gets_the_row_it_deserves(graded, student, passed, status, words):
    rows, _, _, _ = graded
    row = rows[student]
    assert (row["passed"] == "True") == passed and row["status"] == status, row
    assert words in row["first_failure"], row


FORGERS = ["forge_log", "patch_compare", "patch_passed", "patch_grade", "patch_exercises", "frame_walk",
           "classmate", "edit_check", "malformed", "replay_seed", "kill_grader", "daemon", "hold_pipe", "flood"]


@needs_sandbox
@pytest.mark.parametrize("student", FORGERS)
def test_no_forgery_or_sabotage_passes(graded, student):
    rows, _, _, _ = graded
    assert rows[student]["passed"] == "False", rows[student]


@needs_sandbox
def test_forgers_fail_for_what_their_function_computes(graded):
    """Each function is judged on what it computes (nothing, or a copy of the empty public case: "error"); a
    replaced grade() never reaches the grader; a killed notebook is recorded as such."""
    rows, _, _, _ = graded
    for student in ["forge_log", "patch_compare", "patch_passed", "patch_exercises", "frame_walk",
                    "edit_check", "malformed", "daemon", "hold_pipe", "flood"]:
        assert rows[student]["status"] in ("failed", "error") and rows[student]["first_failure"], \
            rows[student]
    assert "never called grade('vector_add')" in rows["patch_grade"]["first_failure"]
    assert rows["kill_grader"]["status"] == "not graded"
    refused = re.search(r"malformed: (\d+) malformed message\(s\) to the grader refused", graded[1])
    assert refused and int(refused.group(1)) == 10, graded[1]   # of the forger's 13 attempts, 10 are malformed


@needs_sandbox
def test_honest_classmates_and_files_survive_the_saboteurs(graded):
    rows, _, subs, _ = graded
    assert (subs / "alice.md").read_bytes() == (SUBMISSIONS / "alice.md").read_bytes()
    assert rows["alice"]["passed"] == "True" and rows["dup.md"]["passed"] == "True"
    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
            if any(m in " ".join(p.info["cmdline"] or ()) for m in MARKERS)]
    assert not left, f"processes outlived the run: {left}"


@needs_sandbox
def test_the_run_stays_bounded_by_the_limits(graded):
    """frank (a hang) is stopped at the limit; flood's 300 MB on the grader's pipes are dropped, not kept or
    relayed; hold_pipe's holder dies with its namespace (test_honest_classmates... checks no process is left)."""
    rows, stdout, _, seconds = graded
    assert float(rows["frank"]["seconds"]) < LIMIT_S + 10
    assert "killed by signal 9" in rows["kill_grader"]["first_failure"]
    assert len(stdout) < 10_000 and seconds < 600


@needs_sandbox
def test_odd_entries_each_get_a_row_that_says_what_they_are(graded):
    rows, stdout, _, _ = graded
    assert rows["'=cmd"]["passed"] == "True"                     # neutralised, graded
    assert rows["bad\ufffdname"]["passed"] == "True"
    bob = "error" if lib.SIMULATOR else "failed"                 # bob's rounded-down grid (see above)
    assert rows["shout"]["status"] == bob                        # .IPYNB is a notebook (bob's)
    assert rows["dup.ipynb"]["status"] == bob and rows["dup.md"]["status"] == "passed"
    for student, words in [("folder", "a folder"), ("gone", "symbolic link"), ("link", "symbolic link"),
                           ("pipe", "not a regular file"), ("notes", "not a notebook")]:
        assert rows[student]["status"] == "not graded" and words in rows[student]["first_failure"], rows[student]
    assert ".hidden" not in " ".join(rows) and ".hidden.md" in stdout


@needs_sandbox
def test_only_registered_exercises_make_rows_and_no_cell_is_a_formula(graded):
    rows, _, _, _ = graded
    assert {r["exercise"] for r in rows.values()} == {"vector_add"}
    for row in rows.values():
        for value in row.values():
            assert not value.startswith(folder.FORMULA_START), row


@needs_sandbox
def test_secret_seed_extra_size_and_partial_credit(graded):
    """Seeds come from the instructor's secret (replayable by the instructor), the hidden size is checked,
    and cases passed / cases run are columns."""
    rows, _, _, _ = graded
    fixed = len(EXERCISES["vector_add"].gpu_cases if lib.ON_GPU else EXERCISES["vector_add"].sim_cases) + 1
    alice = rows["alice"]
    assert int(alice["seed"]) == remote.Seeds(SECRET).seed("alice", "vector_add", 1)
    assert alice["cases_passed"] == alice["cases_planned"] and int(alice["cases_planned"]) >= fixed
    assert int(rows["bob"]["cases_passed"]) < int(rows["bob"]["cases_planned"])


@needs_sandbox
def test_summary_table_is_printed(graded):
    _, stdout, _, _ = graded
    assert "vector_add" in stdout and "pass_rate" in stdout and "sandbox: namespaces" in stdout


@needs_sandbox
def test_order_and_repetition_do_not_change_pass_fail(tmp_path, graded):
    """A second run, over a folder whose files sort in the opposite order, gives the same pass/fail."""
    rows, _, _, _ = graded
    chosen = ["alice", "bob", "carol", "erin"]
    for i, name in enumerate(reversed(chosen)):
        src = next(SUBMISSIONS.glob(f"{name}.*"))
        (tmp_path / f"{i}_{name}{src.suffix}").write_bytes(src.read_bytes())
    again, summary, _ = grade_folder(tmp_path, limit_s=LIMIT_S, jobs=2, progress=False)
    assert {r["student"].split("_", 1)[1]: r["passed"] for r in again} == \
        {name: rows[name]["passed"] == "True" for name in chosen}
    assert summary.loc["vector_add", "passed"] == 1


def test_without_a_sandbox_the_run_says_so_in_its_notes(tmp_path, monkeypatch):
    shutil.copy2(SUBMISSIONS / "alice.md", tmp_path / "alice.md")
    monkeypatch.setitem(sandbox._PROBE, "reason", "no sandbox: pretend")
    rows, _, notes = grade_folder(tmp_path, limit_s=LIMIT_S, progress=False)
    assert rows[0]["passed"] and "UNSANDBOXED" in notes[0]


def test_a_missing_folder_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lib.grading.grader", str(tmp_path / "nope"), "--out", "x.csv"],
                          cwd=lib.ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and "is not a folder" in proc.stderr


def test_a_bad_extra_size_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lib.grading.grader", str(tmp_path), "--out", "x.csv",
                           "--extra-size", "matmul_at=5"], cwd=lib.ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and "matmul_at takes sizes of 3 positive number(s)" in proc.stderr


# --- the protocol, without notebooks -------------------------------------------------------------
def test_messages_past_the_caps_are_refused_before_they_are_read():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(remote.MAGIC + (1 << 31).to_bytes(4, "little") + (0).to_bytes(4, "little"))
        with pytest.raises(remote.ProtocolError, match="larger than allowed"):
            remote.recv(b, max_arrays=0, array_cap=0, deadline=time.monotonic() + 5)
        remote.send(a, {"op": "result"}, [np.zeros(1000, np.float32)])
        with pytest.raises(remote.ProtocolError, match="4128 bytes"):
            remote.recv(b, max_arrays=3, array_cap=100, deadline=time.monotonic() + 5)


def test_a_result_that_does_not_fit_the_case_is_refused_and_a_pickle_never_loads():
    from lib.grading.grader.cases import judge, prepare_case

    case = prepare_case("vector_add", (10,), np.random.default_rng(0))
    right = (case.inputs[0] + case.inputs[1]).astype(np.float32)
    header = {"op": "result", "outcome": "ran", "n_outputs": 1, "fills": [float("nan")],
              "launches": [{"name": "add", "module": "__main__", "qualname": "add", "grid": [1, 1, 1],
                            "block": [32, 1, 1], "shared_bytes": 0, "book": False}]}
    assert judge(case, remote._execution(case, header, [right, *case.inputs])).passed
    wrong_dtype = judge(case, remote._execution(case, header, [right.astype(np.float64), *case.inputs]))
    assert not wrong_dtype.passed and "malformed" in wrong_dtype.message
    with pytest.raises(remote.ProtocolError, match="2 arrays for 1 output"):
        remote._execution(case, header, [right, case.inputs[0]])
    with pytest.raises(remote.ProtocolError, match="expected a result"):
        remote._execution(case, {"op": "done", "passed": True}, [])
    a, b = socket.socketpair()
    with a, b:
        import io
        import struct

        buf = io.BytesIO()
        np.save(buf, np.array([{"x": 1}], dtype=object), allow_pickle=True)
        a.sendall(remote.MAGIC + struct.pack("<II", 2, 1) + b"{}" + struct.pack("<Q", len(buf.getvalue()))
                  + buf.getvalue())
        with pytest.raises(remote.ProtocolError, match="not a plain .npy"):
            remote.recv(b, max_arrays=1, array_cap=1 << 20, deadline=time.monotonic() + 5)


def test_csv_cells_that_a_spreadsheet_would_run_are_neutralised(tmp_path):
    row = dict.fromkeys(COLUMNS, "")
    row.update(student="=HYPERLINK(\"x\")", exercise="vector_add", first_failure="-1+1", seed=7)
    out = tmp_path / "r.csv"
    folder.write_csv([row], out)
    text = out.read_text()
    assert "'=HYPERLINK" in text and "'-1+1" in text and ",7," in text
    assert [p.name for p in tmp_path.iterdir()] == ["r.csv"]   # no temporary file left


# --- student edition ------------------------------------------------------------------------------
def test_student_edition_has_no_solution_text(tmp_path):
    out = tmp_path / "student"
    removed = build(out)
    for path in toc_chapters():
        source = read(path)
        solutions = [c for c in source.cells if is_solution(c)]
        exercises = [c for c in source.cells if "exercise" in c.get("metadata", {}).get("tags", [])]
        assert len(solutions) >= len(exercises), f"{path.name}: an exercise without a solution cell"
        assert removed[path.stem] == len(solutions)
        kept = {c.source for c in source.cells if not is_solution(c)}
        for edition in (out / "chapters" / f"{path.stem}.md", out / "chapters" / f"{path.stem}.ipynb"):
            student = read(edition)
            assert not any(is_solution(c) for c in student.cells)
            text = edition.read_text()
            for cell in solutions:
                distinctive = [ln.strip() for ln in cell.source.splitlines()
                               if len(ln.strip()) > 12 and not any(ln.strip() in k for k in kept)]
                assert distinctive, "a solution cell with no line of its own cannot be checked"
                for line in distinctive:
                    assert line not in text, f"{edition.name} still holds solution text: {line!r}"
            assert {c.source for c in student.cells if c.cell_type == "code"} == \
                {c.source for c in source.cells if c.cell_type == "code" and not is_solution(c)}
    assert (out / "lib" / "grading" / "grader" / "__init__.py").exists() and (out / "chapters" / "lib").is_symlink()


def test_student_edition_refuses_to_overwrite_the_sources():
    with pytest.raises(ValueError, match="_build"):
        build(lib.ROOT / "chapters")
