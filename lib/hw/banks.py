"""Shared-memory bank conflicts: the model (the widget :mod:`lib.widgets.bank_conflicts` draws it; the tracer
counts with it).

The model (NVIDIA, CUDA C++ Programming Guide, "Shared Memory" for compute capability 5.x and later):
shared memory has 32 banks, successive 4-byte words in successive banks, each bank delivering one word per
cycle. A warp's request is served in *wavefronts*; in one wavefront a bank serves one word, to any number
of lanes (lanes reading the same word share it: a broadcast). So a request needs as many wavefronts as the
busiest bank has *distinct* words. Accesses wider than 4 bytes move more than the 128 bytes one wavefront
carries, so the warp is split first: 8-byte accesses in two half-warps, 16-byte ones in four quarter-warps,
each group served on its own (the split microbenchmark studies observe and Nsight Compute counts).

Nsight Compute's counters follow the same arithmetic: `l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld`
counts wavefronts, and `l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld` the wavefronts beyond the
ideal one per group (see :func:`conflict_report`).

:func:`analyze` is the Python twin of ``analyze`` in ``lib/widgets/bank_conflicts.js``, which the widget runs in the
browser; the tests run both on a grid of inputs and require equal answers.
"""
from __future__ import annotations

BANKS = 32
BANK_BYTES = 4
WARP = 32
WAVEFRONT_BYTES = BANKS * BANK_BYTES  # 128 bytes: what one wavefront can deliver
TILE = 32                             # the tile of the widget's row/column walks (32 x 32 elements)
PATTERNS = ("strided", "tile column", "tile row")


def lane_groups(access_bytes: int) -> int:
    """How many groups a warp's request is split into: 1 for 4-byte accesses, 2 for 8, 4 for 16."""
    if access_bytes not in (4, 8, 16):
        raise ValueError(f"access_bytes must be 4, 8 or 16, got {access_bytes}")
    return max(1, WARP * access_bytes // WAVEFRONT_BYTES)


def conflict_report(byte_addresses, access_bytes: int = 4) -> dict:
    """Wavefronts of one warp-wide shared-memory request.

    `byte_addresses`: one per lane (lane i at position i), None for an inactive lane; each must be a
    multiple of `access_bytes`. Returns wavefronts, ideal (one per group with an active lane), conflicts
    (wavefronts - ideal, what Nsight Compute counts as bank conflicts), degree (the n of "n-way": the most
    wavefronts any group needs) and, per group, the busiest bank.
    """
    if len(byte_addresses) != WARP:
        raise ValueError(f"a warp has {WARP} lanes: got {len(byte_addresses)} addresses")
    groups = lane_groups(access_bytes)
    words_per_access = access_bytes // BANK_BYTES
    lanes_per_group = WARP // groups
    wavefronts, ideal, degree = 0, 0, 0
    for g in range(groups):
        words_in_bank: dict[int, set] = {}
        for lane in range(g * lanes_per_group, (g + 1) * lanes_per_group):
            address = byte_addresses[lane]
            if address is None:
                continue
            if address < 0 or address % access_bytes:
                raise ValueError(f"lane {lane}: address {address} is not a non-negative multiple of "
                                 f"{access_bytes} bytes")
            for k in range(words_per_access):
                word = address // BANK_BYTES + k
                words_in_bank.setdefault(word % BANKS, set()).add(word)
        if words_in_bank:
            busiest = max(len(w) for w in words_in_bank.values())
            wavefronts += busiest
            ideal += 1
            degree = max(degree, busiest)
    return {"wavefronts": wavefronts, "ideal": ideal, "conflicts": wavefronts - ideal, "degree": degree}


def wavefronts(byte_addresses, access_bytes: int = 4) -> int:
    """Wavefronts one warp-wide request needs (see :func:`conflict_report`)."""
    return conflict_report(byte_addresses, access_bytes)["wavefronts"]


def element_indices(pattern: str, stride: int, offset: int, pad: int, swizzle: bool) -> list[int]:
    """The element each lane touches.

    'strided': lane i reads element offset + i * stride (stride 0: every lane on one element).
    'tile column': a 32 x 32 tile stored with rows of 32 + pad elements; lane i reads row i of column
    `offset` (with swizzle: column offset XOR i). 'tile row': lane i reads column i (XOR the row with
    swizzle) of row `offset`. The XOR swizzle stores element (r, c) of the tile at column c ^ r.
    """
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    if stride < 0 or offset < 0 or pad < 0:
        raise ValueError("stride, offset and pad must be non-negative")
    pitch = TILE + pad
    if pattern == "strided":
        return [offset + lane * stride for lane in range(WARP)]
    column = offset % TILE
    if pattern == "tile column":
        return [lane * pitch + ((column ^ lane) if swizzle else column) for lane in range(WARP)]
    row = offset % TILE
    return [row * pitch + ((lane ^ row) if swizzle else lane) for lane in range(WARP)]


def analyze(pattern: str = "strided", stride: int = 1, offset: int = 0, element_bytes: int = 4, pad: int = 0,
            swizzle: bool = False) -> dict:
    """Everything the widget shows, for one access pattern (the twin of ``analyze`` in the JS file)."""
    indices = element_indices(pattern, stride, offset, pad, swizzle)
    addresses = [i * element_bytes for i in indices]
    report = conflict_report(addresses, element_bytes)
    return {"addresses": addresses, "banks": [(a // BANK_BYTES) % BANKS for a in addresses],
            "rows": [(a // BANK_BYTES) // BANKS for a in addresses], **report}
