"""Would this kernel compile on a GPU? The simulator's check, before every launch.

numba's simulator runs a kernel as plain Python, so it happily runs code that numba cannot compile for a
GPU: a Python list or ``np.zeros`` inside a kernel, a call of an ordinary Python function, an object it
cannot type. On the simulator each launched kernel is therefore also compiled for the GPU target (PTX for
sm_90, the H200) with the launch's own argument types, and a kernel that does not compile stops with
numba's own message, the words a GPU user would see::

    GPUCompileError: this kernel runs on the simulator but would not compile for a GPU: numba says, for
    my_kernel(float32[::1], int64):
    Failed in cuda mode pipeline (step: nopython frontend) ...

How: numba.cuda cannot compile for a GPU in a process where the simulator is on, so a helper process
(:mod:`lib.runtime._gpucompile_child`, started on first need and kept) does it. The kernel travels there as its
source, the globals it uses (constants, numpy dtypes, modules, other ``@cuda.jit`` functions, rebuilt as
real device functions) and its closure; the book's own kernels are compiled from their modules imported in
GPU mode (where e.g. ``load_float4`` is a 16-byte load intrinsic, not the simulator's four reads). The
compiler is NVVM alone (the ``nvidia-nvvm`` wheel of requirements.txt): no GPU, no NVRTC.

A result is kept per (kernel, argument types) in memory and on disk (``~/.cache/cuda-book/gpucompile``,
keyed by a hash of everything sent to the compiler), so each check is paid once. Without the compiler the
check says so once and the simulator goes on. ``CUDA_BOOK_GPU_CHECK=0`` turns the check off.
"""
from __future__ import annotations

import atexit
import functools
import hashlib
import inspect
import json
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
import types
import weakref
from contextlib import contextmanager
from pathlib import Path

from lib.mode import CACHE, ROOT
from lib.runtime import launches

HEAD = "this kernel runs on the simulator but would not compile for a GPU:"
CHECKER_VERSION = "1"  # part of every cache key: bump when what is sent or how it compiles changes
CHILD = Path(__file__).with_name("_gpucompile_child.py")
COMPILE_TIMEOUT_S = 300
INSTALL_HINT = 'pip install "nvidia-nvvm>=13,<14"'
# Modules imported by name in the helper; any other module a kernel uses travels as the attributes it needs.
_IMPORTABLE = {"math", "cmath", "numpy", "numba", "operator", "kernels", "lib"}


def trim(message: str) -> str:
    """numba's message without the lines that only locate numba's own source files."""
    return "\n".join(line for line in message.splitlines()
                     if not (line.strip().startswith("raised from ") and "site-packages" in line)).rstrip()


class GPUCompileError(Exception):
    """A kernel the simulator can run but numba cannot compile for a GPU."""

    def __init__(self, kernel: str, arg_types: tuple, numba_message: str):
        self.kernel, self.arg_types, self.numba_message = kernel, arg_types, numba_message
        super().__init__(f"{HEAD} numba says, for {kernel}({', '.join(arg_types)}):\n{numba_message}")


# --- what travels to the helper ----------------------------------------------------------------------

def _global_names(code) -> list[str]:
    """Names the code (and the code nested in it: comprehensions, inner functions) looks up."""
    names, stack = [], [code]
    while stack:
        c = stack.pop()
        names.extend(c.co_names)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return list(dict.fromkeys(names))


_cuda_names: dict | None = None


def _cuda_attribute(value) -> str | None:
    """The name under which numba.cuda offers `value` (e.g. a warp intrinsic imported with `from`)."""
    global _cuda_names
    if _cuda_names is None:
        from numba import cuda

        _cuda_names = {}
        for name in dir(cuda):
            obj = getattr(cuda, name, None)
            if not isinstance(obj, (int, float, str, bytes, bool, type(None), tuple)):
                _cuda_names.setdefault(id(obj), (obj, name))
    hit = _cuda_names.get(id(value))
    return hit[1] if hit is not None and hit[0] is value else None


def _module_attribute(module_name: str, value) -> str | None:
    module = sys.modules.get(module_name)
    for name, obj in vars(module).items() if module else ():
        if obj is value:
            return name
    return None


class _Uncheckable(Exception):
    """The kernel's source cannot be read (e.g. made with exec): no check, no error."""


class _Converter:
    """Turns a kernel and what it uses into plain data the helper can rebuild."""

    def __init__(self):
        self.memo: dict[int, tuple] = {}
        self.book_modules: set[str] = set()  # the book's modules it refers to: their text is in the cache key

    def kernel(self, kernel) -> tuple:
        return self.value(kernel)

    def value(self, v, attrs: list[str] = ()) -> tuple:
        if isinstance(v, types.ModuleType):  # not memoised: which attributes travel depends on the function
            return self._value(v, attrs)
        key = id(v)
        if key in self.memo and self.memo[key][0] is v:
            return self.memo[key][1]
        spec = self._value(v, attrs)
        self.memo[key] = (v, spec)
        return spec

    def _value(self, v, attrs) -> tuple:
        from numba.cuda.simulator.kernel import FakeCUDAKernel

        if isinstance(v, FakeCUDAKernel):
            fn = v.fn
            if launches._origin(fn)[1] and "<locals>" not in fn.__qualname__:
                name = _module_attribute(fn.__module__, v)
                if name is not None:
                    self.book_modules.add(fn.__module__)
                    return ("book", fn.__module__, name)
            options = {"device": bool(v._device), "fastmath": bool(v._fastmath)}
            if v._debug:
                options["debug"] = True
            return ("jit", self.function(fn), options)
        if isinstance(v, types.ModuleType):
            top = v.__name__.split(".")[0]
            if top in _IMPORTABLE:
                if top in ("kernels", "lib"):
                    self.book_modules.add(v.__name__)
                return ("module", v.__name__)
            return ("synth", v.__name__, {a: self.value(getattr(v, a)) for a in attrs if hasattr(v, a)})
        if not isinstance(v, (int, float, complex, str, bytes, bool, type(None), tuple)):
            name = _cuda_attribute(v)
            if name is not None:
                return ("cuda", name)
        if isinstance(v, types.FunctionType):
            module = getattr(v, "__module__", "") or ""
            if launches._origin(v)[1]:
                name = _module_attribute(module, v)
                if name is not None:  # e.g. kernels.matmul.load_float4: an intrinsic in GPU mode
                    self.book_modules.add(module)
                    return ("book", module, name)
            return ("function", v.__name__, module)
        try:
            data = pickle.dumps(v, protocol=4)
        except Exception:
            return ("opaque", type(v).__name__, type(v).__module__)
        return ("pickle", data, type(v).__name__, type(v).__module__)

    def function(self, fn) -> dict:
        code = fn.__code__
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError) as exc:
            raise _Uncheckable(f"the source of {fn.__qualname__} cannot be read ({exc})") from None
        filename = code.co_filename
        book_module = None
        if launches._origin(fn)[1] and fn.__module__ in sys.modules:
            book_module = fn.__module__
            self.book_modules.add(book_module)
        names = _global_names(code)
        scope = fn.__globals__
        carried = {}
        if book_module is None:
            for name in names:
                if name in scope:
                    carried[name] = self.value(scope[name], names)
        freevars = []
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                freevars.append((name, self.value(cell.cell_contents, names)))
            except ValueError:  # an empty cell
                freevars.append((name, ("opaque", "empty closure cell", "builtins")))
        return {
            "name": fn.__name__, "module": fn.__module__, "filename": filename, "first": first,
            "source": "".join(lines), "lines": None if os.path.exists(filename) else lines,
            "book_module": book_module, "globals": carried, "freevars": freevars,
        }


_file_hashes: dict = {}


def _book_hash(modules: set[str]) -> str:
    """A hash of the sources a book kernel compiles from in GPU mode: the modules it names and all of
    kernels/ (whose modules import one another), not the rest of lib/."""
    paths = set((ROOT / "kernels").glob("*.py"))
    for name in modules:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            paths.add(Path(file).resolve())
    h = hashlib.sha256()
    for path in sorted(paths):
        stat = path.stat()
        key = (path, stat.st_mtime_ns, stat.st_size)
        if key not in _file_hashes:
            _file_hashes[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        h.update(f"{path.relative_to(ROOT)} {_file_hashes[key]}\n".encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _versions() -> str:
    from importlib import metadata

    out = []
    for dist in ("numba", "numba-cuda", "nvidia-nvvm"):
        try:
            out.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            out.append(f"{dist}=none")
    return " ".join(out)


# --- the helper process ------------------------------------------------------------------------------

class _Helper:
    def __init__(self):
        self.proc = None
        self.pid = None  # the process that started it (a forked child starts its own)
        self.unavailable: str | None = None

    def _start(self):
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", NUMBA_FORCE_CUDA_CC="9.0",
                   CUDA_BOOK_COMPILE_ONLY="1",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        try:
            CACHE.mkdir(parents=True, exist_ok=True)
            log = open(CACHE / "gpucompile-helper.log", "ab")
        except OSError:
            log = subprocess.DEVNULL
        self.proc = subprocess.Popen([sys.executable, str(CHILD)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=log, env=env, cwd=str(ROOT))
        if log is not subprocess.DEVNULL:
            log.close()
        self.pid = os.getpid()
        hello = self._read(COMPILE_TIMEOUT_S)
        if hello is None or "unavailable" in hello:
            reason = hello["unavailable"] if hello else "the helper process did not start"
            self.close()
            self.unavailable = reason

    def _read(self, timeout):
        fd = self.proc.stdout.fileno()
        data = b""
        deadline = time.monotonic() + timeout
        need = 4
        size = None
        while len(data) < need:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, need - len(data))
            if not chunk:
                return None
            data += chunk
            if size is None and len(data) == 4:
                (size,) = struct.unpack(">I", data)
                need = 4 + size
        return pickle.loads(data[4:])

    def ask(self, request: dict) -> dict:
        if self.unavailable:
            return {"unavailable": self.unavailable}
        if self.proc is None or self.pid != os.getpid() or self.proc.poll() is not None:
            self._start()
            if self.unavailable:
                return {"unavailable": self.unavailable}
        data = pickle.dumps(request, protocol=4)
        try:
            self.proc.stdin.write(struct.pack(">I", len(data)) + data)
            self.proc.stdin.flush()
            answer = self._read(COMPILE_TIMEOUT_S)
        except OSError:
            self.close(kill=True)
            return {"internal": "the helper process stopped"}
        except BaseException:  # e.g. Ctrl-C while it compiles: its answer would be read by the next request
            self.close(kill=True)
            raise
        if answer is None:
            self.close(kill=True)
            return {"internal": f"no answer from the helper process in {COMPILE_TIMEOUT_S} s"}
        return answer

    def close(self, kill: bool = False):
        if self.proc is not None and self.pid == os.getpid():
            try:
                if kill:
                    self.proc.kill()
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except Exception:
                self.proc.kill()
        self.proc = None


_helper = _Helper()
_lock = threading.Lock()
_memo: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # py_func -> {arg types: result}
_said: set = set()
STATS = {"checks": 0, "memory_hits": 0, "disk_hits": 0, "compiled": 0, "compile_s": 0.0}
PROBLEMS: list[str] = []  # every line said once (no compiler, a kernel that could not be checked)
atexit.register(_helper.close)


def _write_stats():  # CUDA_BOOK_GPU_CHECK_STATS=file: what the check cost this process (for measurements)
    path = os.environ.get("CUDA_BOOK_GPU_CHECK_STATS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(dict(STATS, problems=PROBLEMS, pid=os.getpid())) + "\n")


atexit.register(_write_stats)


def _say_once(key, line):
    if key not in _said:
        _said.add(key)
        PROBLEMS.append(line)
        print(f"lib: {line}", file=sys.stderr)


def _disk_path(key: str):
    return CACHE / "gpucompile" / key[:2] / f"{key}.json"


def _result(kernel, arg_types: tuple) -> dict:
    """The helper's answer for this kernel and these numba argument types, from the caches if known."""
    fn = kernel.py_func
    per_fn = _memo.setdefault(fn, {})
    if arg_types in per_fn:
        STATS["memory_hits"] += 1
        return per_fn[arg_types]
    converter = _Converter()
    try:
        request = {"spec": converter.kernel(kernel), "argtypes": arg_types}
    except _Uncheckable as exc:
        per_fn[arg_types] = {"unchecked": str(exc)}
        return per_fn[arg_types]
    h = hashlib.sha256(pickle.dumps(request, protocol=4))
    h.update(f"{CHECKER_VERSION} {_versions()}".encode())
    if converter.book_modules:
        h.update(_book_hash(converter.book_modules).encode())
    path = _disk_path(h.hexdigest())
    try:
        answer = json.loads(path.read_text())
        STATS["disk_hits"] += 1
    except (OSError, ValueError):
        t0 = time.perf_counter()
        answer = _helper.ask(request)
        STATS["compile_s"] += time.perf_counter() - t0
        STATS["compiled"] += 1
        if "ok" in answer or "error" in answer:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(answer))
                os.replace(tmp, path)
            except OSError:
                pass
    if "ok" in answer:  # like numba on a GPU, which compiles a kernel once per argument types
        per_fn[arg_types] = answer
    return answer


def compile_error(kernel, *args) -> str | None:
    """numba's message if `kernel` launched with `args` would not compile for a GPU, else None.

    None too when the check cannot run (no compiler, unreadable source); those say so once on stderr.
    """
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    if not isinstance(kernel, FakeCUDAKernel):
        raise TypeError(f"compile_error checks a simulator kernel (a @cuda.jit function), got {kernel!r}")
    try:
        arg_types = tuple(launches.numba_type(a) for a in args)
    except Exception:  # an argument numba cannot type: the GPU launch would say so; the simulator will too
        return None
    with _lock:
        STATS["checks"] += 1
        answer = _result(kernel, arg_types)
    name = kernel.py_func.__qualname__
    if "unavailable" in answer:
        _say_once("unavailable", f"the GPU-compile check is off ({answer['unavailable']}); kernels still run "
                                 f"on the simulator. To check them too: {INSTALL_HINT}")
    elif "internal" in answer:
        _say_once(("internal", name), f"could not check that {name} compiles for a GPU ({answer['internal']})")
    elif "unchecked" in answer:
        _say_once(("unchecked", name), f"not checked for a GPU: {answer['unchecked']}")
    return trim(answer["error"]) if "error" in answer else None


def check(kernel, *args) -> None:
    """Raise :class:`GPUCompileError` if `kernel` launched with `args` would not compile for a GPU."""
    message = compile_error(kernel, *args)
    if message is not None:
        arg_types = launches._describe_args(args)
        raise GPUCompileError(kernel.py_func.__name__, arg_types, message)


def simulator_only(kernel):
    """Mark a kernel that is meant to run only on the simulator (e.g. a test that looks at Python objects
    inside a kernel): its launches are not checked. Use as a decorator above ``@cuda.jit``."""
    from lib.mode import ON_GPU

    if ON_GPU:
        return kernel  # on a GPU numba compiles it anyway: nothing to skip
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    if not isinstance(kernel, FakeCUDAKernel):
        raise TypeError(f"simulator_only marks a @cuda.jit kernel, got {kernel!r}")
    kernel._book_simulator_only = True
    return kernel


_unchecked = threading.local()


@contextmanager
def unchecked():
    """No GPU-compile check for the launches this thread makes inside the ``with`` block."""
    before = getattr(_unchecked, "on", False)
    _unchecked.on = True
    try:
        yield
    finally:
        _unchecked.on = before


def _before_launch(launch: launches.Launch, args: tuple) -> None:
    if getattr(launch.kernel, "_book_simulator_only", False) or getattr(_unchecked, "on", False):
        return
    message = compile_error(launch.kernel, *args)
    if message is not None:
        raise GPUCompileError(launch.name, launch.arg_types, message)


_handle = None


def install() -> None:
    """Check every kernel launched on the simulator (``import lib`` calls this in simulator mode)."""
    global _handle
    if _handle is None and os.environ.get("CUDA_BOOK_GPU_CHECK", "1") != "0":
        _handle = launches.add_listener(_before_launch)


def uninstall() -> None:
    global _handle
    if _handle is not None:
        _handle.remove()
        _handle = None
