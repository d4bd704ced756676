"""Hopper's own instructions from numba: ``wgmma``, TMA tensor copies, mbarriers, ``setmaxnreg`` and named
barriers, each with a simulator twin.

On a GPU every function below is an ``@intrinsic`` that emits the PTX instruction with ``builder.asm`` (as
:mod:`lib.mma` does for ``mma.sync``); numba-cuda links kernels for ``sm_90a`` by itself when it launches
on a 9.0 device, which these instructions need. On numba's simulator the same names are Python functions
with the hardware's semantics, as far as they are known (measured on the H200, see the chapter):

* **wgmma is a warpgroup collective**: the 128 threads of warps 4k..4k+3 meet (a missing thread is a
  deadlock that names the warpgroup); the last to arrive decodes both descriptors, reads A and B from shared
  memory through the layout function below, multiplies in float64 (TF32 operands *truncated* to 10
  mantissa bits, as the H200 does) and hands each thread its fragment (:func:`acc_element`). The operands
  are read at issue. A wgmma issued without ``wgmma_fence()`` since the thread's last ``wgmma_wait`` is
  refused; so is a TMA copy issued into bytes a wgmma group that has not been waited for still reads, and
  a wgmma reading bytes a TMA copy has not delivered yet.
* **mbarriers** are objects keyed by their shared address: arrival count, transaction bytes, phase.
  ``mbar_try_wait(bar, parity)`` returns 1 once the phase of that parity completed; until then the thread
  waits (no spinning), and when every thread of the block waits the deadlock report names each barrier,
  its phase, the arrivals and the bytes it still misses. More bytes delivered than ``expect_tx`` announced
  is an error naming the barrier. A wait for a parity whose last phase already completed returns at once
  without delivering the current phase's copies (they may be in flight on a GPU), and a thread that waits
  again for a completed phase it has already waited for, after arriving on a barrier since (a parity that
  does not flip round the ring), is reported as a race.
* **TMA copies** (``tma_load_2d``) read their box from global memory at issue (zero fill outside the
  tensor, as the hardware's OOB fill) and write shared memory when the copy is *delivered*: at the latest
  when a thread waits on the copy's mbarrier, so a kernel that reads the tile before waiting reads stale
  bytes here as on the GPU. The tensor map is a ``uint64[16]`` array on both sides: on the GPU the 128
  bytes ``cuTensorMapEncodeTiled`` made, on the simulator a key into the host's table of map objects.
* ``setmaxnreg_inc/dec`` are warpgroup collectives that check the count; ``named_barrier_sync(id, n)``
  waits for n threads (whole warps) at barrier id.

Layout truth. The swizzle, the shared-memory image of a TMA box, the addresses a wgmma operand descriptor
names, the descriptor's bit fields and the accumulator's owner of each element live in :mod:`lib.hw.wgmma_layout`
(no numba, so the widget's tests and the site can use them too) and nowhere else; this module re-exports them,
and the twins, the tests, the chapter and the kernels' device function :func:`make_desc` all use them.

* **Clusters** (:func:`cluster_dims`, the last section): the blocks of a cluster run co-resident and share
  one shared-memory layout, so ``mapa`` names the same array in every block; ``cluster_sync`` is a barrier
  over every thread of the cluster; a multicast copy lands in each block its CTA mask names and completes
  bytes on each one's mbarrier; a TMA store reads its box when its bulk group is waited for.

Not modelled: a thread's own ``st.shared`` into bytes a pending wgmma or TMA store reads (only TMA writes
are checked), a missing ``fence_proxy_async`` before a TMA store, the memory ordering of DSMEM accesses
(their stores land at once), reading the accumulator before ``wgmma_wait`` (the twin's result is final at
once).
"""
from __future__ import annotations

import itertools
import re
import subprocess
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import cuda

from lib.hw.wgmma_layout import (  # noqa: F401  (re-exported: the layout truth lives in lib.hw)
    K_PER_WGMMA, KINDS, N_SIZES, SWIZZLE_MASK, SWIZZLE_MODES, SWIZZLE_SPAN, WARPGROUP, acc_element, acc_owner,
    decode_descriptor, kmajor_layout, make_descriptor, operand_addresses, swizzle, tf32_truncate, tma_box_offsets)
from lib.mode import SIMULATOR

SMEM_WINDOW = 232448                                         # bytes of shared memory a block may use (H200)


def _check_shape(n: int, kind: str):
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    if n not in N_SIZES:
        raise ValueError(f"N must be one of {N_SIZES}, got {n}")


def wgmma_name(n: int, kind: str) -> str:
    _check_shape(n, kind)
    return f"wgmma_m64n{n}k{K_PER_WGMMA[kind]}_{kind}"


# --- tensor maps (host) ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class TensorMap:
    """What a 2-D tiled tensor map says (the simulator's object; on a GPU the driver encodes the same)."""
    array: object            # the global array (numpy on the simulator)
    rows: int
    cols: int
    itemsize: int
    box_rows: int
    box_cols: int
    mode: str

    @property
    def box_bytes(self) -> int:
        return self.box_rows * self.box_cols * self.itemsize


_TMAP_MAGIC = 0x544D4150_484F5050   # "TMAPHOPP": marks a simulator tensor map
_SIM_TMAPS: dict[int, TensorMap] = {}
_GPU_TMAPS: dict = {}                # (pointer, shape, box, mode) -> (device uint64[16], source array)
_tmap_ids = itertools.count(1)


def _validate_tmap(shape, itemsize, ptr, box_rows, box_cols, mode):
    if len(shape) != 2:
        raise ValueError(f"a 2-D tensor map needs a 2-D array, got shape {tuple(shape)}")
    rows, cols = shape
    if mode not in SWIZZLE_MODES:
        raise ValueError(f"swizzle must be one of {sorted(SWIZZLE_MODES)}, got {mode!r}")
    if ptr % 16:
        raise ValueError(f"the array's address {ptr:#x} is not 16-byte aligned, as TMA requires")
    if (cols * itemsize) % 16:
        raise ValueError(f"TMA needs rows of a multiple of 16 bytes: {cols} columns of {itemsize} bytes are "
                         f"{cols * itemsize} (pad K to a multiple of {16 // itemsize})")
    if not (1 <= box_rows <= 256 and 1 <= box_cols <= 256):
        raise ValueError(f"a TMA box is at most 256 × 256 elements, got {box_rows} × {box_cols}")
    if (box_cols * itemsize) % 16:
        raise ValueError(f"a TMA box row must be a multiple of 16 bytes, got {box_cols * itemsize}")
    if mode != "none" and box_cols * itemsize != SWIZZLE_SPAN[mode]:
        raise ValueError(f"a {mode}-swizzled box row must be exactly {SWIZZLE_SPAN[mode]} bytes here (the layout "
                         f"wgmma reads), got {box_cols} × {itemsize}")


def tensor_map_2d(array, box_rows: int, box_cols: int, swizzle: str = "128B"):
    """A tensor map for TMA copies of box_rows × box_cols boxes of the C-contiguous 2-D device `array`,
    returned as a ``uint64[16]`` device array to pass to the kernel (kept alive here with its array).
    Coordinates outside the array read as zeros."""
    if SIMULATOR:
        host = np.asarray(getattr(array, "_ary", array))
        if not host.flags.c_contiguous:
            raise ValueError("the tensor map's array must be C-contiguous")
        _validate_tmap(host.shape, host.dtype.itemsize, host.ctypes.data, box_rows, box_cols, swizzle)
        key = next(_tmap_ids)
        _SIM_TMAPS[key] = TensorMap(host, host.shape[0], host.shape[1], host.dtype.itemsize, box_rows, box_cols,
                                    swizzle)
        return cuda.to_device(np.array([_TMAP_MAGIC, key] + [0] * 14, dtype=np.uint64))
    return _gpu_tensor_map(array, box_rows, box_cols, swizzle)


def _gpu_tensor_map(array, box_rows, box_cols, mode):
    import ctypes

    from cuda.bindings import driver as cu

    iface = array.__cuda_array_interface__
    ptr, shape = int(iface["data"][0]), tuple(iface["shape"])
    itemsize = np.dtype(iface["typestr"]).itemsize
    if iface.get("strides") not in (None, (shape[1] * itemsize, itemsize)):
        raise ValueError("the tensor map's array must be C-contiguous")
    _validate_tmap(shape, itemsize, ptr, box_rows, box_cols, mode)
    key = (ptr, shape, itemsize, box_rows, box_cols, mode)
    if key in _GPU_TMAPS:
        return _GPU_TMAPS[key][0]
    dtype = {2: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT16,
             4: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32}[itemsize]
    swz = {"none": cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
           "128B": cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
           "64B": cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
           "32B": cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B}[mode]
    rows, cols = shape
    args = [dtype, 2, ptr, [cols, rows], [cols * itemsize], [box_cols, box_rows], [1, 1],
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swz,
            cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE]
    try:
        err, tmap = cu.cuTensorMapEncodeTiled(*args)
    except TypeError:  # older cuda-bindings want the sized integer wrappers
        args[3:7] = ([cu.cuuint64_t(v) for v in args[3]], [cu.cuuint64_t(v) for v in args[4]],
                     [cu.cuuint32_t(v) for v in args[5]], [cu.cuuint32_t(v) for v in args[6]])
        err, tmap = cu.cuTensorMapEncodeTiled(*args)
    if int(err) != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled refused shape {shape}, box {box_rows} × {box_cols}, {mode}: {err}")
    raw = np.frombuffer(ctypes.string_at(int(tmap.getPtr()), 128), dtype=np.uint64).copy()
    if len(_GPU_TMAPS) > 64:
        _GPU_TMAPS.clear()
    dev = cuda.to_device(raw)
    _GPU_TMAPS[key] = (dev, array)
    return dev


# --- ptxas's view of a kernel (GPU machines) -------------------------------------------------------------
HIDDEN_WARNINGS = {"C7510": "wgmma serialized: ptxas inserted waits between the warpgroup MMAs",
                   "C7513": "wgmma serialized: a non-wgmma instruction defines a wgmma input register inside its "
                            "pipeline stage (ptxas says it as 'info', not 'warning')",
                   "C7508": "setmaxnreg ignored: the kernel needs a register cap at entry (launch_bounds)"}
SASS_OPS = r"\b(HGMMA[.A-Z0-9x]*|UTMALDG[.A-Z0-9]*|UTMASTG[.A-Z0-9]*|SYNCS\.[A-Z0-9.]+|USETMAXREG[.A-Z0-9]*|" \
           r"WARPGROUP\.[A-Z.]+|LDL|STL|BAR\.[A-Z.]+)\b"


def ptxas_report(ptx: str, ptxas: str = "ptxas", version: str | None = None) -> dict:
    """Assemble `ptx` for sm_90a with ptxas -v (numba's launch path hides its output): registers, spill
    bytes, and the warnings that silently halve a Hopper kernel's speed (C7510, C7508), with their text."""
    if version:
        ptx = re.sub(r"^\.version \S+", f".version {version}", ptx, count=1, flags=re.M)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        r = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(src), "-o", str(Path(tmp) / "k.cubin")],
                           capture_output=True, text=True)
    text = r.stderr
    regs = re.findall(r"Used (\d+) registers", text)
    spills = re.findall(r"(\d+) bytes spill stores", text)
    warnings = [ln.strip() for ln in text.splitlines() if "warning" in ln.lower()]
    return dict(ok=r.returncode == 0, registers=int(regs[-1]) if regs else None,
                spill_bytes=int(spills[-1]) if spills else 0, warnings=warnings,
                hidden=[f"{code}: {why}" for code, why in HIDDEN_WARNINGS.items() if code in text],
                error=text.strip() if r.returncode else "")


def sass_counts(sass: str) -> dict:
    """How many of each Hopper-relevant SASS instruction a listing holds."""
    counts: dict[str, int] = {}
    for m in re.finditer(SASS_OPS, sass):
        counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return dict(sorted(counts.items()))


# --- the simulator twins ---------------------------------------------------------------------------------
def _sim():
    from lib.runtime import simulator

    return simulator


class _Block:
    """One block's Hopper state on the simulator: shared addresses, mbarriers, warpgroups' wgmma groups."""

    def __init__(self):
        self.arrays: list = []           # (start address, bytes view, data pointer)
        self.next_addr = 0x10            # not 1024-aligned on purpose: kernels must align their tiles
        self.barriers: dict[int, _MBarrier] = {}
        self.wgmma_state: dict[int, dict] = {}   # thread id -> {fenced, committed, retired}
        self.groups: dict[int, list] = {}        # warpgroup -> [ranges of each committed group]
        self.uncommitted: dict[int, list] = {}   # warpgroup -> ranges read by wgmmas not yet committed
        self.rendezvous: dict = {}
        self.named: dict[int, list] = {}
        self.written: dict[int, tuple] = {}       # array start -> (the debugger's written-mask, element bytes)
        self.passed: dict[tuple, tuple] = {}      # (thread, mbarrier) -> (the last phase it waited for, its
        self.arrivals: dict[int, int] = {}        # arrivals then); thread -> its arrivals on any mbarrier


_BLOCKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _block():
    t = _sim().current_thread()
    if t is None:
        raise _sim().SimulatorError("Hopper instructions can only be called inside a kernel")
    st = _BLOCKS.get(t.manager)
    if st is None:
        st = _BLOCKS[t.manager] = _Block()
    return st, t


def _host_bytes(arr) -> np.ndarray:
    host = np.asarray(getattr(arr, "_ary", arr))
    if not host.flags.c_contiguous:
        raise ValueError("a shared array used by Hopper instructions must be C-contiguous")
    return host.reshape(-1).view(np.uint8)


def _smem_u32_twin(arr):
    st, t = _block()
    data = _host_bytes(arr)
    ptr = data.ctypes.data
    for start, view, p in st.arrays:
        if p <= ptr < p + view.size:
            return np.uint32(start + ptr - p)
    if len(t.manager.cluster) > 1:
        return np.uint32(_cluster_smem_u32(st, t.manager, ptr))
    start = st.next_addr
    st.next_addr = start + ((data.size + 15) // 16) * 16
    if st.next_addr > SMEM_WINDOW:
        raise _sim().SimulatorError(f"the block's shared arrays need {st.next_addr} bytes; a block may use "
                                    f"{SMEM_WINDOW}")
    st.arrays.append((start, data, ptr))
    mask = getattr(arr, "_written", None)   # the simulator's debugger's written-mask (lib.runtime.simdebug)
    if isinstance(mask, bytearray) and len(mask) * _itemsize(arr) == data.size:
        st.written[start] = (np.frombuffer(mask, dtype=np.uint8), _itemsize(arr))
    return np.uint32(start)


def _declarations(manager) -> list:
    """(declaration key, bytes, the debugger's tracked array or None) of each shared array a block has made:
    static ones keyed by their source line, the dynamic bytes as 'dynamic'."""
    tracked = manager.__dict__.get("_simdebug_shared")     # lib.runtime.simdebug's per-block arrays
    out = []
    if tracked is not None:
        for key, v in tracked.items():
            if key == "dynamic bytes":
                out.append(("dynamic", v.reshape(-1).view(np.uint8), tracked.get(("dynamic", "|u1"))))
            elif not (isinstance(key, tuple) and key[0] == "dynamic"):
                out.append((key, _host_bytes(v), v))
        return out
    shared = getattr(manager, "shared", None)
    if shared is not None:
        out = [(key, _host_bytes(v), None) for key, v in shared._allocations.items()]
        if shared._dynshared.size:
            out.append(("dynamic", shared._dynshared.view(np.uint8), None))
    return out


def _cluster_plan(manager) -> dict:
    """The shared-memory layout every block of a cluster shares: declaration -> address (a GPU's layout is
    fixed when the kernel is compiled, so a mapa'd offset names the same array in every block)."""
    head = _block_of(manager.cluster[0])
    if not hasattr(head, "plan"):
        head.plan = {"next": 0x10, "at": {}}
    return head.plan


def _register_declaration(st: _Block, manager, key, view, tracked, start: int):
    st.arrays.append((start, view, view.ctypes.data))
    mask = getattr(tracked, "_written", None)
    if isinstance(mask, bytearray) and len(mask) * _itemsize(tracked) == view.size:
        st.written[start] = (np.frombuffer(mask, dtype=np.uint8), _itemsize(tracked))


def _cluster_smem_u32(st: _Block, manager, ptr: int) -> int:
    """smem_u32 in a block of a cluster: the address of the array's declaration in the cluster's plan."""
    for key, view, tracked in _declarations(manager):
        base = view.ctypes.data
        if base <= ptr < base + view.size:
            plan = _cluster_plan(manager)
            start = plan["at"].get(key)
            if start is None:
                start = plan["at"][key] = plan["next"]
                plan["next"] = start + ((view.size + 15) // 16) * 16
                if plan["next"] > SMEM_WINDOW:
                    raise _sim().SimulatorError(f"the block's shared arrays need {plan['next']} bytes; a block may "
                                                f"use {SMEM_WINDOW}")
            _register_declaration(st, manager, key, view, tracked, start)
            return start + ptr - base
    raise _sim().SimulatorError("smem_u32: the array is not one of this block's shared arrays")


def _resolve_in(st: _Block, manager, addr: int, nbytes: int, what: str):
    """_resolve in block `manager` of a cluster, registering there the array another block's address names."""
    for start, view, _ in st.arrays:
        if start <= addr < start + view.size:
            return _resolve(st, addr, nbytes, what)
    if len(manager.cluster) > 1:
        plan = _cluster_plan(manager)
        for key, view, tracked in _declarations(manager):
            start = plan["at"].get(key)
            if start is not None and start <= addr < start + view.size:
                _register_declaration(st, manager, key, view, tracked, start)
                break
    return _resolve(st, addr, nbytes, what)


def _itemsize(arr) -> int:
    """The element size in bytes of a (possibly wrapped) shared array."""
    return np.asarray(getattr(arr, "_ary", arr)).dtype.itemsize


def _resolve(st: _Block, addr: int, nbytes: int, what: str):
    """(bytes view, offset) of shared bytes [addr, addr + nbytes)."""
    for start, view, _ in st.arrays:
        if start <= addr < start + view.size:
            if addr + nbytes > start + view.size:
                raise IndexError(f"{what}: shared bytes [{addr:#x}, {addr + nbytes:#x}) run past the end of "
                                 f"the shared array at [{start:#x}, {start + view.size:#x})")
            return view, addr - start
    raise IndexError(f"{what}: shared address {addr:#x} is in no shared array of this block (addresses come "
                     "from smem_u32)")


class _MBarrier:
    def __init__(self, addr: int, count: int, manager=None):
        self.addr, self.count = addr, count
        self.manager = manager     # the simulator's block it lives in (a cluster's blocks reach each other's)
        self.phase = 0
        self.pending = count
        self.expected = 0          # bytes announced by expect_tx in this phase
        self.delivered = 0         # bytes delivered in this phase
        self.waited_parity = None  # the parity its waiting threads wait for (for the deadlock report)
        self.in_flight: list = []  # copies issued, not yet delivered: (view, dst positions, bytes, label, mask)

    def describe(self, parity=None) -> str:
        waits = "" if parity is None else f" waiting for parity {parity}"
        flying = sum(c[2].size for c in self.in_flight)
        return (f"mbarrier at shared {self.addr:#x}{waits}: phase {self.phase} (parity {self.phase & 1}) has "
                f"{self.count - self.pending} of {self.count} arrivals, expect_tx {self.expected} bytes, "
                f"{self.delivered} delivered" + (f", {flying} in flight" if flying else "")
                + (f": {self.expected - self.delivered} bytes missing" if self.expected > self.delivered else ""))


def _barrier(st: _Block, bar, what: str) -> _MBarrier:
    b = st.barriers.get(int(bar))
    if b is None:
        raise _sim().SimulatorError(f"{what}: no mbarrier was initialised at shared address {int(bar):#x} "
                                    "(mbar_init first, then fence_mbarrier_init and a barrier)")
    return b


def _progress(b: _MBarrier, deliver: bool):
    """Deliver the barrier's copies (if asked), complete its phase if it can, wake who waits on it."""
    sim = _sim()
    if deliver:
        for view, pos, data, _, mask in b.in_flight:
            view[pos] = data
            if mask is not None:   # what a copy delivers counts as written for the debugger's read check
                mask[0][pos // mask[1]] = 1
            b.delivered += data.size
        b.in_flight.clear()
        if b.pending == 0 and b.delivered > b.expected:
            raise sim.SimulatorError(
                f"mbarrier at shared {b.addr:#x}, phase {b.phase}: copies delivered {b.delivered} bytes but "
                f"expect_tx announced {b.expected}: the phase would complete before all bytes land (fix the "
                "byte count given to mbar_arrive_expect_tx)")
    if b.pending == 0 and b.delivered == b.expected:
        b.phase += 1
        b.pending, b.expected, b.delivered = b.count, 0, 0
        sim.unpark(("mbar", b.addr), b.manager)
    else:
        sim.describe_parked(("mbar", b.addr), "mbar_try_wait on " + b.describe(b.waited_parity), b.manager)


def _mbar_init_twin(bar, count):
    st, t = _block()
    addr, count = int(bar), int(count)
    if addr % 8:
        raise _sim().SimulatorError(f"mbar_init: an mbarrier is 8 bytes and 8-byte aligned; {addr:#x} is not")
    _resolve(st, addr, 8, "mbar_init")
    if not 1 <= count < (1 << 20):
        raise ValueError(f"mbar_init: the arrival count must be in 1..2^20-1, got {count}")
    st.barriers[addr] = _MBarrier(addr, count, t.manager)
    st.passed = {key: seen for key, seen in st.passed.items() if key[1] != addr}


def _arrive(bar, nbytes: int, what: str, target=None):
    """Arrive on the mbarrier at `bar` of this block, or of `target` (another _Block of the cluster)."""
    st, t = _block()
    b = _barrier(target if target is not None else st, bar, what)
    st.arrivals[t.thread_id] = st.arrivals.get(t.thread_id, 0) + 1
    if b.pending == 0:
        raise _sim().SimulatorError(f"{what}: more arrivals than the {b.count} the " + b.describe()
                                    + " was initialised with")
    b.expected += nbytes
    b.pending -= 1
    _progress(b, deliver=_sim().parked(("mbar", b.addr), b.manager) > 0)


def _mbar_arrive_twin(bar):
    _arrive(bar, 0, "mbar_arrive")


def _mbar_arrive_expect_tx_twin(bar, nbytes):
    _arrive(bar, int(nbytes), "mbar_arrive_expect_tx")


def _mbar_try_wait_twin(bar, parity):
    st, t = _block()
    b = _barrier(st, bar, "mbar_try_wait")
    parity = int(parity) & 1
    mine = (t.thread_id, b.addr)
    if (b.phase & 1) != parity:
        # The last phase of this parity has completed: the hardware returns at once. Nothing is delivered
        # here (the current phase's copies may well still be in flight on a GPU). A thread that passes the
        # same completed phase again after arriving on a barrier since (it released a slot, or announced a
        # copy: it has moved on to the next round) has not flipped its parity: it goes on without waiting.
        done, arrived = b.phase - 1, st.arrivals.get(t.thread_id, 0)
        last = st.passed.get(mine)
        if last is not None and last[0] == done and arrived > last[1]:
            raise _sim().SimulatorError(
                f"race: thread {t.thread_id} waits again for a phase of the mbarrier at shared {b.addr:#x} that it "
                f"has already waited for, after arriving on a barrier since: mbar_try_wait(bar, {parity}) returns "
                f"at once because the last phase of parity {parity} completed, so the thread goes on without waiting "
                f"for the barrier's phase {b.phase} (" + b.describe() + "): it reads a slot before its bytes land, "
                "or refills one still in use. Flip the parity each time the ring comes round: (i // STAGES) & 1 on "
                "a full barrier, ((i // STAGES) & 1) ^ 1 on an empty one")
        st.passed[mine] = (done, arrived)
        return np.int32(1)
    _progress(b, deliver=True)
    while (b.phase & 1) == parity:
        b.waited_parity = parity
        _sim().park(("mbar", b.addr), "mbar_try_wait on " + b.describe(parity))
        _progress(b, deliver=True)
    done = b.phase - 1 if ((b.phase - 1) & 1) == parity else b.phase - 2
    st.passed[mine] = (done, st.arrivals.get(t.thread_id, 0))
    return np.int32(1)


def _pending_wgmma_ranges(st: _Block):
    """(warpgroup, lo, hi) of shared bytes read by wgmma groups some thread has not waited for."""
    out = []
    for wg, groups in st.groups.items():
        members = [st.wgmma_state.get(tid) for tid in range(wg * WARPGROUP, (wg + 1) * WARPGROUP)]
        retired = min((m["retired"] if m else 0) for m in members)
        for g in groups[retired:]:
            out += [(wg, lo, hi) for lo, hi in g]
        out += [(wg, lo, hi) for lo, hi in st.uncommitted.get(wg, [])]
    return out


def _sim_tmap(tmap, what: str) -> TensorMap:
    if int(tmap[0]) != _TMAP_MAGIC or int(tmap[1]) not in _SIM_TMAPS:
        raise _sim().SimulatorError(f"{what}: the tensor map argument was not made by tensor_map_2d")
    return _SIM_TMAPS[int(tmap[1])]


def _tma_box(tm: TensorMap, dst: int, c0: int, c1: int, what: str) -> np.ndarray:
    """The box at (c0, c1) of the tensor (zeros outside it), after the destination's alignment check."""
    align = 128 if tm.mode == "none" else 8 * SWIZZLE_SPAN[tm.mode]
    if dst % align:
        raise _sim().SimulatorError(f"{what}: destination {dst:#x} is not {align}-byte aligned (needed for a "
                                    f"{tm.mode} box whose image wgmma reads)")
    box = np.zeros((tm.box_rows, tm.box_cols), dtype=tm.array.dtype)
    r0, r1 = max(c1, 0), min(c1 + tm.box_rows, tm.rows)
    k0, k1 = max(c0, 0), min(c0 + tm.box_cols, tm.cols)
    if r0 < r1 and k0 < k1:
        box[r0 - c1:r1 - c1, k0 - c0:k1 - c0] = tm.array[r0:r1, k0:k1]
    return box


def _tma_land(st: _Block, b: _MBarrier, tm: TensorMap, dst: int, box: np.ndarray, who: str, what: str):
    """Record the copy of `box` into shared bytes at dst of block `st`, delivered on its mbarrier b."""
    sim = _sim()
    row_bytes = tm.box_cols * tm.itemsize
    view, off = _resolve_in(st, b.manager, dst, tm.box_rows * row_bytes, what)
    lo, hi = dst, dst + tm.box_rows * row_bytes
    for wg, plo, phi in _pending_wgmma_ranges(st):
        if plo < hi and lo < phi:
            raise sim.SimulatorError(
                f"race: {what} ({who}) writes shared bytes [{lo:#x}, {hi:#x}) that a wgmma of "
                f"warpgroup {wg} issued earlier still reads ([{plo:#x}, {phi:#x})): that warpgroup must pass "
                "wgmma_wait (and signal it, e.g. on an 'empty' mbarrier) before the slot is refilled")
    pos = off + tma_box_offsets(tm.box_rows, row_bytes, tm.mode).reshape(-1)
    b.in_flight.append((view, pos, box.reshape(-1).view(np.uint8).copy(), (lo, hi), st.written.get(dst - off)))
    if sim.parked(("mbar", b.addr), b.manager):
        _progress(b, deliver=True)


def _tma_load_2d_twin(dst, tmap, c0, c1, bar):
    st, t = _block()
    tm = _sim_tmap(tmap, "tma_load_2d")
    dst = int(dst)
    box = _tma_box(tm, dst, int(c0), int(c1), "tma_load_2d")
    _tma_land(st, _barrier(st, bar, "tma_load_2d"), tm, dst, box, f"thread {t.thread_id}", "tma_load_2d")


def _group_collective(op: str, members: range, operands, compute):
    """A rendezvous of the block's threads `members`; compute({tid: operands}) -> {tid: result} once, when
    the last arrives."""
    sim = _sim()
    st, t = _block()
    key = (op, members.start, members.stop)
    rv = st.rendezvous.get(key)
    if rv is None:
        rv = st.rendezvous[key] = {"ops": {}, "results": None}
    rv["ops"][t.thread_id] = operands
    if len(rv["ops"]) == len(members):
        del st.rendezvous[key]
        rv["results"] = compute(rv["ops"])
        sim.unpark(("group",) + key)
    else:
        missing = sorted(set(members) - set(rv["ops"]))
        sim.describe_parked(("group",) + key, f"{op} of threads {members.start}-{members.stop - 1}: threads "
                            f"{_ranges(missing)} have not arrived")
        sim.park(("group",) + key, f"{op} of threads {members.start}-{members.stop - 1}: threads "
                 f"{_ranges(missing)} have not arrived")
    return rv["results"][t.thread_id]


def _ranges(ids) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'"""
    out = []
    for _, run in itertools.groupby(enumerate(sorted(ids)), key=lambda p: p[1] - p[0]):
        run = [i for _, i in run]
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def _warpgroup_of(t) -> range:
    nthreads = t.manager.nthreads
    if nthreads % WARPGROUP:
        raise _sim().SimulatorError(f"warpgroup instructions need whole warpgroups: the block has {nthreads} "
                                    "threads, not a multiple of 128")
    wg = t.thread_id // WARPGROUP
    return range(wg * WARPGROUP, (wg + 1) * WARPGROUP)


def _wgmma_thread(st: _Block, tid: int) -> dict:
    return st.wgmma_state.setdefault(tid, {"fenced": False, "committed": 0, "retired": 0})


def _decode(raw: np.ndarray, kind: str) -> np.ndarray:
    if kind == "f16":
        return raw.view(np.float16).astype(np.float64)
    if kind == "bf16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return tf32_truncate(raw.view(np.float32)).astype(np.float64)


def _wgmma_twin(n: int, kind: str):
    op = wgmma_name(n, kind)
    item = KINDS[kind]
    kelems = 32 // item

    def compute(ops):
        sim = _sim()
        st, _ = _block()
        tids = sorted(ops)
        first = ops[tids[0]]
        for tid in tids:
            da, db, _, fenced = ops[tid]
            if (int(da), int(db)) != (int(first[0]), int(first[1])):
                raise sim.SimulatorError(f"{op}: the descriptors differ between threads {tids[0]} and {tid} of "
                                         "the warpgroup; all 128 must pass the same A and B descriptors")
            if not fenced:
                raise sim.SimulatorError(f"{op}: thread {tid} issued a wgmma without wgmma_fence() since its last "
                                         "wgmma_wait: the fence orders its accumulator registers and shared "
                                         "memory before the asynchronous MMA reads them")
        ranges, mats = [], []
        for desc, rows in ((first[0], 64), (first[1], n)):
            addr = operand_addresses(int(desc), rows)
            lo, hi = int(addr.min()), int(addr.max()) + 1
            view, off = _resolve(st, lo, hi - lo, op)
            for copy_bar in st.barriers.values():
                for _, _, _, (clo, chi), _ in copy_bar.in_flight:
                    if clo < hi and lo < chi:
                        raise sim.SimulatorError(
                            f"{op} reads shared bytes [{lo:#x}, {hi:#x}) that a TMA copy on the mbarrier at "
                            f"{copy_bar.addr:#x} has not delivered yet: wait on that mbarrier first")
            raw = view[(addr - lo + off).reshape(-1)].reshape(rows, 32)
            mats.append(_decode(np.ascontiguousarray(raw).view(
                {2: np.uint16, 4: np.uint32}[item]).reshape(rows, kelems), kind))
            ranges.append((lo, hi))
        wg = tids[0] // WARPGROUP
        st.uncommitted.setdefault(wg, []).extend(ranges)
        rows, cols = acc_owner(n)
        c = np.zeros((64, n))
        accs = np.array([np.asarray(ops[tid][2], dtype=np.float32) for tid in tids], dtype=np.float64)
        c[rows, cols] = accs
        d = (mats[0] @ mats[1].T + c).astype(np.float32)
        out = d[rows, cols]
        return {tid: tuple(out[k]) for k, tid in enumerate(tids)}

    def twin(desc_a, desc_b, acc):
        st, t = _block()
        if len(acc) != n // 2:
            raise ValueError(f"{op}: the accumulator holds {n // 2} float32, got {len(acc)}")
        me = _wgmma_thread(st, t.thread_id)
        return _group_collective(op, _warpgroup_of(t), (desc_a, desc_b, acc, me["fenced"]), compute)

    twin.__name__ = op
    return twin


def _wgmma_fence_twin():
    st, t = _block()
    _wgmma_thread(st, t.thread_id)["fenced"] = True


def _wgmma_commit_twin():
    st, t = _block()
    me = _wgmma_thread(st, t.thread_id)
    me["committed"] += 1
    wg = t.thread_id // WARPGROUP
    groups = st.groups.setdefault(wg, [])
    if len(groups) < me["committed"]:  # the first thread of the warpgroup to commit closes the group
        groups.append(st.uncommitted.pop(wg, []))


def _wgmma_wait_twin(n):
    st, t = _block()
    me = _wgmma_thread(st, t.thread_id)
    me["retired"] = max(me["retired"], me["committed"] - int(n))
    me["fenced"] = False


def _setmaxnreg_twin(inc: bool):
    name = f"setmaxnreg_{'inc' if inc else 'dec'}"

    def twin(count):
        count = int(count)
        if not (24 <= count <= 256 and count % 8 == 0):
            raise ValueError(f"{name}: the register count must be a multiple of 8 in 24..256, got {count}")
        _, t = _block()

        def compute(ops):
            if len({v[0] for v in ops.values()}) != 1:
                raise _sim().SimulatorError(f"{name}: the threads of a warpgroup asked for different counts")
            return dict.fromkeys(ops)
        _group_collective(name, _warpgroup_of(t), (count,), compute)

    twin.__name__ = name
    return twin


def _named_barrier_count(op, barrier_id, nthreads, first_id):
    """Count this thread at a named barrier (bar.sync and bar.arrive alike); the count's last thread releases
    the waiting ones. Returns None when released, else what the barrier waits for."""
    sim = _sim()
    st, t = _block()
    bid, nthreads = int(barrier_id), int(nthreads)
    if not first_id <= bid < 16:
        raise ValueError(f"{op}: barrier id must be in {first_id}..15"
                         f"{' (0 is __syncthreads)' if first_id else ''}, got {bid}")
    if nthreads % 32 or not 0 < nthreads <= t.manager.nthreads:
        raise ValueError(f"{op}: the thread count must be a multiple of 32 up to the block's "
                         f"{t.manager.nthreads}, got {nthreads}")
    arrived = st.named.setdefault(bid, [])
    arrived.append(t.thread_id)
    if len(arrived) == nthreads:
        del st.named[bid]
        sim.unpark(("named", bid))
        return None
    what = f"named_barrier_sync({bid}, {nthreads}): {len(arrived)} of {nthreads} threads arrived"
    sim.describe_parked(("named", bid), what)
    return what


def _named_barrier_sync_twin(barrier_id, nthreads):
    what = _named_barrier_count("named_barrier_sync", barrier_id, nthreads, 0)
    if what is not None:
        _sim().park(("named", int(barrier_id)), what)


def _store_acc_twin(c, acc, row, col):
    host = getattr(c, "_item", c)
    host = np.asarray(getattr(host, "_ary", host))
    m, n = host.shape
    row, col = int(row), int(col)
    for i, v in enumerate(acc):
        r, k = row + 8 * ((i >> 1) & 1), col + 8 * (i >> 2) + (i & 1)
        if 0 <= r < m and 0 <= k < n:
            host[r, k] = v


def _zeros_acc_twin(n):
    return (np.float32(0.0),) * int(n)


def _noop(name):
    def twin(*args):
        _block()
    twin.__name__ = name
    return twin


def _simulator_twins():
    out = dict(
        smem_u32=_smem_u32_twin, zeros_acc=_zeros_acc_twin, store_acc=_store_acc_twin,
        wgmma_fence=_wgmma_fence_twin, wgmma_commit=_wgmma_commit_twin, wgmma_wait=_wgmma_wait_twin,
        fence_proxy_async=_noop("fence_proxy_async"), fence_mbarrier_init=_noop("fence_mbarrier_init"),
        tmap_acquire=_noop("tmap_acquire"),
        mbar_init=_mbar_init_twin, mbar_arrive=_mbar_arrive_twin, mbar_arrive_expect_tx=_mbar_arrive_expect_tx_twin,
        mbar_try_wait=_mbar_try_wait_twin, tma_load_2d=_tma_load_2d_twin,
        setmaxnreg_inc=_setmaxnreg_twin(True), setmaxnreg_dec=_setmaxnreg_twin(False),
        named_barrier_sync=_named_barrier_sync_twin)
    for kind in KINDS:
        for n in N_SIZES:
            out[wgmma_name(n, kind)] = _wgmma_twin(n, kind)
    return out


# --- the GPU intrinsics ----------------------------------------------------------------------------------
def _asm_kit():
    """The inline-PTX builders every set of GPU intrinsics here uses (llvmlite and numba imported on first use,
    never on the simulator): asm, u32 (a value as a 32-bit register), array_address (a global array's data
    pointer), simple (an intrinsic of one fixed instruction) and literal_op (one whose instruction takes a
    compile-time integer)."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    i64, void = ir.IntType(64), ir.VoidType()

    def asm(builder, ret, argtys, text, cons, args, name="asm"):
        return builder.asm(ir.FunctionType(ret, argtys), text, cons, args, True, name)

    def u32(context, builder, v, ty):
        return context.cast(builder, v, ty, types.uint32)

    def array_address(context, builder, ty, value):
        return builder.ptrtoint(context.make_array(ty)(context, builder, value=value).data, i64)

    def simple(text, name):
        @intrinsic
        def op(typingctx):
            def codegen(context, builder, sig, args):
                asm(builder, void, [], text, "~{memory}", [])
                return context.get_dummy_value()
            return types.void(), codegen
        op.__name__ = name
        return op

    def literal_op(text_of, name):
        """An intrinsic of one argument that must be an integer literal; text_of(value) is its instruction."""
        @intrinsic
        def op(typingctx, n):
            if not isinstance(n, types.IntegerLiteral):
                return None
            text = text_of(n.literal_value)

            def codegen(context, builder, sig, args):
                asm(builder, void, [], text, "~{memory}", [])
                return context.get_dummy_value()
            return types.void(n), codegen
        op.__name__ = name
        return op

    return asm, u32, array_address, simple, literal_op


def _gpu_intrinsics():
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
    void = ir.VoidType()
    asm, u32, array_address, simple, literal_op = _asm_kit()

    @intrinsic
    def smem_u32(typingctx, arr):
        if not isinstance(arr, types.Array):
            return None

        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, value=args[0]).data
            return asm(builder, i32, [i64], "{ .reg .u64 t; cvta.to.shared.u64 t, $1; cvt.u32.u64 $0, t; }",
                       "=r,l", [builder.ptrtoint(data, i64)])
        return types.uint32(arr), codegen

    @intrinsic
    def zeros_acc(typingctx, n):
        if not isinstance(n, types.IntegerLiteral):
            return None
        count = n.literal_value

        def codegen(context, builder, sig, args):
            return context.make_tuple(builder, sig.return_type, [ir.Constant(f32, 0.0)] * count)
        return types.UniTuple(types.float32, count)(n), codegen

    @intrinsic
    def store_acc(typingctx, c, acc, row, col):
        """c[row + 8((i >> 1) & 1), col + 8(i >> 2) + (i & 1)] = acc[i] where inside c (2-D float32, C order)."""
        if not (isinstance(c, types.Array) and c.ndim == 2 and c.dtype == types.float32
                and isinstance(acc, types.UniTuple)):
            return None
        nacc = acc.count

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, value=args[0])
            m, n = (builder.trunc(s, i32) for s in cgutils.unpack_tuple(builder, ary.shape, 2))
            r0 = builder.trunc(context.cast(builder, args[2], sig.args[2], types.int64), i32)
            k0 = builder.trunc(context.cast(builder, args[3], sig.args[3], types.int64), i32)
            vals = [builder.extract_value(args[1], i) for i in range(nacc)]
            last_col = builder.add(k0, ir.Constant(i32, 8 * (nacc // 4 - 1) + 1))
            inside = builder.and_(builder.icmp_unsigned("<", builder.add(r0, ir.Constant(i32, 8)), m),
                                  builder.icmp_unsigned("<", last_col, n))
            even = builder.icmp_unsigned("==", builder.and_(n, ir.Constant(i32, 1)), ir.Constant(i32, 0))
            v2 = ir.VectorType(f32, 2)

            def addr(r, k):
                flat = builder.add(builder.mul(builder.zext(r, i64), builder.zext(n, i64)), builder.zext(k, i64))
                return builder.gep(ary.data, [flat])

            with builder.if_else(builder.and_(inside, even)) as (fast, slow):
                with fast:
                    for i in range(0, nacc, 2):
                        r = builder.add(r0, ir.Constant(i32, 8 * ((i >> 1) & 1)))
                        k = builder.add(k0, ir.Constant(i32, 8 * (i >> 2)))
                        vec = builder.insert_element(ir.Constant(v2, ir.Undefined), vals[i], ir.Constant(i32, 0))
                        vec = builder.insert_element(vec, vals[i + 1], ir.Constant(i32, 1))
                        ptr = builder.bitcast(addr(r, k), v2.as_pointer())
                        builder.store(vec, ptr, align=8)
                with slow:
                    for i in range(nacc):
                        r = builder.add(r0, ir.Constant(i32, 8 * ((i >> 1) & 1)))
                        k = builder.add(k0, ir.Constant(i32, 8 * (i >> 2) + (i & 1)))
                        ok = builder.and_(builder.icmp_unsigned("<", r, m), builder.icmp_unsigned("<", k, n))
                        with builder.if_then(ok):
                            builder.store(vals[i], addr(r, k))
            return context.get_dummy_value()
        return types.void(c, acc, row, col), codegen

    def make_wgmma(n: int, kind: str):
        nacc = n // 2
        ptx_kind = {"f16": "f16.f16", "bf16": "bf16.bf16", "tf32": "tf32.tf32"}[kind]
        tail = "1, 1, 1" if kind == "tf32" else "1, 1, 1, 0, 0"   # scale-d, scale-a, scale-b(, trans-a, trans-b)
        outs = ",".join(f"${k}" for k in range(nacc))
        text = (f"wgmma.mma_async.sync.aligned.m64n{n}k{K_PER_WGMMA[kind]}.f32.{ptx_kind} "
                f"{{{outs}}}, ${nacc}, ${nacc + 1}, {tail};")
        cons = ",".join(["=f"] * nacc + ["l", "l"] + [str(k) for k in range(nacc)] + ["~{memory}"])

        @intrinsic
        def wgmma(typingctx, desc_a, desc_b, acc):
            if not (isinstance(acc, types.UniTuple) and acc.count == nacc and isinstance(desc_a, types.Integer)
                    and isinstance(desc_b, types.Integer)):
                return None

            def codegen(context, builder, sig, args):
                da = context.cast(builder, args[0], sig.args[0], types.int64)
                db = context.cast(builder, args[1], sig.args[1], types.int64)
                vals = [builder.extract_value(args[2], k) for k in range(nacc)]
                d = asm(builder, ir.LiteralStructType([f32] * nacc), [i64, i64] + [f32] * nacc, text, cons,
                        [da, db] + vals, "wgmma")
                return context.make_tuple(builder, sig.return_type, [builder.extract_value(d, k) for k in range(nacc)])
            return acc(desc_a, desc_b, acc), codegen
        wgmma.__name__ = wgmma_name(n, kind)
        return wgmma

    def setmaxnreg(inc: bool):
        how = "inc" if inc else "dec"
        return literal_op(lambda count: f"setmaxnreg.{how}.sync.aligned.u32 {count};", f"setmaxnreg_{how}")

    @intrinsic
    def mbar_init(typingctx, bar, count):
        def codegen(context, builder, sig, args):
            asm(builder, void, [i32, i32], "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r,~{memory}",
                [u32(context, builder, args[0], sig.args[0]), u32(context, builder, args[1], sig.args[1])])
            return context.get_dummy_value()
        return types.void(bar, count), codegen

    @intrinsic
    def mbar_arrive(typingctx, bar):
        def codegen(context, builder, sig, args):
            asm(builder, void, [i32], "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}",
                [u32(context, builder, args[0], sig.args[0])])
            return context.get_dummy_value()
        return types.void(bar), codegen

    @intrinsic
    def mbar_arrive_expect_tx(typingctx, bar, nbytes):
        def codegen(context, builder, sig, args):
            asm(builder, void, [i32, i32], "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;",
                "r,r,~{memory}", [u32(context, builder, args[0], sig.args[0]),
                                  u32(context, builder, args[1], sig.args[1])])
            return context.get_dummy_value()
        return types.void(bar, nbytes), codegen

    @intrinsic
    def mbar_try_wait(typingctx, bar, parity):
        def codegen(context, builder, sig, args):
            return asm(builder, i32, [i32, i32],
                       "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2; selp.u32 $0, 1, 0, p; }",
                       "=r,r,r,~{memory}", [u32(context, builder, args[0], sig.args[0]),
                                            u32(context, builder, args[1], sig.args[1])])
        return types.int32(bar, parity), codegen

    @intrinsic
    def tma_load_2d(typingctx, dst, tmap, c0, c1, bar):
        if not isinstance(tmap, types.Array):
            return None

        def codegen(context, builder, sig, args):
            asm(builder, void, [i32, i64, i32, i32, i32],
                "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                " [$0], [$1, {$2, $3}], [$4];", "r,l,r,r,r,~{memory}",
                [u32(context, builder, args[0], sig.args[0]), array_address(context, builder, sig.args[1], args[1]),
                 context.cast(builder, args[2], sig.args[2], types.int32),
                 context.cast(builder, args[3], sig.args[3], types.int32),
                 u32(context, builder, args[4], sig.args[4])])
            return context.get_dummy_value()
        return types.void(dst, tmap, c0, c1, bar), codegen

    @intrinsic
    def tmap_acquire(typingctx, tmap):
        if not isinstance(tmap, types.Array):
            return None

        def codegen(context, builder, sig, args):
            asm(builder, void, [i64], "fence.proxy.tensormap::generic.acquire.sys [$0], 128;\n"
                "prefetch.tensormap [$0];", "l,~{memory}", [array_address(context, builder, sig.args[0], args[0])])
            return context.get_dummy_value()
        return types.void(tmap), codegen

    @intrinsic
    def named_barrier_sync(typingctx, barrier_id, nthreads):
        def codegen(context, builder, sig, args):
            asm(builder, void, [i32, i32], "bar.sync $0, $1;", "r,r,~{memory}",
                [u32(context, builder, args[0], sig.args[0]), u32(context, builder, args[1], sig.args[1])])
            return context.get_dummy_value()
        return types.void(barrier_id, nthreads), codegen

    out = dict(
        smem_u32=smem_u32, zeros_acc=zeros_acc, store_acc=store_acc,
        wgmma_fence=simple("wgmma.fence.sync.aligned;", "wgmma_fence"),
        wgmma_commit=simple("wgmma.commit_group.sync.aligned;", "wgmma_commit"),
        wgmma_wait=literal_op(lambda n: f"wgmma.wait_group.sync.aligned {n};", "wgmma_wait"),
        fence_proxy_async=simple("fence.proxy.async.shared::cta;", "fence_proxy_async"),
        fence_mbarrier_init=simple("fence.mbarrier_init.release.cluster;", "fence_mbarrier_init"),
        tmap_acquire=tmap_acquire, mbar_init=mbar_init, mbar_arrive=mbar_arrive,
        mbar_arrive_expect_tx=mbar_arrive_expect_tx, mbar_try_wait=mbar_try_wait, tma_load_2d=tma_load_2d,
        setmaxnreg_inc=setmaxnreg(True), setmaxnreg_dec=setmaxnreg(False), named_barrier_sync=named_barrier_sync)
    for kind in KINDS:
        for n in N_SIZES:
            out[wgmma_name(n, kind)] = make_wgmma(n, kind)
    return out


def _make_desc(addr, lbo, sbo, mode):
    """The descriptor of make_descriptor, in a kernel (mode as its 2-bit code: 0 none, 1 128B, 2 64B, 3 32B)."""
    a, lo, so, md = int(addr), int(lbo), int(sbo), int(mode)
    return ((a & 0x3FFFF) >> 4) | (((lo >> 4) & 0x3FFF) << 16) | (((so >> 4) & 0x3FFF) << 32) | (md << 62)


make_desc = cuda.jit(device=True)(_make_desc)

_FUNCTIONS = _simulator_twins() if SIMULATOR else _gpu_intrinsics()
globals().update(_FUNCTIONS)
__all__ = sorted(_FUNCTIONS) + [
    "make_desc", "swizzle", "tma_box_offsets", "kmajor_layout", "make_descriptor", "decode_descriptor",
    "operand_addresses", "acc_element", "acc_owner", "tf32_truncate", "wgmma_name", "tensor_map_2d",
    "TensorMap", "ptxas_report", "sass_counts", "SWIZZLE_MODES", "KINDS", "K_PER_WGMMA", "N_SIZES", "WARPGROUP"]


# =========================================================================================================
# FlashAttention-3's additions (issue 29): wgmma with A from registers ("RS"), B read MN-major (imm-trans-b,
# the form P·V needs when V is stored row-major), the float32 -> 16-bit pair conversion that turns an
# accumulator fragment into an A fragment, exp2.approx, and bar.arrive (named_barrier_arrive: count at a
# named barrier without waiting, the other half of a ping-pong of turns). Each with its simulator twin.
# =========================================================================================================
B16_KINDS = ("f16", "bf16")          # RS and transposed-B forms: 16-bit inputs only (PTX: no trans for TF32)


def a_fragment_element(tid, reg, half):
    """(row, col) in the 64 × 16 A tile of half `half` (0 low, 1 high) of A register `reg` (0-3) of warpgroup
    thread tid: warp w holds rows 16w..16w+15 as mma.sync's m16k16 A fragment (g = lane // 4, t = lane % 4):
    reg 0 row g, reg 1 row g + 8, regs 2-3 the same rows 8 columns right; columns 2t + half."""
    w, lane = tid // 32, tid % 32
    g, t = lane // 4, lane % 4
    return 16 * w + g + 8 * (reg & 1), 8 * (reg >> 1) + 2 * t + half


def acc_to_a_registers(j: int) -> list[tuple[int, int]]:
    """Which accumulator registers of an m64nN fragment make A register r (0-3) of the k16 slice j of an RS
    wgmma: [(lo, hi)] * 4. Register 8j + i of the accumulator holds column 16j + 8(i >> 2) + 2t + (i & 1) of
    row g + 8((i >> 1) & 1), which is where a_fragment_element puts half (i & 1) of register i >> 1: the
    accumulator of S = Q·Kᵀ *is* the A operand of P·V, pair by pair, with no data crossing threads."""
    return [(8 * j + 2 * r, 8 * j + 2 * r + 1) for r in range(4)]


def mnmajor_layout(krows: int, n: int, itemsize: int, mode: str):
    """Element offsets (krows × n) of an MN-major B tile (row k holds n contiguous values: V of attention,
    row-major) as TMA writes it in boxes of span / itemsize columns, box after box (each krows × span bytes),
    and the descriptor fields wgmma reads it with: LBO = the byte distance of N-adjacent boxes, SBO = of
    8-row (K) groups inside a box (8 × span); one k16 instruction = 16 rows = +2·SBO bytes."""
    if mode == "none" or mode not in SWIZZLE_MODES:
        raise ValueError(f"MN-major tiles are modelled for the swizzled modes 128B/64B/32B, got {mode!r}")
    span = SWIZZLE_SPAN[mode]
    per_row = span // itemsize
    if n % per_row:
        raise ValueError(f"an MN-major {mode} tile holds whole boxes of {per_row} columns, not {n}")
    k = np.arange(krows)[:, None]
    col = np.arange(n)[None, :]
    box = tma_box_offsets(krows, span, mode)
    byte = (col // per_row) * krows * span + box[k, (col % per_row) * itemsize]
    return (byte // itemsize).astype(np.int64), krows * span, 8 * span, 16 * span


def operand_addresses_mn(desc: int, n: int, krows: int = 16, itemsize: int = 2) -> np.ndarray:
    """addr[r, k]: the shared address of element (n = r, k) of an MN-major B operand that a wgmma with
    imm-trans-b = 1 reads through `desc`: within a swizzle atom (8 K-rows of span bytes) N runs along the row,
    N-adjacent atoms are LBO apart, K-adjacent 8-row groups SBO apart (PTX's canonical MN-major layout
    ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)) for 128B). The start must be atom-aligned (base offset 0)."""
    d = decode_descriptor(desc)
    start, lbo, sbo, mode = d["start"], d["lbo"], d["sbo"], d["mode"]
    if mode == "none":
        raise ValueError("MN-major (transposed) B is modelled for the swizzled modes only")
    span = SWIZZLE_SPAN[mode]
    if d["base_offset"] or start % (8 * span):
        raise ValueError(f"wgmma descriptor of an MN-major operand starts at shared address {start:#x}, not on a "
                         f"{8 * span}-byte {mode} swizzle atom: only atom-aligned tiles are modelled")
    per_row = span // itemsize
    r = np.arange(n)[:, None]
    k = np.arange(krows)[None, :]
    return swizzle(start + (r // per_row) * lbo + (r % per_row) * itemsize + (k // 8) * sbo + (k % 8) * span,
                   mode)


def wgmma_ex_name(n: int, kind: str, a_regs: bool, trans_b: bool) -> str:
    """wgmma_rs_m64n128k16_f16 (A from registers), ..._tb (B MN-major), wgmma_m64n64k16_bf16_tb (SS, B
    MN-major)."""
    if kind not in B16_KINDS:
        raise ValueError(f"the RS and transposed-B forms take 16-bit inputs {B16_KINDS}, got {kind!r}")
    _check_shape(n, kind)
    return f"wgmma_{'rs_' if a_regs else ''}m64n{n}k16_{kind}{'_tb' if trans_b else ''}"


EX_FORMS = [(n, kind, a_regs, trans_b) for kind in B16_KINDS for n in N_SIZES for a_regs, trans_b in
            ((True, False), (True, True), (False, True))]


def _b16_pack_twin(kind: str):
    def pack(lo, hi):
        pair = np.array([lo, hi], dtype=np.float32)
        bits = pair.astype(np.float16).view(np.uint16) if kind == "f16" else _bf16_bits(pair)
        return np.uint32(int(bits[0]) | (int(bits[1]) << 16))
    pack.__name__ = f"pack_{kind}x2"
    return pack


def _bf16_bits(x) -> np.ndarray:
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _exp2_twin(x):
    with np.errstate(over="ignore", under="ignore"):
        return np.float32(np.exp2(np.float32(x)))


def _read_operand(st, op: str, addr: np.ndarray, itemsize: int, kind: str) -> tuple[np.ndarray, tuple]:
    """Values at element start addresses `addr` (any shape) of shared memory, after the race checks of
    _wgmma_twin: a TMA copy not yet delivered into those bytes is an error."""
    sim = _sim()
    lo, hi = int(addr.min()), int(addr.max()) + itemsize
    view, off = _resolve(st, lo, hi - lo, op)
    for copy_bar in st.barriers.values():
        for _, _, _, (clo, chi), _ in copy_bar.in_flight:
            if clo < hi and lo < chi:
                raise sim.SimulatorError(
                    f"{op} reads shared bytes [{lo:#x}, {hi:#x}) that a TMA copy on the mbarrier at "
                    f"{copy_bar.addr:#x} has not delivered yet: wait on that mbarrier first")
    idx = (addr - lo + off)[..., None] + np.arange(itemsize)
    raw = np.ascontiguousarray(view[idx]).view(np.uint16 if itemsize == 2 else np.uint32)[..., 0]
    return _decode(raw, kind), (lo, hi)


def _wgmma_ex_twin(n: int, kind: str, a_regs: bool, trans_b: bool):
    op = wgmma_ex_name(n, kind, a_regs, trans_b)

    def compute(ops):
        sim = _sim()
        st, _ = _block()
        tids = sorted(ops)
        first = ops[tids[0]]
        for tid in tids:
            a, db, _, fenced = ops[tid]
            if int(db) != int(first[1]) or (not a_regs and int(a) != int(first[0])):
                raise sim.SimulatorError(f"{op}: the descriptors differ between threads {tids[0]} and {tid} of "
                                         "the warpgroup; all 128 must pass the same ones")
            if not fenced:
                raise sim.SimulatorError(f"{op}: thread {tid} issued a wgmma without wgmma_fence() since its last "
                                         "wgmma_wait: the fence orders its registers and shared memory before "
                                         "the asynchronous MMA reads them")
        ranges = []
        if a_regs:
            regs = np.zeros((WARPGROUP, 4), dtype=np.uint32)
            for k, tid in enumerate(tids):
                if len(ops[tid][0]) != 4:
                    raise ValueError(f"{op}: A is 4 registers of two 16-bit values per thread, got "
                                     f"{len(ops[tid][0])}")
                regs[k] = [int(x) & 0xFFFFFFFF for x in ops[tid][0]]
            halves = np.stack([regs & 0xFFFF, regs >> 16], axis=-1).astype(np.uint16)   # (128, 4, 2)
            t_, r_, h_ = np.meshgrid(np.arange(WARPGROUP), np.arange(4), np.arange(2), indexing="ij")
            rows, cols = a_fragment_element(t_, r_, h_)
            a_raw = np.zeros((64, 16), dtype=np.uint16)
            a_raw[rows, cols] = halves
            amat = _decode(a_raw, kind)
        else:
            addr = operand_addresses(int(first[0]), 64)[:, ::2]        # element starts, 64 × 16
            amat, rng_a = _read_operand(st, op, addr, 2, kind)
            ranges.append(rng_a)
        baddr = operand_addresses_mn(int(first[1]), n) if trans_b else operand_addresses(int(first[1]), n)[:, ::2]
        bmat, rng_b = _read_operand(st, op, baddr, 2, kind)
        ranges.append(rng_b)
        wg = tids[0] // WARPGROUP
        st.uncommitted.setdefault(wg, []).extend(ranges)
        rows, cols = acc_owner(n)
        c = np.zeros((64, n))
        c[rows, cols] = np.array([np.asarray(ops[tid][2], dtype=np.float32) for tid in tids], dtype=np.float64)
        d = (amat @ bmat.T + c).astype(np.float32)
        out = d[rows, cols]
        return {tid: tuple(out[k]) for k, tid in enumerate(tids)}

    def twin(a, desc_b, acc):
        st, t = _block()
        if len(acc) != n // 2:
            raise ValueError(f"{op}: the accumulator holds {n // 2} float32, got {len(acc)}")
        me = _wgmma_thread(st, t.thread_id)
        a = tuple(a) if a_regs else a
        return _group_collective(op, _warpgroup_of(t), (a, desc_b, acc, me["fenced"]), compute)

    twin.__name__ = op
    return twin


def _named_barrier_arrive_twin(barrier_id, nthreads):
    """bar.arrive: count this thread at barrier id without waiting; completing the count releases the
    threads that wait there with named_barrier_sync (the ping-pong of two warpgroups' turns)."""
    _named_barrier_count("named_barrier_arrive", barrier_id, nthreads, 1)


def _fence_operands_twin(values):
    _block()
    return tuple(values)


def _fa3_twins():
    out = {wgmma_ex_name(*form): _wgmma_ex_twin(*form) for form in EX_FORMS}
    out["fence_operands"] = _fence_operands_twin
    out.update(pack_f16x2=_b16_pack_twin("f16"), pack_bf16x2=_b16_pack_twin("bf16"), exp2_approx=_exp2_twin,
               named_barrier_arrive=_named_barrier_arrive_twin)
    return out


def _fa3_intrinsics():
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)

    def make(n: int, kind: str, a_regs: bool, trans_b: bool):
        nacc = n // 2
        outs = ",".join(f"${k}" for k in range(nacc))
        if a_regs:   # d, {a0..a3}, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-b
            text = (f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{kind}.{kind} {{{outs}}}, "
                    f"{{${nacc}, ${nacc + 1}, ${nacc + 2}, ${nacc + 3}}}, ${nacc + 4}, 1, 1, 1, {int(trans_b)};")
            ins = ["r"] * 4 + ["l"]
        else:        # d, a-desc, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b
            text = (f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{kind}.{kind} {{{outs}}}, ${nacc}, ${nacc + 1}, "
                    f"1, 1, 1, 0, {int(trans_b)};")
            ins = ["l", "l"]
        cons = ",".join(["=f"] * nacc + ins + [str(k) for k in range(nacc)] + ["~{memory}"])

        @intrinsic
        def wgmma(typingctx, a, desc_b, acc):
            if not (isinstance(acc, types.UniTuple) and acc.count == nacc and isinstance(desc_b, types.Integer)):
                return None
            if a_regs and not (isinstance(a, types.BaseTuple) and len(a) == 4
                               and all(isinstance(x, types.Integer) for x in a)):
                return None
            if not a_regs and not isinstance(a, types.Integer):
                return None

            def codegen(context, builder, sig, args):
                if a_regs:
                    avals = [context.cast(builder, builder.extract_value(args[0], k), sig.args[0][k], types.uint32)
                             for k in range(4)]
                    ins_t = [i32] * 4
                else:
                    avals = [context.cast(builder, args[0], sig.args[0], types.int64)]
                    ins_t = [i64]
                db = context.cast(builder, args[1], sig.args[1], types.int64)
                vals = [builder.extract_value(args[2], k) for k in range(nacc)]
                fnty = ir.FunctionType(ir.LiteralStructType([f32] * nacc), ins_t + [i64] + [f32] * nacc)
                d = builder.asm(fnty, text, cons, avals + [db] + vals, True, "wgmma")
                return context.make_tuple(builder, sig.return_type, [builder.extract_value(d, k) for k in range(nacc)])
            return acc(a, desc_b, acc), codegen
        wgmma.__name__ = wgmma_ex_name(n, kind, a_regs, trans_b)
        return wgmma

    def pack(kind: str):
        ptx = f"cvt.rn.{kind}x2.f32 $0, $2, $1;"     # PTX puts its first source in the upper half

        @intrinsic
        def op(typingctx, lo, hi):
            if not (isinstance(lo, types.Float) and isinstance(hi, types.Float)):
                return None

            def codegen(context, builder, sig, args):
                lo32, hi32 = (context.cast(builder, v, t, types.float32) for v, t in zip(args, sig.args))
                return builder.asm(ir.FunctionType(i32, [f32, f32]), ptx, "=r,f,f", [lo32, hi32], False, "cvt")
            return types.uint32(lo, hi), codegen
        op.__name__ = f"pack_{kind}x2"
        return op

    @intrinsic
    def exp2_approx(typingctx, x):
        if not isinstance(x, types.Float):
            return None

        def codegen(context, builder, sig, args):
            v = context.cast(builder, args[0], sig.args[0], types.float32)
            return builder.asm(ir.FunctionType(f32, [f32]), "ex2.approx.ftz.f32 $0, $1;", "=f,f", [v], False, "ex2")
        return types.float32(x), codegen

    @intrinsic
    def named_barrier_arrive(typingctx, barrier_id, nthreads):
        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.VoidType(), [i32, i32])
            vals = [context.cast(builder, a, t, types.uint32) for a, t in zip(args, sig.args)]
            builder.asm(fnty, "bar.arrive $0, $1;", "r,r,~{memory}", vals, True, "bar_arrive")
            return context.get_dummy_value()
        return types.void(barrier_id, nthreads), codegen

    @intrinsic
    def fence_operands(typingctx, values):
        """The tuple, unchanged, through an empty volatile asm (CUTLASS's warpgroup_fence_operand): its values
        are computed before this point, so the compiler cannot sink their definitions (a cvt, a multiply)
        between the wgmmas of an open pipeline stage, which makes ptxas serialize every wgmma (C7513)."""
        if not (isinstance(values, types.UniTuple) and values.dtype in (types.float32, types.uint32, types.int32)):
            return None
        count, is_f = values.count, values.dtype == types.float32
        ty = f32 if is_f else i32

        def codegen(context, builder, sig, args):
            vals = [builder.extract_value(args[0], k) for k in range(count)]
            cons = ",".join([("=f" if is_f else "=r")] * count + [str(k) for k in range(count)])
            fnty = ir.FunctionType(ir.LiteralStructType([ty] * count), [ty] * count)
            res = builder.asm(fnty, "", cons, vals, True, "fence_operands")
            return context.make_tuple(builder, sig.return_type, [builder.extract_value(res, k) for k in range(count)])
        return values(values), codegen

    out = {wgmma_ex_name(*form): make(*form) for form in EX_FORMS}
    out["fence_operands"] = fence_operands
    out.update(pack_f16x2=pack("f16"), pack_bf16x2=pack("bf16"), exp2_approx=exp2_approx,
               named_barrier_arrive=named_barrier_arrive)
    return out


_FA3_FUNCTIONS = _fa3_twins() if SIMULATOR else _fa3_intrinsics()
globals().update(_FA3_FUNCTIONS)
__all__ += sorted(_FA3_FUNCTIONS) + ["a_fragment_element", "acc_to_a_registers", "mnmajor_layout",
                                     "operand_addresses_mn", "wgmma_ex_name", "EX_FORMS", "B16_KINDS"]


# =========================================================================================================
# Clusters (issue 28): a launch option that groups blocks into thread-block clusters, the cluster's special
# registers, distributed shared memory (mapa), the cluster barrier, a remote mbarrier arrival, TMA multicast
# (one copy lands in the shared memory of every block its mask names, and completes each one's mbarrier),
# and the TMA store (shared memory -> a box of a global tensor, in bulk async-groups). Each with its twin.
# =========================================================================================================
MAX_CLUSTER_BLOCKS = 8               # the portable cluster size (16 needs a non-portable attribute numba lacks)
_CLUSTER_FUNCS: dict[int, tuple] = {}   # id(python function) -> (function, dims): kernels compiled with them


def _check_cluster_dims(dims) -> tuple:
    try:
        dims = tuple(int(d) for d in (dims if isinstance(dims, (tuple, list)) else (dims,)))
    except (TypeError, ValueError):
        raise ValueError(f"cluster dims are 1 to 3 positive integers, got {dims!r}") from None
    if not 1 <= len(dims) <= 3 or min(dims) < 1:
        raise ValueError(f"cluster dims are 1 to 3 positive integers, got {dims!r}")
    dims = dims + (1,) * (3 - len(dims))
    if int(np.prod(dims)) > MAX_CLUSTER_BLOCKS:
        raise ValueError(f"a cluster of {dims} has {int(np.prod(dims))} blocks; at most {MAX_CLUSTER_BLOCKS} (the "
                         "portable cluster size) are allowed")
    return dims


def check_cluster_grid(grid, dims, name: str = "kernel"):
    """A grid (1-3 dims) must be a whole number of clusters along each axis: ValueError naming the axis."""
    grid = tuple(int(g) for g in (grid if isinstance(grid, (tuple, list)) else (grid,)))
    grid = grid + (1,) * (3 - len(grid))
    for axis, g, c in zip("xyz", grid, dims):
        if g % c:
            raise ValueError(f"{name} runs in clusters of {dims[0]} × {dims[1]} × {dims[2]} blocks, so its grid must "
                             f"be a multiple of that along each axis: grid.{axis} = {g} is not a multiple of {c}")
    return grid


def cluster_dims(kernel_or_dims, dims=None):
    """Launch a ``@cuda.jit`` kernel in thread-block clusters of `dims` (x, y, z) blocks:
    ``cluster_dims(kernel, (2, 1, 1))``, or ``@cluster_dims((2, 1, 1))`` above ``@cuda.jit``. Returns the
    kernel, which is then launched as usual (``kernel[grid, block, stream, smem](...)``); the grid must be a
    whole number of clusters (a ValueError says which axis is not).

    On a GPU the dims become NVVM's ``cluster_dim_x/y/z`` kernel annotations (PTX ``.explicitcluster
    .reqnctapercluster``), so numba's ordinary launch runs clusters; numba-cuda 0.30.4 has no option for it,
    so its one call that sets a kernel's launch bounds (``nvvm.set_launch_bounds``, made by both the launch
    path and ``compile_ptx``) is wrapped to add them for the kernels registered here, and every launch checks
    that the PTX it runs carries the directive. On the simulator the blocks of each cluster run co-resident
    (their threads interleave), which DSMEM, the cluster barrier and TMA multicast need. Apply it before the
    kernel's first launch or compile."""
    if dims is None:
        if callable(kernel_or_dims) and not isinstance(kernel_or_dims, (tuple, list, int)):
            raise TypeError("cluster_dims(kernel, dims) or @cluster_dims(dims): the cluster dims are missing")
        wanted = _check_cluster_dims(kernel_or_dims)
        return lambda kernel: cluster_dims(kernel, wanted)
    kernel, dims = kernel_or_dims, _check_cluster_dims(dims)
    fn = getattr(kernel, "py_func", None) or getattr(kernel, "fn", None)   # CUDADispatcher / simulator kernel
    if fn is None or getattr(kernel, "_device", False) or getattr(getattr(kernel, "targetoptions", {}), "get",
                                                                    lambda k: False)("device"):
        raise TypeError(f"cluster_dims takes a @cuda.jit kernel (not a device function), got {kernel!r}")
    kernel._book_cluster_dims = dims
    if SIMULATOR:
        return kernel
    if getattr(kernel, "overloads", None):
        raise RuntimeError(f"{fn.__name__} was compiled before cluster_dims was applied: apply it first (the "
                           "cluster size is part of the compiled kernel)")
    _install_cluster_annotation()
    _CLUSTER_FUNCS[id(fn)] = (fn, dims)
    configure = kernel.configure
    checked: set = set()

    def check(compiled, config):
        check_cluster_grid(config.griddim, dims, fn.__name__)
        if id(compiled) not in checked:
            if ".reqnctapercluster" not in compiled._codelibrary.get_asm_str():
                raise RuntimeError(f"{fn.__name__}: the compiled PTX has no .reqnctapercluster directive, so the "
                                   "launch would not run clusters (numba's compile path no longer calls "
                                   "nvvm.set_launch_bounds as numba-cuda 0.30.4 does)")
            checked.add(id(compiled))

    def configure_in_clusters(*args, **kwargs):
        config = configure(*args, **kwargs)
        check_cluster_grid(config.griddim, dims, fn.__name__)
        config.pre_launch_callbacks.append(check)
        return config

    configure_in_clusters._quiet = getattr(configure, "_quiet", False)
    kernel.configure = configure_in_clusters
    return kernel


def _install_cluster_annotation():
    """Wrap numba-cuda's nvvm.set_launch_bounds (called on every kernel it compiles, by the launch path's
    _Kernel and by compile_ptx) to add cluster_dim_x/y/z annotations for the kernels cluster_dims registered.
    The kernel's Python function is a local of the caller (``py_func`` or ``pyfunc``)."""
    import sys as _sys

    from llvmlite import ir
    from numba.cuda import cgutils
    from numba.cuda.cudadrv import nvvm

    if getattr(nvvm.set_launch_bounds, "_book_clusters", False):
        return
    original = nvvm.set_launch_bounds

    def set_launch_bounds(kernel, launch_bounds):
        original(kernel, launch_bounds)
        frame, dims = _sys._getframe(1), None
        for _ in range(4):
            if frame is None:
                break
            for name in ("py_func", "pyfunc"):
                hit = _CLUSTER_FUNCS.get(id(frame.f_locals.get(name)))
                if hit is not None and hit[0] is frame.f_locals.get(name):
                    dims = hit[1]
            if dims is not None:
                break
            frame = frame.f_back
        if dims is None:
            return
        module = kernel.module
        ann = cgutils.get_or_insert_named_metadata(module, "nvvm.annotations")
        for prop, v in zip(("cluster_dim_x", "cluster_dim_y", "cluster_dim_z"), dims):
            ann.add(module.add_metadata((kernel, ir.MetaDataString(module, prop), ir.Constant(ir.IntType(32), v))))

    set_launch_bounds._book_clusters = True
    nvvm.set_launch_bounds = set_launch_bounds


def _cluster_intrinsics():
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    i16, i32, i64 = ir.IntType(16), ir.IntType(32), ir.IntType(64)
    void = ir.VoidType()
    asm, u32, array_address, simple, literal_op = _asm_kit()

    def sreg(reg, name):
        @intrinsic
        def op(typingctx):
            def codegen(context, builder, sig, args):
                return asm(builder, i32, [], f"mov.u32 $0, %{reg};", "=r", [])
            return types.uint32(), codegen
        op.__name__ = name
        return op

    @intrinsic
    def mapa(typingctx, addr, rank):
        def codegen(context, builder, sig, args):
            return asm(builder, i32, [i32, i32], "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r",
                       [u32(context, builder, args[0], sig.args[0]), u32(context, builder, args[1], sig.args[1])])
        return types.uint32(addr, rank), codegen

    @intrinsic
    def ld_cluster_u32(typingctx, caddr):
        def codegen(context, builder, sig, args):
            return asm(builder, i32, [i32], "ld.shared::cluster.u32 $0, [$1];", "=r,r,~{memory}",
                       [u32(context, builder, args[0], sig.args[0])])
        return types.uint32(caddr), codegen

    @intrinsic
    def st_cluster_u32(typingctx, caddr, value):
        def codegen(context, builder, sig, args):
            asm(builder, void, [i32, i32], "st.shared::cluster.u32 [$0], $1;", "r,r,~{memory}",
                [u32(context, builder, args[0], sig.args[0]), u32(context, builder, args[1], sig.args[1])])
            return context.get_dummy_value()
        return types.void(caddr, value), codegen

    def remote_arrive(ptx, name):
        @intrinsic
        def op(typingctx, caddr):
            def codegen(context, builder, sig, args):
                asm(builder, void, [i32], ptx, "r,~{memory}", [u32(context, builder, args[0], sig.args[0])])
                return context.get_dummy_value()
            return types.void(caddr), codegen
        op.__name__ = name
        return op

    # PTX's defaults (.release, .cta scope), as CUTLASS's ClusterBarrier::arrive(cta_id, pred): ptxas emits no
    # MEMBAR for it. The .release.cluster form orders every earlier memory access of the thread at cluster
    # scope, a MEMBAR on each arrival: Nsight Compute's 'membar' stall on the H200 (see chapters/hopper.md).
    mbar_arrive_cluster = remote_arrive("mbarrier.arrive.shared::cluster.b64 _, [$0];", "mbar_arrive_cluster")
    mbar_arrive_cluster_release_cluster = remote_arrive(
        "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [$0];", "mbar_arrive_cluster_release_cluster")

    @intrinsic
    def tma_load_2d_multicast(typingctx, dst, tmap, c0, c1, bar, cta_mask):
        if not isinstance(tmap, types.Array):
            return None

        def codegen(context, builder, sig, args):
            mask = builder.trunc(u32(context, builder, args[5], sig.args[5]), i16)
            asm(builder, void, [i32, i64, i32, i32, i32, i16],
                "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                " [$0], [$1, {$2, $3}], [$4], $5;", "r,l,r,r,r,h,~{memory}",
                [u32(context, builder, args[0], sig.args[0]), array_address(context, builder, sig.args[1], args[1]),
                 context.cast(builder, args[2], sig.args[2], types.int32),
                 context.cast(builder, args[3], sig.args[3], types.int32),
                 u32(context, builder, args[4], sig.args[4]), mask])
            return context.get_dummy_value()
        return types.void(dst, tmap, c0, c1, bar, cta_mask), codegen

    @intrinsic
    def tma_store_2d(typingctx, tmap, c0, c1, src):
        if not isinstance(tmap, types.Array):
            return None

        def codegen(context, builder, sig, args):
            asm(builder, void, [i64, i32, i32, i32],
                "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [$0, {$1, $2}], [$3];", "l,r,r,r,~{memory}",
                [array_address(context, builder, sig.args[0], args[0]),
                 context.cast(builder, args[1], sig.args[1], types.int32),
                 context.cast(builder, args[2], sig.args[2], types.int32),
                 u32(context, builder, args[3], sig.args[3])])
            return context.get_dummy_value()
        return types.void(tmap, c0, c1, src), codegen

    def bulk_wait(read: bool):
        suffix = ".read" if read else ""
        return literal_op(lambda n: f"cp.async.bulk.wait_group{suffix} {n};", f"bulk_wait_group{suffix.replace('.', '_')}")

    @intrinsic
    def stage_acc_128b(typingctx, box, acc, chunk, tid):
        """Registers 16·chunk .. 16·chunk + 15 of a thread's m64n256 accumulator fragment (columns 32·chunk ..
        32·chunk + 31) into the warp's 16 × 32 float32 box at shared address `box` (1024-aligned), in the
        128B-swizzled image TMA reads: row r = g + 8h of the warp's 16, 16-byte chunk (2q + t // 2) XOR g."""
        if not (isinstance(acc, types.UniTuple) and acc.count == 128 and acc.dtype == types.float32):
            return None

        def codegen(context, builder, sig, args):
            base = u32(context, builder, args[0], sig.args[0])
            j = u32(context, builder, args[2], sig.args[2])
            lane = builder.and_(u32(context, builder, args[3], sig.args[3]), ir.Constant(i32, 31))
            g, t = builder.lshr(lane, ir.Constant(i32, 2)), builder.and_(lane, ir.Constant(i32, 3))
            vals = [builder.extract_value(args[1], i) for i in range(128)]
            f32 = ir.FloatType()
            default = builder.append_basic_block("stage_done")
            sw = builder.switch(j, default)
            for c in range(8):
                blk = builder.append_basic_block(f"stage_chunk{c}")
                sw.add_case(ir.Constant(i32, c), blk)
                with builder.goto_block(blk):
                    for q in range(4):            # the 8-column group q of the chunk: registers 16c + 4q ..
                        for h in range(2):        # rows g (h = 0) and g + 8 (h = 1)
                            i = 16 * c + 4 * q + 2 * h
                            row = builder.add(g, ir.Constant(i32, 8 * h))
                            c16 = builder.xor(builder.add(ir.Constant(i32, 2 * q), builder.lshr(t, ir.Constant(i32, 1))), g)
                            off = builder.add(builder.add(builder.mul(row, ir.Constant(i32, 128)),
                                                          builder.mul(c16, ir.Constant(i32, 16))),
                                              builder.mul(builder.and_(t, ir.Constant(i32, 1)), ir.Constant(i32, 8)))
                            asm(builder, void, [i32, f32, f32], "st.shared.v2.f32 [$0], {$1, $2};",
                                "r,f,f,~{memory}", [builder.add(base, off), vals[i], vals[i + 1]])
                    builder.branch(default)
            builder.position_at_end(default)
            return context.get_dummy_value()
        return types.void(box, acc, chunk, tid), codegen

    return dict(
        cluster_ctarank=sreg("cluster_ctarank", "cluster_ctarank"),
        cluster_nctarank=sreg("cluster_nctarank", "cluster_nctarank"),
        clusterid_x=sreg("clusterid.x", "clusterid_x"), nclusterid_x=sreg("nclusterid.x", "nclusterid_x"),
        cluster_arrive=simple("barrier.cluster.arrive.release.aligned;", "cluster_arrive"),
        cluster_wait=simple("barrier.cluster.wait.acquire.aligned;", "cluster_wait"),
        cluster_sync=simple("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;",
                            "cluster_sync"),
        mapa=mapa, ld_cluster_u32=ld_cluster_u32, st_cluster_u32=st_cluster_u32,
        mbar_arrive_cluster=mbar_arrive_cluster, mbar_arrive_cluster_release_cluster=mbar_arrive_cluster_release_cluster,
        tma_load_2d_multicast=tma_load_2d_multicast, tma_store_2d=tma_store_2d, bulk_commit_group=simple("cp.async.bulk.commit_group;", "bulk_commit_group"),
        bulk_wait_group=bulk_wait(False), bulk_wait_group_read=bulk_wait(True), stage_acc_128b=stage_acc_128b)


# --- the cluster twins -----------------------------------------------------------------------------------
CLUSTER_ADDRESS_BIT = 1 << 24        # simulator: a shared::cluster address (from mapa) = bit | rank << 18 | offset


def _cluster_ctarank_twin():
    _, t = _block()
    return np.uint32(t.manager.cluster_rank)


def _cluster_nctarank_twin():
    _, t = _block()
    return np.uint32(len(t.manager.cluster))


def _clusterid_x_twin():
    _, t = _block()
    return np.uint32(t.manager.grid_point[0] // t.manager.cluster_dims[0])


def _nclusterid_x_twin():
    _, t = _block()
    return np.uint32(t.manager._grid_dim[0] // t.manager.cluster_dims[0])


def _block_of(manager) -> _Block:
    st = _BLOCKS.get(manager)
    if st is None:
        st = _BLOCKS[manager] = _Block()
    return st


def _cluster_target(rank: int, what: str):
    """(manager, _Block) of block `rank` of the calling thread's cluster, which must still run."""
    sim = _sim()
    _, t = _block()
    cluster = t.manager.cluster
    if not 0 <= rank < len(cluster):
        raise sim.SimulatorError(f"{what}: block rank {rank} is not in this cluster of {len(cluster)} "
                                 f"block{'s' if len(cluster) > 1 else ''} (ranks 0..{len(cluster) - 1})")
    m = cluster[rank]
    if m.finished:
        raise sim.SimulatorError(f"{what}: block rank {rank} of the cluster (block {m.grid_point}) has exited, and its "
                                 "shared memory with it: a cluster_sync() before any block exits keeps every "
                                 "block's shared memory alive until the others are done with it")
    return m, _block_of(m)


def _split_cluster_address(caddr: int) -> tuple[int | None, int]:
    """(rank, CTA offset) of a shared::cluster address; rank None for a plain shared address (this block)."""
    if caddr & CLUSTER_ADDRESS_BIT:
        return (caddr >> 18) & 0x3F, caddr & 0x3FFFF
    return None, caddr


def _mapa_twin(addr, rank):
    _, t = _block()
    _, off = _split_cluster_address(int(addr))
    rank = int(rank)
    _cluster_target(rank, "mapa")
    if off >= SMEM_WINDOW:
        raise _sim().SimulatorError(f"mapa: {int(addr):#x} is not a shared-memory address")
    return np.uint32(CLUSTER_ADDRESS_BIT | rank << 18 | off)


def _cluster_bytes(caddr, nbytes: int, what: str):
    _, t = _block()
    rank, off = _split_cluster_address(int(caddr))
    m, st = _cluster_target(t.manager.cluster_rank if rank is None else rank, what)
    view, pos = _resolve_in(st, m, off, nbytes, what)
    return st, view, pos, off


def _ld_cluster_u32_twin(caddr):
    _, view, pos, _ = _cluster_bytes(caddr, 4, "ld_cluster_u32")
    return np.uint32(view[pos:pos + 4].view(np.uint32)[0])


def _st_cluster_u32_twin(caddr, value):
    st, view, pos, off = _cluster_bytes(caddr, 4, "st_cluster_u32")
    view[pos:pos + 4] = np.array([int(value) & 0xFFFFFFFF], dtype=np.uint32).view(np.uint8)
    mask = st.written.get(off - pos)
    if mask is not None:
        mask[0][pos // mask[1]] = 1


def _mbar_arrive_cluster_twin(caddr):
    _, t = _block()
    rank, off = _split_cluster_address(int(caddr))
    target = _cluster_target(t.manager.cluster_rank if rank is None else rank, "mbar_arrive_cluster")[1]
    _arrive(off, 0, "mbar_arrive_cluster", target)


def _tma_load_2d_multicast_twin(dst, tmap, c0, c1, bar, cta_mask):
    """One box read once, landing at the same shared offset `dst` of every block whose rank bit is set in
    cta_mask, each delivery completing bytes on the mbarrier at offset `bar` of that block."""
    sim = _sim()
    _, t = _block()
    what = "tma_load_2d_multicast"
    mask, n = int(cta_mask) & 0xFFFF, len(t.manager.cluster)
    if int(cta_mask) >> 16 or mask == 0:
        raise sim.SimulatorError(f"{what}: the CTA mask {int(cta_mask):#b} must name 1 to 16 blocks of the cluster "
                                 "(one bit per cluster rank)")
    if mask >> n:
        outside = [r for r in range(16) if mask >> r & 1 and r >= n]
        raise sim.SimulatorError(f"{what}: the CTA mask {mask:#b} names block rank{'s' if len(outside) > 1 else ''} "
                                 f"{', '.join(map(str, outside))}, but the cluster has {n} block{'s' if n > 1 else ''}")
    tm = _sim_tmap(tmap, what)
    dst, bar = int(dst), int(bar)
    box = _tma_box(tm, dst, int(c0), int(c1), what)
    for rank in range(n):
        if mask >> rank & 1:
            m, st = _cluster_target(rank, what)
            b = st.barriers.get(bar)
            if b is None:
                raise sim.SimulatorError(
                    f"{what}: block rank {rank} of the cluster has no mbarrier at shared {bar:#x} yet: every block "
                    "initialises its barriers, fence_mbarrier_init(), then cluster_sync() before any block "
                    "multicasts into it")
            _tma_land(st, b, tm, dst, box, f"thread {t.thread_id} of cluster rank {t.manager.cluster_rank}, into "
                      f"rank {rank}", what)


def _cluster_state(t) -> dict:
    head = _block_of(t.manager.cluster[0])
    if not hasattr(head, "cluster_barrier"):
        head.cluster_barrier = {"phase": 0, "arrived": set(), "pending": {}}
    return head.cluster_barrier


def _cluster_arrive_twin():
    sim = _sim()
    _, t = _block()
    cb = _cluster_state(t)
    me = (t.manager.cluster_rank, t.thread_id)
    if me in cb["pending"]:
        raise sim.SimulatorError(f"cluster_arrive: thread {t.thread_id} of cluster rank {me[0]} arrives again before "
                                 "its cluster_wait: each arrive is followed by a wait")
    cb["pending"][me] = cb["phase"]
    cb["arrived"].add(me)
    cluster = t.manager.cluster
    total = sum(m.nthreads for m in cluster)
    if len(cb["arrived"]) == total:
        cb["phase"] += 1
        cb["arrived"] = set()
        for m in cluster:
            sim.unpark(("cluster", cb["phase"] - 1), m)
    else:
        what = (f"cluster_wait: phase {cb['phase']} of the cluster barrier has {len(cb['arrived'])} of {total} "
                f"arrivals (every thread of the cluster's {len(cluster)} blocks must cluster_arrive; a thread that "
                "exited never will)")
        for m in cluster:
            sim.describe_parked(("cluster", cb["phase"]), what, m)


def _cluster_wait_twin():
    sim = _sim()
    _, t = _block()
    cb = _cluster_state(t)
    me = (t.manager.cluster_rank, t.thread_id)
    if me not in cb["pending"]:
        raise sim.SimulatorError(f"cluster_wait: thread {t.thread_id} of cluster rank {me[0]} waits without a "
                                 "cluster_arrive before it")
    phase = cb["pending"].pop(me)
    while cb["phase"] == phase:
        total = sum(m.nthreads for m in t.manager.cluster)
        sim.park(("cluster", phase), f"cluster_wait: phase {phase} of the cluster barrier has {len(cb['arrived'])} "
                 f"of {total} arrivals (every thread of the cluster's {len(t.manager.cluster)} blocks must "
                 "cluster_arrive; a thread that exited never will)")


def _cluster_sync_twin():
    _cluster_arrive_twin()
    _cluster_wait_twin()


# TMA stores: a thread's bulk async-groups. The source bytes are read, and the box written to global memory,
# at the latest moment the hardware may read them: when bulk_wait_group(_read) retires the group. A kernel
# that rewrites its staging buffer before that wait stores the new bytes here, as it may on a GPU.
def _bulk_state(st: _Block, tid: int) -> dict:
    if not hasattr(st, "bulk"):
        st.bulk = {}
    return st.bulk.setdefault(tid, {"open": [], "groups": []})


def _tma_store_2d_twin(tmap, c0, c1, src):
    st, t = _block()
    tm = _sim_tmap(tmap, "tma_store_2d")
    src = int(src)
    align = 128 if tm.mode == "none" else 8 * SWIZZLE_SPAN[tm.mode]
    if src % align:
        raise _sim().SimulatorError(f"tma_store_2d: source {src:#x} is not {align}-byte aligned (a {tm.mode} box)")
    row_bytes = tm.box_cols * tm.itemsize
    view, off = _resolve(st, src, tm.box_rows * row_bytes, "tma_store_2d")
    _bulk_state(st, t.thread_id)["open"].append((tm, int(c0), int(c1), view, off))


def _bulk_commit_group_twin():
    st, t = _block()
    me = _bulk_state(st, t.thread_id)
    me["groups"].append(me["open"])
    me["open"] = []


def _retire_stores(group):
    for tm, c0, c1, view, off in group:
        row_bytes = tm.box_cols * tm.itemsize
        pos = off + tma_box_offsets(tm.box_rows, row_bytes, tm.mode).reshape(-1)
        box = np.ascontiguousarray(view[pos]).view(tm.array.dtype).reshape(tm.box_rows, tm.box_cols)
        r0, r1 = max(c1, 0), min(c1 + tm.box_rows, tm.rows)
        k0, k1 = max(c0, 0), min(c0 + tm.box_cols, tm.cols)
        if r0 < r1 and k0 < k1:      # the part of the box outside the tensor is not written
            tm.array[r0:r1, k0:k1] = box[r0 - c1:r1 - c1, k0 - c0:k1 - c0]


def _bulk_wait_twin(name: str):
    def twin(n):
        st, t = _block()
        me = _bulk_state(st, t.thread_id)
        keep = int(n)
        while len(me["groups"]) > keep:
            _retire_stores(me["groups"].pop(0))
    twin.__name__ = name
    return twin


def _stage_acc_128b_twin(box, acc, chunk, tid):
    st, _ = _block()
    box, j, lane = int(box), int(chunk), int(tid) % 32
    if box % 1024:
        raise _sim().SimulatorError(f"stage_acc_128b: the box at shared {box:#x} is not 1024-byte aligned (its "
                                    "128B swizzle reads absolute address bits)")
    if len(acc) != 128 or not 0 <= j < 8:
        raise ValueError(f"stage_acc_128b: an m64n256 fragment (128 float32) and a chunk 0..7, got {len(acc)}, {j}")
    view, off = _resolve(st, box, 16 * 128, "stage_acc_128b")
    g, t = lane // 4, lane % 4
    mask = st.written.get(box - off)
    for q in range(4):
        for h in range(2):
            i = 16 * j + 4 * q + 2 * h
            pos = off + (g + 8 * h) * 128 + (((2 * q + t // 2) ^ g) * 16) + (t & 1) * 8
            view[pos:pos + 8] = np.array([acc[i], acc[i + 1]], dtype=np.float32).view(np.uint8)
            if mask is not None:
                mask[0][pos // mask[1]:(pos + 8) // mask[1]] = 1


def _block_end(manager):
    """A block may not end with TMA stores it has not waited for (their source is its shared memory)."""
    st = _BLOCKS.get(manager)
    for tid, me in (getattr(st, "bulk", None) or {}).items():
        if me["open"] or me["groups"]:
            raise _sim().SimulatorError(
                f"block {manager.grid_point} ended while thread {tid} still has "
                f"{len(me['open']) + sum(len(g) for g in me['groups'])} TMA store(s) in flight "
                f"({len(me['open'])} not committed): bulk_commit_group() and bulk_wait_group(0) before the block "
                "exits, or its shared memory may be reused while the copy still reads it")


def _cluster_twins():
    _sim().add_block_listener(lambda manager: None, _block_end)
    return dict(
        cluster_ctarank=_cluster_ctarank_twin, cluster_nctarank=_cluster_nctarank_twin,
        clusterid_x=_clusterid_x_twin, nclusterid_x=_nclusterid_x_twin,
        cluster_arrive=_cluster_arrive_twin, cluster_wait=_cluster_wait_twin, cluster_sync=_cluster_sync_twin,
        mapa=_mapa_twin, ld_cluster_u32=_ld_cluster_u32_twin, st_cluster_u32=_st_cluster_u32_twin,
        mbar_arrive_cluster=_mbar_arrive_cluster_twin, mbar_arrive_cluster_release_cluster=_mbar_arrive_cluster_twin,
        tma_load_2d_multicast=_tma_load_2d_multicast_twin,
        tma_store_2d=_tma_store_2d_twin, bulk_commit_group=_bulk_commit_group_twin,
        bulk_wait_group=_bulk_wait_twin("bulk_wait_group"), bulk_wait_group_read=_bulk_wait_twin("bulk_wait_group_read"),
        stage_acc_128b=_stage_acc_128b_twin)


_CLUSTER_FUNCTIONS = _cluster_twins() if SIMULATOR else _cluster_intrinsics()
globals().update(_CLUSTER_FUNCTIONS)
__all__ += sorted(_CLUSTER_FUNCTIONS) + ["cluster_dims", "check_cluster_grid", "MAX_CLUSTER_BLOCKS"]
