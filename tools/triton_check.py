"""``python -m tools.triton_check [gemm] [attention]`` (on a GPU with Triton): the Triton baselines of the
Hopper and FlashAttention-3 chapters beside cuBLAS / SDPA and the best rung, each checked against float64
first, all in this process — what ``make record`` will do, in a few minutes and without touching data/.
Prints the figures and the seconds autotuning took; files go to --out (default a temporary folder)."""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("parts", nargs="*", default=["gemm", "attention"], help="gemm, attention (default both)")
    parser.add_argument("--out", default=None, help="folder for vs_sdpa.csv and the tuning logs")
    args = parser.parse_args(argv)
    unknown = set(args.parts) - {"gemm", "attention"}
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}: choose gemm and/or attention")

    import lib
    from kernels import triton_baselines as T

    if not T.available():
        print(f"nothing to check: {T.unavailable_reason()}")
        return 2
    import pandas as pd

    from kernels import flash3 as F, hopper as H
    from lib.measure.bench import run_ladder
    from lib.measure.results import environment

    out = Path(args.out or tempfile.mkdtemp(prefix="triton_check_"))
    out.mkdir(parents=True, exist_ok=True)
    start, failed = time.time(), []
    print(f"{lib.DEVICE_NAME}, out: {out}")
    if "gemm" in args.parts:
        for lad in H.LADDERS:
            quick = dataclasses.replace(lad, rungs=[r for r in lad.rungs if r.name == H.rung_name("persistent",
                                                                                                  lad.topic.split()[0])])
            rows, _, failures = run_ladder(quick)
            failed += failures
            for r in rows:
                print(f"{r['kernel']:26s} {r['size']:15s} {r['value']:6.0f} TFLOP/s")
        T.write_tuning(out / "hopper.triton.csv", environment(), [H.triton_name(k) for k in H.KINDS])
        print(T.tuning_summary(out / "hopper.triton.csv", "hopper"))
    if "attention" in args.parts:
        path = F.record_vs_sdpa(out, rungs=("pingpong",))
        cols = ["kind", "n", "d", "causal", "sdpa_tflops", "pingpong_tflops", "triton_tflops", "triton_ws_tflops"]
        print(pd.read_csv(path)[cols].to_string(index=False))
        print(F.triton_note(out))
    print(f"{time.time() - start:.0f} s in all" + (f"; FAILED checks: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
