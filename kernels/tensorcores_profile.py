"""Nsight Compute's view of the tensor-core ladder's large-tile rungs and cuBLAS at 4096³, per input kind:
how busy the tensor pipe was, how often the schedulers issued, what the warps waited on, and the
shared-memory wavefronts and bank conflicts of ldmatrix and ordinary shared loads (recorded on the GPU
into data/results/tensorcores.ncu.csv). Each implementation is launched once after a marker kernel, as in
kernels/matmul_profile.py; the autotuned rung runs the configuration its sweep recorded a moment before
(tensorcores.autotune.csv), so no sweep runs under ncu.

Where the rest lives: chapters/tensorcores.md (the page); lib/grading/variants/tensorcores.py (its exercises'
known-wrong variants); tests/test_tensorcores.py (tests); data/results/tensorcores.* (recorded on the H200).
Record it with ``python -m tools.record tensorcores`` on a GPU (this module's Nsight Compute profile is part
of it; ``--without kernels.tensorcores_profile`` skips it); on the simulator the same kernels run through the
page's checks and the tests.
"""
import sys
from pathlib import Path

import numpy as np

import lib  # noqa: F401  (first: it picks the GPU or the simulator before numba.cuda is imported)
from numba import cuda  # noqa: E402

from kernels.matmul_profile import by_rung, profile_marker_kernel

CHAPTER = "tensorcores"
SIZE = (4096, 4096, 4096)
TENSOR_PIPE = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
SHARED = ["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum",
          "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum",
          "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
          "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"]
METRICS_EXTRA = ["launch__registers_per_thread", TENSOR_PIPE, "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                 *SHARED]


def implementations() -> list[tuple[str, str, object, bool]]:
    """(kind, name, run, is_torch): each kind's large-tile rungs, the autotuned one at its recorded
    configuration, then its cuBLAS baseline."""
    from kernels import tensorcores as tc

    out = []
    for kind in tc.K_STEP:
        for name in ("warptile", "swizzle"):
            cfg = tc.RUNG_CONFIGS[name]
            out.append((kind, f"matmul_mma_{name}_{kind}",
                        lambda a, b, c, kind=kind, cfg=cfg: tc.launch_mma_tiled(kind, a, b, c, cfg), False))
        cfg = tc.recorded_tuned_config(kind)
        out.append((kind, f"matmul_mma_autotuned_{kind}",
                    lambda a, b, c, kind=kind, cfg=cfg: tc.launch_mma_tiled(kind, a, b, c, cfg), False))
        base = tc.BASELINES[kind][0]
        out.append((kind, base.name, base.run, True))
    return out


def workload():
    """Launch every implementation once at SIZE, each after a marker (run under ncu)."""
    from kernels import tensorcores as tc
    from lib.measure.bench import torch_views

    rng = np.random.default_rng(0)
    marker = cuda.device_array(1, np.float32)
    inputs = {}
    for kind, name, run, is_torch in implementations():
        if kind not in inputs:
            inputs[kind] = [cuda.to_device(x) for x in tc._inputs(kind)(SIZE, rng)]
            inputs[kind].append(cuda.device_array(SIZE[:2], np.float32))
        args = inputs[kind]
        profile_marker_kernel[1, 1](marker)
        run(*(torch_views(args) if is_torch else args))
    cuda.synchronize()


def record_extra(folder) -> list[Path]:
    """On the GPU, with ncu: tensorcores.ncu.csv (long format: rung, kernel, launches, metric, value, and
    the device and versions); nothing (and a message) where ncu is missing or fails."""
    import pandas as pd

    import lib
    from lib.measure.ncu import WARP_STATE, profile
    from lib.measure.results import environment

    if lib.SIMULATOR:
        raise RuntimeError("record_extra measures the GPU: run it with `make record` on a GPU")
    root = Path(__file__).resolve().parent.parent
    try:
        launches, dropped, _ = profile([sys.executable, "-m", "kernels.tensorcores_profile", "--ncu-workload"],
                                       WARP_STATE + METRICS_EXTRA, cwd=root)
    except (RuntimeError, OSError) as err:
        print(f"tensorcores: no ncu counters recorded ({str(err)[:300]})")
        return []
    if dropped:
        print(f"tensorcores: this ncu does not know {dropped}; recorded without them")
    env = environment()
    rows = [{"rung": r["rung"], "kernel": r["kernel"], "launches": r["launches"], "metric": metric,
             "value": value, **env}
            for r in by_rung(launches, [name for _, name, _, _ in implementations()])
            for metric, value in r["metrics"].items()]
    path = Path(folder) / f"{CHAPTER}.ncu.csv"
    pd.DataFrame(rows).to_csv(path, index=False, float_format="%.6g")
    return [path]


if __name__ == "__main__" and sys.argv[1:] == ["--ncu-workload"]:
    workload()
