"""Step through online softmax: a row is fed tile by tile and the running state (m, l) — the largest
value so far and the sum of exp(x - m) — is merged with each tile's own state; the widget shows both, and
the rescale factor exp(m - m') that shrinks the old sum when a larger maximum arrives.

The logic lives in ``online_softmax.js`` (so the widget stays live on the static site, with no kernel);
the functions here are its Python twin, and the tests check that both give the same numbers. Masked
entries are ``None`` here and ``null`` in JavaScript (JSON has no -inf); they count as -inf.
"""
from __future__ import annotations

import math
from pathlib import Path

NEG_INF = float("-inf")
IDENTITY = (NEG_INF, 0.0)   # the state of no elements: merging it changes nothing


def value(v) -> float:
    """An entry of a row: None (masked) is -inf."""
    return NEG_INF if v is None else float(v)


def merge(a: tuple, b: tuple) -> tuple:
    """(m_a, l_a) ⊕ (m_b, l_b) = (m, l_a·exp(m_a - m) + l_b·exp(m_b - m)) with m = max(m_a, m_b); two
    empty states give the identity (-inf, 0) rather than NaN."""
    m = max(a[0], b[0])
    if m == NEG_INF:
        return IDENTITY
    return m, a[1] * math.exp(a[0] - m) + b[1] * math.exp(b[0] - m)


def tile_state(tile) -> tuple:
    """The state of one tile, computed directly: its maximum and the sum of exp(x - max)."""
    xs = [value(v) for v in tile]
    m = max(xs, default=NEG_INF)
    if m == NEG_INF:
        return IDENTITY
    l = 0.0
    for x in xs:  # left to right, as the JavaScript does (Python 3.12's sum() compensates)
        l += math.exp(x - m)
    return m, l


def online_steps(row, tile: int) -> list[dict]:
    """One record per tile: the tile's bounds and state, the running state before and after merging it,
    and the rescale factor exp(m_before - m_after) applied to the old sum (None while the old sum is
    empty, when there is nothing to rescale)."""
    if tile < 1:
        raise ValueError("tile must be at least 1")
    state = IDENTITY
    steps = []
    for start in range(0, len(row), tile):
        t = tile_state(row[start:start + tile])
        new = merge(state, t)
        rescale = None if state[0] == NEG_INF else math.exp(state[0] - new[0])
        steps.append({"start": start, "stop": min(start + tile, len(row)), "tile_m": t[0], "tile_l": t[1],
                      "m_before": state[0], "l_before": state[1], "m": new[0], "l": new[1],
                      "rescale": rescale})
        state = new
    return steps


def softmax(row) -> list[float]:
    """The finished softmax of a row from its final state; a fully masked row gives zeros."""
    xs = [value(v) for v in row]
    m, l = tile_state(xs)
    if l == 0.0:
        return [0.0] * len(xs)
    return [math.exp(x - m) / l for x in xs]


def presets() -> dict[str, list]:
    """Rows to step through, 16 entries each. 'spike-late' hides its maximum in the last tile, so every
    earlier partial sum is rescaled at the end; 'masked' has -inf entries and a fully masked tile."""
    ramp = [round(0.5 * math.sin(1.3 * i) + 0.1 * i, 3) for i in range(16)]
    return {
        "spike-late": ramp[:15] + [9.0],
        "spike-early": [9.0] + ramp[1:],
        "rising": [round(0.6 * i, 3) for i in range(16)],
        "masked": [None if 4 <= i < 8 or i % 5 == 3 else v for i, v in enumerate(ramp)],
        "overflow-scale": [round(80.0 + 1.25 * abs(math.cos(i)) * i, 3) for i in range(16)],
    }


def widget(preset: str = "spike-late", tile: int = 4):
    """The step-through widget (anywidget), starting at step 0 of `preset`."""
    import anywidget
    import traitlets

    class OnlineSoftmaxWidget(anywidget.AnyWidget):
        _esm = Path(__file__).with_suffix(".js").read_text()
        presets = traitlets.Dict().tag(sync=True)
        preset = traitlets.Unicode().tag(sync=True)
        tile = traitlets.Int().tag(sync=True)
        step = traitlets.Int(0).tag(sync=True)

    rows = presets()
    if preset not in rows:
        raise ValueError(f"unknown preset {preset!r}: choose one of {', '.join(rows)}")
    return OnlineSoftmaxWidget(presets=rows, preset=preset, tile=tile, step=0)
