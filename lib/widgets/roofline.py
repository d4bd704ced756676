"""A live roofline: pick a GPU, see its memory roof and its FP32, TF32 and FP16 compute roofs (and, dashed,
the ``mma.sync`` roofs measured on it, where recorded), move two
sliders for a hypothetical kernel's FLOPs and bytes, and see every kernel the book has recorded (all
chapters' data/results/*.csv) as a point.

All drawing and maths are in ``roofline.js``, so the widget stays live on the static site; its ``analyze``
is the twin of :func:`lib.hw.roofline.analyze`, and the tests run both on a grid of inputs and require equal
answers.
"""
from __future__ import annotations

from pathlib import Path

from lib.hw.roofline import analyze, widget_specs
from lib.measure.results import roofline_points
from lib.hw.specs import GPUS, REFERENCE_GPU

LOG10_FLOPS_RANGE = (6.0, 15.0)   # the sliders move in steps of 0.1 decade
LOG10_BYTES_RANGE = (3.0, 12.0)


def _widget_class():
    import anywidget
    import traitlets

    class RooflineWidget(anywidget.AnyWidget):
        """Roofs of one GPU, a hypothetical kernel from two sliders, and the book's recorded kernels."""
        _esm = Path(__file__).with_suffix(".js").read_text()
        gpu = traitlets.Unicode(REFERENCE_GPU).tag(sync=True)
        log10_flops = traitlets.Float(10.0).tag(sync=True)
        log10_bytes = traitlets.Float(9.0).tag(sync=True)
        specs = traitlets.Dict().tag(sync=True)
        points = traitlets.List().tag(sync=True)
        unplaced = traitlets.Int(0).tag(sync=True)
        measured_roofs = traitlets.List().tag(sync=True)

    return RooflineWidget


def measured_roofs(folder=None) -> list[dict]:
    """Compute roofs measured on a GPU rather than read from a datasheet: the fastest register-only
    ``mma.sync`` loop per input kind (data/results/tensorcores.mma_ceiling.csv), each with the widget's key
    of the GPU it ran on. Empty if nothing is recorded."""
    import pandas as pd

    from lib.measure.results import RESULTS
    from lib.hw.specs import spec_for

    path = Path(folder or RESULTS) / "tensorcores.mma_ceiling.csv"
    if not path.exists():
        return []
    df = pd.read_csv(path, comment="#")
    with open(path) as f:
        header = f.readline()
    device = header.split("device ", 1)[1].split(",")[0] if "device " in header else ""
    spec = spec_for(device)
    if spec is None:
        return []
    names = {"tf32": "TF32", "f16": "FP16", "bf16": "BF16"}
    best = df.groupby("kind")["tflops"].max()
    return [{"gpu": spec.key, "label": f"mma.sync {names[kind]} (measured)", "tflops": float(best[kind])}
            for kind in ("tf32", "f16") if kind in best.index]


def widget(gpu: str = REFERENCE_GPU, log10_flops: float = 10.0, log10_bytes: float = 9.0, folder=None):
    """The live widget, with every recorded point of the book (from `folder`, default data/results/)."""
    if gpu not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}: one of {', '.join(GPUS)}")
    for name, value, (lo, hi) in [("log10_flops", log10_flops, LOG10_FLOPS_RANGE),
                                  ("log10_bytes", log10_bytes, LOG10_BYTES_RANGE)]:
        if not lo <= value <= hi:
            raise ValueError(f"{name} must be within [{lo}, {hi}], got {value}")
    specs = widget_specs()
    analyze(specs[gpu], 10 ** log10_flops, 10 ** log10_bytes)
    points, unplaced = roofline_points(folder)
    return _widget_class()(gpu=gpu, log10_flops=log10_flops, log10_bytes=log10_bytes, specs=specs,
                           points=points, unplaced=unplaced, measured_roofs=measured_roofs(folder))
