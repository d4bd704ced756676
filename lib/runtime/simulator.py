"""Warp intrinsics and a fast, deterministic block scheduler for numba's CUDA simulator.

numba's simulator runs one Python thread per CUDA thread and has no warp intrinsics at all. This module
adds ``shfl_sync``, ``shfl_up_sync``, ``shfl_down_sync``, ``shfl_xor_sync``, ``syncwarp``, ``activemask``,
``lanemask_lt``, ``ballot_sync``, ``all_sync``, ``any_sync``, ``eq_sync``, ``match_any_sync`` and
``match_all_sync`` with the semantics of the PTX instructions numba emits (width 32), so kernels that use
them run unchanged without a GPU.

Scheduler. A block runs in the thread that launched the kernel; each of its CUDA threads is a greenlet (a
coroutine with its own stack), so starting one costs microseconds instead of an OS thread. A simulated
thread runs until it waits (``syncthreads()``, a warp collective, ``activemask()``) or exits, and only then
does another one run: there is no preemption. ``threading.current_thread()`` returns the simulated thread
while it runs (numba's ``cuda.threadIdx`` etc. and the tracer look it up there).

The order promises nothing a GPU does not. Blocks run one after another, in an order drawn from the
schedule's seed; the threads of a block start in an order of their own, drawn from it too; a thread that
waits goes to the back of the line when what it waits for completes, and the threads released together (a
barrier, a collective) join the line in the block's order. So ``cuda.atomic.add(counter, 0, 1)`` hands out
slots in no index order, and a kernel that relies on block 0 running before block 1 fails as it can on a
GPU. A kernel launched in thread-block clusters (``lib.runtime.hopper.cluster_dims``) runs cluster after
cluster instead, the blocks of each cluster co-resident: their threads share one line, interleaved in an
order drawn from the seed, so one block can wait for another (:func:`run_together`). The order is a function of (seed, launch number): :func:`schedule_seed` (``with schedule_seed(s):``)
sets the seed and counts launches from 0, so running the same calls under the same seed replays the same
order; an exception from a launch carries a note naming its seed and launch, and :func:`last_launch`
tells the order of the latest launch. The process default is seed ``DEFAULT_SEED`` (or
``CUDA_BOOK_SCHEDULE_SEED``). What a kernel sees: the per-launch ``cuda`` module in its globals and in its
closure cells (numba swaps only globals), and :mod:`lib.runtime.simmath`'s IEEE twins of ``math``.

Warp collectives. Every collective is a rendezvous of the lanes named in its mask; when the last of them
arrives, every lane's result is computed at once. A lane that exits is dropped from the rendezvous it
would have joined (CUDA only requires the *non-exited* lanes of the mask to arrive), so
``if i >= n: return`` before a full-mask shuffle still works; lanes missing from a block's last, partial
warp count as exited, as on the hardware. A lane that reaches a collective with a different mask than a
pending one simply waits for its own (legal CUDA: a partial-mask call in a branch, then a full-mask call
after it). Reading from a lane that exited or is not in the mask is undefined on a GPU; here it yields NaN
(floats) or 0xDEADBEEF (integers) so the mistake shows up in the results. ``ballot_sync`` and the masks of
``match_*_sync`` are ``numpy.int32`` as numba types them (a uint32 store converts them, as on a GPU), and
``match_*_sync`` compare bit patterns (NaN payloads differ, -0.0 differs from 0.0).

Arrays. A global array element is read and written straight from its numpy array (numba's wrapper makes
three Python calls per element). A negative index is refused with an IndexError: numba's compiled code
would wrap it like numpy (``a[-1]`` is the last element), but in a kernel it is almost always an index
computed below zero, so the book refuses it on purpose. Static shared arrays are keyed by their source
line as numba does, read from the caller's frame instead of a full stack extraction.

Errors. An exception in a simulated thread stops the block and is re-raised with ``tid=[x, y, z]
ctaid=[x, y, z]`` in front, as numba does. When no simulated thread can go on, the block is deadlocked and
:class:`DeadlockError` names who waits where (e.g. half a warp in ``syncthreads`` while the other half
waits in a shuffle). An asynchronous exception (the grader's time limit) raised in the launching thread
stops the kernel wherever it runs, even in ``while True:``.

Public API (other modules build on it; keep it stable):

- :func:`current_thread` -> the simulated thread running now, or None outside a kernel. Attributes:
  ``thread_id`` (linear id in the block), ``threadIdx``, ``blockIdx``, ``manager`` (its block's manager).
- the block manager: ``barrier_generation`` (syncthreads() completed in this block so far), ``grid_point``
  (the block's index as a 3-tuple), ``warp_seq(w)`` (warp collectives completed so far by warp w) and
  ``ordered_by_warp(w, since_seq, lane_a, lane_b)`` (True if a collective of warp w completed after
  ``since_seq`` with both lanes participating: syncwarp, shuffles, votes and match order memory accesses
  between those lanes).
- :func:`warp_collective` (op, mask, operands, compute): a generic rendezvous of the lanes in mask with the
  rules of the built-in intrinsics; ``compute({lane: operands}) -> {lane: result}`` runs once, when every
  non-exited lane of the mask has arrived; returns the calling lane's result.
- a manager's ``cluster`` (the blocks of its cluster by rank, itself alone outside clusters),
  ``cluster_rank``, ``cluster_dims`` and ``finished``; :func:`park`, :func:`unpark`, :func:`parked` and
  :func:`describe_parked` (a thread waits for an event of its block; ``manager=`` names another block of
  its cluster).
- :func:`add_block_listener` (start, end): ``start(manager)`` before a block's threads run,
  ``end(manager)`` after they all finished (not called when the block failed).
- :func:`schedule_seed`, :func:`set_schedule_seed`, :func:`current_schedule`, :func:`last_launch` (a
  :class:`LaunchSchedule`: ``seed``, ``index``, ``blocks`` in run order, per-block ``fences``/``syncs``) and
  :func:`add_launch_listener` (start, end) around every launch; a thread's ``gt`` (its number in the launch,
  blocks in run order) and a manager's ``base``, ``fences`` and ``syncs`` (lib.runtime.simdebug's checks
  between blocks).

This relies on private classes of numba-cuda's simulator (``BlockManager``, ``FakeCUDAModule``,
``FakeWithinKernelCUDAArray``); :func:`install` checks the version it was written against.
"""
from __future__ import annotations

import contextlib
import math
import operator
import os
import sys
import threading
from collections import deque
from itertools import groupby

import greenlet
import numpy as np

SUPPORTED_NUMBA_CUDA = "0.30."
FULL_MASK = 0xFFFFFFFF
WARP = 32
_POISON_INT = 0xDEADBEEF


_RUNNING: list = [None]  # the simulated thread running now (one kernel runs at a time); lib.runtime.simdebug's hot path
_by_rank = operator.attrgetter("rank")


class SimulatorError(RuntimeError):
    """A misuse of the simulated GPU that the book reports in plain words."""


class DeadlockError(SimulatorError):
    pass


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


def _int32(bits: int) -> np.int32:
    """A 32-bit mask as numba types it (int32): stores into uint32 arrays as the same bits, like the GPU."""
    return np.int32(_signed32(bits))


_FLOAT_BITS = {np.dtype(np.float16): np.uint16, np.dtype(np.float32): np.uint32, np.dtype(np.float64): np.uint64}


def _match_key(value):
    """match.sync compares bit patterns (numba bitcasts floats to .b32/.b64): NaNs with different payloads
    differ, -0.0 differs from 0.0 (unlike ==)."""
    if isinstance(value, np.floating):
        return (value.dtype.itemsize, int(value.view(_FLOAT_BITS[value.dtype])))
    if isinstance(value, float):
        return (8, int(np.float64(value).view(np.uint64)))
    return int(value)


class _Rendezvous:
    """One warp collective in progress: the lanes of `mask` that have arrived with their operands."""

    __slots__ = ("op", "mask", "compute", "operands", "results")

    def __init__(self, op: str, mask: int, compute=None):
        self.op = op
        self.mask = mask
        self.compute = compute
        self.operands: dict[int, tuple] = {}
        self.results: dict[int, object] | None = None


class _Warp:
    def __init__(self, index: int, lanes: list[int]):
        self.index = index
        self.live = set(lanes)                          # lanes that exist and have not exited
        self.blocked = 0                                # live lanes waiting somewhere
        self.pending: list[_Rendezvous] = []
        self.activemask_calls: dict[object, _Rendezvous] = {}  # call site -> lanes waiting there
        self.seq = 0                                   # collectives completed so far
        self.history: list[tuple[int, int]] = []       # (seq, bit mask of the lanes that took part)


def _compute(rv: _Rendezvous) -> dict[int, object]:
    """Every participating lane's result, from PTX's definitions of shfl.sync / vote.sync / match.sync."""
    ops = rv.operands
    op = rv.op
    if op == "syncwarp":
        return dict.fromkeys(ops)
    if op in ("ballot_sync", "all_sync", "any_sync", "eq_sync"):
        bits = 0
        for lane, (pred,) in ops.items():
            if pred:
                bits |= 1 << lane
        votes = [bool(p) for (p,) in ops.values()]
        value = {"ballot_sync": _int32(bits), "all_sync": all(votes), "any_sync": any(votes),
                 "eq_sync": all(votes) or not any(votes)}[op]
        return dict.fromkeys(ops, value)
    if op == "match_any_sync":
        groups: dict[object, int] = {}
        keys = {lane: _match_key(v) for lane, (v,) in ops.items()}
        for lane, key in keys.items():
            groups[key] = groups.get(key, 0) | 1 << lane
        return {lane: _int32(groups[key]) for lane, key in keys.items()}
    if op == "match_all_sync":
        values = [_match_key(v) for (v,) in ops.values()]
        same = all(v == values[0] for v in values)
        present = _int32(sum(1 << lane for lane in ops))
        return {lane: (present if same else np.int32(0), same) for lane in ops}
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


class _Dim3:
    """numba's Dim3 (x, y, z; iterable), built without a call per thread through numba's constructor."""

    __slots__ = ("x", "y", "z")

    def __init__(self, x, y, z):
        self.x, self.y, self.z = x, y, z

    def __iter__(self):
        yield self.x
        yield self.y
        yield self.z

    def __str__(self):
        return "(%s, %s, %s)" % (self.x, self.y, self.z)

    __repr__ = lambda self: "Dim3" + str(self)  # noqa: E731


class SimThread:
    """One simulated CUDA thread. ``threading.current_thread()`` returns it while it runs, so it also
    answers the few questions code asks of a thread (``ident``, ``name``, ``is_alive()``)."""

    def __init__(self, manager: "FastBlockManager", block_idx, thread_idx: tuple, thread_id: int):
        self._manager = manager
        self.blockIdx = block_idx
        self.threadIdx = _Dim3(*thread_idx)
        self.thread_id = thread_id
        self.gt = manager.base + thread_id  # number in the launch: blocks in the order they ran, then thread id
        self.rank = thread_id               # position in the block's run order (set by the schedule)
        self.exception = None
        self.greenlet = None
        self.ident = manager.ident
        self.daemon = True

    @property
    def manager(self):
        return self._manager

    @property
    def name(self):
        return str(self)

    def is_alive(self):
        return True

    def syncthreads(self):
        self._manager.syncthreads(self)

    def syncthreads_count(self, value):
        return self._manager.syncthreads(self, value)[0]

    def syncthreads_and(self, value):
        return self._manager.syncthreads(self, value)[1]

    def syncthreads_or(self, value):
        return self._manager.syncthreads(self, value)[2]

    def __str__(self):
        return "Thread <<<%s, %s>>>" % (self.blockIdx, self.threadIdx)


def _annotated(e: Exception, t: SimThread) -> Exception:
    """numba's wording: the exception again, with the thread and block in front of its message."""
    where = "tid=%s ctaid=%s" % (list(t.threadIdx), list(t.blockIdx))
    msg = where if str(e) == "" else f"{where}: {e}"
    try:
        return type(e)(msg)
    except Exception:  # noqa: BLE001 - an exception class with another constructor: keep it as it is
        return e


_block_listeners: list[tuple] = []


class FastBlockManager:
    """Runs one thread block: same interface as numba's BlockManager, cooperative instead of polling."""

    def __init__(self, f, grid_dim, block_dim, debug):
        self._grid_dim = grid_dim
        self._block_dim = block_dim
        self._f = f
        self._debug = debug
        self.block_state = np.zeros(block_dim, dtype=np.bool_)
        self.nthreads = int(np.prod(block_dim))
        self.barrier_generation = 0
        self.grid_point: tuple = ()
        self.live: set = set()
        self.warps: dict[int, _Warp] = {}
        self.waiting_at: dict = {}  # thread -> description, for deadlock reports
        self.ident = threading.get_ident()
        self._barrier_waiting: list = []
        self._barrier_values = [0, 0]   # threads with a true value, threads with any value
        self._barrier_result = (0, 0, 0)  # count, and, or of the last completed barrier
        self._ready: deque = deque()
        self._error: tuple | None = None
        self._hub = None
        self._threads: list[SimThread] = []
        self._active = threading._active  # current_thread() reads it: the running simulated thread goes there
        self.launch: LaunchSchedule | None = None  # set by the launch that runs this block
        self.ordinal = 0                # this block's place in the launch's run order
        self.base = 0                   # ordinal * threads per block: the first `gt` of this block
        self.shared = None              # its own cuda.shared (blocks of a cluster); None: the launch's
        self.fences = 0                 # threadfence() / threadfence_system() calls of this block so far
        self.syncs = 0                  # fences and global atomics of this block so far
        self.started = False            # its threads were made (a block of a cluster may wait for its turn)
        self.cluster: list = [self]     # the blocks of its cluster, by rank (run co-resident), itself alone
        self.cluster_rank = 0
        self.cluster_dims = (1, 1, 1)

    @property
    def finished(self) -> bool:
        """All its threads exited (a block of a cluster whose shared memory another may no longer use)."""
        return self.started and not self.live

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

    # --- the scheduler (the launching thread) ---------------------------------------------------
    def run(self, grid_point, *args):
        run_together([self], [grid_point], args)

    def _start(self, grid_point, hub):
        """Make the block's threads (not started yet) and return them in the order they first run."""
        self.grid_point = self._grid_point = tuple(int(g) for g in grid_point)
        bx, by, bz = self._block_dim
        block_idx = _Dim3(*self.grid_point)
        threads = [SimThread(self, block_idx, (x, y, z), x + bx * (y + by * z))
                   for z in range(bz) for y in range(by) for x in range(bx)]
        for w in range((self.nthreads + WARP - 1) // WARP):
            self.warps[w] = _Warp(w, list(range(min(WARP, self.nthreads - w * WARP))))
        self._threads = threads  # in thread-id order
        self.live = set(threads)
        self._hub = hub
        for t in threads:
            t.greenlet = greenlet.greenlet(self._thread_main, hub)
        for start, _ in _block_listeners:
            start(self)
        self.started = True
        if self.launch is not None:  # the order the threads first run in, drawn from the launch's seed
            order = [threads[i] for i in self.launch.thread_order(self.nthreads)]
            for rank, t in enumerate(order):
                t.rank = rank
            return order
        return threads

    def _thread_main(self, t: SimThread, args):
        try:
            if self._debug:
                np.seterr(divide="raise")
            self._f(*args)
        except Exception as e:  # noqa: BLE001 - handed to the launching thread with the thread named
            if self._error is None:
                self._error = (_annotated(e, t), sys.exc_info()[2])
            return
        self._thread_exited(t)

    def _wait(self, t: SimThread, warp: _Warp, what: str):
        """Mark `t` as waiting in `what`; it runs again once something puts it back in line (:meth:`_wake`)."""
        self.waiting_at[t] = what
        warp.blocked += 1

    def _yield(self, warp: _Warp):
        """Give the turn to the next thread in line (after :meth:`_wait` and the check whether what `t`
        waits for completed); straight to it, not through the scheduler's loop: half the switches."""
        if warp.activemask_calls:
            self._settle_activemask(warp)
        ready = self._ready
        if ready and ready[0].greenlet:  # started: switch to it where it waits
            t = ready.popleft()
            self._active[self.ident] = _RUNNING[0] = t
            t.greenlet.switch()
        else:  # a thread's first start is the scheduler's (a greenlet started here would inherit this one's
            self._hub.switch()  # Python recursion depth), as are the end and a deadlock

    def _wake(self, t: SimThread, warp: _Warp):
        del self.waiting_at[t]
        warp.blocked -= 1
        self._ready.append(t)

    def _waits(self, prefix: str = "") -> list[str]:
        where: dict[str, list] = {}
        for t in self.live:
            where.setdefault(self.waiting_at.get(t, "?"), []).append(t.thread_id)
        return [f"  {prefix}threads {_describe_lanes(ids)} wait in {what}" for what, ids in sorted(where.items())]

    def _report_deadlock(self, together=()):
        if len(together) > 1:
            lines = [line for m in together for line in m._waits(f"block {m.grid_point} (cluster rank "
                                                                   f"{m.cluster_rank}): ")]
            head = (f"deadlock in the cluster of blocks {', '.join(str(m.grid_point) for m in together)}: "
                    "every live thread of the cluster is waiting and none can go on.")
        else:
            lines = self._waits()
            head = f"deadlock in block {self.grid_point}: every live thread is waiting and none can go on."
        self._error = (DeadlockError(
            head + "\n" + "\n".join(lines)
            + "\nEvery lane named in a warp intrinsic's mask must reach the same call, and every "
              "thread of the block must reach syncthreads() (or exit)."), None)

    # --- barriers -------------------------------------------------------------------------------
    def syncthreads(self, t: SimThread, value=None):
        """One barrier; with a value, also its reduction (bar.red): (count, and, or) over the block."""
        warp = self.warps[t.thread_id // WARP]
        self._wait(t, warp, "syncthreads()")
        self._barrier_waiting.append(t)
        if value is not None:
            self._barrier_values[0] += 1 if value else 0
            self._barrier_values[1] += 1
        self._release_barrier_if_complete()
        self._yield(warp)
        return self._barrier_result

    def _release_barrier_if_complete(self):
        waiting = self._barrier_waiting
        if not waiting or len(waiting) < len(self.live):
            return
        true, n = self._barrier_values
        self._barrier_result = (true, int(true == n), int(true > 0))
        self._barrier_values = [0, 0]
        self._barrier_waiting = []
        self.barrier_generation += 1
        waiting.sort(key=_by_rank)  # they go on in the block's run order
        for th in waiting:
            self._wake(th, self.warps[th.thread_id // WARP])

    # --- warp collectives -------------------------------------------------------------------------
    def collective(self, t: SimThread, op: str, mask: int, *operands, compute=None):
        mask = int(mask) & FULL_MASK
        w, lane = divmod(t.thread_id, WARP)
        if not mask >> lane & 1:
            raise SimulatorError(f"lane {lane} called {op} with mask {mask:#010x}, which does not include "
                                 "the lane itself (undefined on a GPU)")
        warp = self.warps[w]
        rv = None
        for other in warp.pending:
            if other.mask == mask:
                rv = other
                break
        if rv is None:
            rv = _Rendezvous(op, mask, compute)
            warp.pending.append(rv)
        elif rv.op != op:
            raise SimulatorError(
                f"lanes of warp {w} disagree: some called {rv.op}, lane {lane} called {op} with the same "
                f"mask {mask:#010x}; all lanes in the mask must make the same call")
        rv.operands[lane] = operands
        self._wait(t, warp, f"{op}(mask={mask:#010x}) of warp {w}")
        self._complete_if_ready(warp, rv)
        self._yield(warp)
        return rv.results[lane]

    def _complete_if_ready(self, warp: _Warp, rv: _Rendezvous):
        arrived = rv.operands
        for lane in warp.live:
            if rv.mask >> lane & 1 and lane not in arrived:
                return
        rv.results = rv.compute(dict(arrived)) if rv.compute else _compute(rv)
        warp.seq += 1
        warp.history.append((warp.seq, sum(1 << lane for lane in arrived)))
        warp.pending.remove(rv)
        self._wake_lanes(warp, arrived)

    def _wake_lanes(self, warp: _Warp, lanes):
        first = warp.index * WARP
        threads = self._threads
        for t in sorted((threads[first + lane] for lane in lanes), key=_by_rank):  # in the block's run order
            self._wake(t, warp)

    def activemask(self, t: SimThread, site):
        """The lanes of the warp that reach this call site together: wait until every live lane of the
        warp either arrived here or waits somewhere else (or exited), as converged lanes would."""
        w, lane = divmod(t.thread_id, WARP)
        warp = self.warps[w]
        rv = warp.activemask_calls.setdefault(site, _Rendezvous("activemask", 0))
        rv.operands[lane] = ()
        self._wait(t, warp, f"activemask() of warp {w}")
        self._yield(warp)
        return rv.results

    def _settle_activemask(self, warp: _Warp):
        """Complete the warp's pending activemask() calls once none of its live lanes is still running."""
        if warp.blocked < len(warp.live):
            return
        calls, warp.activemask_calls = warp.activemask_calls, {}
        for rv in calls.values():
            rv.results = sum(1 << lane for lane in rv.operands)
            self._wake_lanes(warp, rv.operands)

    def _thread_exited(self, t: SimThread):
        self.live.discard(t)
        w, lane = divmod(t.thread_id, WARP)
        warp = self.warps[w]
        warp.live.discard(lane)
        for rv in list(warp.pending):
            self._complete_if_ready(warp, rv)
        self._release_barrier_if_complete()
        if warp.activemask_calls:
            self._settle_activemask(warp)


def run_together(managers: list, grid_points: list, args):
    """Run blocks co-resident (the blocks of one cluster; a lone block is a cluster of one): their threads
    share one line, so a thread of one block can wait for a thread of another (a cluster barrier, a
    multicast copy). Each block's threads first run in the order drawn for it; the blocks' orders are
    interleaved in an order drawn from the launch's seed too."""
    hub = greenlet.getcurrent()
    orders = [m._start(p, hub) for m, p in zip(managers, grid_points)]
    if len(managers) == 1:
        ready = managers[0]._ready
        ready.extend(orders[0])
    else:
        ready = deque()
        launch = managers[0].launch
        picks = (launch.thread_order(sum(len(o) for o in orders)) if launch is not None
                 else list(range(sum(len(o) for o in orders))))
        owner = [k for k, o in enumerate(orders) for _ in o]
        nxt = [0] * len(orders)
        for p in picks:                         # each block keeps its own order; the blocks interleave
            k = owner[p]
            ready.append(orders[k][nxt[k]])
            nxt[k] += 1
        for m in managers:
            m._ready = ready
    ident = managers[0].ident
    active = managers[0]._active
    me = active.get(ident)
    failed = None
    try:
        while ready:
            t = ready.popleft()
            active[ident] = _RUNNING[0] = t
            t.greenlet.switch(t, args)  # returns when a thread exits, or when nobody is ready
            active[ident] = me
            _RUNNING[0] = None
            failed = next((m for m in managers if m._error is not None), None)
            if failed is not None:
                break
        if failed is None and any(m.live for m in managers):
            failed = next(m for m in managers if m.live)
            failed._report_deadlock(managers)
    finally:
        _RUNNING[0] = None
        if me is None:
            active.pop(ident, None)
        else:
            active[ident] = me
        for m in managers:
            for t in m._threads:  # threads still waiting after an error: unwind them (GreenletExit)
                if t.greenlet:
                    t.greenlet.throw()
    if failed is not None:
        error, tb = failed._error
        raise error.with_traceback(tb)
    for m in managers:
        for _, end in _block_listeners:
            end(m)


# --- the schedule: the order blocks and threads run in, drawn from a seed ---------------------------------
SEED_ENV = "CUDA_BOOK_SCHEDULE_SEED"
DEFAULT_SEED = 0


def _check_seed(seed) -> tuple:
    """The seed as numpy's SeedSequence entropy: a non-negative int or a non-empty sequence of them."""
    words = tuple(seed) if isinstance(seed, (tuple, list)) else (seed,)
    if not words or not all(isinstance(w, (int, np.integer)) and not isinstance(w, bool) and w >= 0
                            for w in words):
        raise ValueError(f"a schedule seed is a non-negative integer or a sequence of them, got {seed!r}")
    return tuple(int(w) for w in words)


class Schedule:
    """The order of every launch made while it is the current schedule: launch k (counted from 0 since
    the schedule was set) runs its blocks in a random order, and the threads of each block in a random
    order, both drawn from (seed, k). The same seed and the same sequence of launches give the same
    order again: that is how a failure is replayed."""

    def __init__(self, seed):
        self.seed = seed
        self._words = _check_seed(seed)
        self.launches = 0

    def next_launch(self, grid_dim, block_dim) -> "LaunchSchedule":
        index = self.launches
        self.launches += 1
        return LaunchSchedule(self.seed, index, np.random.default_rng([*self._words, index]), grid_dim,
                              block_dim)

    def __repr__(self):
        return f"Schedule(seed={self.seed!r}, launches so far={self.launches})"


class LaunchSchedule:
    """One launch's order: ``blocks`` (the grid points in the order they run, one block after another) and,
    drawn as each block starts, the order of its threads. ``fences[ordinal]`` / ``syncs[ordinal]`` are the
    counts of a finished block's fences and fences + global atomics (for lib.runtime.simdebug)."""

    def __init__(self, seed, index: int, rng, grid_dim, block_dim):
        self.seed, self.index, self._rng = seed, index, rng
        self.grid_dim, self.block_dim = tuple(grid_dim), tuple(block_dim)
        self.nthreads = int(np.prod(self.block_dim))
        nblocks = int(np.prod(self.grid_dim))
        order = rng.permutation(nblocks)
        self.blocks = list(zip(*(axis.tolist() for axis in np.unravel_index(order, self.grid_dim))))
        self.fences = [0] * nblocks
        self.syncs = [0] * nblocks
        self.fn = None  # the kernel's Python function

    def thread_order(self, n: int) -> list:
        """Thread ids of a block in the order they first run (and go on after a barrier or collective)."""
        return self._rng.permutation(n).tolist() if n > 1 else list(range(n))

    def describe(self, blocks_shown: int = 8) -> str:
        shown = ", ".join(str(b) for b in self.blocks[:blocks_shown])
        more = f", ... ({len(self.blocks)} blocks)" if len(self.blocks) > blocks_shown else ""
        return (f"simulator schedule: seed {self.seed!r}, launch {self.index} of that schedule; blocks ran in "
                f"the order {shown}{more}, the threads of each block in an order of their own. Replay: "
                f"`with lib.runtime.simulator.schedule_seed({self.seed!r}):` around the same calls")


def _default_schedule() -> Schedule:
    text = os.environ.get(SEED_ENV, "").strip()
    if not text:
        return Schedule(DEFAULT_SEED)
    try:
        return Schedule(int(text))
    except ValueError:
        raise SimulatorError(f"{SEED_ENV} must be a non-negative integer, got {text!r}") from None


_schedule: Schedule | None = None
_last_launch: LaunchSchedule | None = None


def current_schedule() -> Schedule:
    """The schedule the next launch draws its order from (the process default: seed ``DEFAULT_SEED``, or
    ``CUDA_BOOK_SCHEDULE_SEED`` from the environment)."""
    global _schedule
    if _schedule is None:
        _schedule = _default_schedule()
    return _schedule


def set_schedule_seed(seed) -> Schedule:
    """Make a fresh schedule with this seed the current one (its launches are counted from 0); returns the
    schedule it replaces."""
    global _schedule
    previous = current_schedule()
    _schedule = Schedule(seed)
    return previous


@contextlib.contextmanager
def schedule_seed(seed):
    """``with schedule_seed(seed):`` the launches inside run in the order drawn from `seed` (a non-negative
    int or a sequence of them, e.g. ``[case_seed, case_number]``), counted from launch 0; the schedule
    before is restored afterwards. Running the same calls under the same seed replays the same order."""
    global _schedule
    previous = set_schedule_seed(seed)
    try:
        yield _schedule
    finally:
        _schedule = previous


def last_launch() -> LaunchSchedule | None:
    """The order of the most recent launch (seed, launch index, block order)."""
    return _last_launch


_launch_listeners: list[tuple] = []


def add_launch_listener(start, end):
    """Call ``start(launch_schedule)`` before a launch's first block and ``end(launch_schedule)`` after its
    last one (also when it failed)."""
    _launch_listeners.append((start, end))


# --- the public functions -----------------------------------------------------------------------------
def current_thread() -> SimThread | None:
    """The simulated CUDA thread running now, or None outside a kernel."""
    t = _ACTIVE.get(_get_ident())  # what threading.current_thread() reads, one call less (hot in tools)
    return t if type(t) is SimThread else None


_ACTIVE, _get_ident = threading._active, threading.get_ident


def add_block_listener(start, end):
    """Call ``start(manager)`` before each block's threads run and ``end(manager)`` after they finished."""
    _block_listeners.append((start, end))


def warp_collective(op: str, mask: int, operands: tuple, compute):
    """A rendezvous of the lanes in `mask` (rules of the built-in intrinsics); `compute(ops)` maps
    {lane: operands} to {lane: result} once every non-exited lane of the mask arrived."""
    t = current_thread()
    if t is None:
        raise SimulatorError(f"{op} can only be called inside a kernel")
    return t._manager.collective(t, op, mask, *operands, compute=compute)


# --- the intrinsics -----------------------------------------------------------------------------------
def _inside(op: str) -> SimThread:
    t = threading.current_thread()
    if type(t) is not SimThread:
        raise SimulatorError(f"cuda.{op} can only be called inside a kernel")
    return t


def _intrinsic(op, nargs):
    def call(*args):
        if len(args) != nargs:
            raise TypeError(f"cuda.{op} takes {nargs} arguments ({len(args)} given)")
        t = _inside(op)
        return t._manager.collective(t, op, *args)

    call.__name__ = op
    return call


_syncwarp_call = _intrinsic("syncwarp", 1)


def _syncwarp(mask=FULL_MASK):
    return _syncwarp_call(mask)


def _activemask():
    """Lanes of the calling warp that reach the same call (same code position) while none of the warp's
    other live lanes is still running: in converged code the full warp minus the lanes that exited; in a
    divergent branch the lanes of that branch."""
    t = _inside("activemask")
    caller = sys._getframe(1)
    return t._manager.activemask(t, (caller.f_code, caller.f_lasti))


def _lanemask_lt():
    return (1 << (_inside("lanemask_lt").thread_id % WARP)) - 1


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
    raise IndexError(
        f"negative index {index} into a global array. numba's compiled code would wrap it like numpy "
        "(a[-1] is the last element), but in a kernel a negative index is almost always an index "
        "computed below zero, so the book's simulator refuses it on purpose; write a[n - 1] if you "
        "mean the last element")


_INTEGERS = (int, np.integer)


def check_index(idx):
    """The slow path of a global element access's index check (slices, numpy integers, anything unusual):
    refuse a negative integer index."""
    for i in idx if type(idx) is tuple else (idx,):
        if isinstance(i, _INTEGERS) and i < 0:
            _reject_negative(idx)


def _global_element_access():
    """Global array accesses inside kernels: refuse negative indices, and go straight to the numpy array
    (numba's wrapper goes through three Python calls per element, most of a loop-heavy kernel's time).
    Each wrapper keeps its numpy array as ``_a`` (lib.runtime.simdebug's accessors read it too)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray, FakeWithinKernelCUDAArray

    def __init__(self, item):
        if not isinstance(item, FakeCUDAArray):
            raise TypeError(f"FakeWithinKernelCUDAArray wraps a FakeCUDAArray, got {type(item).__name__}")
        d = self.__dict__
        d["_item"] = item
        a = d["_a"] = item._ary
        d["_1d"] = a.ndim == 1 and a.dtype.names is None  # an int index gives an element, never a view

    # The common cases are checked inline, in as few Python steps as possible: this runs for every element.
    def __getitem__(self, idx):
        kind = type(idx)
        if kind is int:
            if idx < 0:
                _reject_negative(idx)
            d = self.__dict__
            if d["_1d"]:
                return d["_a"][idx]
        elif kind is tuple:
            try:
                fine = min(idx) >= 0  # integers only, none negative: in C
            except (TypeError, ValueError):  # a slice in it, or ()
                fine = False
            if not fine:
                check_index(idx)
        else:
            check_index(idx)
        ret = self._a[idx]
        if type(ret) is np.ndarray or type(ret) is np.void:  # a view (slice, record): wrapped as numba does
            return FakeWithinKernelCUDAArray(FakeCUDAArray(ret, stream=self._item.stream))
        return ret

    def __setitem__(self, idx, val):
        kind = type(idx)
        if kind is int:
            if idx < 0:
                _reject_negative(idx)
        elif kind is tuple:
            try:
                fine = min(idx) >= 0
            except (TypeError, ValueError):
                fine = False
            if not fine:
                check_index(idx)
        else:
            check_index(idx)
        self._a[idx] = val

    FakeWithinKernelCUDAArray.__init__ = __init__
    FakeWithinKernelCUDAArray.__getitem__ = __getitem__
    FakeWithinKernelCUDAArray.__setitem__ = __setitem__


def _fast_static_shared_arrays():
    """numba keys a static shared array by its caller's (file, line) through traceback.extract_stack, about
    a fifth of a barrier kernel's time here; the same key straight from the caller's frame."""
    from numba.core import types
    from numba.cuda.simulator.kernelapi import FakeCUDAShared
    from numba.np import numpy_support

    numba_array = FakeCUDAShared.array

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:  # dynamic shared memory, or numba's refusal of alignment
            return numba_array(self, shape, dtype, alignment)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        res = self._allocations.get(key)
        if res is None:
            if isinstance(dtype, types.Type):
                dtype = numpy_support.as_dtype(dtype)
            res = self._allocations[key] = np.empty(shape, dtype)
        return res

    FakeCUDAShared.array = array


# --- launches: the order, what a kernel sees (cuda, math), forall, atomics, fences -----------------------
class _KernelView:
    """What the functions of one launch see while it runs: the simulator's per-launch ``cuda`` module instead
    of numba.cuda, and the IEEE twins of :mod:`math` (:mod:`lib.runtime.simmath`) instead of Python's, in their
    globals (as numba swaps ``cuda``) and also in their closure cells (GPU-Puzzles hands ``numba.cuda`` to
    a factory whose inner function is the kernel). Each globals dict and cell is swapped once per launch,
    when the kernel or a device function it calls is first entered, and restored when the launch ends."""

    def __init__(self, fake_cuda):
        from numba import cuda

        from lib.runtime import simmath

        self.fake = fake_cuda
        self.replace = {id(cuda): (cuda, fake_cuda), id(math): (math, simmath.MODULE)}
        for original, twin in simmath.TWINS.items():
            self.replace[id(original)] = (original, twin)
        self.globals_done: set = set()
        self.undo: list = []   # (dict, name, original) and (cell, None, original)

    def enter(self, fn):
        g = getattr(fn, "__globals__", None)
        if g is not None and id(g) not in self.globals_done:
            self.globals_done.add(id(g))
            replace = self.replace
            for name, value in list(g.items()):
                hit = replace.get(id(value))
                if hit is not None and hit[0] is value:
                    g[name] = hit[1]
                    self.undo.append((g, name, value))
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            hit = self.replace.get(id(value))
            if hit is not None and hit[0] is value:
                cell.cell_contents = hit[1]
                self.undo.append((cell, None, value))

    def restore(self):
        for target, name, original in reversed(self.undo):
            if name is None:
                target.cell_contents = original
            else:
                target[name] = original
        self.undo = []


_view: _KernelView | None = None


def _fake_argument(kernel, arg, retr):
    """numba's FakeCUDAKernel.__call__.fake_arg: the extensions, then device copies of host arrays."""
    from numba.cuda.simulator.args import ArgHint, InOut
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray, FakeWithinKernelCUDAArray

    for extension in kernel.extensions:
        _, arg = extension.prepare_args(None, arg, stream=0, retr=retr)
    if isinstance(arg, np.ndarray) and arg.ndim > 0:
        ret = InOut(arg).to_device(retr)
    elif isinstance(arg, ArgHint):
        ret = arg.to_device(retr)
    elif isinstance(arg, np.void):
        ret = FakeCUDAArray(arg)
    else:
        ret = arg
    if isinstance(ret, FakeCUDAArray):
        return FakeWithinKernelCUDAArray(ret)
    return ret


def _simulated_call(self, *args):
    """FakeCUDAKernel.__call__: a launch runs its blocks one after another in the order of the current
    :class:`Schedule`; a device function (or a kernel called from a kernel) is a plain call."""
    global _view, _last_launch
    from numba.cuda.simulator import kernel as simkernel
    from numba.cuda.simulator.kernelapi import FakeCUDAModule

    if self._device or simkernel._kernel_context:
        if _view is not None:
            _view.enter(self.fn)
        return self.fn(*args)
    for what, dims in (("grid", self.grid_dim), ("block", self.block_dim)):  # normalised 3-tuples
        if dims is not None and min(dims) < 1:
            raise ValueError(f"LaunchConfig.{what} values must be >= 1 (got {tuple(dims)}), as a GPU "
                             "says it: a launch needs at least one block of one thread")
    from numba.cuda.errors import normalize_kernel_dimensions

    grid_dim, block_dim = normalize_kernel_dimensions(self.grid_dim, self.block_dim)
    fake_cuda = FakeCUDAModule(grid_dim, block_dim, self.dynshared_size)
    with simkernel._push_kernel_context(fake_cuda):
        retr = []
        fake_args = [_fake_argument(self, arg, retr) for arg in args]
        order = _last_launch = current_schedule().next_launch(grid_dim, block_dim)
        order.fn, order.dynshared_size = self.fn, self.dynshared_size
        view = _view = _KernelView(fake_cuda)
        for start, _ in _launch_listeners:
            start(order)
        try:
            view.enter(self.fn)
            nthreads = order.nthreads
            dims = getattr(self, "_book_cluster_dims", None)
            if dims is None:
                for ordinal, grid_point in enumerate(order.blocks):
                    bm = FastBlockManager(self.fn, grid_dim, block_dim, self._debug)
                    bm.launch, bm.ordinal, bm.base = order, ordinal, ordinal * nthreads
                    bm.run(grid_point, *fake_args)
                    order.fences[ordinal], order.syncs[ordinal] = bm.fences, bm.syncs
            else:
                _run_clusters(self.fn, self._debug, order, grid_dim, block_dim, dims, fake_args)
        except Exception as exc:
            if len(order.blocks) > 1 or order.nthreads > 1:
                exc.add_note(order.describe())
            raise
        finally:
            _view = None
            view.restore()
            for _, end in _launch_listeners:
                end(order)
        for wb in retr:
            wb()


def _run_clusters(fn, debug, order, grid_dim, block_dim, dims, args):
    """A launch in clusters of `dims` blocks (lib.runtime.hopper.cluster_dims): the clusters run one after
    another in the order their first block has in the launch's seeded order; the blocks of one cluster run
    co-resident. A grid that is not a whole number of clusters is refused, as the driver refuses it."""
    for axis, g, c in zip("xyz", grid_dim, dims):
        if g % c:
            raise ValueError(f"{fn.__name__} runs in clusters of {dims[0]} × {dims[1]} × {dims[2]} blocks, so its "
                             f"grid must be a multiple of that along each axis: grid.{axis} = {g} is not a "
                             f"multiple of {c}")
    clusters: dict = {}
    for ordinal, point in enumerate(order.blocks):
        cid = tuple(p // c for p, c in zip(point, dims))
        clusters.setdefault(cid, []).append((ordinal, point))
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    for cid, members in clusters.items():
        def rank(point):
            x, y, z = (p % c for p, c in zip(point, dims))
            return x + dims[0] * (y + dims[1] * z)
        members.sort(key=lambda m: rank(m[1]))
        managers = []
        for ordinal, point in members:
            bm = FastBlockManager(fn, grid_dim, block_dim, debug)
            bm.launch, bm.ordinal, bm.base = order, ordinal, ordinal * order.nthreads
            bm.cluster_rank, bm.cluster_dims = rank(point), tuple(dims)
            managers.append(bm)
        for bm in managers:
            bm.cluster = managers
            bm.shared = FakeCUDAShared(order.dynshared_size)   # co-resident: each block its own shared memory
        run_together(managers, [point for _, point in members], args)
        for (ordinal, _), bm in zip(members, managers):
            order.fences[ordinal], order.syncs[ordinal] = bm.fences, bm.syncs


def _forall(self, ntasks, tpb=0, stream=0, sharedmem=0):
    """numba's simulator forall, except that 0 tasks launch nothing (a GPU's ForAll returns at once)."""
    if ntasks < 0:
        raise ValueError("Can't create ForAll with negative task count: %s" % ntasks)
    if ntasks == 0:
        return _no_launch
    return self[ntasks, 1, stream, sharedmem]


def _no_launch(*args):
    return None


def _shared_of_block(fake_cuda):
    """cuda.shared: numba's simulator has one per launch (its blocks run one after another); a block of a
    cluster, co-resident with the others, has its own."""
    t = _RUNNING[0]
    own = getattr(t._manager, "shared", None) if t is not None else None
    return own if own is not None else fake_cuda._shared


def _fence():
    """threadfence() / threadfence_system(): counted per block (lib.runtime.simdebug orders blocks by them)."""
    t = _RUNNING[0]
    if t is not None:
        m = t._manager
        m.fences += 1
        m.syncs += 1


def _fence_block():
    pass  # orders nothing between blocks; within a block the scheduler already runs one thread at a time


def _direct_atomics():
    """cuda.atomic.* on a global array goes straight to its numpy array (numba's go through the array
    wrapper's element access three times), refuses a negative index as element accesses do, and counts
    toward its block's synchronisation (lib.runtime.simdebug). Shared and local arrays keep numba's path."""
    from numba.cuda.simulator import kernelapi
    from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray

    def wrap(fn, indexed=True):
        def atomic(self, array, *args):
            if type(array) is FakeWithinKernelCUDAArray:
                if indexed:
                    index = args[0]
                    if type(index) is not int or index < 0:
                        check_index(index)
                array = array._a
                t = _RUNNING[0]
                if t is not None:
                    t._manager.syncs += 1
            return fn(self, array, *args)

        atomic.__name__ = fn.__name__
        atomic.__wrapped__ = fn
        return atomic

    cls = kernelapi.FakeCUDAAtomic
    for name in ATOMICS:
        fn = getattr(cls, name, None)
        if fn is not None:
            setattr(cls, name, wrap(fn, indexed=name != "compare_and_swap"))


ATOMICS = ("add", "sub", "and_", "or_", "xor", "inc", "dec", "exch", "max", "min", "nanmax", "nanmin",
           "compare_and_swap", "cas")


def _jit_keeping_options(jit):
    """numba's simulator ``cuda.jit``, which also keeps what it ignores (the signature, ``opt``, ``inline``)
    on the kernel as ``_book_jit_options``: lib.runtime.gpucompile compiles with them (a device function that
    calls itself needs its signature)."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    def keep(kernel, sig, options):
        if isinstance(kernel, FakeCUDAKernel):
            kept = {k: options[k] for k in ("opt", "inline") if options.get(k) not in (None, False)}
            if sig is not None and not callable(sig):
                kept["sig"] = sig
            kernel._book_jit_options = kept
        return kernel

    def cuda_jit(func_or_sig=None, *args, **kwargs):
        result = jit(func_or_sig, *args, **kwargs)
        if isinstance(result, FakeCUDAKernel):
            return keep(result, None, kwargs)

        def decorate(fn):
            return keep(result(fn), func_or_sig, kwargs)

        return decorate

    cuda_jit.__wrapped__ = jit
    cuda_jit.__doc__ = jit.__doc__
    return cuda_jit

_installed = False


def install():
    """Add the intrinsics and the scheduler to the simulator (idempotent). Only valid in simulator mode."""
    global _installed
    if _installed:
        return
    import numba_cuda
    from numba.cuda.core import config

    if not config.ENABLE_CUDASIM:
        raise SimulatorError("lib.runtime.simulator.install() is for simulator mode (NUMBA_ENABLE_CUDASIM=1)")
    if not numba_cuda.__version__.startswith(SUPPORTED_NUMBA_CUDA):
        raise SimulatorError(
            f"lib.runtime.simulator patches private classes of numba-cuda {SUPPORTED_NUMBA_CUDA}x, found "
            f"{numba_cuda.__version__}: install the version pinned in requirements.txt")
    from numba import cuda
    from numba.cuda.simulator import kernel, kernelapi

    from numba.cuda import simulator as simulator_package
    from numba.cuda.simulator import api

    kernel.BlockManager = FastBlockManager
    kernel.FakeCUDAKernel.__call__ = _simulated_call
    api.jit = simulator_package.jit = cuda.jit = _jit_keeping_options(api.jit)
    kernel.FakeCUDAKernel.forall = _forall
    for name, fn in INTRINSICS.items():
        setattr(kernelapi.FakeCUDAModule, name, staticmethod(fn))
        setattr(cuda, name, fn)  # so `from numba.cuda import shfl_down_sync` works as well
    kernelapi.FakeCUDAModule.shared = property(_shared_of_block)
    kernelapi.FakeCUDAModule.threadfence = staticmethod(_fence)
    kernelapi.FakeCUDAModule.threadfence_system = staticmethod(_fence)
    kernelapi.FakeCUDAModule.threadfence_block = staticmethod(_fence_block)
    _global_element_access()
    _fast_static_shared_arrays()
    _direct_atomics()
    _installed = True


# --- parking: a thread waits for an event another thread of its block signals (lib.runtime.hopper) -------
def park(key, what: str):
    """The calling simulated thread waits until some thread calls :func:`unpark` with `key` for its block;
    `what` is how a deadlock report names the wait (update it with :func:`describe_parked`)."""
    t = current_thread()
    if t is None:
        raise SimulatorError(f"{what} can only be called inside a kernel")
    m = t._manager
    m.__dict__.setdefault("parked", {}).setdefault(key, []).append(t)
    warp = m.warps[t.thread_id // WARP]
    m._wait(t, warp, what)
    m._yield(warp)


def unpark(key, manager=None) -> int:
    """Put every thread of a block (the calling thread's, or `manager`'s: another block of its cluster)
    parked on `key` back in line; how many there were."""
    m = manager if manager is not None else current_thread()._manager
    waiting = m.__dict__.get("parked", {}).pop(key, [])
    for t in waiting:
        m._wake(t, m.warps[t.thread_id // WARP])
    return len(waiting)


def parked(key, manager=None) -> int:
    """How many threads of the calling thread's block (or of `manager`'s) are parked on `key`."""
    m = manager if manager is not None else current_thread()._manager
    return len(m.__dict__.get("parked", {}).get(key, ()))


def describe_parked(key, what: str, manager=None):
    """Reword what the threads parked on `key` wait for (the state they wait on changed)."""
    m = manager if manager is not None else current_thread()._manager
    for t in m.__dict__.get("parked", {}).get(key, ()):
        m.waiting_at[t] = what
