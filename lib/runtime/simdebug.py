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

Not reported: accesses through ``cuda.atomic.*``; a thread reading its own writes; anything a barrier
orders; a value written in one launch and read in a later one. A kernel that races on purpose (and is
right on a GPU for reasons this checker cannot see, such as fences and flags) says so next to its
definition with :func:`allow_races`; only the race checks are skipped for it.

Switch: ``CUDA_BOOK_SIMDEBUG=0`` in the environment before ``import lib`` leaves it off;
:func:`uninstall` / :func:`install` switch it at run time, and ``with simdebug.disabled():`` for a block.

How: the simulator's shared arrays are replaced by a thin wrapper holding a written-mask (one byte per
element) and the accesses of the current barrier interval (a dict per array, emptied when the block's
barrier generation moves on); float local arrays are filled with a NaN of a payload of their own, so a read
costs one comparison (integer ones keep a written-mask); global element accesses
(``FakeWithinKernelCUDAArray``) note per thread which elements it read, so a write of one of them is a
read-modify-write. It builds on :mod:`lib.runtime.simulator` (the current simulated thread, its block's barrier
generation and warp collectives) and :mod:`lib.runtime.launches` (which kernel a launch runs).
"""
from __future__ import annotations

import contextlib
import linecache
import os
import re
import sys

import numpy as np

from lib.mode import ROOT

POISON_INT = 0xDEADBEEF
ENV_SWITCH = "CUDA_BOOK_SIMDEBUG"
WARP = 32

try:  # the simulator's error class, so `except SimulatorError` catches ours too
    from lib.runtime.simulator import SimulatorError
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
    shown = os.path.relpath(path, ROOT) if path.startswith(str(ROOT)) else path
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
    """What the debugger keeps for one launch: does it check races, and who read-modify-wrote what."""

    __slots__ = ("ctx", "races", "rmw")

    def __init__(self, ctx, code):
        self.ctx = ctx
        self.races = code not in _ALLOWED
        self.rmw: dict = {}  # (id(array), index) -> (block, thread id, generation, code, line, threadIdx)


_NO_LAUNCH = _Launch(None, None)
_launch = _NO_LAUNCH
_next_code = None  # the code object of the kernel about to be launched (from lib.runtime.launches)
_kernel_module = None


def _on_launch(launch, args):
    global _next_code
    _next_code = getattr(launch.py_func, "__code__", None)


def _current_launch() -> _Launch:
    global _launch
    ctx = _kernel_module._kernel_context
    st = _launch
    if st.ctx is not ctx:
        st = _launch = _Launch(ctx, _next_code)
    return st


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
                 "between that write and this read)")
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


def _global_get(self, idx):
    value = _originals["get"](self, idx)
    t = _current()
    if t is not None:
        if _in_atomic:
            return value
        d = t.__dict__
        reads = d.get("_simdebug_reads")
        if reads is None:
            reads = d["_simdebug_reads"] = {}
        try:
            reads[(id(self._item._ary), idx)] = self._item._ary
        except TypeError:  # a slice: not one element
            pass
    return value


def _global_put(self, idx, value):
    t = _current()
    if t is not None:
        reads = t.__dict__.get("_simdebug_reads")
        if reads is not None:
            try:
                key = (id(self._item._ary), idx)
                rmw = key in reads
            except TypeError:
                rmw = False
            if rmw and not _in_atomic:
                _global_rmw(self, idx, key, t)
    _originals["put"](self, idx, value)


def _global_rmw(array, idx, key, t):
    launch = _current_launch()
    if not launch.races:
        return
    m = _manager(t)
    block, gen = m.grid_point, m.barrier_generation
    f = _caller()
    other = launch.rmw.get(key)
    if other is not None and not (other[0] == block and other[1] == t.thread_id):
        if other[0] != block or other[2] == gen:
            why = ("they are in different blocks, which nothing orders" if other[0] != block
                   else "no cuda.syncthreads() separates them")
            name = _kernel_arg_name(array, f)
            raise RaceError(
                f"global-memory race: two threads of one launch read-modify-write {name}[{_show_index(idx)}] "
                f"without an atomic, and {why}:\n"
                f"  thread {other[5]} of block {tuple(other[0])} at {_where(other[3], other[4])}\n"
                f"  thread {_thread_point(t)} of block {_grid_point(m)} at {_where(f.f_code, f.f_lineno)}\n"
                f"On a GPU both read the old value and one update is lost. Use cuda.atomic.add({name}, "
                f"{_show_index(idx)}, value) (or another cuda.atomic.*), or give each thread its own element "
                "and combine them in a second step.")
    launch.rmw[key] = (block, t.thread_id, gen, f.f_code, f.f_lineno, _thread_point(t))


def _kernel_arg_name(array, frame) -> str:
    for name, value in frame.f_locals.items():
        if value is array:
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
_listener = None


def installed() -> bool:
    return _installed


def install(force: bool = False):
    """Switch the debugger on for this simulator process (idempotent; ``import lib`` calls it). Does
    nothing on a GPU, or when the environment says ``CUDA_BOOK_SIMDEBUG=0`` (unless `force`)."""
    global _installed, _current, _kernel_module, _listener
    if _installed:
        return
    if not force and os.environ.get(ENV_SWITCH, "1").strip() == "0":
        return
    from numba.cuda.core import config

    if not config.ENABLE_CUDASIM:
        return
    from numba.cuda.simulator import kernel as simkernel, kernelapi
    from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray

    from lib.runtime import simulator

    simulator.install()
    _current = simulator.current_thread
    _kernel_module = simkernel
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
    try:
        from lib.runtime import launches

        _listener = launches.add_listener(_on_launch)
    except Exception:  # without launch hooks every launch checks races (no opt-outs)
        _listener = None
    _installed = True


def uninstall():
    """Switch the debugger off (the simulator as numba and lib.runtime.simulator make it)."""
    global _installed, _listener, _launch
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
    if _listener is not None:
        _listener.remove()
        _listener = None
    _launch = _NO_LAUNCH
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
