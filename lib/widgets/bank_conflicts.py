"""The bank-conflict widget: 32 lanes mapped onto 32 banks, drawn and computed in ``bank_conflicts.js`` so
it stays live on a static page; the model and its Python twin are :mod:`lib.hw.banks`."""
from __future__ import annotations

from pathlib import Path

from lib.hw.banks import (BANK_BYTES, BANKS, PATTERNS, TILE, WARP, WAVEFRONT_BYTES, analyze,  # noqa: F401
                          conflict_report, element_indices, lane_groups, wavefronts)


def _widget_class():
    import anywidget
    import traitlets

    class BankConflictWidget(anywidget.AnyWidget):
        """32 lanes mapped onto 32 banks, with the conflict degree and wavefronts; all drawing and maths
        in bank_conflicts.js, so it stays live on a static page."""
        _esm = (Path(__file__).with_suffix(".js")).read_text()
        pattern = traitlets.Unicode("strided").tag(sync=True)
        stride = traitlets.Int(1).tag(sync=True)
        offset = traitlets.Int(0).tag(sync=True)
        element_bytes = traitlets.Int(4).tag(sync=True)
        pad = traitlets.Int(0).tag(sync=True)
        swizzle = traitlets.Bool(False).tag(sync=True)

    return BankConflictWidget


def widget(**state):
    """The live widget, starting from `state` (pattern, stride, offset, element_bytes, pad, swizzle)."""
    analyze(**state)  # refuse a bad starting state here, with the model's own error
    return _widget_class()(**state)
