"""Ladders declared as data, and the one runner that checks and times them.

A chapter's ``kernels/<topic>.py`` lists its ladders in ``LADDERS``: each rung is a host launcher in
destination-passing style, ``run(*inputs, out)`` on numba device arrays; each baseline is the library call
it is compared with, ``run(*inputs, out)`` on torch tensors sharing the same GPU memory. The runner checks
every rung and baseline against the float64 reference **before** timing it, and a rung that fails its
check gets no time at all. Adding a rung = one :class:`Rung` in the list.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from lib.grading.check import compare
from lib.grading.spec import Tolerance
from lib import mode

PAGE_WIDTH = 76  # characters of monospace that fit the book's text column


@dataclass(frozen=True)
class Rung:
    name: str                 # the kernel's name, as in kernels/ (e.g. "reduce_warp_shuffle")
    run: Callable             # run(*device_inputs, device_out)
    note: str = ""
    dtype: str = ""           # the precision its row is labelled with; "" = the first input's numpy dtype
                              # (say "float16" where 16-bit values travel as int16 bit patterns)


@dataclass(frozen=True)
class Baseline:
    name: str                 # the library call, e.g. "torch.sum"
    run: Callable             # run(*torch_inputs, torch_out)
    note: str = ""
    dtype: str = ""           # as Rung.dtype (e.g. "float16" for a call that casts its inputs to fp16)


@dataclass(frozen=True)
class Ladder:
    chapter: str
    topic: str
    description: str
    make_inputs: Callable      # (size, rng) -> tuple of float32 numpy arrays
    out_shape: Callable        # (*inputs) -> shape
    reference: Callable        # (*inputs) -> float64 array
    bytes: Callable            # (size) -> bytes moved by an ideal kernel (the floor)
    flops: Callable | None
    unit: str                  # "GB/s" or "TFLOP/s"
    sizes: list                # on a GPU
    sim_sizes: list            # on the simulator (checks only)
    rungs: list[Rung]
    baselines: list[Baseline] = field(default_factory=list)
    tolerance: Callable = lambda *inputs_and_expected: Tolerance(rtol=1e-6)

    def size_label(self, size) -> str:
        return "x".join(str(s) for s in size) if isinstance(size, tuple) else str(size)


class CheckFailed(AssertionError):
    pass


def _check(ladder: Ladder, name: str, actual, inputs, expected, size):
    tol = ladder.tolerance(*inputs, expected)
    bad = compare(np.asarray(actual), expected, tol.rtol, tol.atol, tol.scale)
    if bad is not None:
        raise CheckFailed(f"{ladder.topic}/{name} at size {ladder.size_label(size)}: {bad.describe()}")


def torch_views(device_arrays):
    import torch

    return [torch.as_tensor(a, device="cuda") for a in device_arrays]


def run_ladder(ladder: Ladder, sizes=None, seed: int = 0, reps: int | None = None, progress=None,
               only: list[str] | None = None):
    """Check and time every rung and baseline of `ladder`.

    Returns ``(rows, samples, failures)``: result rows for :mod:`lib.measure.results`, their raw samples, and the
    names of implementations that failed their check (those have no row). On the simulator only the
    checks run (at ``sim_sizes``) and no rows are returned.
    """
    from numba import cuda

    from lib.measure.clocks import after_run
    from lib.measure.results import environment, make_row
    from lib.measure.timing import time_cuda

    sizes = (ladder.sim_sizes if mode.SIMULATOR else ladder.sizes) if sizes is None else sizes
    env = environment()
    rng = np.random.default_rng(seed)
    rows, samples, failures = [], {}, []
    impls = [(r.name, r.run, False, r.dtype) for r in ladder.rungs]
    if mode.ON_GPU:
        impls += [(b.name, b.run, True, b.dtype) for b in ladder.baselines]
    if only is not None:
        impls = [i for i in impls if i[0] in only]
    for size in sizes:
        inputs = ladder.make_inputs(size, rng)
        expected = ladder.reference(*inputs)
        d_inputs = [cuda.to_device(x) for x in inputs]
        d_out = cuda.device_array(ladder.out_shape(*inputs), dtype=np.float32)
        for name, run, is_torch, dtype in impls:
            args = torch_views(d_inputs + [d_out]) if is_torch else d_inputs + [d_out]
            d_out.copy_to_device(np.full(d_out.shape, np.nan, dtype=np.float32))
            call = (lambda run=run, args=args: run(*args))
            try:
                call()
                cuda.synchronize()
                _check(ladder, name, d_out.copy_to_host(), inputs, expected, size)
            except CheckFailed as err:
                failures.append(name)
                print(f"CHECK FAILED, not timed: {err}")
                if progress is not None:
                    progress.update(1)
                continue
            if mode.ON_GPU:
                flops = ladder.flops(size) if ladder.flops else None
                timing = time_cuda(call, bytes=ladder.bytes(size), flops=flops, reps=reps)
                gpu = after_run()  # clocks, power, temperature as the repetitions end (lib.measure.clocks)
                row = make_row(ladder.chapter, name, ladder.size_label(size), dtype or inputs[0].dtype.name,
                               timing, ladder.unit, env, gpu=gpu)
                rows.append(row)
                samples[f"{row['kernel']}|{row['size']}|{row['dtype']}"] = timing.samples_ms.tolist()
            if progress is not None:
                progress.update(1)
        del d_inputs, d_out
    return rows, samples, failures


def count_steps(ladder: Ladder, sizes=None) -> int:
    sizes = (ladder.sim_sizes if mode.SIMULATOR else ladder.sizes) if sizes is None else sizes
    n = len(ladder.rungs) + (len(ladder.baselines) if mode.ON_GPU else 0)
    return n * len(sizes)


def live(ladders, only: list[str] | None = None):
    """What a chapter runs for its reader: on a GPU, check and time at full size and return the rows (to
    show beside the recorded ones); on the simulator, check at small sizes and say so."""
    rows = []
    for ladder in ladders:
        if not (ladder.sim_sizes if mode.SIMULATOR else ladder.sizes):
            continue  # e.g. a copy ceiling: baselines only, nothing to run on the simulator
        got, _, failures = run_ladder(ladder, only=only)
        rows += got
        checked = [r.name for r in ladder.rungs] + ([b.name for b in ladder.baselines] if mode.ON_GPU else [])
        checked = [n for n in checked if (only is None or n in only) and n not in failures]
        sizes = ladder.sim_sizes if mode.SIMULATOR else ladder.sizes
        print(textwrap.fill(
            f"{ladder.topic}: {len(checked)} checked against float64 at "
            f"{', '.join(ladder.size_label(s) for s in sizes)}"
            + ("" if mode.ON_GPU else " (simulator: no timings)") + (": " + ", ".join(checked) if checked else ""),
            PAGE_WIDTH, subsequent_indent="  ", break_on_hyphens=False))
        if failures:
            print(textwrap.fill(f"FAILED (not timed): {', '.join(failures)}", PAGE_WIDTH,
                                initial_indent="  ", subsequent_indent="    "))
    return rows


def torch_copy(src, dst):
    dst.copy_(src)


def copy_ceiling(chapter: str, sizes: list, numel: Callable = lambda size: int(np.prod(size))) -> Ladder:
    """A ladder of one baseline, `torch.copy` of numel(size) float32 (bytes = read + write), labelled with
    the chapter's own sizes: put it in a chapter's LADDERS so its table can show '% of torch.copy' measured
    in the same run as its kernels."""
    return Ladder(
        chapter=chapter, topic="copy ceiling",
        description="device-to-device copy (torch), the bandwidth ceiling of memory-bound kernels",
        make_inputs=lambda size, rng: (rng.standard_normal(numel(size), dtype=np.float32),),
        out_shape=lambda x: x.shape, reference=lambda x: x.astype(np.float64),
        bytes=lambda size: 8 * numel(size), flops=None, unit="GB/s", sizes=list(sizes), sim_sizes=[],
        rungs=[], baselines=[Baseline("torch.copy", torch_copy, "Tensor.copy_ (device to device)")])
