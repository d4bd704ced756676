"""Layer 2, checking and grading: exercise and variant records and tolerances (:mod:`~lib.grading.spec`),
comparisons with a float64 reference (:mod:`~lib.grading.check`), the exercise registry
(:mod:`~lib.grading.exercises`), known-wrong variants (:mod:`~lib.grading.variants`), the memory tracer
(:mod:`~lib.grading.tracer`) and the grader (:mod:`~lib.grading.grader`: ``grade`` and instructor mode).
The ladders of :mod:`lib.measure` check every rung with the same comparisons before timing it."""
