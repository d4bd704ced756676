"""The start-up doctor: a GPU whose CUDA stack is broken gives the one-line fix and the simulator, no traceback.

Each failure is injected: CUDA_BOOK_DOCTOR_INJECT makes `import lib` believe a driver reports a GPU and
that the probe (compile and launch a tiny kernel in a subprocess) printed the given text;
CUDA_BOOK_DOCTOR_DRIVER is the driver's CUDA version (12040 for 12.4).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lib

ROOT = Path(__file__).resolve().parent.parent
CU12 = 'pip install "numba-cuda[cu12]==0.30.4"'
CU13 = 'pip install "numba-cuda[cu13]==0.30.4"'

SCRIPT = """
import json
import numpy as np
import lib
from lib import cuda

@cuda.jit
def add_one(x):
    x[cuda.grid(1)] += 1

x = np.zeros(4, np.float32)
add_one[1, 4](x)
print(json.dumps({"simulator": lib.SIMULATOR, "x": x.tolist()}))
"""


def import_lib(tmp_path, injected: str, driver: int) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(CUDA_BOOK_GPU_CHECK="0", CUDA_BOOK_DOCTOR_INJECT=injected, CUDA_BOOK_DOCTOR_DRIVER=str(driver),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               CUDA_BOOK_CACHE=str(tmp_path))
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"import lib failed instead of falling back:\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stdout + proc.stderr
    *printed, last = proc.stdout.strip().splitlines()
    return json.loads(last), "\n".join(printed)


PTX = "numba.cuda.cudadrv.driver.LinkerError: [222] Call to cuLinkAddData results in CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
CASES = [
    ("ptx newer than a CUDA 13 driver", PTX, 13000, "newer than the driver (the driver supports CUDA 13.0)", CU13),
    ("missing nvJitLink", 'DynamicLibNotFoundError: Failure finding "libnvJitLink.so.13": No such file', 13020,
     "nvJitLink was not found", CU13),
    ("missing NVVM", "numba.cuda.cudadrv.error.NvvmSupportError: libNVVM cannot be found. Do `conda install "
     "cudatoolkit`:\nlibnvvm.so: cannot open shared object file: No such file or directory", 12080,
     "NVVM was not found", CU12),
    ("missing cudart", 'DynamicLibNotFoundError: Failure finding "libcudart.so.12": No such file', 12020,
     "the CUDA runtime (cudart) was not found", CU12),
    ("numpy 2.5", "AttributeError: module 'numpy' has no attribute 'row_stack'", 13000,
     "removed np.row_stack", 'pip install "numpy<2.5"'),
    ("driver older than the toolkit", "CUDA_ERROR_INSUFFICIENT_DRIVER: CUDA driver version is insufficient", 12020,
     "need a newer driver (the driver supports CUDA 12.2)", CU12),
    ("driver too old for numba-cuda", "anything at all", 11080,
     "older than numba-cuda 0.30.4 needs", "update the NVIDIA driver"),
    ("an unknown failure", "RuntimeError: something new\n", 12040,
     "numba could not run a kernel on the GPU (RuntimeError: something new)", CU12),
]


@pytest.mark.parametrize("injected, driver, problem, fix", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_broken_cuda_stack_prints_the_fix_and_falls_back_to_the_simulator(tmp_path, injected, driver, problem, fix):
    result, printed = import_lib(tmp_path, injected, driver)
    assert result == {"simulator": True, "x": [1.0, 1.0, 1.0, 1.0]}, "kernels run on the simulator"
    assert "a GPU is here but numba cannot use it" in printed
    assert problem in printed
    fix_line = next(line for line in printed.splitlines() if line.startswith("lib: fix: "))
    assert fix in fix_line
    assert "simulator" in printed.splitlines()[-1]


def test_ptx_too_new_for_a_cuda_12_driver_names_the_cu12_packages(tmp_path):
    result, printed = import_lib(tmp_path, PTX, 12040)
    assert result["simulator"] is True
    fix_line = next(line for line in printed.splitlines() if line.startswith("lib: fix: "))
    assert fix_line.rstrip().endswith(f"{CU12}   (then restart Python)")
    # CUDA 13's NVVM wheel (installed for the simulator's compile check) would be found before CUDA 12's
    assert ("pip uninstall -y nvidia-nvvm" in fix_line) == lib.mode._cu13_nvvm_wheel()


def test_the_probe_sees_whether_numba_can_use_a_gpu_and_remembers_only_success(tmp_path, monkeypatch):
    monkeypatch.setattr(lib.mode, "CACHE", tmp_path)
    monkeypatch.delenv("CUDA_BOOK_DOCTOR_INJECT", raising=False)
    devices, version = lib.mode._driver()
    if devices:  # a working GPU (also when the simulator is forced): the probe passes and is remembered
        ok, output = lib.mode._probe(version)
        assert ok and output == "" and (tmp_path / "doctor.json").exists()
        return
    ok, output = lib.mode._probe(12040)  # no GPU here: numba in GPU mode cannot run the probe's kernel
    assert not ok and "CUDA_BOOK_PROBE_OK" not in output and output.strip()
    problem, fix = lib.mode.diagnose(output, 12040)
    assert problem and fix == CU12
    assert not (tmp_path / "doctor.json").exists()
