"""Hints that name the real bug (issue 27): wrong kernels a student wrote, whose old hints misled (a launch
blamed that was not the bug, a known mistake named that explains only some of the wrong elements, a
coverage hint for a grid that covers, "guard with if i < n" where the guard is there). Each case asserts
what the hint says now, and that the misleading words are gone."""
import math

import numpy as np
import pytest
from numba import cuda, float32

import lib
from lib import grade as _grade
from lib.grading.grader import ERROR, FAILED

pytestmark = pytest.mark.skipif(lib.ON_GPU, reason="simulator sizes and the simulator's IndexError")


def grade(exercise_id, fn, seed=11):
    return _grade(exercise_id, fn, seed=seed, time_limit_s=600)


def _failed(report):
    assert report.status in (FAILED, ERROR), str(report)
    return next(c for c in report.cases if not c.passed)


# --- a launch is blamed only when the wrong elements are exactly those it cannot reach -----------------------
@cuda.jit
def _zero(out):
    if cuda.grid(1) == 0:
        out[0] = 0


@cuda.jit
def _squares_stored(x, out):
    """A block tree of squares; the bug: each block *stores* its partial into out[0] (one block is right)."""
    buf = cuda.shared.array(256, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[t] = x[i] * x[i] if i < x.size else float32(0)
    half = 128
    while half > 0:
        cuda.syncthreads()
        if t < half:
            buf[t] += buf[t + half]
        half //= 2
    if t == 0:
        out[0] = buf[0]


def test_an_init_kernel_that_stays_the_same_is_not_blamed():
    """_zero[1, 32] writes the one-element output at every size: the same launch, but not the bug (the blocks
    store their partials instead of adding them, which shows from two blocks on)."""
    def sum_of_squares(x, out):
        _zero[1, 32](out)
        _squares_stored[(x.size + 255) // 256, 256](x, out)
    report = grade("sum_of_squares", sum_of_squares)
    case = _failed(report)
    assert case.size[0] > 256
    assert "_zero" not in report.hint and "same at every size" not in report.hint, report.hint


@cuda.jit
def _add_grid_stride_minus(a, b, out):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = a[i] - b[i]


def test_a_fixed_grid_stride_launch_with_wrong_arithmetic_is_told_about_the_arithmetic():
    report = grade("vector_add", lambda a, b, out: _add_grid_stride_minus[4, 128](a, b, out))
    _failed(report)
    assert "same at every size" not in report.hint and "arithmetic" in report.hint, report.hint


@cuda.jit
def _add_no_loop(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def test_a_fixed_launch_that_does_not_reach_the_end_is_told_so():
    report = grade("vector_add", lambda a, b, out: _add_no_loop[4, 256](a, b, out))
    case = _failed(report)
    assert case.size[0] > 1024
    assert "launch" in report.hint and ("past the threads you launched" in report.hint
                                        or "exactly the elements past that reach" in report.hint), report.hint


# the one-thread carry pass of a three-kernel scan: the same launch at every size, and right
SCAN_BLOCK = 128


@cuda.jit
def _block_scans(x, out, sums):
    buf = cuda.shared.array(SCAN_BLOCK, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * SCAN_BLOCK + t
    buf[t] = x[i] if i < x.size else float32(0)
    offset = 1
    while offset < SCAN_BLOCK:
        cuda.syncthreads()
        left = buf[t - offset] if t >= offset else float32(0)
        cuda.syncthreads()
        buf[t] += left
        offset *= 2
    if i < x.size:
        out[i] = buf[t]
    if t == SCAN_BLOCK - 1:
        sums[cuda.blockIdx.x] = buf[t]


@cuda.jit
def _running_totals(sums):
    """One thread: sums becomes the inclusive running total of the block totals (right)."""
    for b in range(1, sums.size):
        sums[b] += sums[b - 1]


@cuda.jit
def _add_own_total(out, sums):
    """The bug: block b adds the running total up to and including itself."""
    b = cuda.blockIdx.x
    i = b * SCAN_BLOCK + cuda.threadIdx.x
    if b > 0 and i < out.size:
        out[i] += sums[b]


def _three_kernel_scan(x, out):
    blocks = (x.size + SCAN_BLOCK - 1) // SCAN_BLOCK
    sums = cuda.device_array(blocks, dtype=np.float32)
    _block_scans[blocks, SCAN_BLOCK](x, out, sums)
    _running_totals[1, 1](sums)
    _add_own_total[blocks, SCAN_BLOCK](out, sums)


def test_a_one_thread_carry_pass_does_not_hide_the_named_mistake():
    report = grade("scan_inclusive", _three_kernel_scan)
    case = _failed(report)
    assert case.mistake == "carry includes the block's own total", (case.mistake, report.hint)
    assert "_running_totals" not in report.hint


@cuda.jit
def _softmax_not_divided(x, out):
    r = cuda.grid(1)
    if r < x.shape[0]:
        m = float32(-math.inf)
        for c in range(x.shape[1]):
            m = max(m, x[r, c])
        for c in range(x.shape[1]):
            out[r, c] = math.exp(x[r, c] - m)  # not divided by the row sum


def test_a_launch_from_the_size_that_only_looks_fixed_does_not_hide_the_named_mistake():
    """(rows + 1023) // 1024 blocks is one block at every simulator size: the same launch, but not the bug."""
    report = grade("softmax_rows", lambda x, out: _softmax_not_divided[(x.shape[0] + 1023) // 1024, 1024](x, out))
    case = _failed(report)
    assert case.mistake == "not divided by the row sum", (case.mistake, report.hint)
    assert "same at every size" not in report.hint, report.hint


# --- a known mistake is named only when its model reproduces every size checked ------------------------------
@cuda.jit
def _add_by_fours(a, b, out):
    """Four elements per thread; a group that runs past the end is skipped whole (the tail is lost)."""
    j = 4 * cuda.grid(1)
    if j + 3 < out.size:
        for k in range(4):
            out[j + k] = a[j + k] + b[j + k]


def test_a_vector_add_that_drops_its_tail_of_three_is_not_told_only_the_last_element_is_missing():
    report = grade("vector_add", lambda a, b, out: _add_by_fours[((a.size + 3) // 4 + 255) // 256, 256](a, b, out))
    case = _failed(report)
    assert "last element" not in report.hint and not case.mistake, (case.mistake, report.hint)
    assert "written" in report.hint and "stops short" in report.hint, report.hint


@cuda.jit
def _add_shifted(a, b, out):
    i = cuda.grid(1)
    if i < out.size - 1:
        out[i] = a[i + 1] + b[i + 1]


def test_a_shift_by_one_is_not_told_last_element_dropped():
    report = grade("vector_add", lambda a, b, out: _add_shifted[(a.size + 255) // 256, 256](a, b, out))
    _failed(report)
    assert "last element" not in report.hint and "bounds guard is one short" not in report.hint, report.hint


@cuda.jit
def _max_row_sum_zero_padding(a, out):
    """One row per thread, each row's sum started from 0 and the maximum from -inf, as it should; the bug:
    the block's tree of maxima pads the slots past the last row with 0 (every row sum is negative here)."""
    best = cuda.shared.array(256, float32)
    t = cuda.threadIdx.x
    r = cuda.grid(1)
    best[t] = float32(0)
    if r < a.shape[0]:
        s = float32(0)
        for c in range(a.shape[1]):
            s += a[r, c]
        best[t] = s
    half = 128
    while half > 0:
        cuda.syncthreads()
        if t < half:
            best[t] = max(best[t], best[t + half])
        half //= 2
    if t == 0:
        cuda.atomic.max(out, 0, best[0])


def _max_row_sum(a, out):
    out.copy_to_device(np.full(1, -np.inf, np.float32))
    _max_row_sum_zero_padding[(a.shape[0] + 255) // 256, 256](a, out)


def test_a_max_that_starts_from_minus_infinity_is_told_where_the_zero_came_in():
    """out and the maximum start from -inf: "start the maximum from -inf" alone misled; the sentence now
    names the padding slots too."""
    report = grade("max_row_sum", _max_row_sum)
    case = _failed(report)
    assert case.mistake == "0 as the identity of max" and "padding" in report.hint, (case.mistake, report.hint)


# --- a coverage hint only for a grid that does not cover ------------------------------------------------------
@cuda.jit
def _add_2d_wrong_flatten(a, b, out):
    x, y = cuda.grid(2)
    i = y * cuda.blockDim.x + x  # the row width should be the grid's: gridDim.x * blockDim.x
    if i < out.size:
        out[i] = a[i] + b[i]


def test_a_2d_grid_with_a_wrong_flatten_is_not_told_to_round_up():
    report = grade("vector_add",
                   lambda a, b, out: _add_2d_wrong_flatten[(2, (a.size + 511) // 512), (16, 16)](a, b, out))
    _failed(report)
    assert "round the block count up" not in report.hint, report.hint
    assert "gridDim.x * cuda.blockDim.x" in report.hint, report.hint


@cuda.jit
def _add_reversed_wrong_mirror(a, b, out):
    i = cuda.grid(1)
    n = out.size
    if i < n:
        out[i] = a[i] + b[n - i]


def test_a_guarded_kernel_with_a_wrong_index_is_told_what_the_index_was_computed_from():
    report = grade("add_reversed", lambda a, b, out: _add_reversed_wrong_mirror[(a.size + 255) // 256, 256](a, b, out))
    assert report.status == ERROR, str(report)
    assert "guard with `if i < n:`" not in report.hint, report.hint
    assert "the guard `if i < n` is there" in report.hint and "`b[n - i]`" in report.hint, report.hint
    assert "with i = 0, n = " in report.hint, report.hint


@cuda.jit
def _add_unguarded(a, b, out):
    i = cuda.grid(1)
    out[i] = a[i] + b[i]


def test_an_unguarded_kernel_is_still_told_to_guard():
    report = grade("vector_add", lambda a, b, out: _add_unguarded[(a.size + 255) // 256, 256](a, b, out))
    assert report.status == ERROR and "guard with `if i < n:`" in report.hint, report.hint
