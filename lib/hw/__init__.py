"""Layer 0, hardware facts and models, no numba: the GPUs' specifications (:mod:`~lib.hw.specs`), occupancy
(:mod:`~lib.hw.occupancy`), the roofline (:mod:`~lib.hw.roofline`), shared-memory banks
(:mod:`~lib.hw.banks`) and the GPU diagram (:mod:`~lib.hw.gpu_diagram`). Importable anywhere: widgets,
tests, the site."""
