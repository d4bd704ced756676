"""Kernels of the softmax chapter: a row-wise softmax of a (rows, cols) float32 matrix, from the naive
formula that overflows, through the stable three-pass and the online two-pass kernels, to a kernel that
keeps its row in registers and so reads HBM once.

Masking convention (every kernel but the naive one): an entry of -inf is masked out (it gets probability 0
and takes no share of the sum), and a row whose entries are *all* -inf gives a row of zeros. torch.softmax
gives NaN there instead (0/0); zeros are what an attention layer wants from a query that may attend to
nothing, and they are what FlashAttention-style kernels produce. +inf or NaN inputs give NaN.

Where the rest lives: chapters/softmax.md (the page); lib/grading/variants/softmax.py (its exercises'
known-wrong variants); tests/test_softmax.py (tests); data/results/softmax.* (recorded on the H200). Record it
with ``python -m tools.record softmax`` on a GPU; on the simulator the same kernels run through the page's
checks and the tests.
"""
import math
import sys
from pathlib import Path

import numpy as np
from numba import cuda, float32

import lib
from lib.runtime.vector import SMEM_ALIGN, data_address, load_float4, store_float4
from lib.runtime import mma
from lib.measure.ncu import parse_csv
from lib.measure.bench import Baseline, Ladder, Rung, copy_ceiling
from lib.grading.check import k_scaled_rtol
from lib.runtime.dynamic_shared import allow_dynamic_shared
from lib.grading.spec import Tolerance
from lib.runtime.quiet_launches import quiet, quiet_kernels
from lib.runtime.validate import require

CHAPTER = "softmax"
WARP = 32
FULL_MASK = 0xFFFFFFFF
ROW_THREADS = 256                     # threads of a block-per-row kernel: 8 warps
ROW_WARPS = ROW_THREADS // WARP
WARP_ROWS_PER_BLOCK = 8               # warp-per-row kernel: 8 rows (warps) per 256-thread block
ON_CHIP_ITEMS = (1, 2, 4, 8, 16, 32, 64)  # values per thread the register kernel is compiled for
ON_CHIP_MAX_COLS = ROW_THREADS * ON_CHIP_ITEMS[-1]  # 16384: longer rows do not fit in registers
VECTOR = 4                            # floats per 16-byte load
VECTOR_WARPS = 8                      # warps per block of the short-row kernel
VECTOR_ROWS_PER_WARP = 2              # rows each warp of it owns (chosen by measurement on the H200)
VECTOR_QUADS = (1, 2, 4, 8)           # float4s per lane per row the short-row kernel is compiled for
VECTOR_MAX_COLS = WARP * VECTOR * VECTOR_QUADS[-1]  # 1024: longer rows go to softmax_on_chip
SHARED_THREADS = 512                  # threads of the registers + shared memory kernel (16 warps)
SHARED_WARPS = SHARED_THREADS // WARP
SHARED_REG_ITEMS = 32                 # values per thread it keeps in registers (chosen by measurement)
SHARED_ITEMS = (32, 64, 96)           # values per thread it can keep in shared memory: 64 to 192 KB a block
SHARED_MAX_COLS = SHARED_THREADS * (SHARED_REG_ITEMS + SHARED_ITEMS[-1])  # 65536
ASYNC_THREADS = 512                   # threads of the cp.async kernel (16 warps)
ASYNC_REG_ITEMS = 32                  # values per thread it keeps in registers
ASYNC_SHARED_ITEMS = (32, 64, 96)     # values per thread it can keep in shared memory: 64 to 192 KB a block
ASYNC_GROUPS = 8                      # cp.async groups the shared part is copied in, each used as it lands (measured)
ASYNC_MAX_COLS = ASYNC_THREADS * (ASYNC_REG_ITEMS + ASYNC_SHARED_ITEMS[-1])  # 65536
ASYNC_ROW_THREADS = 256               # the same kernel with no shared part, for rows the registers hold:
ASYNC_ROW_ITEMS = (8, 16, 32)         # 256 threads x 8 to 32 values (measured: 512 x 16 is slower at 8192)
ASYNC_ROW_MAX_COLS = ASYNC_ROW_THREADS * ASYNC_ROW_ITEMS[-1]  # 8192
NEG_INF = float32(-math.inf)
ZERO = float32(0.0)
ONE = float32(1.0)

assert ROW_THREADS % WARP == 0 and ROW_WARPS <= WARP, "a block is whole warps, at most 32 of them"
assert SHARED_THREADS % WARP == 0 and SHARED_WARPS <= WARP, "a block is whole warps, at most 32 of them"
assert SHARED_THREADS * SHARED_REG_ITEMS == ON_CHIP_MAX_COLS, "the shared kernel takes over where registers end"
assert ASYNC_THREADS * ASYNC_REG_ITEMS == ON_CHIP_MAX_COLS and ASYNC_MAX_COLS == SHARED_MAX_COLS, \
    "the cp.async kernel runs on the rows the shared kernel runs on (kernel_that_runs relies on it)"


# --- the merge operator and its reductions ----------------------------------------------------------
@cuda.jit(device=True)
def merge(m_a, l_a, m_b, l_b):
    """(m_a, l_a) ⊕ (m_b, l_b): two partial softmax states — a maximum m and a sum l of exp(x - m) —
    combined into the state of the union of their elements. Each sum is rescaled to the larger maximum by
    exp(m_old - m_new) ≤ 1. The identity is (-inf, 0); two empty states merge to (-inf, 0), not NaN."""
    m = max(m_a, m_b)
    if m == NEG_INF:
        return m, ZERO
    return m, l_a * math.exp(m_a - m) + l_b * math.exp(m_b - m)


@cuda.jit(device=True)
def online_update(m, l, v):
    """The state (m, l) after one more element v: one exp per element (the rescale happens only when v
    is a new maximum). A masked v = -inf changes nothing."""
    if v > m:
        return v, l * math.exp(m - v) + ONE
    if v != NEG_INF:
        return m, l + math.exp(v - m)
    return m, l


@cuda.jit(device=True)
def warp_merge(m, l):
    """Butterfly merge of a warp's 32 states: after log2(32) = 5 rounds every lane holds the warp's
    state. Lanes i and i^k each compute merge(own, other) in the opposite order, so they agree bit for bit
    only because the merge is commutative — which it is, even in floating point (a+b == b+a)."""
    offset = WARP // 2
    while offset > 0:
        m_other = cuda.shfl_xor_sync(FULL_MASK, m, offset)
        l_other = cuda.shfl_xor_sync(FULL_MASK, l, offset)
        m, l = merge(m, l, m_other, l_other)
        offset //= 2
    return m, l


@cuda.jit(device=True)
def block_merge(m, l, warp_m, warp_l):
    """Merge the states of all ROW_THREADS threads; every thread gets the row's state. One barrier: lane
    0 of each warp posts its warp's state to shared memory, then every thread merges the ROW_WARPS posted
    states in the same order (so all threads agree)."""
    m, l = warp_merge(m, l)
    warp = cuda.threadIdx.x // WARP
    if cuda.threadIdx.x % WARP == 0:
        warp_m[warp] = m
        warp_l[warp] = l
    cuda.syncthreads()
    m, l = warp_m[0], warp_l[0]
    for w in range(1, ROW_WARPS):
        m, l = merge(m, l, warp_m[w], warp_l[w])
    return m, l


@cuda.jit(device=True)
def block_max(v, warp_max):
    """The maximum of v over the block (every thread gets it): a shuffle butterfly, then shared memory."""
    offset = WARP // 2
    while offset > 0:
        v = max(v, cuda.shfl_xor_sync(FULL_MASK, v, offset))
        offset //= 2
    if cuda.threadIdx.x % WARP == 0:
        warp_max[cuda.threadIdx.x // WARP] = v
    cuda.syncthreads()
    v = warp_max[0]
    for w in range(1, ROW_WARPS):
        v = max(v, warp_max[w])
    return v


@cuda.jit(device=True)
def block_sum(v, warp_sum):
    """The sum of v over the block (every thread gets it), as block_max."""
    offset = WARP // 2
    while offset > 0:
        v += cuda.shfl_xor_sync(FULL_MASK, v, offset)
        offset //= 2
    if cuda.threadIdx.x % WARP == 0:
        warp_sum[cuda.threadIdx.x // WARP] = v
    cuda.syncthreads()
    v = warp_sum[0]
    for w in range(1, ROW_WARPS):
        v += warp_sum[w]
    return v


# --- rung 0: the formula as written -------------------------------------------------------------------
@cuda.jit
def softmax_naive_kernel(x, out):
    """out[r, c] = exp(x[r, c]) / sum_c' exp(x[r, c']) — the textbook formula, with no shift. Any entry
    above ~88.7 makes exp overflow float32 to inf, and the row becomes inf/inf = NaN. Shown, not timed.

    Memory: two passes over the row (sum, then write): reads 8 bytes and writes 4 per element; each warp
    reads 32 consecutive floats per step (coalesced).
    Launch: one block of ROW_THREADS threads per row, grid = rows.
    """
    row = cuda.blockIdx.x
    warp_sum = cuda.shared.array(ROW_WARPS, float32)
    l = ZERO
    for c in range(cuda.threadIdx.x, x.shape[1], ROW_THREADS):
        l += float32(math.exp(x[row, c]))  # float32() so the simulator overflows exactly as the GPU does
    l = block_sum(l, warp_sum)
    for c in range(cuda.threadIdx.x, x.shape[1], ROW_THREADS):
        out[row, c] = float32(math.exp(x[row, c])) / l


# --- rung 1: stable, three passes ---------------------------------------------------------------------
def softmax_three_pass(x, out):
    """Stable softmax, three passes over the row: m = max x; l = sum exp(x - m); out = exp(x - m) / l.
    Every exponent is ≤ 0, so exp never overflows, and the largest term is exactly 1, so l ≥ 1. A fully
    masked row (m = -inf) shifts by 0 instead, so exp(-inf) = 0 everywhere and the row is written as 0.

    Memory: reads the row three times and writes it once: 16 bytes per element from the cache hierarchy,
    of which only 8 are the floor; the re-reads come from L2 when the row is still there. Coalesced: a
    warp reads 32 consecutive floats per step.
    Launch: one block of ROW_THREADS threads per row, grid = rows. Compiled twice: with libdevice's expf
    (softmax_three_pass_kernel) and with fastmath's __expf (softmax_three_pass_fastmath_kernel).
    """
    row = cuda.blockIdx.x
    warp_max = cuda.shared.array(ROW_WARPS, float32)
    warp_sum = cuda.shared.array(ROW_WARPS, float32)
    m = NEG_INF
    for c in range(cuda.threadIdx.x, x.shape[1], ROW_THREADS):
        m = max(m, x[row, c])
    m = block_max(m, warp_max)
    shift = m if m != NEG_INF else ZERO
    l = ZERO
    for c in range(cuda.threadIdx.x, x.shape[1], ROW_THREADS):
        l += math.exp(x[row, c] - shift)
    l = block_sum(l, warp_sum)
    inv_l = ONE / l if l > ZERO else ZERO
    for c in range(cuda.threadIdx.x, x.shape[1], ROW_THREADS):
        out[row, c] = math.exp(x[row, c] - shift) * inv_l


softmax_three_pass_kernel = cuda.jit(softmax_three_pass)
softmax_three_pass_fastmath_kernel = cuda.jit(fastmath=True)(softmax_three_pass)


# --- rung 2: online, two passes -----------------------------------------------------------------------
@cuda.jit
def softmax_online_kernel(x, out):
    """Online softmax: one pass keeps a running state (m, l) per thread — rescaling l by exp(m - m') when
    a larger m' arrives — the block merges the states, and a second pass writes exp(x - m) / l.

    Memory: reads the row twice and writes it once (12 bytes per element; floor 8). Coalesced as
    softmax_three_pass.
    Launch: one block of ROW_THREADS threads per row, grid = rows.
    """
    row = cuda.blockIdx.x
    warp_m = cuda.shared.array(ROW_WARPS, float32)
    warp_l = cuda.shared.array(ROW_WARPS, float32)
    m, l = NEG_INF, ZERO
    for c in range(cuda.threadIdx.x, x.shape[1], ROW_THREADS):
        m, l = online_update(m, l, x[row, c])
    m, l = block_merge(m, l, warp_m, warp_l)
    shift = m if m != NEG_INF else ZERO
    inv_l = ONE / l if l > ZERO else ZERO
    for c in range(cuda.threadIdx.x, x.shape[1], ROW_THREADS):
        out[row, c] = math.exp(x[row, c] - shift) * inv_l


# --- rung 3: a warp per row ---------------------------------------------------------------------------
@cuda.jit
def softmax_warp_per_row_kernel(x, out):
    """Online softmax with one warp per row: the merge is five shuffles, with no shared memory and no
    barrier — cheap for short rows, too little parallelism for long ones (a 65536-wide row gets 32
    threads).

    Memory: reads the row twice (the second read usually hits L1/L2: the warp just read it) and writes it
    once; each step a warp reads 32 consecutive floats.
    Launch: WARP_ROWS_PER_BLOCK warps per block (one row each), grid = ceil(rows / WARP_ROWS_PER_BLOCK);
    a warp past the last row exits as a whole, so no shuffle misses a lane.
    """
    row = cuda.blockIdx.x * WARP_ROWS_PER_BLOCK + cuda.threadIdx.x // WARP
    if row >= x.shape[0]:
        return
    lane = cuda.threadIdx.x % WARP
    m, l = NEG_INF, ZERO
    for c in range(lane, x.shape[1], WARP):
        m, l = online_update(m, l, x[row, c])
    m, l = warp_merge(m, l)
    shift = m if m != NEG_INF else ZERO
    inv_l = ONE / l if l > ZERO else ZERO
    for c in range(lane, x.shape[1], WARP):
        out[row, c] = math.exp(x[row, c] - shift) * inv_l


# --- rung 4: the row stays on chip --------------------------------------------------------------------
def make_softmax_on_chip_kernel(items: int, fastmath: bool = False):
    """A kernel for rows of at most ROW_THREADS·items floats, which keeps its row in registers."""

    @cuda.jit(fastmath=fastmath)
    def softmax_on_chip_kernel(x, out):
        """Single-read softmax: each thread loads its `items` elements of the row into a local array
        (a compile-time size and fully unrolled loops, so the compiler keeps it in registers), takes
        their state (m, l) while turning them into exp(x - m) in place, merges the states across the
        block, and writes each value times exp(m - m_row) / l_row. HBM sees each input byte once.

        Memory: reads 4 and writes 4 bytes per element — the floor, the same traffic as a copy. All
        `items` loads of a thread are issued before the first is used, so many are in flight per
        thread; a warp reads 32 consecutive floats per load (coalesced).
        Launch: one block of ROW_THREADS threads per row, grid = rows; cols ≤ ROW_THREADS·items.
        """
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        cols = x.shape[1]
        warp_m = cuda.shared.array(ROW_WARPS, float32)
        warp_l = cuda.shared.array(ROW_WARPS, float32)
        vals = cuda.local.array(items, float32)
        for j in range(items):
            c = tid + j * ROW_THREADS
            v = x[row, min(c, cols - 1)]  # a load with no branch around it: all `items` issue back to back
            vals[j] = v if c < cols else NEG_INF
        m = NEG_INF
        for j in range(items):
            m = max(m, vals[j])
        shift = m if m != NEG_INF else ZERO
        l = ZERO
        for j in range(items):
            vals[j] = math.exp(vals[j] - shift)
            l += vals[j]
        m_row, l_row = block_merge(m, l, warp_m, warp_l)
        scale = math.exp(m - m_row) / l_row if l_row > ZERO else ZERO
        for j in range(items):
            c = tid + j * ROW_THREADS
            if c < cols:
                out[row, c] = vals[j] * scale

    return quiet(softmax_on_chip_kernel)


_ON_CHIP_KERNELS: dict = {}


def on_chip_kernel(cols: int, fastmath: bool = False):
    """The register kernel compiled for the fewest items per thread that hold `cols` floats."""
    items = next(k for k in ON_CHIP_ITEMS if ROW_THREADS * k >= cols)
    key = (items, fastmath)
    if key not in _ON_CHIP_KERNELS:
        _ON_CHIP_KERNELS[key] = make_softmax_on_chip_kernel(items, fastmath)
    return _ON_CHIP_KERNELS[key]


# --- rung 5: short rows, several per warp, 16-byte loads ----------------------------------------------
def make_softmax_warp_vector_kernel(quads: int, rows_per_warp: int = VECTOR_ROWS_PER_WARP):
    """A kernel for rows of at most WARP·VECTOR·quads floats (a multiple of 4), `rows_per_warp` rows per
    warp, each row held in its warp's registers."""
    row_items = quads * VECTOR                 # values per lane per row
    held_items = rows_per_warp * row_items     # a literal for the local array's size

    @cuda.jit
    def softmax_warp_vector_kernel(x, out, cols):
        """Single-read softmax of short rows: each lane loads `quads` float4s of each of its warp's
        `rows_per_warp` rows — every load of every row issued before the first is used — then per row a
        max butterfly and a sum butterfly of five shuffles each (the rows' shuffles interleaved, so they
        overlap), and 16-byte stores. No shared memory, no barrier.

        Memory: reads 4 and writes 4 bytes per element, the floor. A warp's load reads 512 contiguous
        bytes (LDG.E.128: a quarter of the load instructions of 4-byte loads), and each lane has
        rows_per_warp·quads 16-byte loads in flight. x and out are the matrices flattened (1-D views),
        starting on 16-byte boundaries, cols a multiple of 4, so every row starts on one too.
        Launch: VECTOR_WARPS warps per block, grid = ceil(rows / (VECTOR_WARPS·rows_per_warp)); a warp
        past the last row exits as a whole, and a warp's rows past the end re-read the last row (no
        branch around the loads) and store nothing.
        """
        lane = cuda.threadIdx.x % WARP
        first = (cuda.blockIdx.x * VECTOR_WARPS + cuda.threadIdx.x // WARP) * rows_per_warp
        row_quads = cols // VECTOR
        rows = x.size // cols
        if first >= rows:
            return
        vals = cuda.local.array(held_items, float32)
        m = cuda.local.array(rows_per_warp, float32)
        l = cuda.local.array(rows_per_warp, float32)
        for r in range(rows_per_warp):
            base = min(first + r, rows - 1) * row_quads
            for j in range(quads):
                q = lane + j * WARP
                v0, v1, v2, v3 = load_float4(x, base + min(q, row_quads - 1))
                k = VECTOR * (r * quads + j)
                inside = q < row_quads
                vals[k] = v0 if inside else NEG_INF
                vals[k + 1] = v1 if inside else NEG_INF
                vals[k + 2] = v2 if inside else NEG_INF
                vals[k + 3] = v3 if inside else NEG_INF
        for r in range(rows_per_warp):
            m[r] = NEG_INF
            for k in range(row_items):
                m[r] = max(m[r], vals[r * row_items + k])
        for step in range(5):  # log2(WARP) rounds; every lane ends with the row's maximum
            for r in range(rows_per_warp):
                m[r] = max(m[r], cuda.shfl_xor_sync(FULL_MASK, m[r], (WARP // 2) >> step))
        for r in range(rows_per_warp):
            shift = m[r] if m[r] != NEG_INF else ZERO
            l[r] = ZERO
            for k in range(row_items):
                e = math.exp(vals[r * row_items + k] - shift)
                vals[r * row_items + k] = e
                l[r] += e
        for step in range(5):
            for r in range(rows_per_warp):
                l[r] += cuda.shfl_xor_sync(FULL_MASK, l[r], (WARP // 2) >> step)
        for r in range(rows_per_warp):
            if first + r < rows:
                scale = ONE / l[r] if l[r] > ZERO else ZERO
                for j in range(quads):
                    q = lane + j * WARP
                    k = VECTOR * (r * quads + j)
                    if q < row_quads:
                        store_float4(out, (first + r) * row_quads + q, vals[k] * scale, vals[k + 1] * scale,
                                     vals[k + 2] * scale, vals[k + 3] * scale)

    return quiet(softmax_warp_vector_kernel)


_VECTOR_KERNELS: dict = {}


def warp_vector_kernel(cols: int, rows_per_warp: int = VECTOR_ROWS_PER_WARP):
    """The short-row kernel compiled for the fewest float4s per lane that hold `cols` floats."""
    quads = next(k for k in VECTOR_QUADS if WARP * VECTOR * k >= cols)
    key = (quads, rows_per_warp)
    if key not in _VECTOR_KERNELS:
        _VECTOR_KERNELS[key] = make_softmax_warp_vector_kernel(quads, rows_per_warp)
    return _VECTOR_KERNELS[key]


# --- rung 6: long rows on chip, registers and shared memory -------------------------------------------
def make_merge_warps(warps: int):
    """block_merge for a block of `warps` warps (the kernels whose block size is a parameter)."""
    assert 1 <= warps <= WARP, "a block is whole warps, at most 32 of them"

    @cuda.jit(device=True)
    def merge_warps(m, l, warp_m, warp_l):
        m, l = warp_merge(m, l)
        if cuda.threadIdx.x % WARP == 0:
            warp_m[cuda.threadIdx.x // WARP] = m
            warp_l[cuda.threadIdx.x // WARP] = l
        cuda.syncthreads()
        m, l = warp_m[0], warp_l[0]
        for w in range(1, warps):
            m, l = merge(m, l, warp_m[w], warp_l[w])
        return m, l

    return merge_warps


def make_softmax_on_chip_shared_kernel(reg_items: int, shared_items: int, threads: int = SHARED_THREADS):
    """A kernel for rows of at most threads·(reg_items + shared_items) floats: each thread keeps
    reg_items values in registers and shared_items in shared memory."""
    warps = threads // WARP
    batch = max(d for d in range(1, reg_items + 1) if shared_items % d == 0)  # loads staged per round
    assert threads % WARP == 0 and warps <= WARP, "a block is whole warps, at most 32 of them"
    merge_warps = make_merge_warps(warps)
    bounds = {} if lib.SIMULATOR else {"launch_bounds": threads}  # ptxas: registers for `threads` threads

    @cuda.jit(**bounds)
    def softmax_on_chip_shared_kernel(x, out):
        """Single-read softmax of rows too long for a block's registers alone: each thread holds
        shared_items values of the row in shared memory (its own slots: column tid + j·threads lives at
        held[j·threads + tid], so a warp touches 32 consecutive words, no conflicts, and no thread reads
        another's slot — no barrier needed for them) and reg_items in registers, then proceeds as the
        register kernel: thread state, one block merge, every value times exp(m - m_row) / l_row.

        Memory: reads 4 and writes 4 bytes per element, the floor, even for 65536-float rows (256 KB: half
        in the 128 KB register file share of 512 threads, half in 128 KB of shared memory). The shared part
        is loaded first, up to reg_items loads at a time staged through the register array (so all of a batch
        is in flight before the first shared store), then the register part: reg_items loads in flight per
        thread. Shared memory: threads·shared_items·4 bytes, dynamic (over 48 KB: the launcher opts in).
        Launch: one block of `threads` threads per row, grid = rows, dynamic shared memory as above;
        cols ≤ threads·(reg_items + shared_items).
        """
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        cols = x.shape[1]
        held = cuda.shared.array(0, float32)
        warp_m = cuda.shared.array(warps, float32)
        warp_l = cuda.shared.array(warps, float32)
        vals = cuda.local.array(reg_items, float32)
        m = NEG_INF
        for b in range(shared_items // batch):
            for k in range(batch):
                c = tid + (b * batch + k) * threads
                v = x[row, min(c, cols - 1)]
                vals[k] = v if c < cols else NEG_INF
            for k in range(batch):
                held[(b * batch + k) * threads + tid] = vals[k]
                m = max(m, vals[k])
        for j in range(reg_items):
            c = tid + (shared_items + j) * threads
            v = x[row, min(c, cols - 1)]
            vals[j] = v if c < cols else NEG_INF
        for j in range(reg_items):
            m = max(m, vals[j])
        shift = m if m != NEG_INF else ZERO
        l = ZERO
        for j in range(shared_items):
            e = math.exp(held[j * threads + tid] - shift)
            held[j * threads + tid] = e
            l += e
        for j in range(reg_items):
            vals[j] = math.exp(vals[j] - shift)
            l += vals[j]
        m_row, l_row = merge_warps(m, l, warp_m, warp_l)
        scale = math.exp(m - m_row) / l_row if l_row > ZERO else ZERO
        for j in range(shared_items):
            c = tid + j * threads
            if c < cols:
                out[row, c] = held[j * threads + tid] * scale
        for j in range(reg_items):
            c = tid + (shared_items + j) * threads
            if c < cols:
                out[row, c] = vals[j] * scale

    return quiet(softmax_on_chip_shared_kernel)


_SHARED_KERNELS: dict = {}


def on_chip_shared_kernel(cols: int, threads: int = SHARED_THREADS, reg_items: int = SHARED_REG_ITEMS):
    """(kernel, dynamic shared bytes) for `cols`: reg_items values per thread in registers and the fewest of
    SHARED_ITEMS per thread in shared memory that hold the rest."""
    shared = next((s for s in SHARED_ITEMS if threads * (reg_items + s) >= cols), None)
    items = reg_items
    if shared is None:
        raise ValueError(f"softmax_on_chip_shared: a row of {cols} floats does not fit "
                         f"{threads} x ({reg_items} + {SHARED_ITEMS[-1]})")
    key = (items, shared, threads)
    if key not in _SHARED_KERNELS:
        _SHARED_KERNELS[key] = make_softmax_on_chip_shared_kernel(items, shared, threads)
    return _SHARED_KERNELS[key], 4 * threads * shared


# --- rung 7: long rows on chip, the shared part copied by cp.async -----------------------------------
def make_softmax_on_chip_async_kernel(reg_items: int, shared_items: int, threads: int = ASYNC_THREADS,
                                      groups: int = ASYNC_GROUPS):
    """A kernel for rows of at most threads·(reg_items + shared_items) floats (a multiple of 4, 16-byte
    aligned matrices): each thread keeps reg_items values in registers and shared_items in shared memory,
    copied there by cp.async in `groups` commit groups of equal size."""
    reg_quads, shared_quads = reg_items // VECTOR, shared_items // VECTOR
    assert reg_items % VECTOR == 0 and shared_items % VECTOR == 0, "a thread's values come in float4s"
    assert threads % WARP == 0 and threads // WARP <= WARP, "a block is whole warps, at most 32 of them"
    assert groups >= 1 and shared_quads % groups == 0, "the groups split a thread's float4s evenly"
    warps = threads // WARP
    merge_warps = make_merge_warps(warps)
    per_group = shared_quads // groups    # float4s per thread per group
    pending = groups - 1   # a literal for cp.async.wait_group: the groups that may stay in flight
    shifts = groups + 1    # the register part's shift, then each group's (a literal for the local array)
    bounds = {} if lib.SIMULATOR else {"launch_bounds": threads}  # ptxas: registers for `threads` threads

    @cuda.jit(**bounds)
    def softmax_on_chip_async_kernel(x, out, cols):
        """Single-read softmax of long rows with the whole row in flight at once: each thread issues
        16-byte loads of its reg_items register values, then 16-byte cp.async copies of its shared_items
        values from global to shared memory — no register holds them on the way, so no register count
        limits how many are in flight — in `groups` commit groups, and only then waits. It takes the
        register part first (its maximum, the thread's state (m, l), its exps in place; first, because
        what is used last could be scheduled after a wait: wait_group orders only the copies), then each
        group as it lands (cp.async.wait_group, with an empty group committed after each so that the same
        literal count waits for the next one): the group's maximum, the state rescaled to it, the group's
        exps written back in place. One block merge; every value times exp(m_part - m_row) / l_row, with
        m_part the shift its part's exps were taken with.

        Memory: reads 4 and writes 4 bytes per element, the floor, with up to a whole row in flight per
        block (256 KB at 65536 floats). Float4 j of thread t is float4 t + j·threads of the row (the
        register part after the shared one), and a shared one sits at the same float4 of the block's
        slots, so a warp's load, copy or store moves 512 contiguous bytes (no bank conflicts). A float4
        past the row's end is loaded or copied from the row's last one (no branch around the issue) and
        counted as -inf. The PTX ISA makes a cp.async's writes visible to its own thread once wait_group
        has returned for its group, and each thread reads only its own slots: no barrier for them. Shared
        memory: threads·shared_items·4 bytes, dynamic (over 48 KB: the launcher opts in). x and out are
        the matrices flattened (1-D views) on 16-byte boundaries, cols a multiple of 4.
        Launch: one block of `threads` threads per row, grid = rows, dynamic shared memory as above;
        cols ≤ threads·(reg_items + shared_items).
        """
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        row_quads = cols // VECTOR
        base = row * row_quads                    # the row's first float4 in x and out
        held = cuda.shared.array(0, float32, alignment=SMEM_ALIGN)
        warp_m = cuda.shared.array(warps, float32)
        warp_l = cuda.shared.array(warps, float32)
        vals = cuda.local.array(reg_items, float32)
        part_m = cuda.local.array(shifts, float32)
        for j in range(reg_quads):
            q = tid + (shared_quads + j) * threads
            v0, v1, v2, v3 = load_float4(x, base + min(q, row_quads - 1))  # no branch: all issue at once
            inside = q < row_quads
            vals[VECTOR * j] = v0 if inside else NEG_INF
            vals[VECTOR * j + 1] = v1 if inside else NEG_INF
            vals[VECTOR * j + 2] = v2 if inside else NEG_INF
            vals[VECTOR * j + 3] = v3 if inside else NEG_INF
        for g in range(groups):
            for i in range(per_group):
                j = g * per_group + i
                q = min(tid + j * threads, row_quads - 1)
                mma.cp_async_cg16(held, VECTOR * (j * threads + tid), x, VECTOR * (base + q))
            mma.cp_async_commit()
        m = NEG_INF
        for k in range(reg_items):
            m = max(m, vals[k])
        shift = m if m != NEG_INF else ZERO
        l = ZERO
        for k in range(reg_items):
            vals[k] = math.exp(vals[k] - shift)
            l += vals[k]
        part_m[0] = m
        for g in range(groups):
            mma.cp_async_wait_group(pending)      # the oldest group in flight, group g, has landed
            m_new = m
            for i in range(per_group):
                j = g * per_group + i
                s0, s1, s2, s3 = load_float4(held, j * threads + tid)
                if tid + j * threads < row_quads:  # a slot past the row's end holds a copy of its last float4
                    m_new = max(m_new, max(max(s0, s1), max(s2, s3)))
            if m_new != NEG_INF:
                l *= math.exp(m - m_new)          # the sum so far, rescaled to the new maximum
            m = m_new
            shift = m if m != NEG_INF else ZERO
            for i in range(per_group):
                j = g * per_group + i
                s0, s1, s2, s3 = load_float4(held, j * threads + tid)
                e0, e1, e2, e3 = (math.exp(s0 - shift), math.exp(s1 - shift), math.exp(s2 - shift),
                                  math.exp(s3 - shift))
                store_float4(held, j * threads + tid, e0, e1, e2, e3)
                if tid + j * threads < row_quads:
                    l += (e0 + e1) + (e2 + e3)
            part_m[g + 1] = m
            mma.cp_async_commit()                 # an empty group: the next wait_group(pending) is for g + 1
        m_row, l_row = merge_warps(m, l, warp_m, warp_l)
        scale = math.exp(part_m[0] - m_row) / l_row if l_row > ZERO else ZERO
        for j in range(reg_quads):
            q = tid + (shared_quads + j) * threads
            if q < row_quads:
                store_float4(out, base + q, vals[VECTOR * j] * scale, vals[VECTOR * j + 1] * scale,
                             vals[VECTOR * j + 2] * scale, vals[VECTOR * j + 3] * scale)
        for g in range(groups):
            scale = math.exp(part_m[g + 1] - m_row) / l_row if l_row > ZERO else ZERO
            for i in range(per_group):
                j = g * per_group + i
                q = tid + j * threads
                if q < row_quads:
                    e0, e1, e2, e3 = load_float4(held, j * threads + tid)
                    store_float4(out, base + q, e0 * scale, e1 * scale, e2 * scale, e3 * scale)

    return quiet(softmax_on_chip_async_kernel)


_ASYNC_KERNELS: dict = {}


def on_chip_async_kernel(cols: int, threads: int = ASYNC_THREADS, reg_items: int = ASYNC_REG_ITEMS,
                         groups: int = ASYNC_GROUPS):
    """(kernel, dynamic shared bytes) for `cols`: reg_items values per thread in registers and the fewest of
    ASYNC_SHARED_ITEMS per thread in shared memory that hold the rest."""
    shared = next((s for s in ASYNC_SHARED_ITEMS if threads * (reg_items + s) >= cols), None)
    if shared is None:
        raise ValueError(f"softmax_on_chip_async: a row of {cols} floats does not fit "
                         f"{threads} x ({reg_items} + {ASYNC_SHARED_ITEMS[-1]})")
    return _async_kernel(reg_items, shared, threads, groups), 4 * threads * shared


def _async_kernel(reg_items: int, shared_items: int, threads: int, groups: int):
    """make_softmax_on_chip_async_kernel, built once per configuration."""
    key = (reg_items, shared_items, threads, groups)
    if key not in _ASYNC_KERNELS:
        _ASYNC_KERNELS[key] = make_softmax_on_chip_async_kernel(reg_items, shared_items, threads, groups)
    return _ASYNC_KERNELS[key]


def async_row_kernel(cols: int):
    """The cp.async kernel with no shared part (only 16-byte register loads) for a row of VECTOR_MAX_COLS <
    cols ≤ ASYNC_ROW_MAX_COLS floats: ASYNC_ROW_THREADS threads, the fewest of ASYNC_ROW_ITEMS values each."""
    items = next((i for i in ASYNC_ROW_ITEMS if ASYNC_ROW_THREADS * i >= cols), None)
    if items is None or cols <= VECTOR_MAX_COLS:
        raise ValueError(f"softmax_on_chip_async: the register-only kernel takes rows of {VECTOR_MAX_COLS + 1} "
                         f"to {ASYNC_ROW_MAX_COLS} floats, not {cols}")
    return _async_kernel(items, 0, ASYNC_ROW_THREADS, 1)


# --- host launchers -----------------------------------------------------------------------------------
def _checked(x, out, where):
    require(x, "x", ndim=2, where=where)
    require(out, "out", shape=tuple(x.shape), where=where)
    return x.shape


def softmax_naive(x, out):
    """Launch softmax_naive_kernel (overflows for entries above ~88.7: for showing, not for use)."""
    rows, cols = _checked(x, out, "softmax_naive")
    if rows and cols:
        softmax_naive_kernel[rows, ROW_THREADS](x, out)


def softmax_three_pass_expf(x, out):
    """Launch the three-pass kernel compiled with libdevice's accurate expf."""
    rows, cols = _checked(x, out, "softmax_three_pass_expf")
    if rows and cols:
        softmax_three_pass_kernel[rows, ROW_THREADS](x, out)


def softmax_three_pass_fastmath(x, out):
    """Launch the three-pass kernel compiled with fastmath (__expf, flush-to-zero, approximate division)."""
    rows, cols = _checked(x, out, "softmax_three_pass_fastmath")
    if rows and cols:
        softmax_three_pass_fastmath_kernel[rows, ROW_THREADS](x, out)


def softmax_online(x, out):
    """Launch softmax_online_kernel: a block per row, two reads of the row."""
    rows, cols = _checked(x, out, "softmax_online")
    if rows and cols:
        softmax_online_kernel[rows, ROW_THREADS](x, out)


def softmax_warp_per_row(x, out):
    """Launch softmax_warp_per_row_kernel: a warp per row, WARP_ROWS_PER_BLOCK rows per block."""
    rows, cols = _checked(x, out, "softmax_warp_per_row")
    if rows and cols:
        blocks = (rows + WARP_ROWS_PER_BLOCK - 1) // WARP_ROWS_PER_BLOCK
        softmax_warp_per_row_kernel[blocks, WARP_ROWS_PER_BLOCK * WARP](x, out)


def softmax_on_chip(x, out, fastmath: bool = False):
    """Single-read softmax for rows up to ON_CHIP_MAX_COLS; longer rows do not fit in a block's registers
    and go to softmax_online (two reads) instead — the ladder's table says which ran."""
    rows, cols = _checked(x, out, "softmax_on_chip")
    if not (rows and cols):
        return
    if cols > ON_CHIP_MAX_COLS:
        softmax_online_kernel[rows, ROW_THREADS](x, out)
        return
    on_chip_kernel(cols, fastmath)[rows, ROW_THREADS](x, out)


def softmax_on_chip_fastmath(x, out):
    """softmax_on_chip compiled with fastmath (__expf)."""
    softmax_on_chip(x, out, fastmath=True)


def softmax_warp_vector(x, out, rows_per_warp: int = VECTOR_ROWS_PER_WARP):
    """Short rows (up to VECTOR_MAX_COLS floats, a multiple of 4, 16-byte aligned matrices): the warp-vector
    kernel; other rows go to softmax_on_chip — the ladder's table says which ran."""
    rows, cols = _checked(x, out, "softmax_warp_vector")
    if not (rows and cols):
        return
    if cols > VECTOR_MAX_COLS or cols % VECTOR or data_address(x) % 16 or data_address(out) % 16:
        softmax_on_chip(x, out)
        return
    per_block = VECTOR_WARPS * rows_per_warp
    kernel = warp_vector_kernel(cols, rows_per_warp)
    kernel[(rows + per_block - 1) // per_block, VECTOR_WARPS * WARP](x.reshape(rows * cols),
                                                                     out.reshape(rows * cols), cols)


def softmax_on_chip_shared(x, out, threads: int = SHARED_THREADS, reg_items: int = SHARED_REG_ITEMS):
    """Single-read softmax for rows up to SHARED_MAX_COLS: a block of SHARED_THREADS per row holds the row
    in registers, and in shared memory what the registers cannot. Rows that the registers hold alone
    (≤ threads·reg_items = ON_CHIP_MAX_COLS) go to softmax_on_chip, longer ones than SHARED_MAX_COLS to
    softmax_online — the ladder's table says which ran."""
    rows, cols = _checked(x, out, "softmax_on_chip_shared")
    if not (rows and cols):
        return
    if cols <= threads * reg_items:
        softmax_on_chip(x, out)
        return
    if cols > threads * (reg_items + SHARED_ITEMS[-1]):
        softmax_online_kernel[rows, ROW_THREADS](x, out)
        return
    kernel, shared_bytes = on_chip_shared_kernel(cols, threads, reg_items)
    if shared_bytes:
        allow_dynamic_shared(kernel, (x, out), shared_bytes)
    kernel[rows, threads, 0, shared_bytes](x, out)


def softmax_on_chip_async(x, out, threads: int = ASYNC_THREADS, reg_items: int = ASYNC_REG_ITEMS,
                          groups: int = ASYNC_GROUPS):
    """Single-read softmax with 16-byte transfers, a multiple of 4 floats per row, in 16-byte aligned matrices:
    rows longer than a block's registers hold (threads·reg_items) and up to threads·(reg_items +
    ASYNC_SHARED_ITEMS[-1]) run the cp.async kernel; rows of VECTOR_MAX_COLS < cols ≤ ASYNC_ROW_MAX_COLS
    run it with no shared part (async_row_kernel). Other rows go to softmax_on_chip_shared — the ladder's
    table says which kernel ran."""
    rows, cols = _checked(x, out, "softmax_on_chip_async")
    if not (rows and cols):
        return
    vectors = not (cols % VECTOR or data_address(x) % 16 or data_address(out) % 16)
    if vectors and VECTOR_MAX_COLS < cols <= ASYNC_ROW_MAX_COLS:   # registers alone, 16-byte loads
        async_row_kernel(cols)[rows, ASYNC_ROW_THREADS](x.reshape(rows * cols), out.reshape(rows * cols), cols)
        return
    fits = threads * reg_items < cols <= threads * (reg_items + ASYNC_SHARED_ITEMS[-1])
    if not fits or not vectors:
        softmax_on_chip_shared(x, out)
        return
    kernel, shared_bytes = on_chip_async_kernel(cols, threads, reg_items, groups)
    args = (x.reshape(rows * cols), out.reshape(rows * cols), cols)
    allow_dynamic_shared(kernel, args, shared_bytes)
    kernel[rows, threads, 0, shared_bytes](*args)


def kernel_that_runs(rung: str, cols: int) -> str:
    """The kernel a rung's launcher launches for rows of `cols` floats, fallbacks included (for tables that
    must not credit a rung with another kernel's time). Assumes 16-byte aligned matrices, as the ladder's."""
    if rung == "softmax_warp_vector_kernel" and (cols > VECTOR_MAX_COLS or cols % VECTOR):
        rung = "softmax_on_chip_kernel"
    register_only = VECTOR_MAX_COLS < cols <= ASYNC_ROW_MAX_COLS
    if rung == "softmax_on_chip_async_kernel" and (cols % VECTOR or cols <= ON_CHIP_MAX_COLS and not register_only):
        rung = "softmax_on_chip_shared_kernel"
    if rung == "softmax_on_chip_shared_kernel" and cols <= ON_CHIP_MAX_COLS:
        rung = "softmax_on_chip_kernel"
    too_long = {"softmax_on_chip_kernel": ON_CHIP_MAX_COLS, "softmax_on_chip_fastmath_kernel": ON_CHIP_MAX_COLS,
                "softmax_on_chip_shared_kernel": SHARED_MAX_COLS, "softmax_on_chip_async_kernel": ASYNC_MAX_COLS}
    return "softmax_online_kernel" if cols > too_long.get(rung, cols) else rung


# --- reference, inputs, ladder ------------------------------------------------------------------------
def softmax_reference(x):
    """Row softmax in float64 with the chapter's masking convention (a fully masked row gives zeros)."""
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=1, keepdims=True) if x.shape[1] else np.zeros((x.shape[0], 1))
    shift = np.where(np.isneginf(m), 0.0, m)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - shift)
    total = e.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)


def softmax_inputs(size, rng):
    """Rows of N(0, 3²), every third row lifted into [80, 100] (exp overflows there without the shift),
    and every fifth row with about half its entries masked to -inf (never all of them: torch.softmax, the
    baseline, would give NaN)."""
    rows, cols = size
    x = rng.normal(0.0, 3.0, size=(rows, cols)).astype(np.float32)
    x[::3] = rng.uniform(80.0, 100.0, size=x[::3].shape).astype(np.float32)
    masked = rng.random(x[1::5].shape) < 0.5
    masked[:, 0] = False
    x[1::5][masked] = -np.inf
    return (x,)


def softmax_tolerance(x, expected):
    """Each output divides by a sum of `cols` terms: the K-scaled rule with K = cols, doubled (the exp of
    each term adds its own rounding), plus an absolute floor for outputs that underflow."""
    return Tolerance(rtol=2 * k_scaled_rtol(x.shape[1]), atol=1e-7)


def _torch_softmax(x, out):
    """torch.softmax written straight into the preallocated output (the softmax.int_out overload). A torch
    without that overload gets softmax plus a copy, which is said, since it slows the baseline."""
    import torch

    try:
        torch.softmax(x, 1, out=out)
    except TypeError:
        if not _torch_softmax.warned:
            print("torch.softmax has no out= in this torch: the baseline is softmax + copy_ (one extra pass)")
            _torch_softmax.warned = True
        out.copy_(torch.softmax(x, 1))


_torch_softmax.warned = False


SIZES = [(8192, 8192), (32768, 4096), (1024, 65536), (131072, 512)]

LADDERS = [
    Ladder(
        chapter=CHAPTER, topic="softmax",
        description="row softmax of a (rows, cols) float32 matrix: read rows·cols, write rows·cols",
        make_inputs=softmax_inputs, out_shape=lambda x: x.shape, reference=softmax_reference,
        bytes=lambda size: 8 * size[0] * size[1], flops=None, unit="GB/s",
        sizes=SIZES, sim_sizes=[(3, 300)],
        rungs=[Rung("softmax_three_pass_kernel", softmax_three_pass_expf, "block per row, 3 reads, expf"),
               Rung("softmax_three_pass_fastmath_kernel", softmax_three_pass_fastmath,
                    "block per row, 3 reads, __expf"),
               Rung("softmax_online_kernel", softmax_online, "block per row, 2 reads, (m, l) merge"),
               Rung("softmax_warp_per_row_kernel", softmax_warp_per_row, "warp per row, 2 reads"),
               Rung("softmax_on_chip_kernel", softmax_on_chip,
                    f"block per row, row in registers, 1 read (rows > {ON_CHIP_MAX_COLS}: online, 2 reads)"),
               Rung("softmax_on_chip_fastmath_kernel", softmax_on_chip_fastmath,
                    "softmax_on_chip_kernel with __expf"),
               Rung("softmax_warp_vector_kernel", softmax_warp_vector,
                    f"{VECTOR_ROWS_PER_WARP} rows per warp in registers, 16-byte loads, 1 read "
                    f"(rows > {VECTOR_MAX_COLS}: on_chip)"),
               Rung("softmax_on_chip_shared_kernel", softmax_on_chip_shared,
                    f"{SHARED_THREADS} threads per row, registers + shared memory, 1 read "
                    f"(rows ≤ {ON_CHIP_MAX_COLS}: on_chip)"),
               Rung("softmax_on_chip_async_kernel", softmax_on_chip_async,
                    f"16-byte transfers all in flight, 1 read: {ASYNC_THREADS} threads per row, shared part "
                    f"copied by cp.async; rows of {VECTOR_MAX_COLS + 4}-{ASYNC_ROW_MAX_COLS}: "
                    f"{ASYNC_ROW_THREADS} threads, registers only (other rows: on_chip_shared)")],
        baselines=[Baseline("torch.softmax", _torch_softmax, "torch.softmax(x, 1, out=out)")],
        tolerance=softmax_tolerance,
    ),
    copy_ceiling(CHAPTER, SIZES),
]


# --- recorded extras: exp accuracy, kernel resources --------------------------------------------------
def exp_values(x, out):
    """out[i] = exp(x[i]) in float32: compiled with expf and with fastmath's __expf to measure both."""
    i = cuda.grid(1)
    if i < x.size:
        out[i] = math.exp(x[i])


exp_expf_kernel = cuda.jit(exp_values)
exp_fastmath_kernel = cuda.jit(fastmath=True)(exp_values)


def exp_error_table(x, got):
    """Per-input error of float32 exp results `got` against float64 exp(x): (ulps, relative error). An ulp
    is the spacing of float32 at the exact result; results below float32's normal range are skipped
    (fastmath flushes them to zero by design)."""
    exact = np.exp(np.asarray(x, dtype=np.float64))
    normal = exact >= np.finfo(np.float32).tiny
    exact, got = exact[normal], np.asarray(got, dtype=np.float64)[normal]
    ulp = np.spacing(exact.astype(np.float32)).astype(np.float64)
    return np.abs(got - exact) / ulp, np.abs(got - exact) / exact, np.asarray(x)[normal]


def record_exp_accuracy(folder, env: dict, n: int = 1 << 24) -> Path:
    """The measured error of expf and __expf over the inputs softmax gives exp (x - m ≤ 0): n float32
    uniform in [-87, 0] and n in [-1, 0], binned by |x|, against numpy's float64 exp."""
    import pandas as pd

    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-87.0, 0.0, n), rng.uniform(-1.0, 0.0, n)]).astype(np.float32)
    d_x = cuda.to_device(x)
    d_out = cuda.device_array_like(d_x)
    threads = 256
    rows = []
    bins = [0, 1, 4, 16, 32, 64, 88]
    for name, kernel in [("expf", exp_expf_kernel), ("__expf (fastmath)", exp_fastmath_kernel)]:
        kernel[(x.size + threads - 1) // threads, threads](d_x, d_out)
        ulps, rel, xs = exp_error_table(x, d_out.copy_to_host())
        for lo, hi in zip(bins[:-1], bins[1:]):
            sel = (-xs >= lo) & (-xs < hi)
            if sel.any():
                rows.append({"function": name, "x_from": -hi, "x_to": -lo, "inputs": int(sel.sum()),
                             "max_ulp": float(ulps[sel].max()), "mean_ulp": float(ulps[sel].mean()),
                             "max_rel_error": float(rel[sel].max()), **env})
    path = Path(folder) / f"{CHAPTER}.exp_accuracy.csv"
    pd.DataFrame(rows).to_csv(path, index=False, float_format="%.6g")
    return path


def record_kernel_resources(folder, env: dict) -> Path:
    """Registers, local memory and shared memory (static + dynamic) of each kernel as compiled for the rows
    it is timed on — 8192 wide, and for the three kernels made for other widths, 512 and 65536 (local memory
    0: the row stayed in registers) — after checking each on a 4-row input of that width."""
    import pandas as pd

    shared_kernel, shared_bytes = on_chip_shared_kernel(65536)
    async_kernel, async_bytes = on_chip_async_kernel(65536)
    stats = []
    for name, launch, cols, kernel, threads, dynamic in [
            ("softmax_three_pass_kernel", softmax_three_pass_expf, 8192, softmax_three_pass_kernel,
             ROW_THREADS, 0),
            ("softmax_three_pass_fastmath_kernel", softmax_three_pass_fastmath, 8192,
             softmax_three_pass_fastmath_kernel, ROW_THREADS, 0),
            ("softmax_online_kernel", softmax_online, 8192, softmax_online_kernel, ROW_THREADS, 0),
            ("softmax_warp_per_row_kernel", softmax_warp_per_row, 8192, softmax_warp_per_row_kernel,
             WARP_ROWS_PER_BLOCK * WARP, 0),
            ("softmax_on_chip_kernel", softmax_on_chip, 8192, on_chip_kernel(8192), ROW_THREADS, 0),
            ("softmax_on_chip_fastmath_kernel", softmax_on_chip_fastmath, 8192, on_chip_kernel(8192, True),
             ROW_THREADS, 0),
            ("softmax_warp_vector_kernel", softmax_warp_vector, 512, warp_vector_kernel(512),
             VECTOR_WARPS * WARP, 0),
            ("softmax_on_chip_shared_kernel", softmax_on_chip_shared, 65536, shared_kernel, SHARED_THREADS,
             shared_bytes),
            ("softmax_on_chip_async_kernel", softmax_on_chip_async, 65536, async_kernel, ASYNC_THREADS,
             async_bytes),
            ("softmax_on_chip_async_kernel", softmax_on_chip_async, 8192, async_row_kernel(8192),
             ASYNC_ROW_THREADS, 0)]:
        (xs_small,) = softmax_inputs((4, cols), np.random.default_rng(1))
        expected = softmax_reference(xs_small)
        tol = softmax_tolerance(xs_small, expected)
        d_small = cuda.to_device(xs_small)
        d_res = cuda.device_array_like(d_small)
        launch(d_small, d_res)
        err = np.abs(d_res.copy_to_host() - expected)
        if not np.all(err <= tol.rtol * np.abs(expected) + tol.atol):
            raise AssertionError(f"{name} is wrong at 4x{cols}; no statistics recorded")
        compiled = next(iter(kernel.overloads.values()))  # one signature per kernel
        stats.append({"kernel": name, "cols": cols, "threads_per_block": threads,
                      "registers_per_thread": int(compiled.regs_per_thread),
                      "local_bytes_per_thread": int(compiled.local_mem_per_thread),
                      "shared_bytes_per_block": int(compiled.shared_mem_per_block) + dynamic,
                      "max_rel_error": float(np.max(np.where(expected > 1e-7, err / np.abs(expected), 0))),
                      **env})
    path = Path(folder) / f"{CHAPTER}.kernel_resources.csv"
    pd.DataFrame(stats).to_csv(path, index=False, float_format="%.6g")
    return path


# --- recorded extra: where the bytes of the two-read and three-read kernels come from -----------------
NCU_METRICS = ["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",  # 32-byte sectors the loads asked L1 for
               "lts__t_sectors_srcunit_tex_op_read.sum",          # ... that missed L1 and went to L2
               "dram__bytes_read.sum",                            # bytes that missed L2 too (HBM)
               "smsp__inst_executed.sum"]                         # warp instructions issued
NCU_KERNELS = [("softmax_three_pass_kernel", softmax_three_pass_expf),
               ("softmax_online_kernel", softmax_online)]


def ncu_workload(sizes):
    """Launch each of NCU_KERNELS once at each size, in that order (run under ncu)."""
    rng = np.random.default_rng(0)
    for size in sizes:
        (x,) = softmax_inputs(size, rng)
        d_x = cuda.to_device(x)
        d_out = cuda.device_array_like(d_x)
        for _, launch in NCU_KERNELS:
            launch(d_x, d_out)
        cuda.synchronize()
        del d_x, d_out


def record_ncu(folder, env: dict, sizes=SIZES) -> Path | None:
    """Nsight Compute's counts for the three-pass and the online kernel at each size, per element: global
    load sectors asked of L1, of them the ones sent on to L2, bytes read from HBM, and instructions. Writes
    softmax.ncu.csv, or returns None (and says why) where ncu is missing or fails."""
    import csv
    import shutil
    import subprocess


    ncu = shutil.which("ncu")
    if ncu is None:
        print("softmax: ncu not found, counters not recorded")
        return None
    labels = ["x".join(map(str, s)) for s in sizes]
    cmd = [ncu, "--clock-control", "none", "--csv", "--metrics", ",".join(NCU_METRICS), sys.executable, "-m",
           "kernels.softmax", "--ncu-workload", *labels]
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True,
                          timeout=300)
    measured = parse_csv(proc.stdout)
    expected = [(label, size, name) for label, size in zip(labels, sizes) for name, _ in NCU_KERNELS]
    if proc.returncode != 0 or len(measured) != len(expected):
        print(f"softmax: ncu run failed (exit {proc.returncode}, {len(measured)} of {len(expected)} launches "
              f"profiled): counters not recorded\n{proc.stderr[-2000:]}\n{proc.stdout[-2000:]}")
        return None
    rows = []
    for (label, size, name), got in zip(expected, measured):
        if name.removesuffix("_kernel") not in got["name"]:
            print(f"softmax: ncu launch {got['name']!r} is not {name}: counters not recorded")
            return None
        elements = size[0] * size[1]
        for metric in NCU_METRICS:
            value = got["metrics"].get(metric, float("nan"))
            rows.append({"kernel": name, "size": label, "metric": metric, "value": value,
                         "per_element": value / elements, **env})
    path = Path(folder) / f"{CHAPTER}.ncu.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


# --- recorded extra: how many cp.async groups rung 7 splits its shared part into ---------------------
ASYNC_GROUP_COUNTS = (1, 2, 4, 8)
ASYNC_GROUPS_SIZE = (1024, 65536)


def record_async_groups(folder, env: dict) -> Path:
    """softmax.async_groups.csv: the cp.async kernel at ASYNC_GROUPS_SIZE with each of ASYNC_GROUP_COUNTS
    commit groups (the rung's configuration is one of them), each checked against float64, then timed."""
    import pandas as pd

    from lib.measure.timing import time_cuda

    rows, cols = ASYNC_GROUPS_SIZE
    (x,) = softmax_inputs(ASYNC_GROUPS_SIZE, np.random.default_rng(2))
    expected = softmax_reference(x)
    tol = softmax_tolerance(x, expected)
    d_x = cuda.to_device(x)
    d_out = cuda.device_array_like(d_x)
    stats = []
    for groups in ASYNC_GROUP_COUNTS:
        kernel, shared_bytes = on_chip_async_kernel(cols, groups=groups)
        args = (d_x.reshape(rows * cols), d_out.reshape(rows * cols), cols)
        allow_dynamic_shared(kernel, args, shared_bytes)
        launch = lambda: kernel[rows, ASYNC_THREADS, 0, shared_bytes](*args)  # noqa: E731
        d_out.copy_to_device(np.full(x.shape, np.nan, np.float32))
        launch()
        got = d_out.copy_to_host()
        if not np.all(np.abs(got - expected) <= tol.rtol * np.abs(expected) + tol.atol):
            raise AssertionError(f"softmax_on_chip_async_kernel with {groups} groups is wrong at {rows}x{cols}; "
                                 "not timed")
        timing = time_cuda(launch, bytes=8 * x.size)
        compiled = next(iter(kernel.overloads.values()))
        stats.append({"groups": groups, "configured": groups == ASYNC_GROUPS, "size": f"{rows}x{cols}",
                      "median_ms": timing.median_ms, "q1_ms": timing.q1_ms, "q3_ms": timing.q3_ms,
                      "reps": timing.reps, "gbps": timing.gbps,
                      "registers_per_thread": int(compiled.regs_per_thread),
                      "local_bytes_per_thread": int(compiled.local_mem_per_thread), **env})
    path = Path(folder) / f"{CHAPTER}.async_groups.csv"
    pd.DataFrame(stats).to_csv(path, index=False, float_format="%.6g")
    return path


def record_extra(folder) -> list:
    """On the GPU: the accuracy of expf and __expf, each kernel's resources, rung 7's commit groups, and
    (with ncu) the counters of the three-pass and online kernels (see the four above)."""
    from lib.measure.results import environment

    env = environment()
    paths = [record_exp_accuracy(folder, env), record_kernel_resources(folder, env),
             record_async_groups(folder, env)]
    ncu_path = record_ncu(folder, env)
    return paths + ([ncu_path] if ncu_path is not None else [])


if __name__ == "__main__" and sys.argv[1:2] == ["--ncu-workload"]:
    ncu_workload([tuple(int(n) for n in label.split("x")) for label in sys.argv[2:]])


# The book's own small launches (demos, last passes, one-thread set-ups) are deliberate: no low-occupancy
# warning for them (lib/runtime/quiet_launches.py); a reader's kernels still get it.
quiet_kernels(globals())
