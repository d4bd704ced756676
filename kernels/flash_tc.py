"""Kernels of the chapter "FlashAttention on the tensor cores": the attention chapter's fused forward pass,
out = softmax(q @ k.T / sqrt(d)) @ v per head, with both products on the tensor cores (``mma.sync``
m16n8k16, FP16 or BF16 inputs, float32 accumulation) and the online softmax in float32 registers.

16-bit inputs travel as int16 bit patterns, as in :mod:`kernels.tensorcores` (numpy has no bfloat16 and
numba no bf16 type; torch reads the same device memory as float16 or bfloat16 through ``Tensor.view``).
The output is float32. The instructions and their fragment layouts are :mod:`lib.runtime.mma`'s; this module adds
one of its own, the float32 → 16-bit pair conversion that turns the probabilities into an A fragment
(``pack_f16x2`` / ``pack_bf16x2``), with its simulator twin, in the same way.

Where the rest lives: chapters/flash_tc.md (the page); tests/test_flash_tc.py (tests); data/results/flash_tc.*
(recorded on the H200). Record it with ``python -m tools.record flash_tc`` on a GPU; on the simulator the same
kernels run through the page's checks and the tests.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
from numba import cuda, float32, uint32

import lib
from lib.runtime import mma
from lib.measure.bench import Baseline, Ladder, Rung
from lib.grading.check import k_scaled_rtol
from lib.grading.exercises import spike_late_qkv
from lib.grading.spec import Tolerance
from lib.runtime.quiet_launches import quiet, quiet_kernels
from lib.runtime.validate import require
from lib.runtime.vector import SMEM_ALIGN
from kernels import attention
from kernels.attention import attention64, attention_flops

CHAPTER = "flash_tc"
WARP = 32
FULL_MASK = 0xFFFFFFFF
ROWS_PER_WARP = 16                   # the M of one mma: each warp owns 16 query rows
CHUNK = 8                            # 16-bit values in a 16-byte chunk (one cp.async, one ldmatrix row)
STATIC_SMEM_LIMIT = 48 * 1024
KINDS = ("fp16", "bf16")
# head dim -> warps per block (query rows = 16 · warps) and keys per tile (BC)
CONFIGS = {64: dict(WARPS=4, BC=64), 128: dict(WARPS=4, BC=32)}
HEAD_DIMS = tuple(CONFIGS)
LOG2E = 1.4426950408889634


# --- one instruction of our own: two float32 -> one register of two 16-bit values -----------------------
def _pack_twin(kind: str):
    def pack(lo, hi):
        """Round lo and hi to the 16-bit format (to nearest even, as cvt.rn does) and pack them, lo in the
        low half: the register layout of an mma operand."""
        pair = np.array([lo, hi], dtype=np.float32)
        bits = pair.astype(np.float16).view(np.uint16) if kind == "fp16" else mma.bf16_bits(pair)
        return np.uint32(int(bits[0]) | (int(bits[1]) << 16))
    pack.__name__ = "pack_f16x2" if kind == "fp16" else "pack_bf16x2"
    return pack


def _pack_intrinsic(kind: str):
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    ptx = "cvt.rn.f16x2.f32 $0, $2, $1;" if kind == "fp16" else "cvt.rn.bf16x2.f32 $0, $2, $1;"

    @intrinsic
    def pack(typingctx, lo, hi):
        # PTX puts its first source in the upper half, so hi goes first
        if not (isinstance(lo, types.Float) and isinstance(hi, types.Float)):
            return None

        def codegen(context, builder, sig, args):
            lo32, hi32 = (context.cast(builder, v, t, types.float32) for v, t in zip(args, sig.args))
            fnty = ir.FunctionType(ir.IntType(32), [ir.FloatType(), ir.FloatType()])
            return builder.asm(fnty, ptx, "=r,f,f", [lo32, hi32], False, "cvt")
        return types.uint32(lo, hi), codegen
    return pack


if lib.SIMULATOR:
    pack_f16x2, pack_bf16x2 = _pack_twin("fp16"), _pack_twin("bf16")
else:
    pack_f16x2, pack_bf16x2 = _pack_intrinsic("fp16"), _pack_intrinsic("bf16")


# --- the kernel ---------------------------------------------------------------------------------------
def smem_bytes(head_dim: int, warps: int, bc: int) -> int:
    """Shared memory of one block: the q tile, and two stages of the k and v tiles (16-bit values)."""
    return 2 * head_dim * (ROWS_PER_WARP * warps + 2 * 2 * bc)


def check_config(head_dim: int, warps: int, bc: int):
    threads = WARP * warps
    if head_dim % 32 or bc % 16:
        raise ValueError(f"head dim must be a multiple of 32 and the key tile of 16 (got {head_dim}, {bc})")
    if (bc * head_dim // CHUNK) % threads or (ROWS_PER_WARP * warps * head_dim // CHUNK) % threads:
        raise ValueError("every thread must copy the same number of 16-byte chunks of each tile")
    if smem_bytes(head_dim, warps, bc) > STATIC_SMEM_LIMIT:
        raise ValueError(f"{smem_bytes(head_dim, warps, bc)} bytes of shared memory: over the 48 KB a block's "
                         "static arrays may take")


_KERNELS: dict = {}


def make_flash_tc_kernel(head_dim: int, causal: bool, kind: str, warps: int | None = None, bc: int | None = None):
    """Build (once per configuration) the tensor-core FlashAttention kernel. Every size is a compile-time
    constant, so the loops over fragments unroll and the scores, the output and the softmax state of a
    warp's 16 rows live in registers."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if head_dim not in CONFIGS:
        raise ValueError(f"head dimension {head_dim} is not built; this kernel supports {HEAD_DIMS}")
    warps = CONFIGS[head_dim]["WARPS"] if warps is None else warps
    bc = CONFIGS[head_dim]["BC"] if bc is None else bc
    key = (head_dim, causal, kind, warps, bc)
    if key in _KERNELS:
        return _KERNELS[key]
    check_config(head_dim, warps, bc)
    D, BC, WARPS, CAUSAL, BF16 = head_dim, bc, warps, causal, kind == "bf16"
    THREADS, BR = WARP * warps, ROWS_PER_WARP * warps
    CHUNKS = D // CHUNK                   # 16-byte chunks in a row of q, k or v
    Q_COPIES = BR * CHUNKS // THREADS     # chunks each thread copies of the q tile
    KV_COPIES = BC * CHUNKS // THREADS    # ... and of each k and v tile
    S_TILES = BC // 8                     # score fragments (16 × 8) per key tile
    O_TILES = D // 8                      # output fragments (16 × 8)
    K_STEPS = D // 16                     # mma steps of q @ k.T (along d)
    P_STEPS = BC // 16                    # mma steps of p @ v (along the keys)
    TILE = BC * D                         # one stage of k (or v) in shared memory, in 16-bit values
    Q_SIZE, KV_SIZE = BR * D, 2 * TILE    # computed here: a shared array's shape must be a literal number
    C = float32(LOG2E / math.sqrt(D))     # scores in log2 units: exp(s / sqrt(D)) = exp2(s · C)
    NEG_INF = float32(-math.inf)

    @cuda.jit(device=True, inline=True)
    def swizzled(row, chunk):
        """Flat index of 16-byte chunk `chunk` of `row` in a tile of D-value rows. The chunk is XORed with
        row % 8, so the eight rows one ldmatrix phase reads sit in eight different bank groups."""
        return row * D + ((chunk ^ (row & 7)) * CHUNK)

    @cuda.jit(fastmath=True)
    def flash_tc_kernel(q, k, v, out):
        """out[z, i] = Σ_j softmax_j(q[z, i]·k[z, j] / sqrt(D)) v[z, j] with both products on the tensor
        cores: q, k, v 16-bit (FP16 or BF16 bit patterns, int16), out float32. (Causal build: key j is
        masked for query i when j > i, and tiles wholly right of a warp's rows are skipped.)

        Warp w owns BR/WARPS = 16 query rows; their q fragments (A of q @ k.T) come once from shared memory
        by ldmatrix and stay in registers. For each tile of BC keys: S = q @ k.T in 16 × 8 fragments
        (k by ldmatrix: its rows are keys, which is B's column-major order); each thread holds 2 rows of S
        (lib.runtime.mma's C layout: g and g + 8), so a row maximum is the thread's own values and two shuffles
        across its quad; the running max m, sum l and output o are rescaled by exp2(m_old − m_new);
        P = exp2(S·C − m·C) is rounded to 16 bits in registers and, since the C layout of two neighbouring
        16 × 8 fragments is the A layout of one 16 × 16 fragment, used straight away as A of o += P @ v
        (v by ldmatrix.trans: its rows are keys, B wants them along k). At the end o / l is written.

        Memory: q read once; k and v read once per query block (ceil(m / BR) times per head, causal about
        half), by cp.async in 16-byte chunks (coalesced: a row of a tile is contiguous in memory) into a
        two-stage buffer, so tile t + 1 is in flight while tile t is computed. Shared rows are swizzled
        (chunk XOR row % 8): each ldmatrix phase reads 8 rows at one logical chunk, all in different banks.
        Writes out once, 8 bytes per store.
        Launch: THREADS = 32·WARPS threads, grid (m / BR, heads); m % BR == 0, n % BC == 0 (causal: m == n);
        the launcher checks.
        """
        q_s = cuda.shared.array(Q_SIZE, np.int16, alignment=SMEM_ALIGN)
        k_s = cuda.shared.array(KV_SIZE, np.int16, alignment=SMEM_ALIGN)
        v_s = cuda.shared.array(KV_SIZE, np.int16, alignment=SMEM_ALIGN)
        q_frag = cuda.local.array((K_STEPS, 4), uint32)
        s = cuda.local.array((S_TILES, 4), float32)
        o = cuda.local.array((O_TILES, 4), float32)
        tid = cuda.threadIdx.x
        lane, warp = tid % WARP, tid // WARP
        g, t = lane >> 2, lane & 3
        z = cuda.blockIdx.y
        i0 = cuda.blockIdx.x * BR
        m_len, n_len = q.shape[1], k.shape[1]
        head_q, head_kv = z * m_len * D, z * n_len * D          # flat offsets of this head
        # ldmatrix.x4 row addresses: lane 8·mat + r gives row r of 8 × 8 matrix mat
        mat, r8 = lane >> 3, lane & 7

        for e in range(Q_COPIES):                                # the q tile, then k/v tile 0: one group
            c = tid + e * THREADS
            row, chunk = c // CHUNKS, c % CHUNKS
            mma.cp_async_cg16(q_s, swizzled(row, chunk), q, head_q + (i0 + row) * D + chunk * CHUNK)
        for e in range(KV_COPIES):
            c = tid + e * THREADS
            row, chunk = c // CHUNKS, c % CHUNKS
            mma.cp_async_cg16(k_s, swizzled(row, chunk), k, head_kv + row * D + chunk * CHUNK)
            mma.cp_async_cg16(v_s, swizzled(row, chunk), v, head_kv + row * D + chunk * CHUNK)
        mma.cp_async_commit()

        for x in range(O_TILES):
            for i in range(4):
                o[x, i] = float32(0.0)
        m0 = m1 = NEG_INF                     # running max of rows g and g + 8 (raw scores)
        l0 = l1 = float32(0.0)                # this thread's share of their running sums
        row_lo = i0 + ROWS_PER_WARP * warp + g    # the query index of row g (row g + 8 is row_lo + 8)

        tiles = n_len // BC
        if CAUSAL:
            tiles = min(tiles, (i0 + BR + BC - 1) // BC)     # tiles right of the block's diagonal: all masked
        for tile in range(tiles):
            stage = tile & 1
            if tile + 1 < tiles:                                 # tile + 1 into the other stage
                j1 = (tile + 1) * BC
                for e in range(KV_COPIES):
                    c = tid + e * THREADS
                    row, chunk = c // CHUNKS, c % CHUNKS
                    src = head_kv + (j1 + row) * D + chunk * CHUNK
                    mma.cp_async_cg16(k_s, (1 - stage) * TILE + swizzled(row, chunk), k, src)
                    mma.cp_async_cg16(v_s, (1 - stage) * TILE + swizzled(row, chunk), v, src)
            mma.cp_async_commit()                                # (an empty group on the last tile)
            mma.cp_async_wait_group(1)                           # tile `tile` (and q) have landed
            cuda.syncthreads()
            if tile == 0:
                for kk in range(K_STEPS):    # A of q @ k.T: rows 16w + r8 + 8(mat & 1), dims 16kk + 8(mat >> 1)
                    q_frag[kk, 0], q_frag[kk, 1], q_frag[kk, 2], q_frag[kk, 3] = mma.ldmatrix_x4(
                        q_s, swizzled(ROWS_PER_WARP * warp + r8 + 8 * (mat & 1), 2 * kk + (mat >> 1)))
            j0 = tile * BC
            # a warp whose rows all lie left of this tile has nothing to do in it (causal)
            if not CAUSAL or j0 <= i0 + ROWS_PER_WARP * warp + ROWS_PER_WARP - 1:
                kv0 = stage * TILE
                # S = q @ k.T: for 8 keys at a time, B fragments of two k-steps per ldmatrix.x4
                for x in range(S_TILES):
                    for i in range(4):
                        s[x, i] = float32(0.0)
                    for kk in range(0, K_STEPS, 2):  # keys 8x + r8, dims 16kk + 8·mat
                        b0, b1, b2, b3 = mma.ldmatrix_x4(k_s, kv0 + swizzled(8 * x + r8, 2 * kk + mat))
                        for step in range(2):
                            bl, bh = (b0, b1) if step == 0 else (b2, b3)
                            if BF16:
                                d = mma.mma_m16n8k16_bf16(q_frag[kk + step, 0], q_frag[kk + step, 1],
                                                          q_frag[kk + step, 2], q_frag[kk + step, 3],
                                                          bl, bh, s[x, 0], s[x, 1], s[x, 2], s[x, 3])
                            else:
                                d = mma.mma_m16n8k16_f16(q_frag[kk + step, 0], q_frag[kk + step, 1],
                                                         q_frag[kk + step, 2], q_frag[kk + step, 3],
                                                         bl, bh, s[x, 0], s[x, 1], s[x, 2], s[x, 3])
                            s[x, 0], s[x, 1], s[x, 2], s[x, 3] = d
                # mask (causal: only tiles that cross the diagonal have masked scores)
                if CAUSAL and j0 + BC - 1 > row_lo:
                    for x in range(S_TILES):
                        for i in range(4):
                            if j0 + 8 * x + 2 * t + (i & 1) > row_lo + 8 * (i >> 1):
                                s[x, i] = NEG_INF
                # online softmax for rows g (s[., 0:2]) and g + 8 (s[., 2:4])
                mx0, mx1 = m0, m1
                for x in range(S_TILES):
                    mx0 = max(mx0, max(s[x, 0], s[x, 1]))
                    mx1 = max(mx1, max(s[x, 2], s[x, 3]))
                for step in (1, 2):                              # the quad shares the two rows
                    mx0 = max(mx0, cuda.shfl_xor_sync(FULL_MASK, mx0, step))
                    mx1 = max(mx1, cuda.shfl_xor_sync(FULL_MASK, mx1, step))
                # key 0 is unmasked for every row and lies in tile 0, so mx0, mx1 are finite from here on
                alpha0, alpha1 = math.exp2((m0 - mx0) * C), math.exp2((m1 - mx1) * C)   # exp2(-inf) = 0
                m0, m1 = mx0, mx1
                l0 *= alpha0
                l1 *= alpha1
                for x in range(O_TILES):
                    o[x, 0] *= alpha0
                    o[x, 1] *= alpha0
                    o[x, 2] *= alpha1
                    o[x, 3] *= alpha1
                mc0, mc1 = m0 * C, m1 * C
                for x in range(S_TILES):
                    s[x, 0] = math.exp2(s[x, 0] * C - mc0)
                    s[x, 1] = math.exp2(s[x, 1] * C - mc0)
                    s[x, 2] = math.exp2(s[x, 2] * C - mc1)
                    s[x, 3] = math.exp2(s[x, 3] * C - mc1)
                    l0 += s[x, 0] + s[x, 1]
                    l1 += s[x, 2] + s[x, 3]
                # o += P @ v: P's A fragment for keys 16kk..16kk+15 is S fragments 2kk and 2kk + 1, packed
                for kk in range(P_STEPS):
                    if BF16:
                        a0 = pack_bf16x2(s[2 * kk, 0], s[2 * kk, 1])
                        a1 = pack_bf16x2(s[2 * kk, 2], s[2 * kk, 3])
                        a2 = pack_bf16x2(s[2 * kk + 1, 0], s[2 * kk + 1, 1])
                        a3 = pack_bf16x2(s[2 * kk + 1, 2], s[2 * kk + 1, 3])
                    else:
                        a0 = pack_f16x2(s[2 * kk, 0], s[2 * kk, 1])
                        a1 = pack_f16x2(s[2 * kk, 2], s[2 * kk, 3])
                        a2 = pack_f16x2(s[2 * kk + 1, 0], s[2 * kk + 1, 1])
                        a3 = pack_f16x2(s[2 * kk + 1, 2], s[2 * kk + 1, 3])
                    for x in range(0, O_TILES, 2):  # keys 16kk + r8 + 8(mat & 1), dims 8x + 8(mat >> 1)
                        b0, b1, b2, b3 = mma.ldmatrix_x4_trans(
                            v_s, kv0 + swizzled(16 * kk + r8 + 8 * (mat & 1), x + (mat >> 1)))
                        for step in range(2):
                            bl, bh = (b0, b1) if step == 0 else (b2, b3)
                            xo = x + step
                            if BF16:
                                d = mma.mma_m16n8k16_bf16(a0, a1, a2, a3, bl, bh,
                                                          o[xo, 0], o[xo, 1], o[xo, 2], o[xo, 3])
                            else:
                                d = mma.mma_m16n8k16_f16(a0, a1, a2, a3, bl, bh,
                                                         o[xo, 0], o[xo, 1], o[xo, 2], o[xo, 3])
                            o[xo, 0], o[xo, 1], o[xo, 2], o[xo, 3] = d
            cuda.syncthreads()                                   # all warps done with this stage
        for step in (1, 2):                                      # the quad's partial sums
            l0 += cuda.shfl_xor_sync(FULL_MASK, l0, step)
            l1 += cuda.shfl_xor_sync(FULL_MASK, l1, step)
        inv0, inv1 = float32(1.0) / l0, float32(1.0) / l1
        for x in range(O_TILES):
            col = 8 * x + 2 * t
            out[z, row_lo, col] = o[x, 0] * inv0
            out[z, row_lo, col + 1] = o[x, 1] * inv0
            out[z, row_lo + 8, col] = o[x, 2] * inv1
            out[z, row_lo + 8, col + 1] = o[x, 3] * inv1

    _KERNELS[key] = (quiet(flash_tc_kernel), THREADS, BR, BC)
    return _KERNELS[key]


def flash_tc(q, k, v, out, kind: str, causal: bool = False, warps: int | None = None, bc: int | None = None):
    """out = attention(q, k, v) on the tensor cores; q, k, v int16 bit patterns of `kind` ('fp16' or
    'bf16'), shape (heads, m or n, d), out float32 (heads, m, d)."""
    where = f"flash_tc_{kind}" + ("_causal" if causal else "")
    for name, x in (("q", q), ("k", k), ("v", v)):
        require(x, name, dtype=np.int16, ndim=3, where=where)
    heads, m, d = q.shape
    n = k.shape[1]
    if k.shape != (heads, n, d) or v.shape != k.shape:
        raise ValueError(f"{where}: k and v must have shape ({heads}, n, {d}) to match q {tuple(q.shape)}, "
                         f"got {tuple(k.shape)} and {tuple(v.shape)}")
    require(out, "out", dtype=np.float32, shape=(heads, m, d), where=where)
    kernel, threads, br, bc_ = make_flash_tc_kernel(d, causal, kind, warps, bc)
    if m % br or n % bc_ or n == 0:
        raise ValueError(f"{where}: needs m % {br} == 0 and n % {bc_} == 0 (n > 0), got m = {m}, n = {n} "
                         "(this kernel has no ragged tiles)")
    if causal and m != n:
        raise ValueError(f"{where}: the causal mask here needs as many queries as keys (m = {m}, n = {n})")
    if heads and m:
        kernel[(m // br, heads), threads](q, k, v, out)


def flash_tc_fp16(q, k, v, out):
    flash_tc(q, k, v, out, "fp16")


def flash_tc_bf16(q, k, v, out):
    flash_tc(q, k, v, out, "bf16")


def flash_tc_fp16_causal(q, k, v, out):
    flash_tc(q, k, v, out, "fp16", causal=True)


def flash_tc_bf16_causal(q, k, v, out):
    flash_tc(q, k, v, out, "bf16", causal=True)


# --- baselines: torch SDPA on the same 16-bit memory ---------------------------------------------------
def _sdpa(kind: str, causal: bool):
    def run(q, k, v, out):
        """scaled_dot_product_attention on the 16-bit inputs (viewed, not copied), float32 out."""
        import torch
        import torch.nn.functional as F

        dtype = torch.float16 if kind == "fp16" else torch.bfloat16
        args = [x.view(dtype).unsqueeze(0) for x in (q, k, v)]
        out.copy_(F.scaled_dot_product_attention(*args, is_causal=causal)[0])
    return run


# --- inputs, reference, tolerance ----------------------------------------------------------------------
def to_bits(x, kind: str) -> np.ndarray:
    """float32 values -> int16 bit patterns of `kind`, rounded to nearest even."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.astype(np.float16).view(np.uint16) if kind == "fp16" else mma.bf16_bits(x)
    return bits.view(np.int16)


def values(bits, kind: str) -> np.ndarray:
    return mma.b16_values(bits, "f16" if kind == "fp16" else "bf16")


def make_inputs(kind: str):
    def make(size, rng):
        """The attention chapter's spike-late q, k, v, rounded to `kind`."""
        heads, n, d = size
        return tuple(to_bits(x, kind) for x in spike_late_qkv(rng, (heads, n, d), (heads, n, d)))
    return make


def reference(kind: str, causal: bool = False):
    return lambda q, k, v: attention64(values(q, kind), values(k, kind), values(v, kind), causal)[0]


P_UNIT = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}    # unit roundoff of the probabilities' format


def flash_tc_rtol(kind: str, n: int, d: int) -> float:
    """The bound relative to softmax(s) @ |v|. The inputs are the reference's own values, so what is left
    is (1) P rounded to `kind` before p @ v: each probability off by at most P_UNIT relative, while l sums
    the unrounded ones, so twice P_UNIT; (2) float32 accumulation along n and along d, the attention
    chapter's bound (which also covers exp2.approx, ~2^-22 relative)."""
    return 2 * P_UNIT[kind] + 2 * (k_scaled_rtol(n) + k_scaled_rtol(d))


def tolerance(kind: str, causal: bool = False):
    def tol(q, k, v, expected):
        scale = attention64(values(q, kind), values(k, kind), values(v, kind), causal)[1]
        return Tolerance(rtol=flash_tc_rtol(kind, k.shape[1], q.shape[2]), scale=scale,
                         note=f"{kind} probabilities (2·{P_UNIT[kind]:.1e}) + float32 sums, relative to P @ |v|")
    return tol


def qkvo_bytes(heads: int, n: int, d: int) -> int:
    """The floor: q, k, v read once in 16 bits, out written once in float32."""
    return heads * n * d * (3 * 2 + 4)


def kv_bytes(heads: int, n: int, d: int, causal: bool = False) -> int:
    """k and v as the kernel reads them: every query block reads every key tile it needs."""
    cfg = CONFIGS[d]
    br, bc = ROWS_PER_WARP * cfg["WARPS"], cfg["BC"]
    tiles = sum(min(n // bc, (i0 + br + bc - 1) // bc) if causal else n // bc for i0 in range(0, n, br))
    return 2 * 2 * heads * tiles * bc * d


# --- the ladders --------------------------------------------------------------------------------------
HEADS = 16
SIZES = [(HEADS, 4096, 64)]
SIM_SIZES = {64: [(1, 64, 64)], 128: [(1, 64, 128)]}


def _ladder(topic, kind, d, causal, rungs, baselines, sizes):
    # the rows say the precision of q, k, v (they travel as int16 bit patterns)
    label = {"fp16": "float16", "bf16": "bfloat16"}[kind]
    rungs = [dataclasses.replace(r, dtype=label) for r in rungs]
    baselines = [dataclasses.replace(b, dtype=label) for b in baselines]
    return Ladder(chapter=CHAPTER, topic=topic, description=f"{kind} q, k, v, float32 out, d = {d}"
                  + (", causal" if causal else ""), make_inputs=make_inputs(kind), out_shape=lambda q, k, v: q.shape,
                  reference=reference(kind, causal), bytes=lambda size: qkvo_bytes(*size),
                  flops=lambda size: attention_flops(*size, causal=causal), unit="TFLOP/s", sizes=sizes,
                  sim_sizes=SIM_SIZES[d], rungs=rungs, baselines=baselines,
                  tolerance=tolerance(kind, causal))


LADDERS = [
    _ladder("fp16 d64", "fp16", 64, False, [Rung("flash_tc_fp16", flash_tc_fp16, "mma.sync, online softmax")],
            [Baseline("torch.sdpa.fp16", _sdpa("fp16", False), "SDPA on the fp16 inputs")], SIZES),
    _ladder("bf16 d64", "bf16", 64, False, [Rung("flash_tc_bf16", flash_tc_bf16, "mma.sync, online softmax")],
            [Baseline("torch.sdpa.bf16", _sdpa("bf16", False), "SDPA on the bf16 inputs")], SIZES),
    _ladder("fp16 d128", "fp16", 128, False, [Rung("flash_tc_fp16", flash_tc_fp16, "d = 128")],
            [Baseline("torch.sdpa.fp16", _sdpa("fp16", False), "SDPA on the fp16 inputs")], [(HEADS, 4096, 128)]),
    _ladder("fp16 d64 causal", "fp16", 64, True,
            [Rung("flash_tc_fp16_causal", flash_tc_fp16_causal, "causal, tiles past the diagonal skipped")],
            [Baseline("torch.sdpa.fp16.causal", _sdpa("fp16", True), "SDPA, is_causal=True")], SIZES),
    # The attention chapter's FP32 kernel re-measured in the same run (float32 inputs, its own check).
    Ladder(chapter=CHAPTER, topic="fp32 book kernel", description="the attention chapter's flash_attention",
           make_inputs=attention.attention_inputs, out_shape=lambda q, k, v: q.shape,
           reference=attention.attention_reference, bytes=lambda size: attention.qkvo_bytes(*size),
           flops=lambda size: attention_flops(*size), unit="TFLOP/s", sizes=SIZES, sim_sizes=[],
           rungs=[Rung("flash_attention", attention.flash_attention, "FP32 SIMT cores (attention chapter)")],
           tolerance=attention.attention_tolerance),
]



# --- recorded beside the ladders: tile configurations, with what each costs in registers --------------
SWEEP = [(64, False, 4, 64), (64, False, 4, 32), (64, False, 8, 64), (64, False, 2, 64), (64, True, 4, 64),
         (128, False, 4, 32), (128, False, 8, 16)]
SWEEP_CHECK_SIZE = 256          # queries and keys of the check that comes before each timing (2 heads)


def sass_counts(sass: str) -> dict:
    """Instructions in a SASS listing: all of them, and the tensor-core, exp2, ldmatrix and shuffle ones."""
    lines = [line for line in sass.splitlines() if line.strip().startswith("/*") and ";" in line]
    count = lambda op: sum(f" {op}" in line for line in lines)  # noqa: E731
    return {"sass_instructions": len(lines), "hmma_in_sass": count("HMMA"), "ex2_in_sass": count("MUFU.EX2"),
            "ldsm_in_sass": count("LDSM"), "shfl_in_sass": count("SHFL")}


def record_configs(folder, sweep=SWEEP, kind: str = "fp16") -> Path:
    """On the GPU: for each (d, causal, warps, BC) of `sweep`, check the kernel at a small size, then time
    it at 16 heads × 4096 and note its registers, local memory (spills), shared memory, HMMA
    instructions in its SASS and the blocks per SM that fit (flash_tc.configs.csv)."""
    import pandas as pd

    from lib.grading.check import compare
    from lib.hw.occupancy import occupancy
    from lib.measure.results import environment
    from lib.measure.timing import time_cuda

    env = environment()
    rng = np.random.default_rng(5)
    rows = []
    for d, causal, warps, bc in sweep:
        run = lambda q, k, v, out: flash_tc(q, k, v, out, kind, causal, warps, bc)  # noqa: E731
        q, k, v = make_inputs(kind)((2, SWEEP_CHECK_SIZE, d), rng)
        out = cuda.to_device(np.full(q.shape, np.nan, np.float32))
        run(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), out)
        expected = reference(kind, causal)(q, k, v)
        tol = tolerance(kind, causal)(q, k, v, expected)
        bad = compare(out.copy_to_host(), expected, tol.rtol, tol.atol, tol.scale)
        if bad is not None:
            raise AssertionError(f"flash_tc {kind} d={d} causal={causal} warps={warps} BC={bc} failed its "
                                 f"check, not timed: {bad.describe()}")
        size = (HEADS, 4096, d)
        q, k, v = (cuda.to_device(x) for x in make_inputs(kind)(size, rng))
        out = cuda.device_array(size, np.float32)
        timing = time_cuda(lambda: run(q, k, v, out), flops=attention_flops(*size, causal=causal))
        kernel = make_flash_tc_kernel(d, causal, kind, warps, bc)[0]
        compiled = next(iter(kernel.overloads.values()))
        regs, smem = int(compiled.regs_per_thread), int(compiled.shared_mem_per_block)
        sass = kernel.inspect_sass()
        sass = next(iter(sass.values())) if isinstance(sass, dict) else sass   # per signature, or just one
        occ = occupancy("H200", WARP * warps, regs, smem)
        rows.append({"kind": kind, "d": d, "causal": causal, "warps": warps, "BR": ROWS_PER_WARP * warps,
                     "BC": bc, "median_ms": round(timing.median_ms, 5), "tflops": round(timing.tflops, 1),
                     "registers": regs, "local_bytes": int(compiled.local_mem_per_thread), "shared_bytes": smem,
                     **sass_counts(sass),
                     "blocks_per_sm": occ["blocks"], "warps_per_sm": occ["warps"],
                     "limited_by": "+".join(occ["limiting"]), **env})
    path = Path(folder) / f"{CHAPTER}.configs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def record_sdpa_kernels(folder) -> Path:
    """On the GPU: the names of the CUDA kernels torch's SDPA launches for the baselines' inputs (which
    backend it picked), from the profiler (flash_tc.sdpa_kernels.csv)."""
    import pandas as pd
    import torch
    from torch.profiler import ProfilerActivity, profile

    rows = []
    for kind, d, causal in [("fp16", 64, False), ("bf16", 64, False), ("fp16", 128, False), ("fp16", 64, True)]:
        q, k, v = (torch.as_tensor(x, device="cuda") for x in make_inputs(kind)((HEADS, 4096, d),
                                                                                np.random.default_rng(0)))
        out = torch.empty(q.shape, device="cuda", dtype=torch.float32)
        run = _sdpa(kind, causal)
        run(q, k, v, out)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run(q, k, v, out)
            torch.cuda.synchronize()
        names = sorted({e.name for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")})
        rows += [{"kind": kind, "d": d, "causal": causal, "cuda_kernel": name} for name in names]
    path = Path(folder) / f"{CHAPTER}.sdpa_kernels.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def record_extra(folder) -> list:
    return [record_configs(folder), record_sdpa_kernels(folder)]


def load_configs(folder=None):
    import pandas as pd

    from lib.measure.results import RESULTS

    return pd.read_csv(Path(folder or RESULTS) / f"{CHAPTER}.configs.csv")


quiet_kernels(globals())
