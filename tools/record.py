"""``make record`` (``python -m tools.record [chapter ...]``): run every ladder of kernels/ on this GPU and
rewrite data/results/<chapter>.csv with the rows, the raw samples beside them, and the device's own
description in data/results/device.json."""
from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys

from lib.mode import ROOT
from lib.measure import clocks


def _modules():
    import kernels

    for info in sorted(pkgutil.iter_modules(kernels.__path__), key=lambda m: m.name):
        yield importlib.import_module(f"kernels.{info.name}")


def discover(chapters: list[str] | None = None):
    """Every Ladder listed in a kernels/<module>.py's LADDERS, optionally only those of some chapters."""
    ladders = []
    for module in _modules():
        for ladder in getattr(module, "LADDERS", []):
            if chapters is None or ladder.chapter in chapters:
                ladders.append(ladder)
    return ladders


def extra_recorders(chapters: list[str] | None = None):
    """(chapter, function) for each kernels module with a `record_extra(folder)` that records what is not a
    timed ladder (SASS listings, occupancy tables, latency sweeps ...) into data/results/. A module states
    its chapter in a module-level CHAPTER."""
    out = []
    for module in _modules():
        fn = getattr(module, "record_extra", None)
        chapter = getattr(module, "CHAPTER", None)
        if fn is not None and (chapters is None or chapter in chapters):
            out.append((chapter, fn))
    return out


def device_description() -> dict:
    """What the driver says about the current GPU (kept beside the results it produced), and NVML's clock
    and power limits (the rows' sm_mhz and power_w are read against them)."""
    from numba import cuda

    dev = cuda.get_current_device()
    attrs = ["COMPUTE_CAPABILITY_MAJOR", "COMPUTE_CAPABILITY_MINOR", "MULTIPROCESSOR_COUNT", "CLOCK_RATE",
             "MEMORY_CLOCK_RATE", "GLOBAL_MEMORY_BUS_WIDTH", "L2_CACHE_SIZE",
             "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
             "MAX_REGISTERS_PER_MULTIPROCESSOR", "MAX_THREADS_PER_MULTIPROCESSOR", "MAX_BLOCKS_PER_MULTIPROCESSOR"]
    out = {"name": dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)}
    for a in attrs:
        try:
            out[a.lower()] = int(getattr(dev, a))
        except Exception:  # an attribute this driver/numba does not expose is left out, not guessed
            pass
    free, total = cuda.current_context().get_memory_info()
    out["total_memory_bytes"] = int(total)
    out.update(clocks.limits())  # NVML's maximum SM/memory clocks and power limit, where it reads them
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("chapters", nargs="*", help="only these chapters (default: all)")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions (default: ~0.4 s of GPU time)")
    parser.add_argument("--without", action="append", default=[], metavar="MODULE",
                        help="skip this module's record_extra (e.g. kernels.matmul_profile: ncu is slow)")
    args = parser.parse_args(argv)

    import lib

    if lib.SIMULATOR:
        print("make record needs a CUDA GPU: on the simulator nothing can be timed. data/ is unchanged.")
        return 2
    from tqdm.auto import tqdm

    from lib.measure.bench import count_steps, run_ladder
    from lib.measure.results import RESULTS, write

    ladders = discover(args.chapters or None)
    extras = [(c, fn) for c, fn in extra_recorders(args.chapters or None) if fn.__module__ not in args.without]
    if not ladders and not extras:
        print(f"nothing to record for {args.chapters or 'any chapter'}")
        return 2
    by_chapter: dict[str, tuple[list, dict]] = {}
    all_failures = []
    with tqdm(total=sum(count_steps(lad) for lad in ladders), desc="record", unit="run", file=sys.stdout) as bar:
        for ladder in ladders:
            bar.set_postfix_str(f"{ladder.chapter}/{ladder.topic}")
            rows, samples, failures = run_ladder(ladder, reps=args.reps, progress=bar)
            all_failures += [f"{ladder.chapter}/{ladder.topic}/{f}" for f in failures]
            chapter_rows, chapter_samples = by_chapter.setdefault(ladder.chapter, ([], {}))
            chapter_rows += rows
            chapter_samples.update(samples)
    for chapter, (rows, samples) in by_chapter.items():
        path = write(chapter, rows, samples)
        print(f"wrote {len(rows)} rows to {path.relative_to(ROOT)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    for chapter, fn in extras:
        print(f"recording extras of {chapter}: {fn.__module__}.record_extra")
        for path in fn(RESULTS) or []:
            print(f"wrote {path.relative_to(ROOT) if path.is_absolute() else path}")
    with open(RESULTS / "device.json", "w") as f:
        json.dump(device_description(), f, indent=1)
    if all_failures:
        print("FAILED checks (no rows recorded for them):", ", ".join(all_failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
