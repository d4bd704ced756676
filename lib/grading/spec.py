"""The records that describe an exercise: its tolerance, its known-wrong variants, its performance
property and the exercise itself. No registry here (:mod:`lib.grading.exercises`) and no variants
(:mod:`lib.grading.variants`): both import these records, so neither imports the other."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    """|actual - expected| <= rtol * scale + atol, element by element; `note` says where the bound comes
    from (shown in the report)."""
    rtol: float | np.ndarray
    atol: float | np.ndarray = 0.0
    scale: np.ndarray | None = None  # None: |expected|
    note: str = ""

    def describe(self, expected=None) -> str:
        """The bound in a few words, with its largest value when the reference is given."""
        parts = [self.note] if self.note else []
        if expected is not None:
            scale = np.abs(np.asarray(expected, np.float64)) if self.scale is None else self.scale
            with np.errstate(invalid="ignore"):
                bound = np.broadcast_to(np.asarray(self.rtol) * scale + self.atol, np.shape(expected))
            finite = bound[np.isfinite(bound)]
            if finite.size:
                parts.append(f"|error| <= {float(finite.max()):.2g} at most")
        elif np.ndim(self.rtol) == 0 and np.ndim(self.atol) == 0:
            parts.append(f"rtol {float(self.rtol):.2g}, atol {float(self.atol):.2g}")
        return "; ".join(parts)


@dataclass(frozen=True)
class Variant:
    """A known-wrong way to solve an exercise, so the grader can name the mistake when a student's output
    equals what this mistake produces."""
    name: str            # e.g. "no carry between blocks"
    mistake: str         # the sentence shown to the student
    model: Callable      # model(*inputs, launches, fill=nan) -> np.ndarray | None: the output this mistake
                         # produces on these inputs (None: cannot say for this launch); launches: the
                         # grader's launch dicts; fill: what out held before (NaN, then the grader's
                         # SENTINEL on a second run); a model without `fill` is asked for NaN only
    kernel: Callable     # a student-style wrong function fn(*inputs, out), for the tests


@dataclass(frozen=True)
class Perf:
    """A performance property of an exercise, graded without a GPU: the student's function runs once more, at
    `size`, on the simulator under :mod:`lib.grading.tracer`, and its requests are compared with the ideal ones, as
    ratios (so any correct design that moves no more than the ideal, within the tolerance, passes):

    * `coalesced`: for every global load/store site (a source line's access), sectors touched / the sectors
      the same bytes need when contiguous, at most this ratio;
    * `conflicts`: for every shared-memory site, wavefronts / the wavefronts its bytes need, at most this;
    * `read_ratio` with `read_bytes(*inputs)`: bytes all global loads asked for / the ideal bytes read
      (`read_bytes` is the least a correct answer reads: fewer traced bytes fail, since the work must be
      done by traced loads of the student's kernels, not on the host).

    `gates`: a property that fails (✗) fails the grade (stated in the exercise's text); otherwise it is only
    reported. On a GPU the property is not checked (the tracer needs the simulator) and the report says so.
    """
    size: tuple
    coalesced: float | None = None
    conflicts: float | None = None
    read_ratio: float | None = None
    read_bytes: Callable | None = None
    gates: bool = True
    note: str = ""


@dataclass(frozen=True)
class Exercise:
    id: str
    signature: str                                  # shown in reports, e.g. "vector_add(a, b, out)"
    task: str                                       # one sentence
    make_inputs: Callable[[tuple, np.random.Generator], tuple]
    out_shape: Callable[..., tuple]                 # from the inputs
    reference: Callable[..., np.ndarray]            # float64
    tolerance: Callable[..., Tolerance]             # tolerance(*inputs, expected, launch=None): launch is
                                                    # {"threads", "block_threads"} of the student's widest
                                                    # launch (the error model's structure), None if unknown
    sim_cases: tuple                                # size parameters, small (the planner grows them)
    gpu_cases: tuple
    grow: Callable[[tuple, float], tuple] = None    # a larger size: the parallel dimensions times a factor
    sim_work: int | None = None                     # the largest grown size the simulator checks, as the product
                                                    # of its dimensions (the planner's "work"): about 4 s of the
                                                    # book's solution on a 2-core machine (lib.grading.grader.cases);
                                                    # required to grade on the simulator
    time_limit_s: float = 60.0
    perf: Perf | None = None                        # a performance property graded on the simulator

    @property
    def names(self) -> list[str]:
        """The argument names of the signature, e.g. ['a', 'b', 'out']."""
        return self.signature[self.signature.index("(") + 1:-1].split(", ")
