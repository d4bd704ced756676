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
  is an error naming the barrier.
* **TMA copies** (``tma_load_2d``) read their box from global memory at issue (zero fill outside the
  tensor, as the hardware's OOB fill) and write shared memory when the copy is *delivered*: at the latest
  when a thread waits on the copy's mbarrier, so a kernel that reads the tile before waiting reads stale
  bytes here as on the GPU. The tensor map is a ``uint64[16]`` array on both sides: on the GPU the 128
  bytes ``cuTensorMapEncodeTiled`` made, on the simulator a key into the host's table of map objects.
* ``setmaxnreg_inc/dec`` are warpgroup collectives that check the count; ``named_barrier_sync(id, n)``
  waits for n threads (whole warps) at barrier id.

Layout truth. The swizzle (:func:`swizzle`), the shared-memory image of a TMA box (:func:`tma_box_offsets`),
the addresses a wgmma operand descriptor names (:func:`operand_addresses`), the descriptor's bit fields
(:func:`make_descriptor`, :func:`decode_descriptor`) and the accumulator's owner of each element
(:func:`acc_element`) live here and nowhere else: the twins, the tests, the chapter and the kernels' device
function :func:`make_desc` all use them. Every one of them was checked on the H200 (128B/64B/32B and no
swizzle, FP16/BF16/TF32, m64nNk16 for N = 8, 64, 256; TMA's image of a 128B-swizzled box equals the layout
wgmma reads).

Not modelled: a thread's own ``st.shared`` into bytes a pending wgmma reads (only TMA writes are checked),
reading the accumulator before ``wgmma_wait`` (the twin's result is final at once), clusters and TMA
multicast.
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

from lib.mode import SIMULATOR

WARPGROUP = 128
SWIZZLE_MODES = {"none": 0, "128B": 1, "64B": 2, "32B": 3}   # the descriptor's 2-bit field (bits 62-63)
SWIZZLE_SPAN = {"none": 0, "128B": 128, "64B": 64, "32B": 32}  # bytes per swizzled row
SWIZZLE_MASK = {"none": 0, "128B": 7, "64B": 3, "32B": 1}
KINDS = {"f16": 2, "bf16": 2, "tf32": 4}                    # operand bytes per element
K_PER_WGMMA = {"f16": 16, "bf16": 16, "tf32": 8}             # 32 bytes of K per instruction in all three
N_SIZES = (8, 16, 32, 64, 128, 256)
SMEM_WINDOW = 232448                                         # bytes of shared memory a block may use (H200)


# --- layout truth (pure Python / numpy: twins, tests, widget, chapter) ---------------------------------
def swizzle(addr, mode: str):
    """The shared-memory address a swizzled access really touches: the 16-byte chunk bits [4, 7) of the
    address are XORed with bits [7, 10) (128B), [7, 9) (64B), bit 7 (32B). Absolute address bits: a tile
    must start on a 1024/512/256-byte boundary for its rows to swizzle as its own row numbers."""
    if mode not in SWIZZLE_MODES:
        raise ValueError(f"swizzle mode must be one of {sorted(SWIZZLE_MODES)}, got {mode!r}")
    if mode == "none":
        return addr
    return addr ^ (((addr >> 7) & SWIZZLE_MASK[mode]) << 4)


def tma_box_offsets(rows: int, row_bytes: int, mode: str) -> np.ndarray:
    """offsets[r, b]: the byte offset from the (atom-aligned) destination at which a TMA tensor copy writes
    byte b of box row r. Rows are row_bytes apart; swizzled modes need row_bytes == the swizzle span."""
    if mode != "none" and row_bytes != SWIZZLE_SPAN[mode]:
        raise ValueError(f"a {mode}-swizzled box row must be exactly {SWIZZLE_SPAN[mode]} bytes, not {row_bytes}")
    lin = np.arange(rows)[:, None] * row_bytes + np.arange(row_bytes)[None, :]
    return swizzle(lin, mode)


def kmajor_layout(rows: int, kelems: int, itemsize: int, mode: str):
    """Element offsets (rows × kelems) of a K-major operand tile that wgmma reads with the descriptor
    fields (lbo, sbo) returned, and the byte step of one instruction's K (32 bytes).

    none: 8-row × 16-byte core matrices stored whole (128 B), K-adjacent cores LBO = 128 B apart, 8-row
    groups SBO apart. 128B/64B/32B: rows of exactly the swizzle span (= TMA's image of a box of that width),
    8-row atoms SBO = 8 × span apart, LBO unused (16)."""
    r = np.arange(rows)[:, None]
    k = np.arange(kelems)[None, :]
    if mode == "none":
        per_core = 16 // itemsize
        lbo, sbo = 128, 128 * (kelems // per_core)
        byte = (r % 8) * 16 + (k // per_core) * lbo + (r // 8) * sbo + (k % per_core) * itemsize
    else:
        span = SWIZZLE_SPAN[mode]
        if kelems * itemsize != span:
            raise ValueError(f"a {mode}-swizzled K-major tile holds {span} bytes of K per row, not "
                             f"{kelems * itemsize}")
        byte = tma_box_offsets(rows, span, mode)[:, ::itemsize][:, :kelems]
        lbo, sbo = 16, 8 * span
    return (byte // itemsize).astype(np.int64), lbo, sbo, 32


def make_descriptor(addr: int, lbo: int, sbo: int, mode: str) -> int:
    """The 64-bit wgmma shared-memory matrix descriptor: start address >> 4 in bits 0-13, leading byte
    offset >> 4 in bits 16-29, stride byte offset >> 4 in bits 32-45, base offset 0 (bits 49-51), swizzle
    mode in bits 62-63."""
    return (((addr & 0x3FFFF) >> 4) | ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32
            | SWIZZLE_MODES[mode] << 62)


def decode_descriptor(desc: int) -> dict:
    """The fields of a descriptor (as Python ints; the mode by name)."""
    desc = int(desc) & 0xFFFFFFFFFFFFFFFF
    mode = {v: k for k, v in SWIZZLE_MODES.items()}[desc >> 62]
    return dict(start=(desc & 0x3FFF) << 4, lbo=((desc >> 16) & 0x3FFF) << 4, sbo=((desc >> 32) & 0x3FFF) << 4,
                base_offset=(desc >> 49) & 7, mode=mode)


def operand_addresses(desc: int, rows: int, kbytes: int = 32) -> np.ndarray:
    """addr[r, b]: the shared address of byte b (of K) of row r of a K-major operand that a wgmma reads
    through `desc`. Swizzled: rows of the span within 8-row atoms SBO apart, XOR on absolute address bits;
    the start must lie in the first row of its atom (base offset 0: the case measured on the H200)."""
    d = decode_descriptor(desc)
    start, lbo, sbo, mode = d["start"], d["lbo"], d["sbo"], d["mode"]
    r = np.arange(rows)[:, None]
    b = np.arange(kbytes)[None, :]
    if mode == "none":
        return start + (r % 8) * 16 + (r // 8) * sbo + (b // 16) * lbo + b % 16
    span = SWIZZLE_SPAN[mode]
    if d["base_offset"] or start % (8 * span) >= span or start % span + kbytes > span:
        raise ValueError(
            f"wgmma descriptor starts at shared address {start:#x}, which is not in the first {span}-byte row of "
            f"a {8 * span}-byte {mode} swizzle atom (or its {kbytes} bytes of K cross the row): only atom-aligned "
            "tiles (base offset 0) are modelled; place the tile on a 1024-byte boundary")
    return swizzle(start + (r % 8) * span + (r // 8) * sbo + b, mode)


def acc_element(tid, i):
    """(row, col) in the m64nN tile of accumulator register i of warpgroup thread tid (0-127), measured:
    warp w = tid // 32 owns rows 16w..16w+15; g = lane // 4, t = lane % 4."""
    w, lane = tid // 32, tid % 32
    g, t = lane // 4, lane % 4
    return 16 * w + g + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * t + (i & 1)


def acc_owner(n: int):
    """(row, col) arrays of shape (128, n / 2): element i of thread tid's accumulator."""
    return acc_element(np.arange(WARPGROUP)[:, None], np.arange(n // 2)[None, :])


def tf32_truncate(x) -> np.ndarray:
    """float32 with its low 13 mantissa bits cleared: what the H200's wgmma makes of TF32 operands."""
    return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


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
    st, _ = _block()
    data = _host_bytes(arr)
    ptr = data.ctypes.data
    for start, view, p in st.arrays:
        if p <= ptr < p + view.size:
            return np.uint32(start + ptr - p)
    start = st.next_addr
    st.next_addr = start + ((data.size + 15) // 16) * 16
    if st.next_addr > SMEM_WINDOW:
        raise _sim().SimulatorError(f"the block's shared arrays need {st.next_addr} bytes; a block may use "
                                    f"{SMEM_WINDOW}")
    st.arrays.append((start, data, ptr))
    return np.uint32(start)


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
    def __init__(self, addr: int, count: int):
        self.addr, self.count = addr, count
        self.phase = 0
        self.pending = count
        self.expected = 0          # bytes announced by expect_tx in this phase
        self.delivered = 0         # bytes delivered in this phase
        self.in_flight: list = []  # copies issued, not yet delivered: (view, dst positions, bytes, label)

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
        for view, pos, data, _ in b.in_flight:
            view[pos] = data
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
        sim.unpark(("mbar", b.addr))
    else:
        sim.describe_parked(("mbar", b.addr), "mbar_try_wait on " + b.describe())


def _mbar_init_twin(bar, count):
    st, _ = _block()
    addr, count = int(bar), int(count)
    if addr % 8:
        raise _sim().SimulatorError(f"mbar_init: an mbarrier is 8 bytes and 8-byte aligned; {addr:#x} is not")
    _resolve(st, addr, 8, "mbar_init")
    if not 1 <= count < (1 << 20):
        raise ValueError(f"mbar_init: the arrival count must be in 1..2^20-1, got {count}")
    st.barriers[addr] = _MBarrier(addr, count)


def _arrive(bar, nbytes: int, what: str):
    st, _ = _block()
    b = _barrier(st, bar, what)
    if b.pending == 0:
        raise _sim().SimulatorError(f"{what}: more arrivals than the {b.count} the " + b.describe()
                                    + " was initialised with")
    b.expected += nbytes
    b.pending -= 1
    _progress(b, deliver=_sim().parked(("mbar", b.addr)) > 0)


def _mbar_arrive_twin(bar):
    _arrive(bar, 0, "mbar_arrive")


def _mbar_arrive_expect_tx_twin(bar, nbytes):
    _arrive(bar, int(nbytes), "mbar_arrive_expect_tx")


def _mbar_try_wait_twin(bar, parity):
    st, _ = _block()
    b = _barrier(st, bar, "mbar_try_wait")
    parity = int(parity) & 1
    _progress(b, deliver=True)
    while (b.phase & 1) == parity:
        _sim().park(("mbar", b.addr), "mbar_try_wait on " + b.describe(parity))
        _progress(b, deliver=True)
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


def _tma_load_2d_twin(dst, tmap, c0, c1, bar):
    sim = _sim()
    st, t = _block()
    if int(tmap[0]) != _TMAP_MAGIC or int(tmap[1]) not in _SIM_TMAPS:
        raise sim.SimulatorError("tma_load_2d: the tensor map argument was not made by tensor_map_2d")
    tm = _SIM_TMAPS[int(tmap[1])]
    dst, c0, c1 = int(dst), int(c0), int(c1)
    align = 128 if tm.mode == "none" else 8 * SWIZZLE_SPAN[tm.mode]
    if dst % align:
        raise sim.SimulatorError(f"tma_load_2d: destination {dst:#x} is not {align}-byte aligned (needed for a "
                                 f"{tm.mode} box whose image wgmma reads)")
    b = _barrier(st, bar, "tma_load_2d")
    row_bytes = tm.box_cols * tm.itemsize
    view, off = _resolve(st, dst, tm.box_rows * row_bytes, "tma_load_2d")
    lo, hi = dst, dst + tm.box_rows * row_bytes
    for wg, plo, phi in _pending_wgmma_ranges(st):
        if plo < hi and lo < phi:
            raise sim.SimulatorError(
                f"race: tma_load_2d (thread {t.thread_id}) writes shared bytes [{lo:#x}, {hi:#x}) that a wgmma of "
                f"warpgroup {wg} issued earlier still reads ([{plo:#x}, {phi:#x})): that warpgroup must pass "
                "wgmma_wait (and signal it, e.g. on an 'empty' mbarrier) before the slot is refilled")
    box = np.zeros((tm.box_rows, tm.box_cols), dtype=tm.array.dtype)
    r0, r1 = max(c1, 0), min(c1 + tm.box_rows, tm.rows)
    k0, k1 = max(c0, 0), min(c0 + tm.box_cols, tm.cols)
    if r0 < r1 and k0 < k1:
        box[r0 - c1:r1 - c1, k0 - c0:k1 - c0] = tm.array[r0:r1, k0:k1]
    pos = off + tma_box_offsets(tm.box_rows, row_bytes, tm.mode).reshape(-1)
    b.in_flight.append((view, pos, box.reshape(-1).view(np.uint8).copy(), (lo, hi)))
    if sim.parked(("mbar", b.addr)):
        _progress(b, deliver=True)


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
                for _, _, _, (clo, chi) in copy_bar.in_flight:
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


def _named_barrier_sync_twin(barrier_id, nthreads):
    sim = _sim()
    st, t = _block()
    bid, nthreads = int(barrier_id), int(nthreads)
    if not 0 <= bid < 16:
        raise ValueError(f"named_barrier_sync: barrier id must be in 0..15, got {bid}")
    if nthreads % 32 or not 0 < nthreads <= t.manager.nthreads:
        raise ValueError(f"named_barrier_sync: the thread count must be a multiple of 32 up to the block's "
                         f"{t.manager.nthreads}, got {nthreads}")
    arrived = st.named.setdefault(bid, [])
    arrived.append(t.thread_id)
    if len(arrived) == nthreads:
        del st.named[bid]
        sim.unpark(("named", bid))
    else:
        what = f"named_barrier_sync({bid}, {nthreads}): {len(arrived)} of {nthreads} threads arrived"
        sim.describe_parked(("named", bid), what)
        sim.park(("named", bid), what)


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
def _gpu_intrinsics():
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
    void = ir.VoidType()

    def asm(builder, ret, argtys, text, cons, args, name="asm"):
        return builder.asm(ir.FunctionType(ret, argtys), text, cons, args, True, name)

    def u32(context, builder, v, ty):
        return context.cast(builder, v, ty, types.uint32)

    def simple(text, name):
        @intrinsic
        def op(typingctx):
            def codegen(context, builder, sig, args):
                asm(builder, void, [], text, "~{memory}", [])
                return context.get_dummy_value()
            return types.void(), codegen
        op.__name__ = name
        return op

    @intrinsic
    def smem_u32(typingctx, arr):
        if not isinstance(arr, types.Array):
            return None

        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, value=args[0]).data
            return asm(builder, i32, [i64], "{ .reg .u64 t; cvta.to.shared.u64 t, $1; cvt.u32.u64 $0, t; }",
                       "=r,l", [builder.ptrtoint(data, i64)])
        return types.uint32(arr), codegen

    def array_address(context, builder, ty, value):
        return builder.ptrtoint(context.make_array(ty)(context, builder, value=value).data, i64)

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

    @intrinsic
    def wgmma_wait(typingctx, n):
        if not isinstance(n, types.IntegerLiteral):
            return None

        def codegen(context, builder, sig, args):
            asm(builder, void, [], f"wgmma.wait_group.sync.aligned {n.literal_value};", "~{memory}", [])
            return context.get_dummy_value()
        return types.void(n), codegen

    def setmaxnreg(inc: bool):
        @intrinsic
        def op(typingctx, count):
            if not isinstance(count, types.IntegerLiteral):
                return None
            text = f"setmaxnreg.{'inc' if inc else 'dec'}.sync.aligned.u32 {count.literal_value};"

            def codegen(context, builder, sig, args):
                asm(builder, void, [], text, "~{memory}", [])
                return context.get_dummy_value()
            return types.void(count), codegen
        return op

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
        wgmma_commit=simple("wgmma.commit_group.sync.aligned;", "wgmma_commit"), wgmma_wait=wgmma_wait,
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
