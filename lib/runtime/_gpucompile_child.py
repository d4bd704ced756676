"""The helper process of :mod:`lib.runtime.gpucompile`: compiles kernels for the GPU target (PTX, sm_90), no GPU needed.

Run as a script (``python lib/runtime/_gpucompile_child.py``), never imported: numba.cuda's mode is fixed when it
is first imported, and the parent process runs the simulator. Here numba.cuda is in GPU mode and
compiles with NVVM alone: the compute capability is fixed (``NUMBA_FORCE_CUDA_CC``), so neither a device
nor NVRTC is asked for it.

Protocol on stdin/stdout: each message is a 4-byte big-endian length and a pickle. The child first says
``{"ready": True}`` or ``{"unavailable": reason}``; then for every request ``{"spec", "argtypes"}`` it answers
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
    head = stream.read(4)
    if len(head) < 4:
        return None
    (size,) = struct.unpack(">I", head)
    return pickle.loads(stream.read(size))


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


class _Builder:
    def __init__(self):
        self.built = {}

    def value(self, spec):
        kind = spec[0]
        if kind == "pickle":
            try:
                return pickle.loads(spec[1])
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

            key = id(spec)
            if key not in self.built:
                self.built[key] = cuda.jit(**spec[2])(self.function(spec[1]))
            return self.built[key]
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
            namespace.update({name: self.value(sub) for name, sub in spec["globals"].items()})
        exec(compile(text, filename, "exec"), namespace)
        if freevars:
            return namespace["__factory__"](*[self.value(sub) for _, sub in spec["freevars"]])
        return namespace[fdef.name]


_OPTIONS = ("fastmath", "debug", "lineinfo", "launch_bounds")


def _compile(request):
    from numba import cuda
    from numba.cuda.cudadrv.error import CudaDriverError, CudaSupportError, NvvmSupportError

    builder = _Builder()
    try:
        kernel = builder.value(request["spec"])
        if hasattr(kernel, "py_func"):  # a dispatcher: the book's own GPU-mode kernel, with its options
            options = {k: kernel.targetoptions[k] for k in _OPTIONS if kernel.targetoptions.get(k) is not None}
            fn = kernel.py_func
        else:
            options, fn = {}, kernel
    except Exception as exc:
        return {"internal": f"rebuilding the kernel: {type(exc).__name__}: {exc}"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cuda.compile_ptx(fn, tuple(request["argtypes"]), cc=CC, **options)
    except (CudaSupportError, CudaDriverError, NvvmSupportError) as exc:  # this helper's environment
        return {"internal": f"{type(exc).__name__}: {exc}"}
    except Exception as exc:
        return {"error": str(exc), "type": type(exc).__name__}
    return {"ok": True}


def main():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it ends this process if needed
    sys.path.insert(0, ROOT)
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
