"""How fast is the simulator? A fixed set of kernels, timed on numba's CUDA simulator (a benchmark, not a test).

``python -m tools.simbench`` prints the wall and CPU seconds of each kernel (best of ``--repeat`` launches),
elements per second where a kernel has one element per input value, and the totals:

* ``grid_stride_add``: ``out[i] = x[i] + y[i]`` in a grid-stride loop, launched ``[1, 32]`` over
  GRID_STRIDE_N elements (a correct one-warp answer to the vector_add exercise: the simulator's global
  loads and stores, nothing else);
* ``grid_stride_add_64_blocks``: the same kernel launched ``[64, 32]`` (the debugger's checks between blocks);
* ``barriers``: 8 blocks x 1024 threads, 10 ``syncthreads()`` each (a shared-memory neighbour exchange);
* ``warp_shuffle``: the reduction ladder's ``reduce_warp_shuffle`` (shared tree, then ``shfl_down_sync``),
  16 blocks of 256 threads;
* ``transpose_tiled``: the memory chapter's ``transpose_tiled_kernel``, 128 x 128 floats;
* ``attention``: the solution of the attention chapter's ``attention`` exercise, read from the chapter,
  64 queries x 64 keys, d = 64;
* ``graded_vector_add``: ``grid_stride_add`` launched ``[1, 32]`` as the grader runs a student's
  ``vector_add`` (:func:`lib.grading.grader.execute_case`: launch records, quiet launches, a seeded
  schedule, two device copies in and one out) over GRID_STRIDE_N elements, judged by the grader.

Every result is checked against numpy before its time counts. The GPU-compile check (:mod:`lib.runtime.gpucompile`)
is switched off: it runs once per kernel in a helper process and is not the simulator's speed. The
debugger (:mod:`lib.runtime.simdebug`) is on unless ``CUDA_BOOK_SIMDEBUG=0`` is set.

``--plain`` also times, in the same run, the kernels numba's own simulator can run (the first three: it has
no warp intrinsics) on numba's plain simulator, in a subprocess that never imports ``lib``, and prints the
two side by side. ``--json FILE`` also writes the figures. Run it from the root of a checkout; ``PYTHONPATH``
decides which ``lib`` (e.g. an older checkout's, to compare).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np

GRID_STRIDE_N = 200_000
BARRIER_BLOCKS, BARRIER_THREADS, BARRIERS = 8, 1024, 10

# The kernels both simulators run, as source: compiled by numba's plain simulator in the subprocess of
# --plain (which must not import lib) and by the book's here, from the same text.
PLAIN_SOURCE = f'''
from numba import cuda, float32

BARRIER_THREADS, BARRIERS = {BARRIER_THREADS}, {BARRIERS}


@cuda.jit
def grid_stride_add(x, y, out):
    """out[i] = x[i] + y[i], each thread striding by the grid's size.

    Memory: two coalesced float loads and one store per element.
    Launch: 1-D, any grid.
    """
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        out[i] = x[i] + y[i]


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
'''
PLAIN_CASES = ("grid_stride_add", "grid_stride_add_64_blocks", "barriers")


def _plain_kernels() -> dict:
    namespace = {"__name__": "tools.simbench.kernels"}
    filename = "<tools.simbench kernels>"
    import linecache

    linecache.cache[filename] = (len(PLAIN_SOURCE), None, PLAIN_SOURCE.splitlines(True), filename)
    exec(compile(PLAIN_SOURCE, filename, "exec"), namespace)
    return namespace


def _barrier_expected(x):
    v = x.reshape(BARRIER_BLOCKS, BARRIER_THREADS).astype(np.float32).copy()
    for _ in range(BARRIERS // 2):
        v = v + np.roll(v, -1, axis=1)
    return v.ravel()


def _plain_cases(kernels: dict) -> list:
    """(name, run, check, elements) of the kernels numba's own simulator runs as well."""
    rng = np.random.default_rng(0)
    out = []
    add = kernels["grid_stride_add"]
    x = rng.standard_normal(GRID_STRIDE_N).astype(np.float32)
    y = rng.standard_normal(GRID_STRIDE_N).astype(np.float32)
    for name, blocks in (("grid_stride_add", 1), ("grid_stride_add_64_blocks", 64)):
        z = np.zeros_like(x)
        out.append((name, lambda blocks=blocks, z=z: add[blocks, 32](x, y, z),
                    lambda z=z: np.testing.assert_array_equal(z, x + y), GRID_STRIDE_N))
    b = rng.integers(-8, 8, BARRIER_BLOCKS * BARRIER_THREADS).astype(np.float32)
    c = np.zeros_like(b)
    out.append(("barriers", lambda: kernels["barrier_exchange_kernel"][BARRIER_BLOCKS, BARRIER_THREADS](b, c),
                lambda: np.testing.assert_array_equal(c, _barrier_expected(b)), b.size))
    return out


def _attention_solution():
    """The `causal_attention` exercise's solution cell, executed in a namespace of its own (its grade call is
    a no-op here)."""
    import lib
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
    """(name, run, check, elements or None) for every kernel of the set: run() launches it once, check()
    asserts its result."""
    import lib  # noqa: F401  (before numba.cuda: the simulator and the book's patches)
    from kernels import memory, reduction

    out = _plain_cases(_plain_kernels())
    rng = np.random.default_rng(1)
    blocks = 16
    r = rng.integers(-8, 8, blocks * 2 * reduction.BLOCK).astype(np.float32)
    partial = np.zeros(blocks, np.float32)
    out.append(("warp_shuffle", lambda: reduction.reduce_warp_shuffle[blocks, reduction.BLOCK](r, partial),
                lambda: np.testing.assert_array_equal(partial, r.reshape(blocks, -1).sum(axis=1)), r.size))

    a = rng.standard_normal((128, 128)).astype(np.float32)
    at = np.zeros_like(a)
    grid = (math.ceil(a.shape[1] / memory.TILE), math.ceil(a.shape[0] / memory.TILE))
    out.append(("transpose_tiled",
                lambda: memory.transpose_tiled_kernel[grid, (memory.TILE, memory.BLOCK_ROWS)](a, at),
                lambda: np.testing.assert_array_equal(at, a.T), a.size))

    attention = _attention_solution()
    q, k, v = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(3))
    o = np.zeros_like(q)
    s = q.astype(np.float64) @ k.T.astype(np.float64) / math.sqrt(64)
    s[np.triu_indices(64, 1)] = -np.inf  # causal: query i sees keys j <= i
    p = np.exp(s - s.max(axis=1, keepdims=True))
    expected = (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)
    out.append(("attention", lambda: attention(q, k, v, o),
                lambda: np.testing.assert_allclose(o, expected, rtol=1e-4, atol=1e-5), None))
    out.append(_graded_case(_plain_kernels()["grid_stride_add"]))
    return out


def _graded_case(add):
    """(name, run, check, elements): the grader's path for a one-warp grid-stride vector_add."""
    from lib.grading.grader import cases as grading

    def vector_add(a, b, out):
        add[1, 32](a, b, out)

    case = grading.prepare_case("vector_add", (GRID_STRIDE_N,), np.random.default_rng(2))
    done = []

    def check():
        result = grading.judge(case, done.pop())
        assert result.passed, result.message

    return ("graded_vector_add", lambda: done.append(grading.execute_case(vector_add, case.public(), schedule=[0, 0])),
            check, GRID_STRIDE_N)


def measure(selected, repeat: int = 1) -> dict[str, dict]:
    """Per kernel, the best wall and CPU seconds of `repeat` launches, each result checked first (a time
    counts only for a launch whose result was right). CPU seconds count every thread of the process (numba's
    own simulator runs one per CUDA thread) and are the steadier figure on a machine that others share."""
    figures = {}
    for name, run, check, elements in selected:
        best_wall = best_cpu = math.inf
        for _ in range(repeat):
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            check()
            best_wall, best_cpu = min(best_wall, wall), min(best_cpu, cpu)
        figures[name] = {"wall_s": best_wall, "cpu_s": best_cpu, "elements": elements}
    return figures


def _plain_child(repeat: int) -> int:
    """In a process of its own: numba's simulator as shipped (no `import lib`), the PLAIN_CASES."""
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    figures = measure(_plain_cases(_plain_kernels()), repeat)
    print("SIMBENCH_PLAIN " + json.dumps(figures))
    return 0


def _run_plain(repeat: int) -> dict:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, "-m", "tools.simbench", "--plain-child", "--repeat", str(repeat)],
                          capture_output=True, text=True, env=env, cwd=os.getcwd(), timeout=3600)
    for line in proc.stdout.splitlines():
        if line.startswith("SIMBENCH_PLAIN "):
            return json.loads(line.split(" ", 1)[1])
    raise RuntimeError(f"numba's plain simulator did not report (exit {proc.returncode}):\n{proc.stderr[-2000:]}")


def _rate(f: dict) -> str:
    return f"{f['elements'] / f['cpu_s']:>12,.0f}" if f.get("elements") and f["cpu_s"] > 0 else f"{'':>12}"


def _debugger_state() -> str:
    from lib.runtime import simdebug

    return "on" if simdebug.installed() else "off"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="launches per kernel; the best one counts")
    parser.add_argument("--plain", action="store_true",
                        help="also time the kernels numba's plain simulator runs, in the same run")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--plain-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.plain_child:
        return _plain_child(args.repeat)
    plain = _run_plain(args.repeat) if args.plain else {}
    import lib

    if not lib.SIMULATOR:
        print("tools.simbench times the simulator: run it where `import lib` chooses the simulator")
        return 2
    from lib.runtime import gpucompile

    gpucompile.uninstall()
    figures = measure(cases(), args.repeat)
    debugger = _debugger_state()
    print(f"simulator benchmark ({lib.__file__}; debugger {debugger}; load average "
          f"{os.getloadavg()[0]:.1f})")
    head = f"  {'kernel':<26} {'wall s':>8} {'CPU s':>8} {'elements/CPU s':>14}"
    if plain:
        head += f"   | numba plain: {'wall s':>8} {'CPU s':>8} {'elements/CPU s':>14} {'CPU ratio':>9}"
    print(head)
    for name, f in figures.items():
        line = f"  {name:<26} {f['wall_s']:8.3f} {f['cpu_s']:8.3f} {_rate(f):>14}"
        if name in plain:
            p = plain[name]
            line += (f"   |              {p['wall_s']:8.3f} {p['cpu_s']:8.3f} {_rate(p):>14} "
                     f"{p['cpu_s'] / f['cpu_s']:8.1f}x")
        print(line)
    total = (sum(f["wall_s"] for f in figures.values()), sum(f["cpu_s"] for f in figures.values()))
    print(f"  {'total':<26} {total[0]:8.3f} {total[1]:8.3f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"book": figures, "plain": plain, "total": total, "debugger": debugger, "lib": lib.__file__,
                       "load_average": os.getloadavg()}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
