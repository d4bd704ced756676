"""Kernels of the matrix-multiplication chapter: the SGEMM ladder C = A @ B (float32, row-major, any M, N, K),
from one thread per output to warp-tiled, double-buffered, vectorised and autotuned kernels.

Every kernel handles ragged edges: tiles that hang over the matrix are zero-filled when loaded from global
memory and only in-bounds outputs are stored, so no M, N or K needs to be a multiple of any tile size.

Where the rest lives: chapters/matmul.md (the page); lib/grading/variants/matmul.py (its exercises'
known-wrong variants); tests/test_matmul.py (tests); data/results/matmul.* (recorded on the H200). Record it
with ``python -m tools.record matmul`` on a GPU; on the simulator the same kernels run through the page's
checks and the tests.
"""
from __future__ import annotations

import csv
import math
import time
from pathlib import Path

import numpy as np
from numba import cuda, float32

import lib
from lib.measure.bench import Baseline, Ladder, Rung
from lib.grading.exercises import matmul_tolerance
from lib.runtime.quiet_launches import quiet, quiet_kernels
from lib.runtime.validate import require
from lib.runtime.vector import SMEM_ALIGN, load_float4_2d

CHAPTER = "matmul"

# --- rungs 0-1: one thread per output ---------------------------------------------------------------
NAIVE_BLOCK = 32            # 32 × 32 = 1024 threads per block, one output each

# --- rung 2: shared-memory tiles --------------------------------------------------------------------
TILE = 32                   # a TILE × TILE block computes a TILE × TILE tile of C, stepping TILE along K

# --- rung 3: 1-D block tiling (a thread computes a column of TM1 outputs) ----------------------------
BM1, BN1, BK1, TM1 = 64, 64, 8, 8
THREADS1 = BM1 * BN1 // TM1            # 512
assert THREADS1 == BM1 * BK1 == BK1 * BN1, "each thread loads one element of the A tile and one of the B tile"

# --- rungs 4-5: 2-D block tiling (a thread computes a TM2 × TN2 patch in registers) -------------------
BM2, BN2, BK2, TM2, TN2 = 128, 128, 8, 8, 8
THREADS2 = (BM2 // TM2) * (BN2 // TN2)  # 256
assert (BM2 * BK2) % THREADS2 == 0 and (BK2 * BN2) % THREADS2 == 0 and TM2 % 4 == 0 and TN2 % 4 == 0
assert BK2 % 4 == 0 and BN2 % 4 == 0 and THREADS2 == BM2 * BK2 // 4 == BK2 * BN2 // 4, \
    "rung 5: every thread loads exactly one float4 of the A tile and one of the B tile"

# --- rungs 6-7: warp tiling. A warp's 32 lanes form LANES_M × LANES_N; each lane owns TM × TN outputs
# in each of the warp tile's (WM / (LANES_M·TM)) × (WN / (LANES_N·TN)) sub-tiles.
LANES_M, LANES_N = 4, 8

WARPTILE_DEFAULT = dict(BM=128, BN=128, BK=16, WM=64, WN=64, TM=8, TN=4)


# ------------------------------------------------------------------------------------------------
# Rungs 8-9 address memory with 32-bit offsets. numba computes every index in 64-bit integers and, for a
# signed index, adds a select that wraps a negative index around (numpy semantics); in an SGEMM's K loop
# that bookkeeping costs more instructions than the loads themselves. These three accessors compute
# &array[row, col] as data + (row·shape[1] + col) in 32-bit integers, with no wraparound (C-contiguous
# 2-D arrays of < 2^31 elements, non-negative indices: the launcher checks the sizes).
# ------------------------------------------------------------------------------------------------
if lib.SIMULATOR:
    def load4_i32(array, row, col):
        """array[row, col:col + 4] (simulator: four scalar reads)."""
        return array[row, col], array[row, col + 1], array[row, col + 2], array[row, col + 3]

    def store4_i32(array, row, col, x0, x1, x2, x3):
        """array[row, col:col + 4] = x0, x1, x2, x3 (simulator: four scalar writes)."""
        array[row, col], array[row, col + 1], array[row, col + 2], array[row, col + 3] = x0, x1, x2, x3

    def store_i32(array, row, col, x):
        """array[row, col] = x."""
        array[row, col] = x
else:
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    def _address_i32(context, builder, sig, args):
        """Pointer to array[row, col] of a C-contiguous 2-D array, the offset computed in 32 bits."""
        i32 = ir.IntType(32)
        ary = context.make_array(sig.args[0])(context, builder, value=args[0])
        row = builder.trunc(context.cast(builder, args[1], sig.args[1], types.intp), i32)
        col = builder.trunc(context.cast(builder, args[2], sig.args[2], types.intp), i32)
        ld = builder.trunc(cgutils.unpack_tuple(builder, ary.shape, 2)[1], i32)
        offset = builder.add(builder.mul(row, ld, flags=["nsw", "nuw"]), col, flags=["nsw", "nuw"])
        return builder.gep(ary.data, [builder.zext(offset, ir.IntType(64))], inbounds=True)

    @intrinsic
    def load4_i32(typingctx, array, row, col):
        """array[row, col:col + 4] in one 16-byte load (LDG.128 / LDS.128); the address must be 16-byte
        aligned."""
        def codegen(context, builder, sig, args):
            ptr = _address_i32(context, builder, sig, args)
            vec = ir.VectorType(ir.FloatType(), 4)
            loaded = builder.load(builder.bitcast(ptr, vec.as_pointer(addrspace=ptr.type.addrspace)), align=16)
            parts = [builder.extract_element(loaded, ir.Constant(ir.IntType(32), i)) for i in range(4)]
            return context.make_tuple(builder, sig.return_type, parts)

        return types.UniTuple(types.float32, 4)(array, row, col), codegen

    @intrinsic
    def store4_i32(typingctx, array, row, col, x0, x1, x2, x3):
        """array[row, col:col + 4] = x0..x3 in one 16-byte store (STS.128); 16-byte aligned address."""
        def codegen(context, builder, sig, args):
            ptr = _address_i32(context, builder, sig, args)
            vec = ir.VectorType(ir.FloatType(), 4)
            value = ir.Constant(vec, ir.Undefined)
            for i, (x, x_type) in enumerate(zip(args[3:], sig.args[3:])):
                x = context.cast(builder, x, x_type, types.float32)
                value = builder.insert_element(value, x, ir.Constant(ir.IntType(32), i))
            builder.store(value, builder.bitcast(ptr, vec.as_pointer(addrspace=ptr.type.addrspace)), align=16)
            return context.get_dummy_value()

        return types.void(array, row, col, x0, x1, x2, x3), codegen

    @intrinsic
    def store_i32(typingctx, array, row, col, x):
        """array[row, col] = x."""
        def codegen(context, builder, sig, args):
            ptr = _address_i32(context, builder, sig, args)
            builder.store(context.cast(builder, args[3], sig.args[3], types.float32), ptr, align=4)
            return context.get_dummy_value()

        return types.void(array, row, col, x), codegen


# ------------------------------------------------------------------------------------------------
# Rung 0 and 1: one thread per output
# ------------------------------------------------------------------------------------------------
@cuda.jit
def matmul_naive_kernel(a, b, c):
    """c[row, col] = sum_p a[row, p] · b[p, col], one thread per output, threadIdx.x walking down rows.

    Memory: the 32 lanes of a warp hold 32 consecutive *rows* and one column: each step of the loop reads
    a[row, p] from 32 different rows (32 sectors of 32 bytes for 128 useful bytes) and the same b[p, col]
    (a broadcast); the stores to c are strided the same way. Every output re-reads a row of A and a column
    of B: 8·K bytes requested per 2·K FLOPs, 0.25 FLOP per byte — the caches absorb most of it.
    Launch: 2-D blocks of NAIVE_BLOCK × NAIVE_BLOCK, grid (ceil(M / 32), ceil(N / 32)); threads past the
    edge return.
    """
    row = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    col = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)  # a float32 accumulator: a Python 0.0 would make the sum float64
        for p in range(a.shape[1]):
            acc += a[row, p] * b[p, col]
        c[row, col] = acc


@cuda.jit
def matmul_coalesced_kernel(a, b, c):
    """The naive kernel with threadIdx.x walking along a row of C instead of down a column.

    Memory: a warp now holds 32 consecutive *columns* of one row: b[p, col] is one 128-byte coalesced
    read, a[row, p] one broadcast, and the store to c one 128-byte write. Same FLOPs and the same 8·K bytes
    requested per output as rung 0, but each request is a whole cache line instead of 32 scattered sectors.
    Launch: 2-D blocks of NAIVE_BLOCK × NAIVE_BLOCK, grid (ceil(N / 32), ceil(M / 32)).
    """
    col = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    row = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[1]):
            acc += a[row, p] * b[p, col]
        c[row, col] = acc


# ------------------------------------------------------------------------------------------------
# Rung 2: tiles of A and B staged in shared memory
# ------------------------------------------------------------------------------------------------
@cuda.jit
def matmul_shared_tiled_kernel(a, b, c):
    """A TILE × TILE block computes a TILE × TILE tile of c, staging TILE × TILE tiles of a and b in shared
    memory so each global element is read once per block instead of once per thread.

    Memory: per step along K a block reads 2·TILE² floats from global memory (coalesced rows) and does
    2·TILE³ FLOPs from shared memory: TILE/4 = 8 FLOPs per global byte. Shared reads: a_tile[ty, p] is a
    broadcast within a warp (one ty), b_tile[p, tx] 32 consecutive words (no bank conflict). 8 KiB of
    shared memory per block.
    Launch: 2-D blocks of TILE × TILE, grid (ceil(N / TILE), ceil(M / TILE)); out-of-range tile elements
    are loaded as 0, so the inner loop needs no guard; only in-range outputs are stored.
    """
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    m, k = a.shape
    n = b.shape[1]
    acc = float32(0.0)
    for k0 in range(0, k, TILE):
        a_tile[ty, tx] = a[row, k0 + tx] if row < m and k0 + tx < k else float32(0.0)
        b_tile[ty, tx] = b[k0 + ty, col] if k0 + ty < k and col < n else float32(0.0)
        cuda.syncthreads()  # the whole tile is loaded before anyone reads it
        for p in range(TILE):
            acc += a_tile[ty, p] * b_tile[p, tx]
        cuda.syncthreads()  # everyone is done with the tile before it is overwritten
    if row < m and col < n:
        c[row, col] = acc


# ------------------------------------------------------------------------------------------------
# Rung 3: 1-D block tiling — each thread computes TM1 outputs of one column
# ------------------------------------------------------------------------------------------------
@cuda.jit
def matmul_blocktile_1d_kernel(a, b, c):
    """A block of THREADS1 threads computes a BM1 × BN1 tile of c; each thread a column of TM1 outputs,
    kept in registers, so one value of the b tile read from shared memory feeds TM1 FMAs.

    Memory: global traffic per block step: (BM1 + BN1)·BK1 floats for 2·BM1·BN1·BK1 FLOPs, i.e.
    BM1·BN1 / (2·(BM1 + BN1)) = 16 FLOPs per global byte. Shared: per FMA 1 + 1/TM1 loads instead of 2.
    a_tile[r, p] is read with r fixed across a warp (broadcast); b_tile[p, col] by 32 consecutive columns.
    4 KiB of shared memory.
    Launch: 1-D blocks of THREADS1 = 512, grid (ceil(N / BN1), ceil(M / BM1)).
    """
    a_tile = cuda.shared.array((BM1, BK1), float32)
    b_tile = cuda.shared.array((BK1, BN1), float32)
    acc = cuda.local.array(TM1, float32)
    t = cuda.threadIdx.x
    m, k = a.shape
    n = b.shape[1]
    block_row = cuda.blockIdx.y * BM1
    block_col = cuda.blockIdx.x * BN1
    thread_col = t % BN1
    thread_row = t // BN1               # 0 .. BM1/TM1 - 1: this thread's rows are thread_row·TM1 + i
    a_row, a_col = t // BK1, t % BK1    # the element of the a tile this thread loads
    b_row, b_col = t // BN1, t % BN1
    for i in range(TM1):
        acc[i] = float32(0.0)
    for k0 in range(0, k, BK1):
        gr, gk = block_row + a_row, k0 + a_col
        a_tile[a_row, a_col] = a[gr, gk] if gr < m and gk < k else float32(0.0)
        gk, gc = k0 + b_row, block_col + b_col
        b_tile[b_row, b_col] = b[gk, gc] if gk < k and gc < n else float32(0.0)
        cuda.syncthreads()
        for p in range(BK1):
            b_value = b_tile[p, thread_col]   # one shared read, reused TM1 times
            for i in range(TM1):
                acc[i] += a_tile[thread_row * TM1 + i, p] * b_value
        cuda.syncthreads()
    col = block_col + thread_col
    for i in range(TM1):
        row = block_row + thread_row * TM1 + i
        if row < m and col < n:
            c[row, col] = acc[i]


# ------------------------------------------------------------------------------------------------
# Rung 4: 2-D block tiling — each thread computes a TM2 × TN2 patch
# ------------------------------------------------------------------------------------------------
@cuda.jit
def matmul_blocktile_2d_kernel(a, b, c):
    """A block of THREADS2 threads computes a BM2 × BN2 tile of c; each thread a TM2 × TN2 patch held in
    registers (an outer product of TM2 values of a and TN2 values of b per step along K).

    Memory: global: BM2·BN2 / (2·(BM2 + BN2)) = 32 FLOPs per global byte (the tile is 128 × 128). Shared:
    TM2 + TN2 = 16 loads feed TM2·TN2 = 64 FMAs (4 FMAs per load, against 1 in rung 2). b_tile[p, col·8+j]
    across a warp is a stride-8 pattern (a 4-way bank conflict); a_tile[row·8+i, p] a stride-8·BK2 one.
    8 KiB of shared memory; ~64 accumulators + 16 operands in registers.
    Launch: 1-D blocks of THREADS2 = 256, grid (ceil(N / BN2), ceil(M / BM2)).
    """
    a_tile = cuda.shared.array((BM2, BK2), float32)
    b_tile = cuda.shared.array((BK2, BN2), float32)
    acc = cuda.local.array((TM2, TN2), float32)
    a_frag = cuda.local.array(TM2, float32)
    b_frag = cuda.local.array(TN2, float32)
    t = cuda.threadIdx.x
    m, k = a.shape
    n = b.shape[1]
    block_row = cuda.blockIdx.y * BM2
    block_col = cuda.blockIdx.x * BN2
    thread_row = t // (BN2 // TN2)
    thread_col = t % (BN2 // TN2)
    for i in range(TM2):
        for j in range(TN2):
            acc[i, j] = float32(0.0)
    for k0 in range(0, k, BK2):
        for e in range(t, BM2 * BK2, THREADS2):     # THREADS2 consecutive elements per pass: coalesced
            r, q = e // BK2, e % BK2
            a_tile[r, q] = a[block_row + r, k0 + q] if block_row + r < m and k0 + q < k else float32(0.0)
        for e in range(t, BK2 * BN2, THREADS2):
            r, q = e // BN2, e % BN2
            b_tile[r, q] = b[k0 + r, block_col + q] if k0 + r < k and block_col + q < n else float32(0.0)
        cuda.syncthreads()
        for p in range(BK2):
            for i in range(TM2):
                a_frag[i] = a_tile[thread_row * TM2 + i, p]
            for j in range(TN2):
                b_frag[j] = b_tile[p, thread_col * TN2 + j]
            for i in range(TM2):
                for j in range(TN2):
                    acc[i, j] += a_frag[i] * b_frag[j]
        cuda.syncthreads()
    for i in range(TM2):
        row = block_row + thread_row * TM2 + i
        for j in range(TN2):
            col = block_col + thread_col * TN2 + j
            if row < m and col < n:
                c[row, col] = acc[i, j]


# ------------------------------------------------------------------------------------------------
# Rung 5: float4 global loads, the A tile stored transposed
# ------------------------------------------------------------------------------------------------
@cuda.jit
def matmul_vectorized_kernel(a, b, c):
    """Rung 4 with 16-byte global loads and the a tile stored transposed (a_tile_t[p, row]), so that a
    thread's TM2 values of a, like its TN2 values of b, are consecutive words in shared memory and can be
    read with 16-byte shared loads (LDS.128) instead of TM2 separate ones.

    Memory: the same 32 FLOPs per global byte as rung 4; each thread loads exactly one float4 of the a tile
    (4 consecutive k of one row) and one of the b tile, when the row length allows 16-byte alignment
    (K % 4 == 0 for a, N % 4 == 0 for b) and the four elements are in range; otherwise four guarded scalar
    loads. The transposing store into a_tile_t is a 2-way bank conflict, paid once per tile.
    Launch: 1-D blocks of THREADS2 = 256, grid (ceil(N / BN2), ceil(M / BM2)).
    """
    a_tile_t = cuda.shared.array((BK2, BM2), float32, alignment=SMEM_ALIGN)
    b_tile = cuda.shared.array((BK2, BN2), float32, alignment=SMEM_ALIGN)
    acc = cuda.local.array((TM2, TN2), float32)
    a_frag = cuda.local.array(TM2, float32)
    b_frag = cuda.local.array(TN2, float32)
    t = cuda.threadIdx.x
    m, k = a.shape
    n = b.shape[1]
    a_vec_ok = k % 4 == 0
    b_vec_ok = n % 4 == 0
    block_row = cuda.blockIdx.y * BM2
    block_col = cuda.blockIdx.x * BN2
    thread_row = t // (BN2 // TN2)
    thread_col = t % (BN2 // TN2)
    a_r, a_q = t // (BK2 // 4), (t % (BK2 // 4)) * 4   # this thread's float4 of the a tile
    b_r, b_q = t // (BN2 // 4), (t % (BN2 // 4)) * 4   # and of the b tile
    for i in range(TM2):
        for j in range(TN2):
            acc[i, j] = float32(0.0)
    for k0 in range(0, k, BK2):
        gr, gk = block_row + a_r, k0 + a_q
        if a_vec_ok and gr < m and gk + 3 < k:
            x0, x1, x2, x3 = load_float4_2d(a, gr, gk)
        else:
            x0 = a[gr, gk] if gr < m and gk < k else float32(0.0)
            x1 = a[gr, gk + 1] if gr < m and gk + 1 < k else float32(0.0)
            x2 = a[gr, gk + 2] if gr < m and gk + 2 < k else float32(0.0)
            x3 = a[gr, gk + 3] if gr < m and gk + 3 < k else float32(0.0)
        a_tile_t[a_q, a_r] = x0
        a_tile_t[a_q + 1, a_r] = x1
        a_tile_t[a_q + 2, a_r] = x2
        a_tile_t[a_q + 3, a_r] = x3
        gk, gc = k0 + b_r, block_col + b_q
        if b_vec_ok and gk < k and gc + 3 < n:
            y0, y1, y2, y3 = load_float4_2d(b, gk, gc)
        else:
            y0 = b[gk, gc] if gk < k and gc < n else float32(0.0)
            y1 = b[gk, gc + 1] if gk < k and gc + 1 < n else float32(0.0)
            y2 = b[gk, gc + 2] if gk < k and gc + 2 < n else float32(0.0)
            y3 = b[gk, gc + 3] if gk < k and gc + 3 < n else float32(0.0)
        b_tile[b_r, b_q] = y0
        b_tile[b_r, b_q + 1] = y1
        b_tile[b_r, b_q + 2] = y2
        b_tile[b_r, b_q + 3] = y3
        cuda.syncthreads()
        for p in range(BK2):
            for i in range(0, TM2, 4):   # consecutive words: one 16-byte shared load (LDS.128) per 4
                a_frag[i], a_frag[i + 1], a_frag[i + 2], a_frag[i + 3] = \
                    load_float4_2d(a_tile_t, p, thread_row * TM2 + i)
            for j in range(0, TN2, 4):
                b_frag[j], b_frag[j + 1], b_frag[j + 2], b_frag[j + 3] = \
                    load_float4_2d(b_tile, p, thread_col * TN2 + j)
            for i in range(TM2):
                for j in range(TN2):
                    acc[i, j] += a_frag[i] * b_frag[j]
        cuda.syncthreads()
    for i in range(TM2):
        row = block_row + thread_row * TM2 + i
        for j in range(TN2):
            col = block_col + thread_col * TN2 + j
            if row < m and col < n:
                c[row, col] = acc[i, j]


# ------------------------------------------------------------------------------------------------
# Rungs 6-7: warp tiling with double-buffered shared memory, generated per configuration
# ------------------------------------------------------------------------------------------------
def warptile_shape(BM, BN, BK, WM, WN, TM, TN):
    """Derived sizes of a warp-tile configuration, or ValueError if it does not tile evenly."""
    if BM % WM or BN % WN:
        raise ValueError(f"the block tile {BM}×{BN} must be a whole number of {WM}×{WN} warp tiles")
    if WM % (LANES_M * TM) or WN % (LANES_N * TN):
        raise ValueError(f"a {WM}×{WN} warp tile must be whole sub-tiles of {LANES_M * TM}×{LANES_N * TN}")
    if BK % 4 or BN % 4 or TM % 4 or TN % 4:
        raise ValueError("BK, BN, TM and TN must be multiples of 4 (float4 loads)")
    threads = 32 * (BM // WM) * (BN // WN)
    a_loads, b_loads = BM * BK // 4, BK * BN // 4        # float4s per tile
    if a_loads % threads or b_loads % threads:
        raise ValueError(f"{threads} threads cannot split the tiles' float4 loads evenly")
    return dict(threads=threads, a_loads=a_loads // threads, b_loads=b_loads // threads,
                wm_iter=WM // (LANES_M * TM), wn_iter=WN // (LANES_N * TN),
                acc=(WM // (LANES_M * TM)) * TM * (WN // (LANES_N * TN)) * TN,
                smem_bytes=2 * 4 * BK * (BM + BN))


_WARPTILE_KERNELS: dict = {}


def make_warptile_kernel(BM, BN, BK, WM, WN, TM, TN):
    """Build (once per configuration) a warp-tiled SGEMM kernel whose tile sizes are compile-time
    constants: numba freezes the closure's variables as constants, so every loop over them unrolls and the
    accumulators live in registers. Returns (kernel, threads per block)."""
    key = (BM, BN, BK, WM, WN, TM, TN)
    if key in _WARPTILE_KERNELS:
        return _WARPTILE_KERNELS[key]
    shape = warptile_shape(*key)
    THREADS = shape["threads"]
    A_LOADS, B_LOADS = shape["a_loads"], shape["b_loads"]
    A_STEP = THREADS // (BK // 4)       # rows of the a tile covered by one pass of float4 loads
    B_STEP = THREADS // (BN // 4)
    WM_ITER, WN_ITER = shape["wm_iter"], shape["wn_iter"]
    SUB_M, SUB_N = LANES_M * TM, LANES_N * TN
    ACC_M, ACC_N = WM_ITER * TM, WN_ITER * TN
    WARPS_N = BN // WN
    TWO_BK = 2 * BK                     # double buffering: two tiles of BK rows

    @cuda.jit
    def matmul_warptile_kernel(a, b, c):
        """A block of THREADS threads computes a BM × BN tile of c; each warp a WM × WN part of it; each
        lane ACC_M × ACC_N outputs in registers, as WM_ITER × WN_ITER sub-tiles of TM × TN.

        Memory: global: BM·BN / (2·(BM + BN)) FLOPs per byte, loaded as float4 (guarded scalar loads at
        ragged edges or unaligned rows). Double-buffered shared tiles (2·BK·(BM + BN) floats): the next
        tile's global loads are issued into registers before the current tile is computed, and one
        barrier per step suffices. Shared reads: the 8 lanes of a row of the warp read 8·TN consecutive
        words of b (LDS.128, no conflict); the 4 rows of lanes read 4 TM-word runs of a (broadcasts).
        Launch: 1-D blocks of THREADS, grid (ceil(N / BN), ceil(M / BM)).
        """
        a_tile_t = cuda.shared.array((TWO_BK, BM), float32, alignment=SMEM_ALIGN)   # two buffers of BK rows
        b_tile = cuda.shared.array((TWO_BK, BN), float32, alignment=SMEM_ALIGN)
        acc = cuda.local.array((ACC_M, ACC_N), float32)
        a_frag = cuda.local.array(ACC_M, float32)
        b_frag = cuda.local.array(ACC_N, float32)
        a_next = cuda.local.array((A_LOADS, 4), float32)   # the next tile, in flight in registers
        b_next = cuda.local.array((B_LOADS, 4), float32)
        t = cuda.threadIdx.x
        m, k = a.shape
        n = b.shape[1]
        a_vec_ok = k % 4 == 0
        b_vec_ok = n % 4 == 0
        block_row = cuda.blockIdx.y * BM
        block_col = cuda.blockIdx.x * BN
        warp, lane = t // 32, t % 32
        warp_row = (warp // WARPS_N) * WM
        warp_col = (warp % WARPS_N) * WN
        lane_row = (lane // LANES_N) * TM
        lane_col = (lane % LANES_N) * TN
        a_r, a_q = t // (BK // 4), (t % (BK // 4)) * 4
        b_r, b_q = t // (BN // 4), (t % (BN // 4)) * 4
        for i in range(ACC_M):
            for j in range(ACC_N):
                acc[i, j] = float32(0.0)
        tiles = (k + BK - 1) // BK
        k0 = 0
        for s in range(A_LOADS):                       # tile 0 into registers
            gr, gk = block_row + a_r + s * A_STEP, k0 + a_q
            if a_vec_ok and gr < m and gk + 3 < k:
                a_next[s, 0], a_next[s, 1], a_next[s, 2], a_next[s, 3] = load_float4_2d(a, gr, gk)
            else:
                for q in range(4):
                    a_next[s, q] = a[gr, gk + q] if gr < m and gk + q < k else float32(0.0)
        for s in range(B_LOADS):
            gk, gc = k0 + b_r + s * B_STEP, block_col + b_q
            if b_vec_ok and gk < k and gc + 3 < n:
                b_next[s, 0], b_next[s, 1], b_next[s, 2], b_next[s, 3] = load_float4_2d(b, gk, gc)
            else:
                for q in range(4):
                    b_next[s, q] = b[gk, gc + q] if gk < k and gc + q < n else float32(0.0)
        for tile in range(tiles):
            buf = (tile % 2) * BK     # first row of this step's buffer
            # Buffer `buf` was last read two steps ago; the barrier of the previous step ensures every
            # thread has finished that computation, so it may be overwritten now.
            for s in range(A_LOADS):
                for q in range(4):
                    a_tile_t[buf + a_q + q, a_r + s * A_STEP] = a_next[s, q]
            for s in range(B_LOADS):
                for q in range(4):
                    b_tile[buf + b_r + s * B_STEP, b_q + q] = b_next[s, q]
            cuda.syncthreads()
            if tile + 1 < tiles:                       # the next tile's loads overlap this tile's FMAs
                k0 = (tile + 1) * BK
                for s in range(A_LOADS):
                    gr, gk = block_row + a_r + s * A_STEP, k0 + a_q
                    if a_vec_ok and gr < m and gk + 3 < k:
                        a_next[s, 0], a_next[s, 1], a_next[s, 2], a_next[s, 3] = load_float4_2d(a, gr, gk)
                    else:
                        for q in range(4):
                            a_next[s, q] = a[gr, gk + q] if gr < m and gk + q < k else float32(0.0)
                for s in range(B_LOADS):
                    gk, gc = k0 + b_r + s * B_STEP, block_col + b_q
                    if b_vec_ok and gk < k and gc + 3 < n:
                        b_next[s, 0], b_next[s, 1], b_next[s, 2], b_next[s, 3] = load_float4_2d(b, gk, gc)
                    else:
                        for q in range(4):
                            b_next[s, q] = b[gk, gc + q] if gk < k and gc + q < n else float32(0.0)
            for p in range(BK):
                for wi in range(WM_ITER):
                    for i in range(0, TM, 4):      # 16-byte shared loads (LDS.128)
                        x = wi * TM + i
                        a_frag[x], a_frag[x + 1], a_frag[x + 2], a_frag[x + 3] = \
                            load_float4_2d(a_tile_t, buf + p, warp_row + wi * SUB_M + lane_row + i)
                for wj in range(WN_ITER):
                    for j in range(0, TN, 4):
                        y = wj * TN + j
                        b_frag[y], b_frag[y + 1], b_frag[y + 2], b_frag[y + 3] = \
                            load_float4_2d(b_tile, buf + p, warp_col + wj * SUB_N + lane_col + j)
                for i in range(ACC_M):
                    for j in range(ACC_N):
                        acc[i, j] += a_frag[i] * b_frag[j]
        for wi in range(WM_ITER):
            for i in range(TM):
                row = block_row + warp_row + wi * SUB_M + lane_row + i
                for wj in range(WN_ITER):
                    for j in range(TN):
                        col = block_col + warp_col + wj * SUB_N + lane_col + j
                        if row < m and col < n:
                            c[row, col] = acc[wi * TM + i, wj * TN + j]

    _WARPTILE_KERNELS[key] = (quiet(matmul_warptile_kernel), THREADS)
    return _WARPTILE_KERNELS[key]


# ------------------------------------------------------------------------------------------------
# Rungs 8-9: the warp-tiled kernel with a lean K loop, then with its fragments prefetched in registers
# ------------------------------------------------------------------------------------------------
LEAN_DEFAULT = dict(BM=256, BN=128, BK=16, WM=64, WN=64, TM=8, TN=4)  # rung 7's recorded winner: one change at a time
# Rung 10: the prefetch loop re-tiled. A 128 × 256 block with K tiles of 8 and the step loop unrolled 8 times
# (all of a tile's steps): the fastest of 21 prefetch variants timed on the H200 (2026-12-01, 4096³: 45.8
# TFLOP/s against rung 9's 41.5 in the same run; .gpu/sgemm/explore2.py). In the offline SASS a larger share
# of a K tile's instructions are FFMA (0.85 against rung 9's 0.77).
PREFETCH_TUNED = dict(BM=128, BN=256, BK=8, WM=64, WN=64, TM=8, TN=4)
PREFETCH_TUNED_UNROLL = 8
_LEAN_KERNELS: dict = {}


def make_lean_kernel(BM, BN, BK, WM, WN, TM, TN, prefetch=False, min_blocks=1, unroll=2, a_pad=0):
    """Build (once per configuration) the warp-tiled SGEMM with a lean K loop: 32-bit addresses, no
    per-element guards inside K, and (prefetch=True) fragments double-buffered in registers, the step loop
    unrolled `unroll` (2, 4 or 8, at most BK) times. min_blocks is the resident blocks per SM that ptxas
    must allow (launch bounds cap the registers to fit them). a_pad (a multiple of 4) widens each row of
    the transposed A tile by that many floats, moving the rows that one warp's transposing stores hit onto
    other banks. Returns (kernel, threads per block)."""
    key = (BM, BN, BK, WM, WN, TM, TN, prefetch, min_blocks, unroll, a_pad)
    if key in _LEAN_KERNELS:
        return _LEAN_KERNELS[key]
    shape = warptile_shape(BM, BN, BK, WM, WN, TM, TN)
    if BK & (BK - 1) or unroll not in (2, 4, 8) or unroll > BK:
        raise ValueError(f"BK = {BK}, unroll = {unroll}: the fragment prefetch needs BK a power of two and "
                         "unroll 2, 4 or 8, at most BK")
    if a_pad % 4 or a_pad < 0:
        raise ValueError(f"a_pad = {a_pad}: the A tile's rows are read with 16-byte loads, so the padding must "
                         "be a non-negative multiple of 4 floats")
    UNROLL = unroll
    A_ROW = BM + a_pad                  # floats per row of the transposed A tile
    THREADS = shape["threads"]
    A_LOADS, B_LOADS = shape["a_loads"], shape["b_loads"]
    A_STEP = THREADS // (BK // 4)
    B_STEP = THREADS // (BN // 4)
    WM_ITER, WN_ITER = shape["wm_iter"], shape["wn_iter"]
    SUB_M, SUB_N = LANES_M * TM, LANES_N * TN
    ACC_M, ACC_N = WM_ITER * TM, WN_ITER * TN
    WARPS_N = BN // WN
    TWO_BK = 2 * BK
    bounds = {} if lib.SIMULATOR else {"launch_bounds": (THREADS, min_blocks)}

    @cuda.jit(device=True, inline="always")
    def fetch_tile(a, b, a_next, b_next, k0, a_row0, a_q, b_r, b_col0, fast):
        """The A and B tiles at k0 into registers. fast (a whole tile inside K, rows 16-byte aligned):
        float4 loads with no guard, rows of A and columns of B past the matrix clamped to the last one (they
        only feed outputs that are never stored). Otherwise (the last, ragged tile, or unaligned rows):
        guarded scalar loads, zero past every edge."""
        m, k = a.shape
        n = b.shape[1]
        for s in range(A_LOADS):
            gr = a_row0 + s * A_STEP
            if fast:
                a_next[s, 0], a_next[s, 1], a_next[s, 2], a_next[s, 3] = load4_i32(a, min(gr, m - 1), k0 + a_q)
            else:
                for q in range(4):
                    a_next[s, q] = a[gr, k0 + a_q + q] if gr < m and k0 + a_q + q < k else float32(0.0)
        for s in range(B_LOADS):
            gk = k0 + b_r + s * B_STEP
            if fast:
                b_next[s, 0], b_next[s, 1], b_next[s, 2], b_next[s, 3] = load4_i32(b, gk, min(b_col0, n - 4))
            else:
                for q in range(4):
                    b_next[s, q] = b[gk, b_col0 + q] if gk < k and b_col0 + q < n else float32(0.0)

    @cuda.jit(device=True, inline="always")
    def load_fragments(a_tile_t, b_tile, p, a_col0, b_col0, a_frag, b_frag):
        """Row p of the shared tiles: this lane's ACC_M values of A and ACC_N of B, as 16-byte loads."""
        for wi in range(WM_ITER):
            for i in range(0, TM, 4):
                x = wi * TM + i
                a_frag[x], a_frag[x + 1], a_frag[x + 2], a_frag[x + 3] = \
                    load_float4_2d(a_tile_t, p, a_col0 + wi * SUB_M + i)
        for wj in range(WN_ITER):
            for j in range(0, TN, 4):
                y = wj * TN + j
                b_frag[y], b_frag[y + 1], b_frag[y + 2], b_frag[y + 3] = \
                    load_float4_2d(b_tile, p, b_col0 + wj * SUB_N + j)

    @cuda.jit(device=True, inline="always")
    def outer_product(acc, a_frag, b_frag):
        for i in range(ACC_M):
            for j in range(ACC_N):
                acc[i, j] += a_frag[i] * b_frag[j]

    @cuda.jit(**bounds)
    def matmul_lean_kernel(a, b, c):
        """The warp-tiled kernel of rung 6 (same tiles, same double-buffered shared memory), with the
        bookkeeping taken out of the K loop: addresses in 32-bit integers through load4_i32/store_i32, no
        wraparound selects, no per-element guards except in the last (ragged) tile, the B tile stored with
        16-byte stores. With prefetch, the fragments of step p + 1 are loaded from shared memory into a
        second set of registers while the FMAs of step p run, so no FMA waits for its operands.

        Memory: as rung 6: BM·BN / (2·(BM + BN)) FLOPs per global byte, float4 loads; rows of A and columns
        of B past the matrix are clamped instead of zero-filled (their outputs are never stored); K past
        the end is zero-filled in the last tile. Shared reads: LDS.128, no bank conflict (as rung 6).
        Launch: 1-D blocks of THREADS, grid (ceil(N / BN), ceil(M / BM)); matrices of < 2^31 elements.
        """
        a_tile_t = cuda.shared.array((TWO_BK, A_ROW), float32, alignment=SMEM_ALIGN)
        b_tile = cuda.shared.array((TWO_BK, BN), float32, alignment=SMEM_ALIGN)
        acc = cuda.local.array((ACC_M, ACC_N), float32)
        a_frag = cuda.local.array(ACC_M, float32)
        b_frag = cuda.local.array(ACC_N, float32)
        a_frag2 = cuda.local.array(ACC_M, float32)      # the prefetched step (prefetch=True only)
        b_frag2 = cuda.local.array(ACC_N, float32)
        a_next = cuda.local.array((A_LOADS, 4), float32)
        b_next = cuda.local.array((B_LOADS, 4), float32)
        t = cuda.threadIdx.x
        m, k = a.shape
        n = b.shape[1]
        aligned = k % 4 == 0 and n % 4 == 0
        block_row = cuda.blockIdx.y * BM
        block_col = cuda.blockIdx.x * BN
        warp, lane = t // 32, t % 32
        a_col0 = (warp // WARPS_N) * WM + (lane // LANES_N) * TM      # this lane's first column of a_tile_t
        b_col0 = (warp % WARPS_N) * WN + (lane % LANES_N) * TN        # and of b_tile
        a_r, a_q = t // (BK // 4), (t % (BK // 4)) * 4
        b_r, b_q = t // (BN // 4), (t % (BN // 4)) * 4
        for i in range(ACC_M):
            for j in range(ACC_N):
                acc[i, j] = float32(0.0)
        tiles = (k + BK - 1) // BK
        fetch_tile(a, b, a_next, b_next, 0, block_row + a_r, a_q, b_r, block_col + b_q, aligned and BK <= k)
        for tile in range(tiles):
            buf = (tile & 1) * BK
            for s in range(A_LOADS):
                for q in range(4):
                    store_i32(a_tile_t, buf + a_q + q, a_r + s * A_STEP, a_next[s, q])
            for s in range(B_LOADS):
                store4_i32(b_tile, buf + b_r + s * B_STEP, b_q, b_next[s, 0], b_next[s, 1], b_next[s, 2],
                           b_next[s, 3])
            cuda.syncthreads()
            if tile + 1 < tiles:
                k0 = (tile + 1) * BK
                fetch_tile(a, b, a_next, b_next, k0, block_row + a_r, a_q, b_r, block_col + b_q,
                           aligned and k0 + BK <= k)
            if prefetch:
                load_fragments(a_tile_t, b_tile, buf, a_col0, b_col0, a_frag, b_frag)
                for p in range(0, BK, UNROLL):   # the loop's own overhead is paid once per UNROLL steps
                    load_fragments(a_tile_t, b_tile, buf + p + 1, a_col0, b_col0, a_frag2, b_frag2)
                    outer_product(acc, a_frag, b_frag)
                    if UNROLL >= 4:
                        load_fragments(a_tile_t, b_tile, buf + p + 2, a_col0, b_col0, a_frag, b_frag)
                        outer_product(acc, a_frag2, b_frag2)
                        load_fragments(a_tile_t, b_tile, buf + p + 3, a_col0, b_col0, a_frag2, b_frag2)
                        outer_product(acc, a_frag, b_frag)
                    if UNROLL == 8:   # written out: LLVM leaves a loop over these large bodies rolled
                        load_fragments(a_tile_t, b_tile, buf + p + 4, a_col0, b_col0, a_frag, b_frag)
                        outer_product(acc, a_frag2, b_frag2)
                        load_fragments(a_tile_t, b_tile, buf + p + 5, a_col0, b_col0, a_frag2, b_frag2)
                        outer_product(acc, a_frag, b_frag)
                        load_fragments(a_tile_t, b_tile, buf + p + 6, a_col0, b_col0, a_frag, b_frag)
                        outer_product(acc, a_frag2, b_frag2)
                        load_fragments(a_tile_t, b_tile, buf + p + 7, a_col0, b_col0, a_frag2, b_frag2)
                        outer_product(acc, a_frag, b_frag)
                    # the last step reloads row 0 of this buffer: harmless, and no branch in the loop
                    load_fragments(a_tile_t, b_tile, buf + ((p + UNROLL) & (BK - 1)), a_col0, b_col0,
                                   a_frag, b_frag)
                    outer_product(acc, a_frag2, b_frag2)
            else:
                for p in range(BK):
                    load_fragments(a_tile_t, b_tile, buf + p, a_col0, b_col0, a_frag, b_frag)
                    outer_product(acc, a_frag, b_frag)
        for wi in range(WM_ITER):
            for i in range(TM):
                row = block_row + a_col0 + wi * SUB_M + i
                for wj in range(WN_ITER):
                    for j in range(TN):
                        col = block_col + b_col0 + wj * SUB_N + j
                        if row < m and col < n:
                            c[row, col] = acc[wi * TM + i, wj * TN + j]

    _LEAN_KERNELS[key] = (quiet(matmul_lean_kernel), THREADS)
    return _LEAN_KERNELS[key]


# ------------------------------------------------------------------------------------------------
# Host launchers
# ------------------------------------------------------------------------------------------------
def _shapes(a, b, c, where):
    require(a, "a", ndim=2, where=where)
    require(b, "b", ndim=2, where=where)
    m, k = a.shape
    if b.shape[0] != k:
        raise ValueError(f"{where}: inner dimensions differ: a is {a.shape}, b is {b.shape}")
    require(c, "c", shape=(m, b.shape[1]), where=where)
    return m, b.shape[1], k


def _cdiv(x, y):
    return (x + y - 1) // y


def _zero_if_empty_k(m, n, k, c):
    """K = 0: C is all zeros (an empty sum), and no kernel is needed. Returns True when handled."""
    if m == 0 or n == 0:
        return True
    if k == 0:
        c[:, :] = 0
        return True
    return False


def matmul_naive(a, b, c):
    """c = a @ b with matmul_naive_kernel."""
    m, n, k = _shapes(a, b, c, "matmul_naive")
    if not _zero_if_empty_k(m, n, k, c):
        matmul_naive_kernel[(_cdiv(m, NAIVE_BLOCK), _cdiv(n, NAIVE_BLOCK)), (NAIVE_BLOCK, NAIVE_BLOCK)](a, b, c)


def matmul_coalesced(a, b, c):
    """c = a @ b with matmul_coalesced_kernel."""
    m, n, k = _shapes(a, b, c, "matmul_coalesced")
    if not _zero_if_empty_k(m, n, k, c):
        matmul_coalesced_kernel[(_cdiv(n, NAIVE_BLOCK), _cdiv(m, NAIVE_BLOCK)), (NAIVE_BLOCK, NAIVE_BLOCK)](a, b, c)


def matmul_shared_tiled(a, b, c):
    """c = a @ b with matmul_shared_tiled_kernel."""
    m, n, k = _shapes(a, b, c, "matmul_shared_tiled")
    if not _zero_if_empty_k(m, n, k, c):
        matmul_shared_tiled_kernel[(_cdiv(n, TILE), _cdiv(m, TILE)), (TILE, TILE)](a, b, c)


def matmul_blocktile_1d(a, b, c):
    """c = a @ b with matmul_blocktile_1d_kernel."""
    m, n, k = _shapes(a, b, c, "matmul_blocktile_1d")
    if not _zero_if_empty_k(m, n, k, c):
        matmul_blocktile_1d_kernel[(_cdiv(n, BN1), _cdiv(m, BM1)), THREADS1](a, b, c)


def matmul_blocktile_2d(a, b, c):
    """c = a @ b with matmul_blocktile_2d_kernel."""
    m, n, k = _shapes(a, b, c, "matmul_blocktile_2d")
    if not _zero_if_empty_k(m, n, k, c):
        matmul_blocktile_2d_kernel[(_cdiv(n, BN2), _cdiv(m, BM2)), THREADS2](a, b, c)


def matmul_vectorized(a, b, c):
    """c = a @ b with matmul_vectorized_kernel."""
    m, n, k = _shapes(a, b, c, "matmul_vectorized")
    if not _zero_if_empty_k(m, n, k, c):
        matmul_vectorized_kernel[(_cdiv(n, BN2), _cdiv(m, BM2)), THREADS2](a, b, c)


def launch_warptile(a, b, c, config: dict, where: str = "matmul_warptile"):
    """c = a @ b with the warp-tiled kernel of one configuration (a dict of BM, BN, BK, WM, WN, TM, TN)."""
    m, n, k = _shapes(a, b, c, where)
    if _zero_if_empty_k(m, n, k, c):
        return
    kernel, threads = make_warptile_kernel(**config)
    kernel[(_cdiv(n, config["BN"]), _cdiv(m, config["BM"])), threads](a, b, c)


def matmul_warptile(a, b, c):
    """c = a @ b with the warp-tiled kernel in its default configuration (WARPTILE_DEFAULT)."""
    launch_warptile(a, b, c, WARPTILE_DEFAULT)


def check_i32_offsets(m, n, k, where):
    """ValueError unless every element of A (m × k), B (k × n) and C (m × n) has a 32-bit offset."""
    if max(m * k, k * n, m * n) >= 2 ** 31:
        raise ValueError(f"{where}: {m}×{k} @ {k}×{n} has a matrix of 2^31 elements or more; this kernel "
                         "addresses memory with 32-bit offsets (use matmul_warptile)")


def launch_lean(a, b, c, config: dict, prefetch: bool, min_blocks: int = 1, unroll: int = 2, a_pad: int = 0,
                where: str = "matmul_lean"):
    """c = a @ b with the lean warp-tiled kernel of one configuration (BM, BN, BK, WM, WN, TM, TN)."""
    m, n, k = _shapes(a, b, c, where)
    check_i32_offsets(m, n, k, where)
    if _zero_if_empty_k(m, n, k, c):
        return
    kernel, threads = make_lean_kernel(**config, prefetch=prefetch, min_blocks=min_blocks, unroll=unroll,
                                       a_pad=a_pad)
    kernel[(_cdiv(n, config["BN"]), _cdiv(m, config["BM"])), threads](a, b, c)


def matmul_lean(a, b, c):
    """c = a @ b with the lean K loop (rung 8), in LEAN_DEFAULT."""
    launch_lean(a, b, c, LEAN_DEFAULT, prefetch=False)


def matmul_prefetch(a, b, c):
    """c = a @ b with the lean K loop and register-prefetched fragments, step loop unrolled 4 times (rung 9),
    in LEAN_DEFAULT."""
    launch_lean(a, b, c, LEAN_DEFAULT, prefetch=True, unroll=4, where="matmul_prefetch")


def matmul_prefetch_tuned(a, b, c):
    """c = a @ b with rung 9's loop in PREFETCH_TUNED: 128 × 256 blocks, K tiles of 8, every step of a tile
    unrolled (rung 10)."""
    launch_lean(a, b, c, PREFETCH_TUNED, prefetch=True, unroll=PREFETCH_TUNED_UNROLL,
                where="matmul_prefetch_tuned")


# ------------------------------------------------------------------------------------------------
# Rung 7: the autotuned configuration
# ------------------------------------------------------------------------------------------------
AUTOTUNE_FILE = lib.DATA / "results" / f"{CHAPTER}.autotune.csv"
AUTOTUNE_SIZE = 4096                  # tuned for the 4096³ headline problem
AUTOTUNE_CHECK_SIZE = (257, 263, 71)  # every candidate is checked at a ragged size before it is timed
# Candidates: block tiles of 64-256, BK 8-32, warp tiles of 32-128, TM 4 or 8, TN 4 (one LDS.128 per
# sub-tile row). Each keeps ≤ 128 accumulators per thread (256 spilled to local memory in a trial: the
# limit is 255 registers) and ≤ 48 KiB of double-buffered shared memory (the most a static allocation may
# take).
AUTOTUNE_SPACE = [dict(BM=bm, BN=bn, BK=bk, WM=wm, WN=wn, TM=tm, TN=4)
                  for bm, bn, bk, wm, wn, tm in [
                      (128, 128, 8, 64, 64, 8), (128, 128, 16, 64, 64, 8), (64, 128, 32, 32, 64, 8),
                      (128, 128, 16, 64, 32, 8), (128, 128, 16, 32, 64, 8), (128, 128, 16, 32, 32, 4),
                      (128, 128, 16, 64, 32, 4), (128, 64, 16, 64, 32, 8), (64, 128, 16, 32, 64, 8),
                      (128, 256, 16, 64, 64, 8), (256, 128, 16, 64, 64, 8), (256, 128, 16, 128, 32, 8),
                      (128, 64, 32, 64, 32, 8), (64, 64, 16, 32, 32, 8), (128, 128, 8, 32, 64, 8),
                      (256, 128, 8, 64, 64, 8)]]
_SWEEP: list[dict] = []               # this process's sweep, once run


def _config_label(cfg: dict) -> str:
    return "BM{BM} BN{BN} BK{BK} WM{WM} WN{WN} TM{TM} TN{TN}".format(**cfg)


def _one(per_signature):
    """A dispatcher answers with a dict when it was compiled for several signatures: take the largest."""
    return int(max(per_signature.values()) if isinstance(per_signature, dict) else per_signature)


def kernel_resources(kernel, threads: int) -> dict:
    """Registers, local memory (spills) and shared memory of a compiled kernel, and the blocks of it that
    fit on one SM of this GPU (occupancy), from the driver's figures (GPU only)."""
    regs = _one(kernel.get_regs_per_thread())
    local = _one(kernel.get_local_mem_per_thread())
    smem = _one(kernel.get_shared_mem_per_block())
    dev = cuda.get_current_device()
    per_sm = min(dev.MAX_THREADS_PER_MULTIPROCESSOR // threads,
                 dev.MAX_REGISTERS_PER_MULTIPROCESSOR // (max(regs, 1) * threads),
                 (dev.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR // smem) if smem else 32,
                 getattr(dev, "MAX_BLOCKS_PER_MULTIPROCESSOR", 32))
    return dict(registers=regs, local_bytes=local, smem_bytes=smem, threads=threads, blocks_per_sm=per_sm,
                warps_per_sm=per_sm * threads // 32)


def autotune(size: int = AUTOTUNE_SIZE, space=AUTOTUNE_SPACE, progress: bool = True) -> list[dict]:
    """Compile, check and time every configuration of `space` at size³ on this GPU (GPU only).

    A configuration that fails its check at AUTOTUNE_CHECK_SIZE (or fails to compile or launch) gets no
    time. Returns one dict per configuration; the fastest checked one has winner=True. The result is
    kept for this process, so the autotuned rung and record_extra share one sweep."""
    from tqdm.auto import tqdm

    from lib.grading.check import compare
    from lib.measure.timing import time_cuda

    if lib.SIMULATOR:
        raise RuntimeError("autotune needs a GPU: on the simulator nothing can be timed")
    rng = np.random.default_rng(1)
    cm, cn, ck = AUTOTUNE_CHECK_SIZE
    check_a = rng.uniform(-1, 1, (cm, ck)).astype(np.float32)
    check_b = rng.uniform(-1, 1, (ck, cn)).astype(np.float32)
    expected = check_a.astype(np.float64) @ check_b
    tol = matmul_tolerance(check_a, check_b, expected)
    d_check = [cuda.to_device(check_a), cuda.to_device(check_b), cuda.device_array((cm, cn), np.float32)]
    a = cuda.to_device(rng.uniform(-1, 1, (size, size)).astype(np.float32))
    b = cuda.to_device(rng.uniform(-1, 1, (size, size)).astype(np.float32))
    c = cuda.device_array((size, size), np.float32)
    rows = []
    for cfg in tqdm(space, desc="autotune", unit="config", disable=not progress):
        row = dict(cfg, config=_config_label(cfg), size=f"{size}x{size}x{size}", checked=False,
                   median_ms=math.nan, tflops=math.nan, compile_s=math.nan, error="")
        try:
            t0 = time.perf_counter()
            kernel, threads = make_warptile_kernel(**cfg)
            launch_warptile(*d_check, cfg)
            cuda.synchronize()
            row["compile_s"] = round(time.perf_counter() - t0, 2)
            row.update(kernel_resources(kernel, threads))
            bad = compare(d_check[2].copy_to_host(), expected, tol.rtol, tol.atol, tol.scale)
            if bad is not None:
                row["error"] = "check failed: " + bad.describe()
            else:
                row["checked"] = True
                timing = time_cuda(lambda: launch_warptile(a, b, c, cfg), flops=2 * size ** 3, reps=10)
                row["median_ms"], row["tflops"] = timing.median_ms, timing.tflops
        except Exception as exc:  # noqa: BLE001 - a configuration that cannot compile or launch is recorded
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        rows.append(row)
    timed = [r for r in rows if r["checked"]]
    if not timed:
        raise RuntimeError("autotune: no configuration passed its check")
    best = min(timed, key=lambda r: r["median_ms"])
    for r in rows:
        r["winner"] = r is best
    _SWEEP[:] = rows
    return rows


def tuned_config() -> dict:
    """The configuration the autotuned rung uses: this process's sweep (run now on a GPU if there is none
    yet); on the simulator the winner recorded on the reference GPU (the default if none is recorded)."""
    if lib.ON_GPU and not _SWEEP:
        autotune()
    if _SWEEP:
        best = next(r for r in _SWEEP if r["winner"])
        return {key: int(best[key]) for key in WARPTILE_DEFAULT}
    return recorded_config()


def recorded_config() -> dict:
    """The winner of the sweep recorded on the reference GPU (data/results/matmul.autotune.csv); the
    default configuration if none is recorded."""
    if AUTOTUNE_FILE.exists():
        with open(AUTOTUNE_FILE) as f:
            for r in csv.DictReader(line for line in f if not line.startswith("#")):
                if r["winner"] == "True":
                    return {key: int(r[key]) for key in WARPTILE_DEFAULT}
    return dict(WARPTILE_DEFAULT)


def matmul_autotuned(a, b, c):
    """c = a @ b with the warp-tiled kernel in the configuration the autotuner chose on this GPU."""
    launch_warptile(a, b, c, tuned_config(), where="matmul_autotuned")


# ------------------------------------------------------------------------------------------------
# Ladders
# ------------------------------------------------------------------------------------------------
def _torch_matmul_fp32(a, b, c):
    """cuBLAS SGEMM: TF32 tensor cores off for this call (and the previous setting restored)."""
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        torch.matmul(a, b, out=c)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _torch_matmul_tf32(a, b, c):
    """torch.matmul with TF32 tensor cores on: 10-bit mantissas, a different (looser) contract."""
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        torch.matmul(a, b, out=c)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _inputs(size, rng):
    m, n, k = size
    return (rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32))


def _reference(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


def _tf32_tolerance(a, b, expected):
    """TF32 rounds each input to 10 mantissa bits (relative error 2^-11), so a product is good to ~2^-10."""
    tol = matmul_tolerance(a, b, expected)
    return type(tol)(rtol=max(float(tol.rtol), 2.0 ** -9), atol=tol.atol, scale=tol.scale)


def matmul_bytes(size) -> int:
    """The compulsory traffic: read A and B once, write C once (float32)."""
    m, n, k = size
    return 4 * (m * k + k * n + m * n)


def matmul_flops(size) -> int:
    m, n, k = size
    return 2 * m * n * k


def block_tile(rung: str) -> tuple[int, int] | None:
    """The BM × BN tile of C one block computes, for the rungs that tile (None for one thread per output)."""
    return {"matmul_shared_tiled_kernel": (TILE, TILE), "matmul_blocktile_1d_kernel": (BM1, BN1),
            "matmul_blocktile_2d_kernel": (BM2, BN2), "matmul_vectorized_kernel": (BM2, BN2),
            "matmul_warptile_kernel": (WARPTILE_DEFAULT["BM"], WARPTILE_DEFAULT["BN"]),
            "matmul_autotuned": (tuned_config()["BM"], tuned_config()["BN"]),
            "matmul_lean_kernel": (LEAN_DEFAULT["BM"], LEAN_DEFAULT["BN"]),
            "matmul_prefetch_kernel": (LEAN_DEFAULT["BM"], LEAN_DEFAULT["BN"]),
            "matmul_prefetch_tuned_kernel": (PREFETCH_TUNED["BM"], PREFETCH_TUNED["BN"])}.get(rung)


def global_load_bytes(rung: str, m: int, n: int, k: int) -> int:
    """Bytes a rung asks global memory for (the IO-complexity formula; what Nsight Compute's
    l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum would count). One thread per output: every thread reads
    a row of A and a column of B, 8·M·N·K bytes. A BM × BN block tile: each block reads a BM × K panel of
    A and a K × BN panel of B, so A is read ceil(N / BN) times and B ceil(M / BM) times."""
    tile = block_tile(rung)
    if tile is None:
        return 8 * m * n * k
    bm, bn = tile
    return 4 * (m * k * _cdiv(n, bn) + k * n * _cdiv(m, bm))


RUNGS = [
    Rung("matmul_naive_kernel", matmul_naive, "one thread per output, threads down a column"),
    Rung("matmul_coalesced_kernel", matmul_coalesced, "one thread per output, threads along a row"),
    Rung("matmul_shared_tiled_kernel", matmul_shared_tiled, "32×32 tiles in shared memory"),
    Rung("matmul_blocktile_1d_kernel", matmul_blocktile_1d, "64×64 block, 8 outputs per thread"),
    Rung("matmul_blocktile_2d_kernel", matmul_blocktile_2d, "128×128 block, 8×8 outputs per thread"),
    Rung("matmul_vectorized_kernel", matmul_vectorized, "float4 loads, transposed A tile"),
    Rung("matmul_warptile_kernel", matmul_warptile, "warp tiles, double-buffered shared memory"),
    Rung("matmul_autotuned", matmul_autotuned, "warp tiles, configuration swept on this GPU"),
    Rung("matmul_lean_kernel", matmul_lean, "rung 7's tiles, 32-bit addresses, no guards inside K"),
    Rung("matmul_prefetch_kernel", matmul_prefetch, "lean, fragments prefetched in registers"),
    Rung("matmul_prefetch_tuned_kernel", matmul_prefetch_tuned, "rung 9 in 128×256×8 tiles, unrolled 8"),
]
FAST_RUNGS = RUNGS[4:]          # the register-blocked rungs: the only ones worth timing at 8192³
SIM_SIZES = [(33, 17, 45)]   # ragged: no dimension a multiple of any tile; tests add multi-block sizes per rung
BASELINES = [Baseline("torch.matmul", _torch_matmul_fp32, "cuBLAS SGEMM, TF32 off")]


def _ladder(topic, description, sizes, rungs, baselines, sim_sizes, tolerance=matmul_tolerance):
    return Ladder(chapter=CHAPTER, topic=topic, description=description, make_inputs=_inputs,
                  out_shape=lambda a, b: (a.shape[0], b.shape[1]), reference=_reference, bytes=matmul_bytes,
                  flops=matmul_flops, unit="TFLOP/s", sizes=sizes, sim_sizes=sim_sizes, rungs=rungs,
                  baselines=baselines, tolerance=tolerance)


LADDERS = [
    _ladder("sgemm 4096", "C = A @ B, float32, 4096³: every rung against cuBLAS SGEMM",
            [(4096, 4096, 4096)], RUNGS, BASELINES, SIM_SIZES),
    _ladder("tf32 4096", "torch.matmul with TF32 tensor cores (looser rounding), for scale",
            [(4096, 4096, 4096)], [], [Baseline("torch.matmul.tf32", _torch_matmul_tf32, "TF32 on", dtype="tf32")], [],
            tolerance=_tf32_tolerance),
    # The size sweep, a declared choice: the slow rungs (0-3, 10-100× off the pace) are timed up to 2048³
    # only; the register-blocked rungs and cuBLAS run the whole sweep.
    _ladder("sgemm sweep small", "C = A @ B, float32, square sizes 512-2048: every rung",
            [(s, s, s) for s in (512, 1024, 2048)], RUNGS, BASELINES, []),
    _ladder("sgemm sweep large", "C = A @ B, float32, square 8192: the register-blocked rungs",
            [(8192, 8192, 8192)], FAST_RUNGS, BASELINES, []),
]


# ------------------------------------------------------------------------------------------------
# Recordings that are not a ladder: the autotune sweep, and each rung's registers, spills and SASS mix
# ------------------------------------------------------------------------------------------------
SASS_OPS = ["FFMA", "LDS", "LDS.128", "LDG", "LDG.128", "STS", "BAR", "LDL", "STL"]


def sass_mix(sass: str) -> dict:
    """Static counts of instruction kinds in a SASS listing (LDL/STL are local-memory spills)."""
    counts = dict.fromkeys(SASS_OPS, 0)
    for line in sass.splitlines():
        parts = line.split("*/")
        if len(parts) < 2:
            continue
        op = parts[1].strip().split(" ")[0].rstrip(";")
        if op.startswith("@"):
            op = parts[1].strip().split(" ")[1]
        base = op.split(".")[0]
        if base in ("LDS", "LDG") and ".128" in op:
            counts[base + ".128"] += 1
        elif base in counts:
            counts[base] += 1
    return counts


def _rung_kernels():
    """(rung name, compiled-kernel dispatcher, threads per block) for every rung, at its configuration."""
    warptile, wt_threads = make_warptile_kernel(**WARPTILE_DEFAULT)
    tuned, tuned_threads = make_warptile_kernel(**tuned_config())
    return [("matmul_naive_kernel", matmul_naive_kernel, NAIVE_BLOCK ** 2),
            ("matmul_coalesced_kernel", matmul_coalesced_kernel, NAIVE_BLOCK ** 2),
            ("matmul_shared_tiled_kernel", matmul_shared_tiled_kernel, TILE ** 2),
            ("matmul_blocktile_1d_kernel", matmul_blocktile_1d_kernel, THREADS1),
            ("matmul_blocktile_2d_kernel", matmul_blocktile_2d_kernel, THREADS2),
            ("matmul_vectorized_kernel", matmul_vectorized_kernel, THREADS2),
            ("matmul_warptile_kernel", warptile, wt_threads),
            ("matmul_autotuned", tuned, tuned_threads),
            ("matmul_lean_kernel", *make_lean_kernel(**LEAN_DEFAULT, prefetch=False)),
            ("matmul_prefetch_kernel", *make_lean_kernel(**LEAN_DEFAULT, prefetch=True, unroll=4)),
            ("matmul_prefetch_tuned_kernel", *make_lean_kernel(**PREFETCH_TUNED, prefetch=True,
                                                               unroll=PREFETCH_TUNED_UNROLL))]


def _write_csv(path: Path, rows: list[dict], header: str):
    env = lib.measure.results.environment() if hasattr(lib, "results") else {}
    with open(path, "w", newline="") as f:
        f.write(f"# {header}; device {env.get('device')}, numba-cuda {env.get('numba_cuda')}, "
                f"torch {env.get('torch')}, date {env.get('date')}\n")
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def record_extra(folder: Path) -> list[Path]:
    """On the GPU: the autotune sweep (matmul.autotune.csv), every rung's registers, local memory, shared
    memory, occupancy and SASS instruction mix (matmul.kernels.csv), and the best rung's SASS
    (matmul.sass.txt). Every rung is checked first (at a ragged size) so nothing unchecked is recorded."""
    import lib.measure.results  # noqa: F401  (environment() for the headers)
    from lib.grading.check import compare

    folder = Path(folder)
    sweep = _SWEEP or autotune()
    path_sweep = folder / f"{CHAPTER}.autotune.csv"
    _write_csv(path_sweep, sweep, f"autotune sweep of matmul_warptile_kernel at {AUTOTUNE_SIZE}³")

    rng = np.random.default_rng(2)
    a_h, b_h = _inputs((129, 77, 67), rng)
    expected = _reference(a_h, b_h)
    tol = matmul_tolerance(a_h, b_h, expected)
    a, b = cuda.to_device(a_h), cuda.to_device(b_h)
    c = cuda.device_array(expected.shape, np.float32)
    rows, sass_text = [], {}
    for (name, rung), (_, kernel, threads) in zip([(r.name, r) for r in RUNGS], _rung_kernels()):
        rung.run(a, b, c)
        cuda.synchronize()
        bad = compare(c.copy_to_host(), expected, tol.rtol, tol.atol, tol.scale)
        if bad is not None:
            raise AssertionError(f"{name} failed its check before its resources were recorded: {bad.describe()}")
        sass = kernel.inspect_sass()
        sass = sass if isinstance(sass, str) else next(iter(sass.values()))
        sass_text[name] = sass
        rows.append(dict(kernel=name, **kernel_resources(kernel, threads), **sass_mix(sass)))
    path_kernels = folder / f"{CHAPTER}.kernels.csv"
    _write_csv(path_kernels, rows, "per-rung resources and static SASS instruction counts")
    path_sass = folder / f"{CHAPTER}.sass.txt"
    env = lib.measure.results.environment()
    with open(path_sass, "w") as f:
        f.write(f"# SASS of matmul_autotuned ({_config_label(tuned_config())}); device {env['device']}, "
                f"numba-cuda {env['numba_cuda']}, date {env['date']}\n")
        f.write(sass_text["matmul_autotuned"])
    return [path_sweep, path_kernels, path_sass]


# The book's own small launches (demos, last passes, one-thread set-ups) are deliberate: no low-occupancy
# warning for them (lib/runtime/quiet_launches.py); a reader's kernels still get it.
quiet_kernels(globals())
