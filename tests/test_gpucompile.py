"""lib.runtime.gpucompile: on the simulator a kernel numba cannot compile for a GPU stops with numba's own message."""
import inspect
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

import lib
from kernels import hardware, intro
from lib import cuda
from lib.runtime import gpucompile, launches

pytestmark = pytest.mark.skipif(lib.ON_GPU, reason="on a GPU numba itself compiles every launched kernel")
ROOT = Path(__file__).resolve().parent.parent
SCALE = 2.0


class Settings:
    scale = 2.0


SETTINGS = Settings()


def host_helper(v):
    return v * 2


@cuda.jit(device=True)
def scaled(v):
    return v * SCALE


def make_offset_kernel(offset):
    @cuda.jit
    def offset_kernel(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] = scaled(x[i]) + offset + cuda.shfl_down_sync(0xFFFFFFFF, np.float32(0), 0)
    return offset_kernel


@cuda.jit
def uses_a_list(x):
    values = [1.0, 2.0]
    x[0] = values[0]


@cuda.jit
def uses_np_zeros(x):
    tmp = np.zeros(4)
    x[0] = tmp[0]


@cuda.jit
def uses_an_object(x):
    x[0] = SETTINGS.scale


@cuda.jit
def calls_python(x):
    x[0] = host_helper(x[0])


@pytest.mark.parametrize("kernel, words", [
    (uses_a_list, "NRT required but not enabled"),
    (uses_np_zeros, "No implementation of function Function(<built-in function zeros>)"),
    (uses_an_object, f"Cannot determine Numba type of <class '{Settings.__module__}.Settings'>"),
    (calls_python, "Untyped global name 'host_helper'"),
])
def test_a_kernel_that_only_the_simulator_runs_is_stopped(kernel, words):
    x = np.zeros(4, np.float32)
    with pytest.raises(gpucompile.GPUCompileError) as caught:
        kernel[1, 1](x)
    message = str(caught.value)
    assert message.startswith(gpucompile.HEAD)
    assert f"{kernel.py_func.__name__}(float32[::1])" in message.splitlines()[0]
    assert words in message
    assert "site-packages" not in message, "numba's internal frames are trimmed"
    assert (x == 0).all(), "the kernel is refused before it runs"


def test_the_message_names_the_line_a_gpu_user_would_see():
    message = gpucompile.compile_error(uses_an_object, np.zeros(4, np.float32))
    lines, first = inspect.getsourcelines(uses_an_object.py_func)
    line = first + next(k for k, text in enumerate(lines) if "SETTINGS.scale" in text)
    assert message and f'test_gpucompile.py", line {line}:' in message and "x[0] = SETTINGS.scale" in message


def test_a_correct_kernel_with_closure_device_function_and_intrinsic_compiles():
    kernel = make_offset_kernel(3.0)
    x = np.arange(8, dtype=np.float32)
    kernel[1, 32](x)  # no GPUCompileError
    np.testing.assert_array_equal(x, np.arange(8) * SCALE + 3.0)
    assert gpucompile.compile_error(kernel, x) is None


def test_argument_types_come_from_the_launch():
    @cuda.jit
    def store_half(x, v):
        x[0] = v / 2

    assert gpucompile.compile_error(store_half, np.zeros(2, np.float64), 3) is None
    # a complex value stored into a float array: numpy drops the imaginary part, numba refuses to compile
    message = gpucompile.compile_error(store_half, np.zeros(2, np.float64), 3 + 1j)
    assert message is not None and "setitem(array(float64, 1d, C), Literal[int](0), complex128)" in message


def test_book_kernels_compile_including_their_gpu_only_parts():
    a = np.arange(64, dtype=np.float32)
    out = np.zeros_like(a)
    with launches.record() as seen:
        intro.vector_add_kernel[1, 64](a, a, out)
        hardware.vector_add_float4(a, a, out)  # load_float4 is the simulator's four reads; on a GPU an intrinsic
    assert {l.name for l in seen} >= {"vector_add_kernel", "vector_add_float4_kernel"}
    assert all(l.book for l in seen)
    for launch in seen:
        assert gpucompile.compile_error(launch.kernel, a, a, out) is None, launch.name


def test_compile_error_refuses_what_is_not_a_kernel():
    with pytest.raises(TypeError, match="simulator kernel"):
        gpucompile.compile_error(np.sum, np.zeros(3))


SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import lib
    from kernels import intro
    from lib import cuda
    from lib.runtime import gpucompile

    @cuda.jit
    def add_one(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] += 1

    @cuda.jit
    def with_a_list(x):
        values = [1.0]
        x[0] = values[0]

    x = np.zeros(4, np.float32)
    add_one[1, 4](x)
    add_one[1, 4](x)
    intro.vector_add_kernel[1, 4](x, x, np.zeros_like(x))  # a book kernel: compiled from its GPU-mode module
    try:
        with_a_list[1, 1](x)
        with_a_list[1, 1](x)
        refused = False
    except gpucompile.GPUCompileError:
        refused = True
    print(json.dumps(dict(gpucompile.STATS, x=x.tolist(), refused=refused)))
""")


def run_script(cache: Path, **env) -> tuple[dict, str]:
    script = cache.parent / "script.py"  # a file: the check reads kernels' source
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NUMBA_ENABLE_CUDASIM="1", CUDA_BOOK_CACHE=str(cache),
                                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                                   **env))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1]), proc.stderr


def test_a_check_is_paid_once_in_memory_and_on_disk(tmp_path):
    tmp_path = tmp_path / "cache"
    first, _ = run_script(tmp_path)
    assert first["refused"] is True and first["x"] == [2, 2, 2, 2]
    assert (first["compiled"], first["memory_hits"]) == (3, 1), first  # add_one's second launch: from memory
    assert len(list((tmp_path / "gpucompile").rglob("*.json"))) == 3
    again, _ = run_script(tmp_path)
    assert (again["compiled"], again["disk_hits"], again["refused"]) == (0, 3, True), (first, again)


def test_without_the_compiler_the_simulator_goes_on_and_says_so_once(tmp_path):
    stats, stderr = run_script(tmp_path / "cache", CUDA_BOOK_GPU_CHECK_PRETEND_MISSING="1")
    assert stats["refused"] is False and stats["x"] == [1.0, 2.0, 2.0, 2.0], "every kernel ran on the simulator"
    assert stderr.count("the GPU-compile check is off") == 1
    assert 'pip install "nvidia-nvvm' in stderr


def test_a_kernel_meant_for_the_simulator_only_opts_out_visibly():
    seen = []

    @gpucompile.simulator_only
    @cuda.jit
    def looks_at_python_objects():
        seen.append(cuda.threadIdx.x)

    looks_at_python_objects[1, 2]()
    assert sorted(seen) == [0, 1]
    x = np.zeros(4, np.float32)
    with gpucompile.unchecked():
        uses_a_list[1, 1](x)
    assert x[0] == 1.0
    with pytest.raises(gpucompile.GPUCompileError):
        uses_a_list[1, 1](x)
    with pytest.raises(TypeError, match="marks a @cuda.jit kernel"):
        gpucompile.simulator_only(host_helper)


def test_a_module_of_the_readers_own_travels_as_the_attributes_used():
    helpers = types.ModuleType("helpers")  # like `import helpers` of a file next to the notebook
    helpers.OFFSET = 5.0
    helpers.FACTOR = 3.0

    @cuda.jit(device=True)
    def times_factor(v):
        return v * helpers.FACTOR

    @cuda.jit
    def uses_helpers(x):
        x[0] = times_factor(x[0]) + helpers.OFFSET

    x = np.ones(1, np.float32)
    uses_helpers[1, 1](x)
    assert x[0] == 8.0
