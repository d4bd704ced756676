"""numba-cuda's own hardware tests of warp intrinsics and barriers, run on the book's simulator.

numba's ``test_warp_ops`` and ``test_sync`` skip every warp test under the simulator (``skip_on_cudasim``:
numba's simulator has no warp intrinsics). They pass on GPUs in numba's CI, so they are an outside
statement of what a GPU does. Here the skip decorator is replaced by a no-op before numba's modules are
imported, and each test method runs under ``lib.runtime.simulator``. Every test about semantics must pass; the
tests listed in ``NOT_SEMANTICS`` check something a simulator does not have (numba's generated LLVM/PTX, its
type checker) and are expected to fail here, each for the reason given (``strict``: if one starts passing,
the list is out of date).
"""
import importlib
import os
import sys
import unittest
from pathlib import Path

# Before lib / numba: these run on the simulator. Not where numba.cuda is already on a GPU (a whole
# test run there): numba re-reads the variable later and would turn its next kernels into simulated ones.
if "numba.cuda" not in sys.modules:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import lib  # noqa: E402
from numba.cuda.core import config as _numba_config  # noqa: E402

if not _numba_config.ENABLE_CUDASIM:  # numba.cuda was imported in GPU mode by an earlier module
    pytest.skip("numba.cuda was already imported with the simulator off", allow_module_level=True)

MODULES = ["numba.cuda.tests.cudapy.test_warp_ops", "numba.cuda.tests.cudapy.test_sync"]

NOT_SEMANTICS = {
    "test_shfl_sync_const_mode_val": "reads the kernel's LLVM IR (inspect_llvm): the simulator compiles nothing",
    "test_vote_sync_const_mode_val": "reads the kernel's LLVM IR (inspect_llvm): the simulator compiles nothing",
    "test_shfl_sync_const_mode_val_sm100": "compiles PTX for sm_100 (compile_ptx is None under the simulator)",
    "test_vote_sync_const_mode_val_sm100": "compiles PTX for sm_100 (compile_ptx is None under the simulator)",
    "test_vote_sync_type_validation": "expects numba's TypingError for a float mask or predicate: the "
                                      "simulator runs Python and types nothing (lib.runtime.gpucompile's check "
                                      "reports such kernels before a launch in the book)",
}


def _stub_filecheck():
    """numba.cuda.testing imports the `filecheck` package (a test-only dependency of numba-cuda, not in the
    book's requirements) for its FileCheck assertions on LLVM/PTX, which these two modules never call.
    Where it is missing, empty stand-ins let the import succeed; a call of one of them would fail."""
    import types

    try:
        import filecheck.matcher  # noqa: F401
        return
    except ImportError:
        pass
    for name, attrs in [("filecheck", []), ("filecheck.matcher", ["Matcher"]), ("filecheck.options", ["Options"]),
                        ("filecheck.parser", ["Parser", "pattern_for_opts"]), ("filecheck.finput", ["FInput"])]:
        module = types.ModuleType(name)
        for attr in attrs:
            setattr(module, attr, None)
        sys.modules.setdefault(name, module)


def _load_without_cudasim_skips():
    """numba's two modules, imported with skip_on_cudasim made a no-op (a fresh import if already loaded)."""
    _stub_filecheck()
    from numba.cuda import testing

    original = testing.skip_on_cudasim
    testing.skip_on_cudasim = lambda reason: (lambda obj: obj)
    try:
        modules = []
        for name in MODULES:
            sys.modules.pop(name, None)
            modules.append(importlib.import_module(name))
    finally:
        testing.skip_on_cudasim = original
    for name in MODULES:  # numba's own runs of these modules get the usual decorators again
        sys.modules.pop(name, None)
    return modules


def _collect():
    loader = unittest.TestLoader()
    tests = {}
    for module in _load_without_cudasim_skips():
        for case in loader.loadTestsFromModule(module):
            for test in case:
                tests[f"{module.__name__.rsplit('.', 1)[1]}::{test._testMethodName}"] = test
    return tests


TESTS = _collect()


def test_every_listed_exception_exists():
    names = {key.split("::")[1] for key in TESTS}
    assert set(NOT_SEMANTICS) <= names, set(NOT_SEMANTICS) - names
    assert len(TESTS) >= 35  # 20 warp tests and 19 sync tests in numba-cuda 0.30.4


@pytest.mark.parametrize("name", sorted(TESTS))
def test_numba_hardware_test_on_the_simulator(name):
    from lib.runtime import gpucompile

    method = name.split("::")[1]
    result = unittest.TestResult()
    with gpucompile.unchecked():  # numba's kernels compile on a GPU; checking them here costs minutes
        TESTS[name].run(result)
    problems = [text for _, text in result.failures + result.errors]
    if method in NOT_SEMANTICS:
        assert problems, f"{name} passes now: remove it from NOT_SEMANTICS"
        pytest.xfail(NOT_SEMANTICS[method])
    assert not result.skipped, result.skipped
    assert not problems, "\n".join(problems)
    assert result.testsRun == 1
