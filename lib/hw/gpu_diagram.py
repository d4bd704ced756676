"""Diagrams of a Hopper GPU drawn with matplotlib: the full GH100 die (GPCs, TPCs, SMs, with the SMs a
product fuses off) and one SM with its four partitions. Numbers come from the NVIDIA H100 Tensor Core GPU
Architecture whitepaper (2022)."""
from __future__ import annotations

import numpy as np

GH100 = {"gpcs": 8, "tpcs_per_gpc": 9, "sms_per_tpc": 2}   # the full die: 8 × 9 × 2 = 144 SMs
FG = "#4a4a4a"         # outlines and text: readable on light and dark page backgrounds
ON, OFF = "#3b7dd8", "#bbbbbb"


def fused_off_tpcs(enabled_sms: int, seed: int = 3) -> set[tuple[int, int]]:
    """(gpc, tpc) pairs drawn as disabled so that `enabled_sms` remain. Which TPCs a real die loses differs
    from die to die (it depends on where its defects are); these are picked at random, at most one per GPC
    first, as an illustration only."""
    total_tpcs = GH100["gpcs"] * GH100["tpcs_per_gpc"]
    off = total_tpcs - enabled_sms // GH100["sms_per_tpc"]
    rng = np.random.default_rng(seed)
    order = [(g, int(t)) for rnd in range(GH100["tpcs_per_gpc"]) for g in rng.permutation(GH100["gpcs"])
             for t in [rng.integers(GH100["tpcs_per_gpc"])]][:off]
    picked: set[tuple[int, int]] = set()
    for g, t in order:
        while (g, t) in picked:
            t = (t + 1) % GH100["tpcs_per_gpc"]
        picked.add((g, t))
    return picked


def draw_gpu(ax, enabled_sms: int = 132, title: str | None = None):
    """The GH100 die as 8 GPCs of 9 TPCs of 2 SMs, with the L2 cache between the two rows of GPCs and the
    HBM stacks at the sides; SMs of fused-off TPCs in grey."""
    from matplotlib.patches import Rectangle

    off = fused_off_tpcs(enabled_sms)
    gpc_w, gpc_h = 4.6, 3.2
    for g in range(GH100["gpcs"]):
        col, row = g % 4, g // 4
        x0, y0 = col * (gpc_w + 0.3), (0 if row == 0 else gpc_h + 1.3)
        ax.add_patch(Rectangle((x0, y0), gpc_w, gpc_h, fill=False, ec=FG, lw=1.2))
        ax.text(x0 + gpc_w / 2, y0 + gpc_h - 0.22, f"GPC {g}", ha="center", va="center", fontsize=8, color=FG)
        for t in range(GH100["tpcs_per_gpc"]):
            tx, ty = x0 + 0.2 + (t % 3) * 1.45, y0 + 0.15 + (t // 3) * 0.85
            disabled = (g, t) in off
            ax.add_patch(Rectangle((tx, ty), 1.3, 0.75, fill=False, ec=FG, lw=0.6, ls=":" if disabled else "-"))
            for s in range(GH100["sms_per_tpc"]):
                ax.add_patch(Rectangle((tx + 0.08 + s * 0.6, ty + 0.1), 0.54, 0.55, color=OFF if disabled else ON))
    ax.add_patch(Rectangle((0, gpc_h + 0.25), 4 * gpc_w + 0.9, 0.8, color="#e0a040"))
    ax.text(2 * gpc_w + 0.45, gpc_h + 0.65, "L2 cache (two partitions) and crossbar", ha="center", va="center",
            fontsize=9)
    for side in (-1.6, 4 * gpc_w + 1.2):
        for k in range(3):
            ax.add_patch(Rectangle((side, 0.4 + k * 2.6), 1.3, 2.1, color="#8a6fbf"))
            ax.text(side + 0.65, 1.45 + k * 2.6, "HBM", ha="center", va="center", fontsize=7, color="white",
                    rotation=90)
    ax.set_xlim(-1.8, 4 * gpc_w + 2.7)
    ax.set_ylim(-0.2, 2 * gpc_h + 1.5)
    ax.set_aspect("equal")
    ax.axis("off")
    handles = [Rectangle((0, 0), 1, 1, color=ON), Rectangle((0, 0), 1, 1, color=OFF)]
    ax.legend(handles, [f"SM enabled ({enabled_sms})", f"SM fused off ({144 - enabled_sms})"], loc="upper center",
              bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=8, frameon=False)
    ax.set_title(title or f"GH100: 8 GPCs × 9 TPCs × 2 SMs = 144 SMs; this product enables {enabled_sms}",
                 fontsize=10)
    return ax


def draw_sm(ax):
    """One Hopper SM: four partitions (each a warp scheduler and dispatch unit, a 64 KB register file, 32 FP32
    lanes, 16 INT32 lanes, 16 FP64 lanes, one tensor core, load/store units and an SFU), sharing the L1
    data cache / shared memory and the tensor memory accelerator (TMA)."""
    from matplotlib.patches import Rectangle

    def box(x, y, w, h, label, color, size=7, text_color="black"):
        ax.add_patch(Rectangle((x, y), w, h, color=color, ec=FG, lw=0.5))
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=size, color=text_color)

    for p in range(4):
        x0 = p * 3.1
        ax.add_patch(Rectangle((x0, 2.0), 2.9, 6.6, fill=False, ec=FG, lw=1.0))
        ax.text(x0 + 1.45, 8.35, f"partition {p}", ha="center", fontsize=8, color=FG)
        box(x0 + 0.1, 7.3, 2.7, 0.8, "warp scheduler\n+ dispatch unit", "#f3c677")
        box(x0 + 0.1, 6.3, 2.7, 0.85, "register file\n16K × 32 bit = 64 KB", "#9cc5a1")
        box(x0 + 0.1, 4.9, 1.3, 1.25, "FP32\n×32", "#3b7dd8", text_color="white")
        box(x0 + 1.5, 4.9, 1.3, 0.6, "INT32 ×16", "#6c9bd2", text_color="white")
        box(x0 + 1.5, 5.55, 1.3, 0.6, "FP64 ×16", "#6c9bd2", text_color="white")
        box(x0 + 0.1, 3.55, 2.7, 1.2, "tensor core\n(4th generation)", "#2a9d6f", text_color="white")
        box(x0 + 0.1, 2.15, 1.75, 1.25, "LD/ST\nunits", "#e07b39", text_color="white")
        box(x0 + 1.95, 2.15, 0.85, 1.25, "SFU", "#d1495b", text_color="white")
    box(0, 0.9, 12.2, 0.9, "256 KB L1 data cache / shared memory (up to 228 KB shared)", "#e0a040", size=8)
    box(0, 0.0, 12.2, 0.75, "tensor memory accelerator (TMA) · texture units · L1 instruction cache", "#cccccc",
        size=8)
    ax.set_xlim(-0.2, 12.4)
    ax.set_ylim(-0.2, 8.8)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title("One Hopper SM: four partitions share the L1 / shared memory", fontsize=10)
    return ax


def figure(enabled_sms: int = 132):
    """The die and one SM side by side."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2), gridspec_kw={"width_ratios": [1.45, 1]})
    draw_gpu(left, enabled_sms)
    draw_sm(right)
    fig.tight_layout()
    return fig
