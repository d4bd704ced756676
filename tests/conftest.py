"""`import lib` before any test module imports numba.cuda: lib must choose GPU or simulator first."""
import lib  # noqa: F401

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT_S = 1200
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run_logged(cmd: list[str], log: Path, **kwargs) -> tuple[int, str]:
    """Run `cmd` in the repository, its output (colours stripped) returned and written to `log`."""
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=BUILD_TIMEOUT_S, **kwargs)
    output = ANSI.sub("", proc.stdout)
    log.write_text(output)
    return proc.returncode, output


@pytest.fixture(scope="session")
def book(tmp_path_factory):
    """Build the book as `make book` does, into a fresh folder, once per session: tests/test_book.py checks
    the build and tests/test_browser.py opens it in Chromium. Returns (folder, exit status, log)."""
    out = tmp_path_factory.mktemp("book")
    rc, log = run_logged(["make", "--no-print-directory", "venv", "vendor"], out / "prepare.log")
    assert rc == 0, f"make venv vendor failed:\n{log[-4000:]}"
    rc, log = run_logged(["make", "--no-print-directory", "book", f"BOOK_OUT={out}"], out / "build.log")
    return out, rc, log


@pytest.fixture(scope="session")
def html(book) -> Path:
    return book[0] / "_build" / "html"


@pytest.fixture(scope="session")
def playwright():
    """One Playwright driver for the whole session: its sync API refuses to start a second one while the
    first is running (test_browser's Chromium stays open for the session), so every browser test
    launches its Chromium from this one."""
    from playwright.sync_api import sync_playwright

    driver = sync_playwright().start()
    yield driver
    driver.stop()
