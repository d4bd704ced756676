"""Kernels of the chapter "FlashAttention-3": the FP16/BF16 fused attention forward pass of the chapter
"FlashAttention on the tensor cores" rebuilt on Hopper's own instructions (:mod:`lib.runtime.hopper`).

out = softmax(q @ k.T / sqrt(d)) @ v per head; q, k, v int16 bit patterns of FP16 or BF16, shape
(heads, n, d), d = 64 or 128; out float32 (heads, n, d), as in :mod:`kernels.flash_tc`.

Per block (384 threads, one per SM): warpgroup 0 is the producer (one thread issues TMA copies of the
block's Q tile once and of K and V tiles into a ring of STAGES slots, each with its 'full' and 'empty'
mbarrier); warpgroups 1 and 2 are consumers, each owning 64 query rows. Per key tile a consumer computes
S = Q·Kᵀ with SS-wgmma (m64n128k16, both operands K-major from shared memory), the online softmax on S's
accumulator fragment in float32 registers (each thread holds 2 rows × 32 columns: a row max is its own
values and two shuffles across its quad), rounds P to 16 bits *in place* — the accumulator of S is, pair by
pair, the A operand of the next product (``hopper.acc_to_a_registers``) — and computes O += P·V with an
RS-wgmma (A = P from registers, B = V read MN-major through the transposed-B form: V stays row-major as
TMA copied it). The unrolled register code (64 scores, 32 P registers, 32 or 64 outputs per thread) is
generated as Python source, so every tuple index is a constant and stays a register.

Rungs: ``ws`` (warp-specialised, each wgmma waited for at once), ``overlap`` (FA3's intra-warpgroup
pipelining: S of tile j+1 and O += P·V of tile j are in flight together while the softmax of j+1 runs),
``pingpong`` (overlap, and the two consumers take turns to issue their GEMMs through named barriers).
"""
from __future__ import annotations

import dataclasses
import linecache
import math
import sys
from pathlib import Path

import numpy as np
from numba import cuda, float32, int64, uint8

import lib
from lib.measure.bench import Baseline, Ladder, Rung
from lib.runtime import hopper
from lib.runtime.dynamic_shared import allow_dynamic_shared
from lib.runtime.quiet_launches import quiet
from lib.runtime.validate import require
from kernels import flash_tc, triton_baselines
from kernels.attention import attention_flops

CHAPTER = "flash3"
KINDS = ("fp16", "bf16")
HOPPER_KIND = {"fp16": "f16", "bf16": "bf16"}
HEAD_DIMS = (64, 128)
BM = 128                        # query rows per block: two consumer warpgroups of 64
BKV = 128                       # keys per tile: S is m64n128 per consumer
STAGES = {64: 4, 128: 2}        # K/V ring slots: 4 × 32 KB (d = 64) or 2 × 64 KB (d = 128), + Q
BOX = 64                        # 16-bit columns per TMA box: one 128-byte, 128B-swizzled row
ROW_BYTES = 128
SBO = 8 * ROW_BYTES             # 8-row swizzle atoms, 1024 bytes apart
SW128 = hopper.SWIZZLE_MODES["128B"]
LOG2E = 1.4426950408889634
NEG_INF = float32(-math.inf)
RUNGS = ("ws", "overlap", "pingpong")


@dataclasses.dataclass(frozen=True)
class Config:
    d: int
    kind: str
    causal: bool
    rung: str

    @property
    def stages(self):
        return STAGES[self.d]

    @property
    def q_bytes(self):
        return BM * self.d * 2

    @property
    def tile_bytes(self):          # one K (or V) tile: BKV rows × d, as d / 64 boxes of BKV × 128 bytes
        return BKV * self.d * 2

    @property
    def smem_bytes(self):
        return self.q_bytes + 2 * self.stages * self.tile_bytes + 1024


# --- the generated register code ---------------------------------------------------------------------------
def _rows_of(i: int) -> int:
    """Which of a thread's two rows (g or g + 8) accumulator register i belongs to."""
    return (i >> 1) & 1


def _col_of(i: int) -> int:
    """Column of accumulator register i relative to the thread's 2t."""
    return 8 * (i >> 2) + (i & 1)


def _source(cfg: Config) -> str:
    """Python source of the consumer's device functions for one configuration (every index a constant)."""
    d, ns, no = cfg.d, BKV // 2, cfg.d // 2            # scores and outputs per thread
    kind = HOPPER_KIND[cfg.kind]
    qk = f"hopper.wgmma_m64n{BKV}k16_{kind}"
    pv = f"hopper.wgmma_rs_m64n{d}k16_{kind}_tb"
    pack = f"hopper.pack_{kind}x2"
    L = []
    # S = Q·Kᵀ: d / 16 wgmma; K of 16 elements = 32 bytes inside a 128-byte row, then the next box
    L.append("def qk(q_addr, k_addr):")
    L.append(f"    s = hopper.fence_operands(hopper.zeros_acc({ns}))")   # zeroed before the stage opens
    L.append("    hopper.wgmma_fence()")
    for kk in range(d // 16):
        qoff = (kk // 4) * BM * ROW_BYTES + (kk % 4) * 32
        koff = (kk // 4) * BKV * ROW_BYTES + (kk % 4) * 32
        L.append(f"    s = {qk}(hopper.make_desc(q_addr + {qoff}, 16, {SBO}, {SW128}), "
                 f"hopper.make_desc(k_addr + {koff}, 16, {SBO}, {SW128}), s)")
    L.append("    hopper.wgmma_commit()")
    L.append("    return s")
    # O += P·V: BKV / 16 RS-wgmma; V MN-major: d / 64 boxes LBO apart, 8 key rows SBO apart, k16 = 2 atoms
    L.append("def pv(p, v_addr, o):")
    L.append("    hopper.wgmma_fence()")
    for kk in range(BKV // 16):
        regs = ", ".join(f"p[{4 * kk + r}]" for r in range(4))
        L.append(f"    o = {pv}(({regs}), hopper.make_desc(v_addr + {kk * 2 * SBO}, {BKV * ROW_BYTES}, {SBO}, "
                 f"{SW128}), o)")
    L.append("    hopper.wgmma_commit()")
    L.append("    return o")
    # the causal mask of a diagonal tile: key column (relative to the thread's 2t) c of row h is kept while
    # c < lim_h, lim_h = query row + 1 - the tile's first key of this thread
    L.append("def mask(s, lim0, lim1):")
    for i in range(ns):             # one statement each: a tuple display of branches would not compile
        L.append(f"    y{i} = s[{i}] if {_col_of(i)} < lim{_rows_of(i)} else NEG_INF")
    L.append(f"    return ({', '.join(f'y{i}' for i in range(ns))},)")
    # the online softmax step: new row maxima (quad shuffles), P = exp2(s·C − m) packed as A registers,
    # this thread's share of the row sums, the rescale factor of the old O and l
    L.append("def softmax(s, m0, m1, l0, l1, c):")
    for h in (0, 1):
        idx = [i for i in range(ns) if _rows_of(i) == h]
        expr = f"s[{idx[0]}]"
        for i in idx[1:]:
            expr = f"max({expr}, s[{i}])"
        L.append(f"    x{h} = {expr}")
        L.append(f"    x{h} = max(x{h}, cuda.shfl_xor_sync(0xFFFFFFFF, x{h}, 1))")
        L.append(f"    x{h} = max(x{h}, cuda.shfl_xor_sync(0xFFFFFFFF, x{h}, 2))")
        L.append(f"    n{h} = max(m{h}, x{h} * c)")
        L.append(f"    u{h} = n{h} if n{h} != NEG_INF else float32(0.0)")   # a row with no key yet: 0, not NaN
        L.append(f"    a{h} = hopper.exp2_approx(m{h} - u{h})")
    for i in range(ns):
        L.append(f"    e{i} = hopper.exp2_approx(s[{i}] * c - u{_rows_of(i)})")
    for h in (0, 1):
        terms = " + ".join(f"e{i}" for i in range(ns) if _rows_of(i) == h)
        L.append(f"    l{h} = l{h} * a{h} + ({terms})")
    L.append(f"    return ({', '.join(f'e{i}' for i in range(ns))},), n0, n1, l0, l1, a0, a1")
    # P as the A registers of P·V (pairs of the accumulator layout, acc_to_a_registers). Fenced: the
    # conversions happen here, not sunk between the wgmmas of an open pipeline stage (ptxas would then
    # serialize every wgmma of the kernel, C7513); and the overlap rung converts only after the previous
    # P·V has been waited for, since its A registers must not be redefined while it runs.
    L.append("def to_a(e):")
    regs = ", ".join(f"{pack}(e[{2 * r}], e[{2 * r + 1}])" for r in range(ns // 2))
    L.append(f"    return hopper.fence_operands(({regs},))")
    L.append("def rescale(o, a0, a1):")
    items = ", ".join(f"o[{i}] * a{_rows_of(i)}" for i in range(no))
    L.append(f"    return hopper.fence_operands(({items},))")
    return "\n".join(L) + "\n"


def _device_functions(cfg: Config) -> dict:
    space = {"hopper": hopper, "cuda": cuda, "float32": float32, "NEG_INF": NEG_INF}
    src, name = _source(cfg), f"<flash3 {cfg.d} {cfg.kind} {cfg.causal} {cfg.rung}>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)   # inspect.getsource finds it
    exec(compile(src, name, "exec"), space)
    return {name: cuda.jit(device=True, fastmath=True)(space[name])
            for name in ("qk", "pv", "mask", "softmax", "to_a", "rescale")}


# --- the kernel --------------------------------------------------------------------------------------------
_KERNELS: dict = {}


def make_kernel(cfg: Config):
    """The compiled kernel of a configuration (built once)."""
    if cfg in _KERNELS:
        return _KERNELS[cfg]
    if cfg.d not in HEAD_DIMS or cfg.kind not in KINDS or cfg.rung not in RUNGS:
        raise ValueError(f"no flash3 kernel for {cfg}: d in {HEAD_DIMS}, kind in {KINDS}, rung in {RUNGS}")
    f = _device_functions(cfg)
    qk, pv, mask, softmax, to_a, rescale = f["qk"], f["pv"], f["mask"], f["softmax"], f["to_a"], f["rescale"]
    D, S, CAUSAL = cfg.d, cfg.stages, cfg.causal
    OVERLAP, PINGPONG = cfg.rung in ("overlap", "pingpong"), cfg.rung == "pingpong"
    TURN = 1                                # named barriers 1 and 2: the consumers' turns
    Q_BYTES, TILE = cfg.q_bytes, cfg.tile_bytes
    BOXES = D // BOX
    NO = D // 2                             # float32 outputs per consumer thread
    RING = Q_BYTES                          # K slot s at RING + 2·s·TILE, V slot s right after it
    NBAR = 1 + 4 * S                        # q_full, k_full[S], v_full[S], k_empty[S], v_empty[S]
    bounds = {} if lib.SIMULATOR else {"launch_bounds": (384, 1)}

    @cuda.jit(device=True)
    def load_tile(tmap, dst, row, bar):
        """One thread: TMA the BKV × D tile at `row` as D / 64 boxes, completing on `bar`."""
        hopper.mbar_arrive_expect_tx(bar, TILE)
        for b in range(BOXES):
            hopper.tma_load_2d(dst + b * BKV * ROW_BYTES, tmap, b * BOX, row, bar)

    @cuda.jit(device=True)
    def wait(bar, parity):
        while hopper.mbar_try_wait(bar, parity) == 0:
            pass

    @cuda.jit(**bounds, fastmath=True)
    def flash3_kernel(tq, tk, tv, out, n, c):
        """out[z, i] = softmax_j(q[z, i]·k[z, j] · c / log2 e) v[z, j] for the block's BM query rows.

        Memory: Q by TMA once per block, K and V by TMA once per query block (causal: only the tiles left
        of the diagonal), out written once from registers (float32). Launch: grid (n / BM, heads), causal
        (heads, n / BM), 384 threads, cfg.smem_bytes of dynamic shared memory; n % BM == 0 (the launcher
        checks).
        """
        smem = cuda.shared.array(0, uint8)
        bars = cuda.shared.array(NBAR, int64)
        tid = cuda.threadIdx.x
        base = hopper.smem_u32(smem)
        base += (1024 - (base & 1023)) & 1023
        q_full = hopper.smem_u32(bars)
        k_full = q_full + 8
        v_full = k_full + 8 * S
        k_empty = v_full + 8 * S
        v_empty = k_empty + 8 * S
        if CAUSAL:      # grid (heads, query blocks): the longest query blocks of every head start first
            z = cuda.blockIdx.x
            mb = cuda.gridDim.y - 1 - cuda.blockIdx.y
        else:           # grid (query blocks, heads): the blocks running together share one head's K and V in L2
            z = cuda.blockIdx.y
            mb = cuda.blockIdx.x
        m0 = mb * BM
        row0 = z * n + m0                                # first row of the block in the (heads·n, D) maps
        tiles = n // BKV
        if CAUSAL:
            tiles = min(tiles, (m0 + BM + BKV - 1) // BKV)
        if tid == 0:
            hopper.tmap_acquire(tq)
            hopper.tmap_acquire(tk)
            hopper.tmap_acquire(tv)
            hopper.mbar_init(q_full, 1)
            for s in range(S):
                hopper.mbar_init(k_full + 8 * s, 1)
                hopper.mbar_init(v_full + 8 * s, 1)
                hopper.mbar_init(k_empty + 8 * s, 8)     # one arrival per consumer warp
                hopper.mbar_init(v_empty + 8 * s, 8)
            hopper.fence_mbarrier_init()
        cuda.syncthreads()
        if tid < 128:
            hopper.setmaxnreg_dec(24)
            if tid == 0:
                hopper.mbar_arrive_expect_tx(q_full, Q_BYTES)
                for b in range(BOXES):
                    hopper.tma_load_2d(base + b * BM * ROW_BYTES, tq, b * BOX, row0, q_full)
                for j in range(tiles):
                    slot = j % S
                    free = ((j // S) & 1) ^ 1            # the previous round's parity: a fresh barrier passes
                    kv_row = z * n + j * BKV
                    wait(k_empty + 8 * slot, free)
                    load_tile(tk, base + RING + 2 * slot * TILE, kv_row, k_full + 8 * slot)
                    wait(v_empty + 8 * slot, free)
                    load_tile(tv, base + RING + (2 * slot + 1) * TILE, kv_row, v_full + 8 * slot)
        else:
            hopper.setmaxnreg_inc(240)
            w = tid // 128 - 1                            # consumer 0 or 1: query rows 64w..64w+63
            lane = tid % 32
            warp = (tid // 32) % 4
            g, t = lane // 4, lane % 4
            q_addr = base + w * 64 * ROW_BYTES
            r0 = m0 + 64 * w + 16 * warp + g              # this thread's two query rows: r0 and r0 + 8
            m_0 = m_1 = NEG_INF
            l_0 = l_1 = float32(0.0)
            o = hopper.fence_operands(hopper.zeros_acc(NO))
            wait(q_full, 0)
            if OVERLAP:
                # tile 0: S and its softmax alone; then per tile j: S_j and P_{j-1}·V_{j-1} in flight
                # together, the softmax of S_j while the second runs, O rescaled once both are done.
                # Ping-pong: the two consumers take turns to issue their GEMMs (named barriers TURN + w), so
                # one warpgroup's softmax runs while the other's GEMMs keep the tensor cores busy.
                if PINGPONG and w == 1:
                    hopper.named_barrier_arrive(TURN, 256)          # consumer 0 has the first turn
                wait(k_full, 0)
                if PINGPONG:
                    hopper.named_barrier_sync(TURN + w, 256)
                s = qk(q_addr, base + RING)
                if PINGPONG:
                    hopper.named_barrier_arrive(TURN + 1 - w, 256)
                hopper.wgmma_wait(0)
                if lane == 0:
                    hopper.mbar_arrive(k_empty)
                if CAUSAL and BKV > m0 + 64 * w:
                    s = mask(s, r0 + 1 - 2 * t, r0 + 9 - 2 * t)
                e, m_0, m_1, l_0, l_1, a0, a1 = softmax(s, m_0, m_1, l_0, l_1, c)
                p = to_a(e)
                for j in range(1, tiles):
                    slot = j % S
                    prev = (j - 1) % S
                    wait(k_full + 8 * slot, (j // S) & 1)
                    wait(v_full + 8 * prev, ((j - 1) // S) & 1)
                    if PINGPONG:
                        hopper.named_barrier_sync(TURN + w, 256)
                    s = qk(q_addr, base + RING + 2 * slot * TILE)
                    o = pv(p, base + RING + (2 * prev + 1) * TILE, o)
                    if PINGPONG:
                        hopper.named_barrier_arrive(TURN + 1 - w, 256)
                    hopper.wgmma_wait(1)                  # S_j done; the P·V of tile j - 1 may still run
                    if lane == 0:
                        hopper.mbar_arrive(k_empty + 8 * slot)
                    if CAUSAL and (j + 1) * BKV > m0 + 64 * w:
                        s = mask(s, r0 + 1 - j * BKV - 2 * t, r0 + 9 - j * BKV - 2 * t)
                    e, m_0, m_1, l_0, l_1, a0, a1 = softmax(s, m_0, m_1, l_0, l_1, c)
                    hopper.wgmma_wait(0)
                    if lane == 0:
                        hopper.mbar_arrive(v_empty + 8 * prev)
                    o = rescale(o, a0, a1)
                    p = to_a(e)
                last = (tiles - 1) % S
                wait(v_full + 8 * last, ((tiles - 1) // S) & 1)
                if PINGPONG:
                    hopper.named_barrier_sync(TURN + w, 256)
                o = pv(p, base + RING + (2 * last + 1) * TILE, o)
                if PINGPONG:
                    hopper.named_barrier_arrive(TURN + 1 - w, 256)
                hopper.wgmma_wait(0)
                if lane == 0:
                    hopper.mbar_arrive(v_empty + 8 * last)
                if PINGPONG and w == 0:
                    hopper.named_barrier_sync(TURN, 256)            # consumer 1's last arrival: none left over
            else:
                for j in range(tiles):
                    slot = j % S
                    ph = (j // S) & 1
                    wait(k_full + 8 * slot, ph)
                    s = qk(q_addr, base + RING + 2 * slot * TILE)
                    hopper.wgmma_wait(0)
                    if lane == 0:
                        hopper.mbar_arrive(k_empty + 8 * slot)
                    if CAUSAL and (j + 1) * BKV > m0 + 64 * w:   # the diagonal tile: keys past the row masked
                        s = mask(s, r0 + 1 - j * BKV - 2 * t, r0 + 9 - j * BKV - 2 * t)
                    e, m_0, m_1, l_0, l_1, a0, a1 = softmax(s, m_0, m_1, l_0, l_1, c)
                    o = rescale(o, a0, a1)
                    p = to_a(e)
                    wait(v_full + 8 * slot, ph)
                    o = pv(p, base + RING + (2 * slot + 1) * TILE, o)
                    hopper.wgmma_wait(0)
                    if lane == 0:
                        hopper.mbar_arrive(v_empty + 8 * slot)
            l_0 += cuda.shfl_xor_sync(0xFFFFFFFF, l_0, 1)
            l_0 += cuda.shfl_xor_sync(0xFFFFFFFF, l_0, 2)
            l_1 += cuda.shfl_xor_sync(0xFFFFFFFF, l_1, 1)
            l_1 += cuda.shfl_xor_sync(0xFFFFFFFF, l_1, 2)
            o = rescale(o, float32(1.0) / l_0, float32(1.0) / l_1)
            hopper.store_acc(out, o, z * n + r0, 2 * t)

    _KERNELS[cfg] = flash3_kernel = quiet(flash3_kernel)
    return flash3_kernel


def _maps(x, rows_per_box, d):
    flat = x.reshape(x.shape[0] * x.shape[1], d)
    flat = flat.view(np.uint16) if flat.dtype != np.uint16 else flat
    return hopper.tensor_map_2d(flat, rows_per_box, BOX, "128B")


def flash3(q, k, v, out, kind: str, causal: bool = False, rung: str = "overlap"):
    """out (float32, heads × n × d) = attention(q, k, v); q, k, v int16 bit patterns of `kind` ('fp16' or
    'bf16'), shape (heads, n, d) with d = 64 or 128 and n a multiple of 128."""
    where = f"flash3_{kind}" + ("_causal" if causal else "")
    if kind not in KINDS:
        raise ValueError(f"{where}: kind must be one of {KINDS}, got {kind!r}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        require(x, name, dtype=np.int16, ndim=3, where=where)
    heads, n, d = q.shape
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"{where}: q, k and v must have one shape (heads, n, d); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)} (this kernel has as many keys as queries)")
    if d not in HEAD_DIMS:
        raise ValueError(f"{where}: head dimension d must be one of {HEAD_DIMS}, got {d}")
    if n % BM or n == 0:
        raise ValueError(f"{where}: n must be a positive multiple of {BM} (no ragged tiles), got {n}")
    require(out, "out", dtype=np.float32, shape=(heads, n, d), where=where)
    cfg = Config(d, kind, causal, rung)
    kernel = make_kernel(cfg)
    tq, tk, tv = _maps(q, BM, d), _maps(k, BKV, d), _maps(v, BKV, d)
    out2 = out.reshape(heads * n, d)
    args = (tq, tk, tv, out2, n, float32(LOG2E / math.sqrt(d)))
    allow_dynamic_shared(kernel, args, cfg.smem_bytes)
    grid = (heads, n // BM) if causal else (n // BM, heads)
    kernel[grid, 384, 0, cfg.smem_bytes](*args)


def rung_name(rung: str, kind: str, causal: bool = False) -> str:
    return f"flash3_{rung}_{kind}" + ("_causal" if causal else "")


def _rung(rung, kind, causal, note):
    def run(q, k, v, out):
        flash3(q, k, v, out, kind, causal, rung)
    run.__name__ = rung_name(rung, kind, causal)
    return Rung(rung_name(rung, kind, causal), run, note)


RUNG_NOTES = {"ws": "producer WG + 2 consumers, TMA ring, SS + RS wgmma, each waited at once",
              "overlap": "+ S of tile j+1 and P·V of tile j in flight during the softmax",
              "pingpong": "+ the two consumers take turns to issue their GEMMs (named barriers)"}

HEADS = 16
SIZES = {64: [(HEADS, 4096, 64)], 128: [(HEADS, 4096, 128)]}   # n = 16384: record_vs_sdpa (its float64
# reference at full size would take minutes)
SIM_SIZES = {64: [(1, 256, 64)], 128: [(1, 256, 128)]}


def _sdpa_name(kind, causal):
    return f"torch.sdpa.{kind}" + (".causal" if causal else "")


def _ladder(kind, d, causal):
    label = {"fp16": "float16", "bf16": "bfloat16"}[kind]
    rungs = [dataclasses.replace(_rung(r, kind, causal, RUNG_NOTES[r]), dtype=label) for r in RUNGS]
    base = Baseline(_sdpa_name(kind, causal), flash_tc._sdpa(kind, causal), "SDPA on the same 16-bit inputs, "
                    "its output copied to float32", dtype=label)
    return Ladder(chapter=CHAPTER, topic=f"{kind} d{d}" + (" causal" if causal else ""),
                  description=f"{kind} q, k, v, float32 out, d = {d}" + (", causal" if causal else ""),
                  make_inputs=flash_tc.make_inputs(kind), out_shape=lambda q, k, v: q.shape,
                  reference=flash_tc.reference(kind, causal), bytes=lambda size: flash_tc.qkvo_bytes(*size),
                  flops=lambda size: attention_flops(*size, causal=causal), unit="TFLOP/s",
                  sizes=SIZES[d], sim_sizes=SIM_SIZES[d], rungs=rungs,
                  baselines=[base], tolerance=flash_tc.tolerance(kind, causal))


LADDERS = [_ladder(kind, d, causal) for kind in KINDS for d in HEAD_DIMS for causal in (False, True)
           if not (causal and d == 64)]


# --- what record_extra writes: SDPA's own kernel, same-run ratios without its copy, resources, ncu -----------
EXTRA_SHAPES = [("fp16", 4096, 64, False), ("bf16", 4096, 64, False), ("fp16", 4096, 128, False),
                ("bf16", 4096, 128, False), ("fp16", 4096, 128, True), ("bf16", 4096, 128, True),
                ("fp16", 16384, 128, False), ("bf16", 16384, 128, False)]
CHECK_SIZE = (2, 1024)          # heads, n of the float64 check that precedes each timing in record_extra
PROFILE_SIZE = (HEADS, 4096, 128)
TENSOR_PIPE = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"   # counts wgmma too
NCU_EXTRA = ["launch__registers_per_thread", TENSOR_PIPE, "smsp__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"]


def _sdpa_alone(kind, causal):
    def run(q, k, v):
        """scaled_dot_product_attention on the 16-bit inputs, its own 16-bit output (no copy)."""
        import torch
        import torch.nn.functional as F

        dtype = torch.float16 if kind == "fp16" else torch.bfloat16
        return F.scaled_dot_product_attention(*(x.view(dtype).unsqueeze(0) for x in (q, k, v)), is_causal=causal)[0]
    return run


def _checked(kind, d, causal, label, run, rng):
    """Raise unless run(q, k, v) (host inputs at CHECK_SIZE in, a float array out) matches float64 within the
    rungs' tolerance; `label` names what ran in the message."""
    from lib.grading.check import compare

    heads, n = CHECK_SIZE
    q, k, v = flash_tc.make_inputs(kind)((heads, n, d), rng)
    expected = flash_tc.reference(kind, causal)(q, k, v)
    tol = flash_tc.tolerance(kind, causal)(q, k, v, expected)
    bad = compare(run(q, k, v), expected, tol.rtol, tol.atol, tol.scale)
    if bad is not None:
        raise AssertionError(f"{label} failed its float64 check, not timed: {bad.describe()}")


def _check(kind, d, causal, rung, rng):
    """Raise unless the rung (or, rung None, SDPA) matches float64 at CHECK_SIZE."""
    import torch

    def run(q, k, v):
        if rung is None:
            return _sdpa_alone(kind, causal)(*(torch.as_tensor(x, device="cuda") for x in (q, k, v))).float().cpu().numpy()
        out = cuda.to_device(np.full(q.shape, np.nan, np.float32))
        flash3(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), out, kind, causal, rung)
        return out.copy_to_host()

    name = _sdpa_name(kind, causal) if rung is None else rung_name(rung, kind, causal)
    _checked(kind, d, causal, f"{name} d={d}", run, rng)


def _triton_check(kind, d, causal, warp_specialize, config, rng):
    """Raise unless Triton's attention, run with the configuration its autotuning chose, matches float64 at
    CHECK_SIZE within the rungs' tolerance."""
    import torch

    dtype = torch.float16 if kind == "fp16" else torch.bfloat16

    def run(q, k, v):
        t = [torch.as_tensor(x, device="cuda").view(dtype).unsqueeze(0) for x in (q, k, v)]
        out = torch.full_like(t[0], float("nan"))
        triton_baselines.attention(*t, out, causal, warp_specialize, config=config)
        return out[0].float().cpu().numpy()

    name = triton_baselines.attention_name(kind, causal, warp_specialize)
    _checked(kind, d, causal, f"{name} d={d} ({triton_baselines.describe(config)})", run, rng)


def triton_variants(causal: bool) -> list[bool]:
    """warp_specialize values of Triton's attention to run: tutorial 06's benchmark runs the non-causal
    forward on Hopper without and with it, the causal one without."""
    return [False] if causal else [False, True]


def _triton_vs(kind, n, d, causal, tq, tk, tv, flops, rng) -> dict:
    """TFLOP/s of Triton's tutorial attention on this shape's inputs (each variant autotuned, its choice
    checked against float64, then timed), or NaN and the reason it was skipped."""
    import torch

    from lib.measure.timing import time_cuda

    reason = triton_baselines.unavailable_reason()
    row = {"triton_tflops": np.nan, "triton_ws_tflops": np.nan, "triton_note": ""}
    if reason is not None:
        row["triton_note"] = f"skipped: {reason}"
        return row
    dtype = torch.float16 if kind == "fp16" else torch.bfloat16
    q, k, v = (x.view(dtype).unsqueeze(0) for x in (tq, tk, tv))
    out = torch.empty_like(q)
    notes = []
    for ws in triton_variants(causal):
        run = lambda ws=ws: triton_baselines.attention(q, k, v, out, causal, ws)  # noqa: E731
        run()                                     # autotunes this shape (first time in this process)
        config = triton_baselines.best_config("attention")
        _triton_check(kind, d, causal, ws, config, rng)
        row["triton_ws_tflops" if ws else "triton_tflops"] = round(time_cuda(run, flops=flops).tflops, 1)
        notes.append(("ws: " if ws else "") + triton_baselines.describe(config))
    row["triton_note"] = "; ".join(notes)
    return row


def record_vs_sdpa(folder, rungs=RUNGS) -> Path:
    """On the GPU, one row per shape of EXTRA_SHAPES: SDPA timed alone (its own 16-bit output, no float32
    copy: the ladder's baseline includes that copy), every rung (of `rungs`: fewer for a quick check), and
    Triton's tutorial attention (16-bit output too; kernels.triton_baselines), each checked against float64
    at CHECK_SIZE first, all in this run (flash3.vs_sdpa.csv); and what autotuning Triton cost
    (flash3.triton.csv)."""
    import pandas as pd
    import torch

    from lib.measure.results import environment
    from lib.measure.timing import time_cuda

    env, rng, rows = environment(), np.random.default_rng(7), []
    for kind, n, d, causal in EXTRA_SHAPES:
        flops = attention_flops(HEADS, n, d, causal)
        _check(kind, d, causal, None, rng)
        q, k, v = (cuda.to_device(x) for x in flash_tc.make_inputs(kind)((HEADS, n, d), rng))
        tq, tk, tv = (torch.as_tensor(x, device="cuda") for x in (q, k, v))
        sdpa = _sdpa_alone(kind, causal)
        base = time_cuda(lambda: sdpa(tq, tk, tv), flops=flops).tflops
        row = {"kind": kind, "heads": HEADS, "n": n, "d": d, "causal": causal, "sdpa_tflops": round(base, 1)}
        out = cuda.device_array((HEADS, n, d), np.float32)
        for rung in rungs:
            _check(kind, d, causal, rung, rng)
            t = time_cuda(lambda: flash3(q, k, v, out, kind, causal, rung), flops=flops).tflops
            row[f"{rung}_tflops"] = round(t, 1)
            row[f"{rung}_x_sdpa"] = round(t / base, 3)
        row.update(_triton_vs(kind, n, d, causal, tq, tk, tv, flops, rng))
        rows.append({**row, **env})
    path = Path(folder) / f"{CHAPTER}.vs_sdpa.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    triton_baselines.write_tuning(Path(folder) / f"{CHAPTER}.triton.csv", env, triton_names())
    return path


def triton_names() -> list[str]:
    """The names of the Triton attention kernels record_vs_sdpa runs."""
    return sorted({triton_baselines.attention_name(kind, causal, ws) for kind, _, _, causal in EXTRA_SHAPES
                   for ws in triton_variants(causal)})


def record_sdpa_kernels(folder) -> Path:
    """On the GPU: the CUDA kernels torch's SDPA launches for this chapter's shapes (flash3.sdpa_kernels.csv)."""
    import pandas as pd
    import torch
    from torch.profiler import ProfilerActivity, profile

    rows = []
    for kind, n, d, causal in EXTRA_SHAPES:
        if n != 4096:
            continue
        q, k, v = (torch.as_tensor(x, device="cuda") for x in flash_tc.make_inputs(kind)((HEADS, n, d),
                                                                                       np.random.default_rng(0)))
        run = _sdpa_alone(kind, causal)
        run(q, k, v)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run(q, k, v)
            torch.cuda.synchronize()
        names = sorted({e.name for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")})
        rows += [{"kind": kind, "d": d, "causal": causal, "cuda_kernel": name} for name in names]
    path = Path(folder) / f"{CHAPTER}.sdpa_kernels.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def kernel_resources(folder) -> Path:
    """On the GPU, per FP16 rung at d = 64, 128 and 128 causal (each checked first): registers, local
    bytes, SASS counts, and ptxas -v on the PTX for sm_90a: spills and the serialisation notes numba's launch
    path hides (C7510, C7513) and C7508 (flash3.kernels.csv)."""
    import shutil

    import pandas as pd

    from lib.measure.results import environment

    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    one = lambda x: next(iter(x.values())) if isinstance(x, dict) else x  # noqa: E731
    env, rng, rows = environment(), np.random.default_rng(3), []
    for d, causal in ((64, False), (128, False), (128, True)):
        for rung in RUNGS:
            _check("fp16", d, causal, rung, rng)
            fn = make_kernel(Config(d, "fp16", causal, rung))
            sass = one(fn.inspect_sass())
            ptx = one(fn.inspect_asm()).replace(".target sm_90\n", ".target sm_90a\n")
            rep = hopper.ptxas_report(ptx, ptxas)
            if not rep["ok"] and "version" in rep["error"]:
                rep = hopper.ptxas_report(ptx, ptxas, version="9.0")
            counts = hopper.sass_counts(sass)
            total = lambda prefix: sum(v for k, v in counts.items() if k.startswith(prefix))  # noqa: E731
            rows.append(dict(kernel=rung_name(rung, "fp16", causal), d=d, causal=causal,
                             registers=int(one(fn.get_regs_per_thread())),
                             local_bytes=int(one(fn.get_local_mem_per_thread())),
                             smem_bytes=Config(d, "fp16", causal, rung).smem_bytes, ptxas_registers=rep["registers"],
                             spill_bytes=rep["spill_bytes"], hidden_warnings="; ".join(rep["hidden"]) or "none",
                             hgmma=total("HGMMA"), warpgroup_arrive=total("WARPGROUP.ARRIVE"),
                             warpgroup_depbar=total("WARPGROUP.DEPBAR"), utmaldg=total("UTMALDG"),
                             mufu_ex2=sass.count("MUFU.EX2"), bar_arv=total("BAR.ARV"), **env))
    path = Path(folder) / f"{CHAPTER}.kernels.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def profiled():
    """(name, run) of what ncu profiles at PROFILE_SIZE: every FP16 rung and SDPA (alone)."""
    return [(rung_name(r, "fp16"), lambda q, k, v, out, r=r: flash3(q, k, v, out, "fp16", False, r)) for r in RUNGS] \
        + [(_sdpa_name("fp16", False), None)]


def ncu_workload():
    """Each profiled implementation once at PROFILE_SIZE after a marker kernel (run under ncu)."""
    import torch

    from kernels.matmul_profile import profile_marker_kernel

    q, k, v = (cuda.to_device(x) for x in flash_tc.make_inputs("fp16")(PROFILE_SIZE, np.random.default_rng(0)))
    out = cuda.device_array(PROFILE_SIZE, np.float32)
    tq, tk, tv = (torch.as_tensor(x, device="cuda") for x in (q, k, v))
    sdpa = _sdpa_alone("fp16", False)
    runs = [(lambda run=run: run(q, k, v, out)) if run else (lambda: sdpa(tq, tk, tv)) for _, run in profiled()]
    for run in runs:
        run()
    cuda.synchronize()
    marker = cuda.device_array(1, np.float32)
    for run in runs:
        profile_marker_kernel[1, 1](marker)
        run()
    cuda.synchronize()


def record_ncu(folder) -> Path | None:
    import pandas as pd

    from kernels.matmul_profile import by_rung
    from lib.measure.ncu import WARP_STATE, profile
    from lib.measure.results import environment

    try:
        launches, dropped, _ = profile([sys.executable, "-m", "kernels.flash3", "--ncu-workload"],
                                       WARP_STATE + NCU_EXTRA, cwd=lib.ROOT)
    except (RuntimeError, OSError) as err:
        print(f"flash3: no ncu counters recorded ({str(err)[:300]})")
        return None
    if dropped:
        print(f"flash3: this ncu does not know {dropped}; recorded without them")
    env = environment()
    rows = [{"rung": r["rung"], "kernel": r["kernel"], "launches": r["launches"], "metric": metric, "value": value,
             **env} for r in by_rung(launches, [name for name, _ in profiled()]) for metric, value in r["metrics"].items()]
    path = Path(folder) / f"{CHAPTER}.ncu.csv"
    pd.DataFrame(rows).to_csv(path, index=False, float_format="%.6g")
    return path


def record_extra(folder) -> list[Path]:
    """On the GPU: flash3.vs_sdpa.csv (with Triton's attention), flash3.triton.csv, flash3.sdpa_kernels.csv,
    flash3.kernels.csv and (with ncu) flash3.ncu.csv."""
    if lib.SIMULATOR:
        raise RuntimeError("record_extra measures the GPU: run `python -m tools.record flash3` on a GPU")
    paths = [record_vs_sdpa(folder), _results_path("triton", folder), record_sdpa_kernels(folder),
             kernel_resources(folder)]
    ncu = record_ncu(folder)
    return paths + ([ncu] if ncu else [])


if __name__ == "__main__" and sys.argv[1:] == ["--ncu-workload"]:
    ncu_workload()


# --- the recorded results as tables (for the chapter) --------------------------------------------------------
def _results_path(name, folder=None):
    return (Path(folder) if folder else lib.DATA / "results") / f"{CHAPTER}.{name}.csv"


def vs_sdpa_table(folder=None):
    """TFLOP/s of SDPA (alone, its own 16-bit output) and of each rung, with the rung's ratio to SDPA, one
    row per recorded shape (flash3.vs_sdpa.csv: all in one run, each checked against float64 first)."""
    import pandas as pd

    df = pd.read_csv(_results_path("vs_sdpa", folder))
    rows = {}
    for _, r in df.iterrows():
        row = {"SDPA": f"{r['sdpa_tflops']:.0f}"}
        for rung in RUNGS:
            row[rung] = f"{r[f'{rung}_tflops']:.0f} ({r[f'{rung}_x_sdpa']:.2f}×)"
        rows[_shape_label(r)] = row
    out = pd.DataFrame(rows).T
    out.index.name = "TFLOP/s (× SDPA)"
    return out


def _shape_label(r) -> str:
    return f"{r['kind']} {r['heads']}×{r['n']}×{r['d']}" + (" causal" if r["causal"] else "")


def vs_triton_table(folder=None):
    """Per recorded shape (flash3.vs_sdpa.csv, one run): SDPA, Triton's tutorial attention (the faster of its
    variants; × SDPA), the best rung, and the best rung's ratio to Triton. A run recorded without Triton, or
    before it was added, shows '—' (flash3.triton.csv says why)."""
    import pandas as pd

    df = pd.read_csv(_results_path("vs_sdpa", folder))
    rows = {}
    for _, r in df.iterrows():
        tri = np.nanmax([float(r.get(c, np.nan)) for c in ("triton_tflops", "triton_ws_tflops")] + [-np.inf])
        best_rung = max(RUNGS, key=lambda rung: r[f"{rung}_tflops"])
        best, base = r[f"{best_rung}_tflops"], r["sdpa_tflops"]
        rows[_shape_label(r)] = {"SDPA": f"{base:.0f}",
                                 "Triton": f"{tri:.0f} ({tri / base:.2f}×)" if np.isfinite(tri) else "—",
                                 "best rung": f"{best:.0f} {best_rung}",
                                 "÷ Triton": f"{best / tri:.2f}×" if np.isfinite(tri) else "—"}
    out = pd.DataFrame(rows).T
    out.index.name = "TFLOP/s (× SDPA)"
    return out


def triton_note(folder=None) -> str:
    """What flash3.triton.csv says about the Triton baseline of the recorded run, in lines for the page."""
    return triton_baselines.tuning_summary(_results_path("triton", folder), CHAPTER)


def sdpa_kernels(folder=None):
    """The CUDA kernels SDPA ran for each recorded shape (flash3.sdpa_kernels.csv), memsets left out."""
    import pandas as pd

    df = pd.read_csv(_results_path("sdpa_kernels", folder))
    return df[~df["cuda_kernel"].str.startswith("Memset")].reset_index(drop=True)


def resources_table(folder=None):
    """Registers, spills, ptxas's hidden serialisation notes and SASS counts of the recorded FP16 rungs."""
    import pandas as pd

    df = pd.read_csv(_results_path("kernels", folder))
    df.index = [f"{k.removeprefix('flash3_').removesuffix('_fp16').replace('_fp16', '')} d{d}" for k, d in
                zip(df["kernel"], df["d"])]
    df = df[["registers", "spill_bytes", "hidden_warnings", "hgmma", "warpgroup_arrive", "warpgroup_depbar",
             "mufu_ex2", "bar_arv"]]
    # short headers, so the table fits the page: ARRIVE/DEPBAR are WARPGROUP.ARRIVE/.DEPBAR, EX2 is MUFU.EX2,
    # "ptxas" the serialisation notes C7510/C7513/C7508 that numba hides
    return df.rename(columns={"registers": "regs", "spill_bytes": "spills", "hidden_warnings": "ptxas",
                              "warpgroup_arrive": "ARRIVE", "warpgroup_depbar": "DEPBAR",
                              "mufu_ex2": "EX2", "bar_arv": "BAR.ARV", "hgmma": "HGMMA"})


def ncu_table(folder=None):
    """Nsight Compute at PROFILE_SIZE, FP16: tensor pipe busy, issue slots busy, the XU pipe (MUFU.EX2's),
    duration and the two largest stall reasons (warp cycles per issued instruction)."""
    import pandas as pd

    from lib.measure.ncu import STALL_METRIC, STALL_REASONS

    wide = pd.read_csv(_results_path("ncu", folder)).pivot_table(index="rung", columns="metric", values="value")
    rows = {}
    for rung, r in wide.iterrows():
        stalls = {s: r.get(STALL_METRIC.format(s), 0.0) for s in STALL_REASONS if s != "selected"}
        top = sorted(stalls.items(), key=lambda kv: -kv[1])[:2]
        rows[rung] = {"tensor %": round(r.get(TENSOR_PIPE, np.nan), 1),
                      "issue %": round(r.get("smsp__issue_active.avg.pct_of_peak_sustained_active", np.nan), 1),
                      "XU (exp2) %": round(r.get("smsp__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
                                                 np.nan), 1),
                      "µs": round(r["gpu__time_duration.sum"] / 1e3, 1),
                      "top stalls": ", ".join(f"{k} {v:.2f}" for k, v in top)}
    order = [rung_name(r, "fp16") for r in RUNGS] + [_sdpa_name("fp16", False)]
    out = pd.DataFrame(rows).T.reindex([o for o in order if o in rows])
    out.index = [i.removeprefix("flash3_").removesuffix("_fp16") for i in out.index]   # ws, overlap, ...
    return out


def ladder_table(df):
    """The recorded ladders (rows of `lib.measure.results.load('flash3')`): TFLOP/s of each rung with its
    ratio to the ladder's baseline (SDPA + the copy into float32), one row per ladder and size."""
    import pandas as pd

    rows = {}
    for lad in LADDERS:
        for size in lad.sizes:
            label = lad.size_label(size)
            at = df[df["size"] == label].set_index("kernel")["value"]
            base = at.get(lad.baselines[0].name)
            row = {"SDPA + copy": "" if base is None else f"{base:.0f}"}
            for r in lad.rungs:
                v = at.get(r.name)
                row[r.name.split("_")[1]] = "" if v is None or base is None else f"{v:.0f} ({v / base:.2f}×)"
            rows[f"{lad.topic} {label}"] = row
    out = pd.DataFrame(rows).T
    out.index.name = "TFLOP/s (× SDPA + copy)"
    return out
