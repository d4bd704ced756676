"""How fast is the simulator? A fixed set of kernels, timed on numba's CUDA simulator (a benchmark, not a test).

``python -m tools.simbench`` prints the wall and CPU seconds of each kernel (best of ``--repeat`` launches) and
the totals:

* ``barriers``: 8 blocks x 1024 threads, 10 ``syncthreads()`` each (a shared-memory neighbour exchange);
* ``warp_shuffle``: the reduction ladder's ``reduce_warp_shuffle`` (shared tree, then ``shfl_down_sync``),
  16 blocks of 256 threads;
* ``transpose_tiled``: the memory chapter's ``transpose_tiled_kernel``, 128 x 128 floats;
* ``attention``: the solution of the attention chapter's ``attention`` exercise, read from the chapter,
  64 queries x 64 keys, d = 64.

Every result is checked against numpy before its time counts. The GPU-compile check (:mod:`lib.runtime.gpucompile`)
is switched off: it runs once per kernel in a helper process and is not the simulator's speed. The
debugger (:mod:`lib.runtime.simdebug`, where present) is on unless ``CUDA_BOOK_SIMDEBUG=0`` is set. ``--json
FILE`` also writes the figures. Run it from the root of a checkout; ``PYTHONPATH`` decides which ``lib``
(e.g. an older checkout's, to compare).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time

import numpy as np  # noqa: E402

import lib  # noqa: E402
from numba import cuda, float32  # noqa: E402

BARRIER_BLOCKS, BARRIER_THREADS, BARRIERS = 8, 1024, 10


@cuda.jit
def barrier_exchange_kernel(x, out):
    """Each thread adds its right neighbour's value, ten times, with a barrier around every exchange.

    Memory: one float per thread in and out; BARRIER_THREADS floats of shared memory.
    Launch: 1-D, BARRIER_THREADS threads per block, one block per BARRIER_THREADS elements.
    """
    buf = cuda.shared.array(BARRIER_THREADS, float32)
    t = cuda.threadIdx.x
    value = x[cuda.grid(1)]
    for _ in range(BARRIERS // 2):
        buf[t] = value
        cuda.syncthreads()
        value += buf[(t + 1) % BARRIER_THREADS]
        cuda.syncthreads()
    out[cuda.grid(1)] = value


def _barrier_expected(x):
    v = x.reshape(BARRIER_BLOCKS, BARRIER_THREADS).astype(np.float32).copy()
    for _ in range(BARRIERS // 2):
        v = v + np.roll(v, -1, axis=1)
    return v.ravel()


def _attention_solution():
    """The `causal_attention` exercise's solution cell, executed in a namespace of its own (its grade call is
    a no-op here)."""
    from tools import notebooks

    nb = notebooks.read(lib.ROOT / "chapters" / "attention.md")
    cells = nb.cells
    start = next(i for i, c in enumerate(cells)
                 if c.cell_type == "markdown" and re.search(r"^### Exercise: causal attention$", c.source, re.M))
    cell = next(c for c in cells[start:] if c.cell_type == "code" and "solution" in c.metadata.get("tags", []))
    namespace = {"__name__": "attention_solution", "grade": lambda *args, **kwargs: None}
    exec(compile(cell.source, "chapters/attention.md (solution of the causal attention exercise)", "exec"),
         namespace)
    return namespace["causal_attention"]


def cases():
    """(name, run, check) for every kernel of the set: run() launches it once, check() asserts its result."""
    from kernels import memory, reduction

    rng = np.random.default_rng(0)
    out = []

    x = rng.integers(-8, 8, BARRIER_BLOCKS * BARRIER_THREADS).astype(np.float32)
    y = np.zeros_like(x)
    out.append(("barriers", lambda: barrier_exchange_kernel[BARRIER_BLOCKS, BARRIER_THREADS](x, y),
                lambda: np.testing.assert_array_equal(y, _barrier_expected(x))))

    blocks = 16
    r = rng.integers(-8, 8, blocks * 2 * reduction.BLOCK).astype(np.float32)
    partial = np.zeros(blocks, np.float32)
    out.append(("warp_shuffle", lambda: reduction.reduce_warp_shuffle[blocks, reduction.BLOCK](r, partial),
                lambda: np.testing.assert_array_equal(partial, r.reshape(blocks, -1).sum(axis=1))))

    a = rng.standard_normal((128, 128)).astype(np.float32)
    at = np.zeros_like(a)
    grid = (math.ceil(a.shape[1] / memory.TILE), math.ceil(a.shape[0] / memory.TILE))
    out.append(("transpose_tiled",
                lambda: memory.transpose_tiled_kernel[grid, (memory.TILE, memory.BLOCK_ROWS)](a, at),
                lambda: np.testing.assert_array_equal(at, a.T)))

    attention = _attention_solution()
    q, k, v = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(3))
    o = np.zeros_like(q)
    s = q.astype(np.float64) @ k.T.astype(np.float64) / math.sqrt(64)
    s[np.triu_indices(64, 1)] = -np.inf  # causal: query i sees keys j <= i
    p = np.exp(s - s.max(axis=1, keepdims=True))
    expected = (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)
    out.append(("attention", lambda: attention(q, k, v, o),
                lambda: np.testing.assert_allclose(o, expected, rtol=1e-4, atol=1e-5)))
    return out


def measure(repeat: int = 1) -> dict[str, tuple[float, float]]:
    """Per kernel, the best (wall seconds, CPU seconds of this process) of `repeat` launches, each result
    checked first. CPU seconds count every thread of the process (numba's own simulator runs one per CUDA
    thread) and are the steadier figure on a machine that others share."""
    seconds = {}
    for name, run, check in cases():
        best = (math.inf, math.inf)
        for _ in range(repeat):
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            check()
            best = min(best, (wall, cpu))
        seconds[name] = best
    return seconds


def _debugger_state() -> str:
    try:
        from lib.runtime import simdebug
    except ImportError:
        return "absent"
    return "on" if simdebug.installed() else "off"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="launches per kernel; the best one counts")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if not lib.SIMULATOR:
        print("tools.simbench times the simulator: run it where `import lib` chooses the simulator")
        return 2
    try:
        from lib.runtime import gpucompile
    except ImportError:  # an older checkout without the check
        pass
    else:
        gpucompile.uninstall()
    seconds = measure(args.repeat)
    debugger = _debugger_state()
    print(f"simulator benchmark ({lib.__file__}; debugger {debugger})")
    print(f"  {'kernel':<16} {'wall s':>8} {'CPU s':>8}")
    for name, (wall, cpu) in seconds.items():
        print(f"  {name:<16} {wall:8.3f} {cpu:8.3f}")
    total = tuple(sum(column) for column in zip(*seconds.values()))
    print(f"  {'total':<16} {total[0]:8.3f} {total[1]:8.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seconds": seconds, "total": total, "debugger": debugger, "lib": lib.__file__,
                       "load_average": os.getloadavg()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
