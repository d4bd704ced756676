"""Kernels of the FlashAttention chapter: attention out = softmax(q @ k.T / sqrt(d)) @ v for a batch of
heads, inputs (heads, n, d) float32 C-contiguous (batch × heads flattened into the first axis).

Path 1 materialises the (heads, m, n) score matrix: a tiled q @ k.T, the softmax chapter's row softmax,
a tiled p @ v — three kernels and two n × n buffers. Path 2 is one kernel that never writes a score to
memory: FlashAttention's forward pass (a query tile per block, key/value tiles through shared memory, the
softmax chapter's running maximum and sum per row, rescaled when a tile brings a larger maximum).
Both handle any m and n (ragged tiles are zero-filled and masked); path 2 is compiled per head dimension
(64 or 128) and per masking (full or causal).

Where the rest lives: chapters/attention.md (the page); lib/grading/variants/attention.py (its exercises'
known-wrong variants); tests/test_attention.py (tests); data/results/attention.* (recorded on the H200).
Record it with ``python -m tools.record attention`` on a GPU; on the simulator the same kernels run through
the page's checks and the tests.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from numba import cuda, float32

import lib
from lib.runtime.dynamic_shared import allow_dynamic_shared
from lib.measure.bench import Baseline, Ladder, Rung
from lib.grading.check import k_scaled_rtol
from lib.grading.exercises import spike_late_qkv
from lib.grading.spec import Tolerance
from lib.runtime.quiet_launches import quiet, quiet_kernels
from lib.runtime.validate import require
from lib.runtime.vector import SMEM_ALIGN, load_float4, load_float4_2d, store_float4
from kernels.softmax import NEG_INF, ZERO, softmax_on_chip, softmax_warp_per_row

CHAPTER = "attention"
FULL_MASK = 0xFFFFFFFF
PAD = 4                     # words added to a shared row: spreads transposed stores over the banks, and
                            # keeps every row 16-byte aligned for load_float4

# --- path 1: batched tiled matmuls (the matmul chapter's rung 5 tiling: 8 × 8 outputs per thread) ------
MM_BK, MM_TM, MM_TN = 8, 8, 8
SCORES_BM, SCORES_BN = 128, 128     # s = scale · q @ k.T: 256 threads, a 128 × 128 tile of scores each
PV_BM, PV_BN = 128, 64              # o = p @ v: 128 threads; d = 64 is one tile wide
# The row softmax between them is the softmax chapter's. On a GPU: its fastest rung, which keeps a row in
# registers (one read of the scores). The simulator spends ~0.5 s on each of that kernel's 256-thread blocks
# (one per row), so there path 1 uses the warp-per-row rung (eight rows per block) instead.
PATH1_SOFTMAX = lib.pick(sim=softmax_warp_per_row, gpu=softmax_on_chip)

# --- path 2: FlashAttention forward. LANES consecutive threads share a group of query rows: each holds
# KEYS = BC / LANES of the tile's keys and DIMS = D / LANES of the output's dimensions for them. ----------
FLASH_THREADS = 128
FLASH_CONFIGS = {            # head dim -> query rows per block (BR), keys per tile (BC), lanes per row group
    64: dict(BR=64, BC=32, LANES=8),    # 4 rows × 4 keys, 4 rows × 8 dims per thread; 43.5 KB shared
    128: dict(BR=32, BC=16, LANES=4),   # 1 row × 4 keys, 1 row × 32 dims per thread; 39.2 KB shared
}
HEAD_DIMS = tuple(FLASH_CONFIGS)
STATIC_SMEM_LIMIT = 48 * 1024          # the most a block's static shared arrays may take


def flash_shape(head_dim: int) -> dict:
    """Derived sizes of path 2's configuration for one head dimension (checked invariants)."""
    cfg = dict(FLASH_CONFIGS[head_dim])
    br, bc, lanes = cfg["BR"], cfg["BC"], cfg["LANES"]
    groups = FLASH_THREADS // lanes
    cfg.update(D=head_dim, GROUPS=groups, ROWS=br // groups, KEYS=bc // lanes, DIMS=head_dim // lanes)
    assert lanes & (lanes - 1) == 0 and lanes <= 32, "a row group is a power-of-two run of lanes in one warp"
    assert br % groups == 0 and bc % lanes == 0 and head_dim % (4 * lanes) == 0
    assert cfg["KEYS"] % 4 == 0, "a thread's keys are read as float4 from the transposed key tile"
    words = head_dim * (br + PAD) + head_dim * (bc + PAD) + bc * head_dim + bc * (br + PAD)
    cfg["smem_bytes"] = 4 * words
    assert cfg["smem_bytes"] <= STATIC_SMEM_LIMIT, cfg
    return cfg


def _cdiv(x, y):
    return (x + y - 1) // y


# ------------------------------------------------------------------------------------------------
# Path 1: materialised scores
# ------------------------------------------------------------------------------------------------
_MATMUL_KERNELS: dict = {}


def make_batched_matmul_kernel(BM: int, BN: int, b_transposed: bool):
    """Build (once per shape) c[z] = alpha · a[z] @ op(b[z]) for every z, op(b) = b.T if b_transposed."""
    key = (BM, BN, b_transposed)
    if key in _MATMUL_KERNELS:
        return _MATMUL_KERNELS[key]
    THREADS = (BM // MM_TM) * (BN // MM_TN)
    COLS = BN // MM_TN
    A_WIDTH, B_WIDTH = BM + PAD, BN + PAD   # computed here: a shared array's shape must be literal numbers
    B_TRANSPOSED = b_transposed

    @cuda.jit
    def batched_matmul_kernel(a, b, c, alpha):
        """c[z] = alpha · a[z] @ b[z] (b of shape (Z, K, N)) or alpha · a[z] @ b[z].T (b of shape
        (Z, N, K)); a block computes a BM × BN tile of c[z], each thread an 8 × 8 patch in registers.

        Memory: per step of BK along K a block reads (BM + BN)·BK floats for 2·BM·BN·BK FLOPs
        (BM·BN / (2·(BM + BN)) FLOPs per byte: 32 for 128 × 128, 21 for 128 × 64). Global loads walk along
        each operand's contiguous axis (a warp reads 4 runs of 8 floats along K, or 32 floats along N).
        The a tile (and a transposed b tile) is stored transposed, with rows padded by PAD words: the
        stores are conflict-free and a thread's 8 values are two 16-byte shared loads (LDS.128).
        Launch: 1-D blocks of THREADS, grid (ceil(N / BN), ceil(M / BM), Z); out-of-range tile elements
        are loaded as 0 and only in-range outputs are stored.
        """
        a_t = cuda.shared.array((MM_BK, A_WIDTH), float32, alignment=SMEM_ALIGN)
        b_s = cuda.shared.array((MM_BK, B_WIDTH), float32, alignment=SMEM_ALIGN)
        acc = cuda.local.array((MM_TM, MM_TN), float32)
        a_frag = cuda.local.array(MM_TM, float32)
        b_frag = cuda.local.array(MM_TN, float32)
        t = cuda.threadIdx.x
        z = cuda.blockIdx.z
        m, k = a.shape[1], a.shape[2]
        n = c.shape[2]
        block_row = cuda.blockIdx.y * BM
        block_col = cuda.blockIdx.x * BN
        row0 = (t // COLS) * MM_TM
        col0 = (t % COLS) * MM_TN
        for i in range(MM_TM):
            for j in range(MM_TN):
                acc[i, j] = float32(0.0)
        for k0 in range(0, k, MM_BK):
            for e in range(t, BM * MM_BK, THREADS):
                r, p = e // MM_BK, e % MM_BK
                gr, gk = block_row + r, k0 + p
                a_t[p, r] = a[z, gr, gk] if gr < m and gk < k else float32(0.0)
            if B_TRANSPOSED:
                for e in range(t, BN * MM_BK, THREADS):
                    col, p = e // MM_BK, e % MM_BK
                    gc, gk = block_col + col, k0 + p
                    b_s[p, col] = b[z, gc, gk] if gc < n and gk < k else float32(0.0)
            else:
                for e in range(t, MM_BK * BN, THREADS):
                    p, col = e // BN, e % BN
                    gk, gc = k0 + p, block_col + col
                    b_s[p, col] = b[z, gk, gc] if gk < k and gc < n else float32(0.0)
            cuda.syncthreads()
            for p in range(MM_BK):
                for i in range(0, MM_TM, 4):
                    a_frag[i], a_frag[i + 1], a_frag[i + 2], a_frag[i + 3] = load_float4_2d(a_t, p, row0 + i)
                for j in range(0, MM_TN, 4):
                    b_frag[j], b_frag[j + 1], b_frag[j + 2], b_frag[j + 3] = load_float4_2d(b_s, p, col0 + j)
                for i in range(MM_TM):
                    for j in range(MM_TN):
                        acc[i, j] += a_frag[i] * b_frag[j]
            cuda.syncthreads()
        for i in range(MM_TM):
            row = block_row + row0 + i
            for j in range(MM_TN):
                col = block_col + col0 + j
                if row < m and col < n:
                    c[z, row, col] = alpha * acc[i, j]

    _MATMUL_KERNELS[key] = (quiet(batched_matmul_kernel), THREADS)
    return _MATMUL_KERNELS[key]


def scores(q, k, s):
    """s[z] = q[z] @ k[z].T / sqrt(d): the score matrix, written to memory (path 1, kernel 1)."""
    heads, m, d = q.shape
    n = k.shape[1]
    kernel, threads = make_batched_matmul_kernel(SCORES_BM, SCORES_BN, True)
    kernel[(_cdiv(n, SCORES_BN), _cdiv(m, SCORES_BM), heads), threads](q, k, s, float32(1.0 / math.sqrt(d)))


def probabilities_times_values(p, v, out):
    """out[z] = p[z] @ v[z] (path 1, kernel 3)."""
    heads, m, n = p.shape
    d = v.shape[2]
    kernel, threads = make_batched_matmul_kernel(PV_BM, PV_BN, False)
    kernel[(_cdiv(d, PV_BN), _cdiv(m, PV_BM), heads), threads](p, v, out, float32(1.0))


_WORKSPACE: dict = {}


def score_workspace(heads: int, m: int, n: int):
    """The two (heads, m, n) float32 buffers of path 1 (scores, probabilities), allocated on first use and
    kept, as a library keeps its workspace, so that no allocation is timed. Only the latest shape is kept."""
    shape = (heads, m, n)
    if shape not in _WORKSPACE:
        _WORKSPACE.clear()
        _WORKSPACE[shape] = (cuda.device_array(shape, np.float32), cuda.device_array(shape, np.float32))
    return _WORKSPACE[shape]


def _check_qkv(q, k, v, out, where, head_dims=None):
    require(q, "q", ndim=3, where=where)
    heads, m, d = q.shape
    require(k, "k", ndim=3, where=where)
    if k.shape[0] != heads or k.shape[2] != d:
        raise ValueError(f"{where}: k must have shape ({heads}, n, {d}) to match q {tuple(q.shape)}, "
                         f"got {tuple(k.shape)}")
    require(v, "v", shape=tuple(k.shape), where=where)
    require(out, "out", shape=tuple(q.shape), where=where)
    if head_dims is not None and d not in head_dims:
        raise ValueError(f"{where}: head dimension {d} is not compiled; this kernel supports {head_dims}")
    if k.shape[1] == 0:
        raise ValueError(f"{where}: attention over zero keys is undefined (n = 0)")
    return heads, m, k.shape[1], d


def attention_materialised(q, k, v, out):
    """Path 1: s = q @ k.T / sqrt(d) written to memory, p = softmax(s) row by row (the softmax chapter's
    kernel), out = p @ v. Three launches and 2·heads·m·n floats of workspace."""
    heads, m, n, d = _check_qkv(q, k, v, out, "attention_materialised")
    if heads == 0 or m == 0:
        return
    s, p = score_workspace(heads, m, n)
    scores(q, k, s)
    PATH1_SOFTMAX(s.reshape(heads * m, n), p.reshape(heads * m, n))
    probabilities_times_values(p, v, out)


# ------------------------------------------------------------------------------------------------
# Path 2: FlashAttention forward
# ------------------------------------------------------------------------------------------------
_FLASH_KERNELS: dict = {}


def make_flash_attention_kernel(head_dim: int, causal: bool):
    """Build (once per head dimension and masking) the fused attention kernel. Every size it loops over is
    a compile-time constant, so the loops over a thread's rows, keys and dimensions unroll and its scores,
    output accumulators and softmax state stay in registers."""
    key = (head_dim, causal)
    if key in _FLASH_KERNELS:
        return _FLASH_KERNELS[key]
    cfg = flash_shape(head_dim)
    D, BR, BC, LANES = head_dim, cfg["BR"], cfg["BC"], cfg["LANES"]
    ROWS, KEYS, DIMS = cfg["ROWS"], cfg["KEYS"], cfg["DIMS"]
    CHUNKS = DIMS // 4                      # a thread's dimensions: float4 chunks lane, lane + LANES, ...
    SHUFFLES = int(math.log2(LANES))        # butterfly rounds across a row group
    ROWS_AS_FLOAT4 = ROWS % 4 == 0
    TILE_LOADS = BC * D // FLASH_THREADS    # floats of k (and of v) each thread brings per key tile
    assert BC * D % FLASH_THREADS == 0
    SCALE = float32(1.0 / math.sqrt(head_dim))
    CAUSAL = causal
    ROW_WIDTH, KEY_WIDTH = BR + PAD, BC + PAD   # literal shapes for the shared arrays

    @cuda.jit
    def flash_attention_kernel(q, k, v, out):
        """out[z, i] = Σ_j softmax_j(q[z, i]·k[z, j] / sqrt(D)) v[z, j], one pass over the keys, never
        writing a score to memory. (Causal build: key j is masked out for query i when j > i.)

        A block owns BR query rows of one head; their q tile (scaled by 1/sqrt(D)) waits transposed in
        shared memory. For each tile of BC keys: the k tile (transposed) and v tile come to shared memory;
        each thread computes ROWS × KEYS scores by outer products over D (q and k values as LDS.128);
        the LANES threads of a row group agree on the tile's row maximum with a shuffle butterfly; a row
        whose maximum grew rescales its running sum l and output o by exp(m_old − m_new); the
        probabilities exp(s − m_new) go to shared memory (p tile), and each thread adds p @ v for its
        ROWS × DIMS outputs. At the end the row group adds its partial sums and o is divided by l.

        Memory: reads q once, writes out once, and reads k and v once per query block: ceil(m / BR)
        times per head (causal: only the tiles at or left of the diagonal). Global loads are coalesced
        (a tile of consecutive rows is one contiguous run of floats), and a thread issues all its loads of a
        k/v tile before its first shared store, so they are in flight together. Shared: the key reads are 8 lanes
        × 16 bytes in a row (conflict-free), the query and probability reads broadcast within a row group;
        the transposing stores cost a few bank conflicts once per tile.
        Launch: FLASH_THREADS threads per block, grid (ceil(m / BR), heads). Any m and n ≥ 1 (causal:
        m == n). Rows past m compute on zeros and are not stored; keys past n are masked out.
        """
        q_t = cuda.shared.array((D, ROW_WIDTH), float32, alignment=SMEM_ALIGN)
        k_t = cuda.shared.array((D, KEY_WIDTH), float32, alignment=SMEM_ALIGN)
        v_s = cuda.shared.array((BC, D), float32, alignment=SMEM_ALIGN)
        p_t = cuda.shared.array((BC, ROW_WIDTH), float32, alignment=SMEM_ALIGN)
        s = cuda.local.array((ROWS, KEYS), float32)
        o = cuda.local.array((ROWS, DIMS), float32)
        m_run = cuda.local.array(ROWS, float32)
        l_run = cuda.local.array(ROWS, float32)
        q_frag = cuda.local.array(ROWS, float32)
        k_frag = cuda.local.array(KEYS, float32)
        k_held = cuda.local.array(TILE_LOADS, float32)
        v_held = cuda.local.array(TILE_LOADS, float32)
        t = cuda.threadIdx.x
        lane = t % LANES
        row0 = (t // LANES) * ROWS              # this thread's first row in the tile
        key0 = lane * KEYS                      # and its first key
        z = cuda.blockIdx.y
        i0 = cuda.blockIdx.x * BR
        m, n = q.shape[1], k.shape[1]
        for e in range(t, BR * D, FLASH_THREADS):
            r, c = e // D, e % D
            q_t[c, r] = q[z, i0 + r, c] * SCALE if i0 + r < m else float32(0.0)
        for r in range(ROWS):
            m_run[r] = NEG_INF
            l_run[r] = float32(0.0)
            for x in range(DIMS):
                o[r, x] = float32(0.0)
        tiles = (n + BC - 1) // BC
        if CAUSAL:
            tiles = min(tiles, (i0 + BR + BC - 1) // BC)   # tiles right of the diagonal are all masked
        for tile in range(tiles):
            j0 = tile * BC
            for e in range(TILE_LOADS):        # every load of the tile first: 2·TILE_LOADS in flight
                j, c = (t + e * FLASH_THREADS) // D, (t + e * FLASH_THREADS) % D
                inside = j0 + j < n
                k_held[e] = k[z, j0 + j, c] if inside else float32(0.0)
                v_held[e] = v[z, j0 + j, c] if inside else float32(0.0)
            for e in range(TILE_LOADS):        # then the shared stores
                j, c = (t + e * FLASH_THREADS) // D, (t + e * FLASH_THREADS) % D
                k_t[c, j] = k_held[e]
                v_s[j, c] = v_held[e]
            cuda.syncthreads()
            # scores: ROWS × KEYS outer products over D
            for r in range(ROWS):
                for x in range(KEYS):
                    s[r, x] = float32(0.0)
            for c in range(D):
                if ROWS_AS_FLOAT4:
                    for r in range(0, ROWS, 4):
                        q_frag[r], q_frag[r + 1], q_frag[r + 2], q_frag[r + 3] = load_float4_2d(q_t, c, row0 + r)
                else:
                    for r in range(ROWS):
                        q_frag[r] = q_t[c, row0 + r]
                for x in range(0, KEYS, 4):
                    k_frag[x], k_frag[x + 1], k_frag[x + 2], k_frag[x + 3] = load_float4_2d(k_t, c, key0 + x)
                for r in range(ROWS):
                    for x in range(KEYS):
                        s[r, x] += q_frag[r] * k_frag[x]
            # online softmax: the row group's maximum, the rescale, the probabilities
            for r in range(ROWS):
                tile_max = NEG_INF
                for x in range(KEYS):
                    j = j0 + key0 + x
                    if j >= n or (CAUSAL and j > i0 + row0 + r):
                        s[r, x] = NEG_INF
                    tile_max = max(tile_max, s[r, x])
                for step in range(SHUFFLES):
                    tile_max = max(tile_max, cuda.shfl_xor_sync(FULL_MASK, tile_max, LANES >> (step + 1)))
                # Key 0 is in tile 0 and unmasked for every row, so m_new is finite from the first tile on.
                m_new = max(m_run[r], tile_max)
                if m_new > m_run[r]:               # a larger maximum: rescale what was accumulated
                    alpha = math.exp(m_run[r] - m_new)  # exp(-inf) = 0 in the first tile
                    l_run[r] *= alpha
                    for x in range(DIMS):
                        o[r, x] *= alpha
                    m_run[r] = m_new
                for x in range(KEYS):
                    prob = math.exp(s[r, x] - m_new)
                    l_run[r] += prob              # this lane's keys only: summed across the group at the end
                    p_t[key0 + x, row0 + r] = prob
            cuda.syncthreads()
            # o += p @ v for this thread's ROWS × DIMS outputs
            for j in range(BC):
                if ROWS_AS_FLOAT4:
                    for r in range(0, ROWS, 4):
                        q_frag[r], q_frag[r + 1], q_frag[r + 2], q_frag[r + 3] = load_float4_2d(p_t, j, row0 + r)
                else:
                    for r in range(ROWS):
                        q_frag[r] = p_t[j, row0 + r]
                for ch in range(CHUNKS):
                    v0, v1, v2, v3 = load_float4_2d(v_s, j, 4 * (lane + LANES * ch))
                    for r in range(ROWS):
                        o[r, 4 * ch] += q_frag[r] * v0
                        o[r, 4 * ch + 1] += q_frag[r] * v1
                        o[r, 4 * ch + 2] += q_frag[r] * v2
                        o[r, 4 * ch + 3] += q_frag[r] * v3
            cuda.syncthreads()                     # everyone is done with k_t, v_s, p_t before the next tile
        for r in range(ROWS):
            total = l_run[r]
            for step in range(SHUFFLES):
                total += cuda.shfl_xor_sync(FULL_MASK, total, LANES >> (step + 1))
            row = i0 + row0 + r
            if row < m:
                inv = float32(1.0) / total
                for ch in range(CHUNKS):
                    col = 4 * (lane + LANES * ch)
                    for e in range(4):
                        out[z, row, col + e] = o[r, 4 * ch + e] * inv

    _FLASH_KERNELS[key] = quiet(flash_attention_kernel)
    return flash_attention_kernel


def flash_attention(q, k, v, out, causal: bool = False):
    """Path 2: the fused kernel for this head dimension (64 or 128), full or causal masking."""
    where = "flash_attention_causal" if causal else "flash_attention"
    heads, m, n, d = _check_qkv(q, k, v, out, where, HEAD_DIMS)
    if causal and m != n:
        raise ValueError(f"{where}: the causal mask here needs as many queries as keys (m = {m}, n = {n})")
    if heads == 0 or m == 0:
        return
    kernel = make_flash_attention_kernel(d, causal)
    kernel[(_cdiv(m, FLASH_CONFIGS[d]["BR"]), heads), FLASH_THREADS](q, k, v, out)


def flash_attention_causal(q, k, v, out):
    """Path 2 with the causal mask (query i sees keys 0..i)."""
    flash_attention(q, k, v, out, causal=True)


# ------------------------------------------------------------------------------------------------
# Path 2, wide: 8 × 8 scores per thread, in more shared memory than a static array may take
# ------------------------------------------------------------------------------------------------
WIDE = dict(D=64, BR=128, BC=64, LANES=8, THREADS=128, BATCH=16)   # d = 64 only
WIDE_ROW, WIDE_KEY = WIDE["BR"] + PAD, WIDE["BC"] + PAD            # 132 and 68 floats per shared row
WIDE_SMEM_FLOATS = (WIDE["D"] * WIDE_ROW + WIDE["D"] * WIDE_KEY + WIDE["BC"] * WIDE["D"]
                    + WIDE["BC"] * WIDE_ROW)
WIDE_SMEM_BYTES = 4 * WIDE_SMEM_FLOATS                               # 101,376 bytes: opt-in above 48 KB
_WIDE_KERNELS: dict = {}


def make_flash_wide_kernel(causal: bool):
    """Build (once per masking) the wide fused kernel for d = 64: the same algorithm as
    flash_attention_kernel, with each thread holding 8 query rows × 8 keys of scores (and 8 rows × 8
    dimensions of output), so that each pair of 16-byte shared loads feeds 64 FMAs instead of 16."""
    if causal in _WIDE_KERNELS:
        return _WIDE_KERNELS[causal]
    D, BR, BC, LANES, THREADS, BATCH = (WIDE[k] for k in ("D", "BR", "BC", "LANES", "THREADS", "BATCH"))
    RW, KW = WIDE_ROW, WIDE_KEY
    Q_T, K_T = 0, D * WIDE_ROW                        # offsets (floats) of the four tiles in one buffer
    V_S = K_T + D * WIDE_KEY
    P_T = V_S + BC * D
    Q_LOADS, KV_LOADS = BR * D // THREADS, BC * D // THREADS   # 64 and 32 floats per thread
    SCALE = float32(1.0 / math.sqrt(D))
    CAUSAL = causal
    assert LANES == 8 and THREADS // LANES * 8 == BR and 8 * LANES == BC and D == 8 * LANES
    assert Q_LOADS % BATCH == 0 and KV_LOADS % BATCH == 0 and all(x % 4 == 0 for x in (RW, KW, K_T, V_S, P_T))

    @cuda.jit
    def flash_wide_kernel(q, k, v, out):
        """out = softmax(q k.T / sqrt(64)) v for one head per grid row, BR = 128 queries per block, key
        tiles of BC = 64, online softmax as in flash_attention_kernel.

        Thread t is lane t % 8 of row group g = t // 8. Its 8 query rows are 4g .. 4g+3 and 64+4g ..
        64+4g+3 of the tile, its 8 keys 4·lane .. 4·lane+3 and 32+4·lane .. +3, its 8 output dimensions
        4·lane .. +3 and 32+4·lane .. +3: each group of four is one 16-byte shared load, and in every load
        instruction of a warp the lanes either read one contiguous 128-byte run or share an address
        (a broadcast) — no bank conflicts.
        Memory: as flash_attention_kernel (q once, k and v once per query block: ceil(m / 128) times per
        head); loads of a tile issued BATCH at a time before their shared stores. Shared: one dynamic
        buffer of WIDE_SMEM_BYTES (q_t, k_t, v_s, p_t), which needs the launch's opt-in above 48 KB.
        Launch: THREADS threads, grid (ceil(m / BR), heads), WIDE_SMEM_BYTES of dynamic shared memory.
        """
        smem = cuda.shared.array(0, float32, alignment=SMEM_ALIGN)
        s = cuda.local.array((8, 8), float32)
        o = cuda.local.array((8, 8), float32)
        m_run = cuda.local.array(8, float32)
        l_run = cuda.local.array(8, float32)
        a_frag = cuda.local.array(8, float32)
        b_frag = cuda.local.array(8, float32)
        held = cuda.local.array(BATCH, float32)
        held_v = cuda.local.array(BATCH, float32)
        t = cuda.threadIdx.x
        lane, g = t % LANES, t // LANES
        z = cuda.blockIdx.y
        i0 = cuda.blockIdx.x * BR
        m, n = q.shape[1], k.shape[1]
        for base in range(0, Q_LOADS, BATCH):               # q tile, transposed and scaled
            for e in range(BATCH):
                r, c = (t + (base + e) * THREADS) // D, (t + (base + e) * THREADS) % D
                held[e] = q[z, i0 + r, c] * SCALE if i0 + r < m else float32(0.0)
            for e in range(BATCH):
                r, c = (t + (base + e) * THREADS) // D, (t + (base + e) * THREADS) % D
                smem[Q_T + c * RW + r] = held[e]
        for r in range(8):
            m_run[r] = NEG_INF
            l_run[r] = float32(0.0)
            for x in range(8):
                o[r, x] = float32(0.0)
        tiles = (n + BC - 1) // BC
        if CAUSAL:
            tiles = min(tiles, (i0 + BR + BC - 1) // BC)
        for tile in range(tiles):
            j0 = tile * BC
            for base in range(0, KV_LOADS, BATCH):          # k tile (transposed) and v tile
                for e in range(BATCH):
                    j, c = (t + (base + e) * THREADS) // D, (t + (base + e) * THREADS) % D
                    inside = j0 + j < n
                    held[e] = k[z, j0 + j, c] if inside else float32(0.0)
                    held_v[e] = v[z, j0 + j, c] if inside else float32(0.0)
                for e in range(BATCH):
                    j, c = (t + (base + e) * THREADS) // D, (t + (base + e) * THREADS) % D
                    smem[K_T + c * KW + j] = held[e]
                    smem[V_S + j * D + c] = held_v[e]
            cuda.syncthreads()
            for r in range(8):
                for x in range(8):
                    s[r, x] = float32(0.0)
            for c in range(D):                               # scores: 8 × 8 outer products over D
                a_frag[0], a_frag[1], a_frag[2], a_frag[3] = load_float4(smem, (Q_T + c * RW + 4 * g) // 4)
                a_frag[4], a_frag[5], a_frag[6], a_frag[7] = load_float4(smem, (Q_T + c * RW + 64 + 4 * g) // 4)
                b_frag[0], b_frag[1], b_frag[2], b_frag[3] = load_float4(smem, (K_T + c * KW + 4 * lane) // 4)
                b_frag[4], b_frag[5], b_frag[6], b_frag[7] = load_float4(smem, (K_T + c * KW + 32 + 4 * lane) // 4)
                for r in range(8):
                    for x in range(8):
                        s[r, x] += a_frag[r] * b_frag[x]
            for r in range(8):                               # online softmax, row by row
                row = i0 + 4 * g + 64 * (r // 4) + r % 4
                tile_max = NEG_INF
                for x in range(8):
                    j = j0 + 4 * lane + 32 * (x // 4) + x % 4
                    if j >= n or (CAUSAL and j > row):
                        s[r, x] = NEG_INF
                    tile_max = max(tile_max, s[r, x])
                tile_max = max(tile_max, cuda.shfl_xor_sync(FULL_MASK, tile_max, 4))
                tile_max = max(tile_max, cuda.shfl_xor_sync(FULL_MASK, tile_max, 2))
                tile_max = max(tile_max, cuda.shfl_xor_sync(FULL_MASK, tile_max, 1))
                m_new = max(m_run[r], tile_max)
                if m_new > m_run[r]:
                    alpha = math.exp(m_run[r] - m_new)
                    l_run[r] *= alpha
                    for x in range(8):
                        o[r, x] *= alpha
                    m_run[r] = m_new
                for x in range(8):
                    prob = math.exp(s[r, x] - m_new)
                    l_run[r] += prob
                    smem[P_T + (4 * lane + 32 * (x // 4) + x % 4) * RW + 4 * g + 64 * (r // 4) + r % 4] = prob
            cuda.syncthreads()
            for j in range(BC):                              # o += p @ v
                a_frag[0], a_frag[1], a_frag[2], a_frag[3] = load_float4(smem, (P_T + j * RW + 4 * g) // 4)
                a_frag[4], a_frag[5], a_frag[6], a_frag[7] = load_float4(smem, (P_T + j * RW + 64 + 4 * g) // 4)
                b_frag[0], b_frag[1], b_frag[2], b_frag[3] = load_float4(smem, (V_S + j * D + 4 * lane) // 4)
                b_frag[4], b_frag[5], b_frag[6], b_frag[7] = load_float4(smem, (V_S + j * D + 32 + 4 * lane) // 4)
                for r in range(8):
                    for x in range(8):
                        o[r, x] += a_frag[r] * b_frag[x]
            cuda.syncthreads()
        for r in range(8):
            total = l_run[r]
            total += cuda.shfl_xor_sync(FULL_MASK, total, 4)
            total += cuda.shfl_xor_sync(FULL_MASK, total, 2)
            total += cuda.shfl_xor_sync(FULL_MASK, total, 1)
            row = i0 + 4 * g + 64 * (r // 4) + r % 4
            if row < m:
                inv = float32(1.0) / total
                for x in range(8):
                    out[z, row, 4 * lane + 32 * (x // 4) + x % 4] = o[r, x] * inv

    _WIDE_KERNELS[causal] = quiet(flash_wide_kernel)
    return flash_wide_kernel


def flash_attention_wide(q, k, v, out, causal: bool = False):
    """Path 2, wide tiles (d = 64 only): flash_wide_kernel with its 99 KB of dynamic shared memory."""
    where = "flash_attention_wide_causal" if causal else "flash_attention_wide"
    heads, m, n, d = _check_qkv(q, k, v, out, where, (WIDE["D"],))
    if causal and m != n:
        raise ValueError(f"{where}: the causal mask here needs as many queries as keys (m = {m}, n = {n})")
    if heads == 0 or m == 0:
        return
    kernel = make_flash_wide_kernel(causal)
    allow_dynamic_shared(kernel, (q, k, v, out), WIDE_SMEM_BYTES)
    kernel[(_cdiv(m, WIDE["BR"]), heads), WIDE["THREADS"], 0, WIDE_SMEM_BYTES](q, k, v, out)


def flash_attention_wide_causal(q, k, v, out):
    """The wide kernel with the causal mask."""
    flash_attention_wide(q, k, v, out, causal=True)


# ------------------------------------------------------------------------------------------------
# Path 2, register-blocked: the wide tile again, written so that every per-thread array is registers
# ------------------------------------------------------------------------------------------------
REGS_THREADS, REGS_LANES = 128, 8       # 16 row groups of 8 lanes; a warp holds 4 row groups
REGS_CONFIGS = {                        # head dim -> a thread's query rows (TM) and keys per tile (TN)
    64: dict(TM=8, TN=8),               # 128 queries x 64 keys per block; o: 8 rows x 8 dims per thread
    128: dict(TM=8, TN=4, LANES=16, THREADS=256, QK_UNROLL=2),  # 128 queries x 64 keys per block, 16 lanes a
}                                       # row group; o: 8 rows x 8 dims per thread (chosen by measurement)
LOG2E = 1.4426950408889634


def regs_shape(head_dim: int, TM: int, TN: int, LANES: int = REGS_LANES, THREADS: int = REGS_THREADS,
               P_OVER_K: bool = False, QK_UNROLL: int | None = None, PV_UNROLL: int | None = None) -> dict:
    """Derived sizes of the register-blocked kernel for one head dimension (checked invariants).

    A thread's rows are 4g .. 4g+3, 4g+4·GROUPS .. (g its row group), its keys and its output dimensions
    4·lane .. 4·lane+3, 4·lane+4·LANES ..: every group of four is one 16-byte shared load. LANES threads
    (8 or 16, one warp's worth at most) share a row group; P_OVER_K puts the probability tile where the key
    tile was (one barrier more per tile, less shared memory). QK_UNROLL and PV_UNROLL are the steps of the
    two inner loops per trip (default: 64-128 FMAs per trip; LLVM leaves longer unrolls half done)."""
    if LANES not in (8, 16) or THREADS % 32 or THREADS % LANES or not 32 <= THREADS <= 1024:
        raise ValueError(f"regs_shape: LANES must be 8 or 16 and THREADS a multiple of 32 (at most 1024), "
                         f"got LANES={LANES}, THREADS={THREADS}")
    groups = THREADS // LANES
    br, bc = groups * TM, LANES * TN
    rw, kw = br + PAD, bc + PAD                        # padded shared rows (floats) of q_t / p_t and k_t
    dims = head_dim // LANES
    cfg = dict(D=head_dim, TM=TM, TN=TN, LANES=LANES, THREADS=THREADS, P_OVER_K=P_OVER_K,
               QK_UNROLL=max(1, min(4, 128 // (TM * TN))) if QK_UNROLL is None else QK_UNROLL,
               PV_UNROLL=max(1, min(4, 128 // (TM * dims))) if PV_UNROLL is None else PV_UNROLL,
               BR=br, BC=bc, GROUPS=groups, DIMS=dims, RW=rw, KW=kw, Q_T=0, K_T=head_dim * rw)
    if P_OVER_K:                                       # p_t reuses k_t's space: the larger of the two
        cfg["P_T"] = cfg["K_T"]
        cfg["V_S"] = cfg["K_T"] + max(head_dim * kw, bc * rw)
        cfg["smem_bytes"] = 4 * (cfg["V_S"] + bc * head_dim)
    else:
        cfg["V_S"] = cfg["K_T"] + head_dim * kw
        cfg["P_T"] = cfg["V_S"] + bc * head_dim
        cfg["smem_bytes"] = 4 * (cfg["P_T"] + bc * rw)
    cfg["Q_LOADS"] = br * head_dim // (4 * THREADS)   # float4 loads per thread: q tile, k (and v) tile
    cfg["KV_LOADS"] = bc * head_dim // (4 * THREADS)
    assert TM % 4 == 0 and TN % 4 == 0 and head_dim % (4 * LANES) == 0, cfg
    assert cfg["Q_LOADS"] * 4 * THREADS == br * head_dim and cfg["Q_LOADS"] % 4 == 0, cfg
    assert cfg["KV_LOADS"] * 4 * THREADS == bc * head_dim, cfg
    assert cfg["QK_UNROLL"] >= 1 and head_dim % cfg["QK_UNROLL"] == 0, cfg
    assert cfg["PV_UNROLL"] >= 1 and bc % cfg["PV_UNROLL"] == 0, cfg
    return cfg


_REGS_KERNELS: dict = {}


def regs_threads(head_dim: int) -> int:
    """Threads per block of the register-blocked kernel as configured for head_dim."""
    return regs_shape(head_dim, **regs_options(head_dim))["THREADS"]


def regs_options(head_dim: int, **overrides) -> dict:
    """REGS_CONFIGS[head_dim] with the overrides that are not None: the keyword arguments of regs_shape."""
    if head_dim not in REGS_CONFIGS:
        raise ValueError(f"register-blocked kernel: head dimension {head_dim} is not configured; "
                         f"REGS_CONFIGS has {tuple(REGS_CONFIGS)}")
    return {**REGS_CONFIGS[head_dim], **{k: v for k, v in overrides.items() if v is not None}}


def make_flash_regs_kernel(head_dim: int, causal: bool, heavy_first: bool = False, TM=None, TN=None,
                           LANES=None, THREADS=None, P_OVER_K=None, QK_UNROLL=None, PV_UNROLL=None):
    """Build (once per configuration) the register-blocked fused kernel: flash_wide_kernel's algorithm with
    each per-thread loop short and over compile-time ranges, so that LLVM unrolls every one of them and
    each local array becomes registers; heavy_first (causal) launches the longest query blocks first.
    TM, TN, LANES, THREADS, P_OVER_K, QK_UNROLL, PV_UNROLL (regs_shape's) override REGS_CONFIGS[head_dim]
    where given."""
    options = regs_options(head_dim, TM=TM, TN=TN, LANES=LANES, THREADS=THREADS, P_OVER_K=P_OVER_K,
                           QK_UNROLL=QK_UNROLL, PV_UNROLL=PV_UNROLL)
    key = (head_dim, causal, heavy_first, tuple(sorted(options.items())))
    if key in _REGS_KERNELS:
        return _REGS_KERNELS[key]
    cfg = regs_shape(head_dim, **options)
    D, BR, BC, DIMS, GROUPS = cfg["D"], cfg["BR"], cfg["BC"], cfg["DIMS"], cfg["GROUPS"]
    RW, KW, Q_T, K_T, V_S, P_T = (cfg[x] for x in ("RW", "KW", "Q_T", "K_T", "V_S", "P_T"))
    Q_LOADS, KV_LOADS = cfg["Q_LOADS"], cfg["KV_LOADS"]
    THREADS, LANES, TM, TN, P_OVER_K = cfg["THREADS"], cfg["LANES"], cfg["TM"], cfg["TN"], cfg["P_OVER_K"]
    ROW_STEP = 4 * GROUPS                      # rows 4g..4g+3 of each quarter of the tile
    RW4, KW4 = RW // 4, KW // 4                # shared offsets in float4 units (all multiples of 4)
    Q_T4, K_T4, V_S4, P_T4 = Q_T // 4, K_T // 4, V_S // 4, P_T // 4
    D4 = D // 4                                # float4 per row of q, k, v
    QBATCH = 4                                 # q loads in flight before their shared stores
    QK_UNROLL, PV_UNROLL = cfg["QK_UNROLL"], cfg["PV_UNROLL"]   # steps per trip of the two inner loops
    SCALE = float32(LOG2E / math.sqrt(head_dim))   # scores in base 2: exp(x) = exp2(x·log2 e)
    CAUSAL, HEAVY_FIRST = causal, heavy_first

    @cuda.jit
    def flash_regs_kernel(q, k, v, out):
        """out = softmax(q k.T / sqrt(D)) v on 2-D views (heads·m, D) and (heads·n, D); one head per
        grid column, BR query rows per block, key tiles of BC, the online softmax of
        flash_attention_kernel in base 2 (q is pre-scaled by log2(e)/sqrt(D), so exp is one exp2).

        Thread t is lane t % LANES of row group g = t // LANES (8 lanes by default; 16 halve DIMS, and
        the shuffle butterfly takes one round more) and holds TM × TN scores and TM × DIMS outputs,
        every one at an index known at compile time: each per-row step of the softmax (mask, maximum,
        shuffles, rescale, exponentials, the p store) is its own short loop over constant ranges, so all
        of them unroll and s, o, m, l stay in registers (the wide kernel's one long per-row loop did not
        unroll, and its arrays went to local memory). The mask is applied only in tiles that cross the
        diagonal (causal) or the end of the keys.
        Memory: q once, out once, k and v once per query block (causal: the tiles at or left of the
        diagonal); all of a thread's float4 loads of a k/v tile are issued before the first shared
        store. Shared: the query and probability reads broadcast within a row group, key and value
        reads are LANES x 16 contiguous bytes; the transposed stores of q and k have bank conflicts,
        once per tile. One dynamic buffer of smem_bytes (opt-in above 48 KB); with P_OVER_K the p tile
        takes the k tile's place, after a barrier that waits for every thread's scores.
        Launch: THREADS threads, grid (heads, ceil(m / BR)), smem_bytes of dynamic shared memory. The
        query block is blockIdx.y (heavy_first: counted from the last, so that with the causal mask
        the blocks with the most key tiles start first). Any m and n >= 1 (causal: m == n).
        """
        smem = cuda.shared.array(0, float32, alignment=SMEM_ALIGN)
        s = cuda.local.array((TM, TN), float32)
        o = cuda.local.array((TM, DIMS), float32)
        m_run = cuda.local.array(TM, float32)
        l_run = cuda.local.array(TM, float32)
        row_max = cuda.local.array(TM, float32)
        a_frag = cuda.local.array(TM, float32)
        k_frag = cuda.local.array(TN, float32)
        v_frag = cuda.local.array(DIMS, float32)
        held_k = cuda.local.array((KV_LOADS, 4), float32)
        held_v = cuda.local.array((KV_LOADS, 4), float32)
        t = cuda.threadIdx.x
        lane, g = t % LANES, t // LANES
        z = cuda.blockIdx.x
        heads = cuda.gridDim.x
        block = cuda.gridDim.y - 1 - cuda.blockIdx.y if HEAVY_FIRST else cuda.blockIdx.y
        m, n = q.shape[0] // heads, k.shape[0] // heads
        i0 = block * BR
        qz, kz = z * m, z * n                                # first row of this head in the 2-D views
        q4, k4 = Q_T4 + g, K_T4 + lane                       # this thread's shared offsets, in float4
        pv4, v4 = P_T4 + g, V_S4 + lane                      # (reads of p_t and v_s)
        p4 = P_T4 + lane * RW + g                            # (its p_t stores: row 4·lane of p_t)
        for base in range(0, Q_LOADS, QBATCH):               # q tile: scaled, transposed into q_t
            for e in range(QBATCH):
                f = t + (base + e) * THREADS
                r, c4 = f // D4, f % D4
                if i0 + r < m:
                    held_k[e, 0], held_k[e, 1], held_k[e, 2], held_k[e, 3] = load_float4_2d(q, qz + i0 + r, 4 * c4)
                else:
                    for w in range(4):
                        held_k[e, w] = ZERO
            for e in range(QBATCH):
                f = t + (base + e) * THREADS
                r, c4 = f // D4, f % D4
                for w in range(4):
                    smem[Q_T + (4 * c4 + w) * RW + r] = held_k[e, w] * SCALE
        for r in range(TM):
            m_run[r] = NEG_INF
            l_run[r] = ZERO
            for y in range(DIMS):
                o[r, y] = ZERO
        tiles = (n + BC - 1) // BC
        if CAUSAL:
            tiles = min(tiles, (i0 + BR + BC - 1) // BC)   # tiles right of the diagonal are all masked
        for tile in range(tiles):
            j0 = tile * BC
            for e in range(KV_LOADS):                        # every float4 of the k and v tiles in flight
                f = t + e * THREADS
                j, c4 = f // D4, f % D4
                if j0 + j < n:
                    held_k[e, 0], held_k[e, 1], held_k[e, 2], held_k[e, 3] = load_float4_2d(k, kz + j0 + j, 4 * c4)
                    held_v[e, 0], held_v[e, 1], held_v[e, 2], held_v[e, 3] = load_float4_2d(v, kz + j0 + j, 4 * c4)
                else:
                    for w in range(4):
                        held_k[e, w] = ZERO
                        held_v[e, w] = ZERO
            for e in range(KV_LOADS):                        # then k transposed, v as it is
                f = t + e * THREADS
                j, c4 = f // D4, f % D4
                for w in range(4):
                    smem[K_T + (4 * c4 + w) * KW + j] = held_k[e, w]
                store_float4(smem, V_S4 + j * D4 + c4, held_v[e, 0], held_v[e, 1], held_v[e, 2], held_v[e, 3])
            cuda.syncthreads()
            for r in range(TM):
                for x in range(TN):
                    s[r, x] = ZERO
            for c0 in range(0, D, QK_UNROLL):                # scores: TM x TN outer products over D
                for cu in range(QK_UNROLL):
                    c = c0 + cu
                    for rr in range(TM // 4):
                        a_frag[4 * rr], a_frag[4 * rr + 1], a_frag[4 * rr + 2], a_frag[4 * rr + 3] = load_float4(
                            smem, q4 + c * RW4 + GROUPS * rr)
                    for xx in range(TN // 4):
                        k_frag[4 * xx], k_frag[4 * xx + 1], k_frag[4 * xx + 2], k_frag[4 * xx + 3] = load_float4(
                            smem, k4 + c * KW4 + LANES * xx)
                    for r in range(TM):
                        for x in range(TN):
                            s[r, x] += a_frag[r] * k_frag[x]
            if j0 + BC > n or (CAUSAL and j0 + BC - 1 > i0):  # only tiles that cross an edge are masked
                keys_left = n - j0 - 4 * lane                # key x is j0 + 4·lane + (a constant), row r is
                diagonal = i0 + 4 * g - j0 - 4 * lane        # i0 + 4g + (a constant): one compare each
                for r in range(TM):
                    for x in range(TN):
                        key_x, row_r = 4 * LANES * (x // 4) + x % 4, ROW_STEP * (r // 4) + r % 4
                        if key_x >= keys_left or (CAUSAL and key_x - row_r > diagonal):
                            s[r, x] = NEG_INF
            for r in range(TM):                              # this lane's maximum of each row
                row_max[r] = s[r, 0]
                for x in range(1, TN):
                    row_max[r] = max(row_max[r], s[r, x])
            for r in range(TM):                              # the row group's (LANES lanes of one warp)
                if LANES == 16:
                    row_max[r] = max(row_max[r], cuda.shfl_xor_sync(FULL_MASK, row_max[r], 8))
                row_max[r] = max(row_max[r], cuda.shfl_xor_sync(FULL_MASK, row_max[r], 4))
                row_max[r] = max(row_max[r], cuda.shfl_xor_sync(FULL_MASK, row_max[r], 2))
                row_max[r] = max(row_max[r], cuda.shfl_xor_sync(FULL_MASK, row_max[r], 1))
            for r in range(TM):                              # rescale: a factor of 1 when the max stayed
                m_new = max(m_run[r], row_max[r])            # finite: key 0 is in tile 0, never masked
                row_max[r] = math.exp2(m_run[r] - m_new)     # now the rescale factor (0 in tile 0)
                m_run[r] = m_new
                l_run[r] *= row_max[r]
            for r in range(TM):
                for y in range(DIMS):
                    o[r, y] *= row_max[r]
            for r in range(TM):                              # probabilities, in place of the scores
                for x in range(TN):
                    s[r, x] = math.exp2(s[r, x] - m_run[r])
                    l_run[r] += s[r, x]
            if P_OVER_K:                                     # p_t overwrites k_t: every score is done
                cuda.syncthreads()
            for rr in range(TM // 4):                        # p_t[key, row]: 4 rows in one 16-byte store
                for x in range(TN):
                    store_float4(smem, p4 + (4 * LANES * (x // 4) + x % 4) * RW4 + GROUPS * rr,
                                 s[4 * rr, x], s[4 * rr + 1, x], s[4 * rr + 2, x], s[4 * rr + 3, x])
            cuda.syncthreads()
            for jj in range(0, BC, PV_UNROLL):               # o += p @ v: TM x DIMS outer products
                for ju in range(PV_UNROLL):
                    j = jj + ju
                    for rr in range(TM // 4):
                        a_frag[4 * rr], a_frag[4 * rr + 1], a_frag[4 * rr + 2], a_frag[4 * rr + 3] = load_float4(
                            smem, pv4 + j * RW4 + GROUPS * rr)
                    for yy in range(DIMS // 4):
                        v_frag[4 * yy], v_frag[4 * yy + 1], v_frag[4 * yy + 2], v_frag[4 * yy + 3] = load_float4(
                            smem, v4 + j * D4 + LANES * yy)
                    for r in range(TM):
                        for y in range(DIMS):
                            o[r, y] += a_frag[r] * v_frag[y]
            cuda.syncthreads()                               # k_t, v_s, p_t are free for the next tile
        for r in range(TM):                                  # the row group's sum, then o / l
            if LANES == 16:
                l_run[r] += cuda.shfl_xor_sync(FULL_MASK, l_run[r], 8)
            l_run[r] += cuda.shfl_xor_sync(FULL_MASK, l_run[r], 4)
            l_run[r] += cuda.shfl_xor_sync(FULL_MASK, l_run[r], 2)
            l_run[r] += cuda.shfl_xor_sync(FULL_MASK, l_run[r], 1)
        for r in range(TM):
            row = i0 + 4 * g + ROW_STEP * (r // 4) + r % 4
            if row < m:
                inv = float32(1.0) / l_run[r]
                for y in range(DIMS):
                    out[qz + row, 4 * lane + 4 * LANES * (y // 4) + y % 4] = o[r, y] * inv

    _REGS_KERNELS[key] = (quiet(flash_regs_kernel), cfg)
    return _REGS_KERNELS[key]


def flash_attention_regs(q, k, v, out, causal: bool = False, heavy_first: bool = False, **options):
    """Path 2, register-blocked (d = 64 or 128): flash_regs_kernel on 2-D views of q, k, v and out; `options`
    (TM, TN, LANES, THREADS, P_OVER_K, QK_UNROLL, PV_UNROLL) override REGS_CONFIGS (make_flash_regs_kernel)."""
    where = "flash_attention_regs_causal" if causal else "flash_attention_regs"
    heads, m, n, d = _check_qkv(q, k, v, out, where, tuple(REGS_CONFIGS))
    if causal and m != n:
        raise ValueError(f"{where}: the causal mask here needs as many queries as keys (m = {m}, n = {n})")
    if heads == 0 or m == 0:
        return
    kernel, cfg = make_flash_regs_kernel(d, causal, heavy_first, **options)
    args = (q.reshape(heads * m, d), k.reshape(heads * n, d), v.reshape(heads * n, d), out.reshape(heads * m, d))
    allow_dynamic_shared(kernel, args, cfg["smem_bytes"])
    kernel[(heads, _cdiv(m, cfg["BR"])), cfg["THREADS"], 0, cfg["smem_bytes"]](*args)


def flash_attention_regs_causal(q, k, v, out):
    """The register-blocked kernel with the causal mask, query blocks in launch order."""
    flash_attention_regs(q, k, v, out, causal=True)


def flash_attention_balanced_causal(q, k, v, out):
    """The register-blocked causal kernel with the query blocks launched heaviest first."""
    flash_attention_regs(q, k, v, out, causal=True, heavy_first=True)


# ------------------------------------------------------------------------------------------------
# Bytes before time
# ------------------------------------------------------------------------------------------------
def qkvo_bytes(heads: int, n: int, d: int, m: int | None = None) -> int:
    """The floor: read q, k and v once, write out once (float32)."""
    m = n if m is None else m
    return 4 * heads * d * (2 * m + 2 * n)


def score_bytes(heads: int, m: int, n: int) -> int:
    """Path 1's traffic through the score matrix: write s, read s and write p (softmax), read p."""
    return 4 * 4 * heads * m * n


def flash_kv_bytes(heads: int, n: int, d: int, m: int | None = None, causal: bool = False) -> int:
    """Path 2's reads of k and v: every query block reads every key tile it needs (causal: about half)."""
    m = n if m is None else m
    br, bc = FLASH_CONFIGS[d]["BR"], FLASH_CONFIGS[d]["BC"]
    if not causal:
        return 8 * heads * _cdiv(m, br) * n * d
    tiles = sum(min(_cdiv(n, bc), _cdiv(i0 + br, bc)) for i0 in range(0, m, br))
    return 8 * heads * tiles * bc * d


def attention_flops(heads: int, n: int, d: int, causal: bool = False) -> int:
    """4·n²·d per head (q @ k.T and p @ v, 2 FLOPs a multiply-add); causal: half of it."""
    flops = 4 * heads * n * n * d
    return flops // 2 if causal else flops


# ------------------------------------------------------------------------------------------------
# Reference, inputs, tolerance, ladders
# ------------------------------------------------------------------------------------------------
def attention_inputs(size, rng):
    """q, k, v of shape (heads, n, d) with a spike-late last key (lib.grading.exercises.spike_late_qkv)."""
    heads, n, d = size
    return spike_late_qkv(rng, (heads, n, d), (heads, n, d))


REFERENCE_ROWS = 2048          # query rows per float64 chunk: bounds the reference's memory


def attention64(q, k, v, causal: bool = False):
    """(out, scale) in float64: out = softmax(q k.T / sqrt(d)) v, and the tolerance's conditioning scale
    softmax(...) @ |v| (what a sum of weighted |v| may round to). Computed a head and a chunk of rows at a
    time; with torch on a GPU in float64 there (the CPU would take minutes at n = 16384)."""
    heads, m, d = q.shape
    n = k.shape[1]
    use_torch = lib.ON_GPU
    if use_torch:
        import torch
        xp_q, xp_k, xp_v = (torch.as_tensor(a, device="cuda").double() for a in (q, k, v))
    else:
        xp_q, xp_k, xp_v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    out, scale = np.empty((heads, m, d)), np.empty((heads, m, d))
    for z in range(heads):
        for r0 in range(0, m, REFERENCE_ROWS):
            r1 = min(m, r0 + REFERENCE_ROWS)
            s = (xp_q[z, r0:r1] @ xp_k[z].T) / math.sqrt(d)
            if causal:
                rows = np.arange(r0, r1)[:, None]
                mask = np.arange(n)[None, :] > rows
                s[torch.as_tensor(mask, device="cuda") if use_torch else mask] = -math.inf
            s = s - s.max(axis=1, keepdims=True) if not use_torch else s - s.amax(dim=1, keepdim=True)
            p = np.exp(s) if not use_torch else torch.exp(s)
            p = p / p.sum(axis=1, keepdims=True) if not use_torch else p / p.sum(dim=1, keepdim=True)
            o, sc = p @ xp_v[z], p @ abs(xp_v[z])
            out[z, r0:r1] = o.cpu().numpy() if use_torch else o
            scale[z, r0:r1] = sc.cpu().numpy() if use_torch else sc
    return out, scale


def attention_reference(q, k, v):
    return attention64(q, k, v)[0]


def attention_causal_reference(q, k, v):
    return attention64(q, k, v, causal=True)[0]


def attention_rtol(n: int, d: int) -> float:
    """The K-scaled rule twice, K = n (the sum over keys) plus K = d (each score's dot product)."""
    return 2 * (k_scaled_rtol(n) + k_scaled_rtol(d))


def attention_tolerance(q, k, v, expected, causal: bool = False):
    return Tolerance(rtol=attention_rtol(k.shape[1], q.shape[2]), scale=attention64(q, k, v, causal)[1])


FP16_RTOL = 2.0 ** -7   # fp16 rounds q, k, v to 11 bits (2^-11 each); scores of a few units lose ~2^-9


def attention_fp16_tolerance(q, k, v, expected):
    """torch's fp16 SDPA is a looser contract: inputs rounded to fp16 before anything is computed."""
    return Tolerance(rtol=FP16_RTOL, scale=attention64(q, k, v)[1])


def _sdpa(q, k, v, out, causal=False, dtype=None):
    """torch.nn.functional.scaled_dot_product_attention on (1, heads, n, d) views, written into out."""
    import torch
    import torch.nn.functional as F

    args = [x.unsqueeze(0) if dtype is None else x.unsqueeze(0).to(dtype) for x in (q, k, v)]
    with _no_tf32():
        result = F.scaled_dot_product_attention(*args, is_causal=causal)
    out.copy_(result[0])


class _no_tf32:
    """TF32 off for the call (the fp32 baseline must do fp32 arithmetic), the previous setting restored."""

    def __enter__(self):
        import torch

        self.before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False

    def __exit__(self, *exc):
        import torch

        torch.backends.cuda.matmul.allow_tf32 = self.before


def torch_sdpa_fp32(q, k, v, out):
    _sdpa(q, k, v, out)


def torch_sdpa_fp32_causal(q, k, v, out):
    _sdpa(q, k, v, out, causal=True)


def torch_sdpa_fp16(q, k, v, out):
    import torch

    _sdpa(q, k, v, out, dtype=torch.float16)


HEADS = 16
SIZES_D64 = [(HEADS, n, 64) for n in (1024, 2048, 4096, 8192, 16384)]
SIM_SIZES = [(2, 40, 64)]            # two heads, 40 queries and keys: every tile of every kernel is partial
PATH1 = Rung("attention_materialised", attention_materialised,
             "path 1: q @ k.T to memory, row softmax, p @ v (3 kernels)")
PATH2 = Rung("flash_attention", flash_attention, "path 2: one fused kernel, online softmax")
PATH2_WIDE = Rung("flash_attention_wide", flash_attention_wide,
                  "path 2, wide: 8 × 8 scores per thread, 99 KB of dynamic shared memory")
PATH2_REGS = Rung("flash_attention_regs", flash_attention_regs,
                  "path 2, register-blocked: the wide tile with every per-thread array in registers; "
                  "d = 128: 8 rows × 4 keys per thread, 16 lanes a row, 256 threads")
SDPA32 = Baseline("torch.sdpa", torch_sdpa_fp32, "scaled_dot_product_attention, fp32, TF32 off")


def _ladder(topic, description, sizes, sim_sizes, rungs, baselines, causal=False,
            tolerance=attention_tolerance):
    return Ladder(
        chapter=CHAPTER, topic=topic, description=description, make_inputs=attention_inputs,
        out_shape=lambda q, k, v: q.shape,
        reference=attention_causal_reference if causal else attention_reference,
        bytes=lambda size: qkvo_bytes(*size), flops=lambda size: attention_flops(*size, causal=causal),
        unit="TFLOP/s", sizes=sizes, sim_sizes=sim_sizes, rungs=rungs, baselines=baselines,
        tolerance=(lambda q, k, v, e: tolerance(q, k, v, e, causal=True)) if causal else tolerance)


LADDERS = [
    # Path 1 at every size: its two 16 × 16384² buffers take 32 GiB, which the H200's 141 GB holds.
    _ladder("attention d64", "16 heads, d = 64, n = 1024 ... 16384: path 1, path 2, torch SDPA (fp32)",
            SIZES_D64, SIM_SIZES, [PATH1, PATH2, PATH2_WIDE, PATH2_REGS], [SDPA32]),
    _ladder("attention d128", "16 heads, d = 128, n = 4096", [(HEADS, 4096, 128)], [(1, 37, 128)],
            [PATH1, PATH2, PATH2_REGS], [SDPA32]),
    _ladder("attention causal", "causal mask, 16 heads, d = 64 (FLOPs counted for the half computed)",
            [(HEADS, 4096, 64), (HEADS, 16384, 64)], [(1, 70, 64)],
            [Rung("flash_attention_causal", flash_attention_causal, "path 2, causal"),
             Rung("flash_attention_wide_causal", flash_attention_wide_causal, "path 2 wide, causal"),
             Rung("flash_attention_regs_causal", flash_attention_regs_causal,
                  "register-blocked, causal: mask only in tiles that cross the diagonal"),
             Rung("flash_attention_balanced_causal", flash_attention_balanced_causal,
                  "register-blocked, causal, the longest query blocks launched first")],
            [Baseline("torch.sdpa.causal", torch_sdpa_fp32_causal, "SDPA fp32, is_causal=True")], causal=True),
    # Context, not a competitor: fp16 inputs on the tensor cores, checked with fp16's looser tolerance.
    _ladder("attention fp16", "torch SDPA with fp16 inputs (tensor cores), for scale", SIZES_D64, [], [],
            [Baseline("torch.sdpa.fp16", torch_sdpa_fp16, "SDPA on fp16 copies (casts included)", dtype="float16")],
            tolerance=attention_fp16_tolerance),
]


# ------------------------------------------------------------------------------------------------
# Recorded beside the ladder: what each kernel costs in registers, local memory and shared memory
# ------------------------------------------------------------------------------------------------
def record_extra(folder) -> list:
    """On the GPU: registers, local memory (spills) and shared memory of every attention kernel as
    compiled there, each checked first at a ragged size (attention.kernels.csv)."""
    import pandas as pd

    from lib.grading.check import compare
    from lib.measure.results import environment

    env = environment()
    rows = []
    cases = [("flash_attention d=64", flash_attention, (2, 70, 64), False,
              lambda: make_flash_attention_kernel(64, False), FLASH_THREADS),
             ("flash_attention_causal d=64", flash_attention_causal, (2, 70, 64), True,
              lambda: make_flash_attention_kernel(64, True), FLASH_THREADS),
             ("flash_attention d=128", flash_attention, (2, 37, 128), False,
              lambda: make_flash_attention_kernel(128, False), FLASH_THREADS),
             ("flash_attention_wide d=64", flash_attention_wide, (2, 150, 64), False,
              lambda: make_flash_wide_kernel(False), WIDE["THREADS"]),
             ("flash_attention_wide_causal d=64", flash_attention_wide_causal, (2, 150, 64), True,
              lambda: make_flash_wide_kernel(True), WIDE["THREADS"]),
             ("flash_attention_regs d=64", flash_attention_regs, (2, 150, 64), False,
              lambda: make_flash_regs_kernel(64, False)[0], regs_threads(64)),
             ("flash_attention_regs_causal d=64", flash_attention_balanced_causal, (2, 150, 64), True,
              lambda: make_flash_regs_kernel(64, True, True)[0], regs_threads(64)),
             ("flash_attention_regs d=128", flash_attention_regs, (2, 70, 128), False,
              lambda: make_flash_regs_kernel(128, False)[0], regs_threads(128)),
             ("batched_matmul_kernel (scores)", attention_materialised, (2, 70, 64), False,
              lambda: make_batched_matmul_kernel(SCORES_BM, SCORES_BN, True)[0], 256),
             ("batched_matmul_kernel (p @ v)", attention_materialised, (2, 70, 64), False,
              lambda: make_batched_matmul_kernel(PV_BM, PV_BN, False)[0], 128)]
    for name, launch, size, causal, kernel, threads in cases:
        q, k, v = attention_inputs(size, np.random.default_rng(3))
        out = cuda.to_device(np.full(q.shape, np.nan, dtype=np.float32))
        launch(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), out)
        expected, scale = attention64(q, k, v, causal)
        bad = compare(out.copy_to_host(), expected, attention_rtol(size[1], size[2]), 0.0, scale)
        if bad is not None:
            raise AssertionError(f"{name} failed its check; no statistics recorded: {bad.describe()}")
        compiled = next(iter(kernel().overloads.values()))
        rows.append({"kernel": name, "threads_per_block": threads,
                     "registers_per_thread": int(compiled.regs_per_thread),
                     "local_bytes_per_thread": int(compiled.local_mem_per_thread),
                     "shared_bytes_per_block": int(compiled.shared_mem_per_block),
                     "dynamic_shared_bytes_per_block": dynamic_shared_bytes(name), **env})
    path = Path(folder) / f"{CHAPTER}.kernels.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return [path, record_path1_steps(folder, env), record_regs_tiles(folder, env)]


def dynamic_shared_bytes(name: str) -> int:
    """The dynamic shared memory a kernel of record_extra's table is launched with (0: static only)."""
    if name.startswith("flash_attention_wide"):
        return WIDE_SMEM_BYTES
    if name.startswith("flash_attention_regs"):
        d = int(name.rsplit("d=", 1)[1])
        return regs_shape(d, **REGS_CONFIGS[d])["smem_bytes"]
    return 0


PATH1_STEP_SIZES = [(HEADS, 4096, 64), (HEADS, 4096, 128)]


def path1_steps(q, k, v, out):
    """Path 1 taken apart: (step, launch, bytes, FLOPs) for each of its three kernels, on device arrays.
    Bytes are what each kernel must move at least: its inputs read once and its output written once."""
    heads, m, n, d = _check_qkv(q, k, v, out, "path1_steps")
    s, p = score_workspace(heads, m, n)
    scores_bytes = 4 * heads * (m * d + n * d + m * n)     # read q and k, write s
    softmax_bytes = 8 * heads * m * n                      # read s, write p
    pv_bytes = 4 * heads * (m * n + n * d + m * d)         # read p and v, write out
    flops = 2 * heads * m * n * d
    return [("scores q @ k.T", lambda: scores(q, k, s), scores_bytes, flops),
            ("row softmax", lambda: PATH1_SOFTMAX(s.reshape(heads * m, n), p.reshape(heads * m, n)),
             softmax_bytes, 0),
            ("p @ v", lambda: probabilities_times_values(p, v, out), pv_bytes, flops)]


def record_path1_steps(folder, env) -> Path:
    """Time each of path 1's kernels on its own (after checking the three together at that size) and
    write attention.path1.csv: step, size, median ms, the bytes and FLOPs it must move and do."""
    import pandas as pd

    from lib.grading.check import compare
    from lib.measure.timing import time_cuda

    rows = []
    for size in PATH1_STEP_SIZES:
        q, k, v = attention_inputs(size, np.random.default_rng(4))
        dq, dk, dv = (cuda.to_device(x) for x in (q, k, v))
        out = cuda.to_device(np.full(q.shape, np.nan, dtype=np.float32))
        steps = path1_steps(dq, dk, dv, out)
        for _, launch, _, _ in steps:
            launch()
        expected, scale = attention64(q, k, v)
        bad = compare(out.copy_to_host(), expected, attention_rtol(size[1], size[2]), 0.0, scale)
        if bad is not None:
            raise AssertionError(f"path 1 failed its check at {size}; its steps are not timed: {bad.describe()}")
        for step, launch, nbytes, flops in steps:
            timing = time_cuda(launch, bytes=nbytes, flops=flops or None)
            rows.append({"step": step, "size": "x".join(map(str, size)), "median_ms": timing.median_ms,
                         "bytes": nbytes, "flops": flops, **env})
    path = Path(folder) / f"{CHAPTER}.path1.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


# The tile shapes the d = 128 configuration was chosen from (REGS_CONFIGS[128] is one of them): per thread
# query rows x keys, lanes per row group, threads per block, and the QK loop's steps per trip.
REGS_TILES_128 = [dict(TM=4, TN=4, LANES=8, THREADS=128, QK_UNROLL=4),
                  dict(TM=4, TN=4, LANES=8, THREADS=256, QK_UNROLL=4),
                  dict(TM=4, TN=8, LANES=8, THREADS=256, QK_UNROLL=2),
                  dict(TM=8, TN=4, LANES=16, THREADS=256, QK_UNROLL=4),
                  dict(TM=8, TN=4, LANES=16, THREADS=256, QK_UNROLL=2)]
REGS_TILES_SIZE = (HEADS, 4096, 128)


def record_regs_tiles(folder, env) -> Path:
    """attention.regs_tiles.csv: each tile shape of REGS_TILES_128 at REGS_TILES_SIZE, checked against float64,
    then timed, with its registers, local bytes, dynamic shared bytes and resident blocks per SM."""
    import pandas as pd

    from lib.grading.check import compare
    from lib.hw.occupancy import limits_for, occupancy
    from lib.hw.specs import spec_for
    from lib.measure.timing import time_cuda

    spec = spec_for(env["device"])
    q, k, v = attention_inputs(REGS_TILES_SIZE, np.random.default_rng(5))
    expected, scale = attention64(q, k, v)
    dq, dk, dv = (cuda.to_device(x) for x in (q, k, v))
    out = cuda.device_array(q.shape, np.float32)
    heads, n, d = REGS_TILES_SIZE
    rows = []
    for tile in REGS_TILES_128:
        kernel, cfg = make_flash_regs_kernel(d, False, **tile)
        out.copy_to_device(np.full(q.shape, np.nan, np.float32))
        flash_attention_regs(dq, dk, dv, out, **tile)
        bad = compare(out.copy_to_host(), expected, attention_rtol(n, d), 0.0, scale)
        if bad is not None:
            raise AssertionError(f"flash_attention_regs {tile} failed its check; not timed: {bad.describe()}")
        timing = time_cuda(lambda: flash_attention_regs(dq, dk, dv, out, **tile), flops=attention_flops(heads, n, d))
        compiled = next(iter(kernel.overloads.values()))
        regs = int(compiled.regs_per_thread)
        rows.append({"TM": cfg["TM"], "TN": cfg["TN"], "lanes": cfg["LANES"], "threads": cfg["THREADS"],
                     "qk_unroll": cfg["QK_UNROLL"], "BR": cfg["BR"], "BC": cfg["BC"],
                     "configured": tile == REGS_CONFIGS[d],   # every tile names each configured option
                     "registers_per_thread": regs, "local_bytes_per_thread": int(compiled.local_mem_per_thread),
                     "dynamic_shared_bytes": cfg["smem_bytes"],
                     "blocks_per_sm": occupancy(limits_for(spec), cfg["THREADS"], regs, cfg["smem_bytes"])["blocks"]
                     if spec else None,
                     "size": "x".join(map(str, REGS_TILES_SIZE)), "median_ms": timing.median_ms,
                     "q1_ms": timing.q1_ms, "q3_ms": timing.q3_ms, "reps": timing.reps, "tflops": timing.tflops,
                     **env})
    path = Path(folder) / f"{CHAPTER}.regs_tiles.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


# The book's own small launches (demos, last passes, one-thread set-ups) are deliberate: no low-occupancy
# warning for them (lib/runtime/quiet_launches.py); a reader's kernels still get it.
quiet_kernels(globals())
