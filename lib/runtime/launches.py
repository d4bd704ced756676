"""Launch accounting: which kernels ran, with which grid, block and argument types.

Every kernel launch (``kernel[grid, block](args)``) goes through one hook, on a GPU and on the simulator:

* :func:`record` collects the :class:`Launch` of every kernel launched by the current thread inside a
  ``with`` block (the grader uses it to show what a student's function launched, and to refuse an answer
  where none of the student's own kernels ran);
* :func:`add_listener` registers a function called with ``(launch, args)`` just *before* each launch; it
  may raise to refuse the launch (the simulator's "would this compile on a GPU?" check does).

Only launches are seen, not calls of device functions from inside a kernel. With no recorder and no
listener active the hook costs one attribute test per launch, so timed launches are not slowed.

How: on the simulator the hook wraps ``FakeCUDAKernel.__call__``; on a GPU it wraps
``_LaunchConfiguration.__call__`` (what ``dispatcher[grid, block]`` returns), both private classes of
numba-cuda 0.30, so :func:`install` checks that they are there.
"""
from __future__ import annotations

import inspect
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from lib.mode import ROOT, SIMULATOR

_BOOK_DIRS = (ROOT / "kernels", ROOT / "lib")


@dataclass(frozen=True)
class Launch:
    """One kernel launch, as the host asked for it."""

    name: str           # the kernel's __name__
    module: str         # the Python module that defines it
    qualname: str
    file: str | None    # the source file, or None (e.g. a kernel defined in a notebook cell)
    grid: tuple         # blocks per grid, 3-tuple
    block: tuple        # threads per block, 3-tuple
    shared_bytes: int   # dynamic shared memory asked for at launch
    py_func: object = field(repr=False)  # the Python function the kernel was made from
    arg_types: tuple    # short numba-style type of each argument, e.g. ("float32[::1]", "int64")
    book: bool          # defined in the book's own kernels/ or lib/
    kernel: object = field(default=None, repr=False, compare=False)  # the launched dispatcher object

    @property
    def threads(self) -> int:
        g, b = self.grid, self.block
        return g[0] * g[1] * g[2] * b[0] * b[1] * b[2]

    def __str__(self) -> str:
        grid = "x".join(map(str, self.grid))
        block = "x".join(map(str, self.block))
        return f"{self.name}[{grid}, {block}]({', '.join(self.arg_types)})"


# --- argument types ---------------------------------------------------------------------------------

_array_types: dict = {}


def numba_type(value, typeof=None):
    """numba's type for a launch argument; the simulator's fake device arrays count as their arrays."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray, FakeWithinKernelCUDAArray

    if isinstance(value, FakeWithinKernelCUDAArray):
        value = value._item
    if isinstance(value, FakeCUDAArray):
        value = value._ary
    if typeof is None and type(value) is np.ndarray:  # the common case, memoised: numba's typeof is ~50 us
        flags = value.flags
        key = (value.dtype, value.ndim, flags.c_contiguous, flags.f_contiguous, flags.writeable, flags.aligned)
        ty = _array_types.get(key)
        if ty is None:
            from numba.core.typing.typeof import Purpose, typeof as core_typeof

            ty = _array_types[key] = core_typeof(value, Purpose.argument)
        return ty
    if typeof is None:
        from numba.core.typing.typeof import Purpose, typeof as core_typeof

        return core_typeof(value, Purpose.argument)
    return typeof(value)


def describe_type(ty) -> str:
    """A numba type in the signature-string form a reader would write: float32[:, ::1], int64."""
    from numba.core import types

    if isinstance(ty, types.Array):
        dims = [":"] * ty.ndim
        if ty.layout == "C" and ty.ndim:
            dims[-1] = "::1"
        elif ty.layout == "F" and ty.ndim:
            dims[0] = "::1"
        text = f"{ty.dtype}[{', '.join(dims)}]"
        return text if ty.mutable else f"readonly {text}"
    return str(ty)


def _describe_args(args, typeof=None) -> tuple:
    out = []
    for a in args:
        try:
            out.append(describe_type(numba_type(a, typeof)))
        except Exception:  # a value numba cannot type: the launch itself will say so
            out.append(type(a).__name__)
    return tuple(out)


# --- where a kernel comes from -----------------------------------------------------------------------

_origin_cache: dict = {}


def _origin(py_func) -> tuple[str | None, bool]:
    """(source file, defined in the book's kernels/ or lib/), cached per function."""
    key = id(py_func)
    hit = _origin_cache.get(key)
    if hit is not None and hit[0] is py_func:
        return hit[1], hit[2]
    try:
        file = inspect.getsourcefile(py_func)
    except TypeError:
        file = None
    book = False
    if file:
        path = Path(file).resolve()
        book = any(path.is_relative_to(d) for d in _BOOK_DIRS)
    _origin_cache[key] = (py_func, file, book)
    return file, book


def make_launch(py_func, grid, block, shared_bytes, args, typeof=None, kernel=None) -> Launch:
    file, book = _origin(py_func)
    return Launch(
        name=getattr(py_func, "__name__", repr(py_func)),
        module=getattr(py_func, "__module__", None) or "",
        qualname=getattr(py_func, "__qualname__", ""),
        file=file,
        grid=tuple(grid),
        block=tuple(block),
        shared_bytes=int(shared_bytes or 0),
        py_func=py_func,
        arg_types=_describe_args(args, typeof),
        book=book,
        kernel=kernel,
    )


# --- recorders and listeners -------------------------------------------------------------------------

_lock = threading.Lock()
_recorders: list[tuple[int | None, list]] = []  # (thread id or None for every thread, the list)
_listeners: list[Callable] = []
_active = False  # any recorder or listener: the one test a launch pays when nothing watches


def _refresh():
    global _active
    _active = bool(_recorders or _listeners)


@contextmanager
def record(all_threads: bool = False) -> Iterator[list]:
    """Collect every :class:`Launch` made by this thread (or by any thread) inside the ``with`` block.

    Recorders nest: an outer one also sees the launches of an inner one.
    """
    launches: list = []
    entry = (None if all_threads else threading.get_ident(), launches)
    with _lock:
        _recorders.append(entry)
        _refresh()
    try:
        yield launches
    finally:
        with _lock:
            _recorders.remove(entry)
            _refresh()


class _Handle:
    def __init__(self, fn):
        self._fn = fn

    def remove(self):
        with _lock:
            if self._fn in _listeners:
                _listeners.remove(self._fn)
            _refresh()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def add_listener(fn: Callable[[Launch, tuple], None]) -> _Handle:
    """Call ``fn(launch, args)`` before every launch in every thread; an exception from it stops the launch.

    Returns a handle: ``handle.remove()`` (or use it as a context manager) unregisters ``fn``.
    """
    if not callable(fn):
        raise TypeError(f"add_listener needs a function of (launch, args), got {fn!r}")
    with _lock:
        _listeners.append(fn)
        _refresh()
    return _Handle(fn)


def _announce(kernel, py_func, grid, block, shared_bytes, args, typeof=None):
    launch = make_launch(py_func, grid, block, shared_bytes, args, typeof, kernel)
    me = threading.get_ident()
    for tid, launches in list(_recorders):
        if tid is None or tid == me:
            launches.append(launch)
    for fn in list(_listeners):
        fn(launch, args)


# --- the hooks ---------------------------------------------------------------------------------------

_installed = False


def _install_simulator():
    from numba.cuda.simulator import kernel as simkernel

    original = simkernel.FakeCUDAKernel.__call__

    def __call__(self, *args):
        if _active and self.grid_dim is not None and not (self._device or simkernel._kernel_context):
            _announce(self, self.fn, self.grid_dim, self.block_dim, self.dynshared_size, args)
        return original(self, *args)

    __call__.__wrapped__ = original
    simkernel.FakeCUDAKernel.__call__ = __call__


def _install_gpu():
    from numba.cuda import dispatcher

    original = dispatcher._LaunchConfiguration.__call__

    def __call__(self, *args):
        if _active:
            d = self.dispatcher
            _announce(d, d.py_func, self.griddim, self.blockdim, self.sharedmem, args, d.typeof_pyval)
        return original(self, *args)

    __call__.__wrapped__ = original
    dispatcher._LaunchConfiguration.__call__ = __call__


def install():
    """Hook kernel launches in this process's mode (idempotent; ``import lib`` calls it)."""
    global _installed
    if _installed:
        return
    if SIMULATOR:
        _install_simulator()
    else:
        _install_gpu()
    _installed = True
