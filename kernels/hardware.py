"""Kernels of the GPU chapter: small kernels whose machine code shows one hardware feature each (a warp
shuffle, a 128-bit load), a pair that shows what warp divergence costs, and `record_extra`, which records on
the GPU the compiled facts of the book's kernels (registers, shared and local memory, resident blocks next to
lib.hw.occupancy's prediction) and the PTX and SASS listings the chapter reads.

Where the rest lives: chapters/hardware.md (the page); lib/grading/variants/hardware.py (its exercises'
known-wrong variants); tests/test_hardware.py (tests); data/results/hardware.* (recorded on the H200). Record
it with ``python -m tools.record hardware`` on a GPU; on the simulator the same kernels run through the page's
checks and the tests.
"""
from __future__ import annotations

import contextlib
import importlib
import pkgutil
from pathlib import Path

import numpy as np
from numba import cuda, float32

import lib
from lib.runtime.quiet_launches import quiet_kernels
from lib.runtime.validate import require
from lib.runtime.vector import data_address, load_float4, store_float4

CHAPTER = "hardware"
THREADS = 256                 # threads per block: 8 warps
WARP = 32                     # threads per warp on every NVIDIA GPU so far
FULL_MASK = 0xFFFFFFFF        # every lane of the warp takes part in a shuffle
DIVERGENCE_STEPS = 256        # dependent FMAs per branch: long enough that the branches dominate the time
PATH_A = (np.float32(0.999), np.float32(0.001))   # y <- a·y + b: a contraction, so y stays finite
PATH_B = (np.float32(0.998), np.float32(-0.002))


# --- a warp shuffle ---------------------------------------------------------------------------------------
@cuda.jit
def warp_sum_kernel(x, out):
    """out[w] = x[32·w] + ... + x[32·w + 31]: each warp sums its 32 elements in registers with shuffles.

    Memory: each thread reads one coalesced float and each warp writes one: bytes = 4·n + 4·n/32. The
    five shfl.down steps move values between the registers of the warp's lanes with no memory at all.
    Launch: 1-D, THREADS per block (a multiple of 32), ceil(n / THREADS) blocks; out has ceil(n / 32)
    elements. Threads past the end contribute 0 and still take part in every shuffle: a full-mask shuffle
    needs all 32 lanes.
    """
    i = cuda.grid(1)
    value = x[i] if i < x.size else float32(0.0)
    offset = WARP // 2
    while offset > 0:
        value += cuda.shfl_down_sync(FULL_MASK, value, offset)
        offset //= 2
    if i % WARP == 0 and i < x.size:
        out[i // WARP] = value


def warp_sum(x, out):
    """out[w] = sum of x[32w : 32w + 32] (the last group may be shorter)."""
    require(x, "x", ndim=1, where="warp_sum")
    require(out, "out", shape=((x.size + WARP - 1) // WARP,), where="warp_sum")
    if x.size:
        warp_sum_kernel[(x.size + THREADS - 1) // THREADS, THREADS](x, out)


# --- a 128-bit load (lib.runtime.vector: one LDG.E.128 on a GPU, four reads on the simulator) -----------
@cuda.jit
def vector_add_float4_kernel(a, b, out):
    """out = a + b with each thread adding four neighbouring elements through 16-byte loads and stores.

    Memory: the same 12·n bytes as vector_add_kernel, each warp still reading contiguous memory (512 bytes
    per array per warp instead of 128), but with a quarter of the load and store instructions: one
    LDG.E.128 per array instead of four LDG.E. Thread n // 4 adds the last n % 4 elements one by one.
    Launch: 1-D, THREADS per block, ceil((n // 4 + 1) / THREADS) blocks; a, b and out start on a 16-byte
    boundary (the launcher checks).
    """
    i = cuda.grid(1)
    quads = out.size // 4
    if i < quads:
        a0, a1, a2, a3 = load_float4(a, i)
        b0, b1, b2, b3 = load_float4(b, i)
        store_float4(out, i, a0 + b0, a1 + b1, a2 + b2, a3 + b3)
    elif i == quads:
        for j in range(4 * quads, out.size):
            out[j] = a[j] + b[j]


def vector_add_float4(a, b, out):
    """out = a + b for 1-D float32 arrays that start on 16-byte boundaries (every fresh device array does)."""
    require(a, "a", ndim=1, where="vector_add_float4")
    require(b, "b", shape=a.shape, where="vector_add_float4")
    require(out, "out", shape=a.shape, where="vector_add_float4")
    for name, array in (("a", a), ("b", b), ("out", out)):
        if array.size and data_address(array) % 16:
            raise ValueError(f"vector_add_float4: `{name}` does not start on a 16-byte boundary (a slice "
                             "that starts mid-way?), so it cannot be read 16 bytes at a time")
    if a.size:
        vector_add_float4_kernel[(a.size // 4 + 1 + THREADS - 1) // THREADS, THREADS](a, b, out)


# --- warp divergence ----------------------------------------------------------------------------------
@cuda.jit(device=True)
def _iterate(y, scale, shift):
    for _ in range(DIVERGENCE_STEPS):
        y = y * scale + shift
    return y


@cuda.jit
def branch_by_lane_kernel(x, out, masks):
    """Even elements take path A, odd elements path B: both paths inside every warp (divergent).

    Memory: one coalesced read and one write per element; the time goes to the 2·DIVERGENCE_STEPS
    dependent FMAs each warp issues, because a warp runs path A with its odd lanes masked off, then path B
    with its even lanes masked off. masks[i] records cuda.activemask() inside the branch taken.
    Launch: 1-D, THREADS per block, ceil(n / THREADS) blocks.
    """
    i = cuda.grid(1)
    if i < x.size:
        if i % 2 == 0:
            masks[i] = cuda.activemask()
            out[i] = _iterate(x[i], PATH_A[0], PATH_A[1])
        else:
            masks[i] = cuda.activemask()
            out[i] = _iterate(x[i], PATH_B[0], PATH_B[1])


@cuda.jit
def branch_by_warp_kernel(x, out, masks):
    """Even warps take path A, odd warps path B: the same work as branch_by_lane_kernel, but every warp
    takes one path as a whole (no divergence), so it issues DIVERGENCE_STEPS FMAs, not twice as many.

    Memory: as branch_by_lane_kernel.
    Launch: 1-D, THREADS per block (a multiple of 32), ceil(n / THREADS) blocks.
    """
    i = cuda.grid(1)
    if i < x.size:
        if (i // WARP) % 2 == 0:
            masks[i] = cuda.activemask()
            out[i] = _iterate(x[i], PATH_A[0], PATH_A[1])
        else:
            masks[i] = cuda.activemask()
            out[i] = _iterate(x[i], PATH_B[0], PATH_B[1])


def branch_reference(x, path_b):
    """float64 result of the divergence kernels for inputs x; path_b[i] says element i takes path B."""
    y = np.asarray(x, dtype=np.float64).copy()
    scale = np.where(path_b, float(PATH_B[0]), float(PATH_A[0]))
    shift = np.where(path_b, float(PATH_B[1]), float(PATH_A[1]))
    for _ in range(DIVERGENCE_STEPS):
        y = y * scale + shift
    return y


def branch_matches(actual, x, path_b) -> bool:
    """Whether a divergence kernel's output is right: DIVERGENCE_STEPS float32 roundings of values near 1 leave
    errors of a few 1e-6, so an absolute tolerance of 1e-4 separates them from a wrong path (≥ 1e-3 away)."""
    return bool(np.allclose(actual, branch_reference(x, path_b), rtol=1e-4, atol=1e-4))


def run_branches(kernel, x, out, masks):
    """Launch one of the two divergence kernels over x (float32), writing out (float32) and masks (uint32)."""
    require(x, "x", ndim=1, where="run_branches")
    require(out, "out", shape=x.shape, where="run_branches")
    require(masks, "masks", dtype=np.uint32, shape=x.shape, where="run_branches")
    kernel[(x.size + THREADS - 1) // THREADS, THREADS](x, out, masks)


BRANCH_KERNELS = {"branch_by_lane_kernel": (branch_by_lane_kernel, lambda i: i % 2 == 1),
                  "branch_by_warp_kernel": (branch_by_warp_kernel, lambda i: (i // WARP) % 2 == 1)}


# --- recording on the GPU -----------------------------------------------------------------------------
PTX_SASS_KERNELS = ["vector_add_kernel", "warp_sum_kernel", "vector_add_float4_kernel", "branch_by_lane_kernel"]


@contextlib.contextmanager
def launch_log():
    """Record every kernel launch in the block: (compiled kernel, threads per block, dynamic shared bytes)."""
    from numba.cuda.dispatcher import _Kernel

    seen = []
    original = _Kernel.launch

    def logged(self, args, griddim, blockdim, stream=0, sharedmem=0):
        seen.append((self, int(np.prod(blockdim)), int(sharedmem)))
        return original(self, args, griddim, blockdim, stream, sharedmem)

    _Kernel.launch = logged
    try:
        yield seen
    finally:
        _Kernel.launch = original


def _launch_every_ladder():
    """Run every rung of every kernels/ module once at its small (simulator) size, so each kernel is compiled
    and launched as the book launches it. Returns the modules whose ladders failed to run, with the error."""
    import kernels

    problems = []
    rng = np.random.default_rng(0)
    for info in sorted(pkgutil.iter_modules(kernels.__path__), key=lambda m: m.name):
        try:
            module = importlib.import_module(f"kernels.{info.name}")
        except Exception as err:  # a chapter still being written must not stop the others' records
            problems.append(f"kernels.{info.name}: import failed: {type(err).__name__}: {err}")
            continue
        for ladder in getattr(module, "LADDERS", []):
            for size in ladder.sim_sizes[:1]:
                host = ladder.make_inputs(size, rng)
                inputs = [cuda.to_device(x) for x in host]
                out = cuda.device_array(ladder.out_shape(*host), dtype=np.float32)
                for rung in ladder.rungs:
                    try:
                        rung.run(*inputs, out)
                        cuda.synchronize()
                    except Exception as err:
                        problems.append(f"{info.name}/{rung.name}: {type(err).__name__}: {err}")
    return problems


def _stamp(env: dict, comment: str) -> str:
    return (f"{comment} recorded on {env['device']} by kernels/hardware.py record_extra, {env['date']}; "
            f"numba-cuda {env['numba_cuda']}\n")


def record_extra(folder: Path) -> list[Path]:
    """On the GPU: the kernel stats table (hardware.kernel_stats.csv), PTX and SASS of four kernels
    (hardware.<kernel>.ptx / .sass) and the divergence timings (hardware.divergence.csv)."""
    import pandas as pd

    from lib.hw.occupancy import limits_for, occupancy
    from lib.measure.results import environment
    from lib.hw.specs import spec_for
    from lib.measure.timing import time_cuda

    env = environment()
    folder = Path(folder)
    written = []
    rng = np.random.default_rng(1)
    n = 4099
    with launch_log() as launches:
        problems = _launch_every_ladder()
        x = rng.standard_normal(n, dtype=np.float32)
        y = rng.standard_normal(n, dtype=np.float32)
        d_out = cuda.device_array(n, dtype=np.float32)
        vector_add_float4(cuda.to_device(x), cuda.to_device(y), d_out)
        assert np.allclose(d_out.copy_to_host(), x + y, rtol=1e-6), "vector_add_float4 is wrong on the GPU"
        sums = cuda.device_array((n + WARP - 1) // WARP, dtype=np.float32)
        warp_sum(cuda.to_device(x), sums)
        padded = np.concatenate([x, np.zeros(-n % WARP, np.float32)]).reshape(-1, WARP).astype(np.float64)
        assert np.allclose(sums.copy_to_host(), padded.sum(axis=1), rtol=1e-5, atol=1e-5), "warp_sum is wrong"
        masks = cuda.device_array(n, dtype=np.uint32)
        for kernel, _ in BRANCH_KERNELS.values():
            run_branches(kernel, cuda.to_device(x), d_out, masks)
        cuda.synchronize()

    # Kernel stats beside the calculator's prediction and the driver's own occupancy figure.
    ctx = cuda.current_context()
    spec = spec_for(env["device"])
    rows, listed = [], {}
    for kernel, threads, dynamic in launches:
        key = (kernel.entry_name, threads, dynamic)
        if key in listed:
            continue
        listed[key] = kernel
        regs, static = kernel.regs_per_thread, kernel.shared_mem_per_block
        driver = ctx.get_active_blocks_per_multiprocessor(kernel._codelibrary.get_cufunc(), threads, dynamic)
        driver = int(driver[-1] if isinstance(driver, tuple) else driver)
        predicted = occupancy(limits_for(spec), threads, regs, static + dynamic) if spec else None
        rows.append({"kernel": kernel.py_func.__name__, "module": kernel.py_func.__module__,
                     "threads_per_block": threads, "regs_per_thread": regs, "static_shared_bytes": static,
                     "dynamic_shared_bytes": dynamic, "local_bytes_per_thread": kernel.local_mem_per_thread,
                     "max_threads_per_block": kernel.max_threads_per_block, "driver_blocks_per_sm": driver,
                     "predicted_blocks_per_sm": predicted["blocks"] if predicted else "",
                     "predicted_limit": " and ".join(predicted["limiting"]) if predicted else "",
                     "agree": (predicted["blocks"] == driver) if predicted else "", **env})
    stats = folder / f"{CHAPTER}.kernel_stats.csv"
    pd.DataFrame(rows).sort_values(["module", "kernel", "threads_per_block"]).to_csv(stats, index=False)
    written.append(stats)
    if problems:
        print("kernel stats: not every ladder could be launched:\n  " + "\n  ".join(problems))

    # PTX and SASS listings, each stamped with where and when it was made.
    major, minor = cuda.get_current_device().compute_capability
    by_name = {k.py_func.__name__: k for k in listed.values()}
    for name in PTX_SASS_KERNELS:
        kernel = by_name[name]
        for suffix, text in (("ptx", kernel.inspect_asm((major, minor))), ("sass", kernel.inspect_sass())):
            path = folder / f"{CHAPTER}.{name}.{suffix}"
            path.write_text(_stamp(env, "//") + text)
            written.append(path)

    # Divergence: check both kernels, then time them.
    n_big = 1 << 22
    x = rng.uniform(-1, 1, n_big).astype(np.float32)
    d_x, d_out, d_masks = cuda.to_device(x), cuda.device_array(n_big, np.float32), cuda.device_array(n_big, np.uint32)
    div_rows = []
    for name, (kernel, path_b) in BRANCH_KERNELS.items():
        run_branches(kernel, d_x, d_out, d_masks)
        if not branch_matches(d_out.copy_to_host(), x, path_b(np.arange(n_big))):
            raise AssertionError(f"{name} computed wrong values on the GPU: not timed")
        timing = time_cuda(lambda: run_branches(kernel, d_x, d_out, d_masks), reps=50)
        div_rows.append({"kernel": name, "n": n_big, "steps": DIVERGENCE_STEPS, "median_ms": timing.median_ms,
                         "q1_ms": timing.q1_ms, "q3_ms": timing.q3_ms, "reps": timing.reps, **env})
    divergence = folder / f"{CHAPTER}.divergence.csv"
    pd.DataFrame(div_rows).to_csv(divergence, index=False, float_format="%.6g")
    written.append(divergence)
    return written


# The book's own small launches (demos, last passes, one-thread set-ups) are deliberate: no low-occupancy
# warning for them (lib/runtime/quiet_launches.py); a reader's kernels still get it.
quiet_kernels(globals())
