"""The GPU-instance path as the README tells it: `make lab`, then a chapter in JupyterLab.

The test runs `make lab` itself (a headless server on 127.0.0.1, a free port, a token, no browser, the
repository's jupyter/ configuration), opens chapters/intro.md in Debian's Chromium and checks that it opens
as a notebook (jupytext's viewer, not the text editor) with a kernel that is the book's venv. It then runs
the cells with Shift+Enter, as a reader does, down to the first exercise's solution, and reads in the
page the mode line `import lib` prints, the exercise's "not attempted yet" report for the stub and the
"passed" report for the solution. On CI (no GPU) the kernel runs the simulator.

The reader's own JupyterLab settings and runtime files are kept out (temporary folders), autosave is off so
the chapter on disk is never rewritten, checkpoints go to a temporary folder, and the server and its kernels
are stopped at the end.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import jupytext
import psutil
import pytest

import lib
from test_browser import CHROMIUM, DESKTOP, FLAGS

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "intro.md"
STARTUP_TIMEOUT_S = 90
UI_TIMEOUT_MS = 60_000
# The intro's first exercise, the solution cell's launch line, and the most cells Shift+Enter may run to reach it.
EXERCISE = "add_reversed"
SOLUTION_MARK = "add_reversed_kernel[blocks, threads]"
MAX_CELLS = 40


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A JupyterLab server started by `make lab`, in its own process group."""

    def __init__(self, tmp: Path):
        self.port, self.token = _free_port(), secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        settings = tmp / "settings"
        # Test-only user setting: no autosave, so running cells never writes the chapter back to disk.
        (settings / "@jupyterlab" / "docmanager-extension").mkdir(parents=True)
        (settings / "@jupyterlab" / "docmanager-extension" / "plugin.jupyterlab-settings").write_text(
            json.dumps({"autosave": False}))
        env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings),
                   JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
                   JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_DATA_DIR=str(tmp / "data"))
        args = (f"--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port={self.port} --ServerApp.port_retries=0 "
                f"--IdentityProvider.token={self.token} "
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate "
                # the checkpoint Lab makes when it opens a file goes here, not into chapters/
                f"--FileCheckpoints.checkpoint_dir={tmp / 'checkpoints'}")
        self.log = tmp / "lab.log"
        # CUDA= : the CUDA libraries are a GPU machine's step; this test checks Lab, jupytext and the kernel.
        self.proc = subprocess.Popen(["make", "--no-print-directory", "lab", "CUDA=", f"LAB_ARGS={args}"],
                                     cwd=ROOT, env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            assert self.proc.poll() is None, f"`make lab` exited with {self.proc.returncode}:\n{self.tail()}"
            try:
                self.api("status")
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, f"no server after {STARTUP_TIMEOUT_S} s:\n{self.tail()}"
                time.sleep(0.5)

    def tail(self) -> str:
        return self.log.read_text()[-4000:]

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(f"{self.base}/api/{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def kernel_processes(self) -> list[psutil.Process]:
        return [p for p in psutil.Process(self.proc.pid).children(recursive=True)
                if "ipykernel_launcher" in " ".join(p.cmdline())]

    def stop(self) -> list[str]:
        """Shut the kernels down, stop the server; return what was still running (then killed)."""
        kernels = []
        if self.proc.poll() is None:
            kernels = self.kernel_processes()
            for kernel in self.api("kernels"):
                self.api(f"kernels/{kernel['id']}", method="DELETE")
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        left = [p for p in kernels if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        for p in left:
            p.kill()
        return [" ".join(p.cmdline()) for p in left]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    server = Lab(tmp_path_factory.mktemp("lab"))
    yield server
    left = server.stop()
    assert not left, f"kernels still running after the server stopped (killed now): {left}"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_make_lab_opens_a_chapter_as_a_notebook_and_grades_an_exercise(lab, playwright, tmp_path):
    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} is missing: `make test` installs Debian's chromium"
    from playwright.sync_api import expect

    chapter = ROOT / "chapters" / CHAPTER
    before = _digest(chapter)
    context = playwright.chromium.launch_persistent_context(
        str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=FLAGS,
        viewport=DESKTOP)
    context.set_default_timeout(UI_TIMEOUT_MS)
    try:
        page = context.new_page()
        page.goto(f"{lab.base}/lab/tree/{CHAPTER}?token={lab.token}")

        # Opened by jupytext as a notebook (the text editor would show one .jp-FileEditor instead).
        notebook = page.locator(".jp-NotebookPanel .jp-Notebook")
        page.locator(".jp-NotebookPanel, .jp-FileEditor").first.wait_for()
        assert page.locator(".jp-FileEditor").count() == 0, "the chapter opened in the text editor"
        # The MyST cells, split by jupytext (a notebook shows one empty cell until its content arrives).
        cells = notebook.locator(".jp-Cell")
        expect(cells).to_have_count(len(jupytext.read(chapter).cells), timeout=UI_TIMEOUT_MS)

        # The chapter's kernel started, from the book's venv (the server's own python).
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not [k for k in lab.api("kernels") if k["execution_state"] == "idle"]:
            assert time.monotonic() < deadline, f"no idle kernel: {lab.api('kernels')}\n{lab.tail()}"
            time.sleep(0.5)
        kernels = lab.kernel_processes()
        assert len(kernels) == 1, f"expected one kernel process, found {[k.cmdline() for k in kernels]}"
        assert kernels[0].cmdline()[0].startswith(str(ROOT / ".venv" / "bin") + os.sep), \
            f"the kernel is not the book's venv: {kernels[0].cmdline()}"

        # Shift+Enter from the first cell down to the exercise's solution, as a reader does.
        cells.first.locator(".jp-InputPrompt").click()
        page.keyboard.press("Escape")
        active = notebook.locator(".jp-Cell.jp-mod-active")
        for _ in range(MAX_CELLS):
            last = SOLUTION_MARK in active.inner_text()
            page.keyboard.press("Shift+Enter")
            if last:
                break
        else:
            pytest.fail(f"no cell with {SOLUTION_MARK!r} among the first {MAX_CELLS} cells")

        first_code = notebook.locator(".jp-CodeCell").first
        mode_line = lib.banner().splitlines()[0]
        expect(first_code.locator(".jp-OutputArea")).to_contain_text(mode_line, timeout=UI_TIMEOUT_MS)
        stub_grade = notebook.locator(".jp-CodeCell").filter(has_text=f'grade("{EXERCISE}", {EXERCISE})')
        expect(stub_grade.first.locator(".jp-OutputArea")).to_contain_text(
            f"{EXERCISE}: not attempted yet", timeout=UI_TIMEOUT_MS)
        solution = notebook.locator(".jp-CodeCell").filter(has_text=SOLUTION_MARK)
        expect(solution.locator(".jp-OutputArea")).to_contain_text(f"{EXERCISE}: passed", timeout=UI_TIMEOUT_MS)
        errors = notebook.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]')
        assert errors.count() == 0, f"a cell raised: {errors.first.inner_text()[:2000]}"
    except Exception:
        page.screenshot(path=str(ROOT / "_build" / "lab-failure.png"))
        raise
    finally:
        context.close()
    assert _digest(chapter) == before, f"chapters/{CHAPTER} was rewritten while the test ran"
