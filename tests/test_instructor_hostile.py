"""Instructor mode against the attacks of issue 27 (tests/submissions_hostile/): none sinks the run, none
passes, none reaches a classmate, the instructor's disk, memory, keyring, CSV or terminal; each also has a
test of the piece that stops it, without notebooks."""
import csv
import io
import json
import math
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import lib
from lib.grading.exercises import EXERCISES
from lib.grading.grader import cases, folder, remote, sandbox
from lib.grading.grader.cleanup import remove_tree
from lib.grading.grader.folder import COLUMNS, submissions, write_csv
from test_instructor import SECRET, SUBMISSIONS, needs_sandbox

HOSTILE = Path(__file__).parent / "submissions_hostile"
LIMIT_S = 90
# alice needs about 300 MiB on the simulator (a CUDA context takes more on a GPU); mem_hog's five children hold
# 2000 MiB together
NOTEBOOK_MEMORY = "1.5G" if lib.SIMULATOR else "6G"
ODD_NAMES = [b"v_victim.md", b"v_victim.ipynb", b"v_victim.md.md", b"u\xff.md", b"u\xfe.md",
             b"esc\x1b[31mred.md"]
HIDDEN_ODD = b".\x1b]0;pwned\x07.md"


def _other_paths() -> list[str]:
    """PYTHONPATH's entries other than the checkout: where a machine keeps the book's dependencies (the H200's
    wheels are installed into a folder on PYTHONPATH), kept for the grader's processes."""
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and Path(p).resolve() != Path(lib.ROOT).resolve()]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """One run over the hostile notebooks, alice (honest) and the odd names, started from the folder that holds
    the submissions and the report (the working directory on sys.path), with the checkout on PYTHONPATH:
    ({(student, exercise): row}, stdout, stderr, the submissions folder, the raw CSV text)."""
    course = tmp_path_factory.mktemp("course")
    subs = course / "subs"
    subs.mkdir()
    for src in HOSTILE.iterdir():
        shutil.copy2(src, subs / src.name)
    shutil.copy2(SUBMISSIONS / "alice.md", subs / "alice.md")
    alice, bob = (SUBMISSIONS / "alice.md").read_bytes(), (SUBMISSIONS / "bob.ipynb").read_bytes()
    for name in ODD_NAMES + [HIDDEN_ODD]:
        Path(os.fsdecode(os.fsencode(subs) + b"/" + name)).write_bytes(bob if name.endswith(b".ipynb") else alice)
    out = course / "report" / "report.csv"
    (course / "tmp").mkdir()   # the run's scratch folder goes here, to be checked for leftovers
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(lib.ROOT), *_other_paths()]), TMPDIR=str(course / "tmp"))
    proc = subprocess.run([sys.executable, "-m", "lib.grading.grader", "subs", "--out", "report/report.csv",
                           "--timeout", str(LIMIT_S), "--jobs", "2", "--secret-seed", SECRET,
                           "--notebook-memory", NOTEBOOK_MEMORY],
                          cwd=course, env=env, capture_output=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text(encoding="utf-8")
    rows = {(r["student"], r["exercise"]): r for r in csv.DictReader(io.StringIO(text, newline=""))}
    assert not list((course / "tmp").iterdir()), "the run left its scratch folder"
    return rows, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"), subs, text


def _row(rows, student, exercise="vector_add"):
    return rows[(student, exercise)]


# --- fatal 1: a tree 1,200 folders deep -------------------------------------------------------------------
@needs_sandbox
def test_a_deep_tree_sinks_nothing_and_its_verdict_stands(hostile):
    rows, stdout, stderr, _, _ = hostile
    assert _row(rows, "deep_tree")["passed"] == "True", _row(rows, "deep_tree")
    assert _row(rows, "alice")["passed"] == "True"
    assert "RecursionError" not in stderr and "could not be removed" not in stdout


def _deep_tree(top: Path, depth: int, name: str = "d"):
    fd = os.open(top, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir(name, dir_fd=fd)
        inner = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    return fd


def test_remove_tree_takes_any_depth_long_names_locked_folders_and_never_follows_links(tmp_path):
    """shutil.rmtree(ignore_errors=True) raised RecursionError on 1,200 levels; names of 250 bytes, 30 deep,
    are past PATH_MAX; a folder of mode 000; a link to a folder outside that must survive."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    victim = tmp_path / "victim"
    victim.mkdir()
    os.close(_deep_tree(victim, 1200))
    fd = _deep_tree(victim, 30, "b" * 250)
    os.symlink(outside, "link", dir_fd=fd)
    os.mkfifo("fifo", dir_fd=fd)
    os.mkdir("locked", dir_fd=fd)
    os.chmod("locked", 0, dir_fd=fd)
    os.close(fd)
    try:
        with pytest.raises(RecursionError):
            shutil.rmtree(victim, ignore_errors=True)   # what the grader used to call
        assert remove_tree(victim) == "" and not victim.exists()
        assert (outside / "keep").read_text() == "x"
        assert remove_tree(tmp_path / "never-existed") == ""
    finally:  # a tree left here would make pytest's own clean-up of old temporary folders raise later
        subprocess.run(["rm", "-rf", str(victim)], check=False)


# --- fatal 2: a submission sizing the grader's memory -----------------------------------------------------
_HUGE_FIXED = [{"name": "k", "module": "__main__", "qualname": "k", "grid": [1_000_000, 1, 1], "block": [1024, 1, 1],
                "shared_bytes": 0, "book": False}]


@pytest.mark.parametrize("ex_id", sorted(EXERCISES))
def test_no_claim_makes_the_planner_plan_a_size_past_its_cap(ex_id):
    """Host-computed answers, a claimed launch of 10^9 threads that stays the same at every size, and
    `seconds: 0`: the planner once built cases of any size inside the grader. Now no grown size exceeds the
    exercise's cap (DECISIVE_FACTOR x sim_work), whatever the records say."""
    ex = EXERCISES[ex_id]
    planner = cases.plan(ex, seed=1, on_gpu=False)
    for size in planner:
        planner.observe(size, _HUGE_FIXED, 0.0)
    grown = planner.planned[len(ex.sim_cases):]
    assert grown and max(cases.work(s) for s in grown) <= cases.DECISIVE_FACTOR * ex.sim_work, planner.planned


def _fake_grade_client(path: str, claims: list, seconds: float, answer) -> list:
    """A submission's side that answers every case with `answer(inputs)` and the `claims` as its launches;
    returns the sizes the grader asked for."""
    sizes = []
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        remote.send(s, {"op": "grade", "exercise": "vector_add"})
        while True:
            header, arrays = remote.recv(s, max_arrays=16, array_cap=1 << 34)
            if header["op"] != "case":
                return sizes
            sizes.append(tuple(header["size"]))
            out = answer(arrays)
            remote.send(s, {"op": "result", "outcome": "ran", "n_outputs": 1, "fills": [0.0], "launches": claims,
                            "seconds": seconds}, [out, *arrays])


def test_the_grader_builds_no_case_past_its_cap_for_a_lying_submission(tmp_path):
    """The same attack through the socket: right answers computed on the host, a huge fixed launch claimed,
    0 seconds claimed. The grader's largest case stays within its cap, and it passes (host answers are not
    caught: README, threat model)."""
    server = remote.Server(str(tmp_path / "g.sock"), "liar", remote.Seeds(None), False, {})
    try:
        sizes = _fake_grade_client(str(tmp_path / "g.sock"), _HUGE_FIXED, 0.0,
                                   lambda arrays: (arrays[0] + arrays[1]).astype(np.float32))
    finally:
        verdicts = server.close()
    assert max(cases.work(s) for s in sizes) <= cases.DECISIVE_FACTOR * EXERCISES["vector_add"].sim_work
    assert verdicts.reports["vector_add"].planned == len(sizes)


def test_one_submission_is_served_two_connections_at_a_time(tmp_path):
    """Each grade() in progress holds a case in the grader: one submission's many connections are served
    CONCURRENT_CAP at a time, the rest wait (so what one submission makes the grader hold is bounded)."""
    server = remote.Server(str(tmp_path / "g.sock"), "many", remote.Seeds(None), False, {})
    socks = []
    try:
        for _ in range(5):
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(tmp_path / "g.sock"))
            socks.append(s)
        time.sleep(1.0)
        assert len(server._connections) == remote.CONCURRENT_CAP
        for s in socks:
            s.close()
        time.sleep(2.0)
    finally:
        server.close()
    assert len(server._connections) == 5   # each was served in turn once the earlier ones closed


@needs_sandbox
def test_rows_decided_survive_a_grader_that_is_killed(tmp_path):
    """Rows are written as they come (REPORT.csv.partial, renamed into place after every verdict): killing the
    grader while a notebook hangs leaves the verdicts it had decided."""
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy2(SUBMISSIONS / "alice.md", subs / "a_alice.md")
    shutil.copy2(SUBMISSIONS / "frank.md", subs / "b_frank.md")   # never finishes
    out = tmp_path / "report" / "r.csv"
    proc = subprocess.Popen([sys.executable, "-m", "lib.grading.grader", str(subs), "--out", str(out),
                             "--timeout", "300"],
                            cwd=lib.ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    partial = out.with_name("r.csv.partial")
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and "a_alice" not in (partial.read_text() if partial.exists() else ""):
            time.sleep(1.0)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    rows = list(csv.DictReader(partial.open(newline="")))
    assert [(r["student"], r["passed"]) for r in rows] == [("a_alice", "True")], rows
    assert not out.exists()


# --- a wrong kernel that claims a growing grid ----------------------------------------------------------------
@needs_sandbox
def test_a_kernel_whose_records_claim_a_growing_grid_fails_at_the_graders_own_size(hostile):
    rows, *_ = hostile
    row = _row(rows, "forged_launch")
    assert row["passed"] == "False" and row["status"] == "failed", row
    assert "never written" in row["first_failure"] or "wrong" in row["first_failure"], row


def test_the_schedule_reaches_past_a_fixed_launch_of_5_x_1024_whatever_the_records_say():
    """The planner's own size for vector_add, for any seed, is past 5,120 elements: a launch fixed at
    5 x 1024 cannot pass, even when its records claim (n + 1023) // 1024 blocks at every size."""
    for seed in range(20):
        planner = cases.plan("vector_add", seed=seed, on_gpu=False)
        for size in planner:
            planner.observe(size, [{"name": "add", "module": "m", "qualname": "add", "grid": [(size[0] + 1023) // 1024],
                                    "block": [1024], "shared_bytes": 0, "book": False}], 0.1)
        assert max(s[0] for s in planner.planned) > 5 * 1024 * 4, planner.planned


# --- classmates through the working directory -----------------------------------------------------------------
@needs_sandbox
def test_the_working_directory_does_not_reopen_the_submissions(hostile):
    rows, _, _, subs, _ = hostile
    assert _row(rows, "peeker")["passed"] == "False", _row(rows, "peeker")
    assert (subs / "alice.md").read_bytes() == (SUBMISSIONS / "alice.md").read_bytes()


def test_the_working_directory_is_not_bound_into_the_sandbox(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path)] + sys.path)
    assert str(tmp_path) not in sandbox.python_paths(lib.ROOT)


# --- the student edition's answers --------------------------------------------------------------------------
@needs_sandbox
def test_the_books_answers_imported_and_claimed_do_not_pass(hostile):
    rows, *_ = hostile
    for exercise in ("vector_add", "transpose_batched"):
        row = _row(rows, "book_answer", exercise)
        assert row["passed"] == "False" and "leaves it out" in row["first_failure"], row
    retired = _row(rows, "book_answer", "scan_exclusive")
    assert retired["status"] == "not graded" and "retired" in retired["first_failure"], retired


# --- caps across a submission's processes, the keyring --------------------------------------------------------
@needs_sandbox
@pytest.mark.skipif(lib.ON_GPU, reason="the cap is set above a CUDA process's own needs, and above mem_hog's")
def test_memory_across_processes_is_capped(hostile):
    rows, *_ = hostile
    row = _row(rows, "mem_hog")
    assert "held more than 1.5 GiB of memory together" in row["first_failure"], row


@needs_sandbox
def test_the_writable_folder_is_capped_and_not_on_the_hosts_disk(hostile):
    rows, *_ = hostile
    text = _row(rows, "disk_hog")["first_failure"]
    written = int(text.split("wrote ")[1].split(" MiB")[0])
    assert written <= sandbox.Limits.work_bytes >> 20, text


@needs_sandbox
def test_a_key_left_by_one_submission_is_not_read_by_another(hostile):
    rows, *_ = hostile
    assert "keyring: nothing found" in _row(rows, "keyring_b")["first_failure"], _row(rows, "keyring_b")


_ADD_KEY = ("import ctypes; libc = ctypes.CDLL(None); print(libc.syscall(ctypes.c_long(248), b'user', b'left-behind', "
            "b'x', ctypes.c_long(1), ctypes.c_long(-4)))")
_FIND_KEY = ("import ctypes; libc = ctypes.CDLL(None); print(libc.syscall(ctypes.c_long(250), ctypes.c_long(10), "
             "ctypes.c_long(-4), b'user', b'left-behind', ctypes.c_long(0)))")


def _in_sandbox(tmp_path, code, limits, uid=None):
    work, root = tmp_path / f"w{time.monotonic_ns()}", tmp_path / f"r{time.monotonic_ns()}"
    work.mkdir()
    root.mkdir()
    return sandbox.run([sandbox.python_executable(), "-c", code], workdir=work, new_root=root,
                       hide=[str(tmp_path), "/root", "/home", "/work"], expose=sandbox.python_paths(lib.ROOT),
                       env={"PATH": "/usr/bin:/bin"}, limits=limits, sandboxed=True, uid=uid)


@needs_sandbox
@pytest.mark.skipif(os.geteuid() != 0 or os.uname().machine != "x86_64", reason="a user id of its own needs root")
def test_the_keyring_of_a_sandbox_is_cleared_when_it_ends(tmp_path):
    uid = sandbox.fresh_uid()
    first = _in_sandbox(tmp_path, _ADD_KEY, sandbox.Limits(wall_s=30), uid=uid)
    assert int(first.stdout) > 0, first
    again = _in_sandbox(tmp_path, _FIND_KEY, sandbox.Limits(wall_s=30), uid=uid)
    assert int(again.stdout) == -1, again   # the same user id, later: nothing left


@needs_sandbox
def test_the_sandbox_stops_at_its_total_memory(tmp_path):
    code = ("import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n        b = bytearray(200 << 20)\n"
            "        for i in range(0, len(b), 4096): b[i] = 1\n        time.sleep(60)\ntime.sleep(60)")
    result = _in_sandbox(tmp_path, code, sandbox.Limits(wall_s=60, total_memory_bytes=500 << 20))
    assert result.memory_exceeded and result.seconds < 30, result


@needs_sandbox
def test_the_writable_folder_is_a_capped_tmpfs(tmp_path):
    code = ("import os\nn = 0\ntry:\n    with open('big', 'wb') as f:\n        for _ in range(300):\n"
            "            f.write(b'x' * (1 << 20)); f.flush(); n += 1\n"
            "except OSError as e:\n    print('stopped', e.errno)\nprint(n)")
    result = _in_sandbox(tmp_path, code, sandbox.Limits(wall_s=60, work_bytes=64 << 20))
    assert b"stopped 28" in result.stdout and int(result.stdout.split()[-1]) <= 64, result   # ENOSPC
    assert not list(tmp_path.glob("w*/big")), "the file reached the host's folder"


# --- CSV, names, terminal, deep JSON ------------------------------------------------------------------------------
_CONTROL = [chr(c) for c in range(32) if c not in (10, 13)] + ["\x7f", "\x1b"]


@needs_sandbox
def test_forged_text_reaches_the_csv_as_plain_text(hostile):
    rows, _, _, _, text = hostile
    assert not any(c in text for c in _CONTROL), "a control character reached the CSV"
    assert len(text.splitlines()) == len(rows) + 1, "a line break inside a cell (a fake row)"
    assert sum(line.startswith("alice,vector_add,") for line in text.splitlines()) == 1, "a fake row"
    for row in rows.values():
        for value in row.values():
            assert not value.lstrip().startswith(folder.FORMULA_START), row
    forged = _row(rows, "csv_forge")
    assert forged["passed"] == "False" and "HYPERLINK" in forged["first_failure"], forged


def test_csv_cells_lose_control_characters_and_line_breaks(tmp_path):
    row = dict.fromkeys(COLUMNS, "")
    row.update(student="s", exercise="vector_add", seed=1,
               first_failure='x\n=HYPERLINK("e")\x00\x1b[2J\u202e\r\nalice,vector_add,True,passed,3,3,0.1,1,')
    write_csv([row, dict(row, student=" =1+1")], tmp_path / "r.csv")
    text = (tmp_path / "r.csv").read_text(encoding="utf-8")
    assert len(text.splitlines()) == 3 and "\x00" not in text and "\x1b" not in text and "\u202e" not in text
    assert "' =1+1" in text


@needs_sandbox
def test_each_odd_name_gets_its_own_row_and_no_escape_reaches_the_terminal(hostile):
    rows, stdout, stderr, _, _ = hostile
    students = {s for s, _ in rows}
    for sid in ("v_victim.md", "v_victim.ipynb", "v_victim.md.md", "u\ufffd.md", "u\ufffd.md #2",
                "esc\\x1b[31mred"):
        assert sid in students, sorted(students)
    assert "\x1b" not in stdout and "\x07" not in stdout and "\x1b" not in stderr.replace("\x1b[A", "")


def test_student_ids_are_unique_whatever_the_names(tmp_path):
    for name in ODD_NAMES + [b"dup.md", b"dup.ipynb", b"x.md"]:
        Path(os.fsdecode(os.fsencode(tmp_path) + b"/" + name)).write_text("x")
    subs, _ = submissions(tmp_path)
    ids = [s.student for s in subs]
    assert len(set(ids)) == len(ids), ids
    assert not any(c in "".join(ids) for c in _CONTROL), ids
    assert "x" in ids and "dup.md" in ids and "v_victim.md.md" in ids


@needs_sandbox
def test_a_30000_deep_json_header_is_refused_quietly(hostile):
    rows, stdout, stderr, _, _ = hostile
    assert "Traceback" not in stderr and "RecursionError" not in stderr, stderr[-2000:]
    assert "deep_json: 2 malformed message(s) to the grader refused" in stdout, stdout


def test_a_deeply_nested_header_is_a_protocol_error():
    a, b = socket.socketpair()
    head = b"[" * 30000 + b"]" * 30000
    with a, b:
        a.sendall(remote.MAGIC + struct.pack("<II", len(head), 0) + head)
        with pytest.raises(remote.ProtocolError, match="nested too deeply"):
            remote.recv(b, max_arrays=0, array_cap=0, deadline=time.monotonic() + 5)


def test_the_graders_copy_of_the_book_leaves_out_every_answer(tmp_path):
    from lib.grading.grader import edition
    from lib.grading.grader.folder import STUDENT_EDITION

    book = tmp_path / "book"
    edition.build(book, STUDENT_EDITION)
    code = ("import importlib, json, sys\nfound = {}\n"
            f"for path, names in {json.dumps({k: sorted(v) for k, v in edition.ANSWERS.items()})}.items():\n"
            "    module = importlib.import_module(path[:-3].replace('/', '.'))\n"
            "    for name in names:\n"
            "        said = []\n"
            "        for use in (lambda f: f(1, 2), lambda f: f[1, 32](1, 2)):\n"
            "            try:\n                use(getattr(module, name))\n"
            "            except RuntimeError as exc:\n                said.append(str(exc))\n"
            "        found[path + ':' + name] = said\n"
            "print(json.dumps(found))")
    env = {"PYTHONPATH": os.pathsep.join([str(book), *_other_paths()]), "PATH": "/usr/bin:/bin",
           "NUMBA_ENABLE_CUDASIM": "1"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=book, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(found) == sum(len(v) for v in edition.ANSWERS.values())
    for where, said in found.items():
        assert len(said) == 2 and all("answers the exercise" in s and "leaves it out" in s for s in said), (where, said)


def test_what_the_copy_leaves_out_does_answer_its_exercise(monkeypatch):
    """So the list is not longer than it must be: each launcher it names, called as a student would (once per
    matrix for the 2-D transposes), passes its exercise here in the checkout once its launches count as the
    student's (vector_add_float4 needs a GPU to compile, torch a GPU machine: those are left out unchecked)."""
    import kernels.intro
    import kernels.memory
    import lib.runtime.launches as launch_hooks
    from lib.grading.grader.cases import execute_case, judge, prepare_case

    original = launch_hooks._origin
    monkeypatch.setattr(launch_hooks, "_origin", lambda f: (original(f)[0], False))
    per_matrix = lambda f: (lambda a, out: [f(a[m], out[m]) for m in range(a.shape[0])])  # noqa: E731
    answers = [("vector_add", kernels.intro.vector_add, (4099,))]
    answers += [("transpose_batched", per_matrix(getattr(kernels.memory, name)), (2, 70, 33))
                for name in ("transpose_naive", "transpose_tiled", "transpose_padded", "transpose_swizzled",
                             "transpose_batched", "transpose_wide", "transpose_vector")]
    for exercise, fn, size in answers:
        case = prepare_case(exercise, size, np.random.default_rng(0))
        result = judge(case, execute_case(fn, case.public()))
        assert result.passed, (exercise, result.message)


def test_the_grader_caps_its_own_memory_and_its_sandboxes_lift_that_cap(tmp_path):
    """--grader-memory: past it an allocation in the grader fails with MemoryError (one check fails, not the
    run); a notebook on a GPU, which has no address-space limit of its own, does not inherit the grader's."""
    code = f"""
import resource, sys
import numpy as np
from pathlib import Path
from lib.grading.grader import folder, sandbox
limit = folder.limit_own_memory(256 << 20)
try:
    np.ones(1 << 28)   # 2 GiB
    print("allocated")
except MemoryError:
    print("MemoryError")
work, root = Path({str(tmp_path)!r}) / "w", Path({str(tmp_path)!r}) / "r"
work.mkdir(); root.mkdir()
r = sandbox.run([sandbox.python_executable(), "-c", "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0])"],
                workdir=work, new_root=root, hide=[{str(tmp_path)!r}, "/root", "/home", "/work"],
                expose=sandbox.python_paths(Path({str(lib.ROOT)!r})), env={{"PATH": "/usr/bin:/bin"}},
                limits=sandbox.Limits(wall_s=60, memory_bytes=None),
                sandboxed=sandbox.probe(Path({str(tmp_path)!r}) / "p") is None)
print("child", r.stdout.decode().strip(), resource.RLIM_INFINITY)
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=lib.ROOT, capture_output=True, text=True, timeout=300)
    lines = proc.stdout.strip().splitlines()
    assert "MemoryError" in lines, proc.stdout + proc.stderr[-2000:]
    child = next(line for line in lines if line.startswith("child")).split()
    assert child[1] == child[2], lines   # the notebook's soft limit is the hard one again (unlimited)
