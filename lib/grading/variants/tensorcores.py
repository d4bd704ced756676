"""Known-wrong answers to the tensor-cores chapter's exercise mma_tile(a, b, out), out[t] = a[t] @ b[t].T: one
warp per 16×8 tile of out, one ``mma.sync.m16n8k8`` (TF32) each, with the fragments loaded or stored in a
wrong layout.

A model follows the values lane by lane: slot i of lane L is where the kernel put a[student's (row, col)], and
the tensor core reads that slot as element LAYOUTS(L, i) of its A (likewise B); the product's slot i of lane L
is element LAYOUTS_C(L, i), which the kernel stores at its own (row, col) of out. So any layout mistake has an
exact model (up to the float32 accumulation), computed from lib.runtime.mma's one table of layouts.
"""
from __future__ import annotations

import numpy as np
from numba import cuda, float32

from lib.runtime import mma
from lib.grading.variants._common import Variant, unwritten, widest

WARP = 32
WARPS_PER_BLOCK = 4
SHAPE = "m16n8k8.tf32"
RIGHT, A_AS_C, GROUPS_OF_8, C_ROWS_SWAPPED, B_NOT_TRANSPOSED, TILE_FROM_THREAD = range(6)


@cuda.jit
def mma_tile_switches(a, b, out, mistake):
    """out[t] = a[t] @ b[t].T with one warp per tile and one TF32 mma.sync, the fragments addressed with
    g = lane >> 2 and t = lane & 3 as the PTX ISA lays them out, or with one mistake: A loaded in the C
    layout (A_AS_C), g = lane % 8 and t = lane // 8 everywhere (GROUPS_OF_8), the two row halves of C
    stored the other way round (C_ROWS_SWAPPED), B's fragment read from b as if b were B (B_NOT_TRANSPOSED),
    the tile numbered from the thread index alone (TILE_FROM_THREAD).

    Memory: each lane reads 4 floats of A and 2 of B and writes 4 of out (scattered; a tile is 768 bytes).
    Launch: 1-D, WARPS_PER_BLOCK warps per block, one warp per tile (a warp past the last tile returns as a
    whole, so the mma's lanes stay together).
    """
    tile = cuda.grid(1) // WARP
    if mistake == TILE_FROM_THREAD:
        tile = cuda.threadIdx.x // WARP
    if tile >= a.shape[0]:
        return
    lane = cuda.threadIdx.x % WARP
    g, t = lane >> 2, lane & 3
    if mistake == GROUPS_OF_8:
        g, t = lane % 8, lane // 8
    if mistake == A_AS_C:
        a0, a1, a2, a3 = a[tile, g, 2 * t], a[tile, g, 2 * t + 1], a[tile, g + 8, 2 * t], a[tile, g + 8, 2 * t + 1]
    else:
        a0, a1, a2, a3 = a[tile, g, t], a[tile, g + 8, t], a[tile, g, t + 4], a[tile, g + 8, t + 4]
    if mistake == B_NOT_TRANSPOSED:
        b0, b1 = b[tile, t, g], b[tile, t + 4, g]
    else:  # B[k, n] = b[n, k]: the column operand's b_i = B[t + 4i, g] is b[g, t + 4i]
        b0, b1 = b[tile, g, t], b[tile, g, t + 4]
    zero = float32(0.0)
    d0, d1, d2, d3 = mma.mma_m16n8k8_tf32(a0, a1, a2, a3, b0, b1, zero, zero, zero, zero)
    top, bottom = (g + 8, g) if mistake == C_ROWS_SWAPPED else (g, g + 8)
    out[tile, top, 2 * t] = d0
    out[tile, top, 2 * t + 1] = d1
    out[tile, bottom, 2 * t] = d2
    out[tile, bottom, 2 * t + 1] = d3


def _mma_tile(mistake):
    def fn(a, b, out):
        threads = WARPS_PER_BLOCK * WARP
        mma_tile_switches[(a.shape[0] + WARPS_PER_BLOCK - 1) // WARPS_PER_BLOCK, threads](a, b, out, mistake)
    return fn


# where the kernel reads (a, b) or writes (out) element i of lane L's fragment, for each mistake
def _ids(lane, mistake):
    return (lane % 8, lane // 8) if mistake == GROUPS_OF_8 else (lane >> 2, lane & 3)


def _a_at(lane, i, mistake):
    g, t = _ids(lane, mistake)
    if mistake == A_AS_C:
        return g + 8 * (i >> 1), 2 * t + (i & 1)
    return g + 8 * (i & 1), t + 4 * (i >> 1)


def _b_at(lane, i, mistake):
    g, t = _ids(lane, mistake)
    return (t + 4 * i, g) if mistake == B_NOT_TRANSPOSED else (g, t + 4 * i)


def _c_at(lane, i, mistake):
    g, t = _ids(lane, mistake)
    half = 1 - (i >> 1) if mistake == C_ROWS_SWAPPED else i >> 1
    return g + 8 * half, 2 * t + (i & 1)


def _fragment_model(a, b, mistake, fill=np.nan, tiles=None):
    """What the kernel with `mistake` writes: the tensor core's A and B are gathered from the slots the kernel
    filled, rounded to TF32, multiplied in float64, and scattered to where the kernel stores each slot; tiles
    from `tiles` on are never written."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    count = a.shape[0] if tiles is None else min(tiles, a.shape[0])
    seen_a, seen_b = np.empty((count, 16, 8), np.float32), np.empty((count, 8, 8), np.float32)
    layout = {op: mma.LAYOUTS[(SHAPE, op)][3] for op in "ABC"}
    for lane in range(WARP):
        for i in range(4):
            seen_a[(slice(None),) + layout["A"](lane, i)] = a[(slice(None, count),) + _a_at(lane, i, mistake)]
        for i in range(2):
            seen_b[(slice(None),) + layout["B"](lane, i)] = b[(slice(None, count),) + _b_at(lane, i, mistake)]
    d = mma.round_tf32(seen_a).astype(np.float64) @ mma.round_tf32(seen_b).astype(np.float64)
    out = unwritten((a.shape[0], 16, 8), fill)
    for lane in range(WARP):
        for i in range(4):
            out[(slice(None, count),) + _c_at(lane, i, mistake)] = d[(slice(None),) + layout["C"](lane, i)]
    return out


def _first_block_tiles(a, b, launches, fill=np.nan):
    """Every block computes tiles 0 .. warps per block - 1 (the same ones): the rest are never written."""
    gb = widest(launches)
    if gb is None:
        return None
    return _fragment_model(a, b, RIGHT, fill, tiles=int(np.prod(gb[1])) // WARP)


VARIANTS = {
    "mma_tile": [
        Variant("A loaded in the C layout",
                "the A fragment was loaded with the accumulator's layout ((g, 2t), (g, 2t + 1), ...): A has its "
                "own, a_i = A[g + 8·(i & 1), t + 4·(i >> 1)] (a0 = A[g, t], a1 = A[g + 8, t], a2 = A[g, t + 4], "
                "a3 = A[g + 8, t + 4])",
                lambda a, b, launches, fill=np.nan: _fragment_model(a, b, A_AS_C, fill), _mma_tile(A_AS_C)),
        Variant("groups of 8 lanes",
                "the lanes were grouped the wrong way (g = lane % 8, t = lane // 8): the PTX layouts use groups "
                "of four consecutive lanes, g = lane >> 2 (the group, 0..7) and t = lane & 3 (the place in it)",
                lambda a, b, launches, fill=np.nan: _fragment_model(a, b, GROUPS_OF_8, fill),
                _mma_tile(GROUPS_OF_8)),
        Variant("C rows swapped",
                "rows r and r + 8 of each tile are exchanged: d0 and d1 belong to row g, d2 and d3 to row g + 8",
                lambda a, b, launches, fill=np.nan: _fragment_model(a, b, C_ROWS_SWAPPED, fill),
                _mma_tile(C_ROWS_SWAPPED)),
        Variant("b used as B",
                "you computed a @ b, not a @ b.T: the B operand is b transposed, B[k, n] = b[n, k], so its "
                "fragment b0 = B[t, g], b1 = B[t + 4, g] is read as b[g, t] and b[g, t + 4] (each lane reads "
                "along a row of b, as the page's kernel reads down a column of its B)",
                lambda a, b, launches, fill=np.nan: _fragment_model(a, b, B_NOT_TRANSPOSED, fill),
                _mma_tile(B_NOT_TRANSPOSED)),
        Variant("tile from threadIdx alone",
                "only the first tiles were written (every block computed the same ones): number the tiles "
                "across the grid, cuda.grid(1) // 32",
                _first_block_tiles, _mma_tile(TILE_FROM_THREAD)),
    ],
}
