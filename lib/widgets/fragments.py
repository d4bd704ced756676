"""Fragment layouts of mma.sync, live: pick the shape and the operand (A, B or C); hover a lane to see the
elements it holds, or an element to see which lane holds it. The layouts run in ``fragments.js`` (so the
widget works on the static site with no kernel); their one Python source is :data:`lib.runtime.mma.LAYOUTS`, and
tests/test_fragments_widget.py checks the two agree element by element."""
from __future__ import annotations

from pathlib import Path

JS = Path(__file__).with_suffix(".js")
SHAPES = ("m16n8k8.tf32", "m16n8k16.f16")   # BF16 fragments are laid out as FP16's
OPERANDS = ("A", "B", "C")


def _widget_class():
    import anywidget
    import traitlets

    class FragmentWidget(anywidget.AnyWidget):
        _esm = JS.read_text()
        shape = traitlets.Unicode("m16n8k8.tf32").tag(sync=True)
        operand = traitlets.Unicode("A").tag(sync=True)
        lane = traitlets.Int(-1).tag(sync=True)      # a lane to highlight at first (-1: none)

    return FragmentWidget


def fragment_widget(shape: str = "m16n8k8.tf32", operand: str = "A", lane: int = -1):
    """The widget, starting on one shape and operand, optionally with one lane highlighted."""
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {SHAPES}, got {shape!r}")
    if operand not in OPERANDS:
        raise ValueError(f"operand must be one of {OPERANDS}, got {operand!r}")
    if not -1 <= lane < 32:
        raise ValueError(f"lane must be -1 (none) or 0..31, got {lane}")
    return _widget_class()(shape=shape, operand=operand, lane=lane)
