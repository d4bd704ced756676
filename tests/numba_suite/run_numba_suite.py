"""Run numba-cuda's own test suite (the installed wheel's numba.cuda.tests) on the simulator.

usage: python tests/numba_suite/run_numba_suite.py plain|book OUT.xml [pytest args...]

plain: numba's simulator as shipped (NUMBA_ENABLE_CUDASIM=1, lib never imported). book: ``import lib`` from
this checkout first (lib.runtime.simulator's scheduler, lib.runtime.simdebug, lib.runtime.gpucompile unless
CUDA_BOOK_GPU_CHECK=0), then the same tests. The pytest settings are numba-cuda 0.30.4's own
(testing/pytest.ini and testing/conftest.py's fixture, here as pytest.ini and numba_fixtures.py);
numba's test dependencies (filecheck, ml_dtypes) and pytest-timeout come from requirements.txt.
tests/test_numba_suite.py runs this and compares the outcome with its list of expected differences.
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Guarded: numba's test_serialize starts processes with multiprocessing's "spawn", which re-runs this file as
# __mp_main__ (unguarded, each such child would run the whole suite again).
if __name__ == "__main__":
    mode, xml, *rest = sys.argv[1:]
    if mode not in ("plain", "book"):
        sys.exit(f"mode is plain or book, got {mode!r}")
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    sys.path.insert(0, HERE)  # numba_fixtures
    if os.environ.get("NUMBA_SUITE_EXTRA"):  # a folder with the test dependencies, where they are not installed
        sys.path.append(os.environ["NUMBA_SUITE_EXTRA"])
    if mode == "book":
        sys.path.insert(0, ROOT)
        import lib  # noqa: E402
        from lib.runtime import simdebug  # noqa: E402

        assert lib.SIMULATOR, "lib is not in simulator mode"
        print("MODE:", lib.banner(), "| simdebug:", simdebug.installed(),
              "| GPU-compile check:", os.environ.get("CUDA_BOOK_GPU_CHECK", "1") != "0", flush=True)
    else:
        from numba.cuda.core import config  # noqa: E402

        assert config.ENABLE_CUDASIM
        print("MODE: plain numba simulator", flush=True)
    import pytest  # noqa: E402

    t0 = time.time()
    rc = pytest.main(["-c", os.path.join(HERE, "pytest.ini"), "--rootdir", HERE, "-p", "no:cacheprovider",
                      "-p", "numba_fixtures", "--timeout=180", "--timeout-method=signal", "-q",
                      "--junitxml", xml, "-rN", "--pyargs", *rest])
    print(f"WALL {mode}: {time.time() - t0:.1f} s", flush=True)
    sys.exit(rc)
