"""Execute the book's notebooks (MyST markdown or .ipynb) top to bottom in a fresh kernel.

``python -m tools.notebooks [paths...]`` runs every chapter of _toc.yml (or the given files) and prints one
line per notebook: how long it took and whether it executed without error. Used on the GPU machine to run
the chapters end to end, and by the tests.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from lib.mode import ROOT


def toc_docs(toc_path: Path = ROOT / "_toc.yml") -> list[str]:
    """Every document a jb-book table of contents names (root, parts, chapters, sections), no suffix."""
    import re

    import yaml

    toc = yaml.safe_load(toc_path.read_text())
    docs = []

    def walk(entry: dict):
        if "file" in entry:
            docs.append(re.sub(r"\.(md|ipynb)$", "", entry["file"]))
        if "glob" in entry:
            docs.extend(sorted(str(p.relative_to(ROOT).with_suffix(""))
                               for suffix in (".md", ".ipynb") for p in ROOT.glob(entry["glob"] + suffix)))
        for key in ("parts", "chapters", "sections"):
            for child in entry.get(key) or []:
                walk(child)

    walk({"file": toc["root"], **{k: v for k, v in toc.items() if k in ("parts", "chapters", "sections")}})
    return docs


def toc_chapters() -> list[Path]:
    """The notebook files of _toc.yml's documents, in reading order."""
    out = []
    for name in toc_docs():
        for ext in (".md", ".ipynb"):
            path = ROOT / (name + ext)
            if path.exists():
                out.append(path)
                break
    return out


def read(path: Path):
    import jupytext

    return jupytext.read(path)


RUNNING: dict = {}  # the notebook and cell being executed (for the messages when a kernel dies or we are stopped)


def running_cell() -> str:
    first = RUNNING.get("cell", {}).get("source", "").strip().splitlines()[:3]
    return f"cell {RUNNING.get('index')} of {RUNNING.get('path')}:\n  " + "\n  ".join(first) + "\n"


def _stopped(signum, frame):
    """SIGTERM (e.g. from `timeout`, which signals the kernel too): say where, then stop."""
    print(f"stopped by signal {signum} in {running_cell()}", flush=True)
    os._exit(128 + signum)


def execute(path: Path, timeout: int = 1200, kernel_name: str = "python3"):
    """Execute one notebook with its folder as working directory. Returns (executed notebook, seconds,
    error or None)."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    nb = read(path)
    RUNNING.clear()
    RUNNING["path"] = path
    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel_name,
                            resources={"metadata": {"path": str(path.parent)}},
                            on_cell_start=lambda cell, cell_index: RUNNING.update(index=cell_index, cell=cell))
    t0 = time.perf_counter()
    try:
        client.execute()
        error = None
    except CellExecutionError as exc:
        error = exc
    except (DeadKernelError, AssertionError) as exc:  # nbclient's cleanup of a dead kernel may assert instead
        error = RuntimeError(f"the kernel died in {running_cell()} ({type(exc).__name__}: {exc})")
    return nb, time.perf_counter() - t0, error


def warning_boxes(nb) -> list[str]:
    """What a reader would see as a red/pink box: stderr streams and error outputs (first line of each)."""
    found = []
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                text = "".join(out.get("text", "")).strip()
            elif out.get("output_type") == "error":
                text = f"{out.get('ename')}: {out.get('evalue')}"
            else:
                continue
            if text:
                found.append(f"cell {index}: {text.splitlines()[0][:200]}")
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    parser.add_argument("--save", type=Path, default=None, help="folder for the executed .ipynb files")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stopped)
    paths = args.paths or toc_chapters()
    failed = 0
    for path in paths:
        nb, seconds, error = execute(path, timeout=args.timeout)
        status = "ok" if error is None else "FAILED"
        boxes = warning_boxes(nb)
        print(f"{status:<6} {seconds:7.1f} s  {path}  ({len(boxes)} warning boxes)", flush=True)
        for line in boxes[:10]:
            print(f"    {line}", flush=True)
        if error is not None:
            failed += 1
            print(str(error)[-3000:])
        if args.save is not None:
            import nbformat

            args.save.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, args.save / (path.stem + ".ipynb"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
