"""How far each sum rung of the reduction chapter lands from the exact sum at 2^28 (recorded on the GPU).

The ladder's check at 2^28 accepts a sum within the random-walk bound of lib.grading.check, which is loose at that size
(about 1e-2 of the largest partial sum): it would not notice one lost block. So each rung, and torch.sum,
also sums two inputs of 2^28 elements whose exact sum is known:

* standard normals (the ladder's input): the error against the float64 sum (whose own error, below
  ~28 · 2^-53 · Σ|x| ≈ 1e-6, is far below float32's), beside the seed's criterion A1 (rtol 1e-4);
* ±1 in random order: every partial sum of m of them is an integer of size about √m ≤ 2^14, far below 2^24,
  so float32 adds them exactly in any order and any correct rung must return the exact integer: an error
  there is lost or doubled work (a dropped block of 256 elements changes the sum unless its own sum is 0).

Written to data/results/reduction.accuracy.csv by ``make record reduction``.

Where the rest lives: chapters/reduction.md (the page); lib/grading/variants/reduction.py (its exercises'
known-wrong variants); tests/test_reduction.py (tests); data/results/reduction.* (recorded on the H200).
Record it with ``python -m tools.record reduction`` on a GPU; on the simulator the same kernels run through
the page's checks and the tests.
"""
from pathlib import Path

import numpy as np

CHAPTER = "reduction"
SEED_RTOL = 1e-4   # seed 002, criterion A1: the GPU sum within 1e-4 of the CPU's, relative


def _inputs(n: int, rng):
    normal = rng.standard_normal(n, dtype=np.float32)
    signs = rng.integers(0, 2, n, dtype=np.int8).astype(np.float32) * 2 - 1
    return normal, signs


def accuracy_rows(n: int, rng) -> list[dict]:
    """One row per sum rung and baseline: its float32 result and error on each input."""
    import lib
    from lib.measure.bench import torch_views
    from numba import cuda

    from kernels.reduction import LADDERS

    ladder = next(lad for lad in LADDERS if lad.topic == "sum")
    impls = [(r.name, r.run, False) for r in ladder.rungs]
    if lib.ON_GPU:
        impls += [(b.name, b.run, True) for b in ladder.baselines]
    normal, signs = _inputs(n, rng)
    exact = {"normal": float(np.sum(normal, dtype=np.float64)), "signs": float(np.sum(signs, dtype=np.float64))}
    got = {name: {} for name, _, _ in impls}
    for label, x in (("normal", normal), ("signs", signs)):
        d_x, d_out = cuda.to_device(x), cuda.device_array(1, dtype=np.float32)
        for name, run, is_torch in impls:
            d_out.copy_to_device(np.full(1, np.nan, np.float32))
            run(*(torch_views([d_x, d_out]) if is_torch else [d_x, d_out]))
            cuda.synchronize()
            got[name][label] = float(d_out.copy_to_host()[0])
        del d_x, d_out
    return [{"kernel": name, "n": n,
             "normal_sum": got[name]["normal"], "normal_exact": exact["normal"],
             "normal_abs_error": abs(got[name]["normal"] - exact["normal"]),
             "normal_rel_error": abs(got[name]["normal"] - exact["normal"]) / abs(exact["normal"]),
             "seed_a1_rtol": SEED_RTOL,
             "signs_sum": got[name]["signs"], "signs_exact": exact["signs"],
             "signs_error": got[name]["signs"] - exact["signs"]} for name, _, _ in impls]


def record_extra(folder) -> list[Path]:
    """On the GPU: every sum rung and torch.sum at 2^28 on the two inputs of the module's docstring
    (reduction.accuracy.csv)."""
    import lib
    import pandas as pd
    from lib.measure.results import environment

    from kernels.reduction import N

    if lib.SIMULATOR:
        raise RuntimeError("record_extra measures the GPU: run it with `make record` on a GPU")
    rows = [{**row, **environment()} for row in accuracy_rows(N, np.random.default_rng(2))]
    path = Path(folder) / f"{CHAPTER}.accuracy.csv"
    pd.DataFrame(rows).to_csv(path, index=False, float_format="%.10g")
    for row in rows:
        print(f"  {row['kernel']:<30} normal error {row['normal_abs_error']:.3g}, ±1 error {row['signs_error']:g}")
    return [path]
