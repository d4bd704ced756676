"""``grade(exercise_id, fn)``: check a student's function on fresh random inputs and say what went wrong.

Every call draws a new seed (printed, so a failure can be replayed with ``grade(..., seed=...)``), plans the
sizes (a size of 1, ragged ones, then sizes grown from the student's own launches until they span several
blocks: :func:`plan`), and for each size prepares inputs and a float64 reference (:func:`prepare_case`),
runs the student's function with its launches recorded (:func:`execute_case`) and judges the outcome
(:func:`judge`): a kernel of the student's own must have run, the inputs must be untouched, and the output
must match within a tolerance from float32 error analysis; a wrong output is diagnosed (never written,
NaN computed, a launch that ignores the size, a known mistake). The four steps are separate so that
instructor mode can run the student's code in a sandboxed process and judge in its own (see
:mod:`lib.grading.grader.cases`). The report renders itself as text and HTML; ``report.passed`` is a bool.
"""
from __future__ import annotations

import ctypes
import inspect
import secrets
import threading
import time
import traceback

import numpy as np

from lib.grading.exercises import EXERCISES

from lib.grading.spec import Exercise
from lib.grading.grader.cases import (SENTINEL, Case, CaseResult, Execution, GradeTimeout, Planner, describe_exception,
                    execute_case, judge, launch_record, plan, prepare_case)
from lib.grading.grader.report import ERROR, FAILED, INCOMPLETE, NOT_ATTEMPTED, PASSED, TIMEOUT, GradeReport, verdict
from lib import mode

__all__ = ["grade", "stub", "plan", "prepare_case", "execute_case", "judge", "Planner", "Case", "Execution",
           "CaseResult", "GradeReport", "GradeTimeout", "SENTINEL", "PASSED", "FAILED", "NOT_ATTEMPTED",
           "TIMEOUT", "INCOMPLETE", "ERROR", "launch_record", "verdict", "check_perf"]


def _check_callable(fn, ex: Exercise) -> str | None:
    if not callable(fn):
        return f"grade expects a function {ex.signature}, got {type(fn).__name__}"
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind in (p.VAR_POSITIONAL,) for p in params):
        return None
    wanted = len(ex.names)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    if not len(required) <= wanted <= len(positional):
        names = ", ".join(p.name for p in positional)
        return f"{ex.signature} takes {wanted} arguments; your function takes ({names})"
    return None


def _kill_threads(threads, exc_type=GradeTimeout):
    for t in threads:
        if t.is_alive() and t.ident is not None:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(exc_type))


def grade(exercise_id: str, fn, seed: int | None = None, time_limit_s: float | None = None) -> GradeReport:
    """Check `fn` against exercise `exercise_id` and return a report (which displays itself). In instructor
    mode (lib.grading.grader.folder) this function is replaced inside the sandbox by lib.grading.grader.remote.grade, and the
    verdict is decided in the grader's own process."""
    return _grade(exercise_id, fn, seed, time_limit_s)


def _grade(exercise_id: str, fn, seed: int | None, time_limit_s: float | None) -> GradeReport:
    if exercise_id not in EXERCISES:
        raise KeyError(f"no exercise {exercise_id!r}; the exercises are: {', '.join(sorted(EXERCISES))}")
    ex = EXERCISES[exercise_id]
    seed = secrets.randbits(32) if seed is None else int(seed)
    problem = _check_callable(fn, ex)
    if problem:
        return GradeReport(exercise_id, ERROR, seed, message=problem)
    planner = plan(ex, seed, on_gpu=mode.ON_GPU)
    limit = time_limit_s if time_limit_s is not None else ex.time_limit_s
    rng = np.random.default_rng(seed)
    results: list[CaseResult] = []
    perf: dict = {}
    stop = threading.Event()
    crash: list[str] = []

    def work():
        try:
            for size in planner:
                case = prepare_case(ex, size, rng)
                execution = execute_case(fn, case.public(), stop=stop, schedule=[seed, len(results)])
                result = judge(case, execution, planner.history)
                results.append(result)
                planner.observe(size, execution.launches, execution.seconds)
                if result.not_attempted:
                    return
                if not result.passed:
                    planner.grow = False  # the report already has its failure: no need for larger sizes
            if ex.perf is not None and results and all(c.passed for c in results):
                perf.update(check_perf(ex, fn, rng, stop=stop, on_simulator=mode.SIMULATOR))
                if perf.get("failed_case") is not None:
                    results.append(perf.pop("failed_case"))
        except GradeTimeout:
            if not stop.is_set():
                crash.append("GradeTimeout was raised outside the time limit")
        except BaseException as exc:  # noqa: BLE001 - a failure of the grader itself is reported, never a pass
            crash.append(f"{type(exc).__name__}: {describe_exception(exc)}\n{traceback.format_exc(limit=-3)}")

    before = set(threading.enumerate())
    worker = threading.Thread(target=work, name=f"grade-{exercise_id}", daemon=True)
    t0 = time.perf_counter()
    worker.start()
    worker.join(limit)
    timed_out = worker.is_alive()
    if timed_out:
        stop.set()
        _kill_threads([t for t in threading.enumerate() if t not in before])
        worker.join(5.0)
    report = verdict(exercise_id, seed, list(results), len(planner.planned), timed_out=timed_out,
                     limit_s=limit, notes=planner.notes, seconds=time.perf_counter() - t0,
                     running=planner.planned[len(results)] if timed_out and len(planner.planned) > len(results)
                     else None,
                     perf=perf.get("checks"), perf_note=perf.get("note", ""),
                     perf_gates=bool(ex.perf and ex.perf.gates))
    if timed_out and report.status == TIMEOUT and mode.ON_GPU:
        report.hint += (" On a GPU the kernel may still be running: restart the notebook's kernel if later GPU "
                        "work hangs.")
    if crash and all(c.passed for c in results):
        report.status, report.message = ERROR, f"the check itself failed: {crash[0]}"
    return report


def check_perf(ex: Exercise, fn, rng, *, stop=None, on_simulator: bool, execute=None) -> dict:
    """The exercise's performance property (lib.grading.grader.perf): {"checks": [PerfCheck], "note": str} and,
    when the function's output is wrong at the traced size, "failed_case" (a CaseResult for the report).
    `execute(case)` runs the traced case (default: here, lib.grading.grader.perf.execute_traced)."""
    from lib.grading.grader.perf import execute_traced, judge_perf

    size = "×".join(map(str, ex.perf.size))
    if not on_simulator:
        return {"note": "the performance property was not checked: the tracer runs on numba's simulator "
                        "(run this notebook with NUMBA_ENABLE_CUDASIM=1 to grade it)"}
    case = prepare_case(ex, ex.perf.size, rng)
    if execute is None:
        execution = execute_traced(fn, case.public(), ex.names, stop=stop)
    else:
        execution = execute(case)
    result = judge(case, execution)
    if not result.passed:
        return {"failed_case": result}
    return {"checks": judge_perf(ex.perf, case.inputs, execution.sites),
            "note": f"traced on the simulator at size {size}"
                    + ("; a ✗ fails this exercise" if ex.perf.gates else "; reported only, not graded")}


def stub(*args, **kwargs):
    """What an exercise cell holds until the reader writes it."""
    raise NotImplementedError("exercise not attempted yet")
