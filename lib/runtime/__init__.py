"""Layer 1, what a kernel needs to run on a GPU or on the simulator: the simulator's extensions
(:mod:`~lib.runtime.simulator`: warp intrinsics, the scheduler; :mod:`~lib.runtime.simdebug`: the debugger),
the check that a simulated kernel also compiles for a GPU (:mod:`~lib.runtime.gpucompile`), launch
accounting (:mod:`~lib.runtime.launches`, :mod:`~lib.runtime.quiet_launches`), argument checks
(:mod:`~lib.runtime.validate`), dynamic shared memory, 16-byte loads and stores (:mod:`~lib.runtime.vector`)
and the tensor-core intrinsics with their simulator twins (:mod:`~lib.runtime.mma`)."""
from __future__ import annotations

import importlib.util

from lib.mode import SIMULATOR


def install() -> None:
    """The hooks ``import lib`` installs: on the simulator, warp intrinsics and the debugger; everywhere,
    launch accounting; on the simulator, the GPU-compile check of every launched kernel."""
    if SIMULATOR:
        from lib.runtime import simulator

        simulator.install()
        if importlib.util.find_spec(f"{__name__}.simdebug") is not None:  # the simulator's debugger
            from lib.runtime import simdebug

            simdebug.install()
    from lib.runtime import launches

    launches.install()
    if SIMULATOR:
        from lib.runtime import gpucompile

        gpucompile.install()
