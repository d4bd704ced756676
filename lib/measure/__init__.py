"""Layer 3, measuring: the one timer (:mod:`~lib.measure.timing`), clocks (:mod:`~lib.measure.clocks`),
ladders declared as data and their runner, which checks before it times (:mod:`~lib.measure.bench`),
recorded results in ``data/`` (:mod:`~lib.measure.results`), Nsight Compute (:mod:`~lib.measure.ncu`) and
PTX/SASS listings (:mod:`~lib.measure.ptx`)."""
