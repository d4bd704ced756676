"""Known-wrong answers to the matmul chapter's exercises: matmul_bias_relu(a, b, bias, c) and
matmul_at(a, b, c)."""
from __future__ import annotations

import numpy as np
from numba import cuda, float32

from lib.grading.variants._common import Variant, cover_2d, f32, fill_adds, unwritten

BLOCK = 16
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


def _launcher(kernel, fixed=False):
    def fn(*args):
        c = args[-1]
        if fixed:
            kernel[FIXED_GRID, FIXED_BLOCK](*args)
        else:
            grid, block = _grid_for(c)
            kernel[grid, block](*args)
    fn.__name__ = f"launch_{kernel.__name__}"
    return fn


# --- matmul_bias_relu: c = max(a @ b + bias, 0), bias (N,) ---------------------------------------------------------
@cuda.jit
def bias_relu_right(a, b, bias, c):
    """c = max(a @ b + bias, 0), one thread per element, x along the columns.

    Memory: a warp reads one element of a (broadcast), 32 consecutive elements of b per step of K, and 32
    consecutive biases once.
    Launch: 2-D, x over c's columns, y over its rows; threads past c do nothing.
    """
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[1]):
            acc += a[row, p] * b[p, col]
        c[row, col] = max(acc + bias[col], float32(0.0))


@cuda.jit
def bias_relu_no_relu(a, b, bias, c):
    """c = a @ b + bias: the ReLU is missing, negative values stay.

    Memory: as bias_relu_right.
    Launch: 2-D, x over c's columns, y over its rows.
    """
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[1]):
            acc += a[row, p] * b[p, col]
        c[row, col] = acc + bias[col]


@cuda.jit
def bias_relu_relu_first(a, b, bias, c):
    """c = max(a @ b, 0) + bias: the ReLU applied before the bias is added.

    Memory: as bias_relu_right.
    Launch: 2-D, x over c's columns, y over its rows.
    """
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[1]):
            acc += a[row, p] * b[p, col]
        c[row, col] = max(acc, float32(0.0)) + bias[col]


@cuda.jit
def bias_relu_bias_by_row(a, b, bias, c):
    """c = max(a @ b + bias[row], 0): the bias indexed by the row instead of the column (an index error when
    there are more rows than columns).

    Memory: as bias_relu_right.
    Launch: 2-D, x over c's columns, y over its rows.
    """
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[1]):
            acc += a[row, p] * b[p, col]
        c[row, col] = max(acc + bias[row], float32(0.0))


@cuda.jit
def bias_relu_k_one_short(a, b, bias, c):
    """c = max(a[:, :K-1] @ b[:K-1] + bias, 0): the dot product's loop stops one short.

    Memory: as bias_relu_right, K - 1 steps.
    Launch: 2-D, x over c's columns, y over its rows.
    """
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[1] - 1):
            acc += a[row, p] * b[p, col]
        c[row, col] = max(acc + bias[col], float32(0.0))


def _relu(x):
    return np.maximum(x, 0.0)


def _ab(a, b):
    a, b = _f64(a, b)
    return a @ b


def _bias(bias):
    return np.asarray(bias, np.float64)


def _bias_by_row_model(a, b, bias, launches, fill=np.nan):
    m = a.shape[0]
    if m > bias.size:
        return None  # the kernel reads past the bias: an index error, not an output
    return f32(_relu(_ab(a, b) + _bias(bias)[:m, None]))


# --- matmul_at: c = a.T @ b, a (K, M) ---------------------------------------------------------------------------
@cuda.jit
def matmul_at_right(a, b, c):
    """c = a.T @ b, one thread per element, x along the columns.

    Memory: a warp reads one element of a (broadcast: a[p, row] is the same for the warp's lanes) and 32
    consecutive elements of b per step of K.
    Launch: 2-D, x over c's columns, y over its rows; threads past c do nothing.
    """
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[0]):
            acc += a[p, row] * b[p, col]
        c[row, col] = acc


@cuda.jit
def matmul_at_as_mk(a, b, c):
    """c = A @ b where A is a's memory read as an (M, K) matrix: a indexed as if it were not transposed.

    Memory: a read through a flat index (an integer division per term).
    Launch: 2-D, x over c's columns, y over its rows.
    """
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[0]):
            k = row * a.shape[0] + p
            acc += a[k // a.shape[1], k % a.shape[1]] * b[p, col]
        c[row, col] = acc


@cuda.jit
def matmul_at_swapped_xy(a, b, c):
    """c[row, col] with row, col = cuda.grid(2): row runs along x, which the launch spreads over the columns.

    Memory: a warp reads 32 consecutive elements of a's row p and one element of b per step.
    Launch: 2-D, x over c's columns, y over its rows.
    """
    row, col = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[0]):
            acc += a[p, row] * b[p, col]
        c[row, col] = acc


@cuda.jit
def matmul_at_k_one_short(a, b, c):
    """c = a[:K-1].T @ b[:K-1]: the dot product's loop stops one short.

    Memory: as matmul_at_right, K - 1 steps.
    Launch: 2-D, x over c's columns, y over its rows.
    """
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[0] - 1):
            acc += a[p, row] * b[p, col]
        c[row, col] = acc


@cuda.jit
def matmul_at_added_into_c(a, b, c):
    """c[row, col] += the dot product: c was never set to 0 first.

    Memory: as matmul_at_right, plus a read of c.
    Launch: 2-D, x over c's columns, y over its rows.
    """
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for p in range(a.shape[0]):
            acc += a[p, row] * b[p, col]
        c[row, col] += acc


def _atb(a, b):
    a, b = _f64(a, b)
    return a.T @ b


def _dot32_at(a, b):
    """a.T @ b as one thread per element computes it: float32 products added in order of K, in float32 (the
    float64 product when that would take too much memory; a GPU may fuse the multiply-add anyway)."""
    k, m = a.shape
    if m * k * b.shape[1] > 20_000_000:
        return f32(_atb(a, b))
    products = np.float32(a).T[:, :, None] * np.float32(b)[None, :, :]
    return np.add.accumulate(products, axis=1, dtype=np.float32)[:, -1].astype(np.float64)


VARIANTS = {
    "matmul_bias_relu": [
        Variant("ReLU missing",
                "negative outputs were kept: apply the ReLU last, c = max(acc + bias[col], 0)",
                lambda a, b, bias, launches, fill=np.nan: f32(_ab(a, b) + _bias(bias)[None, :]),
                _launcher(bias_relu_no_relu)),
        Variant("ReLU before the bias",
                "the ReLU was applied before the bias was added, so outputs can be negative: add the bias to the "
                "dot product first, then take max(..., 0)",
                lambda a, b, bias, launches, fill=np.nan: f32(_relu(_ab(a, b)) + _bias(bias)[None, :]),
                _launcher(bias_relu_relu_first)),
        Variant("bias indexed by the row",
                "the bias was indexed by the row: bias has one value per column of c (N of them), added to every "
                "row, so element (row, col) takes bias[col]",
                _bias_by_row_model, _launcher(bias_relu_bias_by_row)),
        Variant("K loop one short",
                "every element misses the last term of its dot product: loop over all K (range(K))",
                lambda a, b, bias, launches, fill=np.nan: f32(_relu(_ab(a[:, :-1], b[:-1]) + _bias(bias)[None, :])),
                _launcher(bias_relu_k_one_short)),
        Variant("launch does not cover c",
                "elements of c outside the grid you launched were never computed: compute the grid from c's "
                "shape, blocks = ((N + bx - 1) // bx, (M + by - 1) // by)",
                lambda a, b, bias, launches, fill=np.nan: _covered(_relu(_ab(a, b) + _bias(bias)[None, :]),
                                                                   launches, fill),
                _launcher(bias_relu_right, fixed=True)),
    ],
    "matmul_at": [
        Variant("a read as (M, K)",
                "a was indexed as a[row, p], as if it were stored (M, K): here a is (K, M), so the dot product of "
                "c[row, col] is a[p, row] * b[p, col]",
                lambda a, b, launches, fill=np.nan: f32(_ab(np.asarray(a).ravel().reshape(a.shape[1], a.shape[0]), b)),
                _launcher(matmul_at_as_mk)),
        Variant("launch does not cover c",
                "elements of c outside the grid you launched were never computed: compute the grid from c's "
                "shape, blocks = ((N + bx - 1) // bx, (M + by - 1) // by)",
                lambda a, b, launches, fill=np.nan: _covered(_atb(a, b), launches, fill),
                _launcher(matmul_at_right, fixed=True)),
        Variant("x and y swapped",
                "cuda.grid(2) returns (x, y) and your launch spreads x over the columns, but the kernel used x as "
                "the row index: write col, row = cuda.grid(2)",
                lambda a, b, launches, fill=np.nan: _swapped(_atb(a, b), launches, fill),
                _launcher(matmul_at_swapped_xy)),
        Variant("K loop one short",
                "every element misses the last term of its dot product: loop over all K (range(K))",
                lambda a, b, launches, fill=np.nan: f32(_atb(a[:-1], b[:-1])),
                _launcher(matmul_at_k_one_short)),
        Variant("added into c",
                "the products were added into c (c[row, col] += ...) but c starts as garbage: store them",
                lambda a, b, launches, fill=np.nan: fill_adds(_dot32_at(a, b), fill),
                _launcher(matmul_at_added_into_c)),
    ],
}
