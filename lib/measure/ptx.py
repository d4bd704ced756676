"""Reading recorded PTX and SASS listings: the lines that matter, each with a note saying what it does.

Listings are written on a GPU by ``kernels/hardware.py``'s ``record_extra`` into
``data/results/hardware.<kernel>.ptx`` and ``.sass``; their first line says where and when."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

from lib.measure.bench import PAGE_WIDTH
from lib.measure.results import RESULTS

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
    (r"\bSHFL\.DOWN\b", "shuffle: lane i gets i + offset"),
    (r"\bFFMA\b", "fused multiply-add (FP32)"),
    (r"\bFADD\b", "float add (FP32)"),
    (r"\bISETP\b", "compare into a predicate"),
    (r"\bIMAD\.WIDE\b", "i = blockIdx*blockDim+threadIdx"),
    (r"\bSHF\.R\.S32\.HI\b.*0x1f", "sign of i (64-bit, wrap test)"),
    (r"\bLOP3\.LUT R\d+, R\d+(\.reuse)?, UR\d+, RZ, 0xc0", "wrap-around: i<0 ? length : 0"),
    (r"\bLEA\.HI\.X\b.*UR\d+", "address, high half"),
    (r"\bLEA\b.*UR\d+, 0x2", "address base + 4i, low half"),
    (r"@!?P\d BRA\b", "lanes with this predicate jump"),
    (r"\bBSSY\b|\bBSYNC\b", "diverged lanes rejoin here"),
    (r"\bVOTEU?\.ANY\b", "activemask: lanes present"),
    (r"\bEXIT\b", "thread done"),
]
# The control flow of a kernel only: where lanes jump, vote, compute and finish.
CONTROL_NOTES = [(pattern, note) for pattern, note in SASS_NOTES
                 if any(op in pattern for op in ("BRA", "BSSY", "VOTE", "FFMA", "EXIT"))]


def listing(kernel: str, kind: str, folder: Path = RESULTS) -> str | None:
    """The recorded `kind` ('ptx' or 'sass') listing of `kernel`, or None if it has not been recorded yet."""
    path = folder / f"hardware.{kernel}.{kind}"
    return path.read_text() if path.exists() else None


def annotate(text: str, notes: list[tuple[str, str]], limit: int = 40, width: int = 36) -> str:
    """The listing's first line (where it was recorded), then only the lines a note matches, each followed by
    its note; at most `limit` lines. Long operands are shortened to `width` characters. A run of consecutive
    matched lines with the same note shows its first two lines and then one line counting the rest, so a chain
    of 100 FFMAs takes three lines."""
    lines = text.splitlines()
    entries: list[list] = []  # [code, note, lines in the run]
    for line in lines[1:]:
        note = next((note for pattern, note in notes if re.search(pattern, line)), None)
        if note is None:
            continue
        if entries and entries[-1][1] == note and entries[-1][2] >= 2 and (len(entries) < 2 or entries[-2][1] == note):
            entries[-1][2] += 1
            continue
        code = re.sub(r"/\*[0-9a-f]{4}\*/", "", line).split(";")[0].strip() + (";" if ";" in line else "")
        code = re.sub(r"_ZN\w{40,}", "<mangled kernel name>", code)
        entries.append([code if len(code) <= width else code[: width - 1] + "…", note, 1])
        if len(entries) >= 2 and entries[-2][1] == note:
            entries[-1][2] = 2
    out = textwrap.wrap(lines[0], PAGE_WIDTH, subsequent_indent="//   ") if lines else []
    for code, note, count in entries:
        if count > 2:
            out.append(f"{'':<{width}}  ◀ … and {count - 2} more of these")
        out.insert(len(out) - (count > 2), f"{code:<{width}}  ◀ {note}")
        if len(out) > limit:
            out.append("…")
            break
    return "\n".join(out)


def count(kernel: str, opcode: str, folder: Path = RESULTS) -> int | None:
    """How many instructions of the recorded SASS of `kernel` have the opcode `opcode` (a whole word, so
    "BRA" does not count "BRX"); None if the listing has not been recorded."""
    text = listing(kernel, "sass", folder)
    if text is None:
        return None
    return len(re.findall(rf"/\*[0-9a-f]{{4}}\*/\s+(?:@!?U?P\w+\s+)?{re.escape(opcode)}\b", text))


def show(kernel: str, kind: str, folder: Path = RESULTS, limit: int = 40,
         notes: list[tuple[str, str]] | None = None) -> None:
    """Print a recorded listing's annotated lines (`notes`: which lines, each with its note; by default every
    line the kind's notes know), or say how to record it."""
    text = listing(kernel, kind, folder)
    if text is None:
        print(f"not recorded yet: `make record` on a GPU writes\ndata/results/hardware.{kernel}.{kind}")
        return
    default = PTX_NOTES if kind == "ptx" else SASS_NOTES
    print(annotate(text, default if notes is None else notes, limit=limit))
