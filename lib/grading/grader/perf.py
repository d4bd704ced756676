"""Performance properties graded without a GPU (:class:`lib.grading.exercises.Perf`).

After the correctness checks pass, an exercise with a ``perf`` property runs the student's function once
more, at the property's size, on the simulator under :func:`lib.grading.tracer.trace_call`
(:func:`execute_traced`, the student's process). What crosses to the judge is plain data: one row per
source line, array, memory space and operation (:func:`site_rows`). :func:`judge_perf` (the trusted process)
compares each row with the ideal, as a ratio with a stated tolerance, and returns one :class:`PerfCheck` per
property, shown in the report as e.g. ``coalesced ✗ (line 12: 32.0 sectors per request, ideal 4.0)``.

The ideal of a global request is the sectors its bytes need when contiguous and aligned; of a shared request,
the wavefronts its bytes need with no bank conflict (one per 128 bytes); of the bytes read, what the exercise
says (``Perf.read_bytes``, the least a correct answer reads: fewer bytes traced means work the trace did not
see, which fails). A property that fails is reported apart from correctness; it fails the grade when the
exercise's property ``gates``. Like launch records, the rows of an untrusted process are its own claims: in
instructor mode the trace runs in the submission's process, so a submission that rewrites its rows there can
pass the property (never the correctness checks, which the grader makes on outputs); tests/test_instructor_perf.py
pins what is and is not protected.
"""
from __future__ import annotations

import functools
import linecache
import os
import time
from dataclasses import asdict, dataclass

import numpy as np

WAVEFRONT_BYTES = 128   # 32 banks of 4 bytes: what one shared-memory wavefront serves
SECTOR_BYTES = 32
ROW_KEYS = ("line", "source", "array", "space", "op", "requests", "bytes", "sectors", "ideal_sectors",
            "wavefronts", "ideal_wavefronts", "worst_way")
MAX_ROWS = 1000


@dataclass
class PerfCheck:
    """One property's verdict: name ("coalesced", "bank conflicts", "bytes read"), passed, and the detail
    (the worst line with its cost and the ideal; the tolerance)."""
    name: str
    passed: bool
    detail: str

    def label(self) -> str:
        return f"{self.name} {'✓' if self.passed else '✗'} ({self.detail})"

    def to_dict(self) -> dict:
        return asdict(self)


@functools.lru_cache(maxsize=None)
def _library_files() -> tuple[tuple[str, ...], str]:
    """(folders of numba and numba-cuda, the tracer's own file): frames there are not the student's accesses."""
    import numba
    import numba.cuda

    from lib.grading import tracer

    folders = {os.path.dirname(os.path.realpath(m.__file__)) + os.sep for m in (numba, numba.cuda)}
    return tuple(sorted(folders)), os.path.realpath(tracer.__file__)


@functools.lru_cache(maxsize=4096)
def _student_file(filename: str) -> bool:
    """Whether a traced access's frame is code of the student's (or the book's), not numba's or the tracer's.
    Matched by the libraries' real folders, not by a word in the path: a course folder named numba-course/
    holds student code."""
    folders, tracer_file = _library_files()
    f = os.path.realpath(filename)
    return not f.startswith(folders) and f != tracer_file and "/site-packages/" not in f.replace("\\", "/")


def site_rows(trace) -> list[dict]:
    """The trace's requests summed per (source line, array, space, op), as plain data (ROW_KEYS)."""
    rows: dict[tuple, dict] = {}
    for r in trace.requests:
        filename, line, _ = r.site
        if not _student_file(filename):
            continue
        key = (filename, line, r.array, r.space, r.op)
        row = rows.setdefault(key, {"line": int(line), "source": linecache.getline(filename, line).strip()[:120],
                                    "array": str(r.array), "space": r.space, "op": r.op, "requests": 0,
                                    "bytes": 0, "sectors": 0, "ideal_sectors": 0, "wavefronts": 0,
                                    "ideal_wavefronts": 0, "worst_way": 0})
        row["requests"] += 1
        row["bytes"] += int(r.useful_bytes)
        if r.space == "global":
            row["sectors"] += int(r.sectors)
            row["ideal_sectors"] += int(r.ideal_sectors)
        else:
            row["wavefronts"] += int(r.wavefronts)
            row["ideal_wavefronts"] += max(1, -(-int(r.useful_bytes) // WAVEFRONT_BYTES))
            row["worst_way"] = max(row["worst_way"], int(r.degree))
    return sorted(rows.values(), key=lambda row: (row["line"], row["array"], row["op"]))[:MAX_ROWS]


def execute_traced(fn, case, names, *, stop=None):
    """Run ``fn(*inputs, out)`` once on the simulator with every access traced (the student's process): an
    :class:`lib.grading.grader.cases.Execution` whose ``sites`` holds :func:`site_rows`."""
    from numba import cuda

    from lib.runtime import launches as launch_hooks, quiet_launches
    from lib.grading import tracer
    from lib.grading.grader.cases import Execution, GradeTimeout, describe_exception, exception_hint, launch_record

    t0 = time.perf_counter()
    d_inputs = [cuda.to_device(x) for x in case.inputs]
    d_out = cuda.to_device(np.full(case.out_shape, np.nan, dtype=np.float32))
    try:
        with launch_hooks.record() as seen, quiet_launches.on_purpose():
            trace = tracer.trace_call(fn, *d_inputs, d_out, names=names)
            cuda.synchronize()
    except GradeTimeout:
        if stop is not None and stop.is_set():
            raise
        return Execution("raised", error="GradeTimeout is the grader's own signal, not an answer")
    except BaseException as exc:  # noqa: BLE001 - every failure of student code becomes a report
        if stop is not None and stop.is_set():
            raise GradeTimeout() from None
        return Execution("raised", error=describe_exception(exc), error_hint=exception_hint(exc),
                         seconds=time.perf_counter() - t0)
    execution = Execution("ran", outputs=[d_out.copy_to_host()], fills=[float("nan")],
                          inputs_after=[d.copy_to_host() for d in d_inputs],
                          launches=[launch_record(r) for r in seen[:100]], seconds=time.perf_counter() - t0)
    execution.sites = site_rows(trace)
    return execution


def _valid_rows(sites) -> bool:
    return isinstance(sites, list) and len(sites) <= MAX_ROWS and all(
        isinstance(r, dict) and set(r) == set(ROW_KEYS) and r["space"] in ("global", "shared")
        and all(isinstance(r[k], int) and not isinstance(r[k], bool) and r[k] >= 0
                for k in ROW_KEYS if k not in ("source", "array", "space", "op"))
        for r in sites)


def _where(row) -> str:
    """'line 41, store to out' / 'line 33, load from shared memory'."""
    array = "shared memory" if row["space"] == "shared" else row["array"]
    return f"line {row['line']}, {row['op']} {'to' if row['op'] == 'store' else 'from'} {array}"


def judge_perf(perf, inputs, sites) -> list[PerfCheck]:
    """The property's checks on the traced rows (the trusted process)."""
    if not _valid_rows(sites):
        return [PerfCheck("performance", False, "the traced run returned malformed rows")]
    checks = []
    if perf.coalesced is not None:
        rows = [r for r in sites if r["space"] == "global" and r["ideal_sectors"]]
        if not rows:
            checks.append(PerfCheck("coalesced", False, "no global access of a kernel of yours was traced"))
        else:
            worst = max(rows, key=lambda r: r["sectors"] / r["ideal_sectors"])
            ratio = worst["sectors"] / worst["ideal_sectors"]
            n = worst["requests"]
            detail = (f"{_where(worst)}: {worst['sectors'] / n:.1f} sectors per request, "
                      f"ideal {worst['ideal_sectors'] / n:.1f}")
            ok = ratio <= perf.coalesced
            checks.append(PerfCheck("coalesced", ok, ("worst " if ok else "") + detail
                                    + f"; ≤ {perf.coalesced:g}× passes"))
    if perf.conflicts is not None:
        rows = [r for r in sites if r["space"] == "shared" and r["ideal_wavefronts"]]
        if not rows:
            checks.append(PerfCheck("bank conflicts", True, "no shared memory used"))
        else:
            worst = max(rows, key=lambda r: (r["wavefronts"] / r["ideal_wavefronts"], r["worst_way"]))
            ratio = worst["wavefronts"] / worst["ideal_wavefronts"]
            n = worst["requests"]
            ok = ratio <= perf.conflicts
            detail = (f"{worst['worst_way']}-way at {_where(worst)}: "
                      f"{worst['wavefronts'] / n:.1f} wavefronts per request, ideal {worst['ideal_wavefronts'] / n:.1f}")
            checks.append(PerfCheck("bank conflicts", ok, ("worst " if ok else "") + detail
                                    + f"; ≤ {perf.conflicts:g}× passes"))
    if perf.read_ratio is not None:
        ideal = float(perf.read_bytes(*inputs))
        # the bytes the loads asked for (how they map to sectors is the coalescing property's business)
        read = sum(r["bytes"] for r in sites if r["space"] == "global" and r["op"] == "load")
        ratio = read / max(ideal, 1.0)
        if read < ideal:  # every correct answer reads the ideal bytes: the rest was not traced
            checks.append(PerfCheck("bytes read", False,
                                    f"your traced loads read {read:,} bytes, fewer than the {ideal:,.0f} every "
                                    "correct answer reads: the work must be done by loads of your kernels, "
                                    "traced (not on the host)"))
        else:
            checks.append(PerfCheck("bytes read", ratio <= perf.read_ratio,
                                    f"{read:,} bytes loaded from global memory by your loads, ideal {ideal:,.0f} "
                                    f"({ratio:.2f}×; ≤ {perf.read_ratio:g}× passes)"))
    return checks
