"""Kernels of the debugging chapter: the bugs students make, each next to its fix, and the recording of
what NVIDIA's compute-sanitizer says about them on a GPU.

* ``scan_one_buffer_racy``: Hillis–Steele in one shared buffer with one barrier per step (the read of a
  neighbour and the overwrite of one's own element are not separated): a shared-memory race.
* ``block_sum_unguarded_tail``: the threads past the end of the input store nothing, and the tree then
  adds those never-written shared elements: an uninitialised read.
* ``block_sum_out_of_bounds``: the same sum with no guard on the load: past the end of ``x``.
* ``sum_into_one``: every thread does ``out[0] += x[i]``: a global read-modify-write race (lost updates).
* ``bin_count_with_a_list``: a Python list inside a kernel: runs on the simulator, does not compile for
  a GPU.

On the simulator (``lib.runtime.simdebug``, ``lib.runtime.gpucompile``) each of these stops with an error naming the line;
:func:`record_extra` runs them under ``compute-sanitizer`` on a GPU and keeps its reports in data/results/.

Where the rest lives: chapters/debugging.md (the page); data/results/debugging.* (recorded on the H200).
Record it with ``python -m tools.record debugging`` on a GPU; on the simulator the same kernels run through
the page's checks and the tests.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from numba import cuda, float32

import lib
from lib.measure.bench import PAGE_WIDTH
from lib.runtime.quiet_launches import quiet_kernels

CHAPTER = "debugging"
THREADS = 256
N = 1000          # not a multiple of THREADS: the last block has a tail of threads with no element
BINS = 4


# --- a race in shared memory -----------------------------------------------------------------------
@cuda.jit
def scan_one_buffer_racy(x, out):
    """Inclusive scan of each block's THREADS elements by Hillis–Steele in ONE shared buffer — with a
    barrier missing: in a step, thread t reads temp[t - offset] while thread t - offset may already have
    overwritten it with this step's value.

    Memory: one coalesced float read and written per element; shared accesses consecutive words.
    Launch: 1-D, THREADS threads, ceil(n / THREADS) blocks.
    """
    temp = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * THREADS + t
    temp[t] = x[i] if i < x.size else float32(0)
    cuda.syncthreads()
    offset = 1
    while offset < THREADS:
        value = temp[t]
        if t >= offset:
            value += temp[t - offset]
        temp[t] = value               # BUG: other threads may still be reading temp[t] of this step
        cuda.syncthreads()
        offset *= 2
    if i < x.size:
        out[i] = temp[t]


@cuda.jit
def scan_one_buffer(x, out):
    """scan_one_buffer_racy with its second barrier: every read of a step lands before any write.

    Memory: as scan_one_buffer_racy.
    Launch: 1-D, THREADS threads, ceil(n / THREADS) blocks.
    """
    temp = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * THREADS + t
    temp[t] = x[i] if i < x.size else float32(0)
    cuda.syncthreads()
    offset = 1
    while offset < THREADS:
        value = temp[t]
        if t >= offset:
            value += temp[t - offset]
        cuda.syncthreads()            # the fix: all reads of this step are done
        temp[t] = value
        cuda.syncthreads()
        offset *= 2
    if i < x.size:
        out[i] = temp[t]


# --- an uninitialised tail ---------------------------------------------------------------------------
@cuda.jit
def block_sum_unguarded_tail(x, partial):
    """partial[b] = sum of block b's elements by a shared-memory tree — but the threads past the end of x
    store nothing, so the last block's tree adds shared elements nobody wrote.

    Memory: one coalesced float read per element, one float written per block.
    Launch: 1-D, THREADS threads, ceil(n / THREADS) blocks.
    """
    cache = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * THREADS + t
    if i < x.size:
        cache[t] = x[i]               # BUG: the tail's threads leave cache[t] as it was
    cuda.syncthreads()
    s = THREADS // 2
    while s > 0:
        if t < s:
            cache[t] += cache[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = cache[0]


@cuda.jit
def block_sum_out_of_bounds(x, partial):
    """The same tree, with the load not guarded at all: the tail's threads read past the end of x.

    Memory: as block_sum_unguarded_tail, plus reads outside x in the last block.
    Launch: 1-D, THREADS threads, ceil(n / THREADS) blocks.
    """
    cache = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * THREADS + t
    cache[t] = x[i]                   # BUG: i >= x.size in the last block
    cuda.syncthreads()
    s = THREADS // 2
    while s > 0:
        if t < s:
            cache[t] += cache[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = cache[0]


@cuda.jit
def block_sum(x, partial):
    """The fix of both: the tail stores the identity of +, so every element the tree reads was written.

    Memory: one coalesced float read per element, one float written per block.
    Launch: 1-D, THREADS threads, ceil(n / THREADS) blocks.
    """
    cache = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * THREADS + t
    cache[t] = x[i] if i < x.size else float32(0)
    cuda.syncthreads()
    s = THREADS // 2
    while s > 0:
        if t < s:
            cache[t] += cache[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = cache[0]


# --- a race in global memory -----------------------------------------------------------------------
@cuda.jit
def sum_into_one(x, out):
    """out[0] += every element, one thread per element — without an atomic, so updates are lost.

    Memory: one float read per element; every thread reads and writes out[0].
    Launch: 1-D, THREADS threads, ceil(n / THREADS) blocks; out[0] zero at launch.
    """
    i = cuda.grid(1)
    if i < x.size:
        out[0] += x[i]                # BUG: read, add, write back: another thread's update in between is lost


@cuda.jit
def sum_into_one_atomic(x, out):
    """The fix: the read-add-write of out[0] is one atomic operation.

    Memory: one float read per element, one atomic add per element on a single address (serialised: a
    demonstration, not a fast sum; see the reduction chapter).
    Launch: 1-D, THREADS threads, ceil(n / THREADS) blocks; out[0] zero at launch.
    """
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(out, 0, x[i])


# --- Python inside a kernel ------------------------------------------------------------------------
@cuda.jit
def bin_count_with_a_list(values, counts):
    """counts[b] = how many of this thread's BINS-strided values fall in bin b — kept in a Python list,
    which the simulator runs and numba cannot compile for a GPU (a kernel has no Python objects).

    Memory: reads values, writes BINS counts per thread.
    Launch: 1-D, any; counts has BINS elements per thread.
    """
    i = cuda.grid(1)
    tally = [0, 0, 0, 0]              # BUG: a Python list (BINS counts); use cuda.local.array(BINS, int64)
    for k in range(i, values.size, cuda.gridsize(1)):
        tally[values[k] % BINS] += 1
    for b in range(BINS):
        counts[i * BINS + b] = tally[b]


# --- the cases, as the chapter and the recording run them ---------------------------------------------
CASES = {
    # case: (the buggy kernel, its fix, the compute-sanitizer tool that looks for this kind of bug)
    "race": ("scan_one_buffer_racy", "scan_one_buffer", "racecheck"),
    "uninitialised": ("block_sum_unguarded_tail", "block_sum", "initcheck"),
    "out_of_bounds": ("block_sum_out_of_bounds", "block_sum", "memcheck"),
    "global_race": ("sum_into_one", "sum_into_one_atomic", "racecheck"),
    # a right kernel, launched on an accumulator that was never zeroed (cuda.device_array, not to_device)
    "unzeroed_output": ("sum_into_one_atomic", "sum_into_one_atomic", "initcheck"),
}


def inputs(seed: int = 0):
    """x (N floats, integers in 0..9 so every sum is exact in float32) on the device."""
    rng = np.random.default_rng(seed)
    return cuda.to_device(rng.integers(0, 10, N).astype(np.float32))


def launch(kernel_name: str, x=None, zeroed: bool = True):
    """Run one of this module's sum/scan kernels on x and return (its result on the host, the right one).
    zeroed=False: the output is a fresh cuda.device_array, never written before the launch."""
    x = inputs() if x is None else x
    host = x.copy_to_host()
    blocks = (x.size + THREADS - 1) // THREADS
    kernel = globals()[kernel_name]
    if kernel_name.startswith("scan_"):
        out = cuda.to_device(np.zeros(x.size, np.float32))
        expected = np.concatenate([np.cumsum(host[b:b + THREADS]) for b in range(0, x.size, THREADS)])
    elif kernel_name.startswith("block_sum"):
        out = cuda.to_device(np.zeros(blocks, np.float32))
        expected = np.array([host[b:b + THREADS].sum() for b in range(0, x.size, THREADS)], np.float32)
    else:
        out = cuda.to_device(np.zeros(1, np.float32)) if zeroed else cuda.device_array(1, np.float32)
        expected = np.array([host.sum()], np.float32)
    kernel[blocks, THREADS](x, out)
    cuda.synchronize()
    return out.copy_to_host(), expected


def compile_list_kernel() -> str:
    """What numba says when it compiles bin_count_with_a_list for a GPU (on a GPU: the launch's own error;
    on the simulator: lib.runtime.gpucompile's check)."""
    values = cuda.to_device(np.arange(64, dtype=np.int64))
    counts = cuda.to_device(np.zeros(64 * BINS, np.int64))
    try:
        bin_count_with_a_list[1, 64](values, counts)
    except Exception as exc:  # noqa: BLE001 - the point is to show the error
        return f"{type(exc).__name__}: {exc}"
    return "no error: the kernel compiled and ran"


def run_case(case: str) -> str:
    """Launch a case's buggy kernel; a line saying what came out (used under compute-sanitizer)."""
    if case == "gpu_compile":
        return compile_list_kernel()
    got, expected = launch(CASES[case][0], zeroed=case != "unzeroed_output")
    wrong = int(np.count_nonzero(got != expected))
    return f"{CASES[case][0]}: {wrong} of {got.size} results wrong (e.g. {got[-1]:g}, right: {expected[-1]:g})"


def simulate(case: str) -> str:
    """The simulator's report for a case's buggy kernel (the error's message), or what came out.

    Runs here on the simulator; in a GPU process, in a simulator subprocess (the debugger is simulator-only).
    """
    if lib.ON_GPU:
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
        done = subprocess.run([sys.executable, "-m", "kernels.debugging", "simulate", case], capture_output=True,
                              text=True, env=env, cwd=str(lib.ROOT), timeout=300)
        return "\n".join(line for line in done.stdout.splitlines() if not line.startswith("lib: ")).strip()
    if case == "gpu_compile":
        return compile_list_kernel()
    try:
        return "no error: " + run_case(case)
    except Exception as exc:  # noqa: BLE001 - the point is to show the error
        return f"{type(exc).__name__}: {exc}"


# --- compute-sanitizer on a GPU (make record) ------------------------------------------------------
SANITIZER = "/usr/local/cuda/bin/compute-sanitizer"
KEPT_LINES = 12   # of a report: the first two findings and the summary


def trim_report(text: str, keep: int = KEPT_LINES) -> str:
    """A sanitizer report shortened for a page: the first `keep` lines of findings and the summary line,
    without the repeated host backtraces (Python's frames say nothing about the kernel)."""
    lines = [ln.rstrip() for ln in text.splitlines()]
    out, skipping = [], False
    for ln in lines:
        body = ln.removeprefix("========= ").strip() if ln.startswith("=========") else None
        if body is None:
            continue  # the program's own output
        if body.startswith("Host Frame") or body.startswith("Saved host backtrace"):
            skipping = True
            continue
        if skipping and (body.startswith("in ") or re.match(r"^#?\d+", body) or not body):
            continue
        skipping = False
        out.append(ln)
    summary = [ln for ln in out if "ERROR SUMMARY" in ln or "RACECHECK SUMMARY" in ln]
    body = [ln for ln in out if ln not in summary]
    if len(body) > keep:
        body = body[:keep] + [f"========= ... ({len(body) - keep} more lines)"]
    return "\n".join(body + summary) + "\n"


def record_extra(folder: Path, raw: Path | None = None) -> list[Path]:
    """Run each buggy kernel under compute-sanitizer's tool for it and keep the trimmed reports,
    debugging.<case>.<tool>.txt, and debugging.gpu_compile.txt (numba's error for the list kernel).
    `raw`: a folder for the untrimmed reports too."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CUDA_BOOK_DOCTOR": "0"}  # no probe subprocess under the sanitizer
    jobs = {}
    for case, (kernel, _, tool) in CASES.items():
        code = (f"import kernels.debugging as d\ntry:\n    print(d.run_case({case!r}))\n"
                f"except Exception as e:\n    print('{kernel}:', type(e).__name__, str(e)[:200])")
        jobs[(case, tool)] = subprocess.Popen(
            [SANITIZER, "--tool", tool, "--print-limit", "8", sys.executable, "-c", code], cwd=str(lib.ROOT),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    written = []
    for (case, tool), proc in jobs.items():
        output, _ = proc.communicate(timeout=600)
        kernel = CASES[case][0]
        result = [ln for ln in output.splitlines() if ln.startswith(kernel + ":")]
        path = folder / f"debugging.{case}.{tool}.txt"
        path.write_text(f"$ compute-sanitizer --tool {tool} python3 -c \"run_case({case!r})\"\n"
                        + (result[0] + "\n" if result else "") + trim_report(output))
        written.append(path)
        if raw is not None:
            Path(raw).mkdir(parents=True, exist_ok=True)
            (Path(raw) / path.name).write_text(output)
    path = folder / "debugging.gpu_compile.txt"
    path.write_text(re.sub(r"\x1b\[[0-9;]*m", "", compile_list_kernel()) + "\n")  # without numba's colours
    written.append(path)
    return written


def shorten(text: str) -> str:
    """A sanitizer report made readable on a page: numba's mangled kernel names without their ABI tag and
    argument list (``kernels::debugging::scan_one_buffer_racy(...)+0x6b0``)."""
    text = re.sub(r"\[abi:[^\]]*\]", "", text)
    return re.sub(r"\((?:Array<[^>]*>(?:, )?)+\)", "(...)", text)


def fit(text: str, width: int = PAGE_WIDTH) -> str:
    """Lines longer than `width` wrapped at spaces, continuation lines indented under their first word."""
    import textwrap

    out = []
    for line in text.splitlines():
        indent = " " * (len(line) - len(line.lstrip()) + 2)
        out.extend(textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=True,
                                 break_on_hyphens=False) or [""])
    return "\n".join(out)


def recorded(case: str, tool: str | None = None) -> str:
    """A recorded report from data/results/ as a page shows it, or a line saying it is not recorded yet."""
    name = f"debugging.{case}.{tool}.txt" if tool else f"debugging.{case}.txt"
    path = lib.DATA / "results" / name
    if not path.exists():
        return f"(not recorded yet: {name} is written by `python -m tools.record debugging` on a GPU)"
    return fit(shorten(path.read_text().rstrip()))


quiet_kernels(globals())


if __name__ == "__main__" and sys.argv[1:2] == ["simulate"]:
    print(simulate(sys.argv[2]))
