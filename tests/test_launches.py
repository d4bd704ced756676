"""lib.runtime.launches: every kernel launch is seen (name, grid, block, argument types), in both modes."""
import threading

import numpy as np
import pytest

from kernels import intro
from lib import cuda
from lib.runtime import launches


@cuda.jit(device=True)
def _plus_one(v):
    return v + 1


@cuda.jit
def add_one(x, n):
    i = cuda.grid(1)
    if i < n:
        x[i] = _plus_one(x[i])


@cuda.jit
def fill_2d(out, value):
    r, c = cuda.grid(2)
    if r < out.shape[0] and c < out.shape[1]:
        out[r, c] = value


def test_a_launch_is_recorded_with_its_configuration():
    x = np.zeros(20, np.float32)
    with launches.record() as seen:
        add_one[3, 8](x, np.int32(20))
    assert len(seen) == 1, "the device function called inside the kernel is not a launch"
    (launch,) = seen
    assert (launch.name, launch.module, launch.qualname) == ("add_one", __name__, "add_one")
    assert launch.grid == (3, 1, 1) and launch.block == (8, 1, 1) and launch.shared_bytes == 0
    assert launch.arg_types == ("float32[::1]", "int32")
    assert launch.file and launch.file.endswith("test_launches.py")
    assert launch.py_func is add_one.py_func
    assert launch.book is False
    assert launch.threads == 24
    assert str(launch) == "add_one[3x1x1, 8x1x1](float32[::1], int32)"
    np.testing.assert_array_equal(x, 1)


def test_two_dimensional_launch_and_dynamic_shared_memory():
    out = np.zeros((5, 3), np.float64)
    with launches.record() as seen:
        fill_2d[(2, 1), (4, 4), 0, 128](out, 2.5)
    assert seen[0].grid == (2, 1, 1) and seen[0].block == (4, 4, 1)
    assert seen[0].shared_bytes == 128
    assert seen[0].arg_types == ("float64[:, ::1]", "float64")
    assert (out == 2.5).all()


def test_book_kernels_are_marked():
    a = np.arange(8, dtype=np.float32)
    out = np.zeros_like(a)
    with launches.record() as seen:
        intro.vector_add_kernel[1, 8](a, a, out)
    assert [(l.name, l.module, l.book) for l in seen] == [("vector_add_kernel", "kernels.intro", True)]
    np.testing.assert_array_equal(out, 2 * a)


def test_recorders_nest_and_stay_in_their_thread():
    x = np.zeros(4, np.float32)
    with launches.record() as outer:
        add_one[1, 4](x, 4)
        with launches.record() as inner:
            add_one[1, 4](x, 4)
        other = threading.Thread(target=lambda: add_one[1, 4](x, 4))
        other.start()
        other.join()
    assert len(inner) == 1 and len(outer) == 2, "another thread's launch is not this thread's"
    with launches.record(all_threads=True) as every:
        other = threading.Thread(target=lambda: add_one[1, 4](x, 4))
        other.start()
        other.join()
    assert len(every) == 1
    add_one[1, 4](x, 4)  # after the block nothing is recorded any more
    assert len(every) == 1 and len(outer) == 2
    np.testing.assert_array_equal(x, 5)


def test_a_listener_sees_the_arguments_and_can_refuse_the_launch():
    x = np.zeros(4, np.float32)
    calls = []

    def refuse(launch, args):
        calls.append((launch.name, args[0] is x))
        raise RuntimeError("not this one")

    handle = launches.add_listener(refuse)
    try:
        with pytest.raises(RuntimeError, match="not this one"):
            add_one[1, 4](x, 4)
    finally:
        handle.remove()
    assert calls == [("add_one", True)]
    np.testing.assert_array_equal(x, 0)  # the kernel never ran
    add_one[1, 4](x, 4)  # removed: launches run again and the listener is not called
    assert calls == [("add_one", True)]
    np.testing.assert_array_equal(x, 1)


def test_listener_must_be_callable():
    with pytest.raises(TypeError, match="function of"):
        launches.add_listener("not a function")
