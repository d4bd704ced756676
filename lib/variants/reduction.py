"""Known-wrong answers to the reduction chapter's exercises: reduce_sum, reduce_max and warp_reduce."""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from ._common import Variant, chunk, dims, f32, own_launches, threads_1d, unwritten

BLOCK = 128          # threads of a first-pass block
SMALL_BLOCK = 32     # first-pass blocks of the two-pass variants: many partials from few elements
SECOND_PASS = 256    # threads of the one-block second pass
FIXED_THREADS = 64
ATOMIC_BLOCKS = 4
WARP = 32


# --- helpers of the models ------------------------------------------------------------------------------------
def _partials(x, launches, op, first=False):
    """The per-block results op(chunk) of a first pass that gives each block a run of consecutive elements
    (see :func:`lib.variants._common.chunk`), from the widest own launch (or the first, when asked)."""
    x = np.asarray(x, np.float64)
    mine = own_launches(launches)
    if not mine:
        return None
    blocks, per_block = chunk(x.size, [mine[0]] if first else mine)
    return [op(x[b * per_block:(b + 1) * per_block]) for b in range(blocks) if b * per_block < x.size]


def _one_block_threads(launches) -> int | None:
    """Threads of the student's one-block launch (a second pass), or None when there is none."""
    ones = [math.prod(dims(r)[1]) for r in own_launches(launches) if math.prod(dims(r)[0]) == 1]
    return max(ones) if ones else None


def _last_block(x, launches, op):
    parts = _partials(x, launches, op)
    return None if not parts else np.array([parts[-1]])


def _first_partials(x, launches, op):
    parts = _partials(x, launches, op, first=True)
    second = _one_block_threads(launches)
    if not parts or second is None:
        return None
    return np.array([op(np.array(parts[:second]))])


# --- kernels shared by the sum and max variants ---------------------------------------------------------------
@cuda.jit
def block_sums_store_out0(x, out):
    """Each block adds its run of consecutive elements (ceil(n / threads) per thread) as a tree, then thread 0
    *stores* the block's sum into out[0]: every block overwrites the others.

    Memory: each element read once, coalesced within a block's run.
    Launch: 1-D, BLOCK threads (a power of two), any grid.
    """
    buf = cuda.shared.array(BLOCK, float32)
    t = cuda.threadIdx.x
    per = (x.size + cuda.gridsize(1) - 1) // cuda.gridsize(1)
    start = cuda.blockIdx.x * BLOCK * per
    total = float32(0.0)
    for k in range(per):
        i = start + k * BLOCK + t
        if i < x.size:
            total += x[i]
    buf[t] = total
    half = BLOCK // 2
    while half > 0:
        cuda.syncthreads()
        if t < half:
            buf[t] += buf[t + half]
        half //= 2
    if t == 0:
        out[0] = buf[0]


@cuda.jit
def block_maxes_store_out0(x, out):
    """As block_sums_store_out0, with max: each block stores its maximum into out[0].

    Memory: each element read once.
    Launch: 1-D, BLOCK threads (a power of two), any grid.
    """
    buf = cuda.shared.array(BLOCK, float32)
    t = cuda.threadIdx.x
    per = (x.size + cuda.gridsize(1) - 1) // cuda.gridsize(1)
    start = cuda.blockIdx.x * BLOCK * per
    best = float32(-math.inf)
    for k in range(per):
        i = start + k * BLOCK + t
        if i < x.size:
            best = max(best, x[i])
    buf[t] = best
    half = BLOCK // 2
    while half > 0:
        cuda.syncthreads()
        if t < half:
            buf[t] = max(buf[t], buf[t + half])
        half //= 2
    if t == 0:
        out[0] = buf[0]


def _store_out0(kernel):
    def fn(x, out):
        kernel[(x.size + 4 * BLOCK - 1) // (4 * BLOCK), BLOCK](x, out)
    fn.__name__ = f"launch_{kernel.__name__}"
    return fn


@cuda.jit
def first_pass_sums(x, partials):
    """partials[b] = the sum of block b's run of consecutive elements (one element per thread here).

    Memory: each element read once, coalesced.
    Launch: 1-D, SMALL_BLOCK threads, ceil(n / SMALL_BLOCK) blocks.
    """
    buf = cuda.shared.array(SMALL_BLOCK, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[t] = x[i] if i < x.size else float32(0.0)
    half = SMALL_BLOCK // 2
    while half > 0:
        cuda.syncthreads()
        if t < half:
            buf[t] += buf[t + half]
        half //= 2
    if t == 0:
        partials[cuda.blockIdx.x] = buf[0]


@cuda.jit
def first_pass_maxes(x, partials):
    """partials[b] = the maximum of block b's elements (one per thread).

    Memory: each element read once, coalesced.
    Launch: 1-D, SMALL_BLOCK threads, ceil(n / SMALL_BLOCK) blocks.
    """
    buf = cuda.shared.array(SMALL_BLOCK, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[t] = x[i] if i < x.size else float32(-math.inf)
    half = SMALL_BLOCK // 2
    while half > 0:
        cuda.syncthreads()
        if t < half:
            buf[t] = max(buf[t], buf[t + half])
        half //= 2
    if t == 0:
        partials[cuda.blockIdx.x] = buf[0]


@cuda.jit
def second_pass_one_block_sum(partials, out):
    """out[0] = partials[0] + ... + partials[SECOND_PASS - 1]: one element per thread of one block, so the
    partials past SECOND_PASS are dropped.

    Memory: at most SECOND_PASS partials read.
    Launch: 1 block of SECOND_PASS threads.
    """
    buf = cuda.shared.array(SECOND_PASS, float32)
    t = cuda.threadIdx.x
    buf[t] = partials[t] if t < partials.size else float32(0.0)
    half = SECOND_PASS // 2
    while half > 0:
        cuda.syncthreads()
        if t < half:
            buf[t] += buf[t + half]
        half //= 2
    if t == 0:
        out[0] = buf[0]


@cuda.jit
def second_pass_one_block_max(partials, out):
    """out[0] = max(partials[0 .. SECOND_PASS - 1]): the partials past one block's threads are dropped.

    Memory: at most SECOND_PASS partials read.
    Launch: 1 block of SECOND_PASS threads.
    """
    buf = cuda.shared.array(SECOND_PASS, float32)
    t = cuda.threadIdx.x
    buf[t] = partials[t] if t < partials.size else float32(-math.inf)
    half = SECOND_PASS // 2
    while half > 0:
        cuda.syncthreads()
        if t < half:
            buf[t] = max(buf[t], buf[t + half])
        half //= 2
    if t == 0:
        out[0] = buf[0]


def _two_pass(first, second):
    def fn(x, out):
        blocks = (x.size + SMALL_BLOCK - 1) // SMALL_BLOCK
        partials = cuda.device_array(blocks, dtype=np.float32)
        first[blocks, SMALL_BLOCK](x, partials)
        second[1, SECOND_PASS](partials, out)
    fn.__name__ = f"two_pass_{second.__name__}"
    return fn


# --- reduce_sum only -----------------------------------------------------------------------------------------
@cuda.jit
def sum_one_element_per_thread(x, out):
    """atomic out[0] += x[i] for i = cuda.grid(1): no loop, so elements past the launch are never added.

    Memory: one read and one atomic per thread launched.
    Launch: 1-D, any; out must hold 0 first.
    """
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(out, 0, x[i])


def reduce_sum_fixed_launch(x, out):
    out.copy_to_device(np.zeros(1, np.float32))
    sum_one_element_per_thread[1, FIXED_THREADS](x, out)


@cuda.jit
def sum_last_dropped(x, out):
    """A grid-stride sum whose loop stops at n - 1, then one atomic add per thread.

    Memory: each element but the last read once (grid-stride, coalesced); one atomic per thread.
    Launch: 1-D, any; out must hold 0 first.
    """
    total = float32(0.0)
    for i in range(cuda.grid(1), x.size - 1, cuda.gridsize(1)):
        total += x[i]
    cuda.atomic.add(out, 0, total)


def reduce_sum_last_dropped(x, out):
    out.copy_to_device(np.zeros(1, np.float32))
    sum_last_dropped[ATOMIC_BLOCKS, BLOCK](x, out)


@cuda.jit
def sum_non_atomic(x, out):
    """out[0] += x[i] from every thread, without an atomic: a read-modify-write race.

    Memory: one read of x and a read-modify-write of out[0] per thread.
    Launch: 1-D, one thread per element; out must hold 0 first.
    """
    i = cuda.grid(1)
    if i < x.size:
        out[0] += x[i]


def reduce_sum_non_atomic(x, out):
    out.copy_to_device(np.zeros(1, np.float32))
    sum_non_atomic[(x.size + BLOCK - 1) // BLOCK, BLOCK](x, out)


@cuda.jit
def block_sums_atomic(x, out):
    """Each block adds its run of consecutive elements as a tree; thread 0 atomically adds it to out[0].

    Memory: each element read once.
    Launch: 1-D, BLOCK threads (a power of two), any grid; out must hold 0 first (the mistake: it does not).
    """
    buf = cuda.shared.array(BLOCK, float32)
    t = cuda.threadIdx.x
    per = (x.size + cuda.gridsize(1) - 1) // cuda.gridsize(1)
    start = cuda.blockIdx.x * BLOCK * per
    total = float32(0.0)
    for k in range(per):
        i = start + k * BLOCK + t
        if i < x.size:
            total += x[i]
    buf[t] = total
    half = BLOCK // 2
    while half > 0:
        cuda.syncthreads()
        if t < half:
            buf[t] += buf[t + half]
        half //= 2
    if t == 0:
        cuda.atomic.add(out, 0, buf[0])


def reduce_sum_not_zeroed(x, out):
    block_sums_atomic[ATOMIC_BLOCKS, BLOCK](x, out)


def _not_zeroed_model(x, launches, fill=np.nan):
    """fill + each block's sum, added in block order (the simulator's order; a GPU's may differ by the
    roundings of a few additions)."""
    if np.isnan(fill):
        return None
    parts = _partials(x, launches, np.sum)
    if parts is None:
        return None
    acc = np.float32(fill)
    for p in parts:
        acc = np.float32(acc + np.float32(p))
    return np.array([float(acc)])


# --- reduce_max only -----------------------------------------------------------------------------------------
@cuda.jit
def max_zero_identity(x, out):
    """A grid-stride max that starts from 0 instead of -inf, then one atomic max per thread.

    Memory: each element read once (grid-stride, coalesced); one atomic per thread.
    Launch: 1-D, any; out holds 0 first (the same wrong identity).
    """
    best = float32(0.0)
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        best = max(best, x[i])
    cuda.atomic.max(out, 0, best)


def reduce_max_zero_identity(x, out):
    out.copy_to_device(np.zeros(1, np.float32))
    max_zero_identity[ATOMIC_BLOCKS, BLOCK](x, out)


@cuda.jit
def max_one_element_per_thread(x, out):
    """atomic max of x[i] for i = cuda.grid(1): no loop, so elements past the launch are never seen.

    Memory: one read and one atomic per thread launched.
    Launch: 1-D, any; out must hold -inf first.
    """
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.max(out, 0, x[i])


def reduce_max_fixed_launch(x, out):
    out.copy_to_device(np.full(1, -np.inf, np.float32))
    max_one_element_per_thread[1, FIXED_THREADS](x, out)


@cuda.jit
def max_non_atomic(x, out):
    """if x[i] > out[0]: out[0] = x[i] from every thread, without an atomic: a race between the test and the
    store.

    Memory: one read of x and of out[0] per thread, a store where it is larger.
    Launch: 1-D, one thread per element; out must hold -inf first.
    """
    i = cuda.grid(1)
    if i < x.size and x[i] > out[0]:
        out[0] = x[i]


def reduce_max_non_atomic(x, out):
    out.copy_to_device(np.full(1, -np.inf, np.float32))
    max_non_atomic[(x.size + BLOCK - 1) // BLOCK, BLOCK](x, out)


# --- warp_reduce ----------------------------------------------------------------------------------------------
WARP_THREADS = 256


def _chunks(x):
    x = np.asarray(x, np.float64)
    return np.concatenate([x, np.zeros(-x.size % WARP)]).reshape(-1, WARP)


@cuda.jit
def warp_sums_exited_lanes(x, out):
    """Lanes past the end return before the shuffles, and lane 0 then reads their values: undefined on a
    GPU (the simulator gives NaN).

    Memory: one coalesced read per element; five shuffles per live lane.
    Launch: 1-D, WARP_THREADS threads, ceil(n / WARP_THREADS) blocks.
    """
    i = cuda.grid(1)
    if i >= x.size:
        return
    value = x[i]
    offset = 16
    while offset > 0:
        value += cuda.shfl_down_sync(0xFFFFFFFF, value, offset)
        offset //= 2
    if i % 32 == 0:
        out[i // 32] = value


def _exited_model(x, launches, fill=np.nan):
    sums = _chunks(x).sum(axis=1)
    if x.size % WARP:
        sums[-1] = np.nan
    return sums


@cuda.jit
def warp_sums_from_offset(x, out, first_offset):
    """The shuffle tree starting at `first_offset` instead of 16 (8: half the warp; the loop is otherwise
    right), then lane 0 stores.

    Memory: one coalesced read per element; a shuffle per step.
    Launch: 1-D, WARP_THREADS threads, ceil(n / WARP_THREADS) blocks.
    """
    i = cuda.grid(1)
    value = x[i] if i < x.size else float32(0)
    offset = first_offset
    while offset > 0:
        value += cuda.shfl_down_sync(0xFFFFFFFF, value, offset)
        offset //= 2
    if i % 32 == 0 and i < x.size:
        out[i // 32] = value


def warp_reduce_half_warp(x, out):
    warp_sums_from_offset[(x.size + WARP_THREADS - 1) // WARP_THREADS, WARP_THREADS](x, out, 8)


@cuda.jit
def warp_sums_stop_at_two(x, out):
    """The shuffle tree's loop stops before offset 1 (while offset > 1): lane 0 has only the even lanes.

    Memory: one coalesced read per element; four shuffles.
    Launch: 1-D, WARP_THREADS threads, ceil(n / WARP_THREADS) blocks.
    """
    i = cuda.grid(1)
    value = x[i] if i < x.size else float32(0)
    offset = 16
    while offset > 1:
        value += cuda.shfl_down_sync(0xFFFFFFFF, value, offset)
        offset //= 2
    if i % 32 == 0 and i < x.size:
        out[i // 32] = value


def warp_reduce_stop_at_two(x, out):
    warp_sums_stop_at_two[(x.size + WARP_THREADS - 1) // WARP_THREADS, WARP_THREADS](x, out)


@cuda.jit
def warp_sums_shfl_up(x, out):
    """The tree with shfl_up_sync where shfl_down_sync was meant: lane 0 gets its own value back every step
    (no lane below it), so it ends with 32 times x[32w].

    Memory: one coalesced read per element; five shuffles.
    Launch: 1-D, WARP_THREADS threads, ceil(n / WARP_THREADS) blocks.
    """
    i = cuda.grid(1)
    value = x[i] if i < x.size else float32(0)
    offset = 16
    while offset > 0:
        value += cuda.shfl_up_sync(0xFFFFFFFF, value, offset)
        offset //= 2
    if i % 32 == 0 and i < x.size:
        out[i // 32] = value


def warp_reduce_shfl_up(x, out):
    warp_sums_shfl_up[(x.size + WARP_THREADS - 1) // WARP_THREADS, WARP_THREADS](x, out)


@cuda.jit
def warp_sums_right(x, out):
    """The chapter's warp sum (shfl_down tree, lanes past the end add 0), one warp per chunk of 32.

    Memory: one coalesced read per element; five shuffles; one store per chunk.
    Launch: 1-D, any block size that is a multiple of 32; chunks past the launch are not reached.
    """
    i = cuda.grid(1)
    value = x[i] if i < x.size else float32(0)
    offset = 16
    while offset > 0:
        value += cuda.shfl_down_sync(0xFFFFFFFF, value, offset)
        offset //= 2
    if i % 32 == 0 and i < x.size:
        out[i // 32] = value


def warp_reduce_rounded_down(x, out):
    warp_sums_right[x.size // WARP_THREADS, WARP_THREADS](x, out)


def _warp_covered(x, launches, fill=np.nan):
    reach = threads_1d(launches)
    if reach is None:
        return None
    sums = _chunks(x).sum(axis=1)
    out = unwritten(sums.shape, fill)
    out[:reach // WARP] = sums[:reach // WARP]
    return out


VARIANTS = {
    "reduce_sum": [
        Variant("each block stores into out[0]",
                "every block stored its partial sum into out[0], so the last block to finish overwrote the "
                "others: add the partials with cuda.atomic.add(out, 0, partial) (out zeroed first), or in a "
                "second pass",
                lambda x, launches, fill=np.nan: _last_block(x, launches, np.sum),
                _store_out0(block_sums_store_out0)),
        Variant("second pass is one block",
                "the second pass ran one block with one partial per thread, so partials past its thread count "
                "were dropped: loop over the partials (for j in range(t, count, blockDim)) or reduce again",
                lambda x, launches, fill=np.nan: _first_partials(x, launches, np.sum),
                _two_pass(first_pass_sums, second_pass_one_block_sum)),
        Variant("launch ignores the size",
                "only the first elements were added (one per thread you launched, and the launch does not grow "
                "with n): loop for i in range(cuda.grid(1), n, cuda.gridsize(1)), or size the grid from n",
                lambda x, launches, fill=np.nan: (None if threads_1d(launches) is None else
                                                  np.array([np.sum(np.asarray(x, np.float64)[:threads_1d(launches)])])),
                reduce_sum_fixed_launch),
        Variant("last element dropped",
                "the sum misses exactly the last element: the loop bound is one short (range(..., n, ...))",
                lambda x, launches, fill=np.nan: np.array([np.sum(np.asarray(x, np.float64)[:-1])]),
                reduce_sum_last_dropped),
        Variant("non-atomic out[0] += x[i]",
                "threads added into out[0] without an atomic: on a GPU most updates are lost (each thread reads "
                "the old value, adds, and overwrites the others): use cuda.atomic.add(out, 0, value)",
                lambda x, launches, fill=np.nan: None, reduce_sum_non_atomic),
        Variant("out not zeroed before the atomics",
                "the partials were added atomically into out, but out was never set to 0 first (it starts as "
                "garbage): copy a zero into it before the kernel",
                _not_zeroed_model, reduce_sum_not_zeroed),
    ],
    "reduce_max": [
        Variant("0 as the identity of max",
                "the maximum starts from 0, so an array of negative numbers gives 0: start from -inf "
                "(float32(-math.inf)), the identity of max",
                lambda x, launches, fill=np.nan: np.array([max(0.0, float(np.max(x)))]),
                reduce_max_zero_identity),
        Variant("each block stores into out[0]",
                "every block stored its maximum into out[0], so the last block to finish overwrote the others: "
                "combine them with cuda.atomic.max(out, 0, best) (out set to -inf first)",
                lambda x, launches, fill=np.nan: _last_block(x, launches, np.max),
                _store_out0(block_maxes_store_out0)),
        Variant("second pass is one block",
                "the second pass ran one block with one partial per thread, so partials past its thread count "
                "were dropped: loop over the partials, or reduce again",
                lambda x, launches, fill=np.nan: _first_partials(x, launches, np.max),
                _two_pass(first_pass_maxes, second_pass_one_block_max)),
        Variant("launch ignores the size",
                "only the first elements were seen (one per thread you launched, and the launch does not grow "
                "with n): loop for i in range(cuda.grid(1), n, cuda.gridsize(1)), or size the grid from n",
                lambda x, launches, fill=np.nan: (None if threads_1d(launches) is None else
                                                  np.array([np.max(np.asarray(x)[:threads_1d(launches)])])),
                reduce_max_fixed_launch),
        Variant("non-atomic compare and store",
                "threads tested x > out[0] and stored without an atomic: another thread can store a smaller "
                "value after yours; use cuda.atomic.max(out, 0, value)",
                lambda x, launches, fill=np.nan: None, reduce_max_non_atomic),
    ],
    "warp_reduce": [
        Variant("shuffle from an exited lane",
                "only the last, partial chunk is wrong: lanes past the end returned before the shuffles, and "
                "reading a value from a lane that has exited is undefined. Keep every lane in the shuffles "
                "(value = x[i] if i < n else 0) and guard only the store",
                _exited_model, lambda x, out: warp_sums_exited_lanes[(x.size + WARP_THREADS - 1) // WARP_THREADS,
                                                                     WARP_THREADS](x, out)),
        Variant("tree starts at offset 8",
                "each sum holds only the first 16 elements of its chunk: the shuffle tree must start at offset "
                "16 (half of 32) to reach the upper half of the warp",
                lambda x, launches, fill=np.nan: _chunks(x)[:, :16].sum(axis=1), warp_reduce_half_warp),
        Variant("tree stops before offset 1",
                "each sum holds only the even-numbered elements of its chunk: the loop stopped before the last "
                "step (offset 1); run it while offset > 0",
                lambda x, launches, fill=np.nan: _chunks(x)[:, ::2].sum(axis=1), warp_reduce_stop_at_two),
        Variant("shfl_up instead of shfl_down",
                "each sum is 32 times the chunk's first element: with shfl_up_sync lane 0 has no lane below it "
                "and gets its own value back; use shfl_down_sync so lane 0 collects the lanes above it",
                lambda x, launches, fill=np.nan: 32.0 * _chunks(x)[:, 0], warp_reduce_shfl_up),
        Variant("launch does not cover the array",
                "chunks past the threads you launched were never summed: round the block count up, "
                "(n + threads - 1) // threads",
                _warp_covered, warp_reduce_rounded_down),
    ],
}

RACES = {("reduce_sum", "non-atomic out[0] += x[i]"), ("reduce_max", "non-atomic compare and store")}
# Undefined behaviour that a GPU may happen to run right: on the H200 (2026-11-30) the exited lanes' values
# read as the identity and every sum came out right at the GPU sizes; the simulator gives NaN there.
MAY_PASS_ON_A_GPU = {("warp_reduce", "shuffle from an exited lane")}
SIMULATOR_ONLY_MODELS = {("reduce_sum", "each block stores into out[0]"),
                         ("reduce_max", "each block stores into out[0]"),
                         ("warp_reduce", "shuffle from an exited lane"),
                         ("reduce_sum", "out not zeroed before the atomics")}
