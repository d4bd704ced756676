"""Kernels of the introduction: a copy (the bandwidth ceiling every later chapter is measured against) and
vector addition (the set-up chapter's exercise).

Where the rest lives: chapters/intro.md (the page); lib/grading/variants/intro.py (its exercises' known-wrong
variants); data/results/intro.* (recorded on the H200). Record it with ``python -m tools.record intro`` on a
GPU; on the simulator the same kernels run through the page's checks and the tests.
"""
import numpy as np
from numba import cuda

from lib.measure.bench import Baseline, Ladder, Rung, torch_copy
from lib.runtime.quiet_launches import quiet_kernels
from lib.runtime.validate import require

CHAPTER = "intro"
THREADS = 256  # threads per block: a multiple of the 32-thread warp; 256 keeps 8 blocks resident per SM


@cuda.jit
def copy_kernel(src, dst):
    """dst[i] = src[i], one element per thread.

    Memory: each warp reads 32 consecutive floats (128 bytes, four 32-byte sectors) and writes 32; every
    byte is moved once, so bytes = 8·n (read + write) — the floor for any kernel that reads n floats and
    writes n floats.
    Launch: 1-D, THREADS per block, ceil(n / THREADS) blocks; threads past the end do nothing.
    """
    i = cuda.grid(1)
    if i < src.size:
        dst[i] = src[i]


@cuda.jit
def copy_grid_stride_kernel(src, dst):
    """dst[i] = src[i], each thread striding over the array by the size of the whole grid.

    Memory: the same 8·n bytes as copy_kernel, with the same coalescing (in each pass a warp covers 32
    consecutive floats); but a grid of one wave of resident blocks loops instead of launching 2^20 short
    blocks, so no time goes to starting and retiring blocks.
    Launch: 1-D, THREADS per block, resident_blocks() blocks (one full wave on the current GPU).
    """
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, src.size, stride):
        dst[i] = src[i]


@cuda.jit
def vector_add_kernel(a, b, out):
    """out[i] = a[i] + b[i], one element per thread.

    Memory: two coalesced 4-byte reads and one 4-byte write per element: bytes = 12·n for one FLOP per
    element — 1/12 FLOP per byte, far below any GPU's ridge point, so bandwidth decides its speed.
    Launch: 1-D, THREADS per block, ceil(n / THREADS) blocks; the `i < n` guard covers the ragged end.
    """
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def blocks_for(n: int, threads: int = THREADS) -> int:
    """Blocks needed to cover n elements: rounded up, so a ragged tail still gets threads."""
    return (n + threads - 1) // threads


def resident_blocks(threads: int = THREADS) -> int:
    """Blocks of `threads` that fit on the GPU at once (2048 threads per SM on recent GPUs); 4 on the
    simulator, which has no SMs."""
    device = cuda.get_current_device()
    sms = getattr(device, "MULTIPROCESSOR_COUNT", None)
    if sms is None:
        return 4
    return sms * (device.MAX_THREADS_PER_MULTIPROCESSOR // threads)


def copy_grid_stride(src, dst):
    """Launch copy_grid_stride_kernel with one wave of blocks."""
    require(src, "src", ndim=1, where="copy_grid_stride")
    require(dst, "dst", shape=src.shape, where="copy_grid_stride")
    copy_grid_stride_kernel[min(resident_blocks(), blocks_for(src.size)), THREADS](src, dst)


def copy(src, dst):
    """Launch copy_kernel over float32 arrays of equal size."""
    require(src, "src", ndim=1, where="copy")
    require(dst, "dst", shape=src.shape, where="copy")
    copy_kernel[blocks_for(src.size), THREADS](src, dst)


def vector_add(a, b, out):
    """out = a + b for 1-D float32 arrays (the solution of the set-up chapter's exercise)."""
    require(a, "a", ndim=1, where="vector_add")
    require(b, "b", shape=a.shape, where="vector_add")
    require(out, "out", shape=a.shape, where="vector_add")
    if a.size:
        vector_add_kernel[blocks_for(a.size), THREADS](a, b, out)


def _torch_add(a, b, out):
    import torch
    torch.add(a, b, out=out)


N = 1 << 28  # 2^28 float32 = 1 GiB per array, ~18× the H200's L2: every byte comes from HBM

LADDERS = [
    Ladder(
        chapter="intro", topic="copy",
        description="device-to-device copy of n float32: read n, write n",
        make_inputs=lambda n, rng: (rng.standard_normal(n, dtype=np.float32),),
        out_shape=lambda x: x.shape, reference=lambda x: x.astype(np.float64),
        bytes=lambda n: 8 * n, flops=None, unit="GB/s", sizes=[N], sim_sizes=[4099],
        rungs=[Rung("copy_kernel", copy, "one float per thread"),
               Rung("copy_grid_stride_kernel", copy_grid_stride, "one wave of blocks, grid-stride loop")],
        baselines=[Baseline("torch.copy", torch_copy, "Tensor.copy_ (device to device)")],
    ),
    Ladder(
        chapter="intro", topic="vector_add",
        description="out = a + b over n float32: read 2n, write n",
        make_inputs=lambda n, rng: (rng.standard_normal(n, dtype=np.float32),
                                    rng.standard_normal(n, dtype=np.float32)),
        out_shape=lambda a, b: a.shape, reference=lambda a, b: a.astype(np.float64) + b,
        bytes=lambda n: 12 * n, flops=lambda n: n, unit="GB/s", sizes=[N], sim_sizes=[4099],
        rungs=[Rung("vector_add_kernel", vector_add, "one element per thread")],
        baselines=[Baseline("torch.add", _torch_add, "torch.add(a, b, out=out)")],
    ),
]


# --- what a launch costs, and what the timer measures ---------------------------------------------------
@cuda.jit
def empty_kernel(x):
    """Does nothing: launching it costs what any launch costs, and no more.

    Memory: none. Launch: any shape.
    """
    pass


def launch_costs(n: int = N, reps: int = 200) -> list[dict]:
    """For an empty launch, the book's two copy launchers and torch's copy at n floats: the host's time to
    enqueue one call (median, µs, the GPU idle before each), and the median GPU time of one call measured
    by a plain pair of CUDA events and by lib.measure.timing's held stream. Each copy is checked first."""
    import time

    import torch

    from lib.measure.timing import time_cuda

    rng = np.random.default_rng(0)
    x = rng.standard_normal(n, dtype=np.float32)
    d_x, d_y = cuda.to_device(x), cuda.device_array(n, dtype=np.float32)
    t_x, t_y = torch.as_tensor(d_x, device="cuda"), torch.as_tensor(d_y, device="cuda")
    calls = [("empty_kernel[1, 32](x)", lambda: empty_kernel[1, 32](d_x), None),
             ("copy(x, y): copy_kernel", lambda: copy(d_x, d_y), lambda: d_y.copy_to_host()),
             ("copy_grid_stride(x, y)", lambda: copy_grid_stride(d_x, d_y), lambda: d_y.copy_to_host()),
             ("torch: y.copy_(x)", lambda: t_y.copy_(t_x), lambda: t_y.cpu().numpy())]
    rows = []
    for name, call, result in calls:
        if result is not None:
            d_y.copy_to_device(np.full(n, np.nan, dtype=np.float32))
            call()
            cuda.synchronize()
            if not np.array_equal(result(), x):
                raise AssertionError(f"launch_costs: {name} did not copy x exactly; nothing timed")
        for _ in range(3):
            call()
        cuda.synchronize()
        host = []
        for _ in range(reps):
            t0 = time.perf_counter()
            call()
            host.append((time.perf_counter() - t0) * 1e6)
            cuda.synchronize()
        plain = time_cuda(call, hold=False, reps=reps)
        held = time_cuda(call, reps=reps)
        rows.append({"call": name, "n": n if result is not None else 0, "host_us": float(np.median(host)),
                     "event_pair_us": plain.median_ms * 1e3, "held_us": held.median_ms * 1e3,
                     "held": held.timer == "held", "reps": reps})
    return rows


def record_extra(folder):
    """Write intro.launch.csv: launch_costs() on this GPU, with the device, versions and date."""
    from pathlib import Path

    import pandas as pd

    from lib.measure.results import environment

    env = environment()
    path = Path(folder) / f"{CHAPTER}.launch.csv"
    pd.DataFrame([{**row, **env} for row in launch_costs()]).to_csv(path, index=False, float_format="%.6g")
    return [path]


# The book's own small launches (demos, last passes, one-thread set-ups) are deliberate: no low-occupancy
# warning for them (lib/runtime/quiet_launches.py); a reader's kernels still get it.
quiet_kernels(globals())
