"""Wrong answers that used to pass the grader on the simulator, and odd-but-right ones that must still pass.

Each wrong kernel here is written the way a student would write it; its bug only shows past a few blocks, at
sizes the planner reaches by watching the student's own launches, or it is not the student's kernel at all.
"""
import importlib.util
import math

import numpy as np
import pytest
from numba import cuda, float32

import lib
import lib.grading.exercises
from lib import grade as _grade
from lib.grading.grader import ERROR, FAILED, PASSED


def grade(exercise_id, fn):
    """These tests are about which sizes get checked, not about the time limit: a loaded CI machine once
    turned a case into "did not return within 30 s"; the limit here is generous (the planner's budget is not
    changed by it)."""
    return _grade(exercise_id, fn, time_limit_s=600)

pytestmark = pytest.mark.skipif(lib.ON_GPU, reason="simulator sizes; the GPU sizes are checked in test_grader")


def _assert_fails(report, *phrases):
    assert report.status in (FAILED, ERROR), str(report)
    text = str(report)
    for phrase in phrases:
        assert phrase in text, f"{phrase!r} not in:\n{text}"


# --- scans and reductions that forget the other blocks -------------------------------------------------
@cuda.jit
def _scan_block_local(x, out):
    """Hillis-Steele over one block of 1024 threads, two elements per thread; no carry between blocks."""
    buf = cuda.shared.array(1024, float32)
    t = cuda.threadIdx.x
    base = cuda.blockIdx.x * 2048 + 2 * t
    a = x[base] if base < x.size else float32(0)
    b = x[base + 1] if base + 1 < x.size else float32(0)
    buf[t] = a + b
    offset = 1
    while offset < 1024:
        cuda.syncthreads()
        left = buf[t - offset] if t >= offset else float32(0)
        cuda.syncthreads()
        buf[t] += left
        offset *= 2
    before = buf[t] - a - b
    if base < x.size:
        out[base] = before + a
    if base + 1 < x.size:
        out[base + 1] = before + a + b


def test_scan_without_carry_between_blocks_fails_once_the_size_spans_blocks():
    report = grade("scan_inclusive", lambda x, out: _scan_block_local[(x.size + 2047) // 2048, 1024](x, out))
    _assert_fails(report, "_scan_block_local[")
    failed = next(c for c in report.cases if not c.passed)
    assert failed.size[0] > 2048  # only a size past one block of 2048 elements can show it


@cuda.jit
def _sum_blocks_store(x, out):
    """Block tree sum of 2 x 1024 elements; every block *stores* its partial into out[0]."""
    buf = cuda.shared.array(1024, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * 2048 + t
    buf[t] = (x[i] if i < x.size else float32(0)) + (x[i + 1024] if i + 1024 < x.size else float32(0))
    half = 512
    while half > 0:
        cuda.syncthreads()
        if t < half:
            buf[t] += buf[t + half]
        half //= 2
    if t == 0:
        out[0] = buf[0]


def test_reduction_whose_blocks_store_into_out0_fails():
    report = grade("reduce_sum", lambda x, out: _sum_blocks_store[(x.size + 2047) // 2048, 1024](x, out))
    _assert_fails(report, "_sum_blocks_store[")
    failed = next(c for c in report.cases if not c.passed)
    assert failed.size[0] > 2048  # only a size past one block of 2048 elements can show it


@cuda.jit
def _partials_of_32(x, partial):
    buf = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[t] = x[i] if i < x.size else float32(0)
    half = 16
    while half > 0:
        cuda.syncthreads()
        if t < half:
            buf[t] += buf[t + half]
        half //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = buf[0]


@cuda.jit
def _second_pass_one_block(partial, out):
    """One block of 256: partials past 256 are never read."""
    buf = cuda.shared.array(256, float32)
    t = cuda.threadIdx.x
    buf[t] = partial[t] if t < partial.size else float32(0)
    half = 128
    while half > 0:
        cuda.syncthreads()
        if t < half:
            buf[t] += buf[t + half]
        half //= 2
    if t == 0:
        out[0] = buf[0]


def _two_pass_sum(x, out):
    blocks = (x.size + 31) // 32
    partial = cuda.device_array(blocks, dtype=np.float32)
    _partials_of_32[blocks, 32](x, partial)
    _second_pass_one_block[1, 256](partial, out)


def test_two_pass_sum_whose_second_pass_is_one_block_of_256_fails():
    report = grade("reduce_sum", _two_pass_sum)
    _assert_fails(report, "_second_pass_one_block[1, 256]")
    assert max(c.size[0] for c in report.cases) > 256 * 32  # past the partials one block of 256 can read


@cuda.jit
def _softmax_thread_per_row(x, out):
    r = cuda.threadIdx.x  # one block: rows past blockDim are never computed
    if r < x.shape[0]:
        m = float32(-math.inf)
        for c in range(x.shape[1]):
            m = max(m, x[r, c])
        total = float32(0)
        for c in range(x.shape[1]):
            total += math.exp(x[r, c] - m)
        for c in range(x.shape[1]):
            out[r, c] = math.exp(x[r, c] - m) / total


def test_softmax_with_one_block_of_64_fails_and_names_the_mistake():
    report = grade("softmax_rows", lambda x, out: _softmax_thread_per_row[1, 64](x, out))
    _assert_fails(report, "_softmax_thread_per_row[1, 64]", "past the threads you launched")


@cuda.jit
def _attention_thread_per_row(q, k, v, out):
    i = cuda.threadIdx.x
    if i >= q.shape[0]:
        return
    d = q.shape[1]
    m, l = float32(-math.inf), float32(0)
    for j in range(k.shape[0]):
        s = float32(0)
        for c in range(d):
            s += q[i, c] * k[j, c]
        m = max(m, s / math.sqrt(float32(d)))
    for c in range(d):
        out[i, c] = 0
    for j in range(k.shape[0]):
        s = float32(0)
        for c in range(d):
            s += q[i, c] * k[j, c]
        p = math.exp(s / math.sqrt(float32(d)) - m)
        l += p
        for c in range(d):
            out[i, c] += p * v[j, c]
    for c in range(d):
        out[i, c] /= l


def test_attention_with_one_block_of_64_fails():
    report = grade("attention", lambda q, k, v, out: _attention_thread_per_row[1, 64](q, k, v, out))
    _assert_fails(report, "_attention_thread_per_row[1, 64]", "past the threads you launched")


@cuda.jit
def _causal_thread_per_query(q, k, v, out):
    i = cuda.threadIdx.x  # one block: queries past blockDim are never computed
    m, n, d = q.shape[0], k.shape[0], q.shape[1]
    if i >= m:
        return
    last = n - m + i
    best = float32(-math.inf)
    for j in range(last + 1):
        s = float32(0)
        for c in range(d):
            s += q[i, c] * k[j, c]
        best = max(best, s / math.sqrt(float32(d)))
    for c in range(d):
        out[i, c] = 0
    total = float32(0)
    for j in range(last + 1):
        s = float32(0)
        for c in range(d):
            s += q[i, c] * k[j, c]
        p = math.exp(s / math.sqrt(float32(d)) - best)
        total += p
        for c in range(d):
            out[i, c] += p * v[j, c]
    for c in range(d):
        out[i, c] /= total


def test_causal_attention_with_a_thread_per_query_in_one_block_fails():
    """Queries and keys grow together; a thread per query needs more queries than the launch has threads,
    which the planner once never reached within its cap (rows x keys counted as the launch's reach)."""
    report = grade("causal_attention", lambda q, k, v, out: _causal_thread_per_query[1, 64](q, k, v, out))
    _assert_fails(report, "_causal_thread_per_query[1, 64]")
    assert max(c.size[0] for c in report.cases) > 64


def test_a_small_work_cap_still_checks_past_a_fixed_launch(monkeypatch):
    """Where the size that reaches past a launch that stayed the same is past the largest grown size (here
    the cap is shrunk to 0.3 of attention's), that one size is still checked, and the report says so."""
    from lib.grading.grader import cases

    monkeypatch.setattr(cases, "SIM_WORK_SCALE", 0.3)
    report = grade("attention", lambda q, k, v, out: _attention_thread_per_row[1, 64](q, k, v, out))
    _assert_fails(report, "_attention_thread_per_row[1, 64]", "past the threads you launched",
                  "one size was checked past the largest the simulator checks")


def test_the_plan_is_sized_by_work_not_by_the_clock():
    """A loaded machine once turned a correct one-block vector_add into "timed out" (60.0 s in one run, 31 s
    in another): the sizes planned now depend on the seed and the launches only, never on how long a case
    took, and a one-block grid-stride launch does not make the planner grow the size in search of 3 blocks."""
    from lib.grading.grader import plan
    from lib.grading.grader.cases import work

    one_block = [{"name": "k", "module": "m", "qualname": "k", "grid": [1, 1, 1], "block": [32, 1, 1],
                  "shared_bytes": 0, "book": False}]

    def sizes(seconds):
        planner = plan("vector_add", seed=5, on_gpu=False)
        for size in planner:
            planner.observe(size, one_block, seconds)
        return planner.planned

    fast, slow = sizes(0.001), sizes(1000.0)
    assert fast == slow
    assert max(work(s) for s in fast) <= lib.grading.exercises.EXERCISES["vector_add"].sim_work
    assert len(fast) == len(lib.grading.exercises.EXERCISES["vector_add"].sim_cases) + 1  # + the schedule's own size


@cuda.jit
def _outer_fixed(x, y, out):
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = x[i] * y[j]


@cuda.jit
def _matmul_at_fixed(a, b, c):
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0)
        for p in range(a.shape[0]):
            acc += a[p, row] * b[p, col]
        c[row, col] = acc


def test_fixed_8x8_grid_of_16x16_blocks_fails_for_outer_product_and_matmul():
    report = grade("outer_product", lambda x, y, out: _outer_fixed[(8, 8), (16, 16)](x, y, out))
    _assert_fails(report, "_outer_fixed[8x8, 16x16]", "outside the grid you launched")
    report = grade("matmul_at", lambda a, b, c: _matmul_at_fixed[(8, 8), (16, 16)](a, b, c))
    _assert_fails(report, "_matmul_at_fixed[8x8, 16x16]", "outside the grid you launched")


# --- races, host answers, the book's kernels, code that would not compile for a GPU -------------------
@cuda.jit
def _sum_racy(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[0] += x[i]  # read-modify-write from every thread: a race on a GPU


def test_non_atomic_accumulation_into_out_fails():
    """Without zeroing, the NaN fill shows it (and says the output was added into); with zeroing, only the
    simulator's race detector can (lib.runtime.simdebug)."""
    report = grade("reduce_sum", lambda x, out: _sum_racy[(x.size + 255) // 256, 256](x, out))
    _assert_fails(report, "garbage")  # the grader's or the named variant's sentence: out was never set first


@pytest.mark.skipif(importlib.util.find_spec("lib.runtime.simdebug") is None,
                    reason="needs the simulator's race detector (lib.runtime.simdebug)")
def test_non_atomic_accumulation_after_zeroing_is_caught_as_a_race():
    def racy(x, out):
        out.copy_to_device(np.zeros(1, np.float32))
        _sum_racy[(x.size + 255) // 256, 256](x, out)
    report = grade("reduce_sum", racy)
    _assert_fails(report, "race")


def test_a_host_numpy_answer_fails():
    def on_host(x, out):
        out.copy_to_device(np.array([x.copy_to_host().sum()], dtype=np.float32))
    report = grade("reduce_sum", on_host)
    _assert_fails(report, "no kernel ran")


def test_the_books_kernels_are_not_an_answer():
    from kernels.reduction import grid_stride_atomic
    report = grade("reduce_sum", grid_stride_atomic)
    _assert_fails(report, "only the book's own kernels ran", "reduce_grid_stride_atomic")


@cuda.jit
def _add_with_a_list(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        values = [a[i], b[i]]  # a Python list: the simulator runs it, numba cannot compile it for a GPU
        out[i] = values[0] + values[1]


@pytest.mark.skipif(importlib.util.find_spec("lib.runtime.gpucompile") is None,
                    reason="needs the GPU compile check (lib.runtime.gpucompile)")
def test_a_kernel_that_would_not_compile_for_a_gpu_fails_with_numbas_message():
    report = grade("vector_add", lambda a, b, out: _add_with_a_list[(a.size + 255) // 256, 256](a, b, out))
    assert report.status == ERROR, str(report)
    assert "list" in report.message.lower() or "reflected" in report.message.lower(), str(report)


# --- odd but right ----------------------------------------------------------------------------------------
@cuda.jit
def _sum_one_thread(x, out):
    total = float32(0)
    for i in range(x.size):
        total += x[i]
    out[0] = total


@cuda.jit
def _add_grid_stride(a, b, out):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = a[i] + b[i]


@cuda.jit
def _add_2d_grid(a, b, out):
    x, y = cuda.grid(2)
    i = y * (cuda.gridDim.x * cuda.blockDim.x) + x
    if i < out.size:
        out[i] = a[i] + b[i]


@cuda.jit
def _sum_atomic_per_element(x, out):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(out, 0, x[i])


def _zeroed_then(kernel):
    def fn(x, out):
        out.copy_to_device(np.zeros(1, np.float32))
        kernel[(x.size + 255) // 256, 256](x, out)
    return fn


@pytest.mark.parametrize("name, exercise, fn", [
    ("one thread with a loop", "reduce_sum", lambda x, out: _sum_one_thread[1, 1](x, out)),
    ("grid-stride loop, fixed grid", "vector_add", lambda a, b, out: _add_grid_stride[4, 128](a, b, out)),
    ("1024-thread blocks", "vector_add", lambda a, b, out: _add_grid_stride[(a.size + 1023) // 1024, 1024](a, b, out)),
    ("2-D grid over 1-D data", "vector_add",
     lambda a, b, out: _add_2d_grid[(2, (a.size + 511) // 512), (16, 16)](a, b, out)),
    ("per-element atomics", "reduce_sum", _zeroed_then(_sum_atomic_per_element)),
])
def test_odd_but_right_kernels_pass(name, exercise, fn):
    """...and a one-thread or one-block launch does not make the planner grow the size in search of three
    blocks (it once grew a correct one-block vector_add to 1-2 M elements: 31-59 s against a 60 s limit)."""
    from lib.grading.grader.cases import DECISIVE_FACTOR, work

    report = grade(exercise, fn)
    assert report.status == PASSED, f"{name}:\n{report}"
    assert max(work(c.size) for c in report.cases) <= DECISIVE_FACTOR * lib.grading.exercises.EXERCISES[exercise].sim_work
