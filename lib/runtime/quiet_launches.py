"""The book's deliberately small launches, without numba's low-occupancy warning.

numba-cuda warns ("Grid size N will likely result in GPU under-utilization due to low occupancy", a
``NumbaPerformanceWarning``) whenever a launch configuration has fewer than 128 blocks. It is raised inside
``_LaunchConfiguration.__init__`` (numba_cuda/numba/cuda/dispatcher.py) with the default ``stacklevel``, so
the warning is attributed to numba's own module for every kernel: a ``warnings`` filter on the *module* cannot
tell the book's launches from a reader's. What tells them apart is the kernel being configured, so the
silencing is attached to the book's kernels themselves:

* ``quiet(kernel)`` makes one kernel's launch configurations ignore that one warning (and nothing else);
* ``quiet_kernels(globals())``, at the end of a ``kernels/`` module, does it for every kernel defined there;
* ``on_purpose()`` is a context manager for a deliberately small launch of a kernel that is not the book's
  (the grader's small sizes of a reader's kernel).

A kernel a reader defines in a notebook is not touched, so its small launches still warn. On the simulator
numba never warns and these are no-ops.
"""
from __future__ import annotations

import contextlib
import functools
import re
import warnings

# numba highlights the message with terminal escapes where colorama is installed (the H200's image has it):
# "\x1b[1mGrid size 1 will ...\x1b[0m". A warnings filter matches from the start, so the escapes are allowed.
LOW_OCCUPANCY = r"(?:\x1b\[[0-9;]*m)*Grid size \d+ will likely result in GPU under-utilization"


def _category():
    """numba-cuda's own NumbaPerformanceWarning class (not numba's: they are distinct classes)."""
    from numba.cuda.core.errors import NumbaPerformanceWarning

    return NumbaPerformanceWarning


def is_low_occupancy_warning(warning: Warning) -> bool:
    """Whether `warning` is the one this module silences."""
    return isinstance(warning, _category()) and re.match(LOW_OCCUPANCY, str(warning)) is not None


@contextlib.contextmanager
def on_purpose():
    """Inside: numba's low-occupancy warning is ignored; every other warning behaves as outside."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=LOW_OCCUPANCY, category=_category())
        yield


def quiet(kernel):
    """`kernel` (a @cuda.jit dispatcher), whose launch configurations `kernel[grid, block]` no longer print
    the low-occupancy warning. Returns the same object; a kernel without `configure` (the simulator's) is
    returned unchanged."""
    configure = getattr(kernel, "configure", None)
    if configure is None or getattr(configure, "_quiet", False):
        return kernel

    @functools.wraps(configure)
    def configure_on_purpose(*args, **kwargs):
        with on_purpose():
            return configure(*args, **kwargs)

    configure_on_purpose._quiet = True
    kernel.configure = configure_on_purpose  # Dispatcher.__getitem__ calls self.configure
    return kernel


def quiet_kernels(namespace: dict) -> list[str]:
    """`quiet` every kernel defined in the module whose globals are `namespace` (kernels it imported from
    elsewhere are left alone); the names quieted."""
    module = namespace.get("__name__")
    if not module:
        raise ValueError("quiet_kernels needs a module's globals() (no __name__ in the namespace given)")
    done = []
    for name, obj in list(namespace.items()):
        if getattr(getattr(obj, "py_func", None), "__module__", None) == module and hasattr(obj, "configure"):
            quiet(obj)
            done.append(name)
    return done
