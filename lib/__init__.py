"""The book's shared machinery. ``import lib`` is the first cell of every chapter.

It decides, once per process, whether kernels run on a CUDA GPU or on numba's CUDA simulator
(:mod:`lib.mode`), prints which, and installs the runtime's hooks (:mod:`lib.runtime`). The library is
layered; each layer imports only the layers before it (``tests/test_layers.py`` keeps it so):

============  =======================================================================================
``lib.mode``     GPU or simulator, the doctor that explains a broken CUDA stack, ``ROOT``/``DATA``/``CACHE``
``lib.hw``       hardware facts and models, no numba: GPU specs, occupancy, roofline, shared-memory banks
``lib.runtime``  what a kernel needs to run on either side: the simulator and its debugger, the GPU-compile
                 check, launch accounting, 16-byte loads/stores, tensor-core intrinsics with their twins
``lib.grading``  exercise records, checks and tolerances, the exercise registry, known-wrong variants, the
                 memory tracer and the grader (``grade``, instructor mode)
``lib.measure``  the timer, clocks, ladders (check, then time), recorded results, Nsight Compute, PTX/SASS
``lib.widgets``  the interactive figures (a Python model beside each JavaScript file)
============  =======================================================================================

The commands (``make record``, ``make student``, the notebook runner, the simulator's benchmark) live in
``tools/``, outside the library: they are the only code besides the chapters that imports ``kernels/``.
Module paths of earlier editions (``lib.measure.bench``, ``lib.grading.grader``, ``lib.hw.specs`` ...) still import, as the
same modules (:mod:`lib.aliases`).
"""
from __future__ import annotations

from lib import aliases as _aliases

_aliases.install()

from lib import mode  # noqa: E402  (decides GPU or simulator before numba.cuda is imported)
from lib.mode import (CACHE, COMPILE_ONLY, DATA, DEVICE_NAME, FALLBACK, ON_GPU, ROOT, SIMULATOR,  # noqa: E402
                      banner, cuda, diagnose, pick)
from lib import runtime as _runtime  # noqa: E402

if not COMPILE_ONLY:
    print(banner())
_runtime.install()

__all__ = ["ROOT", "DATA", "SIMULATOR", "ON_GPU", "DEVICE_NAME", "cuda", "pick", "banner", "grade", "stub"]


def __getattr__(name: str):
    """``lib.grade`` and ``lib.stub`` load the grader on first use (instructor mode swaps ``grade`` inside
    the sandbox, so it is looked up each time); ``lib.<old module>`` imports a module of an earlier edition."""
    if name in ("grade", "stub"):
        from lib.grading import grader

        return getattr(grader, name)
    if f"{__name__}.{name}" in _aliases.OLD_PATHS:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'lib' has no attribute {name!r}")
