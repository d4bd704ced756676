"""Comparing a kernel's output with a float64 reference, and saying precisely where it went wrong.

Tolerances come from float32 error analysis. Every float32 addition rounds its result s to within
u·|s| (u = 2^-24); the rounding errors of a sum are many, small and of either sign, so their total stays
within a few times u·sqrt(Σ s²) over the additions that produced the output (the probabilistic bound of
Higham and Mary; the worst case u·Σ|s| is far too loose to catch a lost block). For sums and scans
:func:`prefix_sum_rounding` computes sqrt(Σ s²) on the actual inputs for the structure the student's
launch implies: each thread adds its share of the elements one after another, then the per-thread partials
are combined one after another (the order of atomics into one address; any tree is more accurate). The
tolerance is ``SAFETY`` times that, so a lost block, a lost partial or an element off by its own size
stays far outside it even at 2^28 elements. Outputs with a dot product or a row sum inside (matmul,
softmax, attention) use the K-scaled rule: an output that sums K float32 terms may be off by about sqrt(K)
roundings of its conditioning scale, ``rtol = max(1e-5, 4 * 2**-23 * sqrt(K))``, the scale being the sum
of |terms| (a correct float32 sum of terms that nearly cancel can be far from the exact sum relative to the
sum itself, yet tiny relative to the terms).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

EPS32 = 2.0 ** -23           # float32 machine epsilon (one ulp at 1)
U32 = 2.0 ** -24             # float32 unit roundoff: one rounding errs by at most U32 * |result|
SAFETY = 6.0                 # standard deviations of the rounding-error model a correct kernel may reach


def prefix_sum_rounding(x: np.ndarray, per_thread: int = 1) -> np.ndarray:
    """sqrt(Σ s²) over the additions behind each prefix sum of the 1-D array x, in float64.

    Model: consecutive chunks of `per_thread` elements are each added up one after another (a thread's
    loop), and the chunk totals are then added up one after another (atomics into one address, or a
    decoupled look-back); and each output may go through ceil(log2 n) + 1 more additions at its own magnitude
    (the levels of a tree scan, the add of a carry).
    Every output counts all the additions it depends on: its chunk's partials up to it, and every earlier
    chunk's partials and carries. With per_thread = 1 this is one sequential pass over every element: the
    loosest model. Trees (shared memory, shuffles) add fewer partials of similar size. O(n) time and memory.
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    n = x.size
    if n == 0:
        return np.zeros(0)
    c = int(min(max(per_thread, 1), n))
    local = np.concatenate([x, np.zeros(-n % c)]).reshape(-1, c)
    np.cumsum(local, axis=1, out=local)                 # each chunk's running partials
    local_sq = np.cumsum(local * local, axis=1)
    carries = np.cumsum(local[:, -1])                    # the running total after each chunk
    # an output after chunk m inherits the rounding of every addition that made the carry: each earlier
    # chunk's own partials and each earlier carry
    earlier = local_sq[:, -1] + carries ** 2
    carry_sq = np.concatenate([[0.0], np.cumsum(earlier[:-1])])
    before = np.concatenate([[0.0], carries[:-1]])
    local += before[:, None]                             # the outputs themselves
    depth = math.ceil(math.log2(n)) + 1                  # a tree passes each output through this many adds
    local_sq += carry_sq[:, None] + depth * (local * local)
    return np.sqrt(local_sq.ravel()[:n])


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
    n_unwritten: int          # NaN outputs where the reference is finite (never written, unless a second
                              # run with another fill showed that they were written: then n_nonfinite)
    wrong_mask: np.ndarray    # bool, output shape
    n_nonfinite: int = 0      # NaN/inf the kernel computed and wrote (known from a second run)
    n_read_out: int = 0       # elements whose value depends on what out held before (added into, not set)

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
    """A guess at the cause from the pattern of wrong elements."""
    mask = mismatch.wrong_mask
    wrong = mask.ravel()
    n = wrong.size
    if mismatch.n_read_out:
        return (f"{mismatch.n_read_out} elements depend on what `out` held before your function ran (it "
                "starts as garbage: NaN here): the kernel adds into it without setting it first. Store the "
                "result, or zero `out` before accumulating into it.")
    if mismatch.n_nonfinite:
        return (f"{mismatch.n_nonfinite} elements were computed as NaN or inf (they were written): look for "
                "exp() of a large number (subtract the maximum first), a division by zero, inf - inf, or a "
                "shuffle from a lane that has exited.")
    if mismatch.n_unwritten == n:
        return ("no element was written: is the kernel launched (kernel[blocks, threads](...)) with the output "
                "array, and does it store into it?")
    if mismatch.n_unwritten == mismatch.n_wrong:
        if mask.ndim == 2:
            rows = np.flatnonzero(mask.any(axis=1))
            cols = np.flatnonzero(mask.any(axis=0))
            if mask[rows[0]:, :].all() and rows[-1] == mask.shape[0] - 1:
                return (f"rows {rows[0]}..{mask.shape[0] - 1} of the output were never written: does the grid "
                        f"cover all {mask.shape[0]} rows (blocks rounded up along that axis)?")
            if mask[:, cols[0]:].all() and cols[-1] == mask.shape[1] - 1:
                return (f"columns {cols[0]}..{mask.shape[1] - 1} of the output were never written: does the "
                        f"grid cover all {mask.shape[1]} columns (blocks rounded up along that axis)?")
            return ("some elements were never written (they still hold NaN): check the index arithmetic (x runs "
                    "along columns, y along rows) and that every element is covered by exactly one thread.")
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
