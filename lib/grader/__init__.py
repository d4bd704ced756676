"""``grade(exercise_id, fn)``: check a student's function on fresh random inputs and say what went wrong.

Every call draws a new seed (printed, so a failure can be replayed with ``grade(..., seed=...)``), runs the
exercise's cases (sizes of 1, ragged and multi-block ones; small on the simulator, large on a GPU), fills
outputs with NaN so unwritten elements show, checks that inputs were not modified, and compares with a
float64 reference. The report renders itself as text and HTML; ``report.passed`` is a bool.
"""
from __future__ import annotations

import ctypes
import html
import inspect
import json
import os
import secrets
import threading
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from ..check import compare, hint
from ..exercises import EXERCISES, Exercise

PASSED, FAILED, NOT_ATTEMPTED, TIMEOUT, ERROR = "passed", "failed", "not attempted yet", "timed out", "error"


class GradeTimeout(Exception):
    """Raised inside a student's code that outlived the check's time limit."""


@dataclass
class CaseResult:
    size: tuple
    passed: bool
    seconds: float
    message: str = ""
    hint: str = ""
    raised: bool = False      # the student's code raised (rather than computing wrong values)


@dataclass
class GradeReport:
    exercise: str
    status: str
    seed: int
    cases: list[CaseResult] = field(default_factory=list)
    message: str = ""
    hint: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def __bool__(self):
        return self.passed

    def first_failure(self) -> str:
        return "" if self.passed else self.message

    def __str__(self):
        head = {PASSED: "PASSED", NOT_ATTEMPTED: "NOT ATTEMPTED YET"}.get(self.status, "FAILED")
        lines = [f"{self.exercise}: {head}  (seed {self.seed}, {self.seconds:.1f} s)"]
        for c in self.cases:
            lines.append(f"  {'ok  ' if c.passed else 'FAIL'} size {_size_label(c.size):<16} {c.seconds:6.2f} s"
                         + (f"  {c.message}" if c.message and not c.passed else ""))
        if self.message and self.status != PASSED and not any(not c.passed for c in self.cases):
            lines.append(f"  {self.message}")
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        if self.status not in (PASSED, NOT_ATTEMPTED):
            lines.append(f"  replay: grade({self.exercise!r}, fn, seed={self.seed})")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self):
        color = {PASSED: "#1a7f37", NOT_ATTEMPTED: "#6e7781"}.get(self.status, "#cf222e")
        title = {PASSED: "passed", NOT_ATTEMPTED: "not attempted yet"}.get(self.status, self.status)
        rows = "".join(
            f"<tr><td>{'✓' if c.passed else '✗'}</td><td><code>{_size_label(c.size)}</code></td>"
            f"<td>{c.seconds:.2f} s</td><td>{html.escape(c.message) if not c.passed else ''}</td></tr>"
            for c in self.cases)
        body = f"<table>{rows}</table>" if rows else ""
        shown = any(not c.passed for c in self.cases)
        msg = f"<p>{html.escape(self.message)}</p>" if self.message and not self.passed and not shown else ""
        tip = f"<p><b>Hint:</b> {html.escape(self.hint)}</p>" if self.hint else ""
        return (f'<div style="border-left:4px solid {color};padding:0.3em 0.8em;margin:0.5em 0">'
                f'<b style="color:{color}">{html.escape(self.exercise)}: {title}</b> '
                f'<small>(seed {self.seed}, {self.seconds:.1f} s)</small>{body}{msg}{tip}</div>')

    def to_dict(self) -> dict:
        return {"exercise": self.exercise, "passed": self.passed, "status": self.status, "seed": self.seed,
                "seconds": round(self.seconds, 3), "first_failure": self.first_failure()}


def _size_label(size) -> str:
    return "×".join(str(s) for s in size)


def _student_location(tb) -> str:
    """The innermost frame of the traceback that is the student's code (not numba's, not the book's)."""
    frames = traceback.extract_tb(tb)
    for frame in reversed(frames):
        f = frame.filename.replace("\\", "/")
        if "/numba" not in f and "/lib/" not in f and "/site-packages/" not in f and "threading.py" not in f:
            return f"line {frame.lineno}: {frame.line}" if frame.line else f"line {frame.lineno}"
    return ""


def _describe_exception(exc: BaseException) -> str:
    loc = _student_location(exc.__traceback__)
    text = f"{type(exc).__name__}: {exc}".strip()
    return f"your code raised {text}" + (f" (at {loc})" if loc else "")


def _check_callable(fn, ex: Exercise) -> str | None:
    if not callable(fn):
        return f"grade expects a function {ex.signature}, got {type(fn).__name__}"
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind in (p.VAR_POSITIONAL,) for p in params):
        return None
    wanted = ex.signature.count(",") + 1
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    if not len(required) <= wanted <= len(positional):
        names = ", ".join(p.name for p in positional)
        return f"{ex.signature} takes {wanted} arguments; your function takes ({names})"
    return None


def _run_case(ex: Exercise, fn, size, rng, cuda) -> CaseResult:
    t0 = time.perf_counter()
    inputs = ex.make_inputs(size, rng)
    expected = ex.reference(*inputs)
    d_inputs = [cuda.to_device(x) for x in inputs]
    out = np.full(ex.out_shape(*inputs), np.nan, dtype=np.float32)
    d_out = cuda.to_device(out)
    fn(*d_inputs, d_out)
    cuda.synchronize()
    actual = d_out.copy_to_host()
    for i, (x, d_x) in enumerate(zip(inputs, d_inputs)):
        after = d_x.copy_to_host()
        if not np.array_equal(after.view(np.uint32), x.view(np.uint32)):
            where = tuple(int(j) for j in np.argwhere(after.view(np.uint32) != x.view(np.uint32))[0])
            names = ex.signature[ex.signature.index("(") + 1:-1].split(", ")
            return CaseResult(size, False, time.perf_counter() - t0,
                              f"input `{names[i]}` was modified (first at {where}): a kernel must only write "
                              "its output")
    tol = ex.tolerance(*inputs, expected)
    bad = compare(actual, expected, tol.rtol, tol.atol, tol.scale)
    if bad is None:
        return CaseResult(size, True, time.perf_counter() - t0)
    return CaseResult(size, False, time.perf_counter() - t0, bad.describe(), hint(bad))


def _kill_threads(threads, exc_type=GradeTimeout):
    for t in threads:
        if t.is_alive() and t.ident is not None:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(exc_type))


GRADE_LOG_ENV = "BOOK_GRADE_LOG"  # set by the folder grader: every report is appended there as a JSON line


def grade(exercise_id: str, fn, seed: int | None = None, time_limit_s: float | None = None) -> GradeReport:
    """Check `fn` against exercise `exercise_id` and return a report (which displays itself)."""
    report = _grade(exercise_id, fn, seed, time_limit_s)
    log = os.environ.get(GRADE_LOG_ENV)
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(report.to_dict()) + "\n")
    return report


def _grade(exercise_id: str, fn, seed: int | None, time_limit_s: float | None) -> GradeReport:
    import lib
    from numba import cuda

    if exercise_id not in EXERCISES:
        raise KeyError(f"no exercise {exercise_id!r}; the exercises are: {', '.join(sorted(EXERCISES))}")
    ex = EXERCISES[exercise_id]
    seed = secrets.randbits(32) if seed is None else int(seed)
    report = GradeReport(exercise_id, FAILED, seed)
    problem = _check_callable(fn, ex)
    if problem:
        report.status, report.message = ERROR, problem
        return report
    cases = ex.sim_cases if lib.SIMULATOR else ex.gpu_cases
    limit = time_limit_s if time_limit_s is not None else ex.time_limit_s
    rng = np.random.default_rng(seed)
    state: dict = {"cases": []}

    def work():
        for size in cases:  # all of them, so the report shows which sizes pass
            t_case = time.perf_counter()
            try:
                state["cases"].append(_run_case(ex, fn, size, rng, cuda))
            except NotImplementedError:
                state["not_attempted"] = True
                return
            except GradeTimeout:
                return
            except BaseException as exc:  # noqa: BLE001 - every failure of student code becomes a report
                state["cases"].append(CaseResult(size, False, time.perf_counter() - t_case,
                                                 _describe_exception(exc), _exception_hint(exc), raised=True))

    before = set(threading.enumerate())
    worker = threading.Thread(target=work, name=f"grade-{exercise_id}", daemon=True)
    t0 = time.perf_counter()
    worker.start()
    worker.join(limit)
    report.seconds = time.perf_counter() - t0
    report.cases = state["cases"]
    if worker.is_alive():
        started = [t for t in threading.enumerate() if t not in before]
        _kill_threads(started)
        worker.join(5.0)
        report.status = TIMEOUT
        running = _size_label(cases[len(report.cases)]) if len(report.cases) < len(cases) else "?"
        report.message = (f"did not return within {limit:.0f} s (size {running}): an endless loop, or threads "
                          "waiting for each other?")
        report.hint = ("every thread must reach each syncthreads(); loops need an exit condition that every "
                       "thread reaches.")
        if lib.ON_GPU:
            report.hint += (" On a GPU the kernel may still be running: restart the notebook's kernel if "
                            "later GPU work hangs.")
        return report
    if state.get("not_attempted"):
        report.status = NOT_ATTEMPTED
        report.message = f"write {ex.signature} in the exercise cell above, then run this cell again"
        report.cases = []
        return report
    failed = next((c for c in report.cases if not c.passed), None)
    if failed is None:
        report.status = PASSED
        return report
    report.status = ERROR if failed.raised else FAILED
    report.message = f"size {_size_label(failed.size)}: {failed.message}"
    report.hint = failed.hint
    return report


def _exception_hint(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, IndexError):
        return ("a thread indexed outside an array: guard with `if i < n:` (the grid is rounded up to whole "
                "blocks, so the last block has threads past the end).")
    if "TypingError" in type(exc).__name__ or "Failed in cuda mode pipeline" in text:
        return "numba could not compile the kernel: read the first lines of the message for the failing line."
    if "CUDA_ERROR" in text or "CudaAPIError" in type(exc).__name__:
        return "a CUDA error leaves the GPU context unusable: restart the notebook's kernel after fixing it."
    return ""


def stub(*args, **kwargs):
    """What an exercise cell holds until the reader writes it."""
    raise NotImplementedError("exercise not attempted yet")
