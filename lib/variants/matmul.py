"""Known-wrong answers to the matmul chapter's exercises: matmul(a, b, c) and matmul_bt(a, b, c)."""
from __future__ import annotations

import numpy as np
from numba import cuda, float32

from ._common import Variant, cover_2d, f32, fill_adds, unwritten

BLOCK = 16
TILE = 16
FIXED_GRID, FIXED_BLOCK = (8, 8), (16, 16)


def _grid_for(c):
    rows, cols = c.shape
    return ((cols + BLOCK - 1) // BLOCK, (rows + BLOCK - 1) // BLOCK), (BLOCK, BLOCK)


def _part(product, rows, cols, fill):
    """product (float64) where row < rows and col < cols; `fill` elsewhere."""
    out = unwritten(product.shape, fill)
    out[:rows, :cols] = f32(product[:rows, :cols])
    return out


def _f64(*arrays):
    return [np.asarray(x, np.float64) for x in arrays]


def _swapped(product, launches, fill):
    cover = cover_2d(launches)
    if cover is None:
        return None
    along_x, along_y = cover
    return _part(product, min(product.shape[0], along_x), min(product.shape[1], along_y), fill)


def _covered(product, launches, fill):
    cover = cover_2d(launches)
    if cover is None:
        return None
    along_x, along_y = cover
    return _part(product, min(product.shape[0], along_y), min(product.shape[1], along_x), fill)


# --- matmul: c = a @ b, b (K, N) ----------------------------------------------------------------------------
@cuda.jit
def matmul_swapped_xy(a, b, c):
    """c[row, col] with row, col = cuda.grid(2): row runs along x, which the launch spreads over the columns.

    Memory: a warp reads a row of a (broadcast) and 32 rows of b (strided): the swap loses coalescing.
    Launch: 2-D, x over c's columns, y over its rows.
    """
    row, col = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[1]):
            acc += a[row, p] * b[p, col]
        c[row, col] = acc


@cuda.jit
def matmul_right(a, b, c):
    """c = a @ b, one thread per element, x along the columns.

    Memory: a warp reads one element of a (broadcast) and 32 consecutive elements of b per step of K.
    Launch: 2-D, x over c's columns, y over its rows; threads past c do nothing.
    """
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[1]):
            acc += a[row, p] * b[p, col]
        c[row, col] = acc


@cuda.jit
def matmul_k_one_short(a, b, c):
    """c = a[:, :K-1] @ b[:K-1]: the dot product's loop stops one short.

    Memory: as matmul_right, K - 1 steps.
    Launch: 2-D, x over c's columns, y over its rows.
    """
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[1] - 1):
            acc += a[row, p] * b[p, col]
        c[row, col] = acc


@cuda.jit
def matmul_tiled_whole_tiles(a, b, c):
    """Shared-memory tiles of TILE x TILE, but only K // TILE of them: the last partial tile of K is skipped.

    Memory: each block stages a TILE x TILE tile of a and of b per step; the partial tile is never loaded.
    Launch: 2-D, blocks of TILE x TILE, x over c's columns, y over its rows.
    """
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for t in range(a.shape[1] // TILE):
        k0 = t * TILE
        a_tile[ty, tx] = a[row, k0 + tx] if row < c.shape[0] else float32(0.0)
        b_tile[ty, tx] = b[k0 + ty, col] if col < c.shape[1] else float32(0.0)
        cuda.syncthreads()
        for p in range(TILE):
            acc += a_tile[ty, p] * b_tile[p, tx]
        cuda.syncthreads()
    if row < c.shape[0] and col < c.shape[1]:
        c[row, col] = acc


@cuda.jit
def matmul_added_into_c(a, b, c):
    """c[row, col] += the dot product: c was never set to 0 first.

    Memory: as matmul_right, plus a read of c.
    Launch: 2-D, x over c's columns, y over its rows.
    """
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[1]):
            acc += a[row, p] * b[p, col]
        c[row, col] += acc


def _launcher(kernel, fixed=False):
    def fn(a, b, c):
        if fixed:
            kernel[FIXED_GRID, FIXED_BLOCK](a, b, c)
        else:
            grid, block = _grid_for(c)
            kernel[grid, block](a, b, c)
    fn.__name__ = f"launch_{kernel.__name__}"
    return fn


def _whole_tiles(a, b):
    k = (a.shape[1] // TILE) * TILE
    a, b = _f64(a, b)
    return a[:, :k] @ b[:k]


# --- matmul_bt: c = a @ b.T, b (N, K) -------------------------------------------------------------------------
@cuda.jit
def matmul_bt_as_kn(a, b, c):
    """c = a @ B where B is b's memory read as a (K, N) matrix: b indexed as if it were not transposed.

    Memory: b read through a flat index (an integer division per term); the reads are those of a (K, N) matrix.
    Launch: 2-D, x over c's columns, y over its rows.
    """
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[1]):
            k = p * c.shape[1] + col
            acc += a[row, p] * b[k // b.shape[1], k % b.shape[1]]
        c[row, col] = acc


@cuda.jit
def matmul_bt_swapped_xy(a, b, c):
    """c[row, col] = a[row] . b[col] with row, col = cuda.grid(2): row runs along x (over the columns).

    Memory: a warp reads 32 rows of a and one row of b per step of K.
    Launch: 2-D, x over c's columns, y over its rows.
    """
    row, col = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[1]):
            acc += a[row, p] * b[col, p]
        c[row, col] = acc


@cuda.jit
def matmul_bt_right(a, b, c):
    """c = a @ b.T, one thread per element, x along the columns.

    Memory: a warp reads one element of a (broadcast) and 32 rows of b per step (strided by K).
    Launch: 2-D, x over c's columns, y over its rows; threads past c do nothing.
    """
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[1]):
            acc += a[row, p] * b[col, p]
        c[row, col] = acc


@cuda.jit
def matmul_bt_k_one_short(a, b, c):
    """c = a[:, :K-1] @ b[:, :K-1].T: the dot product's loop stops one short.

    Memory: as matmul_bt_right, K - 1 steps.
    Launch: 2-D, x over c's columns, y over its rows.
    """
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[1] - 1):
            acc += a[row, p] * b[col, p]
        c[row, col] = acc


def _ab(a, b):
    a, b = _f64(a, b)
    return a @ b


def _dot32(a, b):
    """a @ b as one thread per element computes it: float32 products added in order of K, in float32 (the
    float64 product when that would take too much memory; a GPU may fuse the multiply-add anyway)."""
    m, k = a.shape
    if m * k * b.shape[1] > 20_000_000:
        return f32(_ab(a, b))
    products = np.float32(a)[:, :, None] * np.float32(b)[None, :, :]
    return np.add.accumulate(products, axis=1, dtype=np.float32)[:, -1].astype(np.float64)


def _abt(a, b):
    a, b = _f64(a, b)
    return a @ b.T


VARIANTS = {
    "matmul": [
        Variant("launch does not cover c",
                "elements of c outside the grid you launched were never computed: compute the grid from c's "
                "shape, blocks = ((N + bx - 1) // bx, (M + by - 1) // by)",
                lambda a, b, launches, fill=np.nan: _covered(_ab(a, b), launches, fill),
                _launcher(matmul_right, fixed=True)),
        Variant("x and y swapped",
                "cuda.grid(2) returns (x, y) and your launch spreads x over the columns, but the kernel used x as "
                "the row index: write col, row = cuda.grid(2)",
                lambda a, b, launches, fill=np.nan: _swapped(_ab(a, b), launches, fill),
                _launcher(matmul_swapped_xy)),
        Variant("K loop one short",
                "every element misses the last term of its dot product: loop over all K (range(K))",
                lambda a, b, launches, fill=np.nan: f32(_ab(a[:, :-1], b[:-1])),
                _launcher(matmul_k_one_short)),
        Variant("partial last K tile skipped",
                "only whole tiles of K were added: when K is not a multiple of the tile, loop over "
                "(K + TILE - 1) // TILE tiles and load zeros past the end",
                lambda a, b, launches, fill=np.nan: f32(_whole_tiles(a, b)),
                _launcher(matmul_tiled_whole_tiles)),
        Variant("added into c",
                "the products were added into c (c[row, col] += ...) but c starts as garbage: store them",
                lambda a, b, launches, fill=np.nan: fill_adds(_dot32(a, b), fill),
                _launcher(matmul_added_into_c)),
    ],
    "matmul_bt": [
        Variant("b read as (K, N)",
                "b was indexed as b[p, col], as if it were stored (K, N): here b is (N, K), so the dot product "
                "of c[row, col] is a[row, p] * b[col, p]",
                lambda a, b, launches, fill=np.nan: f32(_ab(a, np.asarray(b).ravel().reshape(a.shape[1], b.shape[0]))),
                _launcher(matmul_bt_as_kn)),
        Variant("launch does not cover c",
                "elements of c outside the grid you launched were never computed: compute the grid from c's "
                "shape, blocks = ((N + bx - 1) // bx, (M + by - 1) // by)",
                lambda a, b, launches, fill=np.nan: _covered(_abt(a, b), launches, fill),
                _launcher(matmul_bt_right, fixed=True)),
        Variant("x and y swapped",
                "cuda.grid(2) returns (x, y) and your launch spreads x over the columns, but the kernel used x as "
                "the row index: write col, row = cuda.grid(2)",
                lambda a, b, launches, fill=np.nan: _swapped(_abt(a, b), launches, fill),
                _launcher(matmul_bt_swapped_xy)),
        Variant("K loop one short",
                "every element misses the last term of its dot product: loop over all K (range(K))",
                lambda a, b, launches, fill=np.nan: f32(_abt(a[:, :-1], b[:, :-1])),
                _launcher(matmul_bt_k_one_short)),
    ],
}
