"""The helper process of :mod:`lib.runtime.gpucompile`: compiles kernels for the GPU target (PTX, sm_90), no GPU needed.

Run as a script (``python lib/runtime/_gpucompile_child.py``), never imported: numba.cuda's mode is fixed when it
is first imported, and the parent process runs the simulator. Here numba.cuda is in GPU mode and
compiles with NVVM alone: the compute capability is fixed (``NUMBA_FORCE_CUDA_CC``), so neither a device
nor NVRTC is asked for it.

Protocol on stdin/stdout: each message is a 4-byte big-endian length and a pickle. The child first says
``{"ready": True}`` or ``{"unavailable": reason}``; then for every request ``{"spec", "argtypes", "nrt"}`` (pickled by gpucompile._dumps: the reader's classes as
descriptions, rebuilt here) it answers
``{"ok": True}``, ``{"error": numba's message}`` or ``{"internal": what went wrong here}``.
"""
import os
import sys

os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
os.environ["NUMBA_FORCE_CUDA_CC"] = "9.0"
os.environ["CUDA_BOOK_COMPILE_ONLY"] = "1"  # `import lib` here: GPU-mode kernels, no device asked for
os.environ["NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"] = "0"

import ast  # noqa: E402
import builtins  # noqa: E402
import collections  # noqa: E402
import enum  # noqa: E402
import io  # noqa: E402
import importlib  # noqa: E402
import linecache  # noqa: E402
import pickle  # noqa: E402
import signal  # noqa: E402
import struct  # noqa: E402
import textwrap  # noqa: E402
import types  # noqa: E402
import warnings  # noqa: E402

CC = (9, 0, "a")  # sm_90a: the arch-specific target of wgmma, setmaxnreg and TMA (numba links it at launch on a 9.0 GPU)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # lib/runtime/ -> the book


def _read(stream):
    """The next message's bytes (a request, pickled by lib.runtime.gpucompile._dumps), or None at the end."""
    head = stream.read(4)
    if len(head) < 4:
        return None
    (size,) = struct.unpack(">I", head)
    return stream.read(size)


def _write(stream, message):
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack(">I", len(data)) + data)
    stream.flush()


class _Device:
    """What numba asks of "the current device" while compiling: its compute capability."""

    compute_capability = CC


def _prepare():
    """Point numba at NVVM and sm_90 with no GPU and no NVRTC; None, or why the compiler is unavailable."""
    import numba.cuda.cuda_paths as cuda_paths

    find_nvrtc = cuda_paths._get_nvrtc_path

    def nvrtc_path_or_none():  # NVRTC compiles CUDA C++, which these checks never do
        try:
            return find_nvrtc()
        except Exception:
            return cuda_paths._env_path_tuple("not installed", None)

    cuda_paths._get_nvrtc_path = nvrtc_path_or_none
    from numba.cuda import api, compiler, dispatcher  # noqa: F401 (loaded so that the loop below sees them)

    original = api.get_current_device
    for module in list(sys.modules.values()):  # every `from numba.cuda.api import get_current_device`
        if getattr(module, "get_current_device", None) is original:
            module.get_current_device = _Device
    if os.environ.get("CUDA_BOOK_GPU_CHECK_PRETEND_MISSING") == "1":  # tests: a machine without the wheel
        return "NvvmSupportError: libNVVM cannot be found (pretended)"
    try:
        from numba.cuda.cudadrv import nvvm

        nvvm.NVVM()
        from numba.cuda.cudadrv.libs import get_libdevice

        if not get_libdevice():
            return "libdevice (part of the NVVM package) was not found"
    except Exception as exc:  # the compiler's own message says what is missing
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


class _Internal(Exception):
    """Something this helper could not rebuild: the check is skipped, never the student failed."""


def _placeholder(typename, modname):
    cls = type(typename, (), {"__module__": modname})
    return cls()


def _function_placeholder(name, modname):
    def f(*args):
        raise RuntimeError("placeholder")

    f.__name__ = f.__qualname__ = name
    f.__module__ = modname
    return f


class _Pending:
    """A @cuda.jit function not built yet (one that calls itself, or two that call each other)."""

    def __init__(self, number):
        self.number = number


class _Loader(pickle.Unpickler):
    """Unpickles a request; the reader's classes (sent as descriptions) are rebuilt by the builder."""

    def __init__(self, data, builder):
        super().__init__(io.BytesIO(data))
        self.builder = builder

    def persistent_load(self, pid):
        return self.builder.value(pid)


class _Builder:
    def __init__(self):
        self.built = {}      # number of a @cuda.jit function -> its dispatcher
        self.classes = {}    # (module, qualname) -> the class rebuilt from its description
        self.fixups = []     # (namespace or cell, name or None, number): filled once that function is built

    def loads(self, data):
        return _Loader(data, self).load()

    def resolve(self):
        for target, name, number in self.fixups:
            if name is None:
                target.cell_contents = self.built[number]
            else:
                target[name] = self.built[number]
        self.fixups = []

    def _class(self, spec):
        kind, name, qualname, module = spec[:4]
        key = (module, qualname)
        if key not in self.classes:
            if kind == "enum":
                cls = getattr(enum, spec[4])(name, list(spec[5]), module=module, qualname=qualname)
            elif kind == "namedtuple":
                cls = collections.namedtuple(name, spec[4])
            elif kind == "exception class":
                cls = type(name, (getattr(builtins, spec[4], Exception),), {})
            else:
                cls = type(name, (), {})
            cls.__module__, cls.__qualname__ = module, qualname
            self.classes[key] = cls
        return self.classes[key]

    def value(self, spec):
        kind = spec[0]
        if kind in ("enum", "namedtuple", "exception class", "class"):
            return self._class(spec)
        if kind == "ref":
            return self.built.get(spec[1]) or _Pending(spec[1])
        if kind == "pickle":
            try:
                return self.loads(spec[1])
            except Exception:  # e.g. an instance of a class defined in the reader's notebook
                return _placeholder(spec[2], spec[3])
        if kind == "module":
            return importlib.import_module(spec[1])
        if kind == "synth":
            mod = types.ModuleType(spec[1])
            for name, sub in spec[2].items():
                setattr(mod, name, self.value(sub))
            return mod
        if kind == "cuda":
            from numba import cuda

            return getattr(cuda, spec[1])
        if kind == "book":
            return getattr(importlib.import_module(spec[1]), spec[2])
        if kind == "jit":
            from numba import cuda

            number = spec[3]
            if number not in self.built:
                options = dict(spec[2])
                sig = options.pop("sig", None)
                jit = cuda.jit(sig, **options) if sig is not None else cuda.jit(**options)
                self.built[number] = jit(self.function(spec[1]))
            return self.built[number]
        if kind == "function":
            return _function_placeholder(spec[1], spec[2])
        if kind == "opaque":
            return _placeholder(spec[1], spec[2])
        raise _Internal(f"unknown value kind {kind!r}")

    def function(self, spec):
        """The Python function described by `spec`, compiled from its source with its file and line numbers."""
        filename, first = spec["filename"], spec["first"]
        if spec["lines"] is not None:  # e.g. a notebook cell: numba's message quotes the line from here
            lines = ["\n"] * (first - 1) + list(spec["lines"])
            linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
        source = textwrap.dedent(spec["source"])
        tree = ast.parse(source)
        fdef = tree.body[0]
        if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise _Internal(f"the source of {spec['name']} does not start with a def")
        body = source.splitlines(keepends=True)[fdef.lineno - 1:]  # from `def`, without decorators
        def_line = first + fdef.lineno - 1
        freevars = [name for name, _ in spec["freevars"]]
        if freevars:
            text = "".join(["\n"] * (def_line - 2) + [f"def __factory__({', '.join(freevars)}):\n"]
                           + [textwrap.indent(line, "    ") for line in body]
                           + [f"\n    return {fdef.name}\n"])
        else:
            text = "".join(["\n"] * (def_line - 1) + body)
        if spec["book_module"]:
            namespace = dict(vars(importlib.import_module(spec["book_module"])))
        else:
            namespace = {"__builtins__": builtins, "__name__": spec["module"]}
            for name, sub in spec["globals"].items():
                value = namespace[name] = self.value(sub)
                if isinstance(value, _Pending):
                    self.fixups.append((namespace, name, value.number))
        exec(compile(text, filename, "exec"), namespace)
        if freevars:
            values = [self.value(sub) for _, sub in spec["freevars"]]
            fn = namespace["__factory__"](*values)
            cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
            for (name, _), value in zip(spec["freevars"], values):
                if isinstance(value, _Pending) and name in cells:
                    self.fixups.append((cells[name], None, value.number))
            return fn
        return namespace[fdef.name]


_OPTIONS = ("fastmath", "debug", "lineinfo", "launch_bounds")


def _verdict(exc) -> bool:
    """Is this numba saying the code does not compile (its errors, and the ValueError/TypeError of its
    argument checks), rather than numba itself failing (any other exception from inside it)?"""
    from numba.core.errors import NumbaError as CoreError
    from numba.cuda.core.errors import NumbaError

    return isinstance(exc, (NumbaError, CoreError, ValueError, TypeError, NotImplementedError))


def _compile(data):
    from numba import cuda
    from numba.cuda.core import config
    from numba.cuda.cudadrv.error import CudaDriverError, CudaSupportError, NvvmSupportError

    builder = _Builder()
    try:
        request = builder.loads(data)
        kernel = builder.value(request["spec"])
        builder.resolve()
        if hasattr(kernel, "py_func"):  # a dispatcher: the book's own GPU-mode kernel, with its options
            options = {k: kernel.targetoptions[k] for k in _OPTIONS if kernel.targetoptions.get(k) is not None}
            fn = kernel.py_func
        else:
            options, fn = {}, kernel
    except Exception as exc:
        return {"internal": f"rebuilding the kernel: {type(exc).__name__}: {exc}"}
    nrt = config.CUDA_ENABLE_NRT
    config.CUDA_ENABLE_NRT = bool(request.get("nrt", False))  # as the reader's process has it
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                cuda.compile_ptx(fn, tuple(request["argtypes"]), cc=CC, **options)
            except Exception as exc:
                if "multiple PTX files" not in str(exc):
                    raise
                # e.g. a debug kernel that calls a raising device function: several modules, as a launch links
                cuda.compile_all(fn, tuple(request["argtypes"]), cc=CC, device=False, abi="numba", output="ptx",
                                 **options)
    except (CudaSupportError, CudaDriverError, NvvmSupportError) as exc:  # this helper's environment
        return {"internal": f"{type(exc).__name__}: {exc}"}
    except Exception as exc:
        if not _verdict(exc):  # numba crashed inside (e.g. an AttributeError): no verdict on the reader's code
            return {"internal": f"numba failed inside ({type(exc).__name__}: {exc})"}
        return {"error": str(exc), "type": type(exc).__name__}
    finally:
        config.CUDA_ENABLE_NRT = nrt
    return {"ok": True}


def main():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it ends this process if needed
    sys.path.insert(0, ROOT)
    sys.path.extend(p for p in os.environ.get("CUDA_BOOK_PARENT_PATH", "").split(os.pathsep) if p and p not in sys.path)
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever numba or the book prints goes to the log, never into the protocol
    sys.stdout = sys.stderr
    protocol_in = os.fdopen(os.dup(0), "rb")
    problem = _prepare()
    _write(protocol_out, {"unavailable": problem} if problem else {"ready": True})
    if problem:
        return
    while True:
        request = _read(protocol_in)
        if request is None:
            return
        try:
            answer = _compile(request)
        except BaseException as exc:  # never leave the parent waiting
            answer = {"internal": f"{type(exc).__name__}: {exc}"}
        _write(protocol_out, answer)


if __name__ == "__main__":
    main()
