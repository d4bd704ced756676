"""Known-wrong answers to the Hopper chapter's exercises.

``wgmma_tile(a, b, out)``, out[t] = a[t] @ b[t].T for FP16 tiles (bit patterns) a[t], b[t] of 64 × 16: one
warpgroup per tile stages both in shared memory in the no-swizzle K-major layout and issues one
``wgmma_m64n64k16_f16`` from two descriptors. A layout or descriptor mistake has an exact model: the shared
image the kernel wrote, read back through the descriptor it built by :func:`lib.hw.wgmma_layout.operand_addresses`
(the function the simulator's wgmma and the H200 agree on), multiplied in float64.

``ring_copy(x, out)``, out = x streamed through a two-stage ring of shared slots: one producer thread issues
TMA copies of 16 × 32 boxes, one consumer warp copies each slot out, a full and an empty mbarrier per stage.
Two mistakes give a wrong output with an exact model (coordinates in the wrong order, the last partial tile
dropped); the others break the barrier protocol (a parity that does not flip, a producer that waits before
the first round, a byte count in elements, a slot never released). Those have no output: on the simulator
the mbarrier twin names them (a race, a deadlock with each barrier's phase, arrivals and missing bytes, or
the bytes delivered beyond expect_tx): :data:`DIAGNOSED` gives the phrases its report must contain. On a GPU
they hang or are undefined behaviour (a phase whose arrivals or bytes never come spins forever), so
:data:`NOT_ON_A_GPU` keeps them off the GPU's checks.
"""
from __future__ import annotations

import numpy as np
from numba import cuda, float32, int16, int64

from lib.grading.variants._common import Variant, unwritten
from lib.hw import wgmma_layout as layout
from lib.runtime import hopper

# --- wgmma_tile --------------------------------------------------------------------------------------------
TILE = 64 * 16                 # elements of one 64 × 16 FP16 operand tile (2048 bytes)
LBO, SBO = 128, 256            # bytes: the next core matrix along K, the next group of 8 rows
SMEM = 2 * TILE + 8            # A, then B, and 16 bytes of slack to put them on a 16-byte boundary
RIGHT, LBO_SBO_SWAPPED, IN_ELEMENTS, ROW_MAJOR, A_B_SWAPPED, B_AT_A = range(6)


@cuda.jit
def wgmma_tile_switches(a, b, out, mistake):
    """out[t] = a[t] @ b[t].T, one block of 128 threads (a warpgroup) per tile: both tiles staged in the
    no-swizzle K-major layout (8 × 16-byte core matrices, LBO = 128, SBO = 256 bytes), one wgmma m64n64k16,
    the fragment stored by store_acc; or with one mistake: LBO and SBO swapped (LBO_SBO_SWAPPED), both given
    in elements (IN_ELEMENTS), the tiles stored row by row (ROW_MAJOR), the A and B descriptors exchanged
    (A_B_SWAPPED), B's descriptor pointing at A (B_AT_A).

    Memory: each tile is read once (2 × 2 KB) and written once (16 KB of float32).
    Launch: one block of 128 threads per tile.
    """
    t = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    sm = cuda.shared.array(SMEM, int16)
    base = hopper.smem_u32(sm)
    pad = ((16 - (base & 15)) & 15) // 2
    for e in range(tid, TILE, 128):
        r, k = e // 16, e % 16
        off = (r % 8) * 8 + (k // 8) * (LBO // 2) + (r // 8) * (SBO // 2) + k % 8
        if mistake == ROW_MAJOR:
            off = e
        sm[pad + off] = a[t, r, k]
        sm[pad + TILE + off] = b[t, r, k]
    hopper.fence_proxy_async()
    cuda.syncthreads()
    lbo, sbo = LBO, SBO
    if mistake == LBO_SBO_SWAPPED:
        lbo, sbo = SBO, LBO
    if mistake == IN_ELEMENTS:
        lbo, sbo = LBO // 2, SBO // 2
    a_at = base + 2 * pad
    b_at = a_at + 2 * TILE
    if mistake == A_B_SWAPPED:
        a_at, b_at = b_at, a_at
    if mistake == B_AT_A:
        b_at = a_at
    da = hopper.make_desc(a_at, lbo, sbo, 0)
    db = hopper.make_desc(b_at, lbo, sbo, 0)
    acc = hopper.zeros_acc(32)
    hopper.wgmma_fence()
    acc = hopper.wgmma_m64n64k16_f16(da, db, acc)
    hopper.wgmma_commit()
    hopper.wgmma_wait(0)
    warp, lane = tid // 32, tid % 32
    hopper.store_acc(out[t], acc, 16 * warp + lane // 4, 2 * (lane % 4))


def _wgmma_tile(mistake):
    def fn(a, b, out):
        wgmma_tile_switches[a.shape[0], 128](a, b, out, mistake)
    return fn


def _staged(tiles: np.ndarray, mistake) -> np.ndarray:
    """The shared image (int16 elements, per tile) the kernel writes for operand tiles (T, 64, 16)."""
    if mistake == ROW_MAJOR:
        return tiles.reshape(tiles.shape[0], TILE)
    idx, _, _, _ = layout.kmajor_layout(64, 16, 2, "none")
    image = np.zeros((tiles.shape[0], TILE), np.int16)
    image[:, idx.reshape(-1)] = tiles.reshape(tiles.shape[0], TILE)
    return image


def _wgmma_model(a, b, mistake):
    """What the kernel with `mistake` writes: A and B gathered from its shared image (A at byte 0, B at
    2048) through the descriptors it builds, as FP16 values, multiplied in float64."""
    a, b = np.asarray(a, np.int16), np.asarray(b, np.int16)
    image = np.concatenate([_staged(a, mistake), _staged(b, mistake)], axis=1)
    lbo, sbo = {LBO_SBO_SWAPPED: (SBO, LBO), IN_ELEMENTS: (LBO // 2, SBO // 2)}.get(mistake, (LBO, SBO))
    a_at, b_at = {A_B_SWAPPED: (2 * TILE, 0), B_AT_A: (0, 0)}.get(mistake, (0, 2 * TILE))
    seen = []
    for start in (a_at, b_at):
        addr = layout.operand_addresses(layout.make_descriptor(start, lbo, sbo, "none"), 64)[:, ::2] // 2
        seen.append(image[:, addr].view(np.float16).astype(np.float64))
    return seen[0] @ seen[1].transpose(0, 2, 1)


# --- ring_copy ---------------------------------------------------------------------------------------------
ROWS, COLS, STAGES, PER_BLOCK = 16, 32, 2, 4   # box of 16 × 32 float32; 2 slots; 4 tiles per block
TILE_BYTES = ROWS * COLS * 4
RING = STAGES * ROWS * COLS + 32               # + 128 bytes of slack to put the slots on a 128-byte boundary
BARS = 2 * STAGES
(GOOD, PARITY_STUCK, PRODUCER_WAITS_FIRST, TX_IN_ELEMENTS, NEVER_RELEASED, COORDS_SWAPPED,
 PARTIAL_DROPPED) = range(7)


@cuda.jit
def ring_copy_switches(tmap, out, tiles, mistake):
    """out = x through a two-stage ring: thread 0 waits for a slot's 'empty' barrier, announces its bytes on
    the 'full' barrier and starts the TMA copy; warp 1 waits on 'full', copies the slot out (one column per
    lane) and arrives on 'empty'. The mistakes: the consumer's parity stays 0 (PARITY_STUCK), the producer
    waits with the consumer's parity, so before the first round (PRODUCER_WAITS_FIRST), expect_tx given in
    elements (TX_IN_ELEMENTS), no arrival on 'empty' (NEVER_RELEASED), the box's coordinates given as
    (row, column) (COORDS_SWAPPED).

    Memory: x is read once by TMA (2 KB boxes), out written once, one 128-byte row per 32 lanes.
    Launch: 64 threads per block, ceil(tiles / PER_BLOCK) blocks.
    """
    ring = cuda.shared.array(RING, float32)
    bars = cuda.shared.array(BARS, int64)
    tid = cuda.threadIdx.x
    base = hopper.smem_u32(ring)
    pad = ((128 - (base & 127)) & 127) // 4
    full = hopper.smem_u32(bars)
    empty = full + 8 * STAGES
    first = cuda.blockIdx.x * PER_BLOCK
    count = min(PER_BLOCK, tiles - first)
    if tid == 0:
        for s in range(STAGES):
            hopper.mbar_init(full + 8 * s, 1)
            hopper.mbar_init(empty + 8 * s, 32)
        hopper.fence_mbarrier_init()
    cuda.syncthreads()
    if tid == 0:
        hopper.tmap_acquire(tmap)       # the tensor map was written to global memory by a host copy
        for i in range(count):
            s = i % STAGES
            parity = ((i // STAGES) & 1) ^ 1
            if mistake == PRODUCER_WAITS_FIRST:
                parity = (i // STAGES) & 1
            while hopper.mbar_try_wait(empty + 8 * s, parity) == 0:
                pass
            nbytes = TILE_BYTES
            if mistake == TX_IN_ELEMENTS:
                nbytes = ROWS * COLS
            hopper.mbar_arrive_expect_tx(full + 8 * s, nbytes)
            row0 = (first + i) * ROWS
            if mistake == COORDS_SWAPPED:
                hopper.tma_load_2d(base + 4 * pad + s * TILE_BYTES, tmap, row0, 0, full + 8 * s)
            else:
                hopper.tma_load_2d(base + 4 * pad + s * TILE_BYTES, tmap, 0, row0, full + 8 * s)
    elif tid >= 32:
        col = tid - 32
        for i in range(count):
            s = i % STAGES
            parity = (i // STAGES) & 1
            if mistake == PARITY_STUCK:
                parity = 0
            while hopper.mbar_try_wait(full + 8 * s, parity) == 0:
                pass
            row0 = (first + i) * ROWS
            for r in range(ROWS):
                if row0 + r < out.shape[0]:
                    out[row0 + r, col] = ring[pad + s * ROWS * COLS + r * COLS + col]
            if mistake != NEVER_RELEASED:
                hopper.mbar_arrive(empty + 8 * s)


def _ring_copy(mistake):
    def fn(x, out):
        tiles = (x.shape[0] + ROWS - 1) // ROWS
        if mistake == PARTIAL_DROPPED:
            tiles = x.shape[0] // ROWS
        tmap = hopper.tensor_map_2d(x, ROWS, COLS, swizzle="none")
        ring_copy_switches[max(1, (tiles + PER_BLOCK - 1) // PER_BLOCK), 64](tmap, out, tiles, mistake)
    return fn


def _coords_swapped(x, launches, fill=np.nan):
    """Tile i's box starts at column 16·i of row 0 (zeros where it leaves x): only tile 0 is right."""
    x = np.asarray(x, np.float64)
    m = x.shape[0]
    out = np.zeros((m, COLS))
    for i in range(-(-m // ROWS)):
        rows = min(ROWS, m - ROWS * i)
        box = np.zeros((ROWS, COLS))
        src = x[:ROWS, ROWS * i:ROWS * i + COLS]
        box[:src.shape[0], :src.shape[1]] = src
        out[ROWS * i:ROWS * i + rows] = box[:rows]
    return out


def _partial_dropped(x, launches, fill=np.nan):
    x = np.asarray(x, np.float64)
    out = unwritten(x.shape, fill)
    whole = x.shape[0] // ROWS * ROWS
    out[:whole] = x[:whole]
    return out


def _no_output(*inputs, fill=np.nan):
    """A broken protocol has no output to model: the simulator reports it, a GPU hangs (DIAGNOSED)."""
    return None


VARIANTS = {
    "wgmma_tile": [
        Variant("LBO and SBO swapped",
                "the descriptor's strides are exchanged: LBO (bits 16-29) is the step from a core matrix to its "
                "neighbour along K (128 bytes here), SBO (bits 32-45) the step from one group of 8 rows to the "
                "next (256 bytes here)",
                lambda a, b, launches, fill=np.nan: _wgmma_model(a, b, LBO_SBO_SWAPPED), _wgmma_tile(LBO_SBO_SWAPPED)),
        Variant("strides in elements",
                "the descriptor's LBO and SBO were given in elements: they are bytes (make_desc shifts them right "
                "by 4, as the hardware counts in 16-byte units), 128 and 256 for FP16 core matrices",
                lambda a, b, launches, fill=np.nan: _wgmma_model(a, b, IN_ELEMENTS), _wgmma_tile(IN_ELEMENTS)),
        Variant("tile stored row by row",
                "the tiles were copied to shared memory as they are in global memory (rows of 32 bytes): wgmma "
                "reads 8-row × 16-byte core matrices, each stored whole in 128 bytes, element (r, k) at byte "
                "16·(r % 8) + 2·(k % 8) + LBO·(k // 8) + SBO·(r // 8)",
                lambda a, b, launches, fill=np.nan: _wgmma_model(a, b, ROW_MAJOR), _wgmma_tile(ROW_MAJOR)),
        Variant("A and B descriptors swapped",
                "the output is transposed: the first descriptor of a wgmma names A (the 64 rows of out), the "
                "second names B (its N columns)",
                lambda a, b, launches, fill=np.nan: _wgmma_model(a, b, A_B_SWAPPED), _wgmma_tile(A_B_SWAPPED)),
        Variant("B descriptor at A",
                "you computed a @ a.T: B's descriptor starts where A's does; B's tile lies 2048 bytes further",
                lambda a, b, launches, fill=np.nan: _wgmma_model(a, b, B_AT_A), _wgmma_tile(B_AT_A)),
    ],
    "ring_copy": [
        Variant("parity never flips",
                "the consumer waits on parity 0 every time: the second time round a slot the barrier's last "
                "phase of parity 0 has already completed, so the wait passes at once, before the new bytes land; "
                "wait for parity (i // STAGES) & 1",
                _no_output, _ring_copy(PARITY_STUCK)),
        Variant("producer waits before the first round",
                "the producer waits on an empty barrier with the consumer's parity, (i // STAGES) & 1: in the first "
                "round no consumer has released the slot, so it waits forever; ((i // STAGES) & 1) ^ 1 passes at "
                "once on a fresh barrier",
                _no_output, _ring_copy(PRODUCER_WAITS_FIRST)),
        Variant("expect_tx in elements",
                "mbar_arrive_expect_tx announces bytes: a 16 × 32 float32 box brings 2048, not 512",
                _no_output, _ring_copy(TX_IN_ELEMENTS)),
        Variant("slot never released",
                "the consumer never arrives on the slot's empty barrier, so the producer waits forever the second "
                "time round: mbar_arrive(empty) after the slot has been copied out",
                _no_output, _ring_copy(NEVER_RELEASED)),
        Variant("box coordinates as (row, column)",
                "tma_load_2d takes the box's coordinates innermost first: (column, row), so (0, 16·i) for tile i",
                _coords_swapped, _ring_copy(COORDS_SWAPPED)),
        Variant("last partial tile dropped",
                "the rows after the last whole tile of 16 were never copied: count the tiles rounding up, "
                "(M + 15) // 16 (TMA fills the box's rows past the end of x with zeros; skip them when storing)",
                _partial_dropped, _ring_copy(PARTIAL_DROPPED)),
    ],
}

# The protocol mistakes: what the simulator's report must say (regular expressions, all of them must match).
_PRODUCER_STUCK = r"waiting for parity 0: phase 0 \(parity 0\) has 0 of 32 arrivals"   # on an empty barrier
DIAGNOSED = {
    ("ring_copy", "parity never flips"):
        (r"race: thread \d+ waits again for a phase of the mbarrier at shared 0x[0-9a-f]+ that it has already "
         r"waited for, after arriving on a barrier since: mbar_try_wait\(bar, 0\) returns at once",),
    ("ring_copy", "producer waits before the first round"):
        (r"deadlock in block", _PRODUCER_STUCK,
         r"waiting for parity 0: phase 0 \(parity 0\) has 0 of 1 arrivals"),   # the consumers: nothing issued
    ("ring_copy", "expect_tx in elements"): (r"copies delivered 2048 bytes but expect_tx announced 512",),
    ("ring_copy", "slot never released"):
        (r"deadlock in block", _PRODUCER_STUCK,
         r"waiting for parity 1: phase 1 \(parity 1\) has 0 of 1 arrivals"),   # the consumers: second round
}
# A GPU hangs on these (a phase that never completes spins forever) or meets undefined behaviour.
NOT_ON_A_GPU = set(DIAGNOSED)
