"""The book's shared machinery. ``import lib`` is the first cell of every chapter.

On import it decides the mode, once per process:

* a CUDA GPU, if the driver answers and reports at least one device;
* otherwise numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), which must be switched on before
  ``numba.cuda`` is first imported, so this module does it before touching numba. The simulator gains
  warp intrinsics (see :mod:`lib.simulator`) and the chapters pick small sizes and print no timings.

``NUMBA_ENABLE_CUDASIM=1`` set by the caller forces the simulator even on a GPU machine.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"


def _driver_has_gpu() -> bool:
    """Ask the CUDA driver itself (no numba import) whether a device is usable."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            drv = ctypes.CDLL(name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        try:
            if drv.cuInit(0) != 0 or drv.cuDeviceGetCount(ctypes.byref(count)) != 0:
                return False
        except AttributeError:
            return False
        return count.value > 0
    return False


def _decide_mode() -> bool:
    """True for the simulator. Respects a mode already fixed by the caller or by an earlier import."""
    if "numba.cuda" in sys.modules:
        from numba.cuda.core import config  # numba.cuda is already imported: its mode is final

        return bool(config.ENABLE_CUDASIM)
    forced = os.environ.get("NUMBA_ENABLE_CUDASIM", "").strip()
    if forced not in ("", "0"):
        return True
    if forced == "" and not _driver_has_gpu():
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        return True
    return False


SIMULATOR: bool = _decide_mode()
ON_GPU: bool = not SIMULATOR

from numba import cuda  # noqa: E402  (after the mode is fixed)

if SIMULATOR:
    from . import simulator as _simulator

    _simulator.install()
    if importlib.util.find_spec(f"{__name__}.simdebug") is not None:  # the simulator's debugger
        from . import simdebug as _simdebug

        _simdebug.install()
    DEVICE_NAME = "CUDA simulator"
else:
    try:
        _name = cuda.get_current_device().name
    except Exception as exc:  # numba.cuda was imported before lib, in GPU mode, on a machine without one
        raise ImportError(
            "numba.cuda was imported before `import lib`, in GPU mode, and no GPU is usable "
            f"({type(exc).__name__}). Put `import lib` first (it switches on the simulator when there is no "
            "GPU), or set NUMBA_ENABLE_CUDASIM=1 before starting Python.") from None
    DEVICE_NAME = _name.decode() if isinstance(_name, bytes) else str(_name)


def pick(sim, gpu):
    """The value for this mode: small sizes on the simulator, full sizes on a GPU."""
    return sim if SIMULATOR else gpu


def banner() -> str:
    if SIMULATOR:
        return "lib: no CUDA GPU, kernels run on numba's CUDA simulator (small sizes, no timings)"
    return f"lib: running on {DEVICE_NAME} (full sizes, live timings)"


print(banner())

from . import launches as _launches  # noqa: E402

_launches.install()

from .grader import grade, stub  # noqa: E402  (the call every exercise cell uses)

__all__ = ["ROOT", "DATA", "SIMULATOR", "ON_GPU", "DEVICE_NAME", "cuda", "pick", "banner", "grade", "stub"]
