"""How the book runs in this process: on a CUDA GPU, or on numba's CUDA simulator. Imported first by
``import lib``; it decides once, before numba.cuda is imported.

On import it decides the mode, once per process:

* a CUDA GPU, if the driver answers, reports at least one device, and numba can compile and run a tiny
  kernel on it (checked once in a short subprocess, see "the doctor" below);
* otherwise numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), which must be switched on before
  ``numba.cuda`` is first imported, so this module does it before touching numba. The simulator gains
  warp intrinsics (see :mod:`lib.runtime.simulator`), the debugger (:mod:`lib.runtime.simdebug`, where present) and a
  check that every launched kernel would also compile for a GPU (:mod:`lib.runtime.gpucompile`); the chapters pick
  small sizes and print no timings.

``NUMBA_ENABLE_CUDASIM=1`` set by the caller forces the simulator even on a GPU machine.

The doctor: the commonest failure on a fresh GPU machine or Colab is not the reader's code but the CUDA
stack (a toolkit newer than the driver, a missing library, numpy too new for numba-cuda). Since numba's
mode cannot change after it is imported, a GPU is first tried in a subprocess; if that fails, the reason is
recognised, the one-line fix printed, and the book falls back to the simulator instead of a traceback. A
success is remembered (per driver and installed packages) so later imports skip the probe.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
# Caches of the book's own checks (the doctor's probe, lib.runtime.gpucompile's compiled kernels).
CACHE = Path(os.environ.get("CUDA_BOOK_CACHE") or Path.home() / ".cache" / "cuda-book")
# Set by lib.runtime.gpucompile's helper process: numba compiles for a GPU that is not there (no launches).
COMPILE_ONLY = os.environ.get("CUDA_BOOK_COMPILE_ONLY") == "1"
NUMBA_CUDA_PIN = "0.30.4"


def _driver() -> tuple[int, int]:
    """(number of devices, the driver's CUDA version as 12040 for 12.4), from the driver itself, no numba."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            drv = ctypes.CDLL(name)
        except OSError:
            continue
        count, version = ctypes.c_int(0), ctypes.c_int(0)
        try:
            if drv.cuInit(0) != 0 or drv.cuDeviceGetCount(ctypes.byref(count)) != 0:
                return 0, 0
            drv.cuDriverGetVersion(ctypes.byref(version))
        except AttributeError:
            return 0, 0
        return count.value, version.value
    return 0, 0


# --- the doctor --------------------------------------------------------------------------------------

_PROBE = """
import numpy as np
from numba import cuda
@cuda.jit
def probe(x):
    x[cuda.grid(1)] += 1
x = cuda.to_device(np.zeros(32, np.float32))
probe[1, 32](x)
assert (x.copy_to_host() == 1).all(), "the probe kernel ran but computed a wrong result"
print("CUDA_BOOK_PROBE_OK")
"""
PROBE_TIMEOUT_S = 180


def _numba_cuda_extra(driver_version: int) -> str:
    major = driver_version // 1000
    extra = "cu13" if major >= 13 else "cu12"
    return f'pip install "numba-cuda[{extra}]=={NUMBA_CUDA_PIN}"'


def _cu13_nvvm_wheel() -> bool:
    """Is CUDA 13's NVVM installed as a pip wheel (requirements.txt brings it for the simulator's check)?"""
    return any(os.path.exists(os.path.join(p, "nvidia", "cu13", "lib", "libnvvm.so.4")) for p in sys.path if p)


def diagnose(output: str, driver_version: int) -> tuple[str, str]:
    """(what is wrong, the one-line fix) for a failed GPU probe's output."""
    major, minor = driver_version // 1000, driver_version % 1000 // 10
    driver = f"the driver supports CUDA {major}.{minor}" if driver_version else "the driver's CUDA version is unknown"
    reinstall = _numba_cuda_extra(driver_version)
    if 0 < driver_version < 12000:
        return (f"{driver}, older than numba-cuda {NUMBA_CUDA_PIN} needs (CUDA 12 or newer)",
                "update the NVIDIA driver to one for CUDA 12 or newer")
    if "row_stack" in output:
        import numpy

        return (f"numpy {numpy.__version__} removed np.row_stack, which numba-cuda {NUMBA_CUDA_PIN} calls",
                'pip install "numpy<2.5"')
    if "UNSUPPORTED_PTX_VERSION" in output or "unsupported toolchain" in output:
        fix = reinstall
        if major == 12 and _cu13_nvvm_wheel():  # found before the cu12 toolkit's NVVM, it makes PTX too new
            fix = f"pip uninstall -y nvidia-nvvm && {reinstall}"
        return (f"the CUDA toolkit numba uses is newer than the driver ({driver}): the driver cannot load its PTX",
                fix)
    if "INSUFFICIENT_DRIVER" in output or "driver version is insufficient" in output:
        return f"the CUDA libraries need a newer driver ({driver})", reinstall
    for library, words in (("nvJitLink", ("nvjitlink",)), ("NVVM", ("nvvm",)), ("libdevice", ("libdevice",)),
                           ("the CUDA runtime (cudart)", ("cudart",)), ("NVRTC", ("nvrtc",))):
        lowered = output.lower()
        if any(w in lowered for w in words) and any(
                s in lowered for s in ("not found", "cannot be found", "no such file", "failure finding",
                                       "could not", "unable to")):
            return f"{library} was not found: numba-cuda is installed without the CUDA libraries", reinstall
    last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "no output")
    return f"numba could not run a kernel on the GPU ({last[:160]})", reinstall


def _fingerprint(driver_version: int) -> str:
    """Changes when the driver, the interpreter or any installed package (a folder on sys.path) changes."""
    parts = [sys.executable, str(driver_version)]
    for entry in sys.path:
        if entry and os.path.isdir(entry) and Path(entry).resolve() != ROOT:
            parts.append(f"{entry}:{os.stat(entry).st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _probe(driver_version: int) -> tuple[bool, str]:
    """Compile and launch a tiny kernel in a subprocess: (it worked, the output if not)."""
    injected = os.environ.get("CUDA_BOOK_DOCTOR_INJECT")
    if injected is not None:  # tests: pretend the probe printed this
        return False, injected
    stamp = CACHE / "doctor.json"
    key = _fingerprint(driver_version)
    try:
        if json.loads(stamp.read_text()).get("ok") == key:
            return True, ""
    except (OSError, ValueError):
        pass
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f"the probe did not finish in {PROBE_TIMEOUT_S} s"
    output = proc.stdout + proc.stderr
    if proc.returncode == 0 and "CUDA_BOOK_PROBE_OK" in proc.stdout:
        try:
            CACHE.mkdir(parents=True, exist_ok=True)
            stamp.write_text(json.dumps({"ok": key}))
        except OSError:
            pass
        return True, ""
    return False, output


FALLBACK: str | None = None  # why the simulator runs although a GPU is there (the doctor's finding)


def _decide_mode() -> bool:
    """True for the simulator. Respects a mode already fixed by the caller or by an earlier import."""
    global FALLBACK
    if "numba.cuda" in sys.modules:
        from numba.cuda.core import config  # numba.cuda is already imported: its mode is final

        return bool(config.ENABLE_CUDASIM)
    forced = os.environ.get("NUMBA_ENABLE_CUDASIM", "").strip()
    if forced not in ("", "0"):
        return True
    if COMPILE_ONLY:
        return False
    devices, version = _driver()
    if "CUDA_BOOK_DOCTOR_INJECT" in os.environ:  # tests: a GPU whose CUDA stack fails
        devices, version = 1, int(os.environ.get("CUDA_BOOK_DOCTOR_DRIVER", "12040"))
    if forced == "" and devices == 0:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        return True
    if forced == "" and os.environ.get("CUDA_BOOK_DOCTOR", "1") != "0":
        ok, output = _probe(version)
        if not ok:
            problem, fix = diagnose(output, version)
            FALLBACK = f"{problem}.\nlib: fix: {fix}   (then restart Python)"
            os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
            return True
    return False


SIMULATOR: bool = _decide_mode()
ON_GPU: bool = not SIMULATOR


from numba import cuda  # noqa: E402  (after the mode is fixed)

if SIMULATOR:
    DEVICE_NAME = "CUDA simulator"
elif COMPILE_ONLY:
    DEVICE_NAME = "no GPU (compiling only)"
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
    if SIMULATOR and FALLBACK:
        return f"lib: a GPU is here but numba cannot use it: {FALLBACK}\nlib: meanwhile kernels run on " \
               "numba's simulator (small sizes, no timings)"
    if SIMULATOR:
        return "lib: no CUDA GPU; kernels run on numba's simulator (small sizes, no timings)"
    return f"lib: running on {DEVICE_NAME} (full sizes, live timings)"

