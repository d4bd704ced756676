"""Known-wrong answers to the reduction chapter's exercises (warp_argmax, sum_of_squares, max_row_sum) and to
reduce_sum, which no page asks for any more but the grader still knows (lib.grading.exercises.RETIRED)."""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from lib.grading.variants._common import Variant, chunk, dims, f32, own_launches, threads_1d, unwritten

BLOCK = 128          # threads of a first-pass block
SMALL_BLOCK = 32     # first-pass blocks of the two-pass variants: many partials from few elements
SECOND_PASS = 256    # threads of the one-block second pass
FIXED_THREADS = 64
ATOMIC_BLOCKS = 4
WARP = 32


# --- helpers of the models ------------------------------------------------------------------------------------
def _partials(x, launches, op, first=False):
    """The per-block results op(chunk) of a first pass that gives each block a run of consecutive elements
    (see :func:`lib.grading.variants._common.chunk`), from the widest own launch (or the first, when asked)."""
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


# --- warp_argmax ----------------------------------------------------------------------------------------------
WARP_THREADS = 256


@cuda.jit
def warp_argmax_switches(x, out, by_lane, pad_zero, first_offset, chunk_index):
    """The shuffle tree over (value, index) pairs, one warp per chunk of 32, with the mistakes as switches: ties
    left to the lanes (the other lane's pair taken only when strictly larger, `by_lane`), lanes past the end padded with 0 instead of -inf, a tree that starts at
    `first_offset`, the lane's place in its chunk stored instead of the index in x.

    Memory: one coalesced read per element; two shuffles per step; one store per chunk.
    Launch: 1-D, WARP_THREADS threads, any grid (chunks past it are not reached).
    """
    i = cuda.grid(1)
    value = x[i] if i < x.size else (float32(0.0) if pad_zero else float32(-math.inf))
    index = i
    offset = first_offset
    while offset > 0:
        other = cuda.shfl_down_sync(0xFFFFFFFF, value, offset)
        other_index = cuda.shfl_down_sync(0xFFFFFFFF, index, offset)
        if other > value or (not by_lane and other == value and other_index < index):
            value = other
            index = other_index
        offset //= 2
    if i % WARP == 0 and i < x.size:
        out[i // WARP] = index - i if chunk_index else index


def _warp_argmax(by_lane=False, pad_zero=False, first_offset=16, chunk_index=False, rounded_down=False):
    def fn(x, out):
        blocks = x.size // WARP_THREADS if rounded_down else (x.size + WARP_THREADS - 1) // WARP_THREADS
        warp_argmax_switches[blocks, WARP_THREADS](x, out, by_lane, pad_zero, first_offset, chunk_index)
    return fn


def _tree_argmax(x, by_lane=False, pad_zero=False, first_offset=16):
    """What the shuffle tree of warp_argmax_switches leaves in lane 0 of each warp, emulated lane by lane: a lane
    whose partner is past lane 31 reads its own value back."""
    x = np.asarray(x, np.float64)
    pad = 0.0 if pad_zero else -np.inf
    values = np.concatenate([x, np.full(-x.size % WARP, pad)]).reshape(-1, WARP)
    index = np.arange(values.size, dtype=np.float64).reshape(values.shape)
    lanes = np.arange(WARP)
    offset = first_offset
    while offset > 0:
        partner = np.where(lanes + offset < WARP, lanes + offset, lanes)
        other, other_index = values[:, partner], index[:, partner]
        take = (other > values) | ((other == values) & (other_index < index) if not by_lane else False)
        values, index = np.where(take, other, values), np.where(take, other_index, index)
        offset //= 2
    return index[:, 0]


def _argmax_covered(x, launches, fill=np.nan):
    reach = threads_1d(launches)
    if reach is None:
        return None
    best = _tree_argmax(x)
    out = unwritten(best.shape, fill)
    out[:reach // WARP] = best[:reach // WARP]
    return out


# --- sum_of_squares -------------------------------------------------------------------------------------------
SQUARES, PARTIAL_SQUARED, PLAIN_SUM = 0, 1, 2  # what squares_grid_stride adds


@cuda.jit
def squares_grid_stride(x, out, stop, mode):
    """A grid-stride loop over x[:stop] and one atomic add per thread of: the squares (SQUARES), the thread's
    partial sum of the elements, squared (PARTIAL_SQUARED), or that partial sum as it is (PLAIN_SUM).

    Memory: each element read once (grid-stride, coalesced); one atomic per thread.
    Launch: 1-D, any; out must hold 0 first.
    """
    total = float32(0.0)
    for i in range(cuda.grid(1), stop, cuda.gridsize(1)):
        total += x[i] * x[i] if mode == SQUARES else x[i]
    cuda.atomic.add(out, 0, total * total if mode == PARTIAL_SQUARED else total)


@cuda.jit
def square_in_place(out):
    """out[0] = out[0]²: the finishing step of the square-of-the-sum mistake.

    Memory: one float. Launch: one thread.
    """
    out[0] = out[0] * out[0]


def _squares(blocks=ATOMIC_BLOCKS, threads=BLOCK, drop_last=False, mode=SQUARES, zeroed=True, one_each=False):
    """one_each: the loop stops at the launch's threads (one element each, however large n is)."""
    def fn(x, out):
        if zeroed:
            out.copy_to_device(np.zeros(1, np.float32))
        stop = x.size - 1 if drop_last else x.size
        squares_grid_stride[blocks, threads](x, out, min(stop, blocks * threads) if one_each else stop, mode)
        if mode == PLAIN_SUM:
            square_in_place[1, 1](out)
    return fn


def _square_sum(x, launches, fill=np.nan):
    return np.array([np.sum(np.asarray(x, np.float64)) ** 2])


def _squared_partials(x, launches, fill=np.nan):
    """Σ over threads t of (Σ of the elements t visits in a grid-stride loop)²."""
    threads = threads_1d(launches)
    if threads is None:
        return None
    x = np.asarray(x, np.float64)
    padded = np.concatenate([x, np.zeros(-x.size % threads)]).reshape(-1, threads)
    return np.array([np.sum(padded.sum(axis=0) ** 2)])


def _squares_not_zeroed(x, launches, fill=np.nan):
    if np.isnan(fill):
        return None
    return f32([float(fill) + np.sum(np.square(np.asarray(x, np.float64)))])


# --- max_row_sum ----------------------------------------------------------------------------------------------
@cuda.jit
def row_sums_switches(a, out, columns, row_maxima, cols):
    """One thread per row (or per column, with `columns`): its sum over the first `cols` columns (or its largest
    element, with `row_maxima`, then added into out instead of maxed).

    Memory: each thread walks its own row: a warp's loads are a row apart (uncoalesced; the chapter's simplest
    shape).
    Launch: 1-D, any; out must hold the identity first (-inf for max, 0 for the sum of maxima).
    """
    i = cuda.grid(1)
    lines = a.shape[1] if columns else a.shape[0]
    if i >= lines:
        return
    if row_maxima:
        best = float32(-math.inf)
        for j in range(cols):
            best = max(best, a[i, j])
        cuda.atomic.add(out, 0, best)
        return
    total = float32(0.0)
    for j in range(a.shape[0] if columns else cols):
        total += a[j, i] if columns else a[i, j]
    cuda.atomic.max(out, 0, total)


def _row_sums(start=-np.inf, columns=False, row_maxima=False, last_column=True, fixed=False):
    def fn(a, out):
        out.copy_to_device(np.full(1, start, np.float32))
        lines = a.shape[1] if columns else a.shape[0]
        grid, threads = (1, FIXED_THREADS) if fixed else ((lines + BLOCK - 1) // BLOCK, BLOCK)
        cols = a.shape[1] if last_column else a.shape[1] - 1
        row_sums_switches[grid, threads](a, out, columns, row_maxima, cols)
    return fn


def _rows64(a):
    return np.asarray(a, np.float64)


def _first_rows_max(a, launches, fill=np.nan):
    reach = threads_1d(launches)
    if reach is None:
        return None
    return np.array([_rows64(a)[:reach].sum(axis=1).max()])


VARIANTS = {
    "warp_argmax": [
        Variant("ties not broken by index",
                "where a chunk's maximum appears more than once you did not always keep the first: after the "
                "first step a lane holds elements from both halves of the warp (lane 0 has 0 and 16, lane 8 has "
                "8 and 24), so on equal values compare the indices and keep the smaller",
                lambda x, launches, fill=np.nan: _tree_argmax(x, by_lane=True), _warp_argmax(by_lane=True)),
        Variant("padding lanes hold 0",
                "in the short last chunk, whose elements are all negative, an index past the end of x won: "
                "lanes past the end must carry -inf (the identity of max), not 0",
                lambda x, launches, fill=np.nan: _tree_argmax(x, pad_zero=True), _warp_argmax(pad_zero=True)),
        Variant("tree starts at offset 8",
                "each answer only looks at the first 16 elements of its chunk: the shuffle tree must start at "
                "offset 16 (half of 32) to reach the upper half of the warp",
                lambda x, launches, fill=np.nan: _tree_argmax(x, first_offset=8), _warp_argmax(first_offset=8)),
        Variant("index within the chunk",
                "the answers are positions inside each chunk (0 to 31): carry the index in x, i = cuda.grid(1), "
                "through the shuffles, not the lane number",
                lambda x, launches, fill=np.nan: _tree_argmax(x) - WARP * np.arange(-(-np.asarray(x).size // WARP)),
                _warp_argmax(chunk_index=True)),
        Variant("launch does not cover the array",
                "chunks past the threads you launched were never written: round the block count up, "
                "(n + threads - 1) // threads",
                _argmax_covered, _warp_argmax(rounded_down=True)),
    ],
    "sum_of_squares": [
        Variant("square of the sum",
                "you computed (x[0] + x[1] + ...)², the square of the sum: square each element before adding",
                _square_sum, _squares(mode=PLAIN_SUM)),
        Variant("partial sums squared",
                "each thread added its elements and squared its partial sum: square every element as you load "
                "it (total += x[i] * x[i]), then add the partials as they are",
                _squared_partials, _squares(mode=PARTIAL_SQUARED)),
        Variant("launch ignores the size",
                "only the first elements were added (one per thread you launched, and the launch does not grow "
                "with n): loop for i in range(cuda.grid(1), n, cuda.gridsize(1)), or size the grid from n",
                lambda x, launches, fill=np.nan: (None if threads_1d(launches) is None else np.array(
                    [np.sum(np.square(np.asarray(x, np.float64)[:threads_1d(launches)]))])),
                _squares(blocks=1, threads=FIXED_THREADS, one_each=True)),
        Variant("last element dropped",
                "the sum misses exactly the last square: the loop bound is one short (range(..., n, ...))",
                lambda x, launches, fill=np.nan: np.array([np.sum(np.square(np.asarray(x, np.float64)[:-1]))]),
                _squares(drop_last=True)),
        Variant("out not zeroed before the atomics",
                "the partials were added atomically into out, but out was never set to 0 first (it starts as "
                "garbage): copy a zero into it before the kernel",
                _squares_not_zeroed, _squares(zeroed=False)),
    ],
    "max_row_sum": [
        Variant("0 as the identity of max",
                "every row sum is negative here and you answered 0: a 0 entered the maximum. Each value it "
                "starts from must be -inf, the identity of max: the maximum itself, out before the atomics, and "
                "every padding slot (a lane or a shared-memory slot past the last row)",
                lambda a, launches, fill=np.nan: np.array([max(0.0, _rows64(a).sum(axis=1).max())]),
                _row_sums(start=0.0)),
        Variant("largest column sum",
                "you took the largest column sum: a row of a row-major matrix is a[i, :], so row i's sum runs "
                "over the columns j of a[i, j]",
                lambda a, launches, fill=np.nan: np.array([_rows64(a).sum(axis=0).max()]), _row_sums(columns=True)),
        Variant("sum of the row maxima",
                "you added up each row's largest element: the order is the other way round, first the sum "
                "along each row, then the maximum over the rows",
                lambda a, launches, fill=np.nan: np.array([_rows64(a).max(axis=1).sum()]),
                _row_sums(start=0.0, row_maxima=True)),
        Variant("last column dropped",
                "every row sum misses its last element: the loop over the columns is one short",
                # one column: every row sums nothing, 0 (which 0 as the identity of max also gives)
                lambda a, launches, fill=np.nan: np.array([_rows64(a)[:, :-1].sum(axis=1).max()]),
                _row_sums(last_column=False)),
        Variant("launch ignores the size",
                "only the first rows were summed (one per thread you launched, and the launch does not grow with "
                "the rows): size the grid from the number of rows, or loop over the rows",
                _first_rows_max, _row_sums(fixed=True)),
    ],
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
}


# Blocks that each store into out[0] write different values to one element: the simulator's debugger reports
# it as a race between blocks of the launch (the survivor on a GPU is whichever block stores last).
RACES = {("reduce_sum", "non-atomic out[0] += x[i]"), ("reduce_sum", "each block stores into out[0]")}
# The order in which atomics add the partials into a non-zero start is the simulator's (block by block); a GPU's
# differs by the roundings of the additions next to the start value.
SIMULATOR_ONLY_MODELS = {("reduce_sum", "out not zeroed before the atomics"),
                         ("sum_of_squares", "out not zeroed before the atomics")}
