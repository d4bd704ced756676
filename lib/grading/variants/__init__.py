"""Known-wrong answers to every graded exercise, so the grader can name a student's mistake.

``VARIANTS[exercise_id]`` lists :class:`lib.grading.exercises.Variant` records, at least four per exercise: the
classic misconceptions (a scan with no carry between blocks, blocks that store into out[0], a launch that
ignores the size, rows and columns swapped, a wrong identity, exp without the maximum subtracted, a missing
rescale, ...). Each has

* ``kernel``: the mistake written the way a student would, ``fn(*inputs, out)`` launching its own kernels;
* ``model(*inputs, launches, fill=nan)``: what that mistake outputs on these inputs, computed on the host
  from the inputs and the launch configuration the student used (block size, grid), so that the grader can
  say "your output is exactly what <mistake> gives" (see :mod:`lib.grading.variants._common` for the contract).

Some mistakes have no single output. :data:`RACES` names the variants whose result on a GPU depends on timing
(a non-atomic ``out[0] += x[i]``, a missing barrier): their model is None and, on the simulator, the
debugger (:mod:`lib.runtime.simdebug`) reports the race instead. :data:`SIMULATOR_ONLY_MODELS` names the variants
whose model is what the simulator does with behaviour a GPU leaves undefined (a shuffle from a lane that
has exited yields NaN there) or with an order a GPU does not promise (the order in which atomics add
block partials into a start value that was never zeroed: the simulator's is one seeded order).
:data:`MAY_PASS_ON_A_GPU` names undefined behaviour that a GPU may happen to run right (the shuffle from an
exited lane gave the right sums on an H200): only the simulator shows it. :data:`DIAGNOSED` maps the variants
that produce no output on the simulator, because it stops them with a report (a broken mbarrier protocol: a
deadlock naming each barrier's phase, arrivals and missing bytes, or a parity that does not flip), to the
phrases (regular expressions) that report must contain; :data:`NOT_ON_A_GPU` names those a GPU would hang
on, which its checks leave out.

The modules follow the chapters; each defines its own ``VARIANTS`` and this one merges them.
"""
from __future__ import annotations

from lib.grading.variants import (attention, flash3, hardware, hopper, intro, matmul, memory, reduction, scan,
                                  softmax, tensorcores)
from lib.grading.variants._common import Variant

VARIANTS: dict[str, list[Variant]] = {}
RACES: set[tuple[str, str]] = set()
SIMULATOR_ONLY_MODELS: set[tuple[str, str]] = set()
MAY_PASS_ON_A_GPU: set[tuple[str, str]] = set()
DIAGNOSED: dict[tuple[str, str], tuple[str, ...]] = {}
NOT_ON_A_GPU: set[tuple[str, str]] = set()
for _module in (intro, hardware, memory, matmul, reduction, scan, softmax, attention, tensorcores, hopper, flash3):
    VARIANTS.update(_module.VARIANTS)
    RACES.update(getattr(_module, "RACES", ()))
    SIMULATOR_ONLY_MODELS.update(getattr(_module, "SIMULATOR_ONLY_MODELS", ()))
    MAY_PASS_ON_A_GPU.update(getattr(_module, "MAY_PASS_ON_A_GPU", ()))
    DIAGNOSED.update(getattr(_module, "DIAGNOSED", {}))
    NOT_ON_A_GPU.update(getattr(_module, "NOT_ON_A_GPU", ()))

__all__ = ["Variant", "VARIANTS", "RACES", "SIMULATOR_ONLY_MODELS", "MAY_PASS_ON_A_GPU", "DIAGNOSED", "NOT_ON_A_GPU"]
