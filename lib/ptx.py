"""Reading recorded PTX and SASS listings: the lines that matter, each with a note saying what it does.

Listings are written on a GPU by ``kernels/hardware.py``'s ``record_extra`` into
``data/results/hardware.<kernel>.ptx`` and ``.sass``; their first line says where and when."""
from __future__ import annotations

import re
from pathlib import Path

from .results import RESULTS

# (regular expression on one line, note); the first pattern that matches a line annotates it.
PTX_NOTES = [
    (r"mov\.u32\s+%r\d+, %(tid|ntid|ctaid)\.x", "threadIdx / blockDim / blockIdx"),
    (r"ld\.global\.v4\.f32", "one 16-byte load: four floats"),
    (r"st\.global\.v4\.f32", "one 16-byte store"),
    (r"ld\.global\.f32", "4-byte global load, 64-bit address"),
    (r"st\.global\.f32", "4-byte global store"),
    (r"ld\.shared", "shared load, 32-bit address"),
    (r"shfl\.sync\.down", "register of lane + offset"),
    (r"fma\.rn\.f32", "fused multiply-add"),
    (r"add\.f32", "the addition"),
    (r"setp\.", "compare into a predicate"),
    (r"@%p\d+ bra", "branch on it (an `if`)"),
    (r"activemask", "lanes here together"),
    (r"^\s*ret;", "thread done"),
]
SASS_NOTES = [
    (r"\bS2R\b.*SR_(TID|CTAID)", "threadIdx.x / blockIdx.x"),
    (r"\bS2UR\b", "to a uniform (per-warp) register"),
    (r"\bLDG\.E\.128\b", "128-bit load: 512 B per warp"),
    (r"\bSTG\.E\.128\b", "128-bit store"),
    (r"\bLDG\.E\b", "32-bit global load per lane"),
    (r"\bSTG\.E\b", "32-bit global store per lane"),
    (r"\bSHFL\.DOWN\b", "shuffle: lane i gets lane i + offset"),
    (r"\bFFMA\b", "fused multiply-add (FP32)"),
    (r"\bFADD\b", "float add (FP32)"),
    (r"\bISETP\b", "compare into a predicate"),
    (r"\bIMAD\.WIDE\b", "address = base + 4·i (64-bit)"),
    (r"\bBSSY\b|\bBSYNC\b", "diverged lanes rejoin here"),
    (r"\bVOTEU?\.ANY\b", "activemask: vote of lanes present"),
    (r"\bEXIT\b", "thread done"),
]


def listing(kernel: str, kind: str, folder: Path = RESULTS) -> str | None:
    """The recorded `kind` ('ptx' or 'sass') listing of `kernel`, or None if it has not been recorded yet."""
    path = folder / f"hardware.{kernel}.{kind}"
    return path.read_text() if path.exists() else None


def annotate(text: str, notes: list[tuple[str, str]], limit: int = 40, width: int = 48) -> str:
    """The listing's first line (where it was recorded), then only the lines a note matches, each followed by
    its note; at most `limit` lines. Long operands are shortened to `width` characters."""
    lines = text.splitlines()
    out = [lines[0]] if lines else []
    for line in lines[1:]:
        code = re.sub(r"/\*[0-9a-f]{4}\*/", "", line).split(";")[0].strip() + (";" if ";" in line else "")
        code = re.sub(r"_ZN\w{40,}", "<mangled kernel name>", code)
        for pattern, note in notes:
            if re.search(pattern, line):
                shown = code if len(code) <= width else code[: width - 1] + "…"
                out.append(f"{shown:<{width}}  ◀ {note}")
                break
        if len(out) > limit:
            out.append("…")
            break
    return "\n".join(out)


def show(kernel: str, kind: str, folder: Path = RESULTS, limit: int = 40) -> None:
    """Print a recorded listing's annotated lines, or say how to record it."""
    text = listing(kernel, kind, folder)
    if text is None:
        print(f"not recorded yet: `make record` on a GPU writes\ndata/results/hardware.{kernel}.{kind}")
        return
    print(annotate(text, PTX_NOTES if kind == "ptx" else SASS_NOTES, limit=limit))
