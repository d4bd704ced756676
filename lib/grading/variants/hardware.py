"""Known-wrong answers to the hardware chapter's exercise: outer_product(x, y, out)."""
from __future__ import annotations

import numpy as np
from numba import cuda

from lib.grading.variants._common import Variant, cover_2d, dims, f32, own_launches, unwritten

TILE_COLS, TILE_ROWS = 32, 8
FIXED_GRID, FIXED_BLOCK = (8, 8), (16, 16)


def _grid_for(out):
    rows, cols = out.shape
    return ((cols + TILE_COLS - 1) // TILE_COLS, (rows + TILE_ROWS - 1) // TILE_ROWS), (TILE_COLS, TILE_ROWS)


def _product(x, y, rows, cols, fill, shape):
    """x[i] * y[j] (float32, one rounding) for i < rows, j < cols; `fill` elsewhere."""
    out = unwritten(shape, fill)
    out[:rows, :cols] = f32(np.outer(np.float32(x[:rows]), np.float32(y[:cols])))
    return out


@cuda.jit
def outer_swapped_xy(x, y, out):
    """out[i, j] = x[i] * y[j] with i, j = cuda.grid(2): i runs along x, which the launch spreads over the
    columns, so rows past the x-extent and columns past the y-extent are never written.

    Memory: x[i] and y[j] read per element; a warp's stores run down a column (strided), as the swap implies.
    Launch: 2-D, x over the columns, y over the rows (as the exercise's own launch).
    """
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = x[i] * y[j]


def outer_product_swapped_xy(x, y, out):
    grid, block = _grid_for(out)
    outer_swapped_xy[grid, block](x, y, out)


def _swapped_model(x, y, launches, fill=np.nan):
    cover = cover_2d(launches)
    if cover is None:
        return None
    along_x, along_y = cover
    return _product(x, y, min(x.size, along_x), min(y.size, along_y), fill, (x.size, y.size))


@cuda.jit
def outer_right(x, y, out):
    """out[i, j] = x[i] * y[j], x along the columns.

    Memory: x[i] and y[j] read per element; a warp stores 32 consecutive floats of one row (coalesced).
    Launch: 2-D, x over the columns, y over the rows; threads past the array do nothing.
    """
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = x[i] * y[j]


def outer_product_fixed_launch(x, y, out):
    outer_right[FIXED_GRID, FIXED_BLOCK](x, y, out)


def _covered_model(x, y, launches, fill=np.nan):
    cover = cover_2d(launches)
    if cover is None:
        return None
    along_x, along_y = cover
    return _product(x, y, min(x.size, along_y), min(y.size, along_x), fill, (x.size, y.size))


@cuda.jit
def outer_thread_index_only(x, y, out):
    """out[i, j] with j, i = threadIdx.x, threadIdx.y: every block writes the first tile.

    Memory: as outer_right, but only the first tile's elements are touched.
    Launch: 2-D, enough blocks for the array; only the first blockDim.y x blockDim.x tile is reached.
    """
    j, i = cuda.threadIdx.x, cuda.threadIdx.y
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = x[i] * y[j]


def outer_product_thread_index_only(x, y, out):
    grid, block = _grid_for(out)
    outer_thread_index_only[grid, block](x, y, out)


def _thread_index_model(x, y, launches, fill=np.nan):
    mine = own_launches(launches)
    if not mine:
        return None
    (bx, by, _) = dims(mine[0])[1]
    return _product(x, y, min(x.size, by), min(y.size, bx), fill, (x.size, y.size))


@cuda.jit
def outer_last_column_dropped(x, y, out):
    """out[i, j] for j < cols - 1: the column guard is one short.

    Memory: as outer_right; the last column is never stored.
    Launch: 2-D, x over the columns, y over the rows.
    """
    j, i = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1] - 1:
        out[i, j] = x[i] * y[j]


def outer_product_last_column_dropped(x, y, out):
    grid, block = _grid_for(out)
    outer_last_column_dropped[grid, block](x, y, out)


VARIANTS = {"outer_product": [
    Variant("launch does not cover the output",
            "elements outside the grid you launched were never written: compute the grid from the output's "
            "shape, blocks = ((cols + bx - 1) // bx, (rows + by - 1) // by)",
            _covered_model, outer_product_fixed_launch),
    Variant("x and y swapped",
            "cuda.grid(2) returns (x, y) and your launch spreads x over the columns, but the kernel used x as the "
            "row index: write j, i = cuda.grid(2) (x along the columns)",
            _swapped_model, outer_product_swapped_xy),
    Variant("threadIdx instead of the global index",
            "only the first tile was written: every block used threadIdx as the element index; use "
            "cuda.grid(2), which adds blockIdx * blockDim",
            _thread_index_model, outer_product_thread_index_only),
    Variant("last column dropped",
            "only the last column is missing: the column guard is one short (j < cols, not j < cols - 1)",
            lambda x, y, launches, fill=np.nan: _product(x, y, x.size, y.size - 1, fill, (x.size, y.size)),
            outer_product_last_column_dropped),
]}
