"""Kernels of the scan chapter: three block-level scans (Hillis–Steele, Blelloch, warp shuffles), the
three-phase scan of any length built from them, and the single-pass scan with decoupled look-back
(Merrill & Garland, 2016).

A scan here is the inclusive prefix sum ``out[i] = x[0] + ... + x[i]`` of float32 (the exclusive one is
the same shifted by one). Host launchers check their arguments and take numba device arrays.

Where the rest lives: chapters/scan.md (the page); lib/grading/variants/scan.py (its exercises' known-wrong
variants); tests/test_scan.py (tests); data/results/scan.* (recorded on the H200). Record it with ``python -m
tools.record scan`` on a GPU; on the simulator the same kernels run through the page's checks and the tests.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, int32, uint32, uint64

import lib
from lib.runtime.vector import data_address, load_float4, store_float4

from lib.measure.bench import Baseline, Ladder, Rung, copy_ceiling
from lib.grading.exercises import EXERCISES
from lib.runtime.quiet_launches import quiet, quiet_kernels
from lib.runtime.validate import require

CHAPTER = "scan"
WARP = 32
FULL_MASK = 0xFFFFFFFF
THREADS = 256                 # threads per block of the block scans: 8 warps
WARPS = THREADS // WARP
BLELLOCH_ELEMS = 2 * THREADS  # Blelloch's tree has one leaf pair per thread
LOG_BANKS = 5                 # 32 shared-memory banks of 4 bytes
BLELLOCH_PADDED = BLELLOCH_ELEMS + (BLELLOCH_ELEMS >> LOG_BANKS)

# The single-pass scan: 256 threads × 16 floats = 4096 floats (16 KiB) per tile, so each thread keeps 16
# loads in flight and the per-tile look-back is paid once per 32 KiB moved.
SINGLE_PASS_THREADS = 256
ITEMS_PER_THREAD = 16

# The tuned single pass: one 64-bit word per tile holds status and value together, and each thread moves
# its 32 floats as eight 16-byte loads and stores: 256 × 32 = 8192 floats (32 KiB) per tile.
PACKED_THREADS = 256
PACKED_ITEMS = 32
SIM_PACKED_TILE = (32, 8)  # the simulator's packed tile: 256 floats, so a thousand span several tiles
VECTOR = 4       # floats per 16-byte load

# Status of a tile in the single-pass scan (one int32 per tile, zeroed before each launch).
EMPTY = 0        # nothing published yet
AGGREGATE = 1    # aggregates[tile] holds the sum of the tile's own elements
PREFIX = 2       # prefixes[tile] holds the inclusive prefix: the sum of everything up to the tile's end


# --- block-level scans ------------------------------------------------------------------------------
@cuda.jit
def scan_block_hillis_steele(x, out, block_sums):
    """Inclusive scan of each block's THREADS elements by Hillis–Steele doubling, double-buffered.

    Step k adds the element 2^k places to the left: log2(THREADS) = 8 steps, THREADS·log2(THREADS) adds
    (not work-efficient). Each step reads one buffer and writes the other, so one barrier per step
    separates every read of a step from the writes of the next (one buffer would need two barriers).
    Memory: one coalesced float read and one written per element (8 bytes), plus one float per block in
    block_sums; shared accesses are consecutive words, conflict-free.
    Launch: 1-D, THREADS threads, ceil(n / THREADS) blocks; out[i] is the scan within i's block, and
    block_sums[b] the total of block b (missing elements count as 0).
    """
    buffers = cuda.shared.array((2, THREADS), float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * THREADS + t
    buffers[0, t] = x[i] if i < x.size else float32(0)
    cuda.syncthreads()
    src = 0
    offset = 1
    while offset < THREADS:
        value = buffers[src, t]
        if t >= offset:
            value += buffers[src, t - offset]
        buffers[1 - src, t] = value   # the other buffer: nobody reads it during this step
        cuda.syncthreads()            # every write of this step lands before any read of the next
        src = 1 - src
        offset *= 2
    if i < x.size:
        out[i] = buffers[src, t]
    if t == THREADS - 1:
        block_sums[cuda.blockIdx.x] = buffers[src, t]


@cuda.jit(device=True)
def padded(index):
    """Shared-memory slot of tree node `index`: one pad word every 32 words, so the power-of-two strides
    of the Blelloch tree spread over the 32 banks instead of piling onto a few."""
    return index + (index >> LOG_BANKS)


@cuda.jit
def scan_block_blelloch(x, out, block_sums):
    """Inclusive scan of each block's BLELLOCH_ELEMS = 2·THREADS elements by Blelloch's up-sweep /
    down-sweep (work-efficient: about 2·n adds in 2·log2(n) steps).

    The up-sweep builds partial sums in a balanced tree in place; the root is the block total. Replacing
    the root by 0 and sweeping down (each node hands its value to its left child and value + left sum to
    its right child) leaves the exclusive scan; adding each element gives the inclusive one.
    Memory: two coalesced float reads and writes per thread (8 bytes per element) plus one float per block
    in block_sums. Tree strides are powers of two, which would hit the same bank; `padded` inserts one
    word every 32 so most of those accesses land in distinct banks.
    Launch: 1-D, THREADS threads, ceil(n / BLELLOCH_ELEMS) blocks.
    """
    tree = cuda.shared.array(BLELLOCH_PADDED, float32)
    t = cuda.threadIdx.x
    base = cuda.blockIdx.x * BLELLOCH_ELEMS
    a, b = t, t + THREADS                      # coalesced: thread t loads elements t and t + THREADS
    xa = x[base + a] if base + a < x.size else float32(0)
    xb = x[base + b] if base + b < x.size else float32(0)
    tree[padded(a)] = xa
    tree[padded(b)] = xb
    stride = 1
    active = THREADS
    while active > 0:                          # up-sweep: `active` nodes, each 2·stride leaves wide
        cuda.syncthreads()
        if t < active:
            left = stride * (2 * t + 1) - 1
            right = stride * (2 * t + 2) - 1
            tree[padded(right)] += tree[padded(left)]
        stride *= 2
        active //= 2
    if t == 0:                                 # thread 0 wrote the root in the last step: no barrier
        root = padded(BLELLOCH_ELEMS - 1)
        block_sums[cuda.blockIdx.x] = tree[root]
        tree[root] = 0
    active = 1
    while active < BLELLOCH_ELEMS:             # down-sweep: the same tree, root to leaves
        stride //= 2
        cuda.syncthreads()
        if t < active:
            left = stride * (2 * t + 1) - 1
            right = stride * (2 * t + 2) - 1
            left_sum = tree[padded(left)]
            tree[padded(left)] = tree[padded(right)]
            tree[padded(right)] += left_sum
        active *= 2
    cuda.syncthreads()
    if base + a < x.size:
        out[base + a] = tree[padded(a)] + xa   # exclusive + own element = inclusive
    if base + b < x.size:
        out[base + b] = tree[padded(b)] + xb


@cuda.jit(device=True)
def warp_inclusive_scan(value, lane):
    """Inclusive scan across the 32 lanes of a warp: Hillis–Steele in registers, five shfl_up_sync steps.
    Every lane of the warp must call it (full mask)."""
    offset = 1
    while offset < WARP:
        left = cuda.shfl_up_sync(FULL_MASK, value, offset)
        if lane >= offset:                     # lanes below `offset` got their own value back: skip it
            value += left
        offset *= 2
    return value


@cuda.jit
def scan_block_warp_shuffle(x, out, block_sums):
    """Inclusive scan of each block's THREADS elements with warp shuffles: each warp scans its 32 values in
    registers, warp 0 scans the WARPS warp totals, and each warp adds the total of the warps before it.

    Memory: one coalesced float read and written per element, one float per block to block_sums; shared
    memory holds only WARPS floats, and two barriers replace Hillis–Steele's eight.
    Launch: 1-D, THREADS threads (a multiple of 32, at most 32 warps), ceil(n / THREADS) blocks.
    """
    warp_sums = cuda.shared.array(WARPS, float32)
    t = cuda.threadIdx.x
    lane, warp = t % WARP, t // WARP
    i = cuda.blockIdx.x * THREADS + t
    value = warp_inclusive_scan(x[i] if i < x.size else float32(0), lane)
    if lane == WARP - 1:
        warp_sums[warp] = value
    cuda.syncthreads()
    if warp == 0:
        total = warp_inclusive_scan(warp_sums[lane] if lane < WARPS else float32(0), lane)
        if lane < WARPS:
            warp_sums[lane] = total            # lane w reads and writes slot w only: no hazard
    cuda.syncthreads()
    if warp > 0:
        value += warp_sums[warp - 1]
    if i < x.size:
        out[i] = value
    if t == 0:
        block_sums[cuda.blockIdx.x] = warp_sums[WARPS - 1]


@cuda.jit
def add_block_offsets(out, scanned_sums, elems_per_block):
    """out[i] += scanned_sums[b - 1] for every element i of block b ≥ 1: phase 3 of the three-phase scan.

    Memory: reads and writes out once more (8 bytes per element) — the price of three phases; the offset
    is one broadcast load per block.
    Launch: 1-D, THREADS threads, one block per scanned block except the first (grid = blocks - 1).
    """
    b = cuda.blockIdx.x + 1
    offset = scanned_sums[b - 1]
    for j in range(cuda.threadIdx.x, elems_per_block, THREADS):
        i = b * elems_per_block + j
        if i < out.size:
            out[i] += offset


BLOCK_SCANS = {  # kind -> (kernel, elements per block)
    "hillis_steele": (scan_block_hillis_steele, THREADS),
    "blelloch": (scan_block_blelloch, BLELLOCH_ELEMS),
    "warp_shuffle": (scan_block_warp_shuffle, THREADS),
}


@functools.lru_cache(maxsize=32)
def _scratch(purpose: str, n: int, dtype: str):
    """A device array reused across calls of the same size, so a timed launcher does not pay cudaMalloc
    (and the deferred cudaFree) on every call. Only valid on one stream, one call at a time."""
    return cuda.device_array(n, dtype=np.dtype(dtype))


def scan_block(x, out, kind="warp_shuffle"):
    """out = the inclusive scan of x within each block of the block scan `kind` (no carry between blocks):
    what phase 1 of the three-phase scan computes."""
    require(x, "x", ndim=1, where="scan_block")
    require(out, "out", shape=x.shape, where="scan_block")
    kernel, elems = _block_scan(kind)
    if x.size:
        blocks = (x.size + elems - 1) // elems
        kernel[blocks, THREADS](x, out, _scratch(f"block_sums/{kind}", blocks, "float32"))


def _block_scan(kind):
    if kind not in BLOCK_SCANS:
        raise ValueError(f"unknown block scan {kind!r}: one of {', '.join(BLOCK_SCANS)}")
    return BLOCK_SCANS[kind]


def _three_phase(x, out, kind, level):
    kernel, elems = BLOCK_SCANS[kind]
    blocks = (x.size + elems - 1) // elems
    sums = _scratch(f"sums/{kind}/{level}", blocks, "float32")
    kernel[blocks, THREADS](x, out, sums)                   # phase 1: scan each block, keep its total
    if blocks > 1:
        scanned = _scratch(f"scanned/{kind}/{level}", blocks, "float32")
        _three_phase(sums, scanned, kind, level + 1)        # phase 2: scan the totals (recursively)
        add_block_offsets[blocks - 1, THREADS](out, scanned, elems)  # phase 3: add what came before


def scan_three_phase(x, out, kind="warp_shuffle"):
    """out = inclusive scan of x in three phases: block scans (with the block scan `kind`) that also write
    each block's total; a scan of those totals (the same function, recursively, until one block holds
    them); and a pass adding to each block the scanned total of the blocks before it."""
    require(x, "x", ndim=1, where="scan_three_phase")
    require(out, "out", shape=x.shape, where="scan_three_phase")
    _block_scan(kind)
    if x.size:
        _three_phase(x, out, kind, 0)


# --- single pass: decoupled look-back ----------------------------------------------------------------
@cuda.jit(device=True)
def warp_broadcast_sum(value, lane):
    """The sum of `value` over the 32 lanes, the same float in every lane (shfl_down tree to lane 0, then
    one broadcast, so every lane holds lane 0's bits rather than its own rounding of the sum)."""
    offset = WARP // 2
    while offset > 0:
        value += cuda.shfl_down_sync(FULL_MASK, value, offset)
        offset //= 2
    return cuda.shfl_sync(FULL_MASK, value, 0)


@cuda.jit(device=True)
def publish(tile, flag, value, values, status):
    """Make values[tile] = value visible to every block, then set status[tile] = flag.

    The fence orders the two writes for every observer on the GPU: a block that sees the flag (through an
    atomic read, then its own fence) also sees the value. The flag is written with an atomic so that it
    is a single, strong 32-bit store that readers cannot see torn or from a stale cache line.
    """
    values[tile] = value
    cuda.threadfence()
    cuda.atomic.exch(status, tile, flag)


@cuda.jit(device=True)
def look_back(tile, lane, status, aggregates, prefixes):
    """The exclusive prefix of `tile`: the sum of every element of tiles 0 .. tile-1, read from their
    published aggregates and prefixes by one whole warp, 32 predecessors per step.

    Lane j inspects predecessor tile - 1 - j - 32·step. The nearest predecessor with a PREFIX ends the
    look-back: the result is its prefix plus the aggregates of the tiles between. If a tile nearer than
    that is still EMPTY, the warp reads the window again (spins). It cannot wait forever: tiles are
    numbered by an atomic ticket, so every predecessor's block has started and runs without waiting on
    anything but its own predecessors.

    Reads go through atomics (`atomic.add(a, i, 0)` returns a[i] from L2, the point of coherence): a plain
    load in a spin loop may be hoisted out of the loop by the compiler and may be served from this SM's
    L1, which does not see other SMs' writes.
    """
    exclusive = float32(0)
    window_end = tile
    nearer = (1 << lane) - 1                   # bit mask of the lanes that look at nearer tiles
    while True:
        predecessor = window_end - 1 - lane
        flag = PREFIX                          # before tile 0 the prefix is exactly 0
        if predecessor >= 0:
            flag = cuda.atomic.add(status, predecessor, 0)
        prefix_lanes = cuda.ballot_sync(FULL_MASK, flag == PREFIX)
        counted = (prefix_lanes & nearer) == 0  # no PREFIX nearer than this lane: its tile is summed
        if cuda.any_sync(FULL_MASK, counted and flag == EMPTY):
            continue                           # a tile we need has published nothing yet: read again
        cuda.threadfence()                     # pairs with publish's fence: the values are there
        contribution = float32(0)
        if counted and predecessor >= 0:
            if flag == PREFIX:
                contribution = cuda.atomic.add(prefixes, predecessor, float32(0))
            else:
                contribution = cuda.atomic.add(aggregates, predecessor, float32(0))
        exclusive += warp_broadcast_sum(contribution, lane)
        if prefix_lanes != 0:
            return exclusive
        window_end -= WARP


@functools.lru_cache(maxsize=None)
def single_pass_kernel(threads=SINGLE_PASS_THREADS, items=ITEMS_PER_THREAD):
    """The single-pass scan kernel for a tile of threads × items floats (compile-time constants: the
    simulator and the tests use small tiles, the GPU the module's defaults)."""
    warps = threads // WARP
    warp_elems = WARP * items
    tile_elems = threads * items

    @cuda.jit
    def scan_single_pass(x, out, tile_counter, status, aggregates, prefixes):
        """Inclusive scan of x in one pass: each block scans one tile of `threads × items` floats, learns
        the sum of all earlier tiles by decoupled look-back, and writes its tile once.

        A block takes its tile number from an atomic counter (not blockIdx), so tile k's block starts
        only after tiles 0..k-1 have started — waiting on them cannot deadlock. It publishes its tile's
        AGGREGATE as soon as its own elements are summed, then (after the look-back) its inclusive
        PREFIX, so successors rarely wait on a long chain.
        Memory: x read once, out written once (8 bytes per element, the copy floor). Warp w of the block
        owns `items` rounds of 32 consecutive floats: every load and store is a coalesced 128-byte row.
        Per tile, a few atomics on status/aggregates/prefixes (in L2) — about 4 bytes per 4096 elements.
        Launch: 1-D, `threads` threads (a multiple of 32, at most 32 warps), ceil(n / tile) blocks;
        tile_counter[0] and status[:] must be zero at launch (reset_look_back does it).
        """
        values = cuda.local.array(items, float32)   # registers: the loops below have constant trip counts
        warp_sums = cuda.shared.array(warps, float32)
        warp_offsets = cuda.shared.array(warps, float32)
        ticket = cuda.shared.array(1, int32)
        t = cuda.threadIdx.x
        lane, warp = t % WARP, t // WARP
        if t == 0:
            ticket[0] = cuda.atomic.add(tile_counter, 0, 1)
        cuda.syncthreads()
        tile = ticket[0]
        start = tile * tile_elems + warp * warp_elems + lane
        for j in range(items):                      # all loads first: `items` in flight per thread
            i = start + j * WARP
            values[j] = x[i] if i < x.size else float32(0)
        carry = float32(0)
        for j in range(items):                      # the warp scans its rows of 32, carrying the total
            value = warp_inclusive_scan(values[j], lane) + carry
            values[j] = value
            carry = cuda.shfl_sync(FULL_MASK, value, WARP - 1)
        if lane == WARP - 1:
            warp_sums[warp] = carry
        cuda.syncthreads()
        if warp == 0:
            own = warp_sums[lane] if lane < warps else float32(0)
            inclusive = warp_inclusive_scan(own, lane)
            aggregate = cuda.shfl_sync(FULL_MASK, inclusive, warps - 1)   # the tile's total
            exclusive = float32(0)
            if tile == 0:
                if lane == 0:
                    publish(tile, PREFIX, aggregate, prefixes, status)
            else:
                if lane == 0:
                    publish(tile, AGGREGATE, aggregate, aggregates, status)
                exclusive = look_back(tile, lane, status, aggregates, prefixes)
                if lane == 0:
                    publish(tile, PREFIX, exclusive + aggregate, prefixes, status)
            if lane < warps:
                warp_offsets[lane] = exclusive + (inclusive - own)
        cuda.syncthreads()
        offset = warp_offsets[warp]
        for j in range(items):
            i = start + j * WARP
            if i < x.size:
                out[i] = values[j] + offset

    return quiet(scan_single_pass)


@cuda.jit
def reset_look_back(tile_counter, status):
    """tile_counter[0] = 0 and status[:] = EMPTY before a single-pass launch. Serves both kernels: an
    int32 status array, or the packed kernel's uint64 words, where 0 is pack(EMPTY, 0.0).

    Memory: 4 bytes per tile written (16 KiB of status per 2^24 elements; 8 bytes a packed word),
    coalesced.
    Launch: 1-D, THREADS threads, ceil(tiles / THREADS) blocks.
    """
    i = cuda.grid(1)
    if i == 0:
        tile_counter[0] = 0
    if i < status.size:
        status[i] = EMPTY


def scan_single_pass(x, out, threads=SINGLE_PASS_THREADS, items=ITEMS_PER_THREAD):
    """out = inclusive scan of x in a single pass over memory (decoupled look-back)."""
    require(x, "x", ndim=1, where="scan_single_pass")
    require(out, "out", shape=x.shape, where="scan_single_pass")
    if threads % WARP or not WARP <= threads <= WARP * WARP or items < 1:
        raise ValueError(f"scan_single_pass: threads must be a multiple of 32 in 32..1024 and items ≥ 1, "
                         f"got threads={threads}, items={items}")
    if not x.size:
        return
    tiles = math.ceil(x.size / (threads * items))
    if tiles >= 2 ** 31:
        raise ValueError(f"scan_single_pass: {x.size} elements need {tiles} tiles, more than int32 counts")
    counter = _scratch("tile_counter", 1, "int32")
    status = _scratch("status", tiles, "int32")
    reset_look_back[math.ceil(tiles / THREADS), THREADS](counter, status)
    single_pass_kernel(threads, items)[tiles, threads](
        x, out, counter, status, _scratch("aggregates", tiles, "float32"),
        _scratch("prefixes", tiles, "float32"))


# --- single pass, tuned: status and value in one 64-bit word; 128-bit loads and stores -------------------
def _pack_on_host(flag, value):
    """The simulator's pack: (flag << 32) | the float's 32 bits, as a numpy uint64."""
    return np.uint64((int(flag) << 32) | int(np.float32(value).view(np.uint32)))


def _unpack_on_host(word):
    """The simulator's unpack: (flag, value) from a uint64 made by pack."""
    word = int(word)
    return word >> 32, np.uint32(word & 0xFFFFFFFF).view(np.float32)


@cuda.jit(device=True)
def _pack_on_gpu(flag, value):
    return (uint64(flag) << uint64(32)) | uint64(uint32(cuda.libdevice.float_as_int(value)))


@cuda.jit(device=True)
def _unpack_on_gpu(word):
    return int32(word >> uint64(32)), cuda.libdevice.int_as_float(int32(uint32(word & uint64(0xFFFFFFFF))))


# pack(flag, value) -> uint64 and unpack(word) -> (flag, value): a float's bits reinterpreted, never
# converted (libdevice's float_as_int on a GPU; numpy's view on the simulator, which has no libdevice).
pack = lib.pick(sim=_pack_on_host, gpu=_pack_on_gpu)
unpack = lib.pick(sim=_unpack_on_host, gpu=_unpack_on_gpu)


@cuda.jit(device=True)
def look_back_packed(tile, lane, state):
    """look_back with one 64-bit word per tile: state[t] = pack(flag, value). One atomic read per lane
    per step brings flag and value together, so the look-back needs no fence and no second read: a lane
    that sees the flag holds the value that was published with it.
    """
    exclusive = float32(0)
    window_end = tile
    nearer = (1 << lane) - 1
    while True:
        predecessor = window_end - 1 - lane
        flag = PREFIX                          # before tile 0 the prefix is exactly 0
        value = float32(0)
        if predecessor >= 0:
            flag, value = unpack(cuda.atomic.add(state, predecessor, uint64(0)))
        prefix_lanes = cuda.ballot_sync(FULL_MASK, flag == PREFIX)
        counted = (prefix_lanes & nearer) == 0
        if cuda.any_sync(FULL_MASK, counted and flag == EMPTY):
            continue
        exclusive += warp_broadcast_sum(value if counted else float32(0), lane)
        if prefix_lanes != 0:
            return exclusive
        window_end -= WARP


@functools.lru_cache(maxsize=None)
def single_pass_packed_kernel(threads=PACKED_THREADS, items=PACKED_ITEMS):
    """The tuned single-pass kernel for tiles of threads × items floats (items a multiple of 4)."""
    warps = threads // WARP
    rows = items // VECTOR                 # 16-byte loads per thread
    tile_vectors = threads * rows
    warp_vectors = WARP * rows

    @cuda.jit
    def scan_single_pass_packed(x, out, tile_counter, state):
        """scan_single_pass_kernel, tuned twice: a tile's status and value are one 64-bit word published
        by a single atomic exchange (look_back_packed), and a warp moves its floats as rows of 32 float4
        — lane l holds floats 4l .. 4l+3 of each 128-float row — so every load and store is 16 bytes.

        Scan of a row: each lane adds its four floats in order, the warp scans the lanes' totals with
        shuffles, and each lane adds the exclusive part (shfl_up of the inclusive) to its four.
        Memory: x read once, out written once, 16-byte accesses, each warp instruction a contiguous 512
        bytes. Per tile: one 8-byte exchange at publish (twice) and 8-byte atomic reads in the look-back.
        Launch: 1-D, `threads` threads, ceil(n / (threads·items)) blocks; x and out 16-byte aligned;
        tile_counter[0] and state[:] zero at launch.
        """
        values = cuda.local.array(items, float32)
        warp_sums = cuda.shared.array(warps, float32)
        warp_offsets = cuda.shared.array(warps, float32)
        ticket = cuda.shared.array(1, int32)
        t = cuda.threadIdx.x
        lane, warp = t % WARP, t // WARP
        if t == 0:
            ticket[0] = cuda.atomic.add(tile_counter, 0, 1)
        cuda.syncthreads()
        tile = ticket[0]
        n = x.size
        start = tile * tile_vectors + warp * warp_vectors + lane    # in float4s
        for r in range(rows):
            v = start + r * WARP
            if VECTOR * v + VECTOR <= n:
                a, b, c, d = load_float4(x, v)
            else:                                                   # the ragged end, float by float
                a = x[VECTOR * v] if VECTOR * v < n else float32(0)
                b = x[VECTOR * v + 1] if VECTOR * v + 1 < n else float32(0)
                c = x[VECTOR * v + 2] if VECTOR * v + 2 < n else float32(0)
                d = x[VECTOR * v + 3] if VECTOR * v + 3 < n else float32(0)
            values[VECTOR * r], values[VECTOR * r + 1] = a, b
            values[VECTOR * r + 2], values[VECTOR * r + 3] = c, d
        carry = float32(0)
        for r in range(rows):
            a = values[VECTOR * r]
            b = a + values[VECTOR * r + 1]
            c = b + values[VECTOR * r + 2]
            d = c + values[VECTOR * r + 3]
            inclusive = warp_inclusive_scan(d, lane)
            before = cuda.shfl_up_sync(FULL_MASK, inclusive, 1)
            if lane == 0:
                before = float32(0)
            before += carry
            values[VECTOR * r], values[VECTOR * r + 1] = a + before, b + before
            values[VECTOR * r + 2], values[VECTOR * r + 3] = c + before, d + before
            carry += cuda.shfl_sync(FULL_MASK, inclusive, WARP - 1)
        if lane == WARP - 1:
            warp_sums[warp] = carry
        cuda.syncthreads()
        if warp == 0:
            own = warp_sums[lane] if lane < warps else float32(0)
            inclusive = warp_inclusive_scan(own, lane)
            aggregate = cuda.shfl_sync(FULL_MASK, inclusive, warps - 1)
            exclusive = float32(0)
            if tile == 0:
                if lane == 0:
                    cuda.atomic.exch(state, tile, pack(PREFIX, aggregate))
            else:
                if lane == 0:
                    cuda.atomic.exch(state, tile, pack(AGGREGATE, aggregate))
                exclusive = look_back_packed(tile, lane, state)
                if lane == 0:
                    cuda.atomic.exch(state, tile, pack(PREFIX, exclusive + aggregate))
            if lane < warps:
                warp_offsets[lane] = exclusive + (inclusive - own)
        cuda.syncthreads()
        offset = warp_offsets[warp]
        for r in range(rows):
            v = start + r * WARP
            a, b = values[VECTOR * r] + offset, values[VECTOR * r + 1] + offset
            c, d = values[VECTOR * r + 2] + offset, values[VECTOR * r + 3] + offset
            if VECTOR * v + VECTOR <= n:
                store_float4(out, v, a, b, c, d)
            else:
                if VECTOR * v < n:
                    out[VECTOR * v] = a
                if VECTOR * v + 1 < n:
                    out[VECTOR * v + 1] = b
                if VECTOR * v + 2 < n:
                    out[VECTOR * v + 2] = c

    return quiet(scan_single_pass_packed)


def scan_single_pass_packed(x, out, threads=PACKED_THREADS, items=PACKED_ITEMS):
    """out = inclusive scan of x: the tuned single pass. Arrays that are not 16-byte aligned (a view that
    starts mid-vector) cannot be read as float4, and go to scan_single_pass instead."""
    require(x, "x", ndim=1, where="scan_single_pass_packed")
    require(out, "out", shape=x.shape, where="scan_single_pass_packed")
    if threads % WARP or not WARP <= threads <= WARP * WARP or items < VECTOR or items % VECTOR:
        raise ValueError(f"scan_single_pass_packed: threads must be a multiple of 32 in 32..1024 and items a "
                         f"positive multiple of 4, got threads={threads}, items={items}")
    if not x.size:
        return
    if data_address(x) % 16 or data_address(out) % 16:
        scan_single_pass(x, out)
        return
    tiles = math.ceil(x.size / (threads * items))
    if tiles >= 2 ** 31:
        raise ValueError(f"scan_single_pass_packed: {x.size} elements need {tiles} tiles, more than int32 counts")
    counter = _scratch("tile_counter", 1, "int32")
    state = _scratch("state", tiles, "uint64")
    reset_look_back[math.ceil(tiles / THREADS), THREADS](counter, state)
    single_pass_packed_kernel(threads, items)[tiles, threads](x, out, counter, state)


# --- exclusive scans ----------------------------------------------------------------------------------
@cuda.jit
def shift_right(inclusive, out):
    """out[0] = 0, out[i] = inclusive[i - 1]: an exclusive scan from an inclusive one, exactly.

    Memory: 8 bytes per element, coalesced (the read is offset by one float, still within the same
    128-byte rows but one).
    Launch: 1-D, THREADS threads, ceil(n / THREADS) blocks.
    """
    i = cuda.grid(1)
    if i < out.size:
        out[i] = inclusive[i - 1] if i > 0 else float32(0)


def scan_exclusive(x, out):
    """out = exclusive scan of x: the single-pass inclusive scan into scratch memory, shifted by one."""
    require(x, "x", ndim=1, where="scan_exclusive")
    require(out, "out", shape=x.shape, where="scan_exclusive")
    if x.size:
        inclusive = _scratch("inclusive", x.size, "float32")
        tile = lib.pick(sim=SIM_PACKED_TILE, gpu=(PACKED_THREADS, PACKED_ITEMS))
        scan_single_pass_packed(x, inclusive, *tile)
        shift_right[math.ceil(x.size / THREADS), THREADS](inclusive, out)


# --- why the look-back reads through atomics: two spin loops, compiled (record_extra) -----------------
@cuda.jit
def spin_on_plain_load(flag, out):
    """Wait until flag[0] != 0 with ordinary loads, then write out[0] = 1. Never launched: its compiled
    code (record_extra) shows the compiler loading flag[0] once and looping forever.

    Memory: one 4-byte load (once, if hoisted). Launch: not launched.
    """
    while flag[0] == 0:
        pass
    out[0] = 1.0


@cuda.jit
def spin_on_atomic_load(flag, out):
    """Wait until flag[0] != 0 reading it with atomic.add(flag, 0, 0), then write out[0] = 1: each
    iteration is a fresh read at L2, as in look_back.

    Memory: one 4-byte atomic per iteration. Launch: not launched (record_extra compiles it).
    """
    while cuda.atomic.add(flag, 0, 0) == 0:
        pass
    out[0] = 1.0


def record_extra(folder):
    """Write scan.spin_loops.txt: the PTX of the two spin loops, compiled for this GPU, with the device,
    versions and date."""
    from pathlib import Path

    from lib.measure.results import environment

    cc = cuda.get_current_device().compute_capability
    env = environment()
    lines = [f"# PTX of two spin loops, numba-cuda {env['numba_cuda']}, compiled for compute capability "
             f"{cc[0]}.{cc[1]} on {env['device']}, {env['date']}"]
    for kernel in (spin_on_plain_load, spin_on_atomic_load):
        ptx, _ = cuda.compile_ptx(kernel.py_func, "void(int32[::1], float32[::1])", cc=cc)
        body = ptx[ptx.index("{", ptx.index(".entry")):]
        lines += ["", f"## {kernel.__name__}", body.strip()]
    path = Path(folder) / f"{CHAPTER}.spin_loops.txt"
    path.write_text("\n".join(lines) + "\n")
    return [path]


# --- the ladder ------------------------------------------------------------------------------------------
N = 1 << 28  # 2^28 float32 = 1 GiB in and 1 GiB out, ~18× the H200's L2: every byte goes to HBM


def _three_phase_rung(kind):
    def run(x, out):
        scan_three_phase(x, out, kind)
    run.__name__ = f"scan_three_phase_{kind}"
    return run


def _small_tile_single_pass(x, out):
    """The simulator's rung: the same kernel with 64-thread × 2-item tiles, so a few thousand elements
    still span many tiles (the GPU's 4096-float tiles would make one or two)."""
    scan_single_pass(x, out, threads=64, items=2)



def _small_tile_packed(x, out):
    scan_single_pass_packed(x, out, *SIM_PACKED_TILE)


def _torch_cumsum(x, out):
    import torch

    torch.cumsum(x, 0, out=out)


def _ladder_inputs(n, rng):
    return EXERCISES["scan_inclusive"].make_inputs((n,), rng)


def _ladder_tolerance(x, expected):
    return EXERCISES["scan_inclusive"].tolerance(x, expected)


def _single_pass_rung():
    return Rung("scan_single_pass", lib.pick(sim=_small_tile_single_pass, gpu=scan_single_pass),
                f"decoupled look-back, {SINGLE_PASS_THREADS} threads × {ITEMS_PER_THREAD} floats per tile")


LADDERS = [
    Ladder(
        chapter=CHAPTER, topic="inclusive scan",
        description="inclusive prefix sum of n float32: read n, write n (bytes = 8·n, the copy floor)",
        make_inputs=_ladder_inputs, out_shape=lambda x: x.shape,
        reference=lambda x: np.cumsum(np.asarray(x, np.float64)),
        bytes=lambda n: 8 * n, flops=lambda n: n, unit="GB/s", sizes=[N], sim_sizes=[1100],
        rungs=[Rung("scan_three_phase_hillis_steele", _three_phase_rung("hillis_steele"),
                    "block scan by Hillis–Steele, then scan of block sums, then add offsets"),
               Rung("scan_three_phase_blelloch", _three_phase_rung("blelloch"),
                    "block scan by Blelloch up/down-sweep (padded), three phases"),
               Rung("scan_three_phase_warp_shuffle", _three_phase_rung("warp_shuffle"),
                    "block scan by warp shuffles, three phases"),
               _single_pass_rung(),
               Rung("scan_single_pass_packed", lib.pick(sim=_small_tile_packed, gpu=scan_single_pass_packed),
                    f"look-back on one 64-bit word per tile, float4 loads and stores, "
                    f"{PACKED_THREADS} threads × {PACKED_ITEMS} floats per tile")],
        baselines=[Baseline("torch.cumsum", _torch_cumsum, "torch.cumsum(x, 0, out=out)")],
        tolerance=_ladder_tolerance,
    ),
    copy_ceiling(CHAPTER, [N]),
]


# --- a host model of the look-back, and the chapter's drawings -------------------------------------------
def look_back_model(tile, status, aggregates, prefixes):
    """What `look_back` returns for `tile` given a snapshot of the published state, computed serially on
    the host: (exclusive prefix, tiles read from nearest to farthest). Raises if the look-back would have
    to wait (an EMPTY tile before the nearest PREFIX): the GPU would spin there until it is published."""
    exclusive, read = 0.0, []
    for predecessor in range(tile - 1, -1, -1):
        if status[predecessor] == EMPTY:
            raise RuntimeError(f"tile {tile} would wait for tile {predecessor}, which has published nothing")
        read.append(predecessor)
        if status[predecessor] == PREFIX:
            return exclusive + float(prefixes[predecessor]), read
        exclusive += float(aggregates[predecessor])
    return exclusive, read


_STATUS_STYLE = {EMPTY: ("EMPTY: scanning or not started", "#9a9a9a"),
                 AGGREGATE: ("AGGREGATE: own sum published", "#e07b39"),
                 PREFIX: ("PREFIX: inclusive prefix published", "#3b7dd8")}


def draw_look_back(status, tile):
    """A snapshot of the single-pass scan: one box per tile coloured by its status, and the look-back of
    `tile` (checked with look_back_model) drawn as the predecessors it reads."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    _, read = look_back_model(tile, status, np.ones(len(status)), np.ones(len(status)))
    fig, ax = plt.subplots(figsize=(10, 2.9))
    for k, s in enumerate(status):
        label, color = _STATUS_STYLE[int(s)]
        ax.add_patch(Rectangle((k, 0), 0.9, 0.9, color=color, alpha=1.0 if k in read or k == tile else 0.55))
        ax.text(k + 0.45, 0.45, str(k), ha="center", va="center", color="white", fontsize=11, weight="bold")
    for k in read:
        ax.add_patch(FancyArrowPatch((tile + 0.45, 1.0), (k + 0.45, 1.0), connectionstyle="arc3,rad=0.35",
                                     arrowstyle="-|>", mutation_scale=12, color="#555555", lw=1.2))
    terms = [f"P{k}" if status[k] == PREFIX else f"A{k}" for k in reversed(read)]
    ax.text(tile + 0.45, -0.35, f"tile {tile}: exclusive prefix = {' + '.join(terms)}", ha="center",
            va="top", fontsize=10)
    ax.set_xlim(-0.3, len(status) + 0.2)
    ax.set_ylim(-0.9, 2.6)
    ax.axis("off")
    handles = [Rectangle((0, 0), 1, 1, color=c) for _, c in _STATUS_STYLE.values()]
    ax.legend(handles, [lbl for lbl, _ in _STATUS_STYLE.values()], loc="upper center", ncol=3,
              fontsize="small", frameon=False)
    ax.set_title(f"Decoupled look-back: tile {tile} reads back to the nearest PREFIX "
                 f"(tiles numbered by an atomic ticket)", fontsize=11)
    fig.tight_layout()
    return fig


def hillis_steele_steps(n):
    """The adds of a Hillis–Steele scan of n elements: per step, (source, destination) pairs."""
    steps, offset = [], 1
    while offset < n:
        steps.append([(i - offset, i) for i in range(offset, n)])
        offset *= 2
    return steps


def blelloch_steps(n):
    """The steps of a Blelloch scan of n (a power of two) elements, as in scan_block_blelloch:
    ('up', [(left, right)]) adds left into right; ('down', [(left, right)]) swaps with add."""
    steps, stride, active = [], 1, n // 2
    while active > 0:
        steps.append(("up", [(stride * (2 * t + 1) - 1, stride * (2 * t + 2) - 1) for t in range(active)]))
        stride *= 2
        active //= 2
    active = 1
    while active < n:
        stride //= 2
        steps.append(("down", [(stride * (2 * t + 1) - 1, stride * (2 * t + 2) - 1) for t in range(active)]))
        active *= 2
    return steps


def draw_hillis_steele_vs_blelloch(n=16):
    """Data-flow of the two block scans on n elements: one row per step, a line per add."""
    import matplotlib.pyplot as plt

    hs, bl = hillis_steele_steps(n), blelloch_steps(n)
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    panels = [(axes[0], [("add", s) for s in hs], f"Hillis–Steele: {len(hs)} steps, "
               f"{sum(map(len, hs))} adds"),
              (axes[1], bl, f"Blelloch: {len(bl)} steps, {sum(len(s) for k, s in bl)} adds "
               f"(+ the root set to 0)")]
    colors = {"add": "#3b7dd8", "up": "#3b7dd8", "down": "#e07b39"}
    for ax, steps, title in panels:
        for row, (kind, pairs) in enumerate(steps):
            ax.scatter(range(n), [row] * n, s=14, color="#8a8a8a", zorder=3)
            for src, dst in pairs:
                ax.plot([src, dst], [row, row + 1], color=colors[kind], lw=1.3)
                if kind == "down":  # the left child receives the parent's value
                    ax.plot([dst, src], [row, row + 1], color=colors[kind], lw=1.0, ls=":")
        ax.scatter(range(n), [len(steps)] * n, s=14, color="#8a8a8a", zorder=3)
        ax.set_ylim(len(steps) + 0.5, -0.5)
        ax.set_xticks(range(0, n, 2))
        ax.set_xlabel("element index")
        ax.set_ylabel("step (time runs down)")
        ax.set_title(title, fontsize=11)
    axes[1].plot([], [], color=colors["up"], label="up-sweep: right += left")
    axes[1].plot([], [], color=colors["down"], label="down-sweep: right += left")
    axes[1].plot([], [], color=colors["down"], ls=":", label="down-sweep: left = old right")
    axes[1].legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize="x-small", frameon=False)
    fig.suptitle(f"Scanning {n} elements in a block: every line is one add (Blelloch's result is the "
                 "exclusive scan)", fontsize=12)
    fig.tight_layout()
    return fig


# The book's own small launches (demos, last passes, one-thread set-ups) are deliberate: no low-occupancy
# warning for them (lib/runtime/quiet_launches.py); a reader's kernels still get it.
quiet_kernels(globals())
