"""Kernels of the tensor-core chapter: the register-only ``mma.sync`` ceiling (what the tensor cores reach
when nothing waits on memory) and the matmul ladder on the tensor cores, in TF32 and FP16/BF16 with float32
accumulation, beside cuBLAS through torch. The instructions and their fragment layouts are in
:mod:`lib.mma`.

16-bit inputs travel as int16 bit patterns (numpy has no bfloat16, and torch reads int16 device memory
as is): ``lib.mma.b16_values`` decodes them, ``lib.mma.bf16_bits`` makes them."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from numba import cuda, float32

import lib
from lib import mma
from lib.bench import Baseline, Ladder, Rung
from lib.check import k_scaled_rtol
from lib.exercises import Tolerance
from lib.quiet_launches import quiet, quiet_kernels
from lib.validate import require

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
    lane loading its own fragment elements (lib.mma's layout) from global memory.

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
    """The check's bound, relative to |A| @ |B|: float32 accumulation over K terms (lib.check's K-scaled
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


RUNGS = {
    "tf32": [Rung("matmul_mma_global_tf32", matmul_mma_global_tf32, "one warp per 16×8 tile, from global")],
    "f16": [Rung("matmul_mma_global_f16", matmul_mma_global_f16, "one warp per 16×8 tile, from global"),
            Rung("matmul_mma_ldmatrix_f16", matmul_mma_ldmatrix_f16, "32×16 block tiles in shared, ldmatrix")],
    "bf16": [Rung("matmul_mma_global_bf16", matmul_mma_global_bf16, "one warp per 16×8 tile, from global"),
             Rung("matmul_mma_ldmatrix_bf16", matmul_mma_ldmatrix_bf16, "32×16 block tiles in shared, ldmatrix")],
}
BASELINES = {
    "tf32": [Baseline("torch.matmul.tf32", _torch_matmul_tf32, "cuBLAS, TF32 on")],
    "f16": [Baseline("torch.matmul.fp16", _torch_mm_b16("float16"), "cuBLAS, fp16 in, fp32 out")],
    "bf16": [Baseline("torch.matmul.bf16", _torch_mm_b16("bfloat16"), "cuBLAS, bf16 in, fp32 out")],
}
SIZES = [(4096, 4096, 4096)]
SIM_SIZES = [(32, 32, 32)]      # rung 0: 8 warps; rung 1: 2 blocks of 4 warps; 2 (16-bit) or 4 (TF32) k-steps


def _ladder(kind):
    return Ladder(chapter=CHAPTER, topic=f"{kind} 4096", description=f"C = A @ B, {kind} inputs, float32 out",
                  make_inputs=_inputs(kind), out_shape=lambda a, b: (a.shape[0], b.shape[1]),
                  reference=_reference(kind), bytes=matmul_bytes(kind), flops=matmul_flops, unit="TFLOP/s",
                  sizes=SIZES, sim_sizes=SIM_SIZES, rungs=RUNGS[kind], baselines=BASELINES[kind],
                  tolerance=matmul_tolerance(kind))


LADDERS = [_ladder(kind) for kind in ("tf32", "f16", "bf16")]


# --- recordings that are not a ladder: the ceiling ----------------------------------------------------
def _one(per_signature):
    """numba answers per signature once a kernel has several; each ceiling kernel has one."""
    return next(iter(per_signature.values())) if isinstance(per_signature, dict) else per_signature


def record_ceiling(folder: Path, chains_list=CEILING_CHAINS) -> Path:
    """Time the register-only mma.sync loop for every kind and number of chains on this GPU and write
    tensorcores.mma_ceiling.csv. Each configuration is checked (exact sums) before it is timed."""
    from lib.results import environment
    from lib.timing import time_cuda

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


def record_extra(folder: Path) -> list[Path]:
    """On the GPU: the register-only mma.sync ceiling (tensorcores.mma_ceiling.csv)."""
    return [record_ceiling(folder)]


def load_ceiling(folder: Path | None = None):
    """The recorded ceiling as a DataFrame (comment line skipped)."""
    import pandas as pd

    from lib.results import RESULTS

    return pd.read_csv(Path(folder or RESULTS) / f"{CHAPTER}.mma_ceiling.csv", comment="#")


# The book's own small launches (ceiling checks, one-warp demos) are deliberate: no low-occupancy warning.
quiet_kernels(globals())
