"""Kernels of the reduction chapter: the ladder from Harris's interleaved tree to a grid-stride loop that runs
at the bandwidth ceiling, for the sum (identity 0) and the max (identity -inf) of a float32 vector.

Every rung is a host launcher ``run(x, out)`` that leaves the whole reduction in ``out[0]`` (shape (1,)), so
every rung is timed end to end, all of its launches included:

* rungs 0-4 reduce each block's slice to one partial sum, then launch the same kernel on the partials, and
  again, until a single value is left (:func:`reduce_in_passes`);
* rung 5 loops over the input with one wave of blocks, so only ~a thousand partials remain, and finishes
  either with a second one-block launch or with one ``atomic.add`` per block into a zeroed ``out``;
* rung 6a keeps four independent 4-byte loads in flight per thread and finishes with atomics; rung 6b does
  the same with two 16-byte (float4) loads per pass, so each thread has 32 bytes in flight.

Where the rest lives: chapters/reduction.md (the page); lib/grading/variants/reduction.py (its exercises'
known-wrong variants); tests/test_reduction.py (tests); data/results/reduction.* (recorded on the H200).
Record it with ``python -m tools.record reduction`` on a GPU; on the simulator the same kernels run through
the page's checks and the tests.
"""
import math

import numpy as np
from numba import cuda, float32

from lib.runtime.vector import data_address, load_float4
from kernels.intro import blocks_for, resident_blocks
from lib.measure.bench import Baseline, Ladder, Rung, copy_ceiling
from lib.grading.exercises import EXERCISES
from lib.grading.spec import Tolerance
from lib.runtime.quiet_launches import quiet_kernels
from lib.runtime.validate import require

CHAPTER = "reduction"
BLOCK = 256             # threads per block: a power of two (the trees halve it) and a multiple of the warp
WARP = 32               # lanes per warp
FULL_MASK = 0xFFFFFFFF  # every lane of the warp takes part in the shuffle
assert BLOCK & (BLOCK - 1) == 0 and BLOCK >= 2 * WARP, "the trees need a power-of-two block of >= 64 threads"


# --- helpers of the host side ------------------------------------------------------------------------
@cuda.jit
def store_identity(out, identity):
    """out[0] = identity (0 for a sum, -inf for a max): the start value that atomics accumulate into, and
    the whole answer for an empty input.

    Memory: one 4-byte store.
    Launch: one block of one thread.
    """
    out[0] = identity


_partials = {}  # length -> device array, reused across calls: a cudaMalloc per call would be timed too


def partials_buffer(length: int):
    """A device array of `length` float32 for partial results, allocated once per length."""
    if length not in _partials:
        _partials[length] = cuda.device_array(length, dtype=np.float32)
    return _partials[length]


def pass_grids(n: int, elements_per_block: int) -> list[int]:
    """Blocks of each launch of reduce_in_passes over n > 0 elements: ceil(n / e), then ceil(that / e), ...
    down to 1. For 2^28 elements and e = 256: [1048576, 4096, 16, 1]."""
    grids = [blocks_for(n, elements_per_block)]
    while grids[-1] > 1:
        grids.append(blocks_for(grids[-1], elements_per_block))
    return grids


def reduce_in_passes(kernel, elements_per_block: int, x, out):
    """Launch `kernel` (one partial per block) on x, then on its partials, and so on (pass_grids); the
    last launch, of one block, writes out[0]."""
    source = x
    for blocks in pass_grids(x.size, elements_per_block):
        target = out if blocks == 1 else partials_buffer(blocks)
        kernel[blocks, BLOCK](source, target)
        source = target


def _checked(x, out, where):
    require(x, "x", ndim=1, where=where)
    require(out, "out", shape=(1,), where=where)
    return x.size


# --- rung 0: interleaved addressing, divergent branch ------------------------------------------------
@cuda.jit
def reduce_interleaved_divergent(x, partial):
    """partial[b] = sum of block b's BLOCK elements of x, by a tree in shared memory where, in the round of
    stride s, the threads whose id is a multiple of 2s add the value s places to their right.

    Memory: each thread reads one coalesced float (bytes = 4·n over all blocks); the tree works in shared
    memory. The `%` is an integer division per thread per round, and the active threads are scattered over
    every warp, so all 8 warps stay busy in every round while fewer and fewer of their lanes work.
    Launch: 1-D, BLOCK threads, ceil(n / BLOCK) blocks; threads past the end contribute 0 (the identity).
    """
    cache = cuda.shared.array(BLOCK, float32)
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK + tid
    cache[tid] = x[i] if i < x.size else float32(0)
    cuda.syncthreads()
    s = 1
    while s < BLOCK:
        if tid % (2 * s) == 0:
            cache[tid] += cache[tid + s]
        cuda.syncthreads()
        s *= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = cache[0]


def interleaved_divergent(x, out):
    """Rung 0: reduce_interleaved_divergent on x, then on the partials, until one value is left."""
    if _checked(x, out, "interleaved_divergent") == 0:
        store_identity[1, 1](out, float32(0))
        return
    reduce_in_passes(reduce_interleaved_divergent, BLOCK, x, out)


# --- rung 1: interleaved addressing, contiguous threads ------------------------------------------
@cuda.jit
def reduce_interleaved_strided(x, partial):
    """partial[b] = sum of block b's BLOCK elements, by the same tree as rung 0, but thread t of the round
    of stride s works on element 2·s·t: the working threads are the first BLOCK / 2s, so whole warps fall
    idle instead of every warp diverging.

    Memory: as rung 0 in global memory. In shared memory thread t reads words 2·s·t and 2·s·t + s: lanes of
    a warp are 2s words apart, so with 32 banks of 4 bytes a warp's access is a 2-way bank conflict at
    s = 1, 4-way at s = 2 and 8-way from s = 4 on, until too few threads work to collide.
    Launch: 1-D, BLOCK threads, ceil(n / BLOCK) blocks; threads past the end contribute 0.
    """
    cache = cuda.shared.array(BLOCK, float32)
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK + tid
    cache[tid] = x[i] if i < x.size else float32(0)
    cuda.syncthreads()
    s = 1
    while s < BLOCK:
        index = 2 * s * tid
        if index < BLOCK:
            cache[index] += cache[index + s]
        cuda.syncthreads()
        s *= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = cache[0]


def interleaved_strided(x, out):
    """Rung 1: reduce_interleaved_strided in passes until one value is left."""
    if _checked(x, out, "interleaved_strided") == 0:
        store_identity[1, 1](out, float32(0))
        return
    reduce_in_passes(reduce_interleaved_strided, BLOCK, x, out)


# --- rung 2: sequential addressing ----------------------------------------------------------------
@cuda.jit
def reduce_sequential(x, partial):
    """partial[b] = sum of block b's BLOCK elements, by a tree that folds the upper half of the live values
    onto the lower half: in the round of stride s, thread t < s adds cache[t + s] to cache[t].

    Memory: as rung 0 in global memory. A warp reads 32 consecutive shared words (and 32 more, s away):
    one word per bank, no conflicts. Working threads are contiguous, so only the last warp diverges.
    Launch: 1-D, BLOCK threads, ceil(n / BLOCK) blocks; threads past the end contribute 0.
    """
    cache = cuda.shared.array(BLOCK, float32)
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK + tid
    cache[tid] = x[i] if i < x.size else float32(0)
    cuda.syncthreads()
    s = BLOCK // 2
    while s > 0:
        if tid < s:
            cache[tid] += cache[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = cache[0]


def sequential(x, out):
    """Rung 2: reduce_sequential in passes until one value is left."""
    if _checked(x, out, "sequential") == 0:
        store_identity[1, 1](out, float32(0))
        return
    reduce_in_passes(reduce_sequential, BLOCK, x, out)


# --- rung 3: first add during the load --------------------------------------------------------------
@cuda.jit
def reduce_first_add(x, partial):
    """partial[b] = sum of block b's 2·BLOCK elements: each thread adds two elements, BLOCK apart, while
    loading, then the block folds as in rung 2.

    Memory: each thread reads two coalesced floats (x[i], x[i + BLOCK]); every element is read once, so
    bytes = 4·n as before, but half as many blocks do it and no thread is idle in the first round. Shared
    reads are sequential (no bank conflicts).
    Launch: 1-D, BLOCK threads, ceil(n / (2·BLOCK)) blocks; missing elements contribute 0.
    """
    cache = cuda.shared.array(BLOCK, float32)
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * (2 * BLOCK) + tid
    value = float32(0)
    if i < x.size:
        value = x[i]
    if i + BLOCK < x.size:
        value += x[i + BLOCK]
    cache[tid] = value
    cuda.syncthreads()
    s = BLOCK // 2
    while s > 0:
        if tid < s:
            cache[tid] += cache[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = cache[0]


def first_add(x, out):
    """Rung 3: reduce_first_add in passes (2·BLOCK elements per block) until one value is left."""
    if _checked(x, out, "first_add") == 0:
        store_identity[1, 1](out, float32(0))
        return
    reduce_in_passes(reduce_first_add, 2 * BLOCK, x, out)


# --- rung 4: the last warp reduces with shuffles ---------------------------------------------------
@cuda.jit(device=True)
def warp_sum(value):
    """Sum of `value` over the 32 lanes of the calling warp, complete in lane 0 (lane k ends with the sum
    of lanes k.. in a tree pattern; only lane 0's is the whole).

    Memory: none: shfl_down_sync moves registers between lanes; five rounds, no barrier, no shared memory.
    Launch: all 32 lanes of the warp must call it (full mask).
    """
    offset = WARP // 2
    while offset > 0:
        value += cuda.shfl_down_sync(FULL_MASK, value, offset)
        offset //= 2
    return value


@cuda.jit(device=True)
def block_sum(value):
    """Sum of `value` over the BLOCK threads of the block, complete in thread 0: the sequential tree of
    rung 2 in shared memory while more than 64 values are live, then warp 0 adds the last 64 in registers
    with warp_sum.

    Memory: BLOCK floats of shared memory, conflict-free; log2(BLOCK) - 6 barriers instead of log2(BLOCK).
    Launch: every thread of the block must call it (it has barriers); BLOCK >= 64.
    """
    cache = cuda.shared.array(BLOCK, float32)
    tid = cuda.threadIdx.x
    cache[tid] = value
    cuda.syncthreads()
    s = BLOCK // 2
    while s > WARP:
        if tid < s:
            cache[tid] += cache[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid < WARP:
        value = warp_sum(cache[tid] + cache[tid + WARP])
    return value


@cuda.jit
def reduce_warp_shuffle(x, partial):
    """partial[b] = sum of block b's 2·BLOCK elements: the first add of rung 3, then block_sum, whose last
    warp reduces with shfl_down_sync instead of five more barriered rounds in shared memory.

    Memory: as rung 3 (two coalesced floats per thread, bytes = 4·n); shared memory only for the first
    rounds of the tree.
    Launch: 1-D, BLOCK threads, ceil(n / (2·BLOCK)) blocks; missing elements contribute 0.
    """
    i = cuda.blockIdx.x * (2 * BLOCK) + cuda.threadIdx.x
    value = float32(0)
    if i < x.size:
        value = x[i]
    if i + BLOCK < x.size:
        value += x[i + BLOCK]
    value = block_sum(value)
    if cuda.threadIdx.x == 0:
        partial[cuda.blockIdx.x] = value


def warp_shuffle(x, out):
    """Rung 4: reduce_warp_shuffle in passes (2·BLOCK elements per block) until one value is left."""
    if _checked(x, out, "warp_shuffle") == 0:
        store_identity[1, 1](out, float32(0))
        return
    reduce_in_passes(reduce_warp_shuffle, 2 * BLOCK, x, out)


# --- rung 5: one wave of blocks, finished by a second pass or by atomics -------------------------------
@cuda.jit
def reduce_grid_stride(x, partial):
    """partial[b] = sum of the elements of x that block b's threads visit in a grid-stride loop (one
    accumulator per thread), reduced over the block by block_sum.

    Memory: in each pass of the loop a warp reads 32 consecutive floats; bytes = 4·n. Only gridDim.x
    partials are written, so a grid of one wave leaves about a thousand of them, and one block can add
    them in a second launch.
    Launch: 1-D, BLOCK threads, any number of blocks (one wave: resident_blocks()); one block finishes.
    """
    total = float32(0)
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        total += x[i]
    total = block_sum(total)
    if cuda.threadIdx.x == 0:
        partial[cuda.blockIdx.x] = total


def grid_stride_two_pass(x, out):
    """Rung 5a: reduce_grid_stride with one wave of blocks, then the same kernel in one block over the
    partials: two launches, and the same bits on every run."""
    n = _checked(x, out, "grid_stride_two_pass")
    if n == 0:
        store_identity[1, 1](out, float32(0))
        return
    blocks = min(resident_blocks(BLOCK), blocks_for(n, BLOCK))
    if blocks == 1:
        reduce_grid_stride[1, BLOCK](x, out)
        return
    partial = partials_buffer(blocks)
    reduce_grid_stride[blocks, BLOCK](x, partial)
    reduce_grid_stride[1, BLOCK](partial, out)


@cuda.jit
def reduce_grid_stride_atomic(x, out):
    """out[0] += the sum of what block b's threads visit in a grid-stride loop: the same loop and block_sum
    as reduce_grid_stride, finished by one atomic add per block instead of a partial.

    Memory: bytes = 4·n coalesced reads; one 4-byte atomic per block, done in L2 (the blocks' atomics on
    out[0] serialise there, in whatever order the blocks finish).
    Launch: 1-D, BLOCK threads, any number of blocks (one wave: resident_blocks()); out[0] must hold 0.
    """
    total = float32(0)
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        total += x[i]
    total = block_sum(total)
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(out, 0, total)


def grid_stride_atomic(x, out):
    """Rung 5b: zero out[0], then reduce_grid_stride_atomic with one wave of blocks: two launches, the
    second one doing all the work; the last bits of the sum depend on the order the blocks finish in."""
    n = _checked(x, out, "grid_stride_atomic")
    store_identity[1, 1](out, float32(0))
    if n:
        reduce_grid_stride_atomic[min(resident_blocks(BLOCK), blocks_for(n, BLOCK)), BLOCK](x, out)


# --- rung 6: several loads in flight per thread --------------------------------------------------------
@cuda.jit
def reduce_grid_stride_ilp(x, out):
    """out[0] += the sum of what block b's threads visit in a grid-stride loop that reads four elements,
    one grid apart, into four independent accumulators per pass, so four loads per thread are in flight
    at once; then block_sum and one atomic add per block.

    Memory: bytes = 4·n, every load coalesced (each of the four covers 32 consecutive floats per warp).
    With a wave of 2048 threads on each of 132 SMs, four 4-byte loads per thread put about 4 MB in flight
    — what Little's law asks of ~4.8 TB/s at a memory latency of several hundred ns.
    Launch: 1-D, BLOCK threads, any number of blocks (one wave: resident_blocks()); out[0] must hold 0.
    """
    n = x.size
    stride = cuda.gridsize(1)
    i = cuda.grid(1)
    acc0 = float32(0)
    acc1 = float32(0)
    acc2 = float32(0)
    acc3 = float32(0)
    while i + 3 * stride < n:
        acc0 += x[i]
        acc1 += x[i + stride]
        acc2 += x[i + 2 * stride]
        acc3 += x[i + 3 * stride]
        i += 4 * stride
    while i < n:  # the last, partial pass
        acc0 += x[i]
        i += stride
    total = block_sum((acc0 + acc1) + (acc2 + acc3))
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(out, 0, total)


def grid_stride_ilp(x, out):
    """Rung 6a: zero out[0], then reduce_grid_stride_ilp with one wave of blocks."""
    n = _checked(x, out, "grid_stride_ilp")
    store_identity[1, 1](out, float32(0))
    if n:
        reduce_grid_stride_ilp[min(resident_blocks(BLOCK), blocks_for(n, BLOCK)), BLOCK](x, out)


@cuda.jit
def reduce_grid_stride_float4(x, out):
    """out[0] += the sum of what block b's threads visit, reading x as float4s: each pass of the
    grid-stride loop loads two 16-byte vectors one grid apart (eight floats, two loads in flight) into
    four accumulators; the last n % 4 floats are added one by one by the first threads of the grid.

    Memory: bytes = 4·n; each warp load instruction moves 512 contiguous bytes (LDG.E.128), so a quarter
    as many load instructions as rung 6a for the same bytes.
    Launch: 1-D, BLOCK threads, any number of blocks (one wave: resident_blocks()); x 16-byte aligned;
    out[0] must hold 0.
    """
    vectors = x.size // 4
    stride = cuda.gridsize(1)
    i = cuda.grid(1)
    acc0 = float32(0)
    acc1 = float32(0)
    acc2 = float32(0)
    acc3 = float32(0)
    while i + stride < vectors:
        a0, a1, a2, a3 = load_float4(x, i)
        b0, b1, b2, b3 = load_float4(x, i + stride)
        acc0 += a0 + b0
        acc1 += a1 + b1
        acc2 += a2 + b2
        acc3 += a3 + b3
        i += 2 * stride
    if i < vectors:  # the last, partial pass
        a0, a1, a2, a3 = load_float4(x, i)
        acc0 += a0
        acc1 += a1
        acc2 += a2
        acc3 += a3
    tail = 4 * vectors + cuda.grid(1)
    if tail < x.size:
        acc0 += x[tail]
    total = block_sum((acc0 + acc1) + (acc2 + acc3))
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(out, 0, total)


def grid_stride_float4(x, out):
    """Rung 6b: zero out[0], then reduce_grid_stride_float4 with one wave of blocks. A view that does not
    start on a 16-byte boundary cannot be read as float4: it goes to rung 6a instead."""
    n = _checked(x, out, "grid_stride_float4")
    if n and data_address(x) % 16:
        grid_stride_ilp(x, out)
        return
    store_identity[1, 1](out, float32(0))
    if n:
        blocks = min(resident_blocks(BLOCK), blocks_for(max(n // 4, 1), BLOCK))
        reduce_grid_stride_float4[blocks, BLOCK](x, out)


# --- the max: the same shape with the other identity -----------------------------------------------
@cuda.jit(device=True)
def warp_max(value):
    """Max of `value` over the 32 lanes of the warp, complete in lane 0 (as warp_sum, with max).

    Memory: none (five shuffles). Launch: all 32 lanes must call it.
    """
    offset = WARP // 2
    while offset > 0:
        value = max(value, cuda.shfl_down_sync(FULL_MASK, value, offset))
        offset //= 2
    return value


@cuda.jit(device=True)
def block_max(value):
    """Max of `value` over the block, complete in thread 0 (block_sum with max).

    Memory: BLOCK floats of shared memory, conflict-free. Launch: every thread of the block must call it.
    """
    cache = cuda.shared.array(BLOCK, float32)
    tid = cuda.threadIdx.x
    cache[tid] = value
    cuda.syncthreads()
    s = BLOCK // 2
    while s > WARP:
        if tid < s:
            cache[tid] = max(cache[tid], cache[tid + s])
        cuda.syncthreads()
        s //= 2
    if tid < WARP:
        value = warp_max(max(cache[tid], cache[tid + WARP]))
    return value


@cuda.jit
def reduce_max_grid_stride(x, out):
    """out[0] = max(out[0], the max of what block b's threads visit): rung 6 with max for +, and -inf —
    the identity of max — where the sum starts from 0.

    Memory: bytes = 4·n coalesced reads, four loads in flight per thread; one atomic max per block. Max is
    exact in any order, so unlike the sum the result has the same bits on every run.
    Launch: 1-D, BLOCK threads, any number of blocks (one wave: resident_blocks()); out[0] must hold -inf.
    """
    n = x.size
    stride = cuda.gridsize(1)
    i = cuda.grid(1)
    acc0 = float32(-math.inf)
    acc1 = float32(-math.inf)
    acc2 = float32(-math.inf)
    acc3 = float32(-math.inf)
    while i + 3 * stride < n:
        acc0 = max(acc0, x[i])
        acc1 = max(acc1, x[i + stride])
        acc2 = max(acc2, x[i + 2 * stride])
        acc3 = max(acc3, x[i + 3 * stride])
        i += 4 * stride
    while i < n:
        acc0 = max(acc0, x[i])
        i += stride
    total = block_max(max(max(acc0, acc1), max(acc2, acc3)))
    if cuda.threadIdx.x == 0:
        cuda.atomic.max(out, 0, total)


def max_grid_stride(x, out):
    """The max of x into out[0]: out[0] = -inf, then reduce_max_grid_stride with one wave of blocks."""
    n = _checked(x, out, "max_grid_stride")
    store_identity[1, 1](out, float32(-math.inf))
    if n:
        reduce_max_grid_stride[min(resident_blocks(BLOCK), blocks_for(n, BLOCK)), BLOCK](x, out)


# --- the ladders ------------------------------------------------------------------------------------
def _torch_sum(x, out):
    import torch
    torch.sum(x, dim=0, keepdim=True, out=out)


def _torch_amax(x, out):
    import torch
    torch.amax(x, dim=0, keepdim=True, out=out)


def _torch_max(x, out):
    out.copy_(x.max())  # the full reduction returns a 0-d tensor; copying it is one more tiny launch


def _sum_inputs(n, rng):
    return (rng.standard_normal(n, dtype=np.float32),)


def _max_inputs(n, rng):
    """All negative, so an accumulator wrongly started at 0 instead of -inf shows up as a wrong max."""
    return (-np.abs(rng.standard_normal(n, dtype=np.float32)) - np.float32(1),)


N = 1 << 28      # 2^28 float32 = 1 GiB, ~18x the H200's L2: every byte comes from HBM
SIM_N = 2001     # 7 blocks of 256 and a ragged end (4 for the one-wave rungs): seconds on the simulator

SUM_RUNGS = [
    Rung("reduce_interleaved_divergent", interleaved_divergent, "rung 0: tid % (2s) == 0; passes"),
    Rung("reduce_interleaved_strided", interleaved_strided, "rung 1: index 2·s·tid (bank conflicts); passes"),
    Rung("reduce_sequential", sequential, "rung 2: fold the upper half (no conflicts); passes"),
    Rung("reduce_first_add", first_add, "rung 3: two elements per thread on load; passes"),
    Rung("reduce_warp_shuffle", warp_shuffle, "rung 4: last warp with shfl_down_sync; passes"),
    Rung("reduce_grid_stride", grid_stride_two_pass, "rung 5a: one wave, grid-stride; second one-block pass"),
    Rung("reduce_grid_stride_atomic", grid_stride_atomic, "rung 5b: one wave, grid-stride; atomic per block"),
    Rung("reduce_grid_stride_ilp", grid_stride_ilp, "rung 6a: four loads in flight per thread; atomics"),
    Rung("reduce_grid_stride_float4", grid_stride_float4, "rung 6b: two float4 loads in flight; atomics"),
]

LADDERS = [
    Ladder(
        chapter=CHAPTER, topic="sum",
        description="sum of n float32 into one float32: read n, write 1",
        make_inputs=_sum_inputs, out_shape=lambda x: (1,),
        reference=lambda x: np.array([np.sum(x, dtype=np.float64)]),
        bytes=lambda n: 4 * n, flops=lambda n: n - 1, unit="GB/s", sizes=[N], sim_sizes=[SIM_N],
        rungs=SUM_RUNGS,
        baselines=[Baseline("torch.sum", _torch_sum, "torch.sum(x, dim=0, keepdim=True, out=out)")],
        tolerance=EXERCISES["reduce_sum"].tolerance,
    ),
    Ladder(
        chapter=CHAPTER, topic="max",
        description="max of n float32 into one float32: read n, write 1",
        make_inputs=_max_inputs, out_shape=lambda x: (1,),
        reference=lambda x: np.array([np.max(x)], dtype=np.float64),
        bytes=lambda n: 4 * n, flops=lambda n: n - 1, unit="GB/s", sizes=[N], sim_sizes=[SIM_N],
        rungs=[Rung("reduce_max_grid_stride", max_grid_stride, "rung 6 with max and -inf; atomic max")],
        baselines=[Baseline("torch.amax", _torch_amax, "torch.amax(x, dim=0, keepdim=True, out=out)"),
                   Baseline("torch.max", _torch_max, "out.copy_(x.max())")],
        tolerance=lambda x, expected: Tolerance(rtol=0.0),
    ),
    copy_ceiling(CHAPTER, [N]),
]


# --- what the GPU records beyond the ladders: how run-dependent the atomic sums are --------------------
DETERMINISM_RUNS = 20


def record_extra(folder):
    """On the GPU: run the two-pass rung and the two atomic rungs DETERMINISM_RUNS times each on the same
    2^28 input, check every result, and write the distinct float32 results of each (with the registers
    per thread of the one-wave kernels, since one wave assumes 8 blocks of 256 threads fit on an SM) to
    <folder>/reduction.determinism.json."""
    import json
    from pathlib import Path

    import lib
    from lib.grading.check import compare
    from lib.measure.results import environment

    if lib.SIMULATOR:
        raise RuntimeError("record_extra measures the GPU: run it with `make record` on a GPU")
    rng = np.random.default_rng(1)
    (x,) = _sum_inputs(N, rng)
    expected = np.array([np.sum(x, dtype=np.float64)])
    tol = EXERCISES["reduce_sum"].tolerance(x, expected)
    d_x, d_out = cuda.to_device(x), cuda.device_array(1, dtype=np.float32)
    runs = {}
    for rung in SUM_RUNGS[5:]:
        values = []
        for _ in range(DETERMINISM_RUNS):
            rung.run(d_x, d_out)
            value = d_out.copy_to_host()
            bad = compare(value, expected, tol.rtol, tol.atol, tol.scale)
            if bad is not None:
                raise AssertionError(f"{rung.name} failed its check: {bad.describe()}")
            values.append(value[0])
        bits = sorted({int(np.float32(v).view(np.uint32)) for v in values})
        runs[rung.name] = {
            "runs": DETERMINISM_RUNS, "distinct": len(bits),
            "values": [float(np.uint32(b).view(np.float32)) for b in bits],
            "float32_bits": [f"0x{b:08x}" for b in bits],
            "max_abs_error": float(np.max(np.abs(np.array(values, np.float64) - expected[0]))),
        }
    regs = {k.__name__: sorted(set(k.get_regs_per_thread().values()))
            for k in (reduce_grid_stride, reduce_grid_stride_atomic, reduce_grid_stride_ilp,
                      reduce_grid_stride_float4, reduce_max_grid_stride)}
    record = {"what": "distinct float32 results of repeated runs on one input", "n": N,
              "exact_sum": float(expected[0]), "sum_of_abs": float(np.sum(np.abs(x), dtype=np.float64)),
              "tolerance_rtol": float(tol.rtol), "tolerance_scale": float(np.ravel(tol.scale)[0]),
              "rungs": runs, "registers_per_thread": regs, "blocks": resident_blocks(BLOCK),
              **environment()}
    path = Path(folder) / f"{CHAPTER}.determinism.json"
    path.write_text(json.dumps(record, indent=1))
    return [path]


# The book's own small launches (demos, last passes, one-thread set-ups) are deliberate: no low-occupancy
# warning for them (lib/runtime/quiet_launches.py); a reader's kernels still get it.
quiet_kernels(globals())
