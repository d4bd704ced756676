"""Known-wrong answers to the memory chapter's exercises: transpose(a, out) and column_sums(x, out)."""
from __future__ import annotations

import numpy as np
from numba import cuda, float32

from ._common import Variant, cover_2d, f32, threads_1d, unwritten

BLOCK_X, BLOCK_Y = 32, 8
FIXED_GRID, FIXED_BLOCK = (8, 8), (16, 16)


def _grid_over(a):
    """A 2-D launch with x over a's columns and y over its rows."""
    rows, cols = a.shape
    return ((cols + BLOCK_X - 1) // BLOCK_X, (rows + BLOCK_Y - 1) // BLOCK_Y), (BLOCK_X, BLOCK_Y)


# --- transpose ----------------------------------------------------------------------------------------------
def _transposed_part(a, rows, cols, fill):
    """out = a.T where a's element (r, c) has r < rows and c < cols; `fill` elsewhere."""
    out = unwritten(a.shape[::-1], fill)
    out[:cols, :rows] = a[:rows, :cols].T
    return out


@cuda.jit
def transpose_swapped_xy(a, out):
    """out[c, r] = a[r, c] with r, c = cuda.grid(2): r runs along x, which the launch spreads over a's
    columns, so rows past the x-extent and columns past the y-extent are never copied.

    Memory: a warp reads down a column of a and writes along a row of out.
    Launch: 2-D, x over a's columns, y over its rows.
    """
    r, c = cuda.grid(2)
    if r < a.shape[0] and c < a.shape[1]:
        out[c, r] = a[r, c]


def transpose_swapped(a, out):
    grid, block = _grid_over(a)
    transpose_swapped_xy[grid, block](a, out)


def _swapped_model(a, launches, fill=np.nan):
    cover = cover_2d(launches)
    if cover is None:
        return None
    along_x, along_y = cover
    return _transposed_part(a, min(a.shape[0], along_x), min(a.shape[1], along_y), fill)


@cuda.jit
def transpose_right(a, out):
    """out[c, r] = a[r, c], x along a's columns.

    Memory: reads coalesced along a's rows, writes strided down out's columns (no tile).
    Launch: 2-D, x over a's columns, y over its rows; threads past the array do nothing.
    """
    c, r = cuda.grid(2)
    if r < a.shape[0] and c < a.shape[1]:
        out[c, r] = a[r, c]


def transpose_fixed_launch(a, out):
    transpose_right[FIXED_GRID, FIXED_BLOCK](a, out)


def _covered_model(a, launches, fill=np.nan):
    cover = cover_2d(launches)
    if cover is None:
        return None
    along_x, along_y = cover
    return _transposed_part(a, min(a.shape[0], along_y), min(a.shape[1], along_x), fill)


@cuda.jit
def transpose_copy_order(a, out):
    """out's k-th element (row-major) = a's k-th element: a copy into out's shape, not a transpose.

    Memory: reads coalesced, writes to computed positions (an integer division per element).
    Launch: 2-D, x over a's columns, y over its rows.
    """
    c, r = cuda.grid(2)
    if r < a.shape[0] and c < a.shape[1]:
        k = r * a.shape[1] + c
        out[k // a.shape[0], k % a.shape[0]] = a[r, c]


def transpose_copied(a, out):
    grid, block = _grid_over(a)
    transpose_copy_order[grid, block](a, out)


@cuda.jit
def transpose_last_row_dropped(a, out):
    """out[c, r] = a[r, c] for r < rows - 1: the row guard is one short.

    Memory: as transpose_right; a's last row is never read.
    Launch: 2-D, x over a's columns, y over its rows.
    """
    c, r = cuda.grid(2)
    if r < a.shape[0] - 1 and c < a.shape[1]:
        out[c, r] = a[r, c]


def transpose_last_row(a, out):
    grid, block = _grid_over(a)
    transpose_last_row_dropped[grid, block](a, out)


# --- column_sums --------------------------------------------------------------------------------------------
def _sequential_sums(columns_by_row):
    """Each column of a (rows, cols) float32 array added from its first row down, in float32, as one thread
    does it (rows = 0 gives 0)."""
    x = np.asarray(columns_by_row, np.float32)
    if x.shape[0] == 0:
        return np.zeros(x.shape[1])
    return np.add.accumulate(x, axis=0, dtype=np.float32)[-1].astype(np.float64)


SUM_THREADS = 128
FIXED_THREADS = 64


@cuda.jit
def column_sums_last_row_dropped(x, out):
    """out[j] = x[0, j] + ... + x[rows - 2, j]: the row loop stops one short.

    Memory: a warp reads 32 consecutive floats of each row (coalesced), rows - 1 of them.
    Launch: 1-D, one thread per column.
    """
    j = cuda.grid(1)
    if j < x.shape[1]:
        total = float32(0)
        for i in range(x.shape[0] - 1):
            total += x[i, j]
        out[j] = total


def column_sums_last_row(x, out):
    column_sums_last_row_dropped[(x.shape[1] + SUM_THREADS - 1) // SUM_THREADS, SUM_THREADS](x, out)


@cuda.jit
def column_sums_right(x, out):
    """out[j] = sum of column j, one thread per column, rows in order.

    Memory: a warp reads 32 consecutive floats of each row (coalesced).
    Launch: 1-D, one thread per column; threads past the columns do nothing.
    """
    j = cuda.grid(1)
    if j < x.shape[1]:
        total = float32(0)
        for i in range(x.shape[0]):
            total += x[i, j]
        out[j] = total


def column_sums_fixed_launch(x, out):
    column_sums_right[1, FIXED_THREADS](x, out)


def _covered_sums(x, launches, fill=np.nan):
    reach = threads_1d(launches)
    if reach is None:
        return None
    out = unwritten(x.shape[1], fill)
    out[:reach] = _sequential_sums(x[:, :reach])
    return out


@cuda.jit
def column_sums_column_major(x, out):
    """out[j] = the sum of x's elements j*rows ... j*rows + rows - 1 in memory order: x read as if it were
    stored column by column.

    Memory: a thread reads a contiguous run of memory; a warp's reads are rows apart (strided).
    Launch: 1-D, one thread per column.
    """
    j = cuda.grid(1)
    if j < x.shape[1]:
        total = float32(0)
        for i in range(x.shape[0]):
            k = j * x.shape[0] + i
            total += x[k // x.shape[1], k % x.shape[1]]
        out[j] = total


def column_sums_column_major_order(x, out):
    column_sums_column_major[(x.shape[1] + SUM_THREADS - 1) // SUM_THREADS, SUM_THREADS](x, out)


@cuda.jit
def column_sums_added_into_out(x, out):
    """out[j] += the column's sum: out was never set to 0 first.

    Memory: as column_sums_right, plus a read of out[j].
    Launch: 1-D, one thread per column.
    """
    j = cuda.grid(1)
    if j < x.shape[1]:
        total = float32(0)
        for i in range(x.shape[0]):
            total += x[i, j]
        out[j] += total


def column_sums_into_out(x, out):
    column_sums_added_into_out[(x.shape[1] + SUM_THREADS - 1) // SUM_THREADS, SUM_THREADS](x, out)


def _into_out_model(x, launches, fill=np.nan):
    if np.isnan(fill):
        return None
    return f32(np.float32(fill) + _sequential_sums(x).astype(np.float32))


VARIANTS = {
    "transpose": [
        Variant("launch does not cover the array",
                "elements outside the grid you launched were never copied: compute the grid from the array's "
                "shape, blocks = ((cols + bx - 1) // bx, (rows + by - 1) // by)",
                _covered_model, transpose_fixed_launch),
        Variant("x and y swapped",
                "cuda.grid(2) returns (x, y) and your launch spreads x over the columns, but the kernel used x as "
                "the row index: write c, r = cuda.grid(2) (x along a's columns)",
                _swapped_model, transpose_swapped),
        Variant("copied, not transposed",
                "out holds a's elements in a's own memory order (reshaped, not transposed): write out[c, r] = "
                "a[r, c]",
                lambda a, launches, fill=np.nan: np.asarray(a, np.float64).ravel().reshape(a.shape[::-1]),
                transpose_copied),
        Variant("last row dropped",
                "only a's last row is missing (out's last column): the row guard is one short (r < rows)",
                lambda a, launches, fill=np.nan: _transposed_part(a, a.shape[0] - 1, a.shape[1], fill),
                transpose_last_row),
    ],
    "column_sums": [
        Variant("last row not added",
                "every column misses its last row: the row loop stops one short (range(rows))",
                lambda x, launches, fill=np.nan: _sequential_sums(x[:-1]), column_sums_last_row),
        Variant("launch does not cover the columns",
                "columns past the threads you launched were never summed: launch one thread per column, "
                "blocks = (cols + threads - 1) // threads",
                _covered_sums, column_sums_fixed_launch),
        Variant("x read column-major",
                "each sum adds consecutive elements of memory, as if x were stored column by column: x is "
                "row-major, so column j is x[0, j], x[1, j], ... (stride cols)",
                lambda x, launches, fill=np.nan: _sequential_sums(
                    np.asarray(x, np.float32).ravel().reshape(x.shape[1], x.shape[0]).T),
                column_sums_column_major_order),
        Variant("added into out",
                "the sums were added into out (out[j] += ...) but out starts as garbage: store them, or zero "
                "out first",
                _into_out_model, column_sums_into_out),
    ],
}
