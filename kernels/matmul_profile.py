"""Nsight Compute's view of every rung of the matmul ladder at 4096³: achieved occupancy, how often the
schedulers issued, and what the warps waited on (recorded on the GPU into data/results/matmul.ncu.csv).

The workload launches each rung (and cuBLAS) once, with a one-thread marker kernel before each, so that the
launches ncu profiles can be told apart by rung even when a rung launches more than one kernel; a rung's
counters are those of its longest kernel. ncu replays each kernel once per group of counters, so a slow rung
costs a few times its run time, not more.

Where the rest lives: chapters/matmul.md (the page); lib/grading/variants/matmul.py (its exercises'
known-wrong variants); tests/test_matmul.py (tests); data/results/matmul.* (recorded on the H200). Record it
with ``python -m tools.record matmul`` on a GPU (this module's Nsight Compute profile is part of it;
``--without kernels.matmul_profile`` skips it); on the simulator the same kernels run through the page's
checks and the tests.
"""
import sys
from pathlib import Path

import numpy as np
from numba import cuda

from lib.runtime.quiet_launches import quiet_kernels

CHAPTER = "matmul"
SIZE = (4096, 4096, 4096)
METRICS_EXTRA = ["launch__registers_per_thread", "dram__bytes_read.sum",
                 "l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum",
                 "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"]


@cuda.jit
def profile_marker_kernel(out):
    """Marks, in ncu's list of launches, where the next rung's launches begin.

    Memory: one 4-byte store.
    Launch: 1 block of 1 thread.
    """
    out[0] = 1.0


def _ladder():
    from kernels.matmul import LADDERS

    return next(lad for lad in LADDERS if lad.topic == "sgemm 4096")


def implementations() -> list[tuple[str, object, bool]]:
    """(name, run, is_torch) of every rung of the 4096³ ladder, then its baselines, as they are now. The
    autotuned rung runs the recorded sweep's winner: run as it is, it would first sweep sixteen
    configurations, all of them under ncu (slow, and the longest of them would stand for the rung)."""
    from kernels import matmul as mm

    def autotuned_as_recorded(a, b, c):
        mm.launch_warptile(a, b, c, mm.recorded_config(), where="matmul_autotuned")

    ladder = _ladder()
    runs = {"matmul_autotuned": autotuned_as_recorded}
    return ([(r.name, runs.get(r.name, r.run), False) for r in ladder.rungs]
            + [(b.name, b.run, True) for b in ladder.baselines])


def workload():
    """Launch every implementation once at SIZE, each after a marker (run under ncu)."""
    from lib.measure.bench import torch_views

    rng = np.random.default_rng(0)
    a_h, b_h = _ladder().make_inputs(SIZE, rng)
    a, b = cuda.to_device(a_h), cuda.to_device(b_h)
    c = cuda.device_array((SIZE[0], SIZE[1]), np.float32)
    marker = cuda.device_array(1, np.float32)
    for name, run, is_torch in implementations():
        profile_marker_kernel[1, 1](marker)
        run(*(torch_views([a, b, c]) if is_torch else [a, b, c]))
    cuda.synchronize()


def by_rung(launches: list[dict], names: list[str]) -> list[dict]:
    """Split ncu's launches at the markers into one group per implementation and keep each group's longest
    kernel: {"rung", "kernel" (its name as ncu saw it), "launches", "metrics"}."""
    from lib.measure.ncu import DURATION

    groups, current = [], None
    for launch in launches:
        if "profile_marker_kernel" in launch["name"]:
            current = []
            groups.append(current)
        elif current is not None:
            current.append(launch)
    if len(groups) != len(names) or not all(groups):
        raise RuntimeError(f"ncu saw {len(groups)} marked groups ({[len(g) for g in groups]} launches) for "
                           f"{len(names)} implementations: the profile cannot be assigned to rungs")
    out = []
    for name, group in zip(names, groups):
        main = max(group, key=lambda g: g["metrics"].get(DURATION, 0.0))
        out.append({"rung": name, "kernel": main["name"].split("(")[0][:60], "launches": len(group),
                    "metrics": main["metrics"]})
    return out


def record_extra(folder) -> list[Path]:
    """On the GPU: every rung and baseline of the 4096³ ladder under ncu, once each (matmul.ncu.csv, long
    format: rung, kernel, launches, metric, value, and the device and versions)."""
    import pandas as pd

    import lib
    from lib.measure.ncu import WARP_STATE, profile
    from lib.measure.results import environment

    if lib.SIMULATOR:
        raise RuntimeError("record_extra measures the GPU: run it with `make record` on a GPU")
    root = Path(__file__).resolve().parent.parent
    launches, dropped, log = profile([sys.executable, "-m", "kernels.matmul_profile", "--ncu-workload"],
                                     WARP_STATE + METRICS_EXTRA, cwd=root)
    if dropped:
        print(f"matmul: this ncu does not know {dropped}; recorded without them")
    env = environment()
    rows = [{"rung": r["rung"], "kernel": r["kernel"], "launches": r["launches"], "metric": metric,
             "value": value, **env}
            for r in by_rung(launches, [name for name, _, _ in implementations()])
            for metric, value in r["metrics"].items()]
    path = Path(folder) / f"{CHAPTER}.ncu.csv"
    pd.DataFrame(rows).to_csv(path, index=False, float_format="%.6g")
    return [path]


quiet_kernels(globals())

if __name__ == "__main__" and sys.argv[1:] == ["--ncu-workload"]:
    workload()
