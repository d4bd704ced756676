"""``make student`` (``python -m tools.student OUT``): the student edition, with every solution cell removed.

Solutions are marked one way throughout the book: a code cell tagged ``solution`` (shown folded on the
website, for self-study). The student edition copies lib/, kernels/, data/ and requirements.txt as they are
and writes each chapter of _toc.yml twice — MyST markdown and .ipynb — without those cells, for instructors
who grade the exercises (``python -m lib.grading.grader``).
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from lib.grading.grader.folder import STUDENT_EDITION
from lib.mode import ROOT
from tools.notebooks import read, toc_chapters

SOLUTION_TAG = "solution"


def is_solution(cell) -> bool:
    return SOLUTION_TAG in cell.get("metadata", {}).get("tags", [])


def strip_solutions(nb):
    """A copy of the notebook without its solution cells, and how many were removed."""
    import copy

    out = copy.deepcopy(nb)
    out.cells = [c for c in nb.cells if not is_solution(c)]
    return out, len(nb.cells) - len(out.cells)


def build(out: Path, chapters: list[Path] | None = None) -> dict[str, int]:
    """Write the student edition into `out`; returns solution cells removed per chapter."""
    import jupytext

    resolved, build_dir = out.resolve(), (ROOT / "_build").resolve()
    if (resolved == ROOT or ROOT in resolved.parents) and build_dir not in resolved.parents:
        raise ValueError(f"the student edition goes inside _build/ or outside the repository, not {out}")
    if out.exists():
        shutil.rmtree(out)
    (out / "chapters").mkdir(parents=True)
    for name in STUDENT_EDITION:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, out / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, out / name)
    for link in ("lib", "kernels"):  # as in the book: notebooks import them from their own folder
        (out / "chapters" / link).symlink_to(Path("..") / link)
    removed = {}
    for path in chapters or toc_chapters():
        nb, n = strip_solutions(read(path))
        removed[path.stem] = n
        jupytext.write(nb, out / "chapters" / f"{path.stem}.md", fmt="md:myst")
        jupytext.write(nb, out / "chapters" / f"{path.stem}.ipynb", fmt="ipynb")
    return removed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path, nargs="?", default=ROOT / "_build" / "student")
    args = parser.parse_args(argv)
    removed = build(args.out)
    for chapter, n in removed.items():
        print(f"{chapter}: {n} solution cell(s) removed")
    print(f"student edition written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
