"""Known-wrong answers to the intro chapter's exercise: vector_add(a, b, out)."""
from __future__ import annotations

import numpy as np
from numba import cuda

from ._common import Variant, dims, f32, fill_adds, own_launches, threads_1d, unwritten

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
]}
