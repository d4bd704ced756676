"""The performance properties of exercises (lib.grading.exercises.Perf, lib.grading.grader.perf), graded on the simulator with
lib.grading.tracer: the book's solutions pass them; a correct but uncoalesced, bank-conflicted or twice-reading answer
fails with the property named apart from correctness ("correct ✓", then the ✗ with its source line); the
property's verdict survives the trip between processes and is refused when malformed; on a GPU it is not
checked and says so. (Each exercise's known-wrong variants are tested in tests/test_variants.py.)"""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from numba import cuda, float32

import lib
from lib.grading.exercises import EXERCISES
from lib.grading.spec import Perf
from lib.grading.grader import FAILED, PASSED, check_perf, grade, verdict
from lib.grading.grader.cases import Execution
from lib.grading.grader.perf import PerfCheck, judge_perf
from test_variants import SOLUTIONS

pytestmark = pytest.mark.skipif(lib.ON_GPU, reason="the tracer runs on the simulator")

TILE, ROWS_PER_PASS = 32, 8


def _line_of(fn, text: str) -> int:
    """The file's line number of the first line of fn's source that contains `text`."""
    lines, start = inspect.getsourcelines(getattr(fn, "py_func", fn))
    return start + next(i for i, line in enumerate(lines) if text in line)


# --- correct answers with a slow access pattern ---------------------------------------------------------------
@cuda.jit
def _transpose_naive_kernel(a, out):
    c, r = cuda.grid(2)
    m = cuda.blockIdx.z
    if r < a.shape[1] and c < a.shape[2]:
        out[m, c, r] = a[m, r, c]  # a warp writes 32 floats a row of out apart


def transpose_naive(a, out):
    batch, rows, cols = a.shape
    _transpose_naive_kernel[((cols + 31) // 32, (rows + 7) // 8, batch), (32, 8)](a, out)


@cuda.jit
def _transpose_unpadded_kernel(a, out):
    tile = cuda.shared.array((TILE, TILE), float32)  # no padding: a column of the tile is one bank
    tx, ty, m = cuda.threadIdx.x, cuda.threadIdx.y, cuda.blockIdx.z
    rows, cols = a.shape[1], a.shape[2]
    c = cuda.blockIdx.x * TILE + tx
    for k in range(0, TILE, ROWS_PER_PASS):
        r = cuda.blockIdx.y * TILE + ty + k
        if r < rows and c < cols:
            tile[ty + k, tx] = a[m, r, c]
    cuda.syncthreads()
    out_c = cuda.blockIdx.y * TILE + tx
    for k in range(0, TILE, ROWS_PER_PASS):
        out_r = cuda.blockIdx.x * TILE + ty + k
        if out_r < cols and out_c < rows:
            out[m, out_r, out_c] = tile[tx, ty + k]  # 32 lanes, one bank


def transpose_unpadded(a, out):
    batch, rows, cols = a.shape
    grid = ((cols + TILE - 1) // TILE, (rows + TILE - 1) // TILE, batch)
    _transpose_unpadded_kernel[grid, (TILE, ROWS_PER_PASS)](a, out)


@cuda.jit
def _row_col_thread_each(x, out):
    t = cuda.grid(1)
    rows, cols = x.shape
    if t < rows:
        total = float32(0)
        for k in range(cols):
            total += x[t, k]  # a thread per row: a warp reads 32 floats a row apart
        out[t] = total
    if t < cols:
        total = float32(0)
        for k in range(rows):
            total += x[k, t]
        out[rows + t] = total


def row_col_thread_each(x, out):
    threads = max(x.shape)
    _row_col_thread_each[(threads + 127) // 128, 128](x, out)


@cuda.jit
def _sum_read_twice(x, out):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(out, 0, x[i])
        cuda.atomic.add(out, 0, float32(0.0) * x[i])  # the second read: the same value, loaded again


@cuda.jit
def _squares_read_twice(x, out):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(out, 0, x[i] * x[i])  # two loads of the same element


def _atomic_launch(kernel):
    def fn(x, out):
        out.copy_to_device(np.zeros(1, np.float32))
        kernel[(x.size + 255) // 256, 256](x, out)
    return fn


# the reduction chapter's exercise graded on its bytes read, whichever it is: an answer that reads x twice
READ_TWICE = {"reduce_sum": _atomic_launch(_sum_read_twice), "sum_of_squares": _atomic_launch(_squares_read_twice)}


# --- the solutions pass; each slow design fails on its property, with its line -----------------------------------
# (an exercise without a solution fails tests/test_variants.py::test_every_exercise_has_a_solution)
@pytest.mark.parametrize("ex_id", [e for e in sorted(EXERCISES) if EXERCISES[e].perf is not None and e in SOLUTIONS])
def test_the_books_solution_passes_its_performance_property(ex_id):
    report = grade(ex_id, SOLUTIONS[ex_id], seed=3)
    assert report.status == PASSED, str(report)
    assert report.perf and all(c.passed for c in report.perf), str(report)
    assert "correct ✓" in str(report) and "✓" in report._repr_html_()


def _fails_on(report, prop: str, *needles):
    text = str(report)
    assert report.status == FAILED and all(c.passed for c in report.cases), text  # correct at every size
    failed = [c for c in report.perf if not c.passed]
    assert [c.name for c in failed] == [prop], text
    assert "correct ✓" in text and f"{prop} ✗" in text and "correct ✓" in report.message, text
    for needle in needles:
        assert needle in failed[0].detail, failed[0].detail
    assert report.hint == EXERCISES[report.exercise].perf.note
    html = report._repr_html_()
    assert "✗" in html and prop in html
    assert report.to_dict()["perf"] and not report.to_dict()["passed"]


def test_an_uncoalesced_transpose_is_reported_with_its_line():
    line = _line_of(_transpose_naive_kernel, "out[m, c, r] = a[m, r, c]")
    report = grade("transpose_batched", transpose_naive, seed=4)
    _fails_on(report, "coalesced", f"line {line}, store to out", "32.0 sectors per request, ideal 4.0")
    assert next(c for c in report.perf if c.name == "bank conflicts").passed  # no shared memory: nothing to conflict


def test_a_transpose_through_an_unpadded_tile_is_reported_32_way():
    line = _line_of(_transpose_unpadded_kernel, "out[m, out_r, out_c] = tile[tx, ty + k]")
    report = grade("transpose_batched", transpose_unpadded, seed=5)
    _fails_on(report, "bank conflicts", f"32-way at line {line}, load from shared memory",
              "32.0 wavefronts per request, ideal 1.0")


def test_row_sums_with_a_thread_per_row_are_reported_uncoalesced():
    line = _line_of(_row_col_thread_each, "total += x[t, k]")
    report = grade("row_col_sums", row_col_thread_each, seed=6)
    _fails_on(report, "coalesced", f"line {line}, load from x", "32.0 sectors per request, ideal 4.0")


def test_a_sum_that_reads_x_twice_is_reported_against_the_ideal_bytes():
    graded = [e for e in EXERCISES if EXERCISES[e].perf is not None and EXERCISES[e].perf.read_ratio is not None]
    assert graded and set(graded) <= set(READ_TWICE), graded
    for ex_id in graded:
        report = grade(ex_id, READ_TWICE[ex_id], seed=7)
        n = EXERCISES[ex_id].perf.size[0]
        _fails_on(report, "bytes read", f"ideal {4 * n:,}", "(2.0")


# --- the machinery ---------------------------------------------------------------------------------------------
def test_on_a_gpu_the_property_is_not_checked_and_the_report_says_so():
    ex = EXERCISES["transpose_batched"]
    state = check_perf(ex, transpose_naive, np.random.default_rng(0), on_simulator=False)
    assert "checks" not in state and "not checked" in state["note"]
    report = verdict(ex.id, 0, [], 0, perf=state.get("checks"), perf_note=state["note"], perf_gates=True)
    assert "not checked" in str(report)


def test_a_property_that_does_not_gate_is_reported_but_passes():
    from lib.grading.grader.cases import CaseResult

    slow = [PerfCheck("coalesced", False, "line 3, store to out: 32.0 sectors per request, ideal 4.0")]
    ok = [CaseResult((5,), True, 0.1)]
    assert verdict("x", 0, ok, 1, perf=slow, perf_gates=False).status == PASSED
    gated = verdict("x", 0, ok, 1, perf=slow, perf_gates=True)
    assert gated.status == FAILED and gated.message.startswith("correct ✓, coalesced ✗")


def test_traced_rows_survive_the_trip_between_processes_and_malformed_ones_fail():
    import io

    ex = EXERCISES["transpose_batched"]
    execution = Execution("ran", sites=[{"line": 3, "source": "out[c, r] = a[r, c]", "array": "out",
                                         "space": "global", "op": "store", "requests": 2, "bytes": 256,
                                         "sectors": 64, "ideal_sectors": 8, "wavefronts": 0,
                                         "ideal_wavefronts": 0, "worst_way": 0}])
    buffer = io.BytesIO()
    np.savez(buffer, **execution.to_arrays())
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as arrays:
        back = Execution.from_arrays(arrays)
    assert back.sites == execution.sites
    checks = judge_perf(ex.perf, (), back.sites)
    assert [c.passed for c in checks] == [False, True] and "line 3, store to out" in checks[0].detail
    forged = [dict(execution.sites[0], sectors="few")]
    assert [(c.name, c.passed) for c in judge_perf(ex.perf, (), forged)] == [("performance", False)]


def test_no_global_access_traced_is_not_a_pass():
    checks = judge_perf(Perf((1,), coalesced=1.5), (), [])
    assert checks[0].name == "coalesced" and not checks[0].passed
