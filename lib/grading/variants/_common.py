"""What every chapter's variants share: the Variant record, reading a launch, and the models' helpers.

A model is ``model(*inputs, launches, fill=nan)``: the output the mistake produces on these inputs, as float64
(elements the mistake never writes hold `fill`, the value the output held before the student's function ran:
the grader fills it with NaN, then with a sentinel). It returns None when it cannot say: a launch it does not
understand, or a mistake whose result depends on the fill being NaN (an output that adds into a NaN-filled
array is NaN, which is also what a kernel that never wrote gives: only the second fill tells them apart).
"""
from __future__ import annotations

import math

import numpy as np

from lib.grading.spec import Variant

__all__ = ["Variant", "dims", "own_launches", "widest", "threads_1d", "cover_2d", "chunk", "f32", "unwritten",
           "fill_adds", "EXP_OVERFLOW"]

# float32 exp overflows to inf above log(FLT_MAX) = 88.722839052... In float64: np.log of the float32 FLT_MAX
# returns a float32, 88.72283935546875, the very float32 whose exp overflows, which a model then took for
# finite (on the H200 two inputs of a 4096 × 4099 case were that value, and the model was ruled out).
EXP_OVERFLOW = math.log(float(np.finfo(np.float32).max))


def dims(launch) -> tuple[tuple, tuple]:
    """(grid, block) of a launch record (the grader's dict) or a lib.runtime.launches.Launch, each padded to 3."""
    grid = launch["grid"] if isinstance(launch, dict) else launch.grid
    block = launch["block"] if isinstance(launch, dict) else launch.block
    return tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block))


def own_launches(launches) -> list:
    """The launches of the student's own kernels (the book's, such as a scan it calls, left out)."""
    return [r for r in launches or () if not (r["book"] if isinstance(r, dict) else r.book)]


def widest(launches):
    """(grid, block) of the own launch with the most threads, or None when there is none."""
    mine = own_launches(launches)
    if not mine:
        return None
    return max((dims(r) for r in mine), key=lambda gb: math.prod(gb[0]) * math.prod(gb[1]))


def threads_1d(launches) -> int | None:
    """The threads of the widest own launch: the elements a one-element-per-thread kernel reaches."""
    gb = widest(launches)
    return None if gb is None else math.prod(gb[0]) * math.prod(gb[1])


def cover_2d(launches) -> tuple[int, int] | None:
    """(threads along x, threads along y) of the widest own launch."""
    gb = widest(launches)
    if gb is None:
        return None
    (gx, gy, _), (bx, by, _) = gb
    return gx * bx, gy * by


def chunk(n: int, launches) -> tuple[int, int] | None:
    """(blocks, elements per block) of a kernel that gives each thread of its widest launch the same number of
    consecutive elements: a block covers block_threads * ceil(n / all_threads) of them."""
    gb = widest(launches)
    if gb is None:
        return None
    blocks, block = math.prod(gb[0]), math.prod(gb[1])
    per_thread = max(1, -(-n // (blocks * block)))
    return blocks, block * per_thread


def f32(values) -> np.ndarray:
    """The float32 rounding of the model's values, back as float64 (overflow to inf, as the kernel would)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(values, np.float64).astype(np.float32).astype(np.float64)


def unwritten(shape, fill) -> np.ndarray:
    return np.full(shape, float(fill), dtype=np.float64)


def fill_adds(result, fill):
    """What adding `result` into an output that held `fill` gives, or None when the fill is NaN (then the
    output is NaN, the same as a kernel that never wrote: the model cannot tell them apart)."""
    if np.isnan(fill):
        return None
    return f32(np.float32(fill) + np.asarray(result, np.float32))
