"""Known-wrong answers to the memory chapter's exercises: transpose_batched(a, out) and row_col_sums(x, out)."""
from __future__ import annotations

import numpy as np
from numba import cuda, float32

from lib.grading.variants._common import Variant, cover_2d, dims, f32, own_launches, unwritten, widest

BLOCK_X, BLOCK_Y = 32, 8
TILE_SIDE = 32


def _grid_over(a):
    """A 3-D launch: x over a matrix's columns, y over its rows, z over the batch."""
    batch, rows, cols = a.shape
    return ((cols + BLOCK_X - 1) // BLOCK_X, (rows + BLOCK_Y - 1) // BLOCK_Y, batch), (BLOCK_X, BLOCK_Y)


# --- transpose_batched: out[b, c, r] = a[b, r, c] ------------------------------------------------------------------
def _transposed_part(a, batches, rows, cols, fill):
    """out[b] = a[b].T for b < batches, over a's elements (r, c) with r < rows and c < cols; `fill` elsewhere."""
    out = unwritten((a.shape[0], a.shape[2], a.shape[1]), fill)
    out[:batches, :cols, :rows] = np.asarray(a, np.float64)[:batches, :rows, :cols].transpose(0, 2, 1)
    return out


def _batches_reached(launches) -> int | None:
    gb = widest(launches)
    return None if gb is None else gb[0][2] * gb[1][2]


@cuda.jit
def transpose_batched_right(a, out):
    """out[b, c, r] = a[b, r, c], one thread per element, x along a's columns, z over the batch.

    Memory: reads coalesced along a's rows, writes strided down out's columns (no tile).
    Launch: 3-D grid (x over columns, y over rows, z over the batch), 2-D blocks.
    """
    c, r = cuda.grid(2)
    b = cuda.blockIdx.z
    if b < a.shape[0] and r < a.shape[1] and c < a.shape[2]:
        out[b, c, r] = a[b, r, c]


def transpose_batched_one_matrix(a, out):
    grid, block = _grid_over(a)
    transpose_batched_right[grid[:2], block](a, out)


def _one_matrix_model(a, launches, fill=np.nan):
    reached = _batches_reached(launches)
    cover = cover_2d(launches)
    if reached is None or cover is None:
        return None
    return _transposed_part(a, min(reached, a.shape[0]), min(a.shape[1], cover[1]), min(a.shape[2], cover[0]), fill)


@cuda.jit
def transpose_batched_first_only(a, out):
    """out[b, c, r] = a[0, r, c]: the batch index picks the output matrix but not the input one.

    Memory: as transpose_batched_right; every block reads the first matrix.
    Launch: 3-D grid, 2-D blocks.
    """
    c, r = cuda.grid(2)
    b = cuda.blockIdx.z
    if b < a.shape[0] and r < a.shape[1] and c < a.shape[2]:
        out[b, c, r] = a[0, r, c]


def transpose_batched_first(a, out):
    grid, block = _grid_over(a)
    transpose_batched_first_only[grid, block](a, out)


def _first_only_model(a, launches, fill=np.nan):
    first = np.asarray(a, np.float64)[0].T
    return np.broadcast_to(first, (a.shape[0],) + first.shape).copy()


@cuda.jit
def transpose_batched_swapped_xy(a, out):
    """out[b, c, r] = a[b, r, c] with r, c = cuda.grid(2): r runs along x, which the launch spreads over a's
    columns, so rows past the x-extent and columns past the y-extent are never copied.

    Memory: a warp reads down a column of a and writes along a row of out.
    Launch: 3-D grid (x over columns, y over rows, z over the batch).
    """
    r, c = cuda.grid(2)
    b = cuda.blockIdx.z
    if b < a.shape[0] and r < a.shape[1] and c < a.shape[2]:
        out[b, c, r] = a[b, r, c]


def transpose_batched_swapped(a, out):
    grid, block = _grid_over(a)
    transpose_batched_swapped_xy[grid, block](a, out)


def _swapped_model(a, launches, fill=np.nan):
    reached, cover = _batches_reached(launches), cover_2d(launches)
    if reached is None or cover is None:
        return None
    return _transposed_part(a, min(reached, a.shape[0]), min(a.shape[1], cover[0]), min(a.shape[2], cover[1]), fill)


@cuda.jit
def transpose_batched_copy_order(a, out):
    """out[b]'s k-th element (row-major) = a[b]'s k-th element: each matrix copied into out's shape.

    Memory: reads coalesced, writes to computed positions (an integer division per element).
    Launch: 3-D grid, 2-D blocks.
    """
    c, r = cuda.grid(2)
    b = cuda.blockIdx.z
    if b < a.shape[0] and r < a.shape[1] and c < a.shape[2]:
        k = r * a.shape[2] + c
        out[b, k // a.shape[1], k % a.shape[1]] = a[b, r, c]


def transpose_batched_copied(a, out):
    grid, block = _grid_over(a)
    transpose_batched_copy_order[grid, block](a, out)


@cuda.jit
def transpose_batched_whole_tiles(a, out):
    """out[b, c, r] = a[b, r, c] only inside blocks whose whole tile lies in the matrix: the ragged edge tiles
    are skipped (a tiled kernel that assumed sides are multiples of the tile).

    Memory: as transpose_batched_right, minus the edge tiles.
    Launch: 3-D grid of TILE_SIDE x TILE_SIDE blocks.
    """
    c, r = cuda.grid(2)
    b = cuda.blockIdx.z
    whole = ((cuda.blockIdx.y + 1) * cuda.blockDim.y <= a.shape[1]
             and (cuda.blockIdx.x + 1) * cuda.blockDim.x <= a.shape[2])
    if whole and b < a.shape[0]:
        out[b, c, r] = a[b, r, c]


def transpose_batched_edges_dropped(a, out):
    batch, rows, cols = a.shape
    grid = ((cols + TILE_SIDE - 1) // TILE_SIDE, (rows + TILE_SIDE - 1) // TILE_SIDE, batch)
    transpose_batched_whole_tiles[grid, (TILE_SIDE, TILE_SIDE)](a, out)


def _whole_tiles_model(a, launches, fill=np.nan):
    mine = own_launches(launches)
    if not mine:
        return None
    bx, by, _ = dims(mine[0])[1]
    rows, cols = a.shape[1] // by * by, a.shape[2] // bx * bx
    return _transposed_part(a, a.shape[0], rows, cols, fill)


# --- row_col_sums: out[:rows] = row sums, out[rows:] = column sums ----------------------------------------------
SUM_THREADS = 128


def _sums_along(x, axis):
    """Each row (axis 1) or column (axis 0) added in order, in float32, as one thread does it."""
    x = np.asarray(x, np.float32)
    if x.shape[axis] == 0:
        return np.zeros(x.shape[1 - axis])
    return np.add.accumulate(x, axis=axis, dtype=np.float32).take(-1, axis=axis).astype(np.float64)


def _both(x):
    return np.concatenate([_sums_along(x, 1), _sums_along(x, 0)])


def _launch_both(kernel):
    def fn(x, out):
        threads = max(x.shape)
        kernel[(threads + SUM_THREADS - 1) // SUM_THREADS, SUM_THREADS](x, out)
    fn.__name__ = f"launch_{kernel.__name__}"
    return fn


@cuda.jit
def row_col_sums_thread_each(x, out):
    """Thread t adds row t (into out[t]) and column t (into out[rows + t]), each in order.

    Memory: the column loop is coalesced (a warp reads 32 neighbours of a row); the row loop is not: a warp
    reads 32 floats a row apart, 32 sectors for 4 sectors of data.
    Launch: 1-D, max(rows, cols) threads (rounded up).
    """
    t = cuda.grid(1)
    rows, cols = x.shape
    if t < rows:
        total = float32(0)
        for k in range(cols):
            total += x[t, k]
        out[t] = total
    if t < cols:
        total = float32(0)
        for k in range(rows):
            total += x[k, t]
        out[rows + t] = total


@cuda.jit
def row_col_sums_swapped_halves(x, out):
    """The column sums first (out[:cols]) and the row sums after them: the halves in the wrong order.

    Memory: as row_col_sums_thread_each.
    Launch: 1-D, max(rows, cols) threads (rounded up).
    """
    t = cuda.grid(1)
    rows, cols = x.shape
    if t < rows:
        total = float32(0)
        for k in range(cols):
            total += x[t, k]
        out[cols + t] = total
    if t < cols:
        total = float32(0)
        for k in range(rows):
            total += x[k, t]
        out[t] = total


@cuda.jit
def row_col_sums_no_offset(x, out):
    """Column t's sum stored at out[t], over row t's: the rows offset of the column half is missing.

    Memory: as row_col_sums_thread_each.
    Launch: 1-D, max(rows, cols) threads (rounded up).
    """
    t = cuda.grid(1)
    rows, cols = x.shape
    if t < rows:
        total = float32(0)
        for k in range(cols):
            total += x[t, k]
        out[t] = total
    if t < cols:
        total = float32(0)
        for k in range(rows):
            total += x[k, t]
        out[t] = total


def _no_offset_model(x, launches, fill=np.nan):
    rows, cols = x.shape
    out = unwritten(rows + cols, fill)
    out[:rows] = _sums_along(x, 1)
    out[:cols] = _sums_along(x, 0)
    return out


@cuda.jit
def row_col_sums_last_row_dropped(x, out):
    """The column loop stops one row short; the row sums are right.

    Memory: as row_col_sums_thread_each.
    Launch: 1-D, max(rows, cols) threads (rounded up).
    """
    t = cuda.grid(1)
    rows, cols = x.shape
    if t < rows:
        total = float32(0)
        for k in range(cols):
            total += x[t, k]
        out[t] = total
    if t < cols:
        total = float32(0)
        for k in range(rows - 1):
            total += x[k, t]
        out[rows + t] = total


@cuda.jit
def row_col_sums_column_major(x, out):
    """Both sums read x as if it were stored column by column: 'row' t is memory t*cols ... and 'column' t is
    memory t*rows ..., i.e. the sums of x's memory reshaped to (cols, rows).

    Memory: each thread reads a contiguous run of memory; a warp's reads are a run apart (strided).
    Launch: 1-D, max(rows, cols) threads (rounded up).
    """
    t = cuda.grid(1)
    rows, cols = x.shape
    if t < rows:
        total = float32(0)
        for k in range(cols):
            m = k * rows + t
            total += x[m // cols, m % cols]
        out[t] = total
    if t < cols:
        total = float32(0)
        for k in range(rows):
            m = t * rows + k
            total += x[m // cols, m % cols]
        out[rows + t] = total


def _column_major_model(x, launches, fill=np.nan):
    as_stored = np.asarray(x, np.float32).ravel().reshape(x.shape[1], x.shape[0]).T  # (rows, cols) view
    return _both(as_stored)


@cuda.jit
def row_col_sums_added_into_out(x, out):
    """out[...] += each sum: out was never set to 0 first.

    Memory: as row_col_sums_thread_each, plus a read of out.
    Launch: 1-D, max(rows, cols) threads (rounded up).
    """
    t = cuda.grid(1)
    rows, cols = x.shape
    if t < rows:
        total = float32(0)
        for k in range(cols):
            total += x[t, k]
        out[t] += total
    if t < cols:
        total = float32(0)
        for k in range(rows):
            total += x[k, t]
        out[rows + t] += total


def _into_out_model(x, launches, fill=np.nan):
    if np.isnan(fill):
        return None
    return f32(np.float32(fill) + _both(x).astype(np.float32))


VARIANTS = {
    "transpose_batched": [
        Variant("launch does not cover the batch",
                "only the first matrix (or the first few) was transposed: give the grid a third dimension over the "
                "batch, blocks = (.., .., batch), and take the matrix from cuda.blockIdx.z",
                _one_matrix_model, transpose_batched_one_matrix),
        Variant("first matrix everywhere",
                "every out[b] holds the first matrix's transpose: read a[b, r, c] with the same batch index b "
                "that you write to",
                _first_only_model, transpose_batched_first),
        Variant("x and y swapped",
                "cuda.grid(2) returns (x, y) and your launch spreads x over the columns, but the kernel used x as "
                "the row index: write c, r = cuda.grid(2) (x along a's columns)",
                _swapped_model, transpose_batched_swapped),
        Variant("copied, not transposed",
                "each out[b] holds a[b]'s elements in a[b]'s own memory order (reshaped, not transposed): write "
                "out[b, c, r] = a[b, r, c]",
                lambda a, launches, fill=np.nan: np.asarray(a, np.float64).reshape(a.shape[0], a.shape[2], a.shape[1]),
                transpose_batched_copied),
        Variant("ragged edge tiles skipped",
                "only whole tiles were transposed: a matrix whose sides are not multiples of the tile has partial "
                "tiles at its right and bottom edges; launch them too and guard each element (r < rows, c < cols)",
                _whole_tiles_model, transpose_batched_edges_dropped),
    ],
    "row_col_sums": [
        Variant("halves swapped",
                "the column sums came first: out[:rows] holds the row sums, out[rows:] the column sums",
                lambda x, launches, fill=np.nan: np.concatenate([_sums_along(x, 0), _sums_along(x, 1)]),
                _launch_both(row_col_sums_swapped_halves)),
        Variant("column sums without the rows offset",
                "column j's sum was stored at out[j], over the row sums: it belongs at out[rows + j]",
                _no_offset_model, _launch_both(row_col_sums_no_offset)),
        Variant("last row not added",
                "every column misses its last row: the row loop of the column sums stops one short (range(rows))",
                lambda x, launches, fill=np.nan: np.concatenate([_sums_along(x, 1), _sums_along(x[:-1], 0)]),
                _launch_both(row_col_sums_last_row_dropped)),
        Variant("x read column-major",
                "your sums add x's memory as if it were stored column by column: x is row-major, so row i is "
                "x[i, 0], x[i, 1], ... (neighbours in memory) and column j is x[0, j], x[1, j], ... (stride cols)",
                _column_major_model, _launch_both(row_col_sums_column_major)),
        Variant("added into out",
                "the sums were added into out (out[i] += ...) but out starts as garbage: store them, or zero "
                "out first",
                _into_out_model, _launch_both(row_col_sums_added_into_out)),
    ],
}
