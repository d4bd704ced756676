"""Runs inside a submission's sandbox: execute the notebook top to bottom and tell the grader how it went.

``python -m lib.grading.grader.execute NOTEBOOK LIMIT_S``. A first, hidden cell makes ``grade()`` the instructor
mode's (:func:`lib.grading.grader.remote.grade`: the grader decides every verdict). Cells that raise do not stop the
run (a broken cell must not hide later exercises); the first such error is reported. When the notebook is
done, or could not be run (unreadable file, no code cells, kernel died, a cell past the time limit), one
``outcome`` message goes to the grader. Everything here runs beside the submission's code, so the grader
treats the outcome as the submission's own word: it only shapes that student's rows.
"""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

SETUP = "import lib.grading.grader.remote as _grader_remote\n_grader_remote.install()\ndel _grader_remote"


def run(path: Path, limit_s: float) -> tuple[str, str]:
    """(problem that stopped the notebook, first error a cell raised); empty strings when none."""
    import jupytext
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    if path.stat().st_size == 0:
        return "the file is empty", ""
    try:
        nb = jupytext.read(path)
    except Exception as exc:  # a corrupt .ipynb (bad JSON, wrong schema) or unreadable file
        return f"the file is not a readable notebook ({type(exc).__name__}: {str(exc)[:200]})", ""
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    if not code_cells:
        return "the notebook has no code cells", ""
    nb.cells.insert(0, nbformat.v4.new_code_cell(SETUP))
    # Unix sockets in the working folder: the sandbox has no network, not even loopback.
    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path.cwd() / ".kernel"))
    last_cell_done = threading.Event()
    client = NotebookClient(nb, km=km, timeout=int(limit_s), allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}},
                            on_cell_executed=lambda cell_index, **_: cell_index == len(nb.cells) - 1
                            and last_cell_done.set())
    threading.Thread(target=_watch_kernel, args=(km, last_cell_done), daemon=True).start()
    try:
        client.execute()
    except CellTimeoutError:
        return f"a cell did not finish within {limit_s:.0f} s (stopped)", ""
    except DeadKernelError:
        return "the notebook's kernel died (a crash or exit inside the notebook)", ""
    except Exception as exc:  # the kernel could not start, or nbclient failed in another way
        return f"the notebook could not be run ({type(exc).__name__}: {str(exc)[:200]})", ""
    setup_errors = [o for o in nb.cells[0].get("outputs", []) if o.get("output_type") == "error"]
    if setup_errors:
        return f"the grader's setup cell failed ({setup_errors[0].get('ename')}: {setup_errors[0].get('evalue')})", ""
    for number, cell in enumerate(code_cells, start=1):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                return "", f"code cell {number} raised {out.get('ename')}: {str(out.get('evalue'))[:200]}"
    return "", ""


def _watch_kernel(km, last_cell_done: threading.Event):
    """nbclient may wait forever for output from a kernel that exited mid-cell: notice the exit ourselves."""
    from lib.grading.grader.remote import report_outcome

    while not last_cell_done.wait(0.5):
        process = getattr(km.provisioner, "process", None) if km.has_kernel else None
        if process is not None and process.poll() is not None:
            problem = "the notebook's kernel died (a crash or exit inside the notebook)"
            print(problem)
            report_outcome(problem, "")
            os._exit(0)


def main(argv=None) -> int:
    from lib.grading.grader.remote import report_outcome

    argv = sys.argv[1:] if argv is None else argv
    problem, cell_error = run(Path(argv[0]), float(argv[1]))
    print(problem or cell_error or "ran to the end")
    report_outcome(problem, cell_error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
