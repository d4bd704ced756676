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
import stat
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from lib.mode import ROOT
from lib.grading.exercises import EXERCISES, RETIRED
from lib.grading.grader import edition, remote, sandbox
from lib.grading.grader.cleanup import remove_tree
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
    cleanup: str = ""      # what its folder's clean-up could not remove, if anything


def _display(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 shown as U+FFFD, control and bidi characters as
    ``\\xNN`` / ``\\uNNNN`` (so that no escape sequence of a file name reaches a terminal or a cell)."""
    return clean_text(os.fsencode(name).decode("utf-8", "replace"), escape=True)


# C0 and C1 control characters, DEL, and the bidirectional overrides and isolates (which reorder what a
# terminal or a spreadsheet shows), plus the line and paragraph separators
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def clean_text(text: str, escape: bool = False) -> str:
    """`text` with no control, escape or bidi character left: tabs and line breaks become spaces, the rest
    U+FFFD (or, with `escape`, a visible ``\\xNN`` / ``\\uNNNN``: for file names, which must stay
    distinguishable). What any text of a submission goes through before it reaches the CSV or the terminal."""
    def sub(m):
        c = m.group(0)
        if c in "\t\n\r\u2028\u2029" and not escape:
            return " "
        if escape:
            return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
        return "\ufffd"
    return _UNSAFE.sub(sub, str(text))


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
    _assign_students(entries)
    return entries, hidden


def _assign_students(entries: list[Submission]):
    """Student ids, one per entry and no two alike: the file name without its suffix, or, where two entries
    share that (dup.md and dup.ipynb; v.md beside v.md.md, whose stem is v.md), the whole file name; where
    even whole names look alike once shown as text (two names whose undecodable bytes both show as U+FFFD),
    the name and ``#2``, ``#3``... in the order of their bytes."""
    ids = [Path(sub.name).stem for sub in entries]
    whole = [False] * len(entries)
    for _ in range(len(entries) + 2):  # every round makes some id longer: few rounds
        seen: dict[str, list[int]] = {}
        for i, sid in enumerate(ids):
            seen.setdefault(sid, []).append(i)
        clashes = [group for group in seen.values() if len(group) > 1]
        if not clashes:
            break
        for group in clashes:
            short = [i for i in group if not whole[i]]
            for i in short:
                ids[i], whole[i] = entries[i].name, True
            if not short:  # whole names alike: numbered, the first keeps its name
                for k, i in enumerate(sorted(group, key=lambda i: os.fsencode(entries[i].path.name))[1:], 2):
                    ids[i] = f"{entries[i].name} #{k}"
    for sub, sid in zip(entries, ids):
        sub.student = sid


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
    memory_bytes: int | None = None   # resident memory of one notebook's processes together
    live: dict = field(default_factory=dict)   # index -> remote.Verdicts of the notebooks running now
    on_verdict: object = None         # called after every verdict the grader records


def _prepare_run(folder: Path, out: Path | None, limit_s: float, secret_seed: str | None,
                 extra_sizes: dict, memory_bytes: int | None = None) -> Run:
    scratch = Path(tempfile.mkdtemp(prefix="book-grader-"))
    os.chmod(scratch, 0o711)
    book = scratch / "book"
    edition.build(book, STUDENT_EDITION)  # no chapters (so no solution cells), no answers in kernels/
    # Every top-level folder that is not the system's is hidden too: another copy of a classmate's notebook
    # (a second checkout, a downloads folder under /work or /srv) must not be readable from the sandbox.
    elsewhere = {f"/{d}" for d in os.listdir("/") if d not in SYSTEM_DIRS and os.path.isdir(f"/{d}")
                 and not os.path.islink(f"/{d}")}
    hide = sorted({str(ROOT), str(folder.resolve()), "/root", "/home", "/run", "/var/tmp", "/mnt", "/media"}
                  | elsewhere | ({str(out.resolve().parent)} if out else set()))
    return Run(scratch, book, hide, limit_s, remote.Seeds(secret_seed), mode.ON_GPU, extra_sizes,
               sandbox.probe(scratch / "probe"), memory_bytes)


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
    notebook.write_bytes(sub.source)   # copied by the sandbox's init into the notebook's own tmpfs
    os.chmod(base, 0o755)
    os.chmod(sock_dir, 0o755)
    server = remote.Server(str(sock_dir / "grade.sock"), sub.student, run.seeds, run.on_gpu, run.extra_sizes,
                           on_verdict=run.on_verdict)
    run.live[index] = server.verdicts
    env = _sandbox_env(run, work, sock_dir / "grade.sock")
    try:
        result = sandbox.run([sandbox.python_executable(), "-m", "lib.grading.grader.execute", str(notebook),
                              str(run.limit_s)], workdir=work, new_root=new_root, hide=run.hide,
                             expose=[str(run.book), str(sock_dir)] + sandbox.python_paths(ROOT),
                             env=env, limits=_limits(run), sandboxed=run.sandbox_problem is None)
    finally:
        verdicts = server.close()
    outcome.reports = verdicts.reports
    outcome.seconds = result.seconds
    if result.memory_exceeded:
        outcome.problem = (f"the notebook's processes held more than {_gib(run.memory_bytes)} of memory together "
                           "(stopped)")
    elif result.timed_out:
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
    left = remove_tree(base)   # never raises: the verdicts above are kept whatever the notebook left behind
    if left:
        outcome.cleanup = left
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
    return sandbox.Limits(wall_s=run.limit_s, memory_bytes=None if run.on_gpu else sandbox.Limits.memory_bytes,
                          total_memory_bytes=run.memory_bytes)


def _gib(n: int | None) -> str:
    return "no limit" if not n else f"{n / (1 << 30):.3g} GiB"


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
        outcome = Outcome(sub.student, named=_named_exercises(sub.source),
                          problem=f"the grader failed on this submission ({type(exc).__name__}: "
                                  f"{clean_text(exc)[:200]})")
        live = run.live.get(index)
        if live is not None:  # verdicts already decided survive the failure
            outcome.reports = dict(live.reports)
        return outcome


class Progress:
    """The rows decided so far, on disk as they come: ``REPORT.csv.partial`` is rewritten after every verdict
    and every finished notebook (a whole new file, then a rename: it is never half-written), so a run that
    dies (the grader killed, out of memory, a power cut) leaves every verdict it had decided. The report
    itself, ``REPORT.csv``, is written once at the end (:func:`write_csv`), then the partial file goes."""

    def __init__(self, out: Path | None, subs: list[Submission]):
        self.out = out
        self.partial = out.with_name(out.name + ".partial") if out is not None else None
        self.subs = subs
        self.done: dict[int, Outcome] = {}
        self._lock = threading.Lock()

    def write(self, run: Run):
        if self.partial is None:
            return
        with self._lock:
            try:
                live = {i: Outcome(self.subs[i].student, reports=dict(v.reports)) for i, v in list(run.live.items())
                        if i not in self.done}
                exercises = _exercises(list(self.done.values()) + list(live.values())) or [""]
                rows = []
                for i in range(len(self.subs)):
                    if i in self.done:
                        rows += rows_for(self.done[i], exercises)
                    elif i in live:  # still running: only what is decided
                        rows += rows_for(live[i], sorted(live[i].reports))
                write_csv(rows, self.partial)
            except Exception:  # noqa: BLE001 - a progress file that cannot be written must not stop the run
                pass

    def finish(self):
        if self.partial is not None:
            try:
                os.unlink(self.partial)
            except OSError:
                pass


def _exercises(outcomes: list[Outcome]) -> list[str]:
    return sorted({e for o in outcomes for e in o.reports} | {e for o in outcomes for e in o.named})


def grade_folder(folder: Path, limit_s: float = 300.0, jobs: int = 1, progress: bool = True, *,
                 out: Path | None = None, secret_seed: str | None = None, extra_sizes: dict | None = None,
                 notebook_memory: int | None = sandbox.Limits.total_memory_bytes):
    """Grade every submission in `folder`; returns (rows, pandas summary of pass rates per exercise, notes).
    With `out`, the rows decided so far are kept in ``out.partial`` while the run goes on (:class:`Progress`);
    the caller writes `out` itself (:func:`write_csv`) and then calls nothing else: the partial file is
    removed once `out` exists (main does both)."""
    import pandas as pd
    from tqdm.auto import tqdm

    subs, hidden = submissions(folder)
    run = _prepare_run(folder, out, limit_s, secret_seed, extra_sizes or {}, notebook_memory)
    notes = [f"sandbox: {run.sandbox_problem}; notebooks ran UNSANDBOXED (see README)" if run.sandbox_problem
             else "sandbox: namespaces (unshare), read-only book, a user of its own, no network"]
    if hidden:
        notes.append(f"hidden entries skipped: {', '.join(hidden)}")
    tracker = Progress(out, subs)
    run.on_verdict = lambda: tracker.write(run)
    outcomes: dict[int, Outcome] = {}
    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool, \
                tqdm(total=len(subs), desc="grading", unit="notebook", disable=not progress, file=sys.stderr) as bar:
            futures = {pool.submit(_run_safely, run, sub, i): i for i, sub in enumerate(subs)}
            for future in as_completed(futures):
                i = futures[future]
                outcomes[i] = future.result()
                tracker.done[i] = outcomes[i]
                run.live.pop(i, None)
                tracker.write(run)
                bar.set_postfix_str(subs[i].name)
                bar.update(1)
    finally:
        left = remove_tree(run.scratch)   # never raises (a tree 1,200 levels deep once did, with rmtree)
    if left:
        notes.append(f"the scratch folder could not be removed entirely: {left}")
    ordered = [outcomes[i] for i in sorted(outcomes)]
    notes += [f"{o.student}: {o.refused} malformed message(s) to the grader refused" for o in ordered if o.refused]
    notes += [f"{o.student}: its folder could not be removed entirely ({o.cleanup})" for o in ordered if o.cleanup]
    exercises = _exercises(ordered)
    unchecked = [e for e in exercises if run.on_gpu and e in EXERCISES and EXERCISES[e].perf is not None]
    if unchecked:
        notes.append(f"performance properties of {', '.join(unchecked)} were NOT checked (the tracer needs "
                     "the simulator): grade again with NUMBA_ENABLE_CUDASIM=1 to check them")
    retired = [e for e in exercises if e in RETIRED]
    if retired:
        notes.append(f"{', '.join(retired)}: retired exercises, which the book's kernels/ answer: not graded "
                     "here (see README)")
    rows = [row for o in ordered for row in rows_for(o, exercises or [""])]
    df = pd.DataFrame(rows, columns=COLUMNS)
    graded = df[df["exercise"] != ""]
    summary = (graded.groupby("exercise")["passed"].agg(submissions="count", passed="sum", pass_rate="mean")
               if len(graded) else pd.DataFrame(columns=["submissions", "passed", "pass_rate"]))
    return rows, summary, notes


def _cell(value):
    """A CSV cell no spreadsheet runs and no line-based reader splits: control, escape and bidi characters
    replaced (a line break inside a cell can no longer fake a row, nor hide a formula on its second line),
    and text a spreadsheet would read as a formula given a leading apostrophe."""
    if isinstance(value, str):
        value = clean_text(value)
        if value.lstrip(" ").startswith(FORMULA_START):
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


def _bytes(text: str) -> int:
    """1.5G, 512M, 2048K or a number of bytes."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write a size as 8G, 512M or a number of bytes") from None
    if value < 1 << 20:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 1M")
    return int(value)


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 << 30


def limit_own_memory(extra_bytes: int) -> int | None:
    """Cap this process's address space at what it holds now plus `extra_bytes` (a soft limit: the sandboxes
    it starts lift it again). What a submission makes the grader allocate is already bounded (the planner's
    caps, a few grade() calls at once per notebook); this is the backstop: past it an allocation fails with
    MemoryError, which fails that one check ("the grader failed"), never the run. Returns the limit, or None
    where it cannot be set."""
    import resource

    try:
        with open("/proc/self/status") as f:
            size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = size + extra_bytes
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        return limit
    except (OSError, ValueError, StopIteration):
        return None


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
    parser.add_argument("--notebook-memory", metavar="BYTES", type=_bytes, default=sandbox.Limits.total_memory_bytes,
                        help="resident memory one notebook's processes may hold together before it is stopped "
                             f"(default {_gib(sandbox.Limits.total_memory_bytes)})")
    default_own = min(max(_physical_memory() * 3 // 4, 4 << 30), 32 << 30)
    parser.add_argument("--grader-memory", metavar="BYTES", type=_bytes, default=default_own,
                        help="address space the grader itself may add to what it holds at start (default: 3/4 "
                             f"of this machine's memory, 4 to 32 GiB: {_gib(default_own)} here)")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder")
    extra: dict[str, tuple] = {}
    for exercise, size in args.extra_size:
        extra[exercise] = extra.get(exercise, ()) + (size,)
    limit_own_memory(args.grader_memory)
    try:
        rows, summary, notes = grade_folder(args.folder, args.timeout, args.jobs, out=args.out,
                                            secret_seed=args.secret_seed, extra_sizes=extra,
                                            notebook_memory=args.notebook_memory)
    except BaseException as exc:
        partial = args.out.with_name(args.out.name + ".partial")
        if partial.exists():
            print(f"the run stopped ({type(exc).__name__}); the rows decided so far are in {partial}",
                  file=sys.stderr)
        raise
    write_csv(rows, args.out)
    Progress(args.out, []).finish()
    for note in notes:
        print(note)
    print(f"{len(rows)} rows ({len({r['student'] for r in rows})} submissions) written to {args.out}")
    if len(summary):
        print(summary.assign(pass_rate=(summary["pass_rate"].astype(float) * 100).round(0).astype(int).astype(str)
                             + " %").to_string())
    return 0
