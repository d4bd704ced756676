"""Where wgmma and TMA put each byte: the one source of layout truth for Hopper's tensor cores (no numba).

The swizzle (:func:`swizzle`), the shared-memory image of a TMA box (:func:`tma_box_offsets`), the K-major
operand layouts with their descriptor strides (:func:`kmajor_layout`), the addresses a wgmma operand
descriptor names (:func:`operand_addresses`), the descriptor's bit fields (:func:`make_descriptor`,
:func:`decode_descriptor`) and the owner of each accumulator element (:func:`acc_element`). The kernels'
device function ``lib.runtime.hopper.make_desc``, the simulator's twins, the tests, the chapter and the
swizzle explorer widget (``lib/widgets/swizzle.js``, checked against these functions) all use them. Every
one was checked on the H200 (128B/64B/32B and no swizzle, FP16/BF16/TF32, m64nNk16 for N = 8, 64, 256; TMA's
image of a 128B-swizzled box equals the layout wgmma reads).
"""
from __future__ import annotations

import numpy as np

WARPGROUP = 128
SWIZZLE_MODES = {"none": 0, "128B": 1, "64B": 2, "32B": 3}   # the descriptor's 2-bit field (bits 62-63)
SWIZZLE_SPAN = {"none": 0, "128B": 128, "64B": 64, "32B": 32}  # bytes per swizzled row
SWIZZLE_MASK = {"none": 0, "128B": 7, "64B": 3, "32B": 1}
KINDS = {"f16": 2, "bf16": 2, "tf32": 4}                    # operand bytes per element
K_PER_WGMMA = {"f16": 16, "bf16": 16, "tf32": 8}             # 32 bytes of K per instruction in all three
N_SIZES = (8, 16, 32, 64, 128, 256)


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
