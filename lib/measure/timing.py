"""The book's one timer: CUDA events around each repetition, after a warm-up, with the stream *held*.

A pair of CUDA events times whatever lies between them on the GPU's clock — including any time the GPU
spends idle, waiting for the host to enqueue the next launch. A numba launch costs tens of microseconds of
Python on the host (checking and packing its arguments), a torch call a few; on a kernel of a few hundred
microseconds that idle time would be a large, launcher-dependent part of the figure. So each repetition
first launches a one-thread *hold* kernel that spins on the GPU's global timer, and the host enqueues the
start event, the work and the stop event while it spins: when the hold ends, everything is already queued
and the events see only the GPU's work (NVIDIA's nvbench blocks its stream the same way). A repetition
counts as held only if the host finished enqueuing before the hold could have ended (host time from the
hold's launch to the stop event < the hold's duration); otherwise the hold is doubled and the repetition
repeated. A `fn` that waits for the GPU itself can never be held: it is timed plainly and says so
(``Timing.timer == "events"``). What a launch costs the host is measured on its own (kernels/intro.py).

The caller states the bytes moved and the FLOPs done; the timer turns them into GB/s and TFLOP/s from the
median, and keeps every sample so the spread (quartiles) can be shown and recorded. On the simulator it
refuses: a simulated kernel's time says nothing about a GPU.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np
from lib import mode


class TimingUnavailable(RuntimeError):
    pass


@dataclass
class Timing:
    samples_ms: np.ndarray
    bytes: int | None = None
    flops: int | None = None
    timer: str = "held"       # "held": the GPU's time for the work alone; "events": plain event pair
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


HOLD_START_NS = 200_000       # first hold: 0.2 ms, doubled while the host needs longer to enqueue
HOLD_MAX_NS = 50_000_000      # beyond 50 ms of hold, `fn` is taken to wait for the GPU itself
_HOLD = None


def _hold_kernel():
    """A kernel of one thread that spins until the GPU's global timer (ns) has advanced by `ns`."""
    global _HOLD
    if _HOLD is None:
        from llvmlite import ir
        from numba import cuda, types
        from numba.cuda.extending import intrinsic

        @intrinsic
        def globaltimer(typingctx):
            def codegen(context, builder, sig, args):
                asm = ir.InlineAsm(ir.FunctionType(ir.IntType(64), []), "mov.u64 $0, %globaltimer;", "=l",
                                   side_effect=True)
                return builder.call(asm, [])
            return types.uint64(), codegen

        @cuda.jit
        def hold_kernel(ns):
            start = globaltimer()
            while globaltimer() - start < ns:
                pass

        _HOLD = hold_kernel
    return _HOLD


def time_cuda(fn, *, bytes: int | None = None, flops: int | None = None, warmup: int = 3,
              reps: int | None = None, hold: bool = True) -> Timing:
    """Time `fn()` (which launches GPU work) with CUDA events, the stream held while the host enqueues it
    (see the module's docstring); `reps=None` picks a count from a probe run; `hold=False` times plain
    event pairs, host launch cost included."""
    if mode.SIMULATOR:
        raise TimingUnavailable(
            "timing needs a CUDA GPU: this process runs on numba's CUDA simulator, whose times say nothing "
            "about a GPU. The recorded H200 results are shown instead (lib.measure.results.show).")
    from numba import cuda

    for _ in range(warmup):  # the first launch compiles; later ones warm caches and clocks
        fn()
    cuda.synchronize()
    sample = _Held(cuda, fn) if hold else (lambda: _event_pair_ms(cuda, fn))
    probe = sample()
    if reps is None:
        reps = reps_for(probe)
    samples = [sample() for _ in range(reps)]
    timer = "held" if hold and sample.held else "events"
    return Timing(np.array(samples), bytes=bytes, flops=flops, timer=timer)


def _event_pair_ms(cuda, fn) -> float:
    start, stop = cuda.event(), cuda.event()
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return cuda.event_elapsed_time(start, stop)


class _Held:
    """One held repetition per call; grows the hold until the host's enqueuing fits inside it, and gives up
    holding (``held = False``, plain event pairs from then on) if that needs more than HOLD_MAX_NS."""

    def __init__(self, cuda, fn):
        self.cuda, self.fn, self.ns, self.held = cuda, fn, HOLD_START_NS, True
        self.kernel = _hold_kernel()
        self._launch(0)  # compile it now, not inside the first timed repetition
        cuda.synchronize()

    def _launch(self, ns):
        with warnings.catch_warnings():  # one thread on purpose: no "low occupancy" warning for the reader
            warnings.filterwarnings("ignore", message=".*will likely result in GPU under-utilization")
            self.kernel[1, 1](np.uint64(ns))

    def __call__(self) -> float:
        cuda = self.cuda
        while self.held:
            start, stop = cuda.event(), cuda.event()
            t0 = time.perf_counter()
            self._launch(self.ns)
            start.record()
            self.fn()
            stop.record()
            enqueued_ns = (time.perf_counter() - t0) * 1e9
            stop.synchronize()
            if enqueued_ns < self.ns:
                return cuda.event_elapsed_time(start, stop)
            if self.ns >= HOLD_MAX_NS:
                self.held = False
            else:
                self.ns = min(2 * self.ns, HOLD_MAX_NS)
        return _event_pair_ms(cuda, self.fn)
