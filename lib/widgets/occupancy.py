"""A live occupancy calculator: sliders for threads per block, registers per thread and shared memory per
block; resident blocks, warps, occupancy and the limiting resource, with the SM's 64 warp slots drawn.

The maths runs in ``occupancy.js`` (so the widget works on the static site with no kernel); its Python twin
is :func:`lib.hw.occupancy.occupancy`, and tests/test_hardware.py checks the two agree on a grid of inputs."""
from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets

from lib.hw.occupancy import limits_for
from lib.hw.specs import GPUS

JS = Path(__file__).with_suffix(".js")


class OccupancyWidget(anywidget.AnyWidget):
    _esm = JS.read_text()
    gpus = traitlets.Dict().tag(sync=True)           # name -> lib.hw.occupancy.limits_for(spec)
    gpu = traitlets.Unicode("H200").tag(sync=True)
    threads = traitlets.Int(256).tag(sync=True)
    registers = traitlets.Int(32).tag(sync=True)
    shared_bytes = traitlets.Int(0).tag(sync=True)


def occupancy_widget(gpu: str = "H200", threads: int = 256, registers: int = 32,
                     shared_bytes: int = 0) -> OccupancyWidget:
    """The calculator, starting at one launch configuration; every GPU of lib.hw.specs can be picked."""
    if gpu not in GPUS:
        raise KeyError(f"no GPU {gpu!r} in lib.hw.specs; known: {', '.join(GPUS)}")
    return OccupancyWidget(gpus={k: limits_for(s) for k, s in GPUS.items()}, gpu=gpu, threads=threads,
                           registers=registers, shared_bytes=shared_bytes)
