"""More than 48 KB of dynamic shared memory for one kernel launch.

CUDA caps a block's dynamic shared memory at 48 KB unless the kernel opts in (cuFuncSetAttribute with
MAX_DYNAMIC_SHARED_SIZE_BYTES, up to the device's MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 227 KB on an H100 or
H200). numba-cuda has no public call for it (numba-cuda issue #94), so :func:`allow_dynamic_shared` sets
the attribute on the compiled kernel, as numba-cuda's own shared-memory carve-out setting does.
"""
from __future__ import annotations

from lib import mode

_OPTED_IN: set = set()


def allow_dynamic_shared(kernel, args, nbytes: int) -> None:
    """Raise `kernel`'s dynamic shared-memory limit to `nbytes` for the argument types of `args` (once per
    kernel and types). Nothing on the simulator, which has no such limit; a request above the device's
    opt-in limit is a ValueError naming both."""
    if mode.SIMULATOR:
        return
    argtypes = tuple(kernel.typeof_pyval(a) for a in args)
    key = (id(kernel), argtypes, nbytes)
    if key in _OPTED_IN:
        return
    from numba import cuda
    from numba.cuda.cudadrv.driver import binding, driver

    limit = int(cuda.get_current_device().MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    if nbytes > limit:
        name = getattr(kernel, "__name__", "kernel")
        raise ValueError(f"{name}: {nbytes} bytes of dynamic shared memory requested, but a block of this "
                         f"GPU may have at most {limit}")
    compiled = kernel.compile(argtypes)
    cufunc = compiled._codelibrary.get_cufunc()
    attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    driver.cuKernelSetAttribute(attr, nbytes, cufunc.handle, cufunc.device.id)
    _OPTED_IN.add(key)
