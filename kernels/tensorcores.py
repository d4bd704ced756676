"""Kernels of the tensor-core chapter: the register-only ``mma.sync`` ceiling (what the tensor cores reach
when nothing waits on memory) and the matmul ladder on the tensor cores, in TF32 and FP16/BF16 with float32
accumulation, beside cuBLAS through torch. The instructions and their fragment layouts are in
:mod:`lib.runtime.mma`.

16-bit inputs travel as int16 bit patterns (numpy has no bfloat16, and torch reads int16 device memory
as is): ``lib.runtime.mma.b16_values`` decodes them, ``lib.runtime.mma.bf16_bits`` makes them.

Where the rest lives: chapters/tensorcores.md (the page); lib/grading/variants/tensorcores.py (its exercises'
known-wrong variants); tests/test_tensorcores.py (tests); data/results/tensorcores.* (recorded on the H200).
Record it with ``python -m tools.record tensorcores`` on a GPU; on the simulator the same kernels run through
the page's checks and the tests.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from numba import cuda, float32

import lib
from lib.runtime.vector import load_float4
from lib.runtime import mma
from lib.measure.bench import Baseline, Ladder, Rung
from lib.grading.check import k_scaled_rtol
from lib.grading.spec import Tolerance
from lib.runtime.quiet_launches import quiet, quiet_kernels
from lib.runtime.validate import require

CHAPTER = "tensorcores"
WARP = 32
TILE_M, TILE_N = 16, 8                   # the C tile of one mma.sync (both shapes)
K_STEP = {"tf32": 8, "f16": 16, "bf16": 16}
WARPS_PER_BLOCK = 4                      # rung 0: each warp owns one TILE_M × TILE_N tile of C


# --- the ceiling: mma.sync on registers only ----------------------------------------------------------
CEILING_THREADS = 256                    # 8 warps per block
CEILING_BLOCKS_PER_SM = 4                # 32 warps per SM: enough to hide the MMA pipeline's latency
CEILING_ITERS = 2048                     # dependent MMAs per accumulator chain
CEILING_CHAINS = (1, 2, 4, 8, 16)          # independent accumulators per warp
CEILING_A, CEILING_B = 1.0, 2.0 ** -6    # every product and sum exact in all three formats (see the check)


def make_ceiling_kernel(kind: str, chains: int, iters: int = CEILING_ITERS):
    """A kernel where each warp runs `chains` independent accumulator chains of `iters` mma.sync each,
    operands in registers: the tensor cores' throughput with no memory traffic at all."""
    if kind not in K_STEP:
        raise ValueError(f"kind must be one of {sorted(K_STEP)}, got {kind!r}")

    @cuda.jit
    def mma_ceiling_kernel(operands, out):
        """out[thread] = sum of the thread's accumulators after `iters` rounds of `chains` MMAs.

        Memory: two operand reads per thread and one 4-byte write; everything else is registers, so the
        time is the tensor cores' (bytes ≈ 0).
        Launch: 1-D, CEILING_THREADS per block (whole warps), any number of blocks; operands holds A's
        and B's value (float32 for tf32, a 16-bit pattern pair in int32 for f16/bf16).
        """
        i = cuda.grid(1)
        a, b = operands[0], operands[1]
        acc = cuda.local.array((chains, 4), float32)
        for ch in range(chains):
            for r in range(4):
                acc[ch, r] = 0.0
        for _ in range(iters):
            for ch in range(chains):
                if kind == "tf32":
                    d = mma.mma_m16n8k8_tf32(a, a, a, a, b, b, acc[ch, 0], acc[ch, 1], acc[ch, 2], acc[ch, 3])
                elif kind == "f16":
                    d = mma.mma_m16n8k16_f16(a, a, a, a, b, b, acc[ch, 0], acc[ch, 1], acc[ch, 2], acc[ch, 3])
                else:
                    d = mma.mma_m16n8k16_bf16(a, a, a, a, b, b, acc[ch, 0], acc[ch, 1], acc[ch, 2], acc[ch, 3])
                for r in range(4):
                    acc[ch, r] = d[r]
        total = float32(0.0)
        for ch in range(chains):
            for r in range(4):
                total += acc[ch, r]
        out[i] = total
    return quiet(mma_ceiling_kernel)


def ceiling_operands(kind: str) -> np.ndarray:
    """The kernel's two operand values: A = CEILING_A, B = CEILING_B, in the kind's register format."""
    if kind == "tf32":
        return np.array([CEILING_A, CEILING_B], np.float32)
    bits = (np.array([CEILING_A, CEILING_B], np.float16).view(np.uint16) if kind == "f16"
            else mma.bf16_bits(np.array([CEILING_A, CEILING_B], np.float32))).astype(np.uint32)
    return (bits | bits << 16).view(np.int32)


def ceiling_expected(kind: str, chains: int, iters: int = CEILING_ITERS) -> float:
    """What every thread must write: each MMA adds K·A·B to each of a thread's 4 accumulators."""
    return chains * 4 * iters * K_STEP[kind] * CEILING_A * CEILING_B


def ceiling_flops(kind: str, chains: int, threads: int) -> int:
    return (threads // WARP) * chains * CEILING_ITERS * 2 * TILE_M * TILE_N * K_STEP[kind]


def run_ceiling(kind: str, chains: int, blocks: int):
    """Launch the ceiling kernel; returns (launch function, out device array)."""
    kernel = _CEILING_KERNELS[(kind, chains)]
    operands = cuda.to_device(ceiling_operands(kind))
    out = cuda.device_array(blocks * CEILING_THREADS, np.float32)
    return (lambda: kernel[blocks, CEILING_THREADS](operands, out)), out


_CEILING_KERNELS = {(kind, chains): make_ceiling_kernel(kind, chains) for kind in K_STEP for chains in CEILING_CHAINS}


# --- rung 0: one warp per 16×8 tile of C, fragments straight from global memory ------------------------
@cuda.jit
def matmul_mma_global_tf32_kernel(a, b, c):
    """C = A @ B in TF32 on the tensor cores: warp w computes one 16×8 tile of C with K/8 mma.sync, each
    lane loading its own fragment elements (lib.runtime.mma's layout) from global memory.

    Memory: every warp reads a 16 × K strip of A and a K × 8 strip of B, so A is read N/8 times and B
    M/16 times (8·M·N·K·(1/8 + 1/16) bytes asked of the caches); the loads of a fragment are scattered
    (4 lanes per row of A), so L1/L2 serve most of them.
    Launch: 1-D, WARPS_PER_BLOCK warps per block, one warp per tile, tiles numbered row-major over the
    (M/16) × (N/8) grid of tiles; M % 16 == N % 8 == K % 8 == 0 (the launcher checks).
    """
    warp = cuda.grid(1) // WARP
    lane = cuda.threadIdx.x % WARP
    tiles_n = c.shape[1] // TILE_N
    if warp >= (c.shape[0] // TILE_M) * tiles_n:
        return                                   # the whole warp leaves together: no partial-warp MMA
    row0, col0 = (warp // tiles_n) * TILE_M, (warp % tiles_n) * TILE_N
    r0, k0 = mma.a_element_tf32(lane, 0)
    r1, k1 = mma.a_element_tf32(lane, 1)
    r2, k2 = mma.a_element_tf32(lane, 2)
    r3, k3 = mma.a_element_tf32(lane, 3)
    kb0, n0 = mma.b_element_tf32(lane, 0)
    kb1, n1 = mma.b_element_tf32(lane, 1)
    d0 = d1 = d2 = d3 = float32(0.0)
    for k in range(0, a.shape[1], 8):
        d0, d1, d2, d3 = mma.mma_m16n8k8_tf32(
            a[row0 + r0, k + k0], a[row0 + r1, k + k1], a[row0 + r2, k + k2], a[row0 + r3, k + k3],
            b[k + kb0, col0 + n0], b[k + kb1, col0 + n1], d0, d1, d2, d3)
    _store_c(c, row0, col0, lane, d0, d1, d2, d3)


@cuda.jit(device=True)
def _store_c(c, row0, col0, lane, d0, d1, d2, d3):
    r, n = mma.c_element(lane, 0)
    c[row0 + r, col0 + n] = d0
    r, n = mma.c_element(lane, 1)
    c[row0 + r, col0 + n] = d1
    r, n = mma.c_element(lane, 2)
    c[row0 + r, col0 + n] = d2
    r, n = mma.c_element(lane, 3)
    c[row0 + r, col0 + n] = d3


@cuda.jit(device=True)
def _a_register(a, row0, k, lane, j):
    """A register j of a 16-bit A fragment: elements 2j and 2j + 1, neighbours in one row of A."""
    r, kk = mma.a_element_b16(lane, 2 * j)
    return mma.pack_b16x2(a[row0 + r, k + kk], a[row0 + r, k + kk + 1])


@cuda.jit(device=True)
def _b_register(b, k, col0, lane, j):
    """A register j of a 16-bit B fragment: elements 2j and 2j + 1, neighbours in one column of B."""
    kk, n = mma.b_element_b16(lane, 2 * j)
    return mma.pack_b16x2(b[k + kk, col0 + n], b[k + kk + 1, col0 + n])


def _make_mma_global_b16_kernel(bf16: bool):
    @cuda.jit
    def matmul_mma_global_b16_kernel(a, b, c):
        """C = A @ B from 16-bit A and B (int16 bit patterns of f16 or bf16), float32 accumulation on the
        tensor cores: warp w computes one 16×8 tile of C with K/16 mma.sync from global memory.

        Memory: as the TF32 rung, at half the bytes per element: A read N/8 times, B M/16 times, through
        the caches; two 2-byte loads per 32-bit register (B's pair is a column, not contiguous).
        Launch: 1-D, WARPS_PER_BLOCK warps per block, one warp per tile, row-major over the tiles;
        M % 16 == N % 8 == K % 16 == 0 (the launcher checks).
        """
        warp = cuda.grid(1) // WARP
        lane = cuda.threadIdx.x % WARP
        tiles_n = c.shape[1] // TILE_N
        if warp >= (c.shape[0] // TILE_M) * tiles_n:
            return
        row0, col0 = (warp // tiles_n) * TILE_M, (warp % tiles_n) * TILE_N
        d0 = d1 = d2 = d3 = float32(0.0)
        for k in range(0, a.shape[1], 16):
            a0, a1 = _a_register(a, row0, k, lane, 0), _a_register(a, row0, k, lane, 1)
            a2, a3 = _a_register(a, row0, k, lane, 2), _a_register(a, row0, k, lane, 3)
            b0, b1 = _b_register(b, k, col0, lane, 0), _b_register(b, k, col0, lane, 1)
            if bf16:
                d0, d1, d2, d3 = mma.mma_m16n8k16_bf16(a0, a1, a2, a3, b0, b1, d0, d1, d2, d3)
            else:
                d0, d1, d2, d3 = mma.mma_m16n8k16_f16(a0, a1, a2, a3, b0, b1, d0, d1, d2, d3)
        _store_c(c, row0, col0, lane, d0, d1, d2, d3)
    return matmul_mma_global_b16_kernel


matmul_mma_global_f16_kernel = _make_mma_global_b16_kernel(False)
matmul_mma_global_bf16_kernel = _make_mma_global_b16_kernel(True)


def _check_operands(where, kind, a, b, c):
    """(M, N, K) of a launch, after checking types and shapes."""
    dtype = np.float32 if kind == "tf32" else np.int16   # 16-bit inputs: their bit patterns
    require(a, "a", dtype=dtype, ndim=2, where=where)
    require(b, "b", dtype=dtype, ndim=2, where=where)
    require(c, "c", shape=(a.shape[0], b.shape[1]), where=where)
    if b.shape[0] != a.shape[1]:
        raise ValueError(f"{where}: a is {a.shape} and b is {b.shape}: inner dimensions differ")
    return a.shape[0], b.shape[1], a.shape[1]


def _launch_mma_global(kernel, kind, a, b, c):
    where = f"matmul_mma_global_{kind}"
    m, n, k = _check_operands(where, kind, a, b, c)
    if m % TILE_M or n % TILE_N or k % K_STEP[kind]:
        raise ValueError(f"{where}: needs M % {TILE_M} == N % {TILE_N} == K % {K_STEP[kind]} == 0, got "
                         f"M={m}, N={n}, K={k} (this rung has no edge handling)")
    warps = (m // TILE_M) * (n // TILE_N)
    kernel[-(-warps // WARPS_PER_BLOCK), WARPS_PER_BLOCK * WARP](a, b, c)


def matmul_mma_global_tf32(a, b, c):
    """c = a @ b (float32 in and out, TF32 products): rung 0 of the tensor-core ladder."""
    _launch_mma_global(matmul_mma_global_tf32_kernel, "tf32", a, b, c)


def matmul_mma_global_f16(a, b, c):
    """c = a @ b, a and b FP16 bit patterns (int16), c float32: rung 0 in FP16."""
    _launch_mma_global(matmul_mma_global_f16_kernel, "f16", a, b, c)


def matmul_mma_global_bf16(a, b, c):
    """c = a @ b, a and b BF16 bit patterns (int16), c float32: rung 0 in BF16."""
    _launch_mma_global(matmul_mma_global_bf16_kernel, "bf16", a, b, c)


# --- rung 1 (16-bit): block tiles in shared memory, fragments loaded with ldmatrix ---------------------
BM1, BN1, BK1 = 32, 16, 16               # block tile of C and the K-slice staged per step
THREADS1 = 128                           # 4 warps as 2 × 2, each owning one 16 × 8 tile of the block tile


def _make_mma_ldmatrix_kernel(bf16: bool):
    @cuda.jit
    def matmul_mma_ldmatrix_kernel(a, b, c):
        """C = A @ B from 16-bit A and B (int16 bit patterns), float32 accumulation: a block stages a BM1 × BK1
        slice of A and a BK1 × BN1 slice of B in shared memory; each warp loads its A fragment with one
        ldmatrix.x4 and its B fragment with one ldmatrix.x2.trans, then issues one mma.sync.

        Memory: A is read N/BN1 times and B M/BM1 times from global memory (vs N/8 and M/16 for rung 0),
        each element of a staged slice once per block, coalesced along rows; the fragment loads are two
        instructions per warp per step instead of twelve scattered loads per lane.
        Launch: 2-D grid (N/BN1, M/BM1), THREADS1 threads; M % BM1 == N % BN1 == K % BK1 == 0 (the launcher
        checks).
        """
        a_tile = cuda.shared.array((BM1, BK1), dtype=np.int16)
        b_tile = cuda.shared.array((BK1, BN1), dtype=np.int16)
        tid = cuda.threadIdx.x
        lane, warp = tid % WARP, tid // WARP
        row0, col0 = cuda.blockIdx.y * BM1, cuda.blockIdx.x * BN1
        wm, wn = warp // 2, warp % 2
        # ldmatrix row addresses: lane 8m + r gives row r of 8 × 8 matrix m
        m, r = lane >> 3, lane & 7
        a_row = (TILE_M * wm + r + 8 * (m & 1)) * BK1 + 8 * (m >> 1)   # A's 4 matrices: a0a1, a2a3, a4a5, a6a7
        b_row = (lane & 15) * BN1 + TILE_N * wn                        # B: rows k = 0..15 (lanes 16-31 unused)
        d0 = d1 = d2 = d3 = float32(0.0)
        for k0 in range(0, a.shape[1], BK1):
            for e in range(tid, BM1 * BK1, THREADS1):
                a_tile[e // BK1, e % BK1] = a[row0 + e // BK1, k0 + e % BK1]
            for e in range(tid, BK1 * BN1, THREADS1):
                b_tile[e // BN1, e % BN1] = b[k0 + e // BN1, col0 + e % BN1]
            cuda.syncthreads()
            a0, a1, a2, a3 = mma.ldmatrix_x4(a_tile, a_row)
            b0, b1 = mma.ldmatrix_x2_trans(b_tile, b_row)   # .trans: B's rows are k, its fragment wants columns
            if bf16:
                d0, d1, d2, d3 = mma.mma_m16n8k16_bf16(a0, a1, a2, a3, b0, b1, d0, d1, d2, d3)
            else:
                d0, d1, d2, d3 = mma.mma_m16n8k16_f16(a0, a1, a2, a3, b0, b1, d0, d1, d2, d3)
            cuda.syncthreads()
        _store_c(c, row0 + TILE_M * wm, col0 + TILE_N * wn, lane, d0, d1, d2, d3)
    return matmul_mma_ldmatrix_kernel


matmul_mma_ldmatrix_f16_kernel = _make_mma_ldmatrix_kernel(False)
matmul_mma_ldmatrix_bf16_kernel = _make_mma_ldmatrix_kernel(True)


def _launch_mma_ldmatrix(kernel, kind, a, b, c):
    where = f"matmul_mma_ldmatrix_{kind}"
    m, n, k = _check_operands(where, kind, a, b, c)
    if m % BM1 or n % BN1 or k % BK1:
        raise ValueError(f"{where}: needs M % {BM1} == N % {BN1} == K % {BK1} == 0, got M={m}, N={n}, K={k} "
                         "(this rung has no edge handling)")
    kernel[(n // BN1, m // BM1), THREADS1](a, b, c)


def matmul_mma_ldmatrix_f16(a, b, c):
    """c = a @ b, a and b FP16 bit patterns (int16), c float32: rung 1 (shared tiles + ldmatrix)."""
    _launch_mma_ldmatrix(matmul_mma_ldmatrix_f16_kernel, "f16", a, b, c)


def matmul_mma_ldmatrix_bf16(a, b, c):
    """c = a @ b, a and b BF16 bit patterns (int16), c float32: rung 1 (shared tiles + ldmatrix)."""
    _launch_mma_ldmatrix(matmul_mma_ldmatrix_bf16_kernel, "bf16", a, b, c)


# --- rungs 2-5: one kernel factory, from a cp.async pipeline to large, swizzled, autotuned tiles --------
# Shared tiles are kept in 16-byte chunks (8 16-bit or 4 float32 values): the unit of cp.async and of one
# ldmatrix row. A row of an A tile is BK values = 64 bytes (BK 32 for 16-bit, 16 for TF32), 4 chunks.
CHUNK_BYTES = 16
BK_BYTES = 64


@cuda.jit(device=True)
def _swizzle_a(row, chunk):
    """A tile (64-byte rows): row r's chunks XOR-ed with (r >> 1) & 3, so 8 consecutive rows at one chunk
    column land in 8 different 16-byte bank groups (two rows share one 128-byte bank line)."""
    return chunk ^ ((row >> 1) & 3)


@cuda.jit(device=True)
def _swizzle_b16(row, chunk):
    """B tile, 16-bit (rows of ≥ 8 chunks): 8 consecutive k rows at one chunk column (one ldmatrix.trans
    matrix) land in 8 different bank groups."""
    return chunk ^ (row & 7)


@cuda.jit(device=True)
def _swizzle_b32(row, chunk):
    """B tile, TF32 (rows of ≥ 8 chunks): the fragment reads rows k..k+3 at two neighbouring chunks; XOR
    with 2·(k & 3) spreads those 4 × 2 chunks over the 8 bank groups."""
    return chunk ^ ((row & 3) << 1)


# rungs 1-3 keep the chunks where they are
@cuda.jit(device=True)
def _no_swizzle(row, chunk):
    return chunk


def tiled_config(BM, BN, WM, WN, STAGES, SWIZZLE, ASYNC=True, MAXREG=0, A_LDMATRIX=False,
                 B_INTERLEAVED=False, LEAN_INDEX=False, PREROUNDED=False) -> dict:
    """A configuration of make_mma_tiled_kernel, as a dict (the form the rungs and the sweep store);
    MAXREG > 0 caps the registers per thread (ptxas spills beyond it), 0 leaves them to ptxas. Two TF32
    options: A_LDMATRIX loads A fragments with one ldmatrix.x4 per 16 × 8 tile instead of four 4-byte loads;
    B_INTERLEAVED interleaves the warp's n tiles four by four, so a lane's B values of 4 tiles sit in one
    16-byte chunk (one 16-byte load instead of four; the epilogue writes C's columns back in place).
    LEAN_INDEX (any kind) computes the same copy chunks and ring slots with less arithmetic: a thread keeps
    its chunk column and steps down whole rows, and the ring's slots are counters instead of kt % STAGES
    (fewer live registers; the same memory traffic). PREROUNDED (TF32): the launcher rounds A and B to TF32
    once (round_tf32_kernel, into scratch arrays) and the kernel's mma.sync skips its per-operand cvt.rna
    (the same products; 8 bytes per input element of extra traffic)."""
    return dict(BM=BM, BN=BN, WM=WM, WN=WN, STAGES=STAGES, SWIZZLE=SWIZZLE, ASYNC=ASYNC, MAXREG=MAXREG,
                A_LDMATRIX=A_LDMATRIX, B_INTERLEAVED=B_INTERLEAVED, LEAN_INDEX=LEAN_INDEX, PREROUNDED=PREROUNDED)


def tiled_label(cfg: dict) -> str:
    return ("BM{BM} BN{BN} WM{WM} WN{WN} S{STAGES}".format(**cfg) + (" swz" if cfg["SWIZZLE"] else "")
            + ("" if cfg["ASYNC"] else " sync") + (f" R{cfg['MAXREG']}" if cfg.get("MAXREG") else "")
            + (" ldsmA" if cfg.get("A_LDMATRIX") else "") + (" ilvB" if cfg.get("B_INTERLEAVED") else "")
            + (" lean" if cfg.get("LEAN_INDEX") else "") + (" pre" if cfg.get("PREROUNDED") else ""))


def tiled_shape_problem(kind, BM, BN, WM, WN, STAGES, SWIZZLE, ASYNC, MAXREG=0, A_LDMATRIX=False,
                        B_INTERLEAVED=False, LEAN_INDEX=False, PREROUNDED=False) -> str | None:
    """Why a configuration cannot be built (None if it can)."""
    elem = 4 if kind == "tf32" else 2
    bk = BK_BYTES // elem
    if A_LDMATRIX and kind != "tf32":
        return "A_LDMATRIX is a TF32 option (16-bit kinds always load A with ldmatrix)"
    if PREROUNDED and kind != "tf32":
        return "PREROUNDED is a TF32 option (16-bit inputs are used as stored)"
    if B_INTERLEAVED and kind != "tf32":
        return "B_INTERLEAVED is a TF32 option (16-bit kinds load B with ldmatrix.trans)"
    if B_INTERLEAVED and WN % (4 * TILE_N):
        return f"B_INTERLEAVED interleaves n tiles four by four: WN must be a multiple of {4 * TILE_N}"
    if BM % WM or BN % WN or WM % TILE_M or WN % TILE_N:
        return f"BM % WM, BN % WN, WM % {TILE_M} and WN % {TILE_N} must be 0"
    if kind != "tf32" and (WN // TILE_N) % 2 and WN != TILE_N:
        return "16-bit warp tiles hold one or an even number of 8-wide n tiles (ldmatrix.x4.trans loads two)"
    if not ASYNC and STAGES != 1:
        return "without cp.async the kernel has one stage"
    if SWIZZLE and BN * elem < 8 * CHUNK_BYTES:
        return f"the swizzle needs B rows of at least 8 chunks (BN ≥ {8 * CHUNK_BYTES // elem})"
    threads = (BM // WM) * (BN // WN) * WARP
    if threads > 1024:
        return f"{threads} threads per block (at most 1024)"
    smem = STAGES * (BM * bk + bk * BN) * elem
    if smem > 48 * 1024:
        return f"{smem} bytes of shared memory (a static allocation may take at most 48 KiB)"
    return None


_TILED_KERNELS: dict = {}


def make_mma_tiled_kernel(kind, BM, BN, WM, WN, STAGES, SWIZZLE, ASYNC=True, MAXREG=0, A_LDMATRIX=False,
                          B_INTERLEAVED=False, LEAN_INDEX=False, PREROUNDED=False):
    """The tiled tensor-core matmul kernel for one configuration (cached): returns (kernel, threads).
    With PREROUNDED the kernel expects A and B already rounded to TF32 (launch_mma_tiled does it)."""
    key = (kind, BM, BN, WM, WN, STAGES, SWIZZLE, ASYNC, MAXREG, A_LDMATRIX, B_INTERLEAVED, LEAN_INDEX,
           PREROUNDED)
    if key in _TILED_KERNELS:
        return _TILED_KERNELS[key]
    if kind not in K_STEP:
        raise ValueError(f"kind must be one of {sorted(K_STEP)}, got {kind!r}")
    problem = tiled_shape_problem(kind, BM, BN, WM, WN, STAGES, SWIZZLE, ASYNC, MAXREG, A_LDMATRIX, B_INTERLEAVED,
                                  LEAN_INDEX, PREROUNDED)
    if problem:
        raise ValueError(f"make_mma_tiled_kernel({kind}, BM={BM}, BN={BN}, WM={WM}, WN={WN}, STAGES={STAGES}): "
                         f"{problem}")
    tf32 = kind == "tf32"
    bf16 = kind == "bf16"
    ELEM = 4 if tf32 else 2
    CH = CHUNK_BYTES // ELEM                     # values per 16-byte chunk: 4 or 8
    BK = BK_BYTES // ELEM                        # 16 (TF32) or 32 (16-bit) values of K per stage
    KS = K_STEP[kind]                            # K per mma.sync; BK = 2 · KS (two steps per stage)
    MI, NI = WM // TILE_M, WN // TILE_N          # mma tiles per warp: MI × NI accumulators of 4 floats
    WARPS_N = BN // WN
    THREADS = (BM // WM) * WARPS_N * WARP
    A_CHUNKS, A_ROW_CHUNKS, B_CHUNKS_ROW = BM * BK // CH, BK // CH, BN // CH
    B_CHUNKS = BK * B_CHUNKS_ROW
    A_STAGE, B_STAGE = BM * BK, BK * BN          # values per stage
    A_SMEM, B_SMEM = STAGES * A_STAGE, STAGES * B_STAGE
    A_ROUNDS, B_ROUNDS = -(-A_CHUNKS // THREADS), -(-B_CHUNKS // THREADS)
    WAIT = max(STAGES - 2, 0)                    # cp.async groups allowed in flight when a stage is needed
    PAIRS = not tf32 and NI % 2 == 0             # 16-bit B: ldmatrix.x4.trans loads two n tiles at once
    swz_a = _swizzle_a if SWIZZLE else _no_swizzle
    swz_b = (_swizzle_b32 if tf32 else _swizzle_b16) if SWIZZLE else _no_swizzle
    SMEM_TYPE = float32 if tf32 else np.int16

    @cuda.jit(device=True)
    def load_stage(a, b, a_s, b_s, stage, row0, col0, k0, tid):
        """Copy the stage's A (BM × BK) and B (BK × BN) slices, chunk by chunk, into their swizzled places."""
        n, k = b.shape[1], a.shape[1]
        for it in range(A_ROUNDS):                  # a constant trip count: unrolled, no division per chunk
            e = tid + it * THREADS
            if A_CHUNKS % THREADS == 0 or e < A_CHUNKS:
                if LEAN_INDEX and THREADS % A_ROW_CHUNKS == 0:   # round `it` moves whole rows down
                    r, ch = tid // A_ROW_CHUNKS + it * (THREADS // A_ROW_CHUNKS), tid % A_ROW_CHUNKS
                else:
                    r, ch = e // (BK // CH), e % (BK // CH)
                dst = stage * A_STAGE + r * BK + swz_a(r, ch) * CH
                if ASYNC:
                    mma.cp_async_cg16(a_s, dst, a, (row0 + r) * k + k0 + ch * CH)
                else:
                    for q in range(CH):
                        a_s[dst + q] = a[row0 + r, k0 + ch * CH + q]
        for it in range(B_ROUNDS):
            e = tid + it * THREADS
            if B_CHUNKS % THREADS == 0 or e < B_CHUNKS:
                if LEAN_INDEX and THREADS % B_CHUNKS_ROW == 0:
                    r, ch = tid // B_CHUNKS_ROW + it * (THREADS // B_CHUNKS_ROW), tid % B_CHUNKS_ROW
                else:
                    r, ch = e // B_CHUNKS_ROW, e % B_CHUNKS_ROW
                dst = stage * B_STAGE + r * BN + swz_b(r, ch) * CH
                if ASYNC:
                    mma.cp_async_cg16(b_s, dst, b, (k0 + r) * n + col0 + ch * CH)
                else:
                    for q in range(CH):
                        b_s[dst + q] = b[k0 + r, col0 + ch * CH + q]

    @cuda.jit(device=True)
    def mma_step(a_s, b_s, a_base, b_base, kk, acc, af, bf, af32, bf32, wrow, wcol, lane):
        """One K step (KS wide) of the warp tile: load its fragments from shared memory, MI × NI mma.sync."""
        g, t = lane >> 2, lane & 3
        mat, r8 = lane >> 3, lane & 7               # ldmatrix: lane 8·mat + r8 gives row r8 of matrix mat
        if tf32 and A_LDMATRIX:
            for i in range(MI):                     # 8 × 4-word matrices: rows 0-7 / 8-15 × k 0-3 / 4-7
                r = wrow + i * TILE_M + r8 + 8 * (mat & 1)
                ch = kk // CH + (mat >> 1)
                af32[i, 0], af32[i, 1], af32[i, 2], af32[i, 3] = mma.ldmatrix_x4_tf32(
                    a_s, a_base + r * BK + swz_a(r, ch) * CH)
        elif tf32:
            for i in range(MI):
                for q in range(4):                  # a_q = A[g + 8(q & 1), t + 4(q >> 1)]
                    r = wrow + i * TILE_M + g + 8 * (q & 1)
                    col = kk + t + 4 * (q >> 1)
                    af32[i, q] = a_s[a_base + r * BK + swz_a(r, col // CH) * CH + col % CH]
        if tf32 and B_INTERLEAVED:
            for j4 in range(NI // 4):               # n tiles 4·j4 + jj use column wcol + 32·j4 + 4g + jj
                for q in range(2):                  # b_q = B[t + 4q, g] of each of the 4 tiles: one chunk
                    kr = kk + t + 4 * q
                    ch = (wcol + 32 * j4) // CH + g
                    v = load_float4(b_s, (b_base + kr * BN) // CH + swz_b(kr, ch))   # index in chunks
                    bf32[4 * j4, q], bf32[4 * j4 + 1, q], bf32[4 * j4 + 2, q], bf32[4 * j4 + 3, q] = v
        elif tf32:
            for j in range(NI):
                for q in range(2):                  # b_q = B[t + 4q, g]
                    kr = kk + t + 4 * q
                    col = wcol + j * TILE_N + g
                    bf32[j, q] = b_s[b_base + kr * BN + swz_b(kr, col // CH) * CH + col % CH]
        if tf32:
            for i in range(MI):
                for j in range(NI):
                    if PREROUNDED:
                        d = mma.mma_m16n8k8_tf32_prerounded(af32[i, 0], af32[i, 1], af32[i, 2], af32[i, 3],
                                                            bf32[j, 0], bf32[j, 1], acc[i, j, 0], acc[i, j, 1],
                                                            acc[i, j, 2], acc[i, j, 3])
                    else:
                        d = mma.mma_m16n8k8_tf32(af32[i, 0], af32[i, 1], af32[i, 2], af32[i, 3], bf32[j, 0],
                                                 bf32[j, 1], acc[i, j, 0], acc[i, j, 1], acc[i, j, 2], acc[i, j, 3])
                    for q in range(4):
                        acc[i, j, q] = d[q]
        else:
            for i in range(MI):                     # matrices: rows 0-7 / 8-15 × k 0-7 / 8-15
                r = wrow + i * TILE_M + r8 + 8 * (mat & 1)
                ch = kk // CH + (mat >> 1)
                af[i, 0], af[i, 1], af[i, 2], af[i, 3] = mma.ldmatrix_x4(a_s, a_base + r * BK + swz_a(r, ch) * CH)
            if PAIRS:
                for j in range(0, NI, 2):           # matrices: k 0-7 / 8-15 × n tiles j, j + 1
                    kr = kk + r8 + 8 * (mat & 1)
                    ch = (wcol + j * TILE_N) // CH + (mat >> 1)
                    bf[j, 0], bf[j, 1], bf[j + 1, 0], bf[j + 1, 1] = mma.ldmatrix_x4_trans(
                        b_s, b_base + kr * BN + swz_b(kr, ch) * CH)
            else:
                for j in range(NI):                 # lanes 16-31 repeat 0-15's addresses (x2 ignores them)
                    kr = kk + r8 + 8 * (mat & 1)
                    ch = (wcol + j * TILE_N) // CH
                    bf[j, 0], bf[j, 1] = mma.ldmatrix_x2_trans(b_s, b_base + kr * BN + swz_b(kr, ch) * CH)
            for i in range(MI):
                for j in range(NI):
                    if bf16:
                        d = mma.mma_m16n8k16_bf16(af[i, 0], af[i, 1], af[i, 2], af[i, 3], bf[j, 0], bf[j, 1],
                                                  acc[i, j, 0], acc[i, j, 1], acc[i, j, 2], acc[i, j, 3])
                    else:
                        d = mma.mma_m16n8k16_f16(af[i, 0], af[i, 1], af[i, 2], af[i, 3], bf[j, 0], bf[j, 1],
                                                 acc[i, j, 0], acc[i, j, 1], acc[i, j, 2], acc[i, j, 3])
                    for q in range(4):
                        acc[i, j, q] = d[q]

    # the kernel itself, built from the two device functions above
    @cuda.jit(**({"max_registers": MAXREG} if MAXREG else {}))
    def matmul_mma_tiled_kernel(a, b, c):
        """C = A @ B on the tensor cores, float32 accumulation: a block computes a BM × BN tile of C, each
        of its warps a WM × WN piece of it as MI × NI mma.sync tiles held in registers. Slices of A and B
        (BK wide) travel to shared memory in 16-byte chunks with cp.async, STAGES of them in flight; the
        warps read their fragments from there (ldmatrix for 16-bit inputs, 4-byte loads for TF32).

        Memory: A is read N/BN times and B M/BM times from global memory, in coalesced 16-byte chunks
        that skip the registers. Each fragment value is read from shared memory once per warp that needs
        it: (WM + WN)·BK values per warp per stage for 2·WM·WN·BK FLOPs. With SWIZZLE the chunks of each
        row are permuted (XOR with a function of the row), so every ldmatrix phase and fragment load is
        conflict-free; without it, 8 rows at one chunk column share bank groups.
        Launch: 2-D grid (N/BN, M/BM), THREADS threads; M % BM == N % BN == K % BK == 0 (the launcher
        checks); 16-byte aligned rows (K and N multiples of 8 16-bit or 4 float32 values).
        """
        a_s = cuda.shared.array(A_SMEM, dtype=SMEM_TYPE)
        b_s = cuda.shared.array(B_SMEM, dtype=SMEM_TYPE)
        tid = cuda.threadIdx.x
        lane, warp = tid % WARP, tid // WARP
        row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
        wrow, wcol = (warp // WARPS_N) * WM, (warp % WARPS_N) * WN
        acc = cuda.local.array((MI, NI, 4), float32)
        for i in range(MI):
            for j in range(NI):
                for q in range(4):
                    acc[i, j, q] = 0.0
        af = cuda.local.array((MI, 4), np.uint32)
        bf = cuda.local.array((NI, 2), np.uint32)
        af32 = cuda.local.array((MI, 4), float32)
        bf32 = cuda.local.array((NI, 2), float32)
        k_tiles = a.shape[1] // BK
        for s in range(STAGES - 1):                 # fill the pipeline (no-op with one stage)
            if s < k_tiles:
                load_stage(a, b, a_s, b_s, s, row0, col0, s * BK, tid)
            mma.cp_async_commit()
        if LEAN_INDEX:
            stage, refill = 0, STAGES - 1           # the ring's slot read now, and the one refilled next
        for kt in range(k_tiles):
            if not LEAN_INDEX:
                stage = kt % STAGES
            if ASYNC:
                mma.cp_async_wait_group(WAIT)       # this stage's copies have landed (for this thread) ...
                cuda.syncthreads()                  # ... and for every thread; the stage read last is free
                nxt = kt + STAGES - 1
                if nxt < k_tiles and LEAN_INDEX:
                    load_stage(a, b, a_s, b_s, refill, row0, col0, nxt * BK, tid)
                elif nxt < k_tiles:
                    load_stage(a, b, a_s, b_s, nxt % STAGES, row0, col0, nxt * BK, tid)
                mma.cp_async_commit()               # an empty group at the tail keeps the count in step
                if LEAN_INDEX:
                    refill = 0 if refill == STAGES - 1 else refill + 1
            else:
                load_stage(a, b, a_s, b_s, 0, row0, col0, kt * BK, tid)
                cuda.syncthreads()
            a_base, b_base = stage * A_STAGE, stage * B_STAGE
            mma_step(a_s, b_s, a_base, b_base, 0, acc, af, bf, af32, bf32, wrow, wcol, lane)   # BK = 2 steps
            mma_step(a_s, b_s, a_base, b_base, KS, acc, af, bf, af32, bf32, wrow, wcol, lane)
            if LEAN_INDEX:
                stage = 0 if stage == STAGES - 1 else stage + 1
            if not ASYNC:
                cuda.syncthreads()                  # everyone is done with the stage before it is refilled
        # the epilogue: each warp's accumulators go straight to C
        for i in range(MI):
            for j in range(NI):
                if B_INTERLEAVED:                   # the tile's column n is C's wcol + 32(j >> 2) + 4n + (j & 3)
                    for q in range(4):
                        r, n = mma.c_element(lane, q)
                        c[row0 + wrow + i * TILE_M + r, col0 + wcol + 32 * (j >> 2) + 4 * n + (j & 3)] = acc[i, j, q]
                else:
                    _store_c(c, row0 + wrow + i * TILE_M, col0 + wcol + j * TILE_N, lane,
                             acc[i, j, 0], acc[i, j, 1], acc[i, j, 2], acc[i, j, 3])

    kernel = quiet(matmul_mma_tiled_kernel)
    _TILED_KERNELS[key] = kernel, THREADS
    return kernel, THREADS


def fragment_addresses(kind: str, operand: str, BN: int, swizzle: bool,
                       b_interleaved: bool = False) -> tuple[list[int], int]:
    """The shared-memory byte addresses of a warp's first fragment load of `operand` ('A' or 'B') in
    make_mma_tiled_kernel, one per lane, and the access width in bytes: for 16-bit inputs the 32 row
    addresses of one ldmatrix.x4 (A) or ldmatrix.x4.trans (B), 16 bytes each; for TF32 one 4-byte load
    (a0 or b0), or with `b_interleaved` B's 16-byte load of b0 for n tiles 0-3 (B_INTERLEAVED). The same
    index arithmetic as the kernel, for the bank model of lib.hw.banks."""
    if operand not in ("A", "B"):
        raise ValueError(f"operand must be 'A' or 'B', got {operand!r}")
    tf32 = kind == "tf32"
    if b_interleaved:
        if not (tf32 and operand == "B"):
            raise ValueError("b_interleaved describes TF32's B operand only")
        swz = _swizzle_b32.py_func if swizzle else _no_swizzle.py_func
        return [(((lane & 3) * BN) // 4 + swz(lane & 3, lane >> 2)) * CHUNK_BYTES for lane in range(WARP)], CHUNK_BYTES
    elem = 4 if tf32 else 2
    ch_values, bk = CHUNK_BYTES // elem, BK_BYTES // elem
    identity = _no_swizzle.py_func
    swz = (_swizzle_a if operand == "A" else _swizzle_b32 if tf32 else _swizzle_b16).py_func if swizzle else identity
    row_len = bk if operand == "A" else BN
    out = []
    for lane in range(WARP):
        if tf32:    # a0 = A[g, t]; b0 = B[t, g]
            row, col = (lane >> 2, lane & 3) if operand == "A" else (lane & 3, lane >> 2)
            index = row * row_len + swz(row, col // ch_values) * ch_values + col % ch_values
        else:       # lane 8·mat + r gives row r of matrix mat: rows + 8·(mat & 1), chunk + (mat >> 1)
            mat, r = lane >> 3, lane & 7
            row, chunk = r + 8 * (mat & 1), mat >> 1
            index = row * row_len + swz(row, chunk) * ch_values
        out.append(index * elem)
    return out, (4 if tf32 else CHUNK_BYTES)


def launch_mma_tiled(kind, a, b, c, cfg, where="matmul_mma_tiled"):
    """Check shapes against the configuration and launch its kernel."""
    m, n, k = _check_operands(where, kind, a, b, c)
    bk = BK_BYTES // (4 if kind == "tf32" else 2)
    if m % cfg["BM"] or n % cfg["BN"] or k % bk:
        raise ValueError(f"{where}: needs M % {cfg['BM']} == N % {cfg['BN']} == K % {bk} == 0, got M={m}, "
                         f"N={n}, K={k} (this rung has no edge handling)")
    kernel, threads = make_mma_tiled_kernel(kind, **cfg)
    if cfg.get("PREROUNDED"):
        a, b = _rounded_tf32(a, "a"), _rounded_tf32(b, "b")
    kernel[(n // cfg["BN"], m // cfg["BM"]), threads](a, b, c)


ROUND_BLOCK = (32, 8)                    # round_tf32_kernel: a warp per row segment, 8 rows per block
_ROUNDED: dict = {}                      # (operand, shape) -> scratch device array, reused across launches


@cuda.jit
def round_tf32_kernel(x, out):
    """out = x rounded to TF32 (cvt.rna.tf32.f32: to nearest, ties away from zero), element by element.

    Memory: 8 bytes per element (a 4-byte read and a 4-byte write), coalesced along rows.
    Launch: 2-D, ROUND_BLOCK threads, grid (ceil(cols / 32), ceil(rows / 8)); out has x's shape.
    """
    col, row = cuda.grid(2)
    if row < x.shape[0] and col < x.shape[1]:
        out[row, col] = mma.to_tf32(x[row, col])


def _rounded_tf32(x, operand):
    """x rounded to TF32 in a scratch device array kept for the next launch of the same shape."""
    key = (operand, x.shape)
    if key not in _ROUNDED:
        _ROUNDED[key] = cuda.device_array(x.shape, np.float32)
    out = _ROUNDED[key]
    rows, cols = x.shape
    round_tf32_kernel[(-(-cols // ROUND_BLOCK[0]), -(-rows // ROUND_BLOCK[1])), ROUND_BLOCK](x, out)
    return out


# --- baselines: cuBLAS through torch ------------------------------------------------------------------
def _torch_matmul_tf32(a, b, c):
    """torch.matmul with TF32 tensor cores on."""
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        torch.matmul(a, b, out=c)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _torch_mm_b16(dtype_name):
    def run(a, b, c):
        """torch.mm of 16-bit inputs with float32 output (cuBLAS accumulates in float32)."""
        import torch

        dtype = getattr(torch, dtype_name)
        torch.mm(a.view(dtype), b.view(dtype), out_dtype=torch.float32, out=c)
    return run


# --- the ladder ---------------------------------------------------------------------------------------
def _inputs(kind):
    def make(size, rng):
        m, n, k = size
        a, b = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
        if kind == "tf32":
            return a, b
        if kind == "f16":
            return a.astype(np.float16).view(np.int16), b.astype(np.float16).view(np.int16)
        return mma.bf16_bits(a).view(np.int16), mma.bf16_bits(b).view(np.int16)
    return make


def _values(kind, x):
    return x.astype(np.float64) if kind == "tf32" else mma.b16_values(x, kind)


def _reference(kind):
    return lambda a, b: _values(kind, a) @ _values(kind, b)


def matmul_tolerance(kind):
    """The check's bound, relative to |A| @ |B|: float32 accumulation over K terms (lib.grading.check's K-scaled
    bound); TF32 adds its input rounding (each input within 2^-11, a product within ~2^-10). 16-bit inputs
    are the exact values the reference uses, so only the accumulation is left."""
    def tolerance(a, b, expected):
        a64, b64 = _values(kind, a), _values(kind, b)
        rtol = k_scaled_rtol(a64.shape[1])
        note = f"K-scaled: dot products of {a64.shape[1]} terms, relative to |a| @ |b|"
        if kind == "tf32":
            rtol, note = max(rtol, 2.0 ** -9), note + "; TF32 inputs (10-bit mantissas)"
        return Tolerance(rtol=rtol, scale=np.abs(a64) @ np.abs(b64), note=note)
    return tolerance


def matmul_bytes(kind):
    width = 4 if kind == "tf32" else 2
    return lambda size: width * (size[0] * size[2] + size[2] * size[1]) + 4 * size[0] * size[1]


def matmul_flops(size) -> int:
    m, n, k = size
    return 2 * m * n * k


# Rungs 2-5 are configurations of make_mma_tiled_kernel, one idea added per rung.
SMALL_TILES = dict(BM=32, BN=16, WM=16, WN=8)           # rung 1's tiles: 4 warps, one mma tile each
RUNG_CONFIGS = {
    "shared": tiled_config(**SMALL_TILES, STAGES=1, SWIZZLE=False, ASYNC=False),  # TF32's rung 1
    "pipeline": tiled_config(**SMALL_TILES, STAGES=3, SWIZZLE=False),           # + cp.async, 3 stages
    "warptile": tiled_config(128, 128, 64, 32, 3, False),                       # + 64×32 warp tiles
    "swizzle": tiled_config(128, 128, 64, 32, 3, True),                         # + XOR-swizzled tiles
}
# The autotuner's candidates (all swizzled): block tiles of 64-256, warp tiles of 32-64, 2-4 stages, every
# one within 48 KiB of static shared memory; one capped at 128 registers (2 blocks of 8 warps per SM
# instead of 1, if ptxas manages without spilling).
TUNE_SPACE = [tiled_config(bm, bn, wm, wn, s, True) for bm, bn, wm, wn, s in [
    (128, 128, 64, 32, 3), (128, 128, 32, 64, 3), (128, 128, 64, 64, 3), (128, 64, 64, 32, 4),
    (64, 128, 32, 64, 4), (128, 256, 64, 64, 2)]] + [tiled_config(128, 128, 64, 32, 3, True, MAXREG=128)]
# Per kind, the fastest configurations of the issue-19 exploration on the H200 (2026-12-01, 4096³): TF32 with
# A through ldmatrix, B through 16-byte loads of interleaved n tiles, the lean copy index and inputs rounded
# once by a pre-pass (119 TFLOP/s at 128 × 128 / 64 × 64, against 85 for the swizzle-only winner); FP16/BF16
# with the lean copy index (324 TFLOP/s at 128 × 128 / 64 × 64, against 289).
_ALL_TF32 = dict(A_LDMATRIX=True, B_INTERLEAVED=True, LEAN_INDEX=True, PREROUNDED=True)
TUNE_EXTRA = {
    "tf32": [tiled_config(bm, bn, wm, wn, s, True, **_ALL_TF32) for bm, bn, wm, wn, s in [
        (128, 128, 64, 64, 3), (128, 256, 64, 64, 2), (128, 128, 32, 64, 3)]],
    "f16": [tiled_config(bm, bn, wm, wn, s, True, LEAN_INDEX=True) for bm, bn, wm, wn, s in [
        (128, 128, 64, 64, 3), (128, 128, 64, 32, 3)]],
}
TUNE_EXTRA["bf16"] = TUNE_EXTRA["f16"]
TUNE_SIZE = 4096
TUNE_CHECK_SIZE = (256, 256, 128)                       # every candidate is checked here before it is timed
AUTOTUNE_FILE = lib.DATA / "results" / f"{CHAPTER}.autotune.csv"
_SWEEP: dict = {}                                       # kind -> this process's sweep rows, once run


def autotune(kind: str, size: int = TUNE_SIZE, space=None) -> list[dict]:
    """Compile, check and time every configuration of `space` (TUNE_SPACE and the kind's TUNE_EXTRA if None)
    for `kind` at size³ on this GPU. A candidate
    that fails its check at TUNE_CHECK_SIZE, or cannot compile or launch, gets no time. The fastest checked
    one has winner=True; the rows are kept for this process (the autotuned rung and record_extra share them)."""
    import math

    from lib.grading.check import compare
    from lib.measure.timing import time_cuda

    if lib.SIMULATOR:
        raise RuntimeError("autotune needs a GPU: on the simulator nothing can be timed")
    space = TUNE_SPACE + TUNE_EXTRA[kind] if space is None else space
    rng = np.random.default_rng(1)
    check_inputs = _inputs(kind)(TUNE_CHECK_SIZE, rng)
    expected = _reference(kind)(*check_inputs)
    tol = matmul_tolerance(kind)(*check_inputs, expected)
    d_check = [cuda.to_device(x) for x in check_inputs] + [cuda.device_array(expected.shape, np.float32)]
    d_big = [cuda.to_device(x) for x in _inputs(kind)((size, size, size), rng)]
    d_big.append(cuda.device_array((size, size), np.float32))
    rows = []
    for cfg in space:
        row = dict(kind=kind, config=tiled_label(cfg), **cfg, checked=False, median_ms=math.nan,
                   tflops=math.nan, error="")
        try:
            d_check[2].copy_to_device(np.full(expected.shape, np.nan, np.float32))
            launch_mma_tiled(kind, *d_check, cfg)
            cuda.synchronize()
            kernel, threads = make_mma_tiled_kernel(kind, **cfg)
            row.update(kernel_resources(kernel, threads))
            bad = compare(d_check[2].copy_to_host(), expected, tol.rtol, tol.atol, tol.scale)
            if bad is not None:
                row["error"] = "check failed: " + bad.describe()
            else:
                row["checked"] = True
                timing = time_cuda(lambda: launch_mma_tiled(kind, *d_big, cfg), flops=2 * size ** 3, reps=10)
                row["median_ms"], row["tflops"] = round(timing.median_ms, 5), round(timing.tflops, 2)
        except Exception as exc:  # noqa: BLE001 - a configuration that cannot compile or launch is recorded
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        rows.append(row)
    timed = [r for r in rows if r["checked"]]
    if not timed:
        raise RuntimeError(f"autotune {kind}: no configuration passed its check")
    best = min(timed, key=lambda r: r["median_ms"])
    for r in rows:
        r["winner"] = r is best
    _SWEEP[kind] = rows
    return rows


def recorded_tuned_config(kind: str) -> dict:
    """The winner of `kind`'s sweep recorded on the reference GPU (the swizzle rung's if none is recorded)."""
    if AUTOTUNE_FILE.exists():
        with open(AUTOTUNE_FILE) as f:
            for r in csv.DictReader(line for line in f if not line.startswith("#")):
                if r["kind"] == kind and r["winner"] == "True":   # options recorded before they existed: off
                    cfg = dict(RUNG_CONFIGS["swizzle"])
                    cfg.update({key: (r[key] == "True") if isinstance(cfg[key], bool) else int(float(r[key]))
                                for key in cfg if r.get(key) not in (None, "")})
                    return cfg
    return dict(RUNG_CONFIGS["swizzle"])


def tuned_config(kind: str) -> dict:
    """The autotuned rung's configuration: this process's sweep (run now on a GPU if there is none yet);
    on the simulator the winner recorded on the reference GPU."""
    if lib.ON_GPU and kind not in _SWEEP:
        autotune(kind)
    if kind in _SWEEP:
        best = next(r for r in _SWEEP[kind] if r["winner"])
        return {key: best[key] for key in RUNG_CONFIGS["swizzle"]}
    return recorded_tuned_config(kind)


def kernel_resources(kernel, threads: int) -> dict:
    """Registers, local memory (spills), shared memory and resident blocks per SM of a compiled kernel (GPU)."""
    regs, local = int(_one(kernel.get_regs_per_thread())), int(_one(kernel.get_local_mem_per_thread()))
    smem = int(_one(kernel.get_shared_mem_per_block()))
    dev = cuda.get_current_device()
    per_sm = min(dev.MAX_THREADS_PER_MULTIPROCESSOR // threads,
                 dev.MAX_REGISTERS_PER_MULTIPROCESSOR // (max(regs, 1) * threads),
                 dev.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR // smem if smem else 32)
    return dict(registers=regs, local_bytes=local, smem_bytes=smem, threads=threads, blocks_per_sm=per_sm)


def _tiled_rung(kind: str, name: str, config, note: str) -> Rung:
    """A rung that launches make_mma_tiled_kernel with `config` (a dict, or a function of the kind)."""
    def run(a, b, c):
        cfg = config(kind) if callable(config) else config
        launch_mma_tiled(kind, a, b, c, cfg, where=f"{name}_{kind}")
    run.__name__ = f"{name}_{kind}"
    return Rung(f"{name}_{kind}", run, note, dtype=PRECISION[kind])


def _rungs(kind):
    """(small-tile rungs, large-tile rungs) of one kind, in ladder order."""
    rung1 = (_tiled_rung(kind, "matmul_mma_shared", RUNG_CONFIGS["shared"], "32×16 block tiles in shared")
             if kind == "tf32" else
             Rung(f"matmul_mma_ldmatrix_{kind}", globals()[f"matmul_mma_ldmatrix_{kind}"],
                  "32×16 block tiles in shared, ldmatrix", dtype=PRECISION[kind]))
    small = [Rung(f"matmul_mma_global_{kind}", globals()[f"matmul_mma_global_{kind}"],
                  "one warp per 16×8 tile, from global", dtype=PRECISION[kind]),
             rung1,
             _tiled_rung(kind, "matmul_mma_pipeline", RUNG_CONFIGS["pipeline"], "+ cp.async, 3 stages")]
    large = [_tiled_rung(kind, "matmul_mma_warptile", RUNG_CONFIGS["warptile"], "128×128 blocks, 64×32 warps"),
             _tiled_rung(kind, "matmul_mma_swizzle", RUNG_CONFIGS["swizzle"], "+ XOR-swizzled shared tiles"),
             _tiled_rung(kind, "matmul_mma_autotuned", tuned_config, "the sweep's fastest configuration")]
    return small, large


# The precision a row is labelled with (the 16-bit inputs travel as int16 bit patterns; the rows say what
# the tensor cores multiply).
PRECISION = {"tf32": "tf32", "f16": "float16", "bf16": "bfloat16"}
RUNGS = {kind: sum(_rungs(kind), []) for kind in K_STEP}
BASELINES = {
    "tf32": [Baseline("torch.matmul.tf32", _torch_matmul_tf32, "cuBLAS, TF32 on", dtype="tf32")],
    "f16": [Baseline("torch.matmul.fp16", _torch_mm_b16("float16"), "cuBLAS, fp16 in, fp32 out", dtype="float16")],
    "bf16": [Baseline("torch.matmul.bf16", _torch_mm_b16("bfloat16"), "cuBLAS, bf16 in, fp32 out",
                      dtype="bfloat16")],
}
SIZES = [(4096, 4096, 4096)]
# On the simulator: the small-tile rungs at 32 × 16 × 64 (rung 0: 4 warps; rungs 1-2: one block of 4 warps; the
# 3-stage ring wraps for TF32), the large-tile ones at one block of the largest of their tiles (the recorded
# autotuned tile may exceed 128 × 128) and one K slice. Every lane and swizzled chunk is exercised; small
# enough for CI (tests/test_tensorcores.py runs a ring of 3 stages over 5 slices).
def _sim_sizes(kind, group):
    if group == "small":
        return [(32, 16, 64)]
    tiles = [RUNG_CONFIGS["warptile"], RUNG_CONFIGS["swizzle"], recorded_tuned_config(kind)]
    return [(max(t["BM"] for t in tiles), max(t["BN"] for t in tiles), BK_BYTES // (4 if kind == "tf32" else 2))]


def _ladder(kind, group, rungs, baselines):
    return Ladder(chapter=CHAPTER, topic=f"{kind} 4096 ({group} tiles)",
                  description=f"C = A @ B, {kind} inputs, float32 out",
                  make_inputs=_inputs(kind), out_shape=lambda a, b: (a.shape[0], b.shape[1]),
                  reference=_reference(kind), bytes=matmul_bytes(kind), flops=matmul_flops, unit="TFLOP/s",
                  sizes=SIZES, sim_sizes=_sim_sizes(kind, group), rungs=rungs, baselines=baselines,
                  tolerance=matmul_tolerance(kind))


# Per kind: a ladder of the small-tile rungs with the cuBLAS baseline, then one of the large-tile rungs.
LADDERS = [ladder for kind in K_STEP
           for ladder in (_ladder(kind, "small", _rungs(kind)[0], BASELINES[kind]),
                          _ladder(kind, "large", _rungs(kind)[1], []))]


# --- the ladder as a table (for the chapter) -----------------------------------------------------------
KIND_LABELS = {"tf32": "TF32", "f16": "FP16", "bf16": "BF16"}
STEPS = ["global", "shared", "pipeline", "warptile", "swizzle", "autotuned"]


def rung_name(step: str, kind: str) -> str:
    """The ladder's rung name for a step: rung 1 is 'shared' in TF32 and 'ldmatrix' in 16 bits."""
    if step not in STEPS:
        raise ValueError(f"step must be one of {STEPS}, got {step!r}")
    if step == "shared" and kind != "tf32":
        step = "ldmatrix"
    return f"matmul_mma_{step}_{kind}"


def ladder_table(df, steps=STEPS, size="4096x4096x4096"):
    """Recorded TFLOP/s of the given steps, one column per input kind, each with its ratio to cuBLAS
    measured in the same run (a 'cuBLAS' row last). Rungs not recorded are left empty."""
    import pandas as pd

    rows = df[df["size"] == size].set_index("kernel")["value"]
    table = {}
    for kind, label in KIND_LABELS.items():
        base = rows.get(BASELINES[kind][0].name)
        col = {}
        for step in steps:
            value = rows.get(rung_name(step, kind))
            col[f"{STEPS.index(step)} {step}"] = "" if value is None else f"{value:.1f} ({value / base:.3f}×)"
        col["cuBLAS"] = "" if base is None else f"{base:.0f} (1×)"
        table[label] = col
    out = pd.DataFrame(table)
    out.index.name = "rung (TFLOP/s, × cuBLAS)"
    return out


# --- recordings that are not a ladder: the ceiling ----------------------------------------------------
def _one(per_signature):
    """numba answers per signature once a kernel has several; each ceiling kernel has one."""
    return next(iter(per_signature.values())) if isinstance(per_signature, dict) else per_signature


def record_ceiling(folder: Path, chains_list=CEILING_CHAINS) -> Path:
    """Time the register-only mma.sync loop for every kind and number of chains on this GPU and write
    tensorcores.mma_ceiling.csv. Each configuration is checked (exact sums) before it is timed."""
    from lib.measure.results import environment
    from lib.measure.timing import time_cuda

    sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    blocks = CEILING_BLOCKS_PER_SM * sms
    env = environment()
    rows = []
    for kind in K_STEP:
        for chains in chains_list:
            launch, out = run_ceiling(kind, chains, blocks)
            launch()
            got = out.copy_to_host()
            want = ceiling_expected(kind, chains)
            if not (got == want).all():
                bad = int(np.argmax(got != want))
                raise AssertionError(f"mma ceiling {kind} × {chains}: thread {bad} wrote {got[bad]}, expected "
                                     f"{want}: not timed")
            kernel = _CEILING_KERNELS[(kind, chains)]
            sass, registers, local = (_one(kernel.inspect_sass()), _one(kernel.get_regs_per_thread()),
                                      _one(kernel.get_local_mem_per_thread()))
            flops = ceiling_flops(kind, chains, blocks * CEILING_THREADS)
            timing = time_cuda(launch, flops=flops)
            rows.append(dict(kind=kind, chains=chains, blocks=blocks, threads=CEILING_THREADS,
                             iters=CEILING_ITERS, flops=flops, median_ms=round(timing.median_ms, 6),
                             q1_ms=round(timing.q1_ms, 6), q3_ms=round(timing.q3_ms, 6), reps=timing.reps,
                             tflops=round(timing.tflops, 2), timer=timing.timer,
                             registers=registers, local_bytes=local,
                             hmma_in_sass=sum(" HMMA" in line for line in sass.splitlines())))
    path = Path(folder) / f"{CHAPTER}.mma_ceiling.csv"
    with open(path, "w", newline="") as f:
        f.write(f"# register-only mma.sync loop; device {env['device']}, numba-cuda {env['numba_cuda']}, "
                f"date {env['date']}\n")
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


SASS_OPS = ("HMMA", "LDSM", "LDS", "LDGSTS", "LDG", "BAR", "LDL", "STL")


def sass_counts(sass: str) -> dict:
    """Static counts of SASS instruction kinds (HMMA: tensor-core MMAs; LDSM: ldmatrix; LDGSTS: cp.async;
    LDL/STL: local memory, i.e. spills). Never-executed placeholders (@!PT) are not counted."""
    counts = dict.fromkeys(SASS_OPS, 0)
    for line in sass.splitlines():
        parts = line.split("*/")
        if len(parts) < 2 or not parts[1].strip():
            continue
        words = parts[1].strip().rstrip(";").split()
        if words[0] == "@!PT":
            continue
        op = (words[1] if words[0].startswith("@") else words[0]).split(".")[0]
        if op in counts:
            counts[op] += 1
    return counts


def _write_csv(path: Path, rows: list[dict], header: str):
    from lib.measure.results import environment

    env = environment()
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with open(path, "w", newline="") as f:
        f.write(f"# {header}; device {env['device']}, numba-cuda {env['numba_cuda']}, date {env['date']}\n")
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _rung_kernels(kind):
    """(rung name, dispatcher, threads per block) of every rung of `kind` at its configuration."""
    out = [(f"matmul_mma_global_{kind}", globals()[f"matmul_mma_global_{kind}_kernel"], WARPS_PER_BLOCK * WARP)]
    if kind != "tf32":
        out.append((f"matmul_mma_ldmatrix_{kind}", globals()[f"matmul_mma_ldmatrix_{kind}_kernel"], THREADS1))
    configs = dict(RUNG_CONFIGS, autotuned=tuned_config(kind))
    for name, cfg in configs.items():
        if name == "shared" and kind != "tf32":
            continue
        out.append((f"matmul_mma_{name}_{kind}", *make_mma_tiled_kernel(kind, **cfg)))
    return out


def record_extra(folder: Path) -> list[Path]:
    """On the GPU: the register-only mma.sync ceiling (tensorcores.mma_ceiling.csv), the autotune sweeps
    (tensorcores.autotune.csv), and every rung's registers, spills, shared memory and SASS counts
    (tensorcores.kernels.csv). Each rung is checked again at 256 × 256 × 128 before its resources are
    recorded, so nothing unchecked is."""
    from lib.grading.check import compare

    folder = Path(folder)
    paths = [record_ceiling(folder)]
    sweep = [row for kind in K_STEP for row in (_SWEEP.get(kind) or autotune(kind))]
    paths.append(folder / f"{CHAPTER}.autotune.csv")
    _write_csv(paths[-1], sweep, f"autotune sweep of make_mma_tiled_kernel at {TUNE_SIZE}³")
    rows = []
    for kind in K_STEP:
        inputs = _inputs(kind)((256, 256, 128), np.random.default_rng(2))
        expected = _reference(kind)(*inputs)
        tol = matmul_tolerance(kind)(*inputs, expected)
        d = [cuda.to_device(x) for x in inputs] + [cuda.device_array(expected.shape, np.float32)]
        for rung, (name, kernel, threads) in zip(RUNGS[kind], _rung_kernels(kind)):
            assert rung.name == name, (rung.name, name)
            d[2].copy_to_device(np.full(expected.shape, np.nan, np.float32))
            rung.run(*d)
            cuda.synchronize()
            bad = compare(d[2].copy_to_host(), expected, tol.rtol, tol.atol, tol.scale)
            if bad is not None:
                raise AssertionError(f"{name} failed its check before its resources were recorded: {bad.describe()}")
            sass = _one(kernel.inspect_sass())
            rows.append(dict(kind=kind, kernel=name, **kernel_resources(kernel, threads), **sass_counts(sass)))
    paths.append(folder / f"{CHAPTER}.kernels.csv")
    _write_csv(paths[-1], rows, "per-rung resources and static SASS instruction counts")
    return paths


def load_extra(name: str, folder: Path | None = None):
    """A recorded extra table (name: 'autotune' or 'kernels') as a DataFrame."""
    import pandas as pd

    from lib.measure.results import RESULTS

    return pd.read_csv(Path(folder or RESULTS) / f"{CHAPTER}.{name}.csv", comment="#")


def load_ceiling(folder: Path | None = None):
    """The recorded ceiling as a DataFrame (comment line skipped)."""
    import pandas as pd

    from lib.measure.results import RESULTS

    return pd.read_csv(Path(folder or RESULTS) / f"{CHAPTER}.mma_ceiling.csv", comment="#")


# The book's own small launches (ceiling checks, one-warp demos) are deliberate: no low-occupancy warning.
quiet_kernels(globals())
