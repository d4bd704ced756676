"""Grade a folder of submitted notebooks: ``python -m lib.grading.grader SUBMISSIONS_DIR --out REPORT.csv``.

Each submission (``.ipynb`` or a MyST ``.md`` notebook) runs top to bottom in a sandbox of its own (see
README, "For instructors": what it protects and what it does not), with a fresh kernel, on the GPU if there
is one, else on the simulator, and a time limit for the whole notebook. Its ``grade(...)`` calls do not
decide anything there: the grader (this process, which runs no code of any submission) sends each case's
inputs, judges what comes back and records the verdict. A bad submission (syntax error, exception, a hang,
a kernel that dies, an empty or corrupt file, a link, a folder, a forged message) becomes rows that say what
happened; the run goes on and always ends with the CSV written (atomically).

One row per student x exercise: the registered exercises that any submission grades or names in a
``grade("...")`` call, so a student whose notebook never reached a check still gets a row for it.
"""
from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from lib.mode import ROOT
from lib.grading.exercises import EXERCISES
from lib.grading.grader import remote, sandbox
from lib import mode

SUFFIXES = (".ipynb", ".md")
GRADE_CALL = re.compile(r"""\bgrade\(\s*["']([A-Za-z_][\w]*)["']""")
COLUMNS = ["student", "exercise", "passed", "status", "cases_passed", "cases_planned", "seconds", "seed",
           "first_failure"]
SIZE_CAP_BYTES = 20 << 20   # a notebook larger than this is not run
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
NOT_GRADED = "not graded"


# Top-level folders a notebook may read (read-only): the system, Python's installation, /tmp (private).
SYSTEM_DIRS = {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "opt", "proc", "sbin", "sys", "tmp",
               "usr", "var"}

# What the student edition (`make student`, tools/student.py) carries besides its chapters; a sandbox gets
# the same.
STUDENT_EDITION = ["lib", "kernels", "data", "requirements.txt"]

@dataclass
class Submission:
    """One entry of the folder: a notebook to run, or the reason it is not run."""
    name: str              # the file name as text (bytes that are not UTF-8 shown as U+FFFD)
    path: Path
    student: str = ""
    problem: str = ""
    source: bytes = b""


@dataclass
class Outcome:
    """What happened to one submission: the grader's verdicts, the exercises it names, and a problem if any."""
    student: str
    reports: dict = field(default_factory=dict)    # exercise -> GradeReport
    named: list = field(default_factory=list)
    problem: str = ""      # what stopped the notebook (or kept it from running)
    cell_error: str = ""   # the first error a cell raised, when the notebook ran to the end
    refused: int = 0       # malformed messages the grader refused
    seconds: float = 0.0


def _display(name: str) -> str:
    return os.fsencode(name).decode("utf-8", "replace")


def _read_regular(path: Path) -> tuple[bytes, str]:
    """The bytes of a plain file, or why it is not one. Opened without following links, and checked once
    open, so a file swapped for a link or a FIFO meanwhile is refused too."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return b"", f"could not be read ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return b"", "a symbolic link, not a file: submissions must be plain files (not graded)"
    if stat.S_ISDIR(info.st_mode):
        return b"", "a folder, not a notebook file (not graded)"
    if not stat.S_ISREG(info.st_mode):
        return b"", "not a regular file (a FIFO, socket or device; not graded)"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return b"", f"could not be read ({exc.strerror})"
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return b"", "not a regular file (not graded)"
        data = f.read(SIZE_CAP_BYTES + 1)
    if len(data) > SIZE_CAP_BYTES:
        return b"", f"larger than {SIZE_CAP_BYTES >> 20} MB (not graded)"
    return data, ""


def submissions(folder: Path) -> tuple[list[Submission], list[str]]:
    """Every entry of `folder` (hidden ones apart, which are returned by name), each with a student id that
    no other entry shares."""
    entries, hidden = [], []
    for name in sorted(os.listdir(folder)):
        if name.startswith("."):
            hidden.append(_display(name))
            continue
        sub = Submission(_display(name), folder / name)
        suffix = Path(name).suffix.lower()
        if suffix not in SUFFIXES:
            _, why = _read_regular(sub.path)
            sub.problem = why or f"not a notebook ({' or '.join(SUFFIXES)}; not graded)"
        else:
            sub.source, sub.problem = _read_regular(sub.path)
        entries.append(sub)
    stems: dict[str, int] = {}
    for sub in entries:
        stem = Path(sub.name).stem
        stems[stem] = stems.get(stem, 0) + 1
    for sub in entries:  # dup.md + dup.ipynb: two rows, each named by its whole file name
        stem = Path(sub.name).stem
        sub.student = stem if stems[stem] == 1 else sub.name
    return entries, hidden


def _named_exercises(source: bytes) -> list[str]:
    found = GRADE_CALL.findall(source.decode("utf-8", "replace"))
    return [e for e in dict.fromkeys(found) if e in EXERCISES]


@dataclass
class Run:
    """What every submission of one grading run shares."""
    scratch: Path          # the run's temporary folder
    book: Path             # the student edition, read-only in every sandbox
    hide: list[str]
    limit_s: float
    seeds: remote.Seeds
    on_gpu: bool
    extra_sizes: dict
    sandbox_problem: str | None   # None: sandboxed


def _prepare_run(folder: Path, out: Path | None, limit_s: float, secret_seed: str | None,
                 extra_sizes: dict) -> Run:
    scratch = Path(tempfile.mkdtemp(prefix="book-grader-"))
    os.chmod(scratch, 0o711)
    book = scratch / "book"
    book.mkdir()
    for name in STUDENT_EDITION:  # no chapters, so no solution cells
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, book / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, book / name)
    for path in [book, *book.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    # Every top-level folder that is not the system's is hidden too: another copy of a classmate's notebook
    # (a second checkout, a downloads folder under /work or /srv) must not be readable from the sandbox.
    elsewhere = {f"/{d}" for d in os.listdir("/") if d not in SYSTEM_DIRS and os.path.isdir(f"/{d}")
                 and not os.path.islink(f"/{d}")}
    hide = sorted({str(ROOT), str(folder.resolve()), "/root", "/home", "/run", "/var/tmp", "/mnt", "/media"}
                  | elsewhere | ({str(out.resolve().parent)} if out else set()))
    return Run(scratch, book, hide, limit_s, remote.Seeds(secret_seed), mode.ON_GPU, extra_sizes,
               sandbox.probe(scratch / "probe"))


def _run_one(run: Run, sub: Submission, index: int) -> Outcome:
    """Run one submission in its sandbox while this process serves and judges its grade() calls."""
    outcome = Outcome(sub.student, named=_named_exercises(sub.source))
    if sub.problem:
        outcome.problem = sub.problem
        return outcome
    base = run.scratch / f"s{index}"
    work, sock_dir, new_root = base / "work", base / "sock", base / "root"
    for d in (work, work / "home", sock_dir, new_root):
        d.mkdir(parents=True)
    suffix = Path(sub.name).suffix.lower()
    notebook = work / f"submission{suffix}"
    notebook.write_bytes(sub.source)
    if os.geteuid() == 0:
        for p in (work, work / "home", notebook):
            os.chown(p, sandbox.NOBODY, sandbox.NOBODY)
    os.chmod(base, 0o755)
    os.chmod(sock_dir, 0o755)
    server = remote.Server(str(sock_dir / "grade.sock"), sub.student, run.seeds, run.on_gpu, run.extra_sizes)
    env = _sandbox_env(run, work, sock_dir / "grade.sock")
    try:
        result = sandbox.run([sys.executable, "-m", "lib.grading.grader.execute", str(notebook), str(run.limit_s)],
                             workdir=work, new_root=new_root, hide=run.hide,
                             expose=[str(run.book), str(sock_dir)] + sandbox.python_paths(ROOT),
                             env=env, limits=_limits(run), sandboxed=run.sandbox_problem is None)
    finally:
        verdicts = server.close()
    outcome.reports = verdicts.reports
    outcome.seconds = result.seconds
    if result.timed_out:
        outcome.problem = f"the notebook did not finish within {run.limit_s:.0f} s (stopped)"
    elif verdicts.outcome is not None:
        outcome.problem, outcome.cell_error = verdicts.outcome["problem"], verdicts.outcome["cell_error"]
    else:
        tail = result.stderr.decode("utf-8", "replace").strip().splitlines()
        code = result.returncode or 0
        how = f"killed by signal {code - 128}" if code > 128 else f"exit code {code}"
        outcome.problem = (f"the notebook's process ended without a result ({how})"
                           + (f": {tail[-1][:200]}" if tail else ""))
    outcome.refused = len(verdicts.protocol_errors)
    shutil.rmtree(base, ignore_errors=True)
    return outcome


def _sandbox_env(run: Run, work: Path, sock: Path) -> dict:
    python_path = [str(run.book)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                     if p and Path(p).resolve() != ROOT]
    env = {"PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]),
           "HOME": str(work / "home"), "LANG": "C.UTF-8", "PYTHONPATH": os.pathsep.join(python_path),
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg",
           "JUPYTER_RUNTIME_DIR": str(work / ".jupyter"), "IPYTHONDIR": str(work / ".ipython"),
           "MPLCONFIGDIR": str(work / ".matplotlib"), "NUMBA_CACHE_DIR": str(work / ".numba"),
           remote.SOCKET_ENV: str(sock)}
    env.update({k: v for k, v in os.environ.items()
                if k.startswith(("NUMBA_", "CUDA_", "NVIDIA_")) or k == "LD_LIBRARY_PATH"})
    return env


def _limits(run: Run) -> sandbox.Limits:
    return sandbox.Limits(wall_s=run.limit_s, memory_bytes=None if run.on_gpu else sandbox.Limits.memory_bytes)


def rows_for(outcome: Outcome, exercises: list[str]) -> list[dict]:
    """One row per exercise: the grader's verdict on the last grade() call for it, or why there is none."""
    rows = []
    for ex in exercises:
        r = outcome.reports.get(ex)
        if r is not None:
            rows.append({"student": outcome.student, "exercise": ex, "passed": r.passed, "status": r.status,
                         "cases_passed": r.cases_passed, "cases_planned": r.planned,
                         "seconds": round(r.seconds, 3), "seed": r.seed, "first_failure": r.first_failure()})
        else:
            why = outcome.problem or (f"the notebook ran to the end but never called grade({ex!r})"
                                      + (f"; {outcome.cell_error}" if outcome.cell_error else ""))
            rows.append({"student": outcome.student, "exercise": ex, "passed": False, "status": NOT_GRADED,
                         "cases_passed": 0, "cases_planned": 0, "seconds": round(outcome.seconds, 3), "seed": "",
                         "first_failure": why})
    return rows


def _run_safely(run: Run, sub: Submission, index: int) -> Outcome:
    try:
        return _run_one(run, sub, index)
    except Exception as exc:  # noqa: BLE001 - a fault of the grader on one submission must not stop the run
        return Outcome(sub.student, named=_named_exercises(sub.source),
                       problem=f"the grader failed on this submission ({type(exc).__name__}: {str(exc)[:200]})")


def grade_folder(folder: Path, limit_s: float = 300.0, jobs: int = 1, progress: bool = True, *,
                 out: Path | None = None, secret_seed: str | None = None, extra_sizes: dict | None = None):
    """Grade every submission in `folder`; returns (rows, pandas summary of pass rates per exercise, notes)."""
    import pandas as pd
    from tqdm.auto import tqdm

    subs, hidden = submissions(folder)
    run = _prepare_run(folder, out, limit_s, secret_seed, extra_sizes or {})
    notes = [f"sandbox: {run.sandbox_problem}; notebooks ran UNSANDBOXED (see README)" if run.sandbox_problem
             else "sandbox: namespaces (unshare), read-only book, user nobody, no network"]
    if hidden:
        notes.append(f"hidden entries skipped: {', '.join(hidden)}")
    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool, \
                tqdm(total=len(subs), desc="grading", unit="notebook", disable=not progress, file=sys.stderr) as bar:
            futures = [pool.submit(_run_safely, run, sub, i) for i, sub in enumerate(subs)]
            outcomes = []
            for sub, future in zip(subs, futures):
                outcomes.append(future.result())
                bar.set_postfix_str(sub.name)
                bar.update(1)
    finally:
        shutil.rmtree(run.scratch, ignore_errors=True)
    notes += [f"{o.student}: {o.refused} malformed message(s) to the grader refused" for o in outcomes if o.refused]
    exercises = sorted({e for o in outcomes for e in o.reports} | {e for o in outcomes for e in o.named})
    unchecked = [e for e in exercises if run.on_gpu and e in EXERCISES and EXERCISES[e].perf is not None]
    if unchecked:
        notes.append(f"performance properties of {', '.join(unchecked)} were NOT checked (the tracer needs "
                     "the simulator): grade again with NUMBA_ENABLE_CUDASIM=1 to check them")
    rows = [row for o in outcomes for row in rows_for(o, exercises or [""])]
    df = pd.DataFrame(rows, columns=COLUMNS)
    graded = df[df["exercise"] != ""]
    summary = (graded.groupby("exercise")["passed"].agg(submissions="count", passed="sum", pass_rate="mean")
               if len(graded) else pd.DataFrame(columns=["submissions", "passed", "pass_rate"]))
    return rows, summary, notes


def _cell(value):
    """Text a spreadsheet would read as a formula gets a leading apostrophe."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def write_csv(rows: list[dict], out: Path):
    """Write the report atomically: a temporary file in the same folder, then a rename."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8", errors="replace") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: _cell(row[k]) for k in COLUMNS})
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise


def _extra_size(text: str) -> tuple[str, tuple]:
    """EXERCISE=N or EXERCISE=AxB...: one more size for that exercise."""
    exercise, _, dims = text.partition("=")
    if exercise not in EXERCISES:
        raise argparse.ArgumentTypeError(f"no exercise {exercise!r}; the exercises are: {', '.join(sorted(EXERCISES))}")
    try:
        size = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write a size as EXERCISE=N or EXERCISE=AxB") from None
    arity = len(EXERCISES[exercise].sim_cases[0])
    if len(size) != arity or min(size) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: {exercise} takes sizes of {arity} positive number(s)")
    return exercise, size


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.grading.grader", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="folder of submitted .ipynb / MyST .md notebooks")
    parser.add_argument("--out", type=Path, required=True, help="CSV report, one row per student x exercise")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per notebook (default 300)")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded at once (default 1)")
    parser.add_argument("--secret-seed", metavar="TEXT",
                        help="derive every case's inputs from this secret (the instructor can replay the run; "
                             "students cannot predict the inputs); default: fresh random seeds")
    parser.add_argument("--extra-size", metavar="EXERCISE=N[xM...]", type=_extra_size, action="append",
                        default=[], help="one more (hidden) size to check for an exercise; may be repeated")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder")
    extra: dict[str, tuple] = {}
    for exercise, size in args.extra_size:
        extra[exercise] = extra.get(exercise, ()) + (size,)
    rows, summary, notes = grade_folder(args.folder, args.timeout, args.jobs, out=args.out,
                                        secret_seed=args.secret_seed, extra_sizes=extra)
    write_csv(rows, args.out)
    for note in notes:
        print(note)
    print(f"{len(rows)} rows ({len({r['student'] for r in rows})} submissions) written to {args.out}")
    if len(summary):
        print(summary.assign(pass_rate=(summary["pass_rate"].astype(float) * 100).round(0).astype(int).astype(str)
                             + " %").to_string())
    return 0
