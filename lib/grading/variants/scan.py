"""Known-wrong answers to the scan chapter's exercises (segmented_scan, scan_reverse, compact_positive) and to
scan_inclusive and scan_exclusive, which no page asks for any more but the grader still knows
(lib.grading.exercises.RETIRED).

The wrong inclusive and exclusive scans are built from one block scan (Hillis-Steele over BLOCK elements, one per thread, as in the
chapter's solution) and one carry step, each with the mistake switched on where the variant needs it.
"""
from __future__ import annotations

import numpy as np
from numba import cuda, float32

from lib.grading.exercises import segmented_cumsum
from lib.grading.variants._common import Variant, chunk, dims, own_launches, unwritten, widest

BLOCK = 128
CARRY_BEFORE, CARRY_OWN, CARRY_PREVIOUS = 0, 1, 2   # carry of block b: blocks < b (right), <= b, b - 1 only


@cuda.jit
def block_scan_into(x, out, sums, limit):
    """out[i] = the inclusive scan of x within i's block, for i < limit; sums[b] = block b's total.

    Memory: each element read once, coalesced; one buffer in shared memory, two barriers per step.
    Launch: 1-D, BLOCK threads, ceil(n / BLOCK) blocks.
    """
    shared = cuda.shared.array(BLOCK, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK + t
    shared[t] = x[i] if i < x.size else float32(0)
    offset = 1
    while offset < BLOCK:
        cuda.syncthreads()
        left = shared[t - offset] if t >= offset else float32(0)
        cuda.syncthreads()
        shared[t] += left
        offset *= 2
    if i < limit:
        out[i] = shared[t]
    if t == BLOCK - 1:
        sums[cuda.blockIdx.x] = shared[t]


@cuda.jit
def block_scan_exclusive_local(x, out):
    """out[i] = the exclusive scan of x within i's block (0 at each block's start): no carry between blocks.

    Memory: each element read once, coalesced; one buffer in shared memory.
    Launch: 1-D, BLOCK threads, ceil(n / BLOCK) blocks.
    """
    shared = cuda.shared.array(BLOCK, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK + t
    shared[t] = x[i] if i < x.size else float32(0)
    offset = 1
    while offset < BLOCK:
        cuda.syncthreads()
        left = shared[t - offset] if t >= offset else float32(0)
        cuda.syncthreads()
        shared[t] += left
        offset *= 2
    cuda.syncthreads()
    if i < x.size:
        out[i] = shared[t - 1] if t > 0 else float32(0)


@cuda.jit
def add_carries(out, sums, scanned, mode, limit):
    """Adds block b's carry to its elements below `limit` (b >= 1): scanned[b - 1] (right), scanned[b] (the
    block's own total included) or sums[b - 1] (the previous block's total only), by `mode`.

    Memory: one read of a carry (broadcast) and a read-modify-write per element.
    Launch: 1-D, BLOCK threads, one block per block of out but the first.
    """
    b = cuda.blockIdx.x + 1
    i = b * BLOCK + cuda.threadIdx.x
    if i < limit:
        if mode == CARRY_OWN:
            out[i] += scanned[b]
        elif mode == CARRY_PREVIOUS:
            out[i] += sums[b - 1]
        else:
            out[i] += scanned[b - 1]


def _scan(x, out, mode=CARRY_BEFORE, limit=None, carry=True):
    """The chapter's recursive scan with the mistakes as switches: the carry `mode`, stores only below `limit`,
    and no carry at all."""
    blocks = (x.size + BLOCK - 1) // BLOCK
    sums = cuda.device_array(blocks, dtype=np.float32)
    limit = x.size if limit is None else limit
    block_scan_into[blocks, BLOCK](x, out, sums, limit)
    if carry and blocks > 1:
        scanned = cuda.device_array(blocks, dtype=np.float32)
        _scan(sums, scanned)
        add_carries[blocks - 1, BLOCK](out, sums, scanned, mode, limit)


@cuda.jit
def shift_right(inclusive, out, first_of_block_zero, skip_first):
    """out[i] = inclusive[i - 1], out[0] = 0; the mistakes: 0 at the start of every block (the shift done
    inside blocks), or out[0] never written.

    Memory: one coalesced read and write per element.
    Launch: 1-D, BLOCK threads, ceil(n / BLOCK) blocks.
    """
    i = cuda.grid(1)
    if i < out.size:
        if i == 0:
            if not skip_first:
                out[i] = float32(0)
        elif first_of_block_zero and cuda.threadIdx.x == 0:
            out[i] = float32(0)
        else:
            out[i] = inclusive[i - 1]


def _exclusive(x, out, first_of_block_zero=False, skip_first=False):
    inclusive = cuda.device_array(x.size, dtype=np.float32)
    _scan(x, inclusive)
    shift_right[(x.size + BLOCK - 1) // BLOCK, BLOCK](inclusive, out, first_of_block_zero, skip_first)


# --- models -------------------------------------------------------------------------------------------------
def _tiles(x, launches):
    """x (float64) padded with zeros to whole tiles of the student's widest launch, one row per block."""
    x = np.asarray(x, np.float64)
    split = chunk(x.size, launches)
    if split is None:
        return None
    per_block = split[1]
    return np.concatenate([x, np.zeros(-x.size % per_block)]).reshape(-1, per_block)


def _local(x, launches, exclusive=False):
    tiles = _tiles(x, launches)
    if tiles is None:
        return None
    scans = np.cumsum(tiles, axis=1)
    if exclusive:
        scans -= tiles
    return scans.ravel()[:np.size(x)]


def _with_carry(x, launches, mode):
    tiles = _tiles(x, launches)
    if tiles is None:
        return None
    totals = tiles.sum(axis=1)
    if mode == CARRY_OWN:
        carry = np.concatenate([[0.0], np.cumsum(totals)[1:]])
    else:
        carry = np.concatenate([[0.0], totals[:-1]])
    return (np.cumsum(tiles, axis=1) + carry[:, None]).ravel()[:np.size(x)]


def _inclusive(x):
    return np.cumsum(np.asarray(x, np.float64))


def _exclusive_ref(x):
    return _inclusive(x) - np.asarray(x, np.float64)


def _last_unwritten(x, launches, fill=np.nan):
    out = _inclusive(x)
    out[-1] = fill
    return out


def _first_unwritten(x, launches, fill=np.nan):
    out = _exclusive_ref(x)
    out[0] = fill
    return out


def _block_starts_zero(x, launches, fill=np.nan):
    split = chunk(np.size(x), launches)
    if split is None:
        return None
    out = _exclusive_ref(x)
    out[::split[1]] = 0.0
    return out


# --- compact_positive -----------------------------------------------------------------------------------------
@cuda.jit
def positive_flags(x, flags, limit):
    """flags[i] = 1 where x[i] > 0 for i < limit, else 0.

    Memory: one coalesced read and write per element.
    Launch: 1-D, BLOCK threads, ceil(n / BLOCK) blocks.
    """
    i = cuda.grid(1)
    if i < x.size:
        flags[i] = 1.0 if i < limit and x[i] > 0 else 0.0


@cuda.jit
def scatter(x, positions, out, limit, compact, zero_tail):
    """out[positions[i] - 1] = x[i] for the kept elements (or out[i] = x[i] in place when not `compact`),
    and out[i] = 0 for i past the count when `zero_tail`; only threads below `limit` take part.

    Memory: one read of x and of positions per element, the count read by every thread (broadcast), scattered writes.
    Launch: 1-D, BLOCK threads, ceil(n / BLOCK) blocks.
    """
    i = cuda.grid(1)
    if i < limit:
        kept = positions[x.size - 1]
        if compact:
            if x[i] > 0:
                out[int(positions[i]) - 1] = x[i]
        else:
            out[i] = x[i] if x[i] > 0 else float32(0)
        if zero_tail and i >= kept:
            out[i] = float32(0)


def _compact(limit_short=False, compact=True, zero_tail=True, carry=True):
    def fn(x, out):
        blocks = (x.size + BLOCK - 1) // BLOCK
        limit = x.size - 1 if limit_short else x.size
        flags = cuda.device_array(x.size, dtype=np.float32)
        positions = cuda.device_array(x.size, dtype=np.float32)
        positive_flags[blocks, BLOCK](x, flags, limit)
        _scan(flags, positions, carry=carry)
        scatter[blocks, BLOCK](x, positions, out, limit, compact, zero_tail)
    return fn


def _compacted(x):
    x = np.asarray(x, np.float64)
    kept = x[x > 0]
    return kept, np.concatenate([kept, np.zeros(x.size - kept.size)])


def _tail_unwritten(x, launches, fill=np.nan):
    kept, out = _compacted(x)
    out[kept.size:] = fill
    return out


def _last_dropped(x, launches, fill=np.nan):
    x = np.asarray(x, np.float64)
    out = unwritten(x.size, fill)
    out[:-1] = _compacted(x[:-1])[1]
    return out


def _block_local_positions(x, launches, fill=np.nan):
    """Each block scattered its kept elements to out[0], out[1], ... (positions without the carry), and
    zeroed its elements from the last block's count on; the writes land in the simulator's order (block by
    block, thread by thread, the scatter before the zero), the last write to an element staying."""
    x = np.asarray(x, np.float64)
    split = chunk(x.size, own_launches(launches))
    if split is None:
        return None
    per_block = split[1]
    positive = x > 0
    tiles = np.concatenate([positive, np.zeros(-x.size % per_block, bool)]).reshape(-1, per_block)
    local = np.cumsum(tiles, axis=1).ravel()[:x.size]
    kept = local[-1]
    i = np.arange(x.size)
    where = np.concatenate([local[positive] - 1, i[i >= kept]])
    order = np.concatenate([2 * i[positive], 2 * i[i >= kept] + 1])
    value = np.concatenate([x[positive], np.zeros(int((i >= kept).sum()))])
    last = np.argsort(order, kind="stable")[::-1]
    places, first = np.unique(where[last], return_index=True)
    out = unwritten(x.size, fill)
    out[places.astype(int)] = value[last][first]
    return out



# --- segmented_scan and scan_reverse: three phases over tiles of TILE, each thread walking its own tile ---------
# Linear work (a thread adds at most TILE elements, one thread passes the carries from tile to tile), so the
# variants also run at the GPU sizes.
TILE = 128


@cuda.jit
def segmented_walk(x, flags, out, reset, head_after):
    """out[i] = the sum from i back to its segment's head or its tile's start, whichever comes first. `reset`
    off: heads are ignored; `head_after`: a flag is read as the last element of a segment (the next one is the
    head).

    Memory: each thread reads up to TILE elements of its own tile (neighbouring threads overlap: L1 hits).
    Launch: 1-D, TILE threads per block, one thread per element.
    """
    i = cuda.grid(1)
    if i >= x.size:
        return
    start = i - i % TILE
    total = float32(0.0)
    j = i
    while j >= start:
        if reset and head_after and j < i and flags[j] != 0:
            break
        total += x[j]
        if reset and not head_after and flags[j] != 0:
            break
        j -= 1
    out[i] = total


@cuda.jit(device=True)
def _reaches_tile_start(flags, i, reset, head_after):
    """True when element i's segment began before its tile (no head between the tile's start and i). With
    `head_after` element j is a head when flags[j - 1] is set, so the tile's first element can be one."""
    if not reset:
        return True
    start = i - i % TILE
    for j in range(start, i + 1):
        if head_after:
            if j > 0 and flags[j - 1] != 0:
                return False
        elif flags[j] != 0:
            return False
    return True


@cuda.jit
def segmented_carries(out, flags, carries, reset, head_after):
    """carries[b] = the value that flows into tile b: one thread walks the tiles in order.

    Memory: reads each tile's last output and its flags once. Launch: one thread.
    """
    tiles = carries.size
    carry = float32(0.0)
    for b in range(tiles):
        carries[b] = carry
        last = min((b + 1) * TILE, out.size) - 1
        carry = out[last] + carry if _reaches_tile_start(flags, last, reset, head_after) else out[last]


@cuda.jit
def segmented_add(out, flags, carries, reset, head_after, across_heads):
    """out[i] += carries[tile of i] where i's segment began before its tile (everywhere with `across_heads`).

    Memory: one read-modify-write per element. Launch: 1-D, TILE threads per block, one thread per element.
    """
    i = cuda.grid(1)
    if i < out.size and i >= TILE and (across_heads or _reaches_tile_start(flags, i, reset, head_after)):
        out[i] += carries[i // TILE]


def _segmented(reset=True, head_after=False, carry=True, across_heads=False):
    def fn(x, flags, out):
        tiles = (x.size + TILE - 1) // TILE
        segmented_walk[tiles, TILE](x, flags, out, reset, head_after)
        if carry:
            carries = cuda.device_array(tiles, np.float32)
            segmented_carries[1, 1](out, flags, carries, reset, head_after)
            segmented_add[tiles, TILE](out, flags, carries, reset, head_after, across_heads)
    return fn


def _segments(x, flags):
    return segmented_cumsum(x, flags)


def _tile_of(launches):
    """Block threads of the student's widest launch (the tile of a one-element-per-thread block scan)."""
    gb = widest(launches)
    return None if gb is None else int(np.prod(gb[1]))


def _segmented_no_carry(x, flags, launches, fill=np.nan):
    tile = _tile_of(launches)
    if tile is None:
        return None
    starts = np.asarray(flags).copy()
    starts[::tile] = 1.0
    return _segments(x, starts)


def _segmented_across_heads(x, flags, launches, fill=np.nan):
    """Within each tile, its own segmented sums; every element of tile b > 0 also gets the right value at the end
    of tile b - 1, whether or not a head came before it in its tile."""
    tile = _tile_of(launches)
    if tile is None:
        return None
    right = _segments(x, flags)
    local = _segmented_no_carry(x, flags, launches)
    carry = np.zeros(np.asarray(x).size)
    ends = np.arange(tile - 1, np.asarray(x).size - 1, tile)
    for b, end in enumerate(ends, start=1):
        carry[b * tile:(b + 1) * tile] = right[end]
    return local + carry


@cuda.jit
def suffix_walk(x, out, step, skip_own, mirror):
    """out[i] (out[n - 1 - i] with `mirror`) = the sum from i (i + step with `skip_own`) to its tile's end in the
    direction `step` (+1: towards the end of x, -1: towards its start).

    Memory: each thread reads up to TILE elements of its own tile. Launch: 1-D, TILE threads per block.
    """
    i = cuda.grid(1)
    if i >= x.size:
        return
    tile_start = i - i % TILE
    total = float32(0.0)
    j = i + step if skip_own else i
    while tile_start <= j < min(tile_start + TILE, x.size):
        total += x[j]
        j += step
    out[x.size - 1 - i if mirror else i] = total


@cuda.jit
def suffix_carries(x, carries, step):
    """carries[b] = the total of every tile that comes after tile b in the direction `step`: one thread.

    Memory: reads every element once. Launch: one thread.
    """
    tiles = carries.size
    carry = float32(0.0)
    for k in range(tiles):
        b = tiles - 1 - k if step > 0 else k
        carries[b] = carry
        for j in range(b * TILE, min((b + 1) * TILE, x.size)):
            carry += x[j]


@cuda.jit
def suffix_add(out, carries, mirror):
    """out[i] += carries[tile of i] (out[n - 1 - i] with `mirror`).

    Memory: one read-modify-write per element. Launch: 1-D, TILE threads per block.
    """
    i = cuda.grid(1)
    if i < out.size:
        out[out.size - 1 - i if mirror else i] += carries[i // TILE]


def _suffix(step=1, skip_own=False, carry=True, mirror=False, carry_step=None):
    def fn(x, out):
        tiles = (x.size + TILE - 1) // TILE
        suffix_walk[tiles, TILE](x, out, step, skip_own, mirror)
        if carry:
            carries = cuda.device_array(tiles, np.float32)
            suffix_carries[1, 1](x, carries, step if carry_step is None else carry_step)
            suffix_add[tiles, TILE](out, carries, mirror)
    return fn


def _suffix64(x):
    return np.cumsum(np.asarray(x, np.float64)[::-1])[::-1]


def _suffix_carry_from_before(x, launches, fill=np.nan):
    """Suffix sums within each tile, plus the totals of the tiles before it (the carry from the wrong side)."""
    local = _suffix_no_carry(x, launches)
    if local is None:
        return None
    tile = _tile_of(launches)
    x = np.asarray(x, np.float64)
    totals = np.concatenate([x, np.zeros(-x.size % tile)]).reshape(-1, tile).sum(axis=1)
    before = np.concatenate([[0.0], np.cumsum(totals)[:-1]])
    return local + np.repeat(before, tile)[:x.size]


def _suffix_no_carry(x, launches, fill=np.nan):
    tile = _tile_of(launches)
    if tile is None:
        return None
    x = np.asarray(x, np.float64)
    padded = np.concatenate([x, np.zeros(-x.size % tile)]).reshape(-1, tile)
    return np.cumsum(padded[:, ::-1], axis=1)[:, ::-1].ravel()[:x.size]

VARIANTS = {
    "segmented_scan": [
        Variant("no restart at the heads",
                "the sums never restart: that is a plain inclusive scan; where flags[i] != 0 the sum starts "
                "again from x[i]",
                lambda x, flags, launches, fill=np.nan: np.cumsum(np.asarray(x, np.float64)),
                _segmented(reset=False)),
        Variant("restart after the flagged element",
                "each sum restarts one element too late: the flagged element is the first of its segment (its "
                "own x[i] starts the new sum), not the last of the previous one",
                lambda x, flags, launches, fill=np.nan: _segments(x, np.concatenate([[0.0], np.asarray(flags)[:-1]])),
                _segmented(head_after=True)),
        Variant("no carry between blocks",
                "every block restarted the sum at its first element: a segment that crosses into a block must "
                "bring its running sum along (the carry), unless a head comes first",
                _segmented_no_carry, _segmented(carry=False)),
        Variant("carry added across a head",
                "elements after a head still received the carry from the block before: the carry flows into a "
                "block only up to its first head (combine (value, flag) pairs: a flagged right side keeps its "
                "own value)",
                _segmented_across_heads, _segmented(across_heads=True)),
    ],
    "scan_reverse": [
        Variant("prefix instead of suffix",
                "you computed x[0] + ... + x[i]: the reverse scan adds from i to the end, x[i] + ... + x[n - 1]",
                lambda x, launches, fill=np.nan: np.cumsum(np.asarray(x, np.float64)), _suffix(step=-1)),
        Variant("x[i] left out",
                "out[i] misses x[i] itself (out[n - 1] is 0): that is the exclusive reverse scan; the inclusive "
                "one starts its sum at x[i]",
                lambda x, launches, fill=np.nan: _suffix64(x) - np.asarray(x, np.float64),
                _suffix(skip_own=True)),
        Variant("no carry between blocks",
                "each block added up only its own elements: add to every element the total of all the blocks "
                "after its own",
                _suffix_no_carry, _suffix(carry=False)),
        Variant("stored back to front",
                "out holds the answer in reverse order (out[i] = x[n - 1 - i] + ... + x[n - 1]): store at the "
                "same index you compute for",
                lambda x, launches, fill=np.nan: np.cumsum(np.asarray(x, np.float64)[::-1]), _suffix(mirror=True)),
        Variant("carry from the blocks before",
                "each block added the total of the blocks before it: in a reverse scan the carry comes from the "
                "blocks after it",
                _suffix_carry_from_before, _suffix(carry_step=-1)),
    ],
    "scan_inclusive": [
        Variant("no carry between blocks",
                "each block scanned its own elements, but no block added the totals of the blocks before it: "
                "scan the block totals and add each block's carry (or pass it from block to block)",
                lambda x, launches, fill=np.nan: _local(x, launches), lambda x, out: _scan(x, out, carry=False)),
        Variant("exclusive instead of inclusive",
                "out[i] is the sum of the elements before i: an inclusive scan includes x[i] itself",
                lambda x, launches, fill=np.nan: _exclusive_ref(x), lambda x, out: _exclusive(x, out)),
        Variant("carry includes the block's own total",
                "every block past the first added the scanned totals up to and including its own: block b's "
                "carry is the sum of blocks 0 .. b - 1 (scanned[b - 1])",
                lambda x, launches, fill=np.nan: _with_carry(x, launches, CARRY_OWN),
                lambda x, out: _scan(x, out, mode=CARRY_OWN)),
        Variant("carry from the previous block only",
                "each block added only the previous block's total: its carry must be the sum of all the blocks "
                "before it (scan the block totals first)",
                lambda x, launches, fill=np.nan: _with_carry(x, launches, CARRY_PREVIOUS),
                lambda x, out: _scan(x, out, mode=CARRY_PREVIOUS)),
        Variant("last element not written",
                "only the last element is missing: the store's guard is one short (i < n)",
                _last_unwritten, lambda x, out: _scan(x, out, limit=x.size - 1)),
    ],
    "scan_exclusive": [
        Variant("inclusive instead of exclusive",
                "out[i] includes x[i]: an exclusive scan is the sum of the elements before i (out[0] = 0), the "
                "inclusive scan shifted right by one",
                lambda x, launches, fill=np.nan: _inclusive(x), lambda x, out: _scan(x, out)),
        Variant("no carry between blocks",
                "each block scanned its own elements, but no block added the totals of the blocks before it: "
                "scan the block totals and add each block's carry",
                lambda x, launches, fill=np.nan: _local(x, launches, exclusive=True),
                lambda x, out: block_scan_exclusive_local[(x.size + BLOCK - 1) // BLOCK, BLOCK](x, out)),
        Variant("out[0] not written",
                "only out[0] is missing: the shift skipped the first element, which must be 0 (the sum of "
                "nothing)",
                _first_unwritten, lambda x, out: _exclusive(x, out, skip_first=True)),
        Variant("0 at the start of every block",
                "the first element of every block is 0: the shift by one was done inside each block, so it lost "
                "the carry there; shift the whole scanned array (out[i] = inclusive[i - 1])",
                _block_starts_zero, lambda x, out: _exclusive(x, out, first_of_block_zero=True)),
    ],
    "compact_positive": [
        Variant("tail not zeroed",
                "the kept elements are right, but the rest of out was never set: write 0 to out[i] for every i "
                "at or past the count of kept elements",
                _tail_unwritten, _compact(zero_tail=False)),
        Variant("not compacted",
                "the positive elements stayed at their own index: each kept element goes to its position among "
                "the kept ones, the inclusive scan of the flags minus one",
                lambda x, launches, fill=np.nan: np.where(np.asarray(x) > 0, np.asarray(x, np.float64), 0.0),
                _compact(compact=False, zero_tail=False)),
        Variant("last element dropped",
                "the last element was never considered (flags, scatter and zeroing stop one short): run them "
                "for every i < n",
                _last_dropped, _compact(limit_short=True)),
        Variant("positions without the carry between blocks",
                "the positions restart at every block (the scan of the flags has no carry between blocks), so "
                "the blocks wrote over each other at the start of out",
                _block_local_positions, _compact(carry=False)),
    ],
}

# Without the carry, the blocks' writes land on the same positions: a race between blocks of the launch, which
# the simulator's debugger reports (its model assumed blocks in index order, which the simulator no longer keeps).
RACES = {("compact_positive", "positions without the carry between blocks")}
