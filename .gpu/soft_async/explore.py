"""One exploratory H200 call for softmax rung 7 (softmax_on_chip_async_kernel): every candidate configuration
against torch.softmax, torch.copy and rung 6 (softmax_on_chip_shared), in one process and the same run.

    python3 .gpu/soft_async/explore.py [--budget 120] [--reps 20] [--dry]

Each candidate is checked against torch.softmax on the same input (output first filled with NaN, so a kernel
that writes nothing fails) before it is timed with lib.timing.time_cuda; a failing or crashing candidate is
printed and skipped. Once --budget seconds have passed, the remaining candidates are skipped (said so). Prints a
table per shape and writes $OUT/soft_async.json (rows, device, versions, compiled registers / local memory of
each candidate as the H200 reports them).

--dry runs the same plumbing on numba's simulator at tiny shapes with small blocks (no torch, the float64
reference instead, wall-clock 'times' that mean nothing), to test the script without a GPU.
"""
import argparse
import json
import math
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--budget", type=float, default=120.0, help="seconds after which no more candidates start")
ap.add_argument("--reps", type=int, default=20, help="timed repetitions per candidate")
ap.add_argument("--dry", action="store_true", help="simulator, tiny shapes: test the plumbing only")
args = ap.parse_args()
if args.dry:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
sys.path.insert(0, ROOT)

import lib  # noqa: E402  (first: it decides GPU or simulator)
import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

import kernels.softmax as sm  # noqa: E402
from lib.dynamic_shared import allow_dynamic_shared  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")
T0 = time.time()
rows_out = []
compiled_out = []


# --- candidates -------------------------------------------------------------------------------------------------
def async_launch(threads, reg_items, shared_items, groups):
    """A launcher for one configuration of the cp.async kernel (the rung's own launcher picks shared_items
    from ASYNC_SHARED_ITEMS; here every configuration is built as given)."""
    kernel = sm.make_softmax_on_chip_async_kernel(reg_items, shared_items, threads, groups)
    nbytes = 4 * threads * shared_items

    def launch(x, out):
        rows, cols = x.shape
        if cols % 4 or cols > threads * (reg_items + shared_items):
            raise ValueError(f"T{threads} R{reg_items} S{shared_items} does not hold {cols} columns")
        flat = (x.reshape(rows * cols), out.reshape(rows * cols), cols)
        if nbytes:
            allow_dynamic_shared(kernel, flat, nbytes)
        kernel[rows, threads, 0, nbytes](*flat)

    launch.kernel = kernel
    launch.config = dict(threads=threads, reg_items=reg_items, shared_items=shared_items, groups=groups,
                         shared_bytes=nbytes)
    return launch


def candidates_for(cols):
    """(name, launcher) to try at rows of `cols` floats: the ladder's launchers, then configurations."""
    if args.dry:
        # the last two exercise the error paths: groups that do not split 3 float4s (not built), and a
        # configuration too small for 768 columns (an error at launch)
        configs = [(64, 4, 8, 1), (64, 4, 8, 2), (64, 8, 4, 1), (64, 12, 0, 1), (64, 4, 12, 2), (64, 4, 4, 1)]
        current = [("on_chip_shared (launcher)", sm.softmax_on_chip_shared),
                   ("on_chip_async (launcher)", sm.softmax_on_chip_async)]
    elif cols == 65536:
        configs = [(512, 32, 96, 1), (512, 32, 96, 2), (512, 32, 96, 4), (512, 32, 96, 8), (1024, 16, 48, 2),
                   (1024, 16, 48, 4), (256, 64, 192, 4), (512, 16, 112, 4)]
        current = [("on_chip_shared (launcher)", sm.softmax_on_chip_shared),
                   ("on_chip_async (launcher)", sm.softmax_on_chip_async)]
    elif cols == 32768:
        configs = [(512, 32, 32, 1), (512, 32, 32, 4), (512, 32, 32, 8), (512, 16, 48, 2), (1024, 16, 16, 4)]
        current = [("on_chip_shared (launcher)", sm.softmax_on_chip_shared),
                   ("on_chip_async (launcher)", sm.softmax_on_chip_async)]
    elif cols == 8192:     # the registers alone hold these rows: 16-byte loads, no shared part
        configs = [(256, 32, 0, 1), (512, 16, 0, 1), (1024, 8, 0, 1)]
        current = [("on_chip (launcher)", sm.softmax_on_chip)]
    elif cols == 4096:
        configs = [(128, 32, 0, 1), (256, 16, 0, 1), (512, 8, 0, 1)]
        current = [("on_chip (launcher)", sm.softmax_on_chip)]
    else:
        configs, current = [], []
    out = list(current)
    for t, r, s, g in configs:
        try:
            out.append((f"async T{t} R{r} S{s} G{g}", async_launch(t, r, s, g)))
        except Exception as e:  # e.g. an assertion of the factory: say so and go on
            print(f"cols {cols}: async T{t} R{r} S{s} G{g}: NOT BUILT {type(e).__name__}: {e}", flush=True)
    return out


# --- inputs, checks, timing (GPU with torch, or the simulator) ---------------------------------------------------
class Case:
    """One shape's input, output and reference; check() compares the output with the reference."""

    def __init__(self, rows, cols, seed):
        self.shape = f"{rows}x{cols}"
        self.nbytes = 8 * rows * cols
        if args.dry:
            (x,) = sm.softmax_inputs((rows, cols), np.random.default_rng(seed))
            self.ref = sm.softmax_reference(x)
            self.x = cuda.to_device(x)
            self.out = cuda.to_device(np.full(x.shape, np.nan, dtype=np.float32))
            self.xt = self.ot = None
            return
        import torch

        g = torch.Generator(device="cuda").manual_seed(seed)
        self.xt = torch.randn(rows, cols, device="cuda", generator=g) * 3
        self.xt[::3] += 90                       # exp overflows here without the shift
        self.xt[1::5, 1::2] = -float("inf")      # masked entries (never a whole row: torch would give NaN)
        self.ot = torch.empty_like(self.xt)
        self.ref = torch.softmax(self.xt, 1)
        self.x, self.out = cuda.as_cuda_array(self.xt), cuda.as_cuda_array(self.ot)

    def clear(self):
        if args.dry:
            self.out.copy_to_device(np.full(self.out.shape, np.nan, dtype=np.float32))
        else:
            self.ot.fill_(float("nan"))

    def check(self):
        """None if every output is within 1e-6 + 1e-4·|ref| of the reference (NaN counts as wrong)."""
        if args.dry:
            got = self.out.copy_to_host()
            d = np.abs(got - self.ref)
            bad = int(np.count_nonzero(~(d <= 1e-6 + 1e-4 * np.abs(self.ref))))
            worst = float(np.nanmax(d)) if np.isfinite(d).any() else float("nan")
        else:
            d = (self.ot - self.ref).abs()
            bad = int((~(d <= 1e-6 + 1e-4 * self.ref.abs())).sum().item())
            worst = float(d.nan_to_num(nan=float("inf")).max().item())
        return None if bad == 0 else f"{bad} wrong, max abs error {worst:.3g}"

    def release(self):
        self.x = self.out = self.xt = self.ot = self.ref = None
        if not args.dry:
            import torch

            torch.cuda.empty_cache()


def timed(fn, nbytes):
    """(median ms, GB/s): lib.timing.time_cuda on the GPU; one wall-clock run on the simulator (meaningless)."""
    if args.dry:
        t = time.perf_counter()
        fn()
        cuda.synchronize()
        ms = 1e3 * (time.perf_counter() - t)
        return ms, nbytes / ms / 1e6
    from lib.timing import time_cuda

    t = time_cuda(fn, bytes=nbytes, reps=args.reps)
    return t.median_ms, t.gbps


def compiled_stats(launch):
    """Registers and local memory of the kernel a candidate launched, as the driver reports them."""
    kernel = getattr(launch, "kernel", None)
    if kernel is None or args.dry:
        return {}
    try:
        compiled = next(iter(kernel.overloads.values()))
        return {"regs": int(compiled.regs_per_thread), "local_bytes": int(compiled.local_mem_per_thread),
                "static_shared_bytes": int(compiled.shared_mem_per_block)}
    except Exception as e:
        return {"stats_error": f"{type(e).__name__}: {e}"}


def rec(case, name, fn, check=True, candidate=True):
    """Run once, check (unless told not to), time, and keep a row; print any failure and carry on."""
    if candidate and time.time() - T0 > args.budget:
        print(f"{case.shape:>11} {name:<30} skipped (budget of {args.budget:.0f} s spent)", flush=True)
        rows_out.append({"shape": case.shape, "name": name, "skipped": "budget"})
        return
    try:
        if check:
            case.clear()
        fn()
        cuda.synchronize()
        if check:
            err = case.check()
            if err is not None:
                print(f"{case.shape:>11} {name:<30} CHECK FAILED: {err}", flush=True)
                rows_out.append({"shape": case.shape, "name": name, "error": f"check: {err}"})
                return
        ms, gbps = timed(fn, case.nbytes)
        row = {"shape": case.shape, "name": name, "ms": ms, "gbps": gbps, **compiled_stats(fn)}
        row.update(getattr(fn, "config", {}))
        rows_out.append(row)
        extra = f" regs {row['regs']} local {row['local_bytes']}" if "regs" in row else ""
        print(f"{case.shape:>11} {name:<30} {ms:8.4f} ms {gbps:7.0f} GB/s{extra}  [{time.time() - T0:5.1f} s]",
              flush=True)
    except Exception as e:
        print(f"{case.shape:>11} {name:<30} ERROR {type(e).__name__}: {str(e)[:400]}", flush=True)
        traceback.print_exc(limit=3)
        rows_out.append({"shape": case.shape, "name": name, "error": f"{type(e).__name__}: {str(e)[:400]}"})


# --- the run -------------------------------------------------------------------------------------------------------
SHAPES = [(2, 768), (3, 512)] if args.dry else [(1024, 65536), (1024, 32768), (8192, 8192), (32768, 4096)]
for seed, (rows, cols) in enumerate(SHAPES):
    try:
        case = Case(rows, cols, seed)
    except Exception as e:
        print(f"{rows}x{cols}: input not made: {type(e).__name__}: {e}", flush=True)
        continue
    if not args.dry:
        import torch

        rec(case, "torch.softmax", lambda: torch.softmax(case.xt, 1, out=case.ot), candidate=False)
        rec(case, "torch.copy", lambda: case.ot.copy_(case.xt), check=False, candidate=False)
    for name, launch in candidates_for(cols):
        rec(case, name, lambda launch=launch: launch(case.x, case.out))
    if not args.dry and cols == 65536:   # torch again: how much the clocks drifted over the candidates
        rec(case, "torch.softmax (again)", lambda: torch.softmax(case.xt, 1, out=case.ot), candidate=False)
    case.release()


# --- table and JSON ------------------------------------------------------------------------------------------------
def table():
    print(f"\n{'shape':>11} {'name':<30} {'GB/s':>7} {'x torch':>8} {'% copy':>7}")
    for shape in dict.fromkeys(r["shape"] for r in rows_out):
        timed_rows = [r for r in rows_out if r["shape"] == shape and "gbps" in r]
        torch_gbps = next((r["gbps"] for r in timed_rows if r["name"] == "torch.softmax"), math.nan)
        copy_gbps = next((r["gbps"] for r in timed_rows if r["name"] == "torch.copy"), math.nan)
        for r in sorted(timed_rows, key=lambda r: -r["gbps"]):
            print(f"{shape:>11} {r['name']:<30} {r['gbps']:7.0f} {r['gbps'] / torch_gbps:8.3f} "
                  f"{100 * r['gbps'] / copy_gbps:6.0f}%")
        for r in rows_out:
            if r["shape"] == shape and "gbps" not in r:
                print(f"{shape:>11} {r['name']:<30} {r.get('error') or 'skipped: ' + r.get('skipped', '?')}")


table()
env = {"dry": args.dry, "budget_s": args.budget, "reps": args.reps, "seconds": time.time() - T0,
       "defaults": {"ASYNC_THREADS": sm.ASYNC_THREADS, "ASYNC_REG_ITEMS": sm.ASYNC_REG_ITEMS,
                    "ASYNC_SHARED_ITEMS": list(sm.ASYNC_SHARED_ITEMS), "ASYNC_GROUPS": sm.ASYNC_GROUPS}}
if not args.dry:
    import torch

    env.update(device=torch.cuda.get_device_name(), torch=torch.__version__)
os.makedirs(OUT, exist_ok=True)
path = os.path.join(OUT, "soft_async.json")
with open(path, "w") as f:
    json.dump({"env": env, "rows": rows_out}, f, indent=1)
print(f"wrote {path}; total {time.time() - T0:.1f} s")
