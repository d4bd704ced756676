"""Instructor mode: grading a folder of submissions (every failure kind becomes a row, the run goes on,
results do not depend on order) and the student edition (no solution text survives)."""
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import lib
from lib.grader.folder import COLUMNS, grade_folder
from lib.notebooks import read, toc_chapters
from lib.student import build, is_solution

SUBMISSIONS = Path(__file__).parent / "submissions"
LIMIT_S = 45  # per notebook; frank.md never finishes


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("grading") / "report.csv"
    proc = subprocess.run([sys.executable, "-m", "lib.grader", str(SUBMISSIONS), "--out", str(out),
                           "--timeout", str(LIMIT_S), "--jobs", "2"], cwd=lib.ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return pd.read_csv(out, keep_default_na=False).set_index("student"), proc.stdout


def test_one_row_per_student_and_exercise(report):
    df, _ = report
    assert list(df.reset_index().columns) == COLUMNS
    assert sorted(df.index) == sorted(p.stem for p in SUBMISSIONS.iterdir())
    assert set(df["exercise"]) == {"vector_add"}


@pytest.mark.parametrize("student,passed,status,words", [
    ("alice", True, "passed", ""),                                    # correct
    ("bob", False, "failed", "first at index"),                       # wrong kernel: tail never written
    ("carol", False, "not attempted yet", "write vector_add"),        # the stub
    ("dave", False, "not graded", "SyntaxError"),                     # syntax error
    ("erin", False, "error", "NameError: name 'fast_add'"),           # import failed, then used
    ("frank", False, "not graded", f"did not finish within {LIMIT_S} s"),  # hangs
    ("grace", False, "not graded", "kernel died"),                    # kills its kernel
    ("heidi", False, "not graded", "empty"),                          # empty file
    ("ivan", False, "not graded", "not a readable notebook"),         # corrupt JSON
])
def test_each_kind_of_submission_gets_the_row_it_deserves(report, student, passed, status, words):
    df, _ = report
    row = df.loc[student]
    assert (str(row["passed"]) == "True") == passed and row["status"] == status, dict(row)
    assert words in row["first_failure"]


def test_summary_table_is_printed(report):
    _, stdout = report
    assert "vector_add" in stdout and "pass_rate" in stdout and "11 %" in stdout


def test_order_and_repetition_do_not_change_pass_fail(tmp_path, report):
    """A second run, over a folder whose files sort in the opposite order, gives the same pass/fail."""
    df, _ = report
    chosen = ["alice", "bob", "carol", "erin"]
    for i, name in enumerate(reversed(chosen)):
        src = next(SUBMISSIONS.glob(f"{name}.*"))
        (tmp_path / f"{i}_{name}{src.suffix}").write_bytes(src.read_bytes())
    rows, summary = grade_folder(tmp_path, limit_s=LIMIT_S, jobs=2, progress=False)
    again = {r["student"].split("_", 1)[1]: r["passed"] for r in rows}
    assert again == {name: str(df.loc[name, "passed"]) == "True" for name in chosen}
    assert summary.loc["vector_add", "passed"] == 1


def test_a_missing_folder_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lib.grader", str(tmp_path / "nope"), "--out", "x.csv"],
                          cwd=lib.ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and "is not a folder" in proc.stderr


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
    assert (out / "lib" / "grader" / "__init__.py").exists() and (out / "chapters" / "lib").is_symlink()


def test_student_edition_refuses_to_overwrite_the_sources():
    with pytest.raises(ValueError, match="_build"):
        build(lib.ROOT / "chapters")
