"""Child process of the folder grader: execute one submission and print what went wrong, if anything.

``python -m lib.grader.execute PATH LIMIT_S``. Exit 0: the notebook ran (cells may have raised: execution
goes on past them, so a broken cell does not hide later exercises; the first such error is printed). Exit 1: the last line of stdout says why
it could not be run (unreadable file, kernel died, time limit).
"""
from __future__ import annotations

import sys
from pathlib import Path


def _fail(message: str) -> int:
    print(message)
    return 1


def main(argv=None) -> int:
    path, limit_s = Path(sys.argv[1] if argv is None else argv[0]), float(sys.argv[2] if argv is None else argv[1])
    import jupytext
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    if path.stat().st_size == 0:
        return _fail("the file is empty")
    try:
        nb = jupytext.read(path)
    except Exception as exc:  # a corrupt .ipynb (bad JSON, wrong schema) or unreadable file
        return _fail(f"the file is not a readable notebook ({type(exc).__name__}: {str(exc)[:200]})")
    if not any(c.cell_type == "code" for c in nb.cells):
        return _fail("the notebook has no code cells")
    client = NotebookClient(nb, timeout=int(limit_s), allow_errors=True, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except CellTimeoutError:
        return _fail(f"a cell did not finish within {limit_s:.0f} s (stopped)")
    except DeadKernelError:
        return _fail("the notebook's kernel died (a crash or exit inside the notebook)")
    except Exception as exc:  # the kernel could not start, or nbclient failed in another way
        return _fail(f"the notebook could not be run ({type(exc).__name__}: {str(exc)[:200]})")
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    for number, cell in enumerate(code_cells, start=1):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                print(f"code cell {number} raised {out.get('ename')}: {str(out.get('evalue'))[:200]}")
                return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
