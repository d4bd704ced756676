"""The book builds from scratch with no warning, every chapter's notebook runs without error, and every
page loads its scripts, stylesheets, fonts and images from the site itself, never from another host.

The book is built once per session with `make book`, into a temporary folder (the `book` fixture of
tests/conftest.py, shared with tests/test_browser.py), so every notebook is
executed afresh (execute_notebooks: force) and no earlier build can hide a warning.
"""
from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml
from conftest import run_logged
from tools.notebooks import toc_docs

ROOT = Path(__file__).resolve().parent.parent
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
SPHINX = CONFIG["sphinx"]["config"]
# A Sphinx/docutils/jupyter-book problem line, e.g. "chapters/x.md:12: WARNING: ..." or "[Warning] ...".
# (Not "[IPKernelApp] WARNING | Kernel is running over TCP ...", which every kernel start prints.)
PROBLEM = re.compile(r"\b(WARNING|ERROR|SEVERE|CRITICAL):|\[Warning\]|build finished with problems")


DOCS = toc_docs()


# ipykernel's shutdown race, logged by the kernel process after the notebook's last cell: the control thread
# flushes stdout (process_control) after the IOPub thread has closed its event pipe, and tornado logs the
# ZMQError (seen once in a CI build, 2026-12-01, in a notebook whose 14 cells all ran; upstream reports of the
# same error: spyder-ide/spyder#17615, #20668). Exactly that block is not a problem of the book; every cell's
# own errors are checked by test_chapter_executed_without_error.
SHUTDOWN_RACE = re.compile(r"^ERROR:tornado\.general:Uncaught exception in ZMQStream callback\n"
                           r"Traceback \(most recent call last\):\n((?:  .*\n)+)"
                           r"zmq\.error\.ZMQError: Socket operation on non-socket$", re.MULTILINE)


def without_shutdown_race(output: str) -> str:
    """The log without ipykernel's shutdown-race traceback (only where it passes through process_control and
    the iostream flush)."""
    return SHUTDOWN_RACE.sub(lambda m: "" if "in process_control" in m[1] and "iostream.py" in m[1] else m[0],
                             output)


def problems(output: str) -> list[str]:
    return [line for line in without_shutdown_race(output).splitlines() if PROBLEM.search(line)]


RACE_LOG = """reading sources... [ 17%] chapters/debugging
ERROR:tornado.general:Uncaught exception in ZMQStream callback
Traceback (most recent call last):
  File "/x/zmq/eventloop/zmqstream.py", line 585, in _log_error
    f.result()
  File "/x/ipykernel/kernelbase.py", line 406, in process_control
    sys.stdout.flush()
  File "/x/ipykernel/iostream.py", line 343, in schedule
    self._event_pipe.send(b"")
           ^^^^^^^^^^^^^^^^^^
zmq.error.ZMQError: Socket operation on non-socket
chapters/debugging.md: Executed notebook in 2.47 seconds [mystnb]
"""


def test_problems_ignore_only_the_kernel_shutdown_race():
    assert problems(RACE_LOG) == []
    other_error = RACE_LOG.replace("Socket operation on non-socket", "Address already in use")
    assert problems(other_error) == ["ERROR:tornado.general:Uncaught exception in ZMQStream callback"]
    elsewhere = RACE_LOG.replace("process_control", "dispatch_shell")
    assert problems(elsewhere) == ["ERROR:tornado.general:Uncaught exception in ZMQStream callback"]
    assert problems(RACE_LOG + "chapters/x.md:12: WARNING: undefined label\n") == [
        "chapters/x.md:12: WARNING: undefined label"]


def test_book_builds_without_warnings(book):
    _, rc, log = book
    found = problems(log)
    assert rc == 0 and not found, (
        f"make book exited with {rc}; {len(found)} problem line(s):\n" + "\n".join(found[:40])
        + f"\n--- end of the log ---\n{log[-3000:]}")


def test_every_toc_document_has_a_page(html):
    missing = [doc for doc in DOCS if not (html / f"{doc}.html").is_file()]
    assert not missing, f"no HTML page for {missing} (listed in _toc.yml)"


def is_notebook(doc: str) -> bool:
    """An .ipynb, or a MyST text notebook (front matter with a kernelspec)."""
    if (ROOT / f"{doc}.ipynb").is_file():
        return True
    text = (ROOT / f"{doc}.md").read_text()
    return text.startswith("---") and "kernelspec:" in text.split("\n---", 1)[0]


@pytest.mark.parametrize("doc", DOCS)
def test_chapter_executed_without_error(book, doc):
    out = book[0] / "_build"
    if not is_notebook(doc):
        pytest.skip(f"{doc} is plain text, not a notebook")
    reports = sorted((out / "html" / "reports").glob(f"{doc}.*"))
    assert not reports, f"{doc}: execution failed, see {reports[0]}:\n{reports[0].read_text()[-3000:]}"
    executed = out / "jupyter_execute" / f"{doc}.ipynb"
    assert executed.is_file(), f"{doc}: no executed notebook at {executed} (was it executed at all?)"
    nb = json.loads(executed.read_text())
    code = [cell for cell in nb["cells"] if cell["cell_type"] == "code"]
    assert code, f"{doc}: a notebook with no code cell"
    for index, cell in enumerate(code):
        tags = cell.get("metadata", {}).get("tags", [])
        if "skip-execution" in tags:
            continue
        where = f"{doc}: code cell {index} ({cell['source'][:60]!r})"
        assert isinstance(cell.get("execution_count"), int), f"{where} did not run"
        if "raises-exception" not in tags:
            errors = [o for o in cell["outputs"] if o["output_type"] == "error"]
            assert not errors, f"{where} raised {errors[0]['ename']}: {errors[0]['evalue']}"
    assert any(cell["outputs"] for cell in code), f"{doc}: no cell printed or displayed anything"


@pytest.mark.parametrize("doc", DOCS)
def test_every_solution_passes_its_grade(book, doc):
    """A revealable solution that fails its own check would teach the wrong thing: every cell tagged
    `solution` that calls grade() must show a passed report in the built book."""
    executed = book[0] / "_build" / "jupyter_execute" / f"{doc}.ipynb"
    if not is_notebook(doc) or not executed.is_file():
        pytest.skip(f"{doc} has no executed notebook (test_chapter_executed_without_error says why)")
    nb = json.loads(executed.read_text())
    for cell in nb["cells"]:
        if "solution" in cell.get("metadata", {}).get("tags", []) and "grade(" in "".join(cell["source"]):
            shown = "".join("".join(o.get("data", {}).get("text/plain", "")) + "".join(o.get("text", ""))
                            for o in cell["outputs"])
            assert re.search(r": PASSED\b", shown), \
                f"{doc}: a solution cell's grade did not pass:\n{''.join(cell['source'])[:300]}\n{shown[:800]}"


# --- Everything a page loads comes from the site itself ------------------------------------------------

# <link rel=...> values that only name another page; every other <link href> is something the browser loads.
NAVIGATION_RELS = {"canonical", "alternate", "prev", "next", "index", "search", "author", "license",
                   "help", "bookmark", "home", "first", "last", "up", "top", "contents", "copyright"}
JS_TYPES = {"", "text/javascript", "application/javascript", "module"}
CSS_URL = re.compile(r"url\(\s*['\"]?([^'\")]+)|@import\s+['\"]([^'\"]+)")


class Loads(HTMLParser):
    """Collects (what, url) for everything a page makes the browser fetch, and its inline scripts."""

    def __init__(self):
        super().__init__()
        self.urls: list[tuple[str, str]] = []
        self.inline_js: list[str] = []
        self.scripts: list[str] = []  # src of every <script src>, in page order
        self._in_js = self._in_css = False

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        keys = {"script": ["src"], "img": ["src", "srcset"], "source": ["src", "srcset"],
                "video": ["src", "poster"], "audio": ["src"], "track": ["src"], "iframe": ["src"],
                "embed": ["src"], "object": ["data"], "input": ["src"], "image": ["href", "xlink:href"],
                "use": ["href", "xlink:href"]}.get(tag, [])
        if tag == "link" and not set(a.get("rel", "").lower().split()) <= NAVIGATION_RELS:
            keys = ["href", "imagesrcset"]
        for key in keys:
            if a.get(key):
                for url in (a[key].split(",") if key.endswith("srcset") else [a[key]]):
                    self.urls.append((f"<{tag} {key}>", url.strip().split(" ")[0]))
        if "style" in a:
            self.urls.extend((f"<{tag} style>", m[0] or m[1]) for m in CSS_URL.findall(a["style"]))
        if tag == "script":
            if a.get("src"):
                self.scripts.append(a["src"])
            self._in_js = not a.get("src") and a.get("type", "").lower() in JS_TYPES
        self._in_css = tag == "style"

    def handle_endtag(self, tag):
        self._in_js = self._in_css = False

    def handle_data(self, data):
        if self._in_js:
            self.inline_js.append(data)
        if self._in_css:
            self.urls.extend(("<style>", m[0] or m[1]) for m in CSS_URL.findall(data))


def foreign(url: str) -> bool:
    """A URL the browser would fetch from some host rather than from the site's own files."""
    return url.startswith("//") or bool(re.match(r"^[a-z][a-z0-9+.-]*://", url, re.I))


def local_file(page: Path, url: str) -> Path | None:
    """The built file a same-site URL points at, or None for data:, javascript:, fragments and the like."""
    if url.startswith(("#", "data:", "javascript:", "blob:", "about:")) or foreign(url):
        return None
    path = unquote(urlsplit(url).path)
    return (page.parent / path).resolve() if path else None


def scan_pages(html: Path) -> list[str]:
    """One line per foreign load or missing local file, over every built page and stylesheet."""
    bad = []
    for page in sorted(html.rglob("*.html")):
        if page.relative_to(html).parts[0] == "_static":
            continue  # theme templates (webpack-macros.html), not pages
        parser = Loads()
        parser.feed(page.read_text(errors="replace"))
        name = page.relative_to(html)
        for what, url in parser.urls:
            target = local_file(page, url)
            if foreign(url):
                bad.append(f"{name}: {what} loads {url} from another host")
            elif target is not None and not target.exists():
                bad.append(f"{name}: {what} {url} is missing from the build")
        for body in parser.inline_js:
            bad.extend(f"{name}: an inline script names {m}" for m in re.findall(r"(?:https?:)?//[\w.-]+\.\w+/\S*", body))
    for sheet in sorted(html.rglob("*.css")):
        for m in CSS_URL.findall(sheet.read_text(errors="replace")):
            if foreign(m[0] or m[1]):
                bad.append(f"{sheet.relative_to(html)}: loads {m[0] or m[1]} from another host")
    return bad


def test_pages_load_nothing_from_other_hosts(html):
    pages = list(html.rglob("*.html"))
    assert len(pages) >= len(DOCS)
    bad = scan_pages(html)
    assert not bad, f"{len(bad)} problem(s):\n" + "\n".join(bad[:40])


def test_served_javascript_is_in_the_build(html):
    static = html / "_static"
    wanted = list(SPHINX["nb_ipywidgets_js"]) + [SPHINX["mathjax_path"], "book-js/anywidget/index.js"]
    for path in wanted:
        assert not foreign(path), f"{path} in _config.yml is not served by the site"
        assert (static / path).is_file(), f"_static/{path} is missing: did `make vendor` run?"
    # embed-amd.js loads its icon fonts from its own folder by name.
    embed = static / "book-js/html-manager/embed-amd.js"
    fonts = set(re.findall(r'\.p\+"([0-9a-f]+\.(?:woff2?|ttf|eot|svg))"', embed.read_text()))
    assert fonts, "no font names found in embed-amd.js: has its format changed?"
    missing = sorted(f for f in fonts if not (embed.parent / f).is_file())
    assert not missing, f"fonts embed-amd.js needs are missing next to it: {missing}"


# --- The widget wiring, on a scratch book with one slider ------------------------------------------------

WIDGET_NOTEBOOK = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
# Widgets

```{code-cell} ipython3
import ipywidgets
ipywidgets.IntSlider(value=7, description="n")
```
"""


@pytest.fixture(scope="session")
def widget_page(tmp_path_factory) -> tuple[Path, int, str]:
    """A one-page book with the book's _config.yml and static folders, whose notebook shows a slider.
    The page sits in a subfolder, as chapters do, so its script paths climb out of it."""
    src = tmp_path_factory.mktemp("widget-book")
    shutil.copy(ROOT / "_config.yml", src / "_config.yml")
    for static in [*SPHINX["html_static_path"], *CONFIG["sphinx"].get("local_extensions", {}).values()]:
        (src / static).parent.mkdir(parents=True, exist_ok=True)
        (src / static).symlink_to(ROOT / static)
    (src / "_toc.yml").write_text("format: jb-book\nroot: chapters/widgets\n")
    (src / "chapters").mkdir()
    (src / "chapters/widgets.md").write_text(WIDGET_NOTEBOOK)
    rc, log = run_logged([str(ROOT / ".venv/bin/jupyter-book"), "build", str(src), "-W", "-n", "--keep-going"],
                         src / "build.log")
    return src / "_build/html/chapters/widgets.html", rc, log


def test_widget_page_loads_the_local_widget_scripts_in_order(widget_page):
    page, rc, log = widget_page
    assert rc == 0 and not problems(log), "\n".join(problems(log)) + log[-3000:]
    parser = Loads()
    text = page.read_text()
    parser.feed(text)
    assert 'type="application/vnd.jupyter.widget-state+json"' in text, "the page carries no widget state"
    assert 'type="application/vnd.jupyter.widget-view+json"' in text, "the slider's view is not on the page"
    wanted = list(SPHINX["nb_ipywidgets_js"])
    loaded = [urlsplit(src).path for src in parser.scripts]
    found = [next((i for i, path in enumerate(loaded) if path.endswith("_static/" + js)), None) for js in wanted]
    assert None not in found and found == sorted(found), (
        f"the page must load {wanted} in this order; it loads {loaded}")
    bad = scan_pages(page.parent.parent)
    assert not bad, "\n".join(bad)
