"""Known-wrong answers to the FlashAttention-3 page's exercise pv_tile(p, v, out): out[t] = P[t] @ v[t], P
handed over in the accumulator layout of an m64n64 wgmma (p[t, tid, i] is register i of thread tid), one
warpgroup per tile, P converted in registers into the A operand of four RS-wgmma m64n64k16 (FP16) with V
stored MN-major (128B swizzle) for the transposed-B form.

Every mistake here is a permutation of where values go, so its model is exact: the A operand the tensor core
sees is built from the pairs of accumulator registers the mistake packs (:func:`_a_matrix`, through
lib.runtime.hopper's a_fragment_element), V from the shared-memory image the mistake writes as the
descriptor reads it (:func:`_v_matrix`), both rounded to FP16, then multiplied in float64.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from lib.grading.variants._common import Variant
from lib.runtime import hopper

RIGHT, HALVES_SWAPPED, ROWS_FOR_COLUMNS, PAIRS_8_APART, NOT_SWIZZLED = range(5)
TILE = 64
SMEM = TILE * TILE + 512          # V as 16-bit values + 1 KB of slack to reach a 1024-byte boundary


def _pairs(mistake):
    """[(lo, hi)] * 4: the accumulator registers a kernel with `mistake` packs into A registers 0-3 of k-slice
    0 (slice j adds 8j)."""
    right = hopper.acc_to_a_registers(0)
    if mistake == HALVES_SWAPPED:
        return [(hi, lo) for lo, hi in right]
    if mistake == ROWS_FOR_COLUMNS:                    # registers 1 and 2 exchanged
        return [right[0], right[2], right[1], right[3]]
    if mistake == PAIRS_8_APART:                       # (2r, 2r + 4)-style pairs: as if a pair spanned 8 columns
        return [(0, 4), (2, 6), (1, 5), (3, 7)]
    return right


@cuda.jit
def pv_tile_switches(p, v, out, mistake):
    """out[t] = P[t] @ v[t] with one warpgroup per tile (block t, 128 threads), or with one mistake: the halves
    of each A register exchanged (HALVES_SWAPPED), A registers 1 and 2 exchanged (ROWS_FOR_COLUMNS), pairs of
    accumulator registers 4 apart (PAIRS_8_APART), V written without the 128B swizzle (NOT_SWIZZLED)."""
    sm = cuda.shared.array(SMEM, np.uint16)
    t = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    base = hopper.smem_u32(sm)
    pad = ((1024 - (base & 1023)) & 1023) // 2
    for e in range(tid, TILE * TILE, 128):
        k, n = e // TILE, e % TILE
        byte = k * 128 + n * 2
        if mistake != NOT_SWIZZLED:
            byte ^= ((byte >> 7) & 7) << 4
        sm[pad + byte // 2] = hopper.pack_f16x2(v[t, k, n], 0.0) & 0xFFFF
    hopper.fence_proxy_async()
    cuda.syncthreads()
    acc = hopper.zeros_acc(32)
    hopper.wgmma_fence()
    for j in range(4):
        b = 8 * j
        if mistake == HALVES_SWAPPED:
            a = (hopper.pack_f16x2(p[t, tid, b + 1], p[t, tid, b]), hopper.pack_f16x2(p[t, tid, b + 3], p[t, tid, b + 2]),
                 hopper.pack_f16x2(p[t, tid, b + 5], p[t, tid, b + 4]), hopper.pack_f16x2(p[t, tid, b + 7], p[t, tid, b + 6]))
        elif mistake == ROWS_FOR_COLUMNS:
            a = (hopper.pack_f16x2(p[t, tid, b], p[t, tid, b + 1]), hopper.pack_f16x2(p[t, tid, b + 4], p[t, tid, b + 5]),
                 hopper.pack_f16x2(p[t, tid, b + 2], p[t, tid, b + 3]), hopper.pack_f16x2(p[t, tid, b + 6], p[t, tid, b + 7]))
        elif mistake == PAIRS_8_APART:
            a = (hopper.pack_f16x2(p[t, tid, b], p[t, tid, b + 4]), hopper.pack_f16x2(p[t, tid, b + 2], p[t, tid, b + 6]),
                 hopper.pack_f16x2(p[t, tid, b + 1], p[t, tid, b + 5]), hopper.pack_f16x2(p[t, tid, b + 3], p[t, tid, b + 7]))
        else:
            a = (hopper.pack_f16x2(p[t, tid, b], p[t, tid, b + 1]), hopper.pack_f16x2(p[t, tid, b + 2], p[t, tid, b + 3]),
                 hopper.pack_f16x2(p[t, tid, b + 4], p[t, tid, b + 5]), hopper.pack_f16x2(p[t, tid, b + 6], p[t, tid, b + 7]))
        acc = hopper.wgmma_rs_m64n64k16_f16_tb(a, hopper.make_desc(base + 2 * pad + 2048 * j, 8192, 1024, 1), acc)
    hopper.wgmma_commit()
    hopper.wgmma_wait(0)
    lane, warp = tid % 32, tid // 32
    hopper.store_acc(out[t], acc, 16 * warp + lane // 4, 2 * (lane % 4))


def _pv_tile(mistake):
    def pv_tile(p, v, out):
        pv_tile_switches[p.shape[0], 128](p, v, out, mistake)
    return pv_tile


def _f16(x):
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float64)


def _a_matrix(p, mistake):
    """(T, 64, 64): the A operand the tensor core sees when the kernel packs _pairs(mistake)."""
    tiles = p.shape[0]
    a = np.zeros((tiles, TILE, TILE))
    pf = _f16(p)
    for tid in range(128):
        for j in range(4):
            for r, pair in enumerate(_pairs(mistake)):
                for h in (0, 1):
                    row, col = hopper.a_fragment_element(tid, r, h)
                    a[:, row, 16 * j + col] = pf[:, tid, 8 * j + pair[h]]
    return a


def _v_matrix(v, mistake):
    """(T, 64, 64): V as the transposed-B wgmma reads it from the image the kernel wrote."""
    vf = _f16(v)
    if mistake != NOT_SWIZZLED:
        return vf
    k, n = np.meshgrid(np.arange(TILE), np.arange(TILE), indexing="ij")
    read = hopper.swizzle(k * 128 + n * 2, "128B") // 2            # the element the descriptor reads at (k, n)
    flat = vf.reshape(vf.shape[0], -1)
    return flat[:, read.reshape(-1)].reshape(vf.shape)


def _model(mistake):
    def model(p, v, launches, fill=np.nan):
        return _a_matrix(p, mistake) @ _v_matrix(v, mistake)
    return model


VARIANTS = {
    "pv_tile": [
        Variant("halves swapped",
                "the two values of each A register are the wrong way round: pack_f16x2(lo, hi) puts its first "
                "argument in the low half, and the low half is the even column (accumulator register 2i, then 2i + 1)",
                _model(HALVES_SWAPPED), _pv_tile(HALVES_SWAPPED)),
        Variant("A registers 1 and 2 exchanged",
                "the A registers 1 and 2 are exchanged: register 1 holds row g + 8 (accumulator registers 8j + 2, "
                "8j + 3) and register 2 the columns 8 to the right in row g (8j + 4, 8j + 5)",
                _model(ROWS_FOR_COLUMNS), _pv_tile(ROWS_FOR_COLUMNS)),
        Variant("pairs 4 registers apart",
                "each A register was packed from accumulator registers 4 apart (8 columns apart): a register "
                "holds two neighbouring columns, accumulator registers 8j + 2r and 8j + 2r + 1 "
                "(hopper.acc_to_a_registers)",
                _model(PAIRS_8_APART), _pv_tile(PAIRS_8_APART)),
        Variant("V not swizzled",
                "the V tile was written row after row without the 128B swizzle, but the descriptor says 128B: the "
                "16-byte chunk c of row k belongs at chunk c XOR (k % 8) (hopper.swizzle)",
                _model(NOT_SWIZZLED), _pv_tile(NOT_SWIZZLED)),
    ],
}
