"""The occupancy calculator: how many blocks of a kernel fit on one SM at once, and which resource stops more.

A block is placed on one SM and stays there until all its threads finish, so the SM must hold all of its
warps, registers and shared memory at once. Four limits decide how many blocks an SM holds (the rules of
NVIDIA's ``cuda_occupancy.h``, the header behind ``cudaOccupancyMaxActiveBlocksPerMultiprocessor``):

* **warps**: at most ``max_threads_per_sm / 32`` warps (64 on Hopper); a block takes ceil(threads / 32)
  warp slots, a partial warp costs a whole one;
* **blocks**: at most ``max_blocks_per_sm`` blocks (32 on Hopper), however small;
* **registers**: registers are given to whole warps, ``regs_per_thread × 32`` rounded up to a multiple of
  256, out of the register file of each of the SM's 4 partitions (65536 / 4 = 16384 registers each); the
  warps of one SM are the warps that fit in one partition times 4. A block must also fit the 64K-register
  per-block limit, counted with its warps rounded up to a multiple of 4 (the hardware's own check);
* **shared memory**: each block takes its static + dynamic shared memory plus 1 KB the driver reserves per
  block (compute capability 8.0 and later), rounded up to 128 bytes (256 before 8.0), out of the SM's
  shared memory (228 KB on Hopper with the default carve-out). More than 48 KB per block needs an opt-in
  (``cudaFuncSetAttribute``), up to 227 KB on Hopper.

The result is the smallest of the four; :func:`occupancy` names every resource that reaches it. The same
maths runs in the browser in ``lib/widgets/occupancy.js`` and the tests check that both agree.
"""
from __future__ import annotations

from lib.hw.specs import GPUS, GPUSpec

WARP_SIZE = 32
MAX_THREADS_PER_BLOCK = 1024
MAX_REGS_PER_THREAD = 255
REGS_PER_BLOCK = 65536                # the per-block register limit on every GPU the book names
REG_ALLOCATION_UNIT = 256             # registers are allocated per warp in units of 256
SUBPARTITIONS = 4                     # an SM's four partitions, each with its own register file
DEFAULT_SMEM_PER_BLOCK = 48 * 1024    # above this a kernel must opt in to more shared memory per block
LIMITS = ("warps", "blocks", "registers", "shared memory")


def limits_for(spec: GPUSpec) -> dict:
    """The per-SM numbers the calculator needs, as plain ints (also the JSON the widget's JS receives)."""
    cc8 = spec.compute_capability >= (8, 0)
    return {"name": spec.key, "regs_per_sm": spec.regs_per_sm, "max_threads_per_sm": spec.max_threads_per_sm,
            "max_blocks_per_sm": spec.max_blocks_per_sm, "smem_per_sm": spec.smem_per_sm_kb * 1024,
            "smem_per_block_optin": spec.smem_per_block_kb * 1024,
            "smem_granularity": 128 if cc8 else 256, "smem_reserved_per_block": 1024 if cc8 else 0}


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(gpu: str | dict, threads: int, regs_per_thread: int, smem_per_block: int) -> dict:
    """Resident blocks and warps per SM for a kernel launched with `threads` per block that uses
    `regs_per_thread` registers and `smem_per_block` bytes of shared memory (static + dynamic).

    `gpu` is a key of :data:`lib.hw.specs.GPUS` (e.g. "H200") or a dict from :func:`limits_for`. Returns a dict:
    ``blocks``, ``warps``, ``threads``, ``occupancy`` (resident warps / the SM's maximum), ``limits`` (blocks
    allowed by each resource; None where a resource sets no limit), ``limiting`` (the resources that set the
    result), ``regs_per_block`` and ``smem_per_block`` (as allocated) and ``error`` (why nothing fits, or "").
    """
    g = limits_for(GPUS[gpu]) if isinstance(gpu, str) else gpu
    max_warps = g["max_threads_per_sm"] // WARP_SIZE
    warps_per_block = -(-threads // WARP_SIZE)
    regs_per_warp = _round_up(regs_per_thread * WARP_SIZE, REG_ALLOCATION_UNIT)
    regs_per_block = regs_per_warp * warps_per_block
    smem_allocated = _round_up(smem_per_block + g["smem_reserved_per_block"], g["smem_granularity"])
    smem_limit = (DEFAULT_SMEM_PER_BLOCK if smem_per_block <= DEFAULT_SMEM_PER_BLOCK
                  else g["smem_per_block_optin"]) + g["smem_reserved_per_block"]

    error = ""
    if not 1 <= threads <= MAX_THREADS_PER_BLOCK:
        error = f"a block has 1 to {MAX_THREADS_PER_BLOCK} threads"
    elif not 0 <= regs_per_thread <= MAX_REGS_PER_THREAD:
        error = f"a thread has at most {MAX_REGS_PER_THREAD} registers"
    elif max(regs_per_block, regs_per_warp * _round_up(warps_per_block, SUBPARTITIONS)) > REGS_PER_BLOCK:
        error = f"the block needs more than the {REGS_PER_BLOCK:,} registers one block may have"
    elif smem_per_block < 0 or smem_allocated > smem_limit:
        error = (f"the block needs more than the {g['smem_per_block_optin'] // 1024} KB of shared memory one "
                 "block may have")
    if error:
        limits = {name: 0 for name in LIMITS}
    else:
        warps_per_sm_by_regs = ((g["regs_per_sm"] // SUBPARTITIONS) // regs_per_warp) * SUBPARTITIONS \
            if regs_per_warp else None
        limits = {
            "warps": max_warps // warps_per_block,
            "blocks": g["max_blocks_per_sm"],
            "registers": None if warps_per_sm_by_regs is None else warps_per_sm_by_regs // warps_per_block,
            "shared memory": g["smem_per_sm"] // smem_allocated if smem_allocated else None,
        }
    blocks = min(v for v in limits.values() if v is not None)
    return {"blocks": blocks, "warps": blocks * warps_per_block, "threads": blocks * threads,
            "occupancy": blocks * warps_per_block / max_warps, "limits": limits,
            "limiting": [] if error else [name for name in LIMITS if limits[name] == blocks],
            "regs_per_block": regs_per_block, "smem_per_block": smem_allocated, "error": error}

