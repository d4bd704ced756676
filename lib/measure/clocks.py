"""The GPU's clocks, power and temperature while a row was timed, read from NVML (the driver's library).

A GPU runs its SMs as fast as its power and temperature limits allow and slows them when it reaches one, so
the same kernel can take longer on a hot or power-capped GPU than on a cool one. Every recorded row
therefore carries what the driver said as its repetitions ended: SM and memory clocks (MHz), board power
(W), temperature (°C), and the reasons the driver gave for holding the clocks below their maximum. NVML is
reached through ``ctypes`` (``nvidia-smi`` reads the same library, so there is nothing to fall back on when
it cannot be loaded). Where NVML cannot be read the fields stay empty: they are never guessed.
"""
from __future__ import annotations

import ctypes
import sys
import numpy as np

FIELDS = ["sm_mhz", "mem_mhz", "power_w", "temp_c", "throttle"]
EMPTY = dict.fromkeys(FIELDS)

# nvmlClocksEventReasons bits (nvml.h), in the words the book prints
REASONS = {0x1: "idle", 0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
           0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "power_brake", 0x100: "display_clocks"}
_SM, _MEM = 1, 2          # nvmlClockType_t: NVML_CLOCK_SM, NVML_CLOCK_MEM
_GPU_TEMP = 0             # NVML_TEMPERATURE_GPU

_nvml = None              # (library, device handle) once opened; False if NVML cannot be used here
why_unavailable = ""      # the reason, when _nvml is False


def reasons(mask: int) -> str:
    """The clock-limit reasons of an NVML bit mask, joined with '+' ('none' for 0; unknown bits in hex)."""
    names = [name for bit, name in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS)
    if rest:
        names.append(hex(rest))
    return "+".join(names) or "none"


def _pci_bus_id() -> bytes:
    """The PCI address of numba's current device, so NVML (which ignores CUDA_VISIBLE_DEVICES) reads that GPU."""
    from numba import cuda

    ident = cuda.get_current_device().get_device_identity()
    return f"{ident['pci_domain_id']:08x}:{ident['pci_bus_id']:02x}:{ident['pci_device_id']:02x}.0".encode()


def _open():
    global _nvml, why_unavailable
    if _nvml is None:
        try:
            lib = ctypes.CDLL("nvml.dll" if sys.platform == "win32" else "libnvidia-ml.so.1")
            for fn in ("nvmlInit_v2", "nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetClockInfo",
                       "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature",
                       "nvmlDeviceGetEnforcedPowerLimit"):
                getattr(lib, fn).restype = ctypes.c_int
            _call(lib.nvmlInit_v2)
            handle = ctypes.c_void_p()
            _call(lib.nvmlDeviceGetHandleByPciBusId_v2, ctypes.c_char_p(_pci_bus_id()), ctypes.byref(handle))
            _nvml = (lib, handle)
        except Exception as err:  # no NVIDIA driver, the simulator, an old driver: no clocks, not made up
            _nvml, why_unavailable = False, f"NVML unavailable: {err}"
    return _nvml or None


def _call(fn, *args):
    status = fn(*args)
    if status != 0:
        raise OSError(f"{fn.__name__} returned NVML error {status}")


def _uint(fn, *args) -> int:
    value = ctypes.c_uint()
    _call(fn, *args, ctypes.byref(value))
    return value.value


def _read(read):
    try:
        return read()
    except OSError:  # a query this GPU or driver does not support (e.g. power under MIG): left empty
        return None


def sample() -> dict:
    """One reading of the current GPU: the FIELDS, each None where NVML cannot read it."""
    opened = _open()
    if opened is None:
        return dict(EMPTY)
    lib, h = opened
    reasons_fn = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        lib.nvmlDeviceGetCurrentClocksThrottleReasons  # the older name of the same call
    reasons_fn.restype = ctypes.c_int

    def mask():
        value = ctypes.c_ulonglong()
        _call(reasons_fn, h, ctypes.byref(value))
        return reasons(value.value)

    power_mw = _read(lambda: _uint(lib.nvmlDeviceGetPowerUsage, h))
    return {"sm_mhz": _read(lambda: _uint(lib.nvmlDeviceGetClockInfo, h, _SM)),
            "mem_mhz": _read(lambda: _uint(lib.nvmlDeviceGetClockInfo, h, _MEM)),
            "power_w": None if power_mw is None else power_mw / 1000.0,
            "temp_c": _read(lambda: _uint(lib.nvmlDeviceGetTemperature, h, _GPU_TEMP)),
            "throttle": _read(mask)}


def limits() -> dict:
    """The device's maximum SM and memory clocks (MHz) and its enforced power limit (W), those NVML reads."""
    opened = _open()
    if opened is None:
        return {}
    lib, h = opened
    out = {"max_sm_mhz": _read(lambda: _uint(lib.nvmlDeviceGetMaxClockInfo, h, _SM)),
           "max_mem_mhz": _read(lambda: _uint(lib.nvmlDeviceGetMaxClockInfo, h, _MEM)),
           "power_limit_w": _read(lambda: _uint(lib.nvmlDeviceGetEnforcedPowerLimit, h) / 1000.0)}
    return {k: v for k, v in out.items() if v is not None}


def summarize(samples: list[dict]) -> dict:
    """One row's fields from the readings taken while it ran: median clocks and power, the highest
    temperature, and every clock-limit reason seen (idle excepted: between repetitions the GPU may idle).
    A field no reading has stays None."""
    def values(key):
        return [s[key] for s in samples if s.get(key) is not None]

    out = dict(EMPTY)
    for key in ("sm_mhz", "mem_mhz", "power_w"):
        if values(key):
            out[key] = float(np.median(values(key)))
    if values("temp_c"):
        out["temp_c"] = float(max(values("temp_c")))
    if values("throttle"):
        seen = sorted({r for v in values("throttle") for r in v.split("+")} - {"idle", "none"})
        out["throttle"] = "+".join(seen) or "none"
    return out


def after_run() -> dict:
    """A row's fields, read once right after its last timed repetition. Not sampled *during* the run: a
    sampling thread competes with the timer's host thread for the GIL, and one late enqueue makes the held
    timer lengthen its hold for good (measured on the H200: ~10 s instead of ~1 s per rung). The SM clock
    does not drop in the few microseconds between the last repetition and the reading, and the power NVML
    reports on Hopper is averaged over the last second, so it covers the repetitions themselves."""
    return summarize([sample()])
