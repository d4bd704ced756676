"""A memory-access tracer: run a kernel on numba's CUDA simulator and see, for every load and store in its
source, what each warp-wide request costs — the 32-byte sectors a global access touches, and the
wavefronts (n-way bank conflict) a shared-memory access needs.

    from lib.grading.tracer import trace
    t = trace(my_kernel, blocks, threads, *device_arrays)
    t.summary()          # one row per load/store site of the source

How it works: while the kernel runs, the simulator's array accesses are intercepted. Each access is
recorded with the thread's block, warp and lane, its *site* (file, line and bytecode offset — two loads on
one line are two sites) and how many times that thread has reached the site before. The lanes of a warp
that reached the same site for the same time form one request, as the 32 lanes of a warp issue one
instruction together on a GPU. A global request is costed in sectors (32-byte pieces of memory, counted from
the start of the array's allocation, which CUDA aligns to 256 bytes); a shared request in wavefronts, by
the same model as the bank-conflict widget (lib.hw.banks), each shared array taken to start
on bank 0.

What it does not see: caches (a sector counted here may come from L1 or L2), timing, and vector loads —
the simulator reads a float4 as four floats, so each is costed as its own request. It needs simulator mode
(a process started with NUMBA_ENABLE_CUDASIM=1, or a machine without a GPU); in a GPU process
:func:`trace` says so, and :func:`in_simulator_process` runs a traced example in a simulator process.
"""
from __future__ import annotations

import contextlib
import linecache
import os
import subprocess
import sys
import threading
from dataclasses import dataclass

import numpy as np

from lib.mode import ROOT
from lib.hw.banks import conflict_report
from lib import mode

SECTOR_BYTES = 32
WARP = 32
SUMMARY_COLUMNS = ["line", "source", "array", "space", "op", "requests", "lanes", "sectors", "ideal sectors",
                   "used / moved", "wavefronts", "worst n-way"]


class TracerUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class Request:
    """One warp-wide load or store: the lanes of a warp at one site, the k-th time they reached it."""
    block: tuple
    warp: int
    site: tuple            # (filename, line, bytecode offset)
    occurrence: int
    space: str             # "global" or "shared"
    op: str                # "load" or "store"
    array: str
    lanes: int
    useful_bytes: int      # distinct bytes the lanes asked for
    sectors: int | None    # global: 32-byte sectors touched
    wavefronts: int | None  # shared: wavefronts needed
    degree: int | None     # shared: the n of an n-way conflict (1 = none)

    @property
    def ideal_sectors(self) -> int | None:
        """Sectors the same bytes would need if they were contiguous and sector-aligned."""
        return None if self.sectors is None else -(-self.useful_bytes // SECTOR_BYTES)


def _root(ary: np.ndarray) -> np.ndarray:
    while isinstance(ary.base, np.ndarray):
        ary = ary.base
    return ary


def _byte_offset(ary: np.ndarray, idx) -> int | None:
    """Offset in bytes of ary[idx] from the start of its allocation, or None if idx is not one element."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    if len(idx) != ary.ndim or not all(isinstance(i, (int, np.integer)) for i in idx):
        return None
    start = ary.__array_interface__["data"][0] - _root(ary).__array_interface__["data"][0]
    return start + sum(int(i) * s for i, s in zip(idx, ary.strides))


_SUBSCRIPT_OFFSETS: dict = {}


def _site(frame) -> tuple:
    """(file, line, offset of the subscript instruction) of the access the frame is executing. Python's
    specialising interpreter may report an offset a few cache entries past the instruction, so the offset
    is taken as that of the last subscript instruction at or before the one reported."""
    import bisect
    import dis

    code = frame.f_code
    offsets = _SUBSCRIPT_OFFSETS.get(code)
    if offsets is None:
        offsets = [i.offset for i in dis.get_instructions(code)
                   if i.opname in ("BINARY_SUBSCR", "STORE_SUBSCR")]
        _SUBSCRIPT_OFFSETS[code] = offsets
    k = bisect.bisect_right(offsets, frame.f_lasti) - 1
    return (code.co_filename, frame.f_lineno, offsets[k] if k >= 0 else frame.f_lasti)


class _Recorder:
    def __init__(self, names: dict[int, str]):
        self.names = names           # id(root array) -> the kernel parameter's name
        self.rows: list[tuple] = []  # list.append is atomic under the GIL: simulated threads share it
        self.launch = 0              # trace_call: the launch's number, so two launches' requests never merge

    def record(self, space, op, name, offset, itemsize, frame):
        thread = threading.current_thread()
        if offset is None or not hasattr(thread, "thread_id"):
            return  # a slice, or host code touching the array
        site = _site(frame)
        counts = thread.__dict__.setdefault("_tracer_counts", {})
        occurrence = counts.get(site, 0)
        counts[site] = occurrence + 1
        block = (thread.blockIdx.x, thread.blockIdx.y, thread.blockIdx.z) + ((self.launch,) if self.launch else ())
        self.rows.append((block, thread.thread_id // WARP, thread.thread_id % WARP, site, occurrence, space, op,
                          name, offset, itemsize))

    def global_access(self, within, idx, op, frame):
        ary = within._item._ary
        name = self.names.get(id(_root(ary)), "global array")
        self.record("global", op, name, _byte_offset(ary, idx), ary.itemsize, frame)


class _TracedShared:
    """A shared array that reports every element it hands out or takes in."""

    def __init__(self, ary, recorder, name):
        self.__dict__.update(_ary=ary, _recorder=recorder, _name=name)

    def __getitem__(self, idx):
        value = self._ary[idx]
        self._recorder.record("shared", "load", self._name, _byte_offset(self._ary, idx), self._ary.itemsize,
                              sys._getframe(1))
        return value

    def __setitem__(self, idx, value):
        self._ary[idx] = value
        self._recorder.record("shared", "store", self._name, _byte_offset(self._ary, idx), self._ary.itemsize,
                              sys._getframe(1))

    def __getattr__(self, name):
        return getattr(self._ary, name)

    def __len__(self):
        return len(self._ary)

    def __array__(self, dtype=None, copy=None):
        return self._ary if dtype is None else self._ary.astype(dtype)


@contextlib.contextmanager
def _intercepting(recorder: _Recorder):
    from numba.core import types
    from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray
    from numba.cuda.simulator.kernelapi import FakeCUDAShared
    from numba.np import numpy_support

    get, put = FakeWithinKernelCUDAArray.__getitem__, FakeWithinKernelCUDAArray.__setitem__
    shared_array = FakeCUDAShared.array

    def traced_get(self, idx):
        value = get(self, idx)  # first, so a refused access (a negative index) is not recorded
        recorder.global_access(self, idx, "load", sys._getframe(1))
        return value

    def traced_put(self, idx, value):
        put(self, idx, value)
        recorder.global_access(self, idx, "store", sys._getframe(1))

    def traced_shared(self, shape, dtype, alignment=None):
        frame = sys._getframe(1)
        if shape == 0:  # dynamic shared memory: one buffer, whoever asks
            return _TracedShared(shared_array(self, shape, dtype, alignment), recorder, "dynamic shared")
        if alignment is not None:
            return shared_array(self, shape, dtype, alignment)  # the simulator's own refusal
        # numba keys static allocations by the caller's line; called from here, that would be this line for
        # every array, so the key is made from the kernel's frame instead.
        key = (frame.f_code.co_filename, frame.f_lineno)
        ary = self._allocations.get(key)
        if ary is None:
            ary = np.empty(shape, numpy_support.as_dtype(dtype) if isinstance(dtype, types.Type) else dtype)
            self._allocations[key] = ary
        return _TracedShared(ary, recorder, f"shared (line {frame.f_lineno})")

    FakeWithinKernelCUDAArray.__getitem__ = traced_get
    FakeWithinKernelCUDAArray.__setitem__ = traced_put
    FakeCUDAShared.array = traced_shared
    try:
        yield
    finally:
        FakeWithinKernelCUDAArray.__getitem__, FakeWithinKernelCUDAArray.__setitem__ = get, put
        FakeCUDAShared.array = shared_array


class Trace:
    """What one traced launch did, request by request (:attr:`requests`) and per source site (:meth:`summary`)."""

    def __init__(self, kernel_name: str, rows: list[tuple]):
        self.kernel_name = kernel_name
        groups: dict[tuple, dict[int, tuple]] = {}
        for block, warp, lane, site, occurrence, space, op, name, offset, itemsize in rows:
            groups.setdefault((block, warp, site, occurrence, space, op, name), {})[lane] = (offset, itemsize)
        self.requests = [self._cost(key, lanes) for key, lanes in sorted(groups.items(), key=lambda kv: kv[0])]

    @staticmethod
    def _cost(key, lanes) -> Request:
        block, warp, site, occurrence, space, op, name = key
        itemsize = max(size for _, size in lanes.values())
        useful = len({offset for offset, _ in lanes.values()}) * itemsize
        sectors = wavefronts = degree = None
        if space == "global":
            sectors = len({b // SECTOR_BYTES for offset, size in lanes.values()
                           for b in (offset, offset + size - 1)})
        else:
            addresses = [lanes[lane][0] if lane in lanes else None for lane in range(WARP)]
            report = conflict_report(addresses, itemsize)
            wavefronts, degree = report["wavefronts"], report["degree"]
        return Request(block, warp, site, occurrence, space, op, name, len(lanes), useful, sectors, wavefronts,
                       degree)

    def summary(self):
        """One row per site (source line, array, load or store): how many warp requests it made and, per
        request on average, its active lanes and its cost — global: sectors touched, the sectors the same
        bytes would need if contiguous, and the fraction of moved bytes that were asked for; shared:
        wavefronts, and the worst n-way conflict of any request."""
        import pandas as pd

        by_site: dict[tuple, list[Request]] = {}
        for r in self.requests:
            by_site.setdefault((r.site, r.space, r.op, r.array), []).append(r)
        rows = []
        for (site, space, op, array), reqs in sorted(by_site.items(), key=lambda kv: kv[0][0][1:]):
            filename, line, _ = site
            row = {"line": line, "source": linecache.getline(filename, line).strip(), "array": array,
                   "space": space, "op": op, "requests": len(reqs), "lanes": np.mean([r.lanes for r in reqs])}
            if space == "global":
                row.update({"sectors": np.mean([r.sectors for r in reqs]),
                            "ideal sectors": np.mean([r.ideal_sectors for r in reqs]),
                            "used / moved": np.sum([r.useful_bytes for r in reqs])
                            / (SECTOR_BYTES * np.sum([r.sectors for r in reqs]))})
            else:
                row.update({"wavefronts": np.mean([r.wavefronts for r in reqs]),
                            "worst n-way": max(r.degree for r in reqs)})
            rows.append(row)
        return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)

    def totals(self) -> dict:
        """Sums over the launch: global sectors per op, shared wavefronts per op (as Nsight Compute counts)."""
        out = {}
        for r in self.requests:
            key = f"{r.space} {r.op} {'sectors' if r.space == 'global' else 'wavefronts'}"
            out[key] = out.get(key, 0) + (r.sectors if r.space == "global" else r.wavefronts)
        return out


def _parameter_names(kernel, args) -> dict[int, str]:
    import inspect

    try:
        params = list(inspect.signature(kernel.py_func).parameters)
    except (AttributeError, TypeError, ValueError):
        params = []
    names = {}
    for i, arg in enumerate(args):
        ary = getattr(arg, "_ary", None)
        if isinstance(ary, np.ndarray):
            names[id(_root(ary))] = params[i] if i < len(params) else f"argument {i}"
    return names


def trace(kernel, griddim, blockdim, *args) -> Trace:
    """Launch ``kernel[griddim, blockdim](*args)`` on the simulator and record every element access.

    `args` as for the launch (device arrays from ``cuda.to_device`` / ``cuda.device_array``, scalars).
    Keep sizes small: every simulated thread is a Python thread.
    """
    if not mode.SIMULATOR:
        raise TracerUnavailable(
            "the tracer runs kernels on numba's CUDA simulator, and this process runs on the GPU. Start a "
            "process with NUMBA_ENABLE_CUDASIM=1 to trace your kernel; lib.grading.tracer.in_simulator_process "
            "runs a traced example that way.")
    if not hasattr(kernel, "py_func"):
        raise TypeError(f"trace needs a @cuda.jit kernel, got {type(kernel).__name__}")
    recorder = _Recorder(_parameter_names(kernel, args))
    with _intercepting(recorder):
        kernel[griddim, blockdim](*args)
    return Trace(getattr(kernel, "__name__", str(kernel)), recorder.rows)


def trace_call(fn, *args, names=()) -> Trace:
    """Run ``fn(*args)``, host code that may launch any number of kernels (a grader's student function), and
    record every element access of every launch; `names` name the arrays of `args` in order (device arrays).
    A request's block carries the launch's number (1, 2, ...) as a fourth element."""
    from lib.runtime import launches

    if not mode.SIMULATOR:
        raise TracerUnavailable("the tracer runs kernels on numba's CUDA simulator, and this process runs on "
                                "the GPU")
    recorder = _Recorder({id(_root(a._ary)): name for a, name in zip(args, names)
                          if isinstance(getattr(a, "_ary", None), np.ndarray)})

    def count(launch, launch_args):
        recorder.launch += 1

    with launches.add_listener(count), _intercepting(recorder):
        fn(*args)
    return Trace(getattr(fn, "__name__", str(fn)), recorder.rows)


def in_simulator_process(module: str, function: str, timeout: float = 300) -> str:
    """The text `module.function()` returns, computed in a simulator process: a notebook running on a GPU
    traces there (numba's mode is fixed per process)."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    code = f"import lib, importlib; print(importlib.import_module({module!r}).{function}())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=str(ROOT))
    if done.returncode:
        raise TracerUnavailable(f"the tracer's simulator process failed:\n{done.stderr[-2000:]}")
    text = "\n".join(line for line in done.stdout.splitlines() if not line.startswith("lib: "))
    return "(traced on numba's CUDA simulator, in a separate process)\n" + text.lstrip("\n")
