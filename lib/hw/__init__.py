"""Layer 0, hardware facts and models, no numba: the GPUs' specifications (:mod:`~lib.hw.specs`), occupancy
(:mod:`~lib.hw.occupancy`), the roofline (:mod:`~lib.hw.roofline`), shared-memory banks
(:mod:`~lib.hw.banks`), the GPU diagram (:mod:`~lib.hw.gpu_diagram`) and where wgmma and TMA put each byte
(:mod:`~lib.hw.wgmma_layout`). Importable anywhere: widgets,
tests, the site."""
