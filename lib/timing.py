"""The book's one timer: CUDA events around each repetition, after a warm-up.

The caller states the bytes moved and the FLOPs done; the timer turns them into GB/s and TFLOP/s from the
median, and keeps every sample so the spread (quartiles) can be shown and recorded. On the simulator it
refuses: a simulated kernel's time says nothing about a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


class TimingUnavailable(RuntimeError):
    pass


@dataclass
class Timing:
    samples_ms: np.ndarray
    bytes: int | None = None
    flops: int | None = None
    median_ms: float = field(init=False)
    q1_ms: float = field(init=False)
    q3_ms: float = field(init=False)

    def __post_init__(self):
        self.samples_ms = np.asarray(self.samples_ms, dtype=np.float64)
        if self.samples_ms.ndim != 1 or self.samples_ms.size == 0:
            raise ValueError("Timing needs a non-empty 1-D list of samples in milliseconds")
        if not np.all(np.isfinite(self.samples_ms)) or np.any(self.samples_ms <= 0):
            raise ValueError("timing samples must be positive, finite milliseconds")
        self.q1_ms, self.median_ms, self.q3_ms = (float(v) for v in np.percentile(self.samples_ms, [25, 50, 75]))

    @property
    def reps(self) -> int:
        return int(self.samples_ms.size)

    @property
    def gbps(self) -> float | None:
        """Bytes per second of the median run, in GB/s (10^9 B/s, as vendors count)."""
        return None if self.bytes is None else self.bytes / (self.median_ms * 1e-3) / 1e9

    @property
    def tflops(self) -> float | None:
        return None if self.flops is None else self.flops / (self.median_ms * 1e-3) / 1e12

    def value(self, unit: str) -> float:
        """The figure of merit in `unit`: 'GB/s', 'TFLOP/s' or 'ms'."""
        if unit == "ms":
            return self.median_ms
        v = {"GB/s": self.gbps, "TFLOP/s": self.tflops}.get(unit, "unknown")
        if v == "unknown":
            raise ValueError(f"unknown unit {unit!r}: use 'GB/s', 'TFLOP/s' or 'ms'")
        if v is None:
            raise ValueError(f"{unit} needs the {'bytes' if unit == 'GB/s' else 'FLOPs'} of the run")
        return v

    def fraction_of_peak(self, spec) -> dict[str, float]:
        """Fractions of a GPUSpec's datasheet ceilings reached by the median run."""
        out = {}
        if self.gbps is not None:
            out["bandwidth"] = self.gbps / spec.bandwidth_gbs
        if self.tflops is not None:
            out["fp32"] = self.tflops / spec.fp32_tflops
        return out

    def __str__(self):
        parts = [f"{self.median_ms:.4f} ms (IQR {self.q1_ms:.4f}-{self.q3_ms:.4f}, {self.reps} reps)"]
        if self.gbps is not None:
            parts.append(f"{self.gbps:,.0f} GB/s")
        if self.tflops is not None:
            parts.append(f"{self.tflops:.2f} TFLOP/s")
        return ", ".join(parts)


def reps_for(first_ms: float, budget_ms: float = 400.0, lo: int = 10, hi: int = 200) -> int:
    """Enough repetitions to fill about `budget_ms` of GPU time, within [lo, hi]."""
    return int(min(hi, max(lo, budget_ms // max(first_ms, 1e-3))))


def time_cuda(fn, *, bytes: int | None = None, flops: int | None = None, warmup: int = 3,
              reps: int | None = None) -> Timing:
    """Time `fn()` (which launches GPU work) with CUDA events; `reps=None` picks a count from a probe run."""
    import lib

    if lib.SIMULATOR:
        raise TimingUnavailable(
            "timing needs a CUDA GPU: this process runs on numba's CUDA simulator, whose times say nothing "
            "about a GPU. The recorded H200 results are shown instead (lib.results.show).")
    from numba import cuda

    for _ in range(warmup):  # the first launch compiles; later ones warm caches and clocks
        fn()
    cuda.synchronize()
    if reps is None:
        probe = _event_pair_ms(cuda, fn)
        reps = reps_for(probe)
    samples = [_event_pair_ms(cuda, fn) for _ in range(reps)]
    return Timing(np.array(samples), bytes=bytes, flops=flops)


def _event_pair_ms(cuda, fn) -> float:
    start, stop = cuda.event(), cuda.event()
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return cuda.event_elapsed_time(start, stop)
