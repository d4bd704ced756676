"""Grade a folder of submitted notebooks: ``python -m lib.grader SUBMISSIONS_DIR --out REPORT.csv``.

Each submission (``.ipynb`` or a MyST ``.md`` notebook) runs top to bottom in its own process and its own
fresh kernel — on the GPU if there is one, else on the simulator — with a time limit for the whole notebook.
Every ``grade(...)`` call in it appends its report to a log the grader reads afterwards, so results survive
whatever happens later in the notebook. A bad submission (syntax error, exception at import, a hang, a
kernel that dies, an empty or corrupt file) becomes rows that say what happened; the run goes on.

One row per student × exercise: the exercises are those any submission grades or names in a
``grade("...")`` call, so a student whose notebook never reached a check still gets a row for it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .. import ROOT
from . import GRADE_LOG_ENV

SUFFIXES = (".ipynb", ".md")
GRADE_CALL = re.compile(r"""\bgrade\(\s*["']([A-Za-z_][\w]*)["']""")
COLUMNS = ["student", "exercise", "passed", "status", "seconds", "first_failure"]


@dataclass
class Outcome:
    """What happened to one submission: its grade reports, the exercises it names, and a problem if any."""
    student: str
    reports: list[dict]
    named: list[str]
    problem: str = ""
    seconds: float = 0.0


def submissions(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in SUFFIXES)


def _named_exercises(path: Path) -> list[str]:
    try:
        return list(dict.fromkeys(GRADE_CALL.findall(path.read_text(errors="replace"))))
    except OSError:
        return []


def _run_one(path: Path, limit_s: float) -> Outcome:
    """Execute one submission in a child process (python -m lib.grader.execute) with a hard time limit."""
    student = path.stem
    named = _named_exercises(path)
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        log = Path(tmp) / "grades.jsonl"
        env = dict(os.environ, **{GRADE_LOG_ENV: str(log), "PYTHONPATH": os.pathsep.join(
            [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])})
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "lib.grader.execute", str(path), str(limit_s)], cwd=ROOT,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            stdout, stderr = proc.communicate(timeout=limit_s)
            problem = stdout.strip().splitlines()[-1] if stdout.strip() else ""
            if proc.returncode and not problem:
                problem = f"the grader's child process failed: {stderr.strip()[-300:]}"
        except subprocess.TimeoutExpired:
            _kill_tree(proc.pid)
            proc.communicate()
            problem = f"the notebook did not finish within {limit_s:.0f} s (stopped)"
        seconds = time.perf_counter() - t0
        reports = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return Outcome(student, reports, named, problem, seconds)


def _kill_tree(pid: int):
    """Kill a process and everything it started (the kernel runs in a session of its own)."""
    import psutil

    try:
        parent = psutil.Process(pid)
        for child in parent.children(recursive=True) + [parent]:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
    except psutil.NoSuchProcess:
        pass


def rows_for(outcome: Outcome, exercises: list[str]) -> list[dict]:
    """One row per exercise: the last report of each graded exercise; the problem for the others."""
    last = {r["exercise"]: r for r in outcome.reports}
    rows = []
    for ex in exercises:
        r = last.get(ex)
        if r is not None:
            rows.append({"student": outcome.student, "exercise": ex, "passed": bool(r["passed"]),
                         "status": r["status"], "seconds": r["seconds"], "first_failure": r["first_failure"]})
        else:
            why = outcome.problem or "the notebook ran but never called grade() for this exercise"
            rows.append({"student": outcome.student, "exercise": ex, "passed": False, "status": "not graded",
                         "seconds": round(outcome.seconds, 3), "first_failure": why})
    return rows


def grade_folder(folder: Path, limit_s: float = 300.0, jobs: int = 1, progress: bool = True):
    """Grade every submission in `folder`; returns (rows, pandas summary of pass rates per exercise)."""
    import pandas as pd
    from tqdm.auto import tqdm

    paths = submissions(folder)
    outcomes: dict[Path, Outcome] = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool, \
            tqdm(total=len(paths), desc="grading", unit="notebook", disable=not progress, file=sys.stderr) as bar:
        futures = {pool.submit(_run_one, p, limit_s): p for p in paths}
        for future in futures:
            outcomes[futures[future]] = future.result()
            bar.set_postfix_str(futures[future].name)
            bar.update(1)
    exercises = sorted({r["exercise"] for o in outcomes.values() for r in o.reports}
                       | {e for o in outcomes.values() for e in o.named})
    rows = [row for p in paths for row in rows_for(outcomes[p], exercises)]
    df = pd.DataFrame(rows, columns=COLUMNS)
    summary = (df.groupby("exercise")["passed"].agg(submissions="count", passed="sum", pass_rate="mean")
               if len(df) else pd.DataFrame(columns=["submissions", "passed", "pass_rate"]))
    return rows, summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.grader", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="folder of submitted .ipynb / MyST .md notebooks")
    parser.add_argument("--out", type=Path, required=True, help="CSV report, one row per student x exercise")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per notebook (default 300)")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded at once (default 1)")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder")
    import pandas as pd

    rows, summary = grade_folder(args.folder, args.timeout, args.jobs)
    pd.DataFrame(rows, columns=COLUMNS).to_csv(args.out, index=False)
    print(f"{len(rows)} rows ({len(submissions(args.folder))} notebooks) written to {args.out}")
    if len(summary):
        print(summary.assign(pass_rate=(summary["pass_rate"] * 100).round(0).astype(int).astype(str) + " %")
              .to_string())
    return 0
