"""Argument checks for the book's host launchers: a clear error that names the problem, before numba sees it."""
from __future__ import annotations

import numpy as np


def require(array, name: str, *, dtype=np.float32, ndim: int | None = None, shape: tuple | None = None,
            where: str = ""):
    """Raise TypeError/ValueError unless `array` is a C-contiguous device or host array as described."""
    prefix = f"{where}: " if where else ""
    is_numba = hasattr(array, "copy_to_host") and hasattr(array, "is_c_contiguous")
    cai = getattr(array, "__cuda_array_interface__", None) if not is_numba else None
    if not (is_numba or cai is not None or isinstance(array, np.ndarray)):
        raise TypeError(f"{prefix}`{name}` must be a numba device array (cuda.to_device) or a numpy array, "
                        f"got {type(array).__name__}")
    got = np.dtype(cai["typestr"]) if cai is not None else np.dtype(array.dtype)
    if got != np.dtype(dtype):
        raise TypeError(f"{prefix}`{name}` must be {np.dtype(dtype).name}, got {got.name} "
                        f"(convert with .astype(np.{np.dtype(dtype).name}))")
    shape_now = tuple(cai["shape"]) if cai is not None else tuple(array.shape)
    if ndim is not None and len(shape_now) != ndim:
        raise ValueError(f"{prefix}`{name}` must be {ndim}-D, got shape {shape_now}")
    if shape is not None and shape_now != tuple(shape):
        raise ValueError(f"{prefix}`{name}` must have shape {tuple(shape)}, got {shape_now}")
    if not _c_contiguous(array):
        raise ValueError(f"{prefix}`{name}` must be C-contiguous (a slice or transpose is not): copy it first "
                         "(np.ascontiguousarray, or .copy_to_host() and cuda.to_device)")
    return array


def _c_contiguous(array) -> bool:
    if isinstance(array, np.ndarray):
        return array.flags.c_contiguous
    if hasattr(array, "is_c_contiguous"):
        return bool(array.is_c_contiguous())
    cai = array.__cuda_array_interface__
    if cai.get("strides") is None:
        return True
    expected = []
    step = np.dtype(cai["typestr"]).itemsize
    for extent in reversed(cai["shape"]):
        expected.append(step)
        step *= extent
    return tuple(reversed(expected)) == tuple(cai["strides"])
