"""The simulator's debugger: uninitialised memory and data races, found while a kernel runs.

On numba's CUDA simulator (``import lib`` on a machine without a GPU) every kernel launch is watched for
the bugs students make most, and the first one found stops the launch with an error that names the source
line(s), the block and the thread(s):

* **Uninitialised memory.** ``cuda.shared.array`` (static and dynamic) and ``cuda.local.array`` start
  filled with a poison (NaN for floats, 0xDEADBEEF for integers), and each block has shared memory of its
  own (numba's simulator shares one array between all the blocks of a launch). Reading an element that no
  thread of the block (for a local array: the thread itself) has written raises
  :class:`UninitializedReadError`. On a GPU that read returns whatever the memory held before.
* **Shared-memory races.** Between two barriers (one *barrier interval*), an element written by one thread
  and read or written by another is a race: :class:`RaceError` names both accesses and the missing
  ``cuda.syncthreads()``. Two lanes of one warp are ordered by a warp collective of that warp that both
  took part in between the accesses (``syncwarp``, a shuffle, a vote), so warp-synchronous code is fine.
  Two threads writing the same value is not reported (racecheck calls it benign too).
* **Global read-modify-write races.** ``out[0] += x[i]`` in many threads of one launch loses updates on a
  GPU: each reads the old value, adds, and writes back over the others. A non-atomic read-then-write of
  one global element by two threads of a launch (two blocks, or one block within one barrier interval)
  raises :class:`RaceError` with both lines and a pointer to ``cuda.atomic.add``.
* **Races between blocks.** Blocks of a launch run in no defined order (the simulator draws one from its
  schedule's seed). A block that reads a global element another block of the same launch wrote, or writes
  one another block read, or two blocks that write different values to one element, raise
  :class:`RaceError` with both threads (and the line of a write): on a GPU the read may come before or
  after the write. Such an access is ordered only through memory: the first block calls
  ``cuda.threadfence()`` after its access (then typically sets a flag with an atomic), and the second has
  synchronised (a fence or an atomic, e.g. reading that flag) before its own; then nothing is reported.

Not reported: accesses through ``cuda.atomic.*``; a thread reading its own writes; anything a barrier
orders; a value written in one launch and read in a later one; accesses through two different views
(slices) of one array. A kernel that races on purpose (and is right on a GPU for reasons this checker
cannot see) says so next to its definition with :func:`allow_races`; only the race checks are skipped
for it.

Switch: ``CUDA_BOOK_SIMDEBUG=0`` in the environment before ``import lib`` leaves it off;
:func:`uninstall` / :func:`install` switch it at run time, and ``with simdebug.disabled():`` for a block.

How: the simulator's shared arrays are replaced by a thin wrapper holding a written-mask (one byte per
element) and the accesses of the current barrier interval (a dict per array, emptied when the block's
barrier generation moves on); float local arrays are filled with a NaN of a payload of their own, so a read
costs one comparison (integer ones keep a written-mask); global element accesses
(``FakeWithinKernelCUDAArray``) note, per launch and array, each element's last reader and writer (as the
thread's number in the launch), so a write after the same thread's read is a read-modify-write and an
access by a later block to what an earlier block touched is checked. It builds on
:mod:`lib.runtime.simulator` (the current simulated thread, its block's barrier generation, fences and
warp collectives, the launch's order and which kernel it runs).
"""
from __future__ import annotations

import contextlib
import linecache
import operator
import os
import re
import sys

import numpy as np

from lib.mode import ROOT

POISON_INT = 0xDEADBEEF
ENV_SWITCH = "CUDA_BOOK_SIMDEBUG"
WARP = 32

try:  # the simulator's error class, so `except SimulatorError` catches ours too
    from lib.runtime.simulator import _RUNNING, SimulatorError, _reject_negative, check_index as _check_index
except Exception:  # a GPU process without the simulator module's dependencies: keep a class of our own
    class SimulatorError(RuntimeError):
        pass


class UninitializedReadError(SimulatorError):
    """A kernel read shared or local memory that nothing had written."""


class RaceError(SimulatorError):
    """Two threads accessed one element without an order between them, at least one of them writing."""


# --- opt-outs ----------------------------------------------------------------------------------------

_ALLOWED: dict = {}  # code object of a kernel's Python function -> why it may race


def allow_races(kernel, why: str):
    """Mark `kernel` (a ``@cuda.jit`` kernel or its Python function) as racing on purpose: the simulator's
    race checks skip its launches (uninitialised reads are still reported). Returns `kernel`, so it can
    wrap a definition. Works in any mode (on a GPU it only records the reason)."""
    fn = getattr(kernel, "py_func", kernel)
    code = getattr(fn, "__code__", None)
    if code is None:
        raise TypeError(f"allow_races needs a kernel or a Python function, got {type(kernel).__name__}")
    if not isinstance(why, str) or not why.strip():
        raise ValueError("allow_races needs a reason: why=\"...\" says why the race is intended and safe")
    _ALLOWED[code] = why
    return kernel


def allowed_races() -> dict[str, str]:
    """{kernel name: reason} of every kernel that opted out of the race checks so far."""
    return {code.co_name: why for code, why in _ALLOWED.items()}


# --- the simulated thread and its block ---------------------------------------------------------------

def _current():
    return None  # lib.runtime.simulator.current_thread once installed


def _manager(t):
    return t.manager


def _grid_point(m) -> tuple:
    return tuple(int(g) for g in m.grid_point)


def _thread_point(t) -> tuple:
    return tuple(int(v) for v in t.threadIdx)


def _ordered_by_warp(m, tid_a: int, seq_a, tid_b: int) -> bool:
    """True if lanes tid_a and tid_b are in one warp and a collective of that warp with both completed
    after seq_a (the warp's sequence number when tid_a made its access)."""
    w = tid_a // WARP
    if tid_b // WARP != w:
        return False
    return bool(m.ordered_by_warp(w, seq_a, tid_a % WARP, tid_b % WARP))


# --- where an access comes from ----------------------------------------------------------------------

_SKIP_FILES: set = {__file__}


def _caller():
    """The first frame outside the simulator's and the book's machinery (the kernel's line)."""
    f = sys._getframe(1)
    while f.f_code.co_filename in _SKIP_FILES and f.f_back is not None:
        f = f.f_back
    return f


def _where(code, line) -> str:
    path = code.co_filename
    real = os.path.realpath(path)  # chapters/kernels links to kernels/: name the file itself
    shown = os.path.relpath(real, ROOT) if real.startswith(str(ROOT) + os.sep) else path
    text = re.sub(r"\s+#.*$", "", linecache.getline(path, line).strip())  # the code, not its comment
    return f"{shown}:{line}   {text}" if text else f"{shown}:{line}"


_NAME_CACHE: dict = {}


def _variable_name(code, line, kind: str) -> str:
    key = (code.co_filename, line)
    name = _NAME_CACHE.get(key)
    if name is None:
        m = re.match(r"\s*(\w+)\s*(?::[^=]*)?=\s*(?:\w+\.)*(?:shared|local)\.array\b",
                     linecache.getline(code.co_filename, line))
        name = m.group(1) if m else f"{kind} array of line {line}"
        _NAME_CACHE[key] = name
    return name


def _show_index(idx) -> str:
    if isinstance(idx, tuple):
        return ", ".join(_show_index(i) for i in idx)
    if isinstance(idx, slice):
        return f"{'' if idx.start is None else idx.start}:{'' if idx.stop is None else idx.stop}" + (
            f":{idx.step}" if idx.step is not None else "")
    return str(int(idx)) if isinstance(idx, (int, np.integer)) else repr(idx)


def _show_value(value) -> str:
    if isinstance(value, np.integer):
        return f"{int(value)} = {int(value) & (1 << 8 * value.itemsize) - 1:#x}"
    return str(value.item() if isinstance(value, np.generic) else value)


def _poison_fill(ary: np.ndarray):
    kind = ary.dtype.kind
    if kind in "fc":
        ary.fill(np.nan)
    elif kind in "iu":
        ary.fill(np.array(POISON_INT, dtype=np.uint64).astype(ary.dtype))
    elif kind == "b":
        ary.fill(True)
    else:
        ary.view(np.uint8).fill(0xEF)


# --- per-launch state --------------------------------------------------------------------------------

class _Launch:
    """What the debugger keeps for one launch: does it check races, and what it did to each global array."""

    __slots__ = ("order", "races", "arrays", "wrappers")

    def __init__(self, order, code):
        self.order = order               # lib.runtime.simulator.LaunchSchedule: block order, fence counts
        self.races = code not in _ALLOWED
        self.arrays: dict = {}           # id(numpy array) -> _GlobalArray
        self.wrappers: list = []         # array wrappers that cache their _GlobalArray (cleared at the end)


_NO_LAUNCH = _Launch(None, None)
_launch = _NO_LAUNCH


def _launch_started(order):
    global _launch
    _launch = _Launch(order, getattr(order.fn, "__code__", None))


def _launch_ended(order):
    global _launch
    for wrapper in _launch.wrappers:
        d = wrapper.__dict__
        d.pop("_g", None)
        d.pop("_r", None)
    _launch = _NO_LAUNCH


def _current_launch() -> _Launch:
    return _launch


# --- shared and local arrays ------------------------------------------------------------------------

class _Tracked:
    """A shared or local array of one block (or one thread) with a written-mask; shared ones also check
    races. Element accesses are checked; a slice or a whole-array numpy operation sees the numpy array."""

    __slots__ = ("_ary", "_written", "_shape", "_ndim", "_size", "_strides", "_name", "_space", "_manager",
                 "_epoch", "_flats", "_root", "_siblings", "_races", "__weakref__")

    def __init__(self, ary, name, space, manager, root=None, flats=None, races=False):
        self._ary = ary
        self._shape = ary.shape
        self._ndim = ary.ndim
        self._size = ary.size
        st = []
        acc = 1
        for n in reversed(ary.shape):
            st.append(acc)
            acc *= n
        self._strides = tuple(reversed(st))
        self._name = name
        self._space = space
        self._manager = manager
        self._root = self if root is None else root
        self._flats = flats                           # a view: the root's flat index of each element
        if root is None:
            self._written = bytearray(ary.size)
            self._epoch = (-1, {}, {})                # (barrier generation, writes, reads) of that interval
            self._siblings = ()                       # dynamic shared: the other dtypes' views of the bytes
            self._races = races                       # shared memory of a launch that checks races

    # numpy-like surface for code that treats it as an array
    shape = property(lambda self: self._shape)
    ndim = property(lambda self: self._ndim)
    size = property(lambda self: self._size)
    dtype = property(lambda self: self._ary.dtype)

    def __len__(self):
        return len(self._ary)

    def __array__(self, dtype=None, copy=None):
        return self._ary if dtype is None else self._ary.astype(dtype)

    def __iter__(self):
        for i in range(len(self._ary)):
            yield self[i]

    def __repr__(self):
        return f"<{self._space} array {self._name} {self._shape} {self._ary.dtype}>"

    def __getattr__(self, name):  # any other numpy attribute or method (whole-array, unchecked)
        if name.startswith("__") or name in _Tracked.__slots__:
            raise AttributeError(name)
        return getattr(self._ary, name)

    # --- index to flat element ---
    def _flat(self, idx):
        """The root's flat element index of ary[idx], or None if idx is not a single element."""
        if self._flats is not None:
            sub = self._flats[idx]
            return int(sub) if np.ndim(sub) == 0 else None
        tidx = type(idx)
        if tidx is tuple and self._ndim == 2 and len(idx) == 2:  # the common 2-D tile, without a loop
            i, j = idx
            if type(i) is int and type(j) is int and i >= 0 and j >= 0:
                return i * self._strides[0] + j
        if self._ndim == 1 and (tidx is int or isinstance(idx, np.integer)):
            i = int(idx)
            return i + self._size if i < 0 else i
        if tidx is tuple and len(idx) == self._ndim:
            flat = 0
            for i, n, s in zip(idx, self._shape, self._strides):
                if not (type(i) is int or isinstance(i, np.integer)):
                    return None
                i = int(i)
                flat += (i + n if i < 0 else i) * s
            return flat
        return None

    def _flats_of(self, idx) -> np.ndarray:
        base = self._flats if self._flats is not None else np.arange(self._size).reshape(self._shape)
        return np.asarray(base[idx]).ravel()

    # --- element access ---
    def __getitem__(self, idx):
        value = self._ary[idx]  # first: an index out of range raises numpy's IndexError
        if type(idx) is int and self._ndim == 1 and self._flats is None:  # the common case, inline
            flat = idx if idx >= 0 else idx + self._size
        else:
            flat = self._flat(idx)
        root = self._root
        if flat is None:  # a slice: a view that keeps checking its elements
            if isinstance(value, np.ndarray):
                flats = (self._flats if self._flats is not None
                         else np.arange(self._size).reshape(self._shape))[idx]
                return _Tracked(value, self._name, self._space, self._manager, root, flats)
            return value
        if not root._written[flat]:
            if not root._written_elsewhere(flat):
                _uninitialised(root, idx, value)
        if root._races and not _in_atomic:
            t = _current()
            if t is not None:
                _shared_read(root, flat, idx, t, sys._getframe(1))
        return value

    def __setitem__(self, idx, value):
        if type(idx) is int and self._ndim == 1 and self._flats is None:
            flat = idx if idx >= 0 else idx + self._size
        else:
            flat = self._flat(idx)
        root = self._root
        if flat is None:
            flats = self._flats_of(idx)
            self._ary[idx] = value
            for f in flats.tolist():
                root._written[f] = 1
            return
        if root._races and not _in_atomic:
            t = _current()
            if t is not None:
                _shared_write(root, flat, idx, t, sys._getframe(1), value)
        self._ary[idx] = value
        root._written[flat] = 1

    def _written_elsewhere(self, flat) -> bool:
        """Dynamic shared memory: the element's bytes were all written through a view of another dtype."""
        if not self._siblings:
            return False
        k = self._ary.itemsize
        lo, hi = flat * k, flat * k + k
        for other in self._siblings:
            if other is self:
                continue
            ko = other._ary.itemsize
            if all(other._written[b // ko] for b in range(lo, hi) if b // ko < other._size):
                self._written[flat] = 1
                return True
        return False


def _uninitialised(root: _Tracked, idx, value):
    t = _current()
    f = _caller()
    who = f"thread {_thread_point(t)} of block {_grid_point(_manager(t))} " if t is not None else ""
    if root._space == "shared":
        scope = ("no thread of this block has written (if one writes it later, a cuda.syncthreads() is missing "
                 "between that write and this read, or cuda.syncwarp() between two lanes of one warp: threads "
                 "run in no defined order)")
    else:
        scope = "this thread has not written"
    raise UninitializedReadError(
        f"uninitialised {root._space} memory: {who}read {root._name}[{_show_index(idx)}], which {scope}.\n"
        f"  at {_where(f.f_code, f.f_lineno)}\n"
        f"On a GPU this reads whatever the memory held before (here the poison {_show_value(value)}). Write "
        "every element before it is read: for a block's tail past the end of the input, store the identity "
        "(0 for a sum).")


def _kernel_frame(frame):
    """`frame`, or the first frame above it outside the simulator's machinery (atomics, the tracer)."""
    while frame.f_code.co_filename in _SKIP_FILES and frame.f_back is not None:
        frame = frame.f_back
    return frame


def _shared_read(root: _Tracked, flat: int, idx, t, frame):
    m = root._manager
    epoch = root._epoch  # (barrier generation, writes, reads) of the interval: new when a barrier completes
    if epoch[0] != m.barrier_generation:
        epoch = root._epoch = (m.barrier_generation, {}, {})
    tid = t.thread_id
    w = epoch[1].get(flat)
    if w is not None and w[0] != tid and not _ordered_by_warp(m, w[0], w[1], tid):
        f = _kernel_frame(frame)
        _race(root, idx, m, w, (tid, None, f.f_code, f.f_lineno), "read")
    reads = epoch[2]
    r = reads.get(flat)
    # keep the last reader and one other: enough to find a reader that is not a later writer
    if r is None or (r[4] is None and r[0] != tid):
        while frame.f_code.co_filename in _SKIP_FILES:
            frame = frame.f_back
        reads[flat] = (tid, m.warp_seq(tid // WARP), frame.f_code, frame.f_lineno, r)


def _shared_write(root: _Tracked, flat: int, idx, t, frame, value):
    m = root._manager
    epoch = root._epoch
    if epoch[0] != m.barrier_generation:
        epoch = root._epoch = (m.barrier_generation, {}, {})
    writes = epoch[1]
    tid = t.thread_id
    while frame.f_code.co_filename in _SKIP_FILES:
        frame = frame.f_back
    w = writes.get(flat)
    if w is not None and w[0] != tid and not _ordered_by_warp(m, w[0], w[1], tid):
        if not _same_bits(root._ary.flat[flat], value):  # the same value twice is harmless
            _race(root, idx, m, w, (tid, None, frame.f_code, frame.f_lineno), "write")
    r = epoch[2].get(flat)
    while r is not None:
        if r[0] != tid and not _ordered_by_warp(m, r[0], r[1], tid):
            _race(root, idx, m, r, (tid, None, frame.f_code, frame.f_lineno), "write", first="read")
        r = r[4]
    writes[flat] = (tid, m.warp_seq(tid // WARP), frame.f_code, frame.f_lineno)


def _same_bits(old, new) -> bool:
    try:
        return np.asarray(old).tobytes() == np.asarray(new, dtype=np.asarray(old).dtype).tobytes()
    except (TypeError, ValueError, OverflowError):
        return False


def _thread_of(m, tid: int) -> tuple:
    """threadIdx of the thread with linear id `tid` in m's block."""
    bx, by = m._block_dim[0], m._block_dim[1]
    return (tid % bx, tid // bx % by, tid // (bx * by))


def _race(root: _Tracked, idx, m, earlier, later, later_op: str, first: str = "write"):
    t_a, _, code_a, line_a = earlier[:4]
    t_b, _, code_b, line_b = later
    block = _grid_point(m)
    fix = "every thread of the block must reach it"
    if t_a // WARP == t_b // WARP:
        fix += "; two lanes of one warp are also ordered by cuda.syncwarp()"
    raise RaceError(
        f"shared-memory race on {root._name}[{_show_index(idx)}] in block {block}: no barrier orders these "
        f"two accesses (same barrier interval):\n"
        f"  thread {_thread_of(m, t_a)} {first + 's':6} it at {_where(code_a, line_a)}\n"
        f"  thread {_thread_of(m, t_b)} {later_op + 's':6} it at {_where(code_b, line_b)}\n"
        f"On a GPU their order is not defined, so the result depends on timing. A cuda.syncthreads() is "
        f"missing between them ({fix}).")


# --- patched simulator entry points ----------------------------------------------------------------

_originals: dict = {}


def _check_alignment(alignment):
    if alignment is not None and (not isinstance(alignment, (int, np.integer)) or alignment <= 0
                                  or alignment & (alignment - 1)):
        raise ValueError(f"alignment must be a positive power of two, got {alignment!r}")


def _shared_array(self, shape, dtype, alignment=None):
    """cuda.shared.array: one poisoned array per block and call site (numba keys static allocations by
    file and line, so two arrays on one line alias, as in numba's simulator)."""
    from numba.core import types
    from numba.np import numpy_support

    t = _current()
    if t is None:
        return _originals["shared"](self, shape, dtype, alignment)
    _check_alignment(alignment)
    if isinstance(dtype, types.Type):
        dtype = numpy_support.as_dtype(dtype)
    dtype = np.dtype(dtype)
    f = sys._getframe(1)
    m = _manager(t)
    arrays = m.__dict__.setdefault("_simdebug_shared", {})  # this block's shared memory
    key = ("dynamic", dtype.str) if (isinstance(shape, (int, np.integer)) and shape == 0) else \
        (f.f_code.co_filename, f.f_lineno)
    tracked = arrays.get(key)
    if tracked is None:
        tracked = arrays[key] = _new_shared(self, arrays, key, shape, dtype, f, m)
    return tracked


def _new_shared(fake_shared, arrays, key, shape, dtype, frame, m) -> _Tracked:
    if key[0] == "dynamic":
        buf = arrays.get("dynamic bytes")
        fresh = buf is None
        if fresh:
            buf = arrays["dynamic bytes"] = np.empty(fake_shared._dynshared_size, dtype=np.uint8)
        ary = np.frombuffer(buf.data, dtype=dtype, count=len(buf) // dtype.itemsize)
        if fresh:
            _poison_fill(ary)
        tracked = _Tracked(ary, "dynamic shared memory", "shared", m, races=_current_launch().races)
        views = [v for k, v in arrays.items() if isinstance(k, tuple) and k[0] == "dynamic"] + [tracked]
        for v in views:
            v._siblings = tuple(views)
        return tracked
    ary = np.empty(shape, dtype)
    _poison_fill(ary)
    return _Tracked(ary, _variable_name(frame.f_code, frame.f_lineno, "shared"), "shared", m,
                    races=_current_launch().races)


# float local arrays: a NaN with this payload marks "never written" (arithmetic on a poison read would have
# raised first, and NaNs computed by the kernel carry the default payload), so a read needs no mask
_LOCAL_NAN = {np.dtype(np.float32): np.array(0x7FC0DEAD, np.uint32).view(np.float32),
              np.dtype(np.float64): np.array(0x7FF8DEADDEADBEEF, np.uint64).view(np.float64)}


class _LocalFloats:
    """A float local array: reads of the poison NaN are reported; writes cost nothing extra."""

    __slots__ = ("_ary", "_name")

    def __init__(self, ary, name):
        self._ary = ary
        self._name = name

    def __getitem__(self, idx):
        value = self._ary[idx]
        try:
            if value != value:  # NaN: the poison, or a NaN the kernel computed
                _local_nan(self, idx, value)
        except ValueError:  # a slice: an array, checked element by element when read
            return _LocalFloats(value, self._name)
        return value

    def __setitem__(self, idx, value):
        self._ary[idx] = value

    shape = property(lambda self: self._ary.shape)
    ndim = property(lambda self: self._ary.ndim)
    size = property(lambda self: self._ary.size)
    dtype = property(lambda self: self._ary.dtype)

    def __len__(self):
        return len(self._ary)

    def __array__(self, dtype=None, copy=None):
        return self._ary if dtype is None else self._ary.astype(dtype)

    def __getattr__(self, name):
        if name.startswith("__") or name in _LocalFloats.__slots__:
            raise AttributeError(name)
        return getattr(self._ary, name)


def _local_nan(local: _LocalFloats, idx, value):
    poison = _LOCAL_NAN[local._ary.dtype]
    if np.asarray(value).tobytes() == np.asarray(poison).tobytes():
        root = _Tracked(local._ary, local._name, "local", None)
        _uninitialised(root, idx, value)


def _local_array(self, shape, dtype, alignment=None):
    from numba.core import types
    from numba.np import numpy_support

    _check_alignment(alignment)
    if isinstance(dtype, types.Type):
        dtype = numpy_support.as_dtype(dtype)
    dtype = np.dtype(dtype)
    ary = np.empty(shape, dtype)
    f = sys._getframe(1)
    name = _variable_name(f.f_code, f.f_lineno, "local")
    poison = _LOCAL_NAN.get(dtype)
    if poison is not None:
        ary.fill(poison)
        return _LocalFloats(ary, name)
    _poison_fill(ary)
    return _Tracked(ary, name, "local", None)


# --- global memory ----------------------------------------------------------------------------------
#
# Blocks run one after another (lib.runtime.simulator), so within a launch every access of an earlier block happened
# before every access of the running one, and a thread's `gt` (its number in the launch: blocks in run order,
# then thread id) is below the running block's `base` exactly when it belongs to an earlier block. Per
# element the debugger keeps the last writer, the last reader (and a reader of an earlier block than that),
# and the last read-modify-write. In a 1-D array the key is the element, an int, however the kernel wrote
# the index (an int, a numpy integer, a 1-tuple); in other arrays it is the index as the kernel wrote it (a
# tuple of ints). A 1-D array of up to FLAT_LIMIT elements keeps its last readers and writers in lists
# indexed by the element, any other array in dicts.
#
# Every element access runs the accessors below, so their common case (an int index into a 1-D array of a
# launch that checks races) is written out inline: list entries, no method calls, no frame unless a record
# needs one. The general case (`_read_seen` / `_write_seen`) does the same checks for any table.

FLAT_LIMIT = 1 << 22  # elements: a list entry (8 bytes) per element and launch; larger arrays keep dicts


class _GlobalArray:
    """What one launch did to one global array."""

    __slots__ = ("ary", "blocks", "flat", "lists", "size", "writes", "write_fences", "write_codes", "write_lastis",
                 "reads", "earlier_reads", "rmw")

    def __init__(self, ary, blocks: bool):
        self.ary = ary                    # kept alive: its id is the key
        self.blocks = blocks              # the launch has several blocks: accesses between blocks are checked
        self.size = n = ary.size
        self.flat = ary.ndim == 1 and ary.dtype.names is None  # keys are elements (ints), however indexed
        self.lists = self.flat and n <= FLAT_LIMIT              # tables are lists indexed by the element
        # several blocks only: idx -> (gt, block's fences then, code, lasti); list tables keep the four in four
        # lists (`writes` the gt), so that a write allocates nothing (a tuple per write is collected garbage)
        self.writes = ([None] * n if blocks else None) if self.lists else {}
        self.write_fences = self.write_codes = self.write_lastis = None
        if self.lists and blocks:
            self.write_fences, self.write_codes, self.write_lastis = [0] * n, [None] * n, [0] * n
        self.reads = [None] * n if self.lists else {}   # idx -> gt of the last reader
        self.earlier_reads: dict = {}     # idx -> gt of a reader in an earlier block than the last reader's
        self.rmw: dict = {}               # idx -> (gt, barrier generation, code, lasti)


def _array_state(wrapper):
    """The wrapper's _GlobalArray in this launch (cached on the wrapper until the launch ends), or False
    when the launch does not check races."""
    launch = _launch
    d = wrapper.__dict__
    if launch is _NO_LAUNCH:
        return False
    if not launch.races:
        state = False
    else:
        ary = d["_a"]
        state = launch.arrays.get(id(ary))
        if state is None:
            state = launch.arrays[id(ary)] = _GlobalArray(ary, len(launch.order.blocks) > 1)
    d["_g"] = state
    # a launch of one block with list tables: a read's whole record is one list entry (the accessors' "_r")
    d["_r"] = state.reads if state is not False and state.lists and not state.blocks else None
    launch.wrappers.append(wrapper)
    return state


def _one_block_reads(wrapper):
    """The list of last readers of the wrapper's array where the launch has one block and list tables, else
    None (the accessors then read "_g")."""
    _array_state(wrapper)
    return wrapper.__dict__.get("_r")


def _flat_key(idx, size: int):
    """The element of a 1-D array of `size` elements that `idx` names, as an int, or None where it names no
    single element (a slice, an index array, or an index numpy refuses)."""
    if type(idx) is tuple and len(idx) == 1:
        idx = idx[0]
    try:
        key = operator.index(idx)
    except TypeError:
        try:
            key = np.arange(size)[idx]  # e.g. a[..., i]: an element as numpy reads the index
        except (IndexError, TypeError, ValueError):
            return None
        if np.ndim(key):
            return None
        key = int(key)
    return key if 0 <= key < size else None


def _entry(table, key):
    return table[key] if type(table) is list else table.get(key)


def _last_write(g, idx):
    """(gt, fences, code, lasti) of the last write to element `idx` (a table key) of `g`, or None."""
    if not g.lists:
        return g.writes.get(idx)
    gt = g.writes[idx]
    return None if gt is None else (gt, g.write_fences[idx], g.write_codes[idx], g.write_lastis[idx])


def _note_write(g, idx, gt, fences, frame):
    if not g.lists:
        g.writes[idx] = (gt, fences, frame.f_code, frame.f_lasti)
        return
    g.writes[idx] = gt
    g.write_fences[idx] = fences
    g.write_codes[idx] = frame.f_code
    g.write_lastis[idx] = frame.f_lasti


def _read_seen(g, idx, t, frame):
    """Note that thread `t` read element `idx` (a table key) of `g`; a read of what an earlier block wrote
    is a race between blocks. `frame` is the accessor's caller."""
    gt = t.gt
    if g.blocks:
        base = t._manager.base
        w = _last_write(g, idx)
        if w is not None and w[0] < base:  # written by an earlier block of this launch
            _across_blocks(g, idx, w, t, "reads", frame)
        reads = g.reads
        r = _entry(reads, idx)
        if r != gt:
            if r is not None and r < base:
                g.earlier_reads[idx] = r
            reads[idx] = gt
    else:
        g.reads[idx] = gt


def _write_seen(g, idx, t, old, value, frame):
    """Note that thread `t` writes `value` over `old()` at element `idx` (a table key) of `g`: a write after
    the same thread's read is a read-modify-write; one after another block's read, or over another block's
    different value, a race between blocks."""
    gt = t.gt
    r = _entry(g.reads, idx)
    if r == gt:
        _read_modify_write(g, idx, t, frame)
    if g.blocks:
        m = t._manager
        base = m.base
        if r is not None and r < base:
            _across_blocks(g, idx, (r, None, None, None), t, "writes", frame, first="read")
        if g.earlier_reads:
            r = g.earlier_reads.get(idx)
            if r is not None:
                _across_blocks(g, idx, (r, None, None, None), t, "writes", frame, first="read")
        w = _last_write(g, idx)
        if w is not None and w[0] < base and not _same_bits(old(), value):
            _across_blocks(g, idx, w, t, "writes", frame)
        _note_write(g, idx, gt, m.fences, frame)


def _global_get(self, idx):
    d = self.__dict__
    if type(idx) is int and idx >= 0 and d["_1d"]:  # the common case: one element of a 1-D array
        value = d["_a"][idx]
        t = _RUNNING[0]
        if t is None:
            return value
        try:
            reads = d["_r"]
        except KeyError:
            reads = _one_block_reads(self)
            if "_g" not in d:  # outside a launch
                return value
        if reads is not None:  # one block: _read_seen is this line
            reads[idx] = t.gt
            return value
        g = d["_g"]
        if g is False:
            return value
        if not g.lists:
            _read_seen(g, idx, t, sys._getframe(1))
            return value
        gt = t.gt  # _read_seen, written out for list tables of several blocks
        base = t._manager.base
        w = g.writes[idx]
        if w is not None and w < base:  # written by an earlier block of this launch
            _across_blocks(g, idx, _last_write(g, idx), t, "reads", sys._getframe(1))
        reads = g.reads
        r = reads[idx]
        if r != gt:
            if r is not None and r < base:
                g.earlier_reads[idx] = r
            reads[idx] = gt
        return value
    # the index check of lib.runtime.simulator's accessor
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
            _check_index(idx)
    else:
        _check_index(idx)
    value = d["_a"][idx]
    if type(value) is np.ndarray or type(value) is np.void:  # a view: its own wrapper tracks its elements
        return _wrap_view(self, value)
    t = _RUNNING[0]
    if t is None:
        return value
    g = d.get("_g")
    if g is None:
        g = _array_state(self)
    if g is False:
        return value
    if g.flat:
        idx = _flat_key(idx, g.size)  # an element: numpy gave a scalar of a 1-D array
        if idx is None:
            raise SimulatorError(f"the debugger cannot tell which element {value!r} is (please report this)")
    _read_seen(g, idx, t, sys._getframe(1))
    return value


def _global_put(self, idx, value):
    d = self.__dict__
    if type(idx) is int and idx >= 0 and d["_1d"]:  # the common case: one element of a 1-D array
        t = _RUNNING[0]
        if t is not None:
            try:
                reads = d["_r"]
            except KeyError:
                reads = _one_block_reads(self)
                if "_g" not in d:  # outside a launch
                    d["_a"][idx] = value
                    return
            if reads is not None:  # one block: _write_seen is these lines
                try:
                    r = reads[idx]
                except IndexError:  # past the end: numpy's IndexError below
                    r = None
                if r == t.gt:
                    _read_modify_write(d["_g"], idx, t, sys._getframe(1))
            else:
                g = d["_g"]
                if g is False:
                    pass
                elif not g.lists:
                    a = d["_a"]
                    _write_seen(g, idx, t, lambda: a[idx], value, sys._getframe(1))
                elif idx < g.size:  # _write_seen, written out for list tables of several blocks (past the
                    gt = t.gt       # end: numpy's IndexError below)
                    r = g.reads[idx]
                    if r == gt:
                        _read_modify_write(g, idx, t, sys._getframe(1))
                    m = t._manager
                    base = m.base
                    if r is not None and r < base:
                        _across_blocks(g, idx, (r, None, None, None), t, "writes", sys._getframe(1),
                                       first="read")
                    if g.earlier_reads:
                        r = g.earlier_reads.get(idx)
                        if r is not None:
                            _across_blocks(g, idx, (r, None, None, None), t, "writes", sys._getframe(1),
                                           first="read")
                    writes = g.writes
                    w = writes[idx]
                    if w is not None and w < base and not _same_bits(d["_a"][idx], value):
                        _across_blocks(g, idx, _last_write(g, idx), t, "writes", sys._getframe(1))
                    f = sys._getframe(1)  # _note_write, written out
                    writes[idx] = gt
                    g.write_fences[idx] = m.fences
                    g.write_codes[idx] = f.f_code
                    g.write_lastis[idx] = f.f_lasti
        d["_a"][idx] = value
        return
    # the index check of lib.runtime.simulator's accessor
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
            _check_index(idx)
    else:
        _check_index(idx)
    a = d["_a"]
    t = _RUNNING[0]
    if t is not None:
        g = d.get("_g")
        if g is None:
            g = _array_state(self)
        if g is not False:
            frame = sys._getframe(1)
            if not g.flat:
                _write_seen(g, idx, t, lambda: a[idx], value, frame)
            else:
                key = _flat_key(idx, g.size)
                if key is not None:
                    _write_seen(g, key, t, lambda: a[key], value, frame)
                else:  # a slice or an index array: each element it names (numpy raises for anything else)
                    _write_elements(g, a, idx, value, t, frame)
    a[idx] = value


def _write_elements(g, a, idx, value, t, frame):
    """A store through a slice or an index array into a 1-D array: every element it names, as a store of
    its own (left to numpy's store, which raises, where numpy cannot index or broadcast)."""
    try:
        keys = np.arange(g.size)[idx]
        values = np.broadcast_to(np.asarray(value, dtype=a.dtype), np.shape(keys))
    except (IndexError, TypeError, ValueError):
        return
    for key, v in zip(np.ravel(keys).tolist(), np.ravel(values)):
        _write_seen(g, key, t, lambda key=key: a[key], v, frame)


def _wrap_view(wrapper, value):
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray, FakeWithinKernelCUDAArray

    return FakeWithinKernelCUDAArray(FakeCUDAArray(value, stream=wrapper.__dict__["_item"].stream))


def _thread_in_launch(order, gt) -> tuple:
    """(threadIdx, blockIdx) of the thread numbered `gt` in the launch."""
    ordinal, tid = divmod(gt, order.nthreads)
    bx, by = order.block_dim[0], order.block_dim[1]
    return (tid % bx, tid // bx % by, tid // (bx * by)), tuple(order.blocks[ordinal])


def _site(code, lasti) -> str:
    if code.co_filename in _SKIP_FILES:
        return "(a line of the kernel)"
    line = next((ln for start, end, ln in code.co_lines() if start <= lasti < end and ln is not None), None)
    return _where(code, line) if line is not None else f"{code.co_filename} ({code.co_name})"


def _across_blocks(g, idx, earlier, t, op: str, frame, first: str = "write"):
    """`t` accesses an element that a thread of an earlier block accessed (at least one of them writing).
    On a GPU the blocks may run in either order or at once, unless the first block published its access with
    a fence after it and the second synchronised (a fence or an atomic) before its own."""
    order = _launch.order
    m = t._manager
    earlier_gt, earlier_fences, code, lasti = earlier
    fenced = order.fences[earlier_gt // order.nthreads]
    if (fenced > earlier_fences if earlier_fences is not None else fenced > 0) and m.syncs > 0:
        return  # ordered through memory: threadfence after the first access (for a read, the line and the
        #         time of which are not kept: any fence of its block), a fence or atomic before this one
    frame = _kernel_frame(frame)
    thread_a, block_a = _thread_in_launch(order, earlier_gt)
    name = _kernel_arg_name(g.ary, frame)
    where = f"{name}[{_show_index(idx)}]"
    if first == "write" and op == "writes":
        what = (f"blocks {block_a} and {_grid_point(m)} of one launch write different values to {where}: which "
                "one is left depends on which block runs last")
    elif first == "write":
        what = (f"block {_grid_point(m)} reads {where}, which block {block_a} of the same launch wrote: on a "
                "GPU the read may come before or after that write")
    else:
        what = (f"block {_grid_point(m)} writes {where}, which block {block_a} of the same launch read: on a "
                "GPU that read may come before or after this write")
    raise RaceError(
        f"global-memory race between blocks: {what}. The two accesses are in different blocks, and nothing "
        f"orders them:\n"
        f"  thread {thread_a} of block {block_a} {first + 's':6} it "
        f"{'at ' + _site(code, lasti) if code is not None else '(earlier in this launch)'}\n"
        f"  thread {_thread_point(t)} of block {_grid_point(m)} {op:6} it at "
        f"{_where(frame.f_code, frame.f_lineno)}\n"
        "Blocks run in no defined order (here, in one drawn from the simulator's schedule seed). Pass values "
        "between blocks through a second launch; or publish them: write the value, cuda.threadfence(), then "
        "set a flag with cuda.atomic.exch; read the flag with an atomic, cuda.threadfence(), then the value, "
        "in a block that only waits for blocks that started before it (a ticket from cuda.atomic.add). If "
        f"several blocks add into it, use cuda.atomic.add({name}, {_show_index(idx)}, value).")


def _read_modify_write(g, idx, t, frame):
    """`t` writes an element it read: a read-modify-write. Two of them on one element by threads of one block
    in one barrier interval lose an update on a GPU (two blocks are reported as a race between blocks)."""
    m = t._manager
    gen = m.barrier_generation
    other = g.rmw.get(idx)
    gt = t.gt
    if other is not None and other[0] != gt and (other[0] < m.base or other[1] == gen):
        frame = _kernel_frame(frame)
        order = _launch.order
        thread_a, block_a = _thread_in_launch(order, other[0])
        why = ("they are in different blocks, which nothing orders" if other[0] < m.base
               else "no cuda.syncthreads() separates them")
        name = _kernel_arg_name(g.ary, frame)
        raise RaceError(
            f"global-memory race: two threads of one launch read-modify-write {name}[{_show_index(idx)}] "
            f"without an atomic, and {why}:\n"
            f"  thread {thread_a} of block {block_a} at {_site(other[2], other[3])}\n"
            f"  thread {_thread_point(t)} of block {_grid_point(m)} at {_where(frame.f_code, frame.f_lineno)}\n"
            f"On a GPU both read the old value and one update is lost. Use cuda.atomic.add({name}, "
            f"{_show_index(idx)}, value) (or another cuda.atomic.*), or give each thread its own element "
            "and combine them in a second step.")
    frame = _kernel_frame(frame)
    g.rmw[idx] = (gt, gen, frame.f_code, frame.f_lasti)


def _kernel_arg_name(ary, frame) -> str:
    for name, value in frame.f_locals.items():
        d = getattr(value, "__dict__", None)
        if type(d) is dict and d.get("_a") is ary:
            return name
    return "the array"


_in_atomic = 0  # inside cuda.atomic.*: lib.runtime.simulator never switches simulated threads in the middle of one


def _wrap_atomic(fn):
    def atomic(self, *args, **kwargs):
        global _in_atomic
        _in_atomic += 1
        try:
            return fn(self, *args, **kwargs)
        finally:
            _in_atomic -= 1

    atomic.__name__ = fn.__name__
    atomic.__wrapped__ = fn
    return atomic


ATOMICS = ("add", "sub", "and_", "or_", "xor", "inc", "dec", "exch", "max", "min", "nanmax", "nanmin",
           "compare_and_swap", "cas")


# --- switching it on and off ------------------------------------------------------------------------

_installed = False
_launch_hooked = False


def _on_launch_start(order):
    if _installed:
        _launch_started(order)


def _on_launch_end(order):
    if _installed:
        _launch_ended(order)


def installed() -> bool:
    return _installed


def install(force: bool = False):
    """Switch the debugger on for this simulator process (idempotent; ``import lib`` calls it). Does
    nothing on a GPU, or when the environment says ``CUDA_BOOK_SIMDEBUG=0`` (unless `force`)."""
    global _installed, _current, _launch_hooked
    if _installed:
        return
    if not force and os.environ.get(ENV_SWITCH, "1").strip() == "0":
        return
    from numba.cuda.core import config

    if not config.ENABLE_CUDASIM:
        return
    from numba.cuda.simulator import kernelapi
    from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray

    from lib.runtime import simulator

    simulator.install()
    _current = simulator.current_thread
    if not _launch_hooked:
        simulator.add_launch_listener(_on_launch_start, _on_launch_end)
        _launch_hooked = True
    _SKIP_FILES.update({kernelapi.__file__, simulator.__file__,
                        os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "grading", "tracer.py")})
    _originals.update(
        shared=kernelapi.FakeCUDAShared.array, local=kernelapi.FakeCUDALocal.array,
        get=FakeWithinKernelCUDAArray.__getitem__, put=FakeWithinKernelCUDAArray.__setitem__,
        atomics={name: getattr(kernelapi.FakeCUDAAtomic, name) for name in ATOMICS
                 if hasattr(kernelapi.FakeCUDAAtomic, name)})
    kernelapi.FakeCUDAShared.array = _shared_array
    kernelapi.FakeCUDALocal.array = _local_array
    FakeWithinKernelCUDAArray.__getitem__ = _global_get
    FakeWithinKernelCUDAArray.__setitem__ = _global_put
    for name, fn in _originals["atomics"].items():
        setattr(kernelapi.FakeCUDAAtomic, name, _wrap_atomic(fn))
    _installed = True


def uninstall():
    """Switch the debugger off (the simulator as numba and lib.runtime.simulator make it)."""
    global _installed
    if not _installed:
        return
    from numba.cuda.simulator import kernelapi
    from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray

    kernelapi.FakeCUDAShared.array = _originals["shared"]
    kernelapi.FakeCUDALocal.array = _originals["local"]
    FakeWithinKernelCUDAArray.__getitem__ = _originals["get"]
    FakeWithinKernelCUDAArray.__setitem__ = _originals["put"]
    for name, fn in _originals["atomics"].items():
        setattr(kernelapi.FakeCUDAAtomic, name, fn)
    _launch_ended(None)
    _installed = False


@contextlib.contextmanager
def disabled():
    """``with simdebug.disabled():`` runs its body with the debugger off (e.g. to time the difference)."""
    was = _installed
    uninstall()
    try:
        yield
    finally:
        if was:
            install(force=True)


@contextlib.contextmanager
def enabled():
    """``with simdebug.enabled():`` runs its body with the debugger on (even if CUDA_BOOK_SIMDEBUG=0)."""
    was = _installed
    install(force=True)
    try:
        yield
    finally:
        if not was:
            uninstall()
