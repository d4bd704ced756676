"""Kernels of the memory chapter: a pointer chase (the latency of each level of the hierarchy), strided and
misaligned copies (global memory in 32-byte sectors), a copy with four floats per thread, and the transpose
ladder (naive, shared tile, padded tile, XOR-swizzled tile) that is the classic bank-conflict lesson.

`record_extra` records what is not a timed ladder: the latency ladder, and (where Nsight Compute is
installed) the hardware's counts of shared-memory wavefronts and global sectors beside the model's.

Where the rest lives: chapters/memory.md (the page); lib/grading/variants/memory.py (its exercises'
known-wrong variants); tests/test_memory.py (tests); data/results/memory.* (recorded on the H200). Record it
with ``python -m tools.record memory`` on a GPU; on the simulator the same kernels run through the page's
checks and the tests.
"""
from __future__ import annotations

import csv
import functools
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from numba import cuda, float32, float64

from lib.runtime.vector import data_address, load_float4, store_float4
from kernels.intro import blocks_for
from lib.measure.ncu import parse_csv
from lib.measure.bench import Baseline, Ladder, Rung, copy_ceiling
from lib.runtime.quiet_launches import quiet_kernels
from lib.runtime.validate import require
from lib.hw.banks import conflict_report

CHAPTER = "memory"
THREADS = 256         # threads per block of the 1-D kernels: 8 warps
TILE = 32             # transpose tile: 32 x 32 floats, one warp wide
TILE_PADDED = TILE + 1  # a padded tile row; a named constant because numba wants literal shared-array shapes
BLOCK_ROWS = 8        # a transpose block is TILE x BLOCK_ROWS threads; each thread moves TILE / BLOCK_ROWS floats
VECTOR = 4            # floats per thread in copy_four_per_thread_kernel (16 bytes, one float32x4's worth)
SECTOR_BYTES = 32     # global memory moves in 32-byte sectors
TILE_ITEMS = TILE // BLOCK_ROWS  # floats each thread moves through a tile (4)
WIDE = 2 * TILE       # transpose_wide_kernel's tile: 64 x 64 floats, two warp-widths wide
WIDE_PADDED = WIDE + 1
WIDE_COLS = WIDE // TILE          # columns each thread moves per tile row (2)
WIDE_ROWS = WIDE // BLOCK_ROWS    # rows each thread moves per column (8)
WIDE_ITEMS = WIDE_COLS * WIDE_ROWS  # floats each thread moves through the tile (16)
TILE_THREADS = TILE * BLOCK_ROWS    # threads of a transpose block (256)
WIDE_QUADS = WIDE // VECTOR         # float4s in a row of a 64 x 64 tile (16)
QUAD_ROWS = TILE_THREADS // WIDE_QUADS  # tile rows one pass of a block's float4 loads covers (16)
QUAD_ITEMS = WIDE // QUAD_ROWS      # float4s each thread moves through the tile (4: 16 floats)
assert TILE % BLOCK_ROWS == 0 and TILE == 32, "the tile is one warp wide and split evenly between thread rows"


# --- latency: one thread chasing pointers --------------------------------------------------------------
@cuda.jit
def pointer_chase_kernel(next_index, steps, last):
    """Follow next_index from element 0 for `steps` loads; store where the chase ended.

    Memory: one thread, one 4-byte load at a time, and each load's address is the previous load's value,
    so no two loads overlap: the kernel's time is `steps` times the latency of whatever level of the
    hierarchy holds next_index (a random cycle defeats every prefetcher and spreads loads over all lines).
    Launch: one block of one thread.
    """
    j = 0
    for _ in range(steps):
        j = next_index[j]
    last[0] = j


@cuda.jit
def touch_kernel(x, flag):
    """Read every element of x once (coalesced, grid-stride), so the next kernel finds it in L2 if it fits.

    Memory: 4·n bytes read, every warp on 128 consecutive bytes; writes nothing unless an element is
    below -1 (never, for a chase array, whose off-cycle elements hold -1): the compiler cannot drop the
    loads.
    Launch: 1-D, THREADS per block, any number of blocks.
    """
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        if x[i] < -1:
            flag[0] = 1


def random_cycle(n: int, rng: np.random.Generator, spacing: int = 1) -> np.ndarray:
    """int32 next-index array of n elements whose pointers form one random cycle through the elements
    0, spacing, 2·spacing, ... (every element when spacing is 1; one per 128-byte cache line when it is
    LINE_INTS, so that no two loads of the chase share a line). Elements off the cycle hold -1."""
    if spacing < 1 or n < spacing:
        raise ValueError(f"random_cycle: need 1 <= spacing <= n, got n={n}, spacing={spacing}")
    order = rng.permutation(n // spacing) * spacing
    next_index = np.full(n, -1, dtype=np.int32)
    next_index[order] = np.roll(order, -1)
    return next_index


def chase_on_host(next_index: np.ndarray, steps: int) -> int:
    """Where `steps` loads from element 0 end: the reference the kernel's `last` is checked against."""
    j = 0
    for _ in range(steps):
        j = int(next_index[j])
    return j


def pointer_chase(next_index, steps: int, last):
    """Launch pointer_chase_kernel (one thread)."""
    require(next_index, "next_index", dtype=np.int32, ndim=1, where="pointer_chase")
    require(last, "last", dtype=np.int32, shape=(1,), where="pointer_chase")
    pointer_chase_kernel[1, 1](next_index, steps, last)


# --- global memory: sectors -----------------------------------------------------------------------------
@cuda.jit
def copy_strided_kernel(src, dst, stride, offset):
    """dst[i] = src[offset + i * stride].

    Memory: the writes are coalesced (4·n bytes). A warp's 32 reads span 128·stride bytes: at stride 1 and
    offset 0 four 32-byte sectors, at stride s ≥ 8 one sector per lane (32 sectors, 8× the bytes used);
    an offset that is not a multiple of 8 floats makes the warp straddle one more sector.
    Launch: 1-D, THREADS per block, ceil(n / THREADS) blocks for n = dst.size.
    """
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] = src[offset + i * stride]


@cuda.jit
def copy_four_per_thread_kernel(src, dst):
    """dst = src, each thread moving four consecutive floats (the ragged tail one by one).

    Memory: 8·n bytes, as any copy. Each thread issues four independent loads before its stores, so a warp
    keeps 4× the bytes in flight per instruction issued; numba has no pointer cast to request one 16-byte
    load (a float32x4 is a value, not a view of an array), so these are four 4-byte loads unless ptxas
    merges them — the recorded SASS says which.
    Launch: 1-D, THREADS per block, ceil(n / (VECTOR·THREADS)) blocks.
    """
    base = cuda.grid(1) * VECTOR
    if base + VECTOR <= src.size:
        a = src[base]
        b = src[base + 1]
        c = src[base + 2]
        d = src[base + 3]
        dst[base] = a
        dst[base + 1] = b
        dst[base + 2] = c
        dst[base + 3] = d
    else:
        for i in range(base, src.size):
            dst[i] = src[i]


def copy_strided(src, dst, stride: int = 1, offset: int = 0):
    """Launch copy_strided_kernel: dst[i] = src[offset + i * stride] for every i of dst."""
    require(src, "src", ndim=1, where="copy_strided")
    require(dst, "dst", ndim=1, where="copy_strided")
    if stride < 1 or offset < 0:
        raise ValueError(f"copy_strided: stride must be >= 1 and offset >= 0, got {stride} and {offset}")
    if dst.size and offset + (dst.size - 1) * stride >= src.size:
        raise ValueError(f"copy_strided: src has {src.size} elements; {dst.size} at stride {stride} from "
                         f"offset {offset} need {offset + (dst.size - 1) * stride + 1}")
    if dst.size:
        copy_strided_kernel[blocks_for(dst.size), THREADS](src, dst, stride, offset)


def copy_four_per_thread(src, dst):
    """Launch copy_four_per_thread_kernel over float32 arrays of equal size."""
    require(src, "src", ndim=1, where="copy_four_per_thread")
    require(dst, "dst", shape=src.shape, where="copy_four_per_thread")
    if src.size:
        copy_four_per_thread_kernel[blocks_for(src.size, VECTOR * THREADS), THREADS](src, dst)


def sectors_per_request(stride: int, offset: int = 0, element_bytes: int = 4) -> int:
    """32-byte sectors one warp's load touches when lane i reads element offset + i * stride (the array
    starting on a sector boundary, as every CUDA allocation does)."""
    return len({(offset + lane * stride) * element_bytes // SECTOR_BYTES for lane in range(32)})


# --- shared memory: the transpose ladder -----------------------------------------------------------------
@cuda.jit
def transpose_naive_kernel(a, out):
    """out[c, r] = a[r, c], one element per thread, no shared memory.

    Memory: 8·rows·cols bytes. The reads are coalesced (a warp reads 32 consecutive floats of a row), the
    writes are not: the warp's 32 stores go to 32 different rows of out, 32 sectors for 128 useful bytes.
    Launch: 2-D, blocks of TILE x BLOCK_ROWS threads, grid ceil(cols / TILE) x ceil(rows / BLOCK_ROWS);
    x runs along the columns of a.
    """
    c, r = cuda.grid(2)
    if r < a.shape[0] and c < a.shape[1]:
        out[c, r] = a[r, c]


@cuda.jit
def transpose_tiled_kernel(a, out):
    """out = a.T through a TILE x TILE shared tile, so that both the reads and the writes are coalesced.

    Memory: 8·rows·cols bytes, all in full 128-byte rows. Shared: the tile is written along rows (lane =
    column: conflict-free) and read along columns: the 32 lanes read words 32 apart, all in one bank — a
    32-way conflict, 32 wavefronts per read.
    Launch: 2-D, blocks of TILE x BLOCK_ROWS threads, grid ceil(cols / TILE) x ceil(rows / TILE); each
    thread moves TILE / BLOCK_ROWS elements.
    """
    tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    c = cuda.blockIdx.x * TILE + tx
    for k in range(0, TILE, BLOCK_ROWS):
        r = cuda.blockIdx.y * TILE + ty + k
        if r < a.shape[0] and c < a.shape[1]:
            tile[ty + k, tx] = a[r, c]
    cuda.syncthreads()
    out_c = cuda.blockIdx.y * TILE + tx
    for k in range(0, TILE, BLOCK_ROWS):
        out_r = cuda.blockIdx.x * TILE + ty + k
        if out_r < out.shape[0] and out_c < out.shape[1]:
            out[out_r, out_c] = tile[tx, ty + k]


@cuda.jit
def transpose_padded_kernel(a, out):
    """transpose_tiled_kernel with each tile row padded by one float (TILE + 1 words).

    Memory: as transpose_tiled_kernel in global memory. Shared: a column read now steps 33 words per lane,
    and 33 mod 32 = 1, so the 32 lanes land in 32 different banks: one wavefront, no conflict, for 4 bytes
    of padding per row (3% more shared memory).
    Launch: as transpose_tiled_kernel.
    """
    tile = cuda.shared.array((TILE, TILE_PADDED), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    c = cuda.blockIdx.x * TILE + tx
    for k in range(0, TILE, BLOCK_ROWS):
        r = cuda.blockIdx.y * TILE + ty + k
        if r < a.shape[0] and c < a.shape[1]:
            tile[ty + k, tx] = a[r, c]
    cuda.syncthreads()
    out_c = cuda.blockIdx.y * TILE + tx
    for k in range(0, TILE, BLOCK_ROWS):
        out_r = cuda.blockIdx.x * TILE + ty + k
        if out_r < out.shape[0] and out_c < out.shape[1]:
            out[out_r, out_c] = tile[tx, ty + k]


@cuda.jit
def transpose_swizzled_kernel(a, out):
    """transpose_tiled_kernel with an XOR-swizzled tile: element (r, c) is stored at column c ^ r.

    Memory: as transpose_tiled_kernel in global memory. Shared: a row write puts lane c in bank c ^ r and
    a column read puts lane r in bank c ^ r; XOR with a fixed number is a permutation of 0..31, so both are
    conflict-free with no padding (the layout tensor-core kernels and TMA use, where padding is not allowed).
    Launch: as transpose_tiled_kernel.
    """
    tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    c = cuda.blockIdx.x * TILE + tx
    for k in range(0, TILE, BLOCK_ROWS):
        r = cuda.blockIdx.y * TILE + ty + k
        if r < a.shape[0] and c < a.shape[1]:
            tile[ty + k, tx ^ (ty + k)] = a[r, c]
    cuda.syncthreads()
    out_c = cuda.blockIdx.y * TILE + tx
    for k in range(0, TILE, BLOCK_ROWS):
        out_r = cuda.blockIdx.x * TILE + ty + k
        if out_r < out.shape[0] and out_c < out.shape[1]:
            out[out_r, out_c] = tile[tx, (ty + k) ^ tx]


@cuda.jit
def transpose_batched_kernel(a, out):
    """transpose_padded_kernel with every load issued before the first store: each thread reads its
    TILE_ITEMS floats of `a` into registers, then writes them to the tile; after the barrier it reads its
    TILE_ITEMS floats of the tile, then stores them to `out`.

    Memory: as transpose_padded_kernel, but each thread has TILE_ITEMS global loads in flight instead of
    one. In the padded kernel a load is followed by a shared store that the compiler cannot prove to be
    independent of the next load (numba's arrays are generic pointers, which may alias), so each load
    waits for the one before it; here the loads have nothing between them.
    Launch: as transpose_tiled_kernel.
    """
    tile = cuda.shared.array((TILE, TILE_PADDED), float32)
    held = cuda.local.array(TILE_ITEMS, float32)    # registers: constant trip counts unroll
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    rows, cols = a.shape
    c = cuda.blockIdx.x * TILE + tx
    for k in range(TILE_ITEMS):
        r = cuda.blockIdx.y * TILE + ty + k * BLOCK_ROWS
        held[k] = a[r, c] if r < rows and c < cols else float32(0)
    for k in range(TILE_ITEMS):
        tile[ty + k * BLOCK_ROWS, tx] = held[k]
    cuda.syncthreads()
    for k in range(TILE_ITEMS):
        held[k] = tile[tx, ty + k * BLOCK_ROWS]
    out_c = cuda.blockIdx.y * TILE + tx
    for k in range(TILE_ITEMS):
        out_r = cuda.blockIdx.x * TILE + ty + k * BLOCK_ROWS
        if out_r < cols and out_c < rows:
            out[out_r, out_c] = held[k]


@cuda.jit
def transpose_wide_kernel(a, out):
    """transpose_batched_kernel with a 64 x 64 tile (16 floats per thread, all loads issued before any
    store) and, for the tiles that lie wholly inside the matrix — all but the last row and column of
    tiles — no bounds test on any access.

    Memory: per warp request as transpose_padded_kernel: 128-byte coalesced rows of `a` and `out`, and a
    padded tile (65 words per row) on which both the row stores and the column loads are conflict-free
    (lane i's column word is i·65 + c, bank (i + c) mod 32). Each thread keeps 16 global loads in flight —
    sixteen times as many as transpose_padded_kernel, and a block moves 32 KiB instead of 8 KiB between
    two barriers. Shared memory: 64·65·4 = 16.6 KB per block.
    Launch: 2-D blocks of TILE x BLOCK_ROWS threads (256), grid (ceil(cols / 64), ceil(rows / 64)).
    """
    tile = cuda.shared.array((WIDE, WIDE_PADDED), float32)
    held = cuda.local.array(WIDE_ITEMS, float32)    # registers: constant trip counts unroll
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    rows, cols = a.shape
    r0 = cuda.blockIdx.y * WIDE
    c0 = cuda.blockIdx.x * WIDE
    inside = r0 + WIDE <= rows and c0 + WIDE <= cols
    if inside:
        for j in range(WIDE_COLS):
            for k in range(WIDE_ROWS):
                held[j * WIDE_ROWS + k] = a[r0 + ty + k * BLOCK_ROWS, c0 + tx + j * TILE]
    else:
        for j in range(WIDE_COLS):
            c = c0 + tx + j * TILE
            for k in range(WIDE_ROWS):
                r = r0 + ty + k * BLOCK_ROWS
                held[j * WIDE_ROWS + k] = a[r, c] if r < rows and c < cols else float32(0)
    for j in range(WIDE_COLS):
        for k in range(WIDE_ROWS):
            tile[ty + k * BLOCK_ROWS, tx + j * TILE] = held[j * WIDE_ROWS + k]
    cuda.syncthreads()
    for j in range(WIDE_COLS):
        for k in range(WIDE_ROWS):
            held[j * WIDE_ROWS + k] = tile[tx + j * TILE, ty + k * BLOCK_ROWS]
    if inside:
        for j in range(WIDE_COLS):
            for k in range(WIDE_ROWS):
                out[c0 + ty + k * BLOCK_ROWS, r0 + tx + j * TILE] = held[j * WIDE_ROWS + k]
    else:
        for j in range(WIDE_COLS):
            out_c = r0 + tx + j * TILE
            for k in range(WIDE_ROWS):
                out_r = c0 + ty + k * BLOCK_ROWS
                if out_r < cols and out_c < rows:
                    out[out_r, out_c] = held[j * WIDE_ROWS + k]


@cuda.jit
def transpose_vector_kernel(a, out, rows, cols):
    """transpose_wide_kernel's 64 x 64 tile moved through global memory 16 bytes at a time: each thread
    loads four float4s (four neighbouring floats of a tile row each), and after the barrier gathers four
    neighbouring floats of a tile column — four consecutive floats of an output row — into each of its
    four float4 stores.

    Memory: the same bytes and the same 128-byte-aligned rows of `a` and `out` per warp as
    transpose_wide_kernel (a warp's float4 access covers two 256-byte tile rows), but with a quarter of
    the global load and store instructions (4 LDG.E.128 + 4 STG.E.128 instead of 16 + 16) and a quarter
    of their address arithmetic; a thread still has 64 bytes of loads in flight. Shared: the padded tile
    of transpose_wide_kernel; a warp's scalar store of element i of its float4s hits lanes 4q + i (16
    lanes of a tile row) and the next row: 2-way bank conflicts on the tile, which has bandwidth to
    spare. Border tiles (not wholly inside) move float by float with bounds tests, as before.
    a and out are the matrices flattened (1-D views), starting on 16-byte boundaries; rows and cols are
    multiples of 4 so every float4 starts on a 16-byte boundary.
    Launch: 1-D blocks of TILE_THREADS threads, grid (ceil(cols / 64), ceil(rows / 64)).
    """
    tile = cuda.shared.array((WIDE, WIDE_PADDED), float32)
    held = cuda.local.array(WIDE_ITEMS, float32)    # registers: constant trip counts unroll
    q = cuda.threadIdx.x % WIDE_QUADS               # this thread's float4 within a tile row
    t_row = cuda.threadIdx.x // WIDE_QUADS          # its first tile row; then + QUAD_ROWS each
    r0 = cuda.blockIdx.y * WIDE
    c0 = cuda.blockIdx.x * WIDE
    inside = r0 + WIDE <= rows and c0 + WIDE <= cols
    if inside:
        first = ((r0 + t_row) * cols + c0) // VECTOR + q   # quad index; each next row is cols / 4 further
        for k in range(QUAD_ITEMS):
            v0, v1, v2, v3 = load_float4(a, first + k * (QUAD_ROWS * cols // VECTOR))
            held[4 * k], held[4 * k + 1], held[4 * k + 2], held[4 * k + 3] = v0, v1, v2, v3
    else:
        for k in range(QUAD_ITEMS):
            r = r0 + t_row + k * QUAD_ROWS
            for i in range(VECTOR):
                c = c0 + VECTOR * q + i
                held[4 * k + i] = a[r * cols + c] if r < rows and c < cols else float32(0)
    for k in range(QUAD_ITEMS):
        for i in range(VECTOR):
            tile[t_row + k * QUAD_ROWS, VECTOR * q + i] = held[4 * k + i]
    cuda.syncthreads()
    for k in range(QUAD_ITEMS):                     # output row c0 + t_row + k·QUAD_ROWS = tile column
        for i in range(VECTOR):
            held[4 * k + i] = tile[VECTOR * q + i, t_row + k * QUAD_ROWS]
    if inside:
        first = ((c0 + t_row) * rows + r0) // VECTOR + q
        for k in range(QUAD_ITEMS):
            store_float4(out, first + k * (QUAD_ROWS * rows // VECTOR),
                         held[4 * k], held[4 * k + 1], held[4 * k + 2], held[4 * k + 3])
    else:
        for k in range(QUAD_ITEMS):
            out_r = c0 + t_row + k * QUAD_ROWS
            for i in range(VECTOR):
                out_c = r0 + VECTOR * q + i
                if out_r < cols and out_c < rows:
                    out[out_r * rows + out_c] = held[4 * k + i]


def _transpose_args(a, out, where):
    require(a, "a", ndim=2, where=where)
    require(out, "out", shape=tuple(a.shape[::-1]), where=where)
    return a.shape


def transpose_naive(a, out):
    """out = a.T with transpose_naive_kernel."""
    rows, cols = _transpose_args(a, out, "transpose_naive")
    if rows and cols:
        transpose_naive_kernel[(blocks_for(cols, TILE), blocks_for(rows, BLOCK_ROWS)), (TILE, BLOCK_ROWS)](a, out)


def _launch_tiled(kernel, a, out, where):
    rows, cols = _transpose_args(a, out, where)
    if rows and cols:
        kernel[(blocks_for(cols, TILE), blocks_for(rows, TILE)), (TILE, BLOCK_ROWS)](a, out)


transpose_tiled = functools.partial(_launch_tiled, transpose_tiled_kernel, where="transpose_tiled")
transpose_padded = functools.partial(_launch_tiled, transpose_padded_kernel, where="transpose_padded")
transpose_swizzled = functools.partial(_launch_tiled, transpose_swizzled_kernel, where="transpose_swizzled")
transpose_batched = functools.partial(_launch_tiled, transpose_batched_kernel, where="transpose_batched")


def transpose_wide(a, out):
    """out = a.T with transpose_wide_kernel (64 x 64 tiles)."""
    rows, cols = _transpose_args(a, out, "transpose_wide")
    if rows and cols:
        transpose_wide_kernel[(blocks_for(cols, WIDE), blocks_for(rows, WIDE)), (TILE, BLOCK_ROWS)](a, out)


def transpose_vector(a, out):
    """out = a.T with transpose_vector_kernel (16-byte accesses); a matrix whose sides are not both
    multiples of 4, or that does not start on a 16-byte boundary, goes to transpose_wide instead."""
    rows, cols = _transpose_args(a, out, "transpose_vector")
    if not (rows and cols):
        return
    if rows % VECTOR or cols % VECTOR or data_address(a) % 16 or data_address(out) % 16:
        transpose_wide(a, out)
        return
    transpose_vector_kernel[(blocks_for(cols, WIDE), blocks_for(rows, WIDE)), TILE_THREADS](
        a.reshape(rows * cols), out.reshape(rows * cols), rows, cols)


def transpose_tile_words(kind: str) -> tuple[list[list[int]], list[list[int]]]:
    """The shared-memory word each lane of a full warp touches, per request, in one block of the tiled
    transposes: (stores, loads), each a list of TILE / BLOCK_ROWS x BLOCK_ROWS requests of 32 words. The
    index arithmetic is the kernels', for the bank-conflict model to count."""
    pitch = TILE + 1 if kind == "padded" else TILE
    swizzle = kind == "swizzled"
    if kind not in ("tiled", "padded", "swizzled"):
        raise ValueError(f"kind must be tiled, padded or swizzled, got {kind!r}")
    stores, loads = [], []
    for ty in range(BLOCK_ROWS):        # warp ty of the block: threadIdx.y = ty, lanes are threadIdx.x
        for k in range(0, TILE, BLOCK_ROWS):
            row = ty + k
            stores.append([row * pitch + ((tx ^ row) if swizzle else tx) for tx in range(TILE)])
            loads.append([tx * pitch + ((row ^ tx) if swizzle else row) for tx in range(TILE)])
    return stores, loads


def predicted_shared_wavefronts(kind: str, rows: int, cols: int) -> dict:
    """Shared-memory wavefronts and bank conflicts the model predicts for a tiled transpose of a rows x
    cols matrix whose sides are multiples of TILE (every warp full)."""
    if rows % TILE or cols % TILE:
        raise ValueError("the prediction counts full tiles only: use sides that are multiples of TILE")
    tiles = (rows // TILE) * (cols // TILE)
    stores, loads = transpose_tile_words(kind)
    out = {}
    for op, requests in (("ld", loads), ("st", stores)):
        reports = [conflict_report([4 * w for w in words]) for words in requests]
        out[f"{op}_wavefronts"] = tiles * sum(r["wavefronts"] for r in reports)
        out[f"{op}_conflicts"] = tiles * sum(r["conflicts"] for r in reports)
    return out


# --- ladders -----------------------------------------------------------------------------------------
N_COPY = 1 << 25             # 2^25 floats = 128 MiB out (and in at stride 1): twice the H200's L2 per array
STRIDES = (1, 2, 4, 8, 16, 32)
OFFSETS = (1, 4, 8, 32)      # in floats: 4 and 28 bytes off a sector, one sector, one 128-byte line
TRANSPOSE = (8192, 8192)     # 256 MiB per matrix


def _copy_ladder(stride: int, offset: int, rungs: list[Rung], topic: str) -> Ladder:
    def make_inputs(n, rng):
        return (rng.standard_normal(offset + n * stride, dtype=np.float32),)

    return Ladder(
        chapter=CHAPTER, topic=topic,
        description=f"dst[i] = src[{offset} + i * {stride}] for n float32; GB/s counts the 8·n useful bytes",
        make_inputs=make_inputs,
        out_shape=lambda x: ((x.size - offset) // stride,),
        reference=lambda x: x[offset::stride].astype(np.float64),
        bytes=lambda n: 8 * n, flops=None, unit="GB/s", sizes=[N_COPY], sim_sizes=[1000], rungs=rungs)


def _strided_rung(stride, offset=0):
    name = f"copy_strided_kernel stride {stride}" + (f" offset {offset}" if offset else "")
    return Rung(name, functools.partial(copy_strided, stride=stride, offset=offset),
                f"{sectors_per_request(stride, offset)} sectors per warp load")


def _torch_transpose(a, out):
    out.copy_(a.t())


LADDERS = [
    _copy_ladder(1, 0, [_strided_rung(1), Rung("copy_four_per_thread_kernel", copy_four_per_thread,
                                                "four floats per thread")], "copy stride 1"),
    *[_copy_ladder(s, 0, [_strided_rung(s)], f"copy stride {s}") for s in STRIDES[1:]],
    *[_copy_ladder(1, o, [_strided_rung(1, o)], f"copy offset {o}") for o in OFFSETS],
    copy_ceiling(CHAPTER, [N_COPY]),
    Ladder(
        chapter=CHAPTER, topic="transpose",
        description="out = a.T for a rows x cols float32 matrix: read and write rows·cols floats",
        make_inputs=lambda size, rng: (rng.standard_normal(size, dtype=np.float32),),
        out_shape=lambda a: a.shape[::-1], reference=lambda a: a.T.astype(np.float64),
        bytes=lambda size: 8 * size[0] * size[1], flops=None, unit="GB/s",
        sizes=[TRANSPOSE], sim_sizes=[(37, 53)],
        rungs=[Rung("transpose_naive_kernel", transpose_naive, "coalesced reads, scattered writes"),
               Rung("transpose_tiled_kernel", transpose_tiled, "shared tile, 32-way conflicts on reads"),
               Rung("transpose_padded_kernel", transpose_padded, "tile rows padded to 33 words"),
               Rung("transpose_swizzled_kernel", transpose_swizzled, "XOR-swizzled tile"),
               Rung("transpose_batched_kernel", transpose_batched, "padded tile, all loads before any store"),
               Rung("transpose_wide_kernel", transpose_wide, "64 x 64 tile, 16 loads in flight, no bounds "
                    "tests inside"),
               Rung("transpose_vector_kernel", transpose_vector, "transpose_wide_kernel with 16-byte loads "
                    "and stores")],
        baselines=[Baseline("torch a.t() copy", _torch_transpose, "out.copy_(a.t())")]),
    copy_ceiling(CHAPTER, [TRANSPOSE]),
]


# --- recordings that are not ladders ------------------------------------------------------------------------
LATENCY_BYTES = [1 << p for p in range(12, 31)]  # working sets of 4 KiB ... 1 GiB
CHASE_STEPS = 1 << 14
LINE_INTS = 32  # int32 per 128-byte cache line: the chase visits one element per line


def _chase_ms(d_next, steps, d_last, d_flag, reps=5):
    """Median ms of a `steps`-load chase, each run right after a coalesced sweep of the whole array."""
    times = []
    for _ in range(reps):
        touch_kernel[blocks_for(d_next.size), THREADS](d_next, d_flag)
        start, stop = cuda.event(), cuda.event()
        start.record()
        pointer_chase_kernel[1, 1](d_next, steps, d_last)
        stop.record()
        stop.synchronize()
        times.append(cuda.event_elapsed_time(start, stop))
    return float(np.median(times))


def measure_latency(working_set_bytes: int, rng: np.random.Generator, steps: int = CHASE_STEPS) -> dict:
    """ns per dependent load over a random cycle through every cache line of working_set_bytes (GPU only),
    checked first.

    Before each timed run a coalesced sweep reads the whole array: it leaves the array in L2 when the
    array fits there, and when it does not, it leaves only the sweep's last ~L2-sized part — so the
    chase, which jumps to a random line each load, finds its lines in L2 about L2/working-set of the time
    and otherwise goes to HBM. Runs of `steps` and 2·`steps` loads are timed; the difference of the two
    medians is `steps` loads without the launch overhead (and without the first lap, where the lines
    come into this SM's L1).
    """
    n = working_set_bytes // 4
    host = random_cycle(n, rng, spacing=LINE_INTS)
    d_next = cuda.to_device(host)
    d_last = cuda.device_array(1, dtype=np.int32)
    d_flag = cuda.to_device(np.zeros(1, dtype=np.int32))
    pointer_chase(d_next, 2 * steps, d_last)
    got, want = int(d_last.copy_to_host()[0]), chase_on_host(host, 2 * steps)
    if got != want:
        raise AssertionError(f"pointer chase over {n} elements ended at {got}, expected {want}: not timed")
    short_ms = _chase_ms(d_next, steps, d_last, d_flag)
    long_ms = _chase_ms(d_next, 2 * steps, d_last, d_flag)
    ns = (long_ms - short_ms) * 1e6 / steps
    clock_khz = cuda.get_current_device().CLOCK_RATE
    return {"working_set_bytes": working_set_bytes, "lines": n // LINE_INTS, "loads": steps,
            "ns_per_load": ns, "cycles_per_load": ns * clock_khz * 1e-6, "clock_mhz": clock_khz / 1e3}


# Nsight Compute: the counters the models are checked against, and what each workload launch is.
NCU_METRICS = ["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
               "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
               "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
               "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"]
NCU_TRANSPOSE = (1024, 1024)
NCU_COPY_N = 1 << 20
NCU_COPIES = [(s, 0) for s in STRIDES] + [(1, o) for o in OFFSETS]
PROBE_WORDS = 2048        # shared array of the probes; lane * stride + r stays below it for stride <= 64
PROBE_READS = 64          # shared loads per thread in a probe
PROBE_BLOCKS = 264
PROBE_CASES = [(4, 0), (4, 1), (4, 2), (4, 32), (4, 33), (8, 1), (8, 2), (8, 16), (8, 17)]  # (bytes, stride)


def _make_shared_probe(dtype):
    @cuda.jit
    def shared_probe_kernel(out, stride):
        """Each thread reads PROBE_READS elements of a shared array, lane i at element i * stride + r.

        Memory: shared only (plus one store per thread): adding r shifts every lane's bank by the same
        amount, so each of a warp's PROBE_READS requests has the same conflict degree as r = 0.
        Launch: 1-D, THREADS per block, any number of blocks; stride <= 64.
        """
        buf = cuda.shared.array(PROBE_WORDS, dtype)
        for i in range(cuda.threadIdx.x, PROBE_WORDS, cuda.blockDim.x):
            buf[i] = i
        cuda.syncthreads()
        base = (cuda.threadIdx.x % 32) * stride
        acc = 0.0
        for r in range(PROBE_READS):
            acc += buf[base + r]
        out[cuda.grid(1)] = acc

    return shared_probe_kernel


shared_probe_f32_kernel = _make_shared_probe(float32)
shared_probe_f64_kernel = _make_shared_probe(float64)


def ncu_launches() -> list[dict]:
    """The workload's launches in order, each with what the models predict for it."""
    out = []
    for kind in ("tiled", "padded", "swizzled"):
        pred = predicted_shared_wavefronts(kind, *NCU_TRANSPOSE)
        out.append({"kernel": f"transpose_{kind}_kernel", "symbol": f"transpose_{kind}_kernel",
                    "case": "x".join(map(str, NCU_TRANSPOSE)),
                    "predicted": {NCU_METRICS[0]: pred["ld_wavefronts"], NCU_METRICS[1]: pred["ld_conflicts"],
                                  NCU_METRICS[2]: pred["st_wavefronts"], NCU_METRICS[3]: pred["st_conflicts"]}})
    warps = PROBE_BLOCKS * THREADS // 32
    for element_bytes, stride in PROBE_CASES:
        report = conflict_report([lane * stride * element_bytes for lane in range(32)], element_bytes)
        out.append({"kernel": f"shared_probe_f{8 * element_bytes}_kernel", "symbol": "shared_probe_kernel",
                    "case": f"{element_bytes}-byte elements, stride {stride}",
                    "predicted": {NCU_METRICS[0]: warps * PROBE_READS * report["wavefronts"],
                                  NCU_METRICS[1]: warps * PROBE_READS * report["conflicts"]}})
    for stride, offset in NCU_COPIES:
        out.append({"kernel": "copy_strided_kernel", "symbol": "copy_strided_kernel",
                    "case": f"stride {stride}, offset {offset}",
                    "predicted": {"sectors per request": sectors_per_request(stride, offset)}})
    return out


def ncu_workload():
    """Launch every kernel of ncu_launches(), once each, in that order (run under ncu)."""
    rng = np.random.default_rng(0)
    a = cuda.to_device(rng.standard_normal(NCU_TRANSPOSE, dtype=np.float32))
    out = cuda.device_array(NCU_TRANSPOSE[::-1], dtype=np.float32)
    for launch in (transpose_tiled, transpose_padded, transpose_swizzled):
        launch(a, out)
    probe_out = cuda.device_array(PROBE_BLOCKS * THREADS, dtype=np.float64)
    for element_bytes, stride in PROBE_CASES:
        kernel = shared_probe_f32_kernel if element_bytes == 4 else shared_probe_f64_kernel
        kernel[PROBE_BLOCKS, THREADS](probe_out, stride)
    src = cuda.to_device(rng.standard_normal(NCU_COPY_N * max(STRIDES) + max(OFFSETS), dtype=np.float32))
    dst = cuda.device_array(NCU_COPY_N, dtype=np.float32)
    for stride, offset in NCU_COPIES:
        copy_strided(src, dst, stride, offset)
    cuda.synchronize()


def record_ncu(folder: Path) -> Path | None:
    """Run ncu_workload under Nsight Compute and write memory.ncu.csv (model beside counters), or None."""
    from lib.measure.results import environment

    ncu = shutil.which("ncu")
    if ncu is None:
        print("memory: ncu not found, counters not recorded")
        return None
    cmd = [ncu, "--clock-control", "none", "--csv", "--metrics", ",".join(NCU_METRICS), sys.executable, "-m",
           "kernels.memory", "--ncu-workload"]
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True,
                          timeout=600)
    measured = parse_csv(proc.stdout)
    expected = ncu_launches()
    if proc.returncode != 0 or len(measured) != len(expected):
        print(f"memory: ncu run failed (exit {proc.returncode}, {len(measured)} of {len(expected)} launches "
              f"profiled): counters not recorded\n{proc.stderr[-2000:]}\n{proc.stdout[-2000:]}")
        return None
    env = environment()
    rows = []
    for want, got in zip(expected, measured):
        if want["symbol"] not in got["name"]:
            print(f"memory: ncu launch {got['name']!r} is not {want['symbol']}: counters not recorded")
            return None
        m = got["metrics"]
        for metric, predicted in want["predicted"].items():
            if metric == "sectors per request":
                requests = m.get(NCU_METRICS[5], 0.0)
                value = m.get(NCU_METRICS[4], float("nan")) / requests if requests else float("nan")
            else:
                value = m.get(metric, float("nan"))
            rows.append({"kernel": want["kernel"], "case": want["case"], "metric": metric,
                         "predicted": predicted, "measured": value, **env})
    path = folder / f"{CHAPTER}.ncu.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def record_extra(folder: Path) -> list[Path]:
    """`make record`: the latency ladder (memory.latency.csv) and, with ncu, the counters (memory.ncu.csv)."""
    from lib.measure.results import environment

    env = environment()
    rng = np.random.default_rng(0)
    rows = []
    for size in LATENCY_BYTES:
        rows.append({**measure_latency(size, rng), **env})
        print(f"  latency {size:>12,} B: {rows[-1]['ns_per_load']:8.1f} ns/load")
    path = folder / f"{CHAPTER}.latency.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    paths = [path]
    ncu_path = record_ncu(folder)
    if ncu_path is not None:
        paths.append(ncu_path)
    return paths


if __name__ == "__main__" and sys.argv[1:] == ["--ncu-workload"]:
    ncu_workload()


# The book's own small launches (demos, last passes, one-thread set-ups) are deliberate: no low-occupancy
# warning for them (lib/runtime/quiet_launches.py); a reader's kernels still get it.
quiet_kernels(globals())


# --- the chapter's access patterns, traced (lib.grading.tracer) ------------------------------------------
def traced_examples():
    """This chapter's examples, traced by lib.grading.tracer: (copies, transposes) as two small tables. copies: the global
    requests of copy_strided_kernel at three strides/offsets; transposes: the shared-memory requests of the
    three tiled transposes on one 32 x 32 tile, with their global requests' sectors beside them."""
    import pandas as pd

    from lib.grading.tracer import trace

    rng = np.random.default_rng(0)
    n = THREADS  # one block
    src = cuda.to_device(rng.standard_normal(n * 8 + 1, dtype=np.float32))
    dst = cuda.device_array(n, dtype=np.float32)
    copies = []
    for stride, offset in ((1, 0), (1, 1), (8, 0)):
        summary = trace(copy_strided_kernel, 1, THREADS, src, dst, stride, offset).summary()
        for row in summary.to_dict("records"):
            copies.append({"stride": stride, "offset": offset, "array": row["array"], "op": row["op"],
                           "requests": row["requests"], "sectors": row["sectors"], "ideal": row["ideal sectors"],
                           "used / moved": row["used / moved"]})
    a = cuda.to_device(rng.standard_normal((TILE, TILE), dtype=np.float32))
    at = cuda.device_array((TILE, TILE), dtype=np.float32)
    transposes = []
    for kernel in (transpose_tiled_kernel, transpose_padded_kernel, transpose_swizzled_kernel):
        summary = trace(kernel, (1, 1), (TILE, BLOCK_ROWS), a, at).summary()
        glob = summary[summary["space"] == "global"]
        for row in summary[summary["space"] == "shared"].to_dict("records"):
            side = 0 if row["op"] == "store" else 1  # tile[...] = a[...] stores; out[...] = tile[...] loads
            transposes.append({"kernel": kernel.__name__, "shared access": row["source"].split(" = ")[side],
                               "op": row["op"], "requests": row["requests"], "wavefronts": row["wavefronts"],
                               "worst n-way": row["worst n-way"], "global sectors": glob["sectors"].mean()})
    return pd.DataFrame(copies), pd.DataFrame(transposes)


def traced_examples_text() -> str:
    """traced_examples() as two text tables (what the page prints when it traced in another process)."""
    import pandas as pd

    copies, transposes = traced_examples()
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        return (f"copy_strided_kernel, one block of {THREADS} threads\n{copies.round(2).to_string(index=False)}\n\n"
                f"tiled transposes, one 32 x 32 tile\n{transposes.round(2).to_string(index=False)}")
