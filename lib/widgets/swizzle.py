"""The swizzle and descriptor explorer, live: pick the swizzle mode and the tile (rows, K elements, element
size) of a K-major wgmma operand and see where each element lands in shared memory (byte address, bank,
16-byte chunk), what the descriptor's LBO and SBO mean, the descriptor's 64 bits and the bytes one wgmma reads
through it; pick N and a thread to see which accumulator elements of the m64nN tile that thread owns.

The maths runs in ``swizzle.js`` (so the widget works on the static site with no kernel); its one Python
source is :mod:`lib.hw.wgmma_layout`, the layout truth the kernels, the simulator's twins and the tests use.
The functions below say, from that module, what the widget shows for a state: tests/test_swizzle_widget.py
compares the JavaScript with them (node) and tests/test_browser.py compares the built page with them."""
from __future__ import annotations

from pathlib import Path

from lib.hw import wgmma_layout as layout

JS = Path(__file__).with_suffix(".js")
MODES = ("none", "32B", "64B", "128B")
ROWS = (8, 16, 32, 64)
ITEMSIZES = (2, 4)
STARTS = (0, 1024, 4096, 8192)          # tile starts the widget offers: on a 1024-byte boundary, as the XOR needs
KBYTES_NONE = (16, 32, 64, 128)         # bytes of K per row offered without swizzle


def k_choices(mode: str, itemsize: int) -> tuple[int, ...]:
    """The K elements per row a tile may have: whole 16-byte chunks without swizzle, exactly one swizzle row
    (its span) otherwise."""
    if mode == "none":
        return tuple(b // itemsize for b in KBYTES_NONE)
    return (layout.SWIZZLE_SPAN[mode] // itemsize,)


def element(mode: str, rows: int, kelems: int, itemsize: int, row: int, k: int, start: int = 0) -> dict:
    """Where element (row, k) of the tile lands: byte address, bank (4-byte banks, 32 of them), 16-byte chunk
    of its 128-byte line; with the tile's LBO and SBO."""
    idx, lbo, sbo, _ = layout.kmajor_layout(rows, kelems, itemsize, mode)
    byte = start + int(idx[row, k]) * itemsize
    return dict(byte=byte, bank=(byte // 4) % 32, chunk=(byte // 16) % 8, lbo=lbo, sbo=sbo)


def step_descriptor(mode: str, rows: int, kelems: int, itemsize: int, start: int, step: int) -> int:
    """The descriptor of wgmma K step `step` (32 bytes of K each) of the tile: two core matrices further per
    step without swizzle, 32 bytes further inside the swizzle row otherwise (as the kernels advance it)."""
    _, lbo, sbo, kstep = layout.kmajor_layout(rows, kelems, itemsize, mode)
    return layout.make_descriptor(start + step * (2 * lbo if mode == "none" else kstep), lbo, sbo, mode)


def thread_elements(n: int, tid: int) -> list[tuple[int, int]]:
    """(row, col) of accumulator registers 0 .. n/2 - 1 of warpgroup thread tid in an m64nN tile."""
    return [tuple(int(v) for v in layout.acc_element(tid, i)) for i in range(n // 2)]


def _widget_class():
    import anywidget
    import traitlets

    class SwizzleWidget(anywidget.AnyWidget):
        _esm = JS.read_text()
        mode = traitlets.Unicode("128B").tag(sync=True)
        itemsize = traitlets.Int(2).tag(sync=True)
        rows = traitlets.Int(16).tag(sync=True)
        kelems = traitlets.Int(64).tag(sync=True)
        start = traitlets.Int(0).tag(sync=True)
        row = traitlets.Int(0).tag(sync=True)
        k = traitlets.Int(0).tag(sync=True)
        n = traitlets.Int(64).tag(sync=True)
        thread = traitlets.Int(0).tag(sync=True)

    return SwizzleWidget


def swizzle_widget(mode: str = "128B", itemsize: int = 2, rows: int = 16, kelems: int | None = None,
                   start: int = 0, row: int = 0, k: int = 0, n: int = 64, thread: int = 0):
    """The widget, starting on one tile (K defaults to one swizzle row, or 32 bytes without swizzle), one
    element and one thread of an m64nN accumulator."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if itemsize not in ITEMSIZES:
        raise ValueError(f"element size must be one of {ITEMSIZES} bytes, got {itemsize}")
    if rows not in ROWS:
        raise ValueError(f"rows must be one of {ROWS}, got {rows}")
    choices = k_choices(mode, itemsize)
    kelems = choices[min(1, len(choices) - 1)] if kelems is None else kelems
    if kelems not in choices:
        raise ValueError(f"a {mode} tile of {itemsize}-byte elements has {' or '.join(map(str, choices))} K "
                         f"elements per row, not {kelems}")
    if start not in STARTS:
        raise ValueError(f"start must be one of {STARTS}, got {start}")
    if not (0 <= row < rows and 0 <= k < kelems):
        raise ValueError(f"element ({row}, {k}) is outside the {rows} × {kelems} tile")
    if n not in layout.N_SIZES:
        raise ValueError(f"N must be one of {layout.N_SIZES}, got {n}")
    if not 0 <= thread < layout.WARPGROUP:
        raise ValueError(f"thread must be in 0..{layout.WARPGROUP - 1}, got {thread}")
    return _widget_class()(mode=mode, itemsize=itemsize, rows=rows, kelems=kelems, start=start, row=row, k=k,
                           n=n, thread=thread)
