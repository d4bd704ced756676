"""Comparing a kernel's output with a float64 reference, and saying precisely where it went wrong.

Tolerance follows the depth of the reduction behind each output (the K-scaled rule): an output that sums K
float32 terms may be off by about sqrt(K) roundings, so ``rtol = max(1e-5, 4 * 2**-23 * sqrt(K))``. The
error is measured against the *conditioning scale* of the problem, not the result itself: for a sum it is
the sum of |terms| (a correct float32 sum of terms that nearly cancel can be far from the exact sum relative
to the sum itself, yet tiny relative to the terms). Each exercise supplies its scale.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EPS32 = 2.0 ** -23


def k_scaled_rtol(k: int) -> float:
    """Relative tolerance for outputs that accumulate `k` float32 terms."""
    return max(1e-5, 4 * EPS32 * float(np.sqrt(max(k, 1))))


@dataclass
class Mismatch:
    """The first wrong element and a summary of all of them."""
    index: tuple
    expected: float
    actual: float
    n_wrong: int
    n_total: int
    n_unwritten: int          # NaN outputs where the reference is finite (never written)
    wrong_mask: np.ndarray    # bool, output shape

    def where(self) -> str:
        if len(self.index) == 1:
            return f"index {self.index[0]}"
        if len(self.index) == 2:
            return f"row {self.index[0]}, column {self.index[1]}"
        return f"index {self.index}"

    def describe(self) -> str:
        return (f"{self.n_wrong} of {self.n_total} elements wrong; first at {self.where()}: expected "
                f"{self.expected:.7g}, got {self.actual:.7g}")


def compare(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float = 0.0,
            scale: np.ndarray | None = None) -> Mismatch | None:
    """None if every element satisfies |actual - expected| <= rtol * scale + atol, else the first failure.

    `scale` defaults to |expected|. Infinities must match exactly; a NaN expected value requires a NaN.
    """
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        raise ValueError(f"output shape {actual.shape} differs from the reference's {expected.shape}")
    scale = np.abs(expected) if scale is None else np.asarray(scale, dtype=np.float64)
    finite = np.isfinite(expected)
    with np.errstate(invalid="ignore", over="ignore"):
        close = finite & (np.abs(actual - expected) <= rtol * scale + atol)
    both_nan = np.isnan(actual) & np.isnan(expected)
    same_inf = np.isinf(expected) & (actual == expected)
    ok = close | both_nan | same_inf
    if ok.all():
        return None
    wrong = ~ok
    first = tuple(int(i) for i in np.argwhere(wrong)[0])
    unwritten = int((np.isnan(actual) & ~np.isnan(expected)).sum())
    return Mismatch(first, float(expected[first]), float(actual[first]), int(wrong.sum()), actual.size,
                    unwritten, wrong)


def hint(mismatch: Mismatch, block_hint: int | None = None) -> str:
    """A guess at the cause from the pattern of wrong elements (flat order)."""
    wrong = mismatch.wrong_mask.ravel()
    n = wrong.size
    if mismatch.n_unwritten == n:
        return ("no element was written: is the kernel launched (kernel[blocks, threads](...)) with the output "
                "array, and does it store into it?")
    if mismatch.n_unwritten == mismatch.n_wrong:
        idx = np.flatnonzero(wrong)
        if idx[-1] == n - 1 and idx.size == n - idx[0]:
            return (f"elements {idx[0]}..{n - 1} (the tail) were never written: does the grid cover all "
                    f"{n} elements? Round the block count up: (n + threads - 1) // threads.")
        return ("some elements were never written (they still hold NaN): check the index arithmetic and that "
                "every element is covered by exactly one thread.")
    if mismatch.n_unwritten:
        return (f"{mismatch.n_unwritten} elements were never written and others are wrong: check the indexing "
                "and the bounds guard.")
    if mismatch.n_wrong == 1 and n > 1:
        return "a single element is wrong: look at the boundary case at that index."
    return "values are written but wrong: check the arithmetic (and, for reductions, that every term is counted once)."
