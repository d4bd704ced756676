"""Warp intrinsics and a faster block scheduler for numba's CUDA simulator.

numba's simulator runs one Python thread per CUDA thread and has no warp intrinsics at all. This module
adds ``shfl_sync``, ``shfl_up_sync``, ``shfl_down_sync``, ``shfl_xor_sync``, ``syncwarp``, ``activemask``,
``lanemask_lt``, ``ballot_sync``, ``all_sync``, ``any_sync``, ``eq_sync``, ``match_any_sync`` and
``match_all_sync`` with the semantics of the PTX instructions numba emits (width 32), so kernels that use
them run unchanged without a GPU.

How: every collective is a rendezvous of the lanes named in its mask; the last lane to arrive computes
every lane's result and wakes the others. A lane that exits is dropped from the rendezvous it would have
joined (CUDA only requires the *non-exited* lanes of the mask to arrive), so ``if i >= n: return`` before a
full-mask shuffle still works. Reading from a lane that exited or is not in the mask is undefined on a GPU;
here it yields NaN (floats) or 0xDEADBEEF (integers) so the mistake shows up in the results.

The block scheduler replaces numba's polling loop (a Python thread spinning over every simulated thread)
with condition variables: a barrier or a collective completes when its last participant arrives. When
every live thread of a block waits and nothing can complete, the block is deadlocked, and the error names
who waits where (e.g. half a warp in ``syncthreads`` while the other half waits in a shuffle).

Public API (other modules build on it; keep it stable):

- :func:`current_thread` -> the simulated thread running now, or None outside a kernel. Attributes:
  ``thread_id`` (linear id in the block), ``threadIdx``, ``blockIdx``, ``manager`` (its block's manager).
- the block manager: ``barrier_generation`` (syncthreads() completed in this block so far), ``grid_point``
  (tuple), ``warp_seq(w)`` (warp collectives completed so far by warp w) and
  ``ordered_by_warp(w, since_seq, lane_a, lane_b)`` (True if a collective of warp w completed after
  ``since_seq`` with both lanes participating: syncwarp, shuffles, votes and match order memory accesses
  between those lanes).
- :func:`warp_collective` (op, mask, operands, compute): a generic rendezvous of the lanes in mask with the
  rules of the built-in intrinsics; ``compute({lane: operands}) -> {lane: result}`` runs once, when every
  non-exited lane of the mask has arrived; returns the calling lane's result.
- :func:`add_block_listener` (start, end): ``start(manager)`` before a block's threads run,
  ``end(manager)`` after they all finished.

This relies on private classes of numba-cuda's simulator (``BlockManager``, ``BlockThread``,
``FakeCUDAModule``); :func:`install` checks the version it was written against.
"""
from __future__ import annotations

import math
import sys
import threading
from itertools import groupby

import numpy as np

SUPPORTED_NUMBA_CUDA = "0.30."
FULL_MASK = 0xFFFFFFFF
WARP = 32
_POISON_INT = 0xDEADBEEF


class SimulatorError(RuntimeError):
    """A misuse of the simulated GPU that the book reports in plain words."""


class DeadlockError(SimulatorError):
    pass


class _Aborted(Exception):
    """Raised in simulated threads that are woken because another thread failed."""


def _describe_lanes(lanes) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'"""
    lanes = sorted(lanes)
    parts = []
    for _, run in groupby(enumerate(lanes), key=lambda p: p[1] - p[0]):
        run = [lane for _, lane in run]
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(parts)


def _poison(value):
    if isinstance(value, (float, np.floating)):
        return type(value)(math.nan)
    if isinstance(value, np.integer):
        return type(value)(np.array(_POISON_INT, dtype=np.int64).astype(type(value)))
    return _signed32(_POISON_INT)  # a Python int: 0xDEADBEEF read as int32, so it fits an int32 array


def _signed32(bits: int) -> int:
    bits &= FULL_MASK
    return bits - (1 << 32) if bits >= (1 << 31) else bits


def _match_key(value):
    """match.sync compares bit patterns: NaN matches NaN, -0.0 does not match 0.0 (unlike ==)."""
    if isinstance(value, (float, np.floating)):
        return "nan" if math.isnan(value) else (float(value), math.copysign(1.0, value))
    return int(value)


class _Rendezvous:
    """One warp collective in progress: the lanes of `mask` that have arrived with their operands."""

    def __init__(self, op: str, mask: int, compute=None):
        self.op = op
        self.mask = mask
        self.compute = compute
        self.operands: dict[int, tuple] = {}
        self.results: dict[int, object] | None = None


class _Warp:
    def __init__(self, lock: threading.Lock, lanes: list[int]):
        self.cond = threading.Condition(lock)
        self.live = set(lanes)
        self.pending: list[_Rendezvous] = []
        self.activemask_calls: dict[object, _Rendezvous] = {}  # call site -> lanes waiting there
        self.seq = 0                                   # collectives completed so far
        self.history: list[tuple[int, int]] = []       # (seq, bit mask of the lanes that took part)


def _compute(rv: _Rendezvous, lanes_present: set[int]) -> dict[int, object]:
    """Every participating lane's result, from PTX's definitions of shfl.sync / vote.sync / match.sync."""
    ops = rv.operands
    op = rv.op
    if op == "syncwarp":
        return {lane: None for lane in ops}
    if op in ("ballot_sync", "all_sync", "any_sync", "eq_sync"):
        bits = 0
        for lane, (pred,) in ops.items():
            if pred:
                bits |= 1 << lane
        votes = [bool(p) for (p,) in ops.values()]
        value = {"ballot_sync": _signed32(bits), "all_sync": all(votes), "any_sync": any(votes),
                 "eq_sync": all(votes) or not any(votes)}[op]
        return {lane: value for lane in ops}
    if op == "match_any_sync":
        out = {}
        for lane, (v,) in ops.items():
            out[lane] = _signed32(sum(1 << other for other, (w,) in ops.items()
                                      if _match_key(w) == _match_key(v)))
        return out
    if op == "match_all_sync":
        values = [_match_key(v) for (v,) in ops.values()]
        same = all(v == values[0] for v in values)
        present = sum(1 << lane for lane in ops)
        return {lane: (_signed32(present) if same else 0, same) for lane in ops}
    # shuffles: operands are (value, b); b's low five bits count (PTX bval = b[4:0])
    out = {}
    for lane, (value, b) in ops.items():
        b = int(b) & 31
        if op == "shfl_sync":
            src = b
        elif op == "shfl_up_sync":
            src = lane - b
        elif op == "shfl_down_sync":
            src = lane + b
        else:  # shfl_xor_sync
            src = lane ^ b
        if not 0 <= src < WARP:
            out[lane] = value  # source out of range: the lane keeps its own value, as on the GPU
        elif src in ops:
            out[lane] = ops[src][0]
        else:
            out[lane] = _poison(value)  # the source lane exited or is not in the mask: undefined
    return out


class FastBlockManager:
    """Runs one thread block: same interface as numba's BlockManager, event-driven instead of polling."""

    def __init__(self, f, grid_dim, block_dim, debug):
        self._grid_dim = grid_dim
        self._block_dim = block_dim
        self._f = f
        self._debug = debug
        self.block_state = np.zeros(block_dim, dtype=np.bool_)
        self.nthreads = int(np.prod(block_dim))
        self.lock = threading.Lock()
        self.barrier = threading.Condition(self.lock)
        self.done = threading.Condition(self.lock)
        self.barrier_waiting: set = set()
        self.barrier_generation = 0
        self.live: set = set()
        self.running = 0
        self.error: BaseException | None = None
        self.error_tb = None
        self.warps: dict[int, _Warp] = {}
        self.waiting_at: dict = {}  # thread -> description, for deadlock reports
        self.grid_point: tuple = ()

    # --- public: for the debugger and other tools ----------------------------------------------
    def warp_seq(self, w: int) -> int:
        """How many warp collectives warp `w` of this block has completed so far."""
        warp = self.warps.get(w)
        return warp.seq if warp is not None else 0

    def ordered_by_warp(self, w: int, since_seq: int, lane_a: int, lane_b: int) -> bool:
        """Did a collective of warp `w` that both lanes took part in complete after `since_seq`?"""
        warp = self.warps.get(w)
        if warp is None:
            return False
        both = (1 << lane_a) | (1 << lane_b)
        for seq, lanes in reversed(warp.history):
            if seq <= since_seq:
                return False
            if lanes & both == both:
                return True
        return False

    # --- called by the main thread -------------------------------------------------------------
    def run(self, grid_point, *args):
        self._grid_point = self.grid_point = tuple(int(g) for g in grid_point)
        threads = []
        for block_point in np.ndindex(*self._block_dim):
            def target():
                self._f(*args)
            threads.append(SimThread(target, self, grid_point, block_point, self._debug))
        with self.lock:
            self.live = set(threads)
            self.running = len(threads)
            for w in range((self.nthreads + WARP - 1) // WARP):
                lanes = [t.thread_id % WARP for t in threads if t.thread_id // WARP == w]
                self.warps[w] = _Warp(self.lock, lanes)
        for start, _ in _block_listeners:
            start(self)
        for t in threads:
            t.start()
        with self.lock:
            while self.live and self.error is None:
                self.done.wait()
            error, tb = self.error, self.error_tb
        if error is None:
            for _, end in _block_listeners:
                end(self)
        if error is not None:
            raise error.with_traceback(tb)

    # --- called by simulated threads, with self.lock held ----------------------------------------
    def _fail(self, error: BaseException, tb=None):
        if self.error is None:
            self.error, self.error_tb = error, tb
        self.barrier.notify_all()
        for warp in self.warps.values():
            warp.cond.notify_all()
        self.done.notify_all()

    def _check_deadlock(self):
        if self.running == 0 and self.live and self.error is None:
            where: dict[str, list] = {}
            for t in self.live:
                where.setdefault(self.waiting_at.get(t, "?"), []).append(t)
            lines = []
            for what, ts in sorted(where.items()):
                by_block_tid = sorted(t.thread_id for t in ts)
                lines.append(f"  threads {_describe_lanes(by_block_tid)} wait in {what}")
            self._fail(DeadlockError(
                f"deadlock in block {self._grid_point}: every live thread is waiting and none can go on.\n"
                + "\n".join(lines)
                + "\nEvery lane named in a warp intrinsic's mask must reach the same call, and every "
                  "thread of the block must reach syncthreads() (or exit)."))

    def _wait(self, cond, ready, what):
        t = threading.current_thread()
        self.running -= 1
        self.waiting_at[t] = what
        self._settle_activemask(t.thread_id // WARP)
        self._check_deadlock()
        while not ready() and self.error is None:
            cond.wait()
        self.waiting_at.pop(t, None)
        if self.error is not None and not ready():
            raise _Aborted("aborted: another thread of the block failed")

    def syncthreads(self, t):
        with self.lock:
            if self.error is not None:
                raise _Aborted("aborted")
            self.barrier_waiting.add(t)
            generation = self.barrier_generation
            if not self._release_barrier_if_complete():
                self._wait(self.barrier, lambda: self.barrier_generation != generation, "syncthreads()")

    def _release_barrier_if_complete(self) -> bool:
        if self.barrier_waiting and self.barrier_waiting >= self.live:
            # the arriving thread (if any) is still counted as running; the others wake up running
            self.running += len(self.barrier_waiting & self.live) - (
                1 if threading.current_thread() in self.barrier_waiting else 0)
            self.barrier_waiting = set()
            self.barrier_generation += 1
            self.barrier.notify_all()
            return True
        return False

    def collective(self, t, op: str, mask: int, *operands, compute=None):
        if self.nthreads % WARP:
            raise SimulatorError(
                f"{op} needs whole warps, but this block has {self.nthreads} threads "
                f"(not a multiple of {WARP}). Use a block size that is a multiple of 32: on a GPU the last, "
                "partial warp's missing lanes make a full-mask warp intrinsic undefined.")
        mask = int(mask) & FULL_MASK
        lane = t.thread_id % WARP
        if not mask >> lane & 1:
            raise SimulatorError(f"lane {lane} called {op} with mask {mask:#010x}, which does not include "
                                 "the lane itself (undefined on a GPU)")
        warp = self.warps[t.thread_id // WARP]
        with self.lock:
            if self.error is not None:
                raise _Aborted("aborted")
            rv = None
            for other in warp.pending:
                if other.mask == mask and lane not in other.operands:
                    rv = other
                    break
                if other.mask & mask and other.mask != mask and lane not in other.operands:
                    raise SimulatorError(
                        f"lanes of warp {t.thread_id // WARP} called warp intrinsics with overlapping "
                        f"but different masks ({other.mask:#010x} in {other.op}, {mask:#010x} in {op}); "
                        "all lanes named in a mask must pass the same mask")
            if rv is None:
                rv = _Rendezvous(op, mask, compute)
                warp.pending.append(rv)
            elif rv.op != op:
                raise SimulatorError(
                    f"lanes of warp {t.thread_id // WARP} disagree: some called {rv.op}, lane {lane} called "
                    f"{op} with the same mask {mask:#010x}; all lanes in the mask must make the same call")
            rv.operands[lane] = operands
            if not self._complete_if_ready(warp, rv, arriving=True):
                self._wait(warp.cond, lambda: rv.results is not None, f"{op}(mask={mask:#010x}) of warp "
                           f"{t.thread_id // WARP}")
            return rv.results[lane]

    def _complete_if_ready(self, warp: _Warp, rv: _Rendezvous, arriving: bool) -> bool:
        required = {lane for lane in warp.live if rv.mask >> lane & 1}
        if not required <= rv.operands.keys():
            return False
        rv.results = rv.compute(dict(rv.operands)) if rv.compute else _compute(rv, required)
        warp.seq += 1
        warp.history.append((warp.seq, sum(1 << lane for lane in rv.operands)))
        warp.pending.remove(rv)
        self.running += len(rv.operands) - (1 if arriving else 0)
        warp.cond.notify_all()
        return True

    def activemask(self, t, site):
        """The lanes of the warp that reach this call site together: wait until every live lane of the
        warp either arrived here or waits somewhere else (or exited), as converged lanes would."""
        warp = self.warps[t.thread_id // WARP]
        with self.lock:
            if self.error is not None:
                raise _Aborted("aborted")
            rv = warp.activemask_calls.setdefault(site, _Rendezvous("activemask", 0))
            rv.operands[t.thread_id % WARP] = ()
            self._wait(warp.cond, lambda: rv.results is not None, f"activemask() of warp "
                       f"{t.thread_id // WARP}")
            return rv.results

    def _settle_activemask(self, w: int):
        """Complete the warp's pending activemask() calls once none of its live lanes is still running."""
        warp = self.warps.get(w)
        if warp is None or not warp.activemask_calls:
            return
        waiting = {t.thread_id % WARP for t in self.barrier_waiting if t.thread_id // WARP == w}
        for rv in warp.pending + list(warp.activemask_calls.values()):
            waiting |= rv.operands.keys()
        if not warp.live <= waiting:
            return
        for rv in warp.activemask_calls.values():
            rv.results = sum(1 << lane for lane in rv.operands)
            self.running += len(rv.operands)
        warp.activemask_calls = {}
        warp.cond.notify_all()

    def thread_exited(self, t):
        with self.lock:
            self.live.discard(t)
            self.running -= 1
            if t.exception is not None and not isinstance(t.exception[0], _Aborted):
                self._fail(t.exception[0], t.exception[1])
            warp = self.warps.get(t.thread_id // WARP)
            if warp is not None:
                warp.live.discard(t.thread_id % WARP)
                for rv in list(warp.pending):
                    if rv.operands:
                        self._complete_if_ready(warp, rv, arriving=False)
            self._release_barrier_if_complete()
            self._settle_activemask(t.thread_id // WARP)
            self._check_deadlock()
            if not self.live:
                self.done.notify_all()


def _simthread_class():
    from numba.cuda.simulator.kernel import BlockThread

    class SimThread(BlockThread):
        """A simulated CUDA thread whose barrier and exit are reported to the FastBlockManager."""

        @property
        def manager(self):
            return self._manager

        def run(self):
            try:
                super().run()
            finally:
                self._manager.thread_exited(self)

        def syncthreads(self):
            self._manager.syncthreads(self)

    return SimThread


SimThread = None  # set by install()


def _intrinsic(op, nargs):
    def call(*args):
        if len(args) != nargs:
            raise TypeError(f"cuda.{op} takes {nargs} arguments ({len(args)} given)")
        t = threading.current_thread()
        manager = getattr(t, "_manager", None)
        if not isinstance(manager, FastBlockManager):
            raise SimulatorError(f"cuda.{op} can only be called inside a kernel")
        return manager.collective(t, op, *args)

    call.__name__ = op
    return call


_syncwarp_call = _intrinsic("syncwarp", 1)

_block_listeners: list[tuple] = []


def add_block_listener(start, end):
    """Call ``start(manager)`` before each block's threads run and ``end(manager)`` after they finished."""
    _block_listeners.append((start, end))


def current_thread():
    """The simulated CUDA thread running now, or None outside a kernel."""
    t = threading.current_thread()
    return t if isinstance(getattr(t, "_manager", None), FastBlockManager) else None


def warp_collective(op: str, mask: int, operands: tuple, compute):
    """A rendezvous of the lanes in `mask` (rules of the built-in intrinsics); `compute(ops)` maps
    {lane: operands} to {lane: result} once every non-exited lane of the mask arrived."""
    t = current_thread()
    if t is None:
        raise SimulatorError(f"{op} can only be called inside a kernel")
    return t._manager.collective(t, op, mask, *operands, compute=compute)


def _syncwarp(mask=FULL_MASK):
    return _syncwarp_call(mask)


def _activemask():
    """Lanes of the calling warp that reach the same call (same code position) while none of the warp's
    other live lanes is still running: in converged code the full warp minus the lanes that exited; in a
    divergent branch the lanes of that branch."""
    t = threading.current_thread()
    manager = getattr(t, "_manager", None)
    if not isinstance(manager, FastBlockManager):
        raise SimulatorError("cuda.activemask can only be called inside a kernel")
    caller = sys._getframe(1)
    return manager.activemask(t, (caller.f_code, caller.f_lasti))


def _lanemask_lt():
    return (1 << (threading.current_thread().thread_id % WARP)) - 1


INTRINSICS = {
    "shfl_sync": _intrinsic("shfl_sync", 3),
    "shfl_up_sync": _intrinsic("shfl_up_sync", 3),
    "shfl_down_sync": _intrinsic("shfl_down_sync", 3),
    "shfl_xor_sync": _intrinsic("shfl_xor_sync", 3),
    "ballot_sync": _intrinsic("ballot_sync", 2),
    "all_sync": _intrinsic("all_sync", 2),
    "any_sync": _intrinsic("any_sync", 2),
    "eq_sync": _intrinsic("eq_sync", 2),
    "match_any_sync": _intrinsic("match_any_sync", 2),
    "match_all_sync": _intrinsic("match_all_sync", 2),
    "syncwarp": _syncwarp,
    "activemask": _activemask,
    "lanemask_lt": _lanemask_lt,
}


def _reject_negative(index):
    idx = index if isinstance(index, tuple) else (index,)
    for i in idx:
        if isinstance(i, (int, np.integer)) and i < 0:
            raise IndexError(
                f"negative index {index} into a global array: on a GPU this reads or writes outside the "
                "array (numpy would silently wrap it to the end)")


def _guard_negative_indices():
    from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray

    get, put = FakeWithinKernelCUDAArray.__getitem__, FakeWithinKernelCUDAArray.__setitem__

    def __getitem__(self, idx):
        _reject_negative(idx)
        return get(self, idx)

    def __setitem__(self, idx, val):
        _reject_negative(idx)
        put(self, idx, val)

    FakeWithinKernelCUDAArray.__getitem__ = __getitem__
    FakeWithinKernelCUDAArray.__setitem__ = __setitem__


_installed = False


def install():
    """Add the intrinsics and the scheduler to the simulator (idempotent). Only valid in simulator mode."""
    global _installed, SimThread
    if _installed:
        return
    import numba_cuda
    from numba.cuda.core import config

    if not config.ENABLE_CUDASIM:
        raise SimulatorError("lib.simulator.install() is for simulator mode (NUMBA_ENABLE_CUDASIM=1)")
    if not numba_cuda.__version__.startswith(SUPPORTED_NUMBA_CUDA):
        raise SimulatorError(
            f"lib.simulator patches private classes of numba-cuda {SUPPORTED_NUMBA_CUDA}x, found "
            f"{numba_cuda.__version__}: install the version pinned in requirements.txt")
    from numba import cuda
    from numba.cuda.simulator import kernel, kernelapi

    SimThread = _simthread_class()
    globals()["SimThread"] = SimThread
    kernel.BlockManager = FastBlockManager
    for name, fn in INTRINSICS.items():
        setattr(kernelapi.FakeCUDAModule, name, staticmethod(fn))
        setattr(cuda, name, fn)  # so `from numba.cuda import shfl_down_sync` works as well
    _guard_negative_indices()
    # With event-driven barriers the default GIL switch interval is the fast one (measured: 4 blocks of
    # 256 threads with 9 barriers each take 1.0 s at 5 ms, 2.0 s at 0.1 ms; numba's polling scheduler 2.1 s).
    sys.setswitchinterval(5e-3)
    _installed = True
