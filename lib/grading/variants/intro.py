"""Known-wrong answers to the intro chapter's exercises: vector_add(a, b, out) (the set-up page's check) and
add_reversed(a, b, out)."""
from __future__ import annotations

import numpy as np
from numba import cuda

from lib.grading.variants._common import Variant, dims, f32, fill_adds, own_launches, threads_1d, unwritten

THREADS = 256


@cuda.jit
def add_guarded(a, b, out):
    """out[i] = a[i] + b[i] where a thread exists for i.

    Memory: two coalesced reads and one write per element reached.
    Launch: 1-D, any size; elements past the launch's threads are left alone.
    """
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def vector_add_rounded_down(a, b, out):
    add_guarded[out.size // THREADS, THREADS](a, b, out)


def _covered_model(a, b, launches, fill=np.nan):
    reach = threads_1d(launches)
    if reach is None:
        return None
    out = unwritten(a.shape, fill)
    out[:reach] = f32(a[:reach].astype(np.float32) + b[:reach])
    return out


@cuda.jit
def add_last_dropped(a, b, out):
    """out[i] = a[i] + b[i] for i < n - 1: the guard is one short.

    Memory: two coalesced reads and one write per element but the last.
    Launch: 1-D, one thread per element (rounded up).
    """
    i = cuda.grid(1)
    if i < out.size - 1:
        out[i] = a[i] + b[i]


def vector_add_last_dropped(a, b, out):
    add_last_dropped[(out.size + THREADS - 1) // THREADS, THREADS](a, b, out)


def _last_dropped_model(a, b, launches, fill=np.nan):
    out = f32(a + b)
    out[-1] = fill
    return out


@cuda.jit
def add_thread_index_only(a, b, out):
    """out[i] = a[i] + b[i] with i = threadIdx.x: every block writes the first blockDim elements.

    Memory: every block reads and writes the same first blockDim elements.
    Launch: 1-D, one thread per element (rounded up); only the first blockDim elements are reached.
    """
    i = cuda.threadIdx.x
    if i < out.size:
        out[i] = a[i] + b[i]


def vector_add_thread_index_only(a, b, out):
    add_thread_index_only[(out.size + THREADS - 1) // THREADS, THREADS](a, b, out)


def _thread_index_model(a, b, launches, fill=np.nan):
    mine = own_launches(launches)
    if not mine:
        return None
    block = max(int(np.prod(dims(r)[1])) for r in mine)
    out = unwritten(a.shape, fill)
    out[:block] = f32(a[:block].astype(np.float32) + b[:block])
    return out


STRIDE_BLOCKS = 2


@cuda.jit
def add_stride_from_thread(a, b, out):
    """A grid-stride loop that starts at threadIdx.x instead of cuda.grid(1): the elements whose offset in
    each stride is past blockDim are never written.

    Memory: the blocks read and write the same elements; the others are never touched.
    Launch: 1-D, any grid; the loop steps by the whole grid.
    """
    for i in range(cuda.threadIdx.x, out.size, cuda.gridsize(1)):
        out[i] = a[i] + b[i]


def vector_add_stride_from_thread(a, b, out):
    add_stride_from_thread[STRIDE_BLOCKS, THREADS](a, b, out)


def _stride_model(a, b, launches, fill=np.nan):
    mine = own_launches(launches)
    if not mine:
        return None
    grid, block = dims(mine[0])
    stride, width = int(np.prod(grid) * np.prod(block)), int(np.prod(block))
    out = unwritten(a.shape, fill)
    reached = (np.arange(a.size) % stride) < width
    out[reached] = f32(a[reached].astype(np.float32) + b[reached])
    return out


@cuda.jit
def add_into_out(a, b, out):
    """out[i] += a[i] + b[i]: adds into whatever out held.

    Memory: three reads (a, b and out) and one write per element.
    Launch: 1-D, one thread per element (rounded up).
    """
    i = cuda.grid(1)
    if i < out.size:
        out[i] += a[i] + b[i]


def vector_add_into_out(a, b, out):
    add_into_out[(out.size + THREADS - 1) // THREADS, THREADS](a, b, out)


# --- add_reversed: out[i] = a[i] + b[n - 1 - i] ---------------------------------------------------------------
def _sum_at(a, b, b_index, fill):
    """a[i] + b[b_index[i]] (float32) where b_index[i] >= 0; `fill` where it is -1 (never written)."""
    out = unwritten(a.shape, fill)
    ok = b_index >= 0
    out[ok] = f32(np.asarray(a, np.float32)[ok] + np.asarray(b, np.float32)[b_index[ok]])
    return out


@cuda.jit
def reversed_not_reversed(a, b, out):
    """out[i] = a[i] + b[i]: b read front to back.

    Memory: two coalesced reads and one write per element.
    Launch: 1-D, one thread per element (rounded up).
    """
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


@cuda.jit
def reversed_a_not_b(a, b, out):
    """out[i] = a[n - 1 - i] + b[i]: the wrong operand reversed.

    Memory: two coalesced reads (one of them back to front) and one write per element.
    Launch: 1-D, one thread per element (rounded up).
    """
    i = cuda.grid(1)
    n = out.size
    if i < n:
        out[i] = a[n - 1 - i] + b[i]


@cuda.jit
def reversed_within_block(a, b, out):
    """out[i] = a[i] + b[j] with j the mirror of i inside its own block: each block's slice of b reversed,
    not the whole array; a thread whose mirror lies past the end writes nothing.

    Memory: two coalesced reads and one write per element.
    Launch: 1-D, one thread per element (rounded up).
    """
    i = cuda.grid(1)
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.blockDim.x - 1 - cuda.threadIdx.x
    if i < out.size and j < out.size:
        out[i] = a[i] + b[j]


@cuda.jit
def reversed_one_off(a, b, out):
    """out[i] = a[i] + b[n - i]: the mirror index is one too large; the guard keeps b[n] out, so out[0] is
    never written and every other element takes its neighbour's partner.

    Memory: two coalesced reads and one write per element but the first.
    Launch: 1-D, one thread per element (rounded up).
    """
    i = cuda.grid(1)
    n = out.size
    if i < n and n - i < n:
        out[i] = a[i] + b[n - i]


@cuda.jit
def reversed_right(a, b, out):
    """out[i] = a[i] + b[n - 1 - i].

    Memory: two coalesced reads (b's warp reads 32 neighbours in descending order) and one write per element.
    Launch: 1-D, any size; elements past the launch's threads are left alone.
    """
    i = cuda.grid(1)
    n = out.size
    if i < n:
        out[i] = a[i] + b[n - 1 - i]


def _one_per_thread(kernel):
    def fn(a, b, out):
        kernel[(out.size + THREADS - 1) // THREADS, THREADS](a, b, out)
    fn.__name__ = f"launch_{kernel.__name__}"
    return fn


def add_reversed_rounded_down(a, b, out):
    reversed_right[out.size // THREADS, THREADS](a, b, out)


def _mirror(n):
    return np.arange(n)[::-1].copy()


def _within_block_model(a, b, launches, fill=np.nan):
    mine = own_launches(launches)
    if not mine:
        return None
    block = int(np.prod(dims(mine[0])[1]))
    i = np.arange(a.size)
    j = (i // block) * block + block - 1 - i % block
    return _sum_at(a, b, np.where(j < a.size, j, -1), fill)


def _reversed_covered_model(a, b, launches, fill=np.nan):
    reach = threads_1d(launches)
    if reach is None:
        return None
    j = _mirror(a.size)
    j[reach:] = -1
    return _sum_at(a, b, j, fill)


VARIANTS = {"vector_add": [
    Variant("launch does not cover the array",
            "elements past the threads you launched were never written: round the block count up, "
            "(n + threads - 1) // threads, so the last partial block is launched too",
            _covered_model, vector_add_rounded_down),
    Variant("last element dropped",
            "only the last element is missing: the bounds guard is one short (use `if i < n`, not `i < n - 1`)",
            _last_dropped_model, vector_add_last_dropped),
    Variant("threadIdx instead of the global index",
            "only the first block's worth of elements was written: every block used threadIdx.x as the "
            "element index; use i = cuda.grid(1) (blockIdx.x * blockDim.x + threadIdx.x)",
            _thread_index_model, vector_add_thread_index_only),
    Variant("grid-stride loop starts at threadIdx.x",
            "the grid-stride loop starts each thread at threadIdx.x, so every block covers the same elements "
            "and most are never written: start at cuda.grid(1) and step by cuda.gridsize(1)",
            _stride_model, vector_add_stride_from_thread),
    Variant("added into out",
            "the kernel adds into out (out[i] += ...) but out starts as garbage: store the result (out[i] = ...)",
            lambda a, b, launches, fill=np.nan: fill_adds(np.float32(a) + np.float32(b), fill),
            vector_add_into_out),
],
    "add_reversed": [
    Variant("b not reversed",
            "b was read front to back: out[i] needs b[n - 1 - i], the element as far from b's end as i is from "
            "its start",
            lambda a, b, launches, fill=np.nan: _sum_at(a, b, np.arange(a.size), fill),
            _one_per_thread(reversed_not_reversed)),
    Variant("a reversed instead of b",
            "a was read back to front and b front to back: reverse b, not a (out[i] = a[i] + b[n - 1 - i])",
            lambda a, b, launches, fill=np.nan: _sum_at(b, a, _mirror(a.size), fill),
            _one_per_thread(reversed_a_not_b)),
    Variant("reversed within each block",
            "each block reversed its own slice of b: the mirror index must come from the array's length, "
            "n - 1 - i with i = cuda.grid(1), not from blockDim and threadIdx",
            _within_block_model, _one_per_thread(reversed_within_block)),
    Variant("mirror index one off",
            "out[i] took b[n - i], one past its partner (and out[0] was never written): the last index is n - 1, "
            "so the mirror of i is n - 1 - i",
            lambda a, b, launches, fill=np.nan: _sum_at(a, b, np.concatenate([[-1], np.arange(a.size - 1, 0, -1)])
                                                        .astype(np.int64), fill),
            _one_per_thread(reversed_one_off)),
    Variant("launch does not cover the array",
            "elements past the threads you launched were never written: round the block count up, "
            "(n + threads - 1) // threads, so the last partial block is launched too",
            _reversed_covered_model, add_reversed_rounded_down),
]}
