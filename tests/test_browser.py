"""The built site as a reader's browser sees it: headless Chromium (Debian's package, driven by Playwright)
opens every page from a local HTTP server on 127.0.0.1.

Every page loads with no console error, no failed request and no request to another host. On each widget
page a control is moved to several settings and the number the widget then shows must equal what its
Python twin in lib computes — the widgets' maths runs in the page's JavaScript, with no kernel. Search
finds pages, previous/next links chain the chapters, each chapter offers its .ipynb and MyST source for
download and a Colab link, pages are readable at a phone's width, and the widgets render in the dark theme.

Nothing on a chapter page is clipped at a 1280 px window: no table or output block is wider than the article's
text column or scrolls sideways inside it.

Screenshots, one per chapter (light, full page), plus phone-width and dark-theme ones, are saved under
<build>/_build/html/_screenshots/ (the book built once per session by the `book` fixture of conftest.py) and
copied to the repository's _build/screenshots/.
"""
from __future__ import annotations

import functools
import http.server
import json
import math
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import urlsplit

import os

import pytest
import yaml

from tools.notebooks import toc_docs

from lib.hw import occupancy as occupancy_model
from lib.hw import roofline as roofline_model
from lib.hw.specs import GPUS
from lib.widgets import bank_conflicts, online_softmax

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
# Offline-safe headless flags (TOOLCHAIN.md); a fresh profile per run comes from launch_persistent_context.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
WIDGET_TIMEOUT_MS = 30_000


DOCS = toc_docs()


# --- The browser and the server -------------------------------------------------------------------------

if os.environ.get("BOOK_HTML"):
    @pytest.fixture(scope="session")
    def html() -> Path:
        """BOOK_HTML=<folder>/_build/html: test a site already built (`make book BOOK_OUT=<folder>`) instead of
        building it again, e.g. while editing one page's layout."""
        return Path(os.environ["BOOK_HTML"]).resolve()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def site(html):
    """http://127.0.0.1:<port>/ serving the built site."""
    assert (html / "index.html").is_file(), f"no built site at {html}"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(QuietHandler, directory=str(html)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def shots(html) -> Path:
    """The build's _screenshots/ folder; copied at the end of the session to the repository's
    _build/screenshots/ (ignored by git), a path that outlives pytest's temporary folders."""
    folder = html / "_screenshots"
    folder.mkdir(exist_ok=True)
    yield folder
    shutil.copytree(folder, ROOT / "_build" / "screenshots", dirs_exist_ok=True)


@pytest.fixture(scope="session")
def browser_context(playwright, tmp_path_factory):
    """Chromium with a fresh user-data-dir. No skip: a machine without Chromium fails here (`make test`
    installs it first)."""
    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} is missing: `make test` installs Debian's chromium"
    profile = tmp_path_factory.mktemp("chromium-profile")
    context = playwright.chromium.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS,
        viewport=DESKTOP, service_workers="block")
    context.set_default_timeout(WIDGET_TIMEOUT_MS)
    yield context
    context.close()


class Visit:
    """A page opened in a fresh tab, with every console error, page error, failed or 4xx/5xx request and
    request to another host written down (requests to other hosts are also refused)."""

    def __init__(self, context, site: str, path: str, viewport=DESKTOP, dark=False):
        self.site = site
        self.problems: list[str] = []
        self.page = context.new_page()
        self.page.set_viewport_size(viewport)
        if dark:
            # pydata-sphinx-theme reads the reader's choice from localStorage before it paints.
            self.page.add_init_script("localStorage.setItem('mode', 'dark'); localStorage.setItem('theme', 'dark');")
        self.page.route("**/*", self._route)
        self.page.on("console", lambda m: m.type == "error" and self.problems.append(f"console error: {m.text}"))
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("requestfailed", lambda r: self.problems.append(f"failed request: {r.url} ({r.failure})"))
        self.page.on("response", lambda r: r.status >= 400 and self.problems.append(f"HTTP {r.status}: {r.url}"))
        self.page.goto(site + path, wait_until="load")
        self.page.wait_for_load_state("networkidle")

    def _route(self, route):
        url = route.request.url
        if url.startswith(self.site) or url.startswith(("data:", "blob:", "about:")):
            route.continue_()
        else:
            self.problems.append(f"request to another host: {url}")
            route.abort()

    def settle(self):
        """Let lazily loaded parts (MathJax fonts, widget modules) finish, then report what went wrong."""
        self.page.wait_for_load_state("networkidle")
        self.page.wait_for_timeout(200)
        return self.problems

    def close(self):
        self.page.close()


@pytest.fixture
def visit(browser_context, site):
    opened = []

    def open_(path, **kwargs):
        v = Visit(browser_context, site, path, **kwargs)
        opened.append(v)
        return v

    yield open_
    for v in opened:
        v.close()


# Pages with more than one widget (all others carry at most one).
WIDGETS_ON_PAGE = {"chapters/tensorcores": 2}  # the fragment layouts, the roofline with the mma.sync roofs


def widget(page, expected: int = 1):
    """The output area that holds the page's first anywidget, once the page's `expected` widgets have
    rendered their controls."""
    from playwright.sync_api import expect

    controls = "input[type=range], select"  # sliders, or the fragment widget's menus
    page.wait_for_selector(f".cell_output :is({controls})", state="attached", timeout=WIDGET_TIMEOUT_MS)
    box = page.locator(".cell_output").filter(has=page.locator(controls))
    expect(box).to_have_count(expected, timeout=WIDGET_TIMEOUT_MS)
    return box.first


def control(box, label: str, tag: str):
    """The <select>/<input> inside the <label> whose text starts with `label`."""
    found = box.locator("label").filter(has_text=re.compile(rf"^\s*{re.escape(label)}")).locator(tag)
    assert found.count() == 1, f"no single {tag} labelled {label!r} in the widget"
    return found.first


def numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?", text.replace(",", ""))]


def close_to(shown: float, exact: float, digits: int) -> bool:
    """`shown` is `exact` printed with `digits` significant digits."""
    return math.isclose(shown, exact, rel_tol=0.51 * 10 ** (1 - digits))


# --- Every page loads cleanly ------------------------------------------------------------------------------

def site_pages(html: Path) -> list[str]:
    return sorted(str(p.relative_to(html)) for p in html.rglob("*.html")
                  if p.relative_to(html).parts[0] not in ("_static", "_sources", "_screenshots", "reports"))


def test_every_toc_page_is_served(html):
    pages = site_pages(html)
    missing = [d for d in DOCS if f"{d}.html" not in pages]
    assert not missing and "search.html" in pages, f"pages missing from the build: {missing}"


@pytest.mark.parametrize("doc", DOCS)
def test_chapter_loads_cleanly_and_is_photographed(visit, shots, doc):
    v = visit(f"{doc}.html")
    page = v.page
    assert page.locator("h1").count() >= 1, f"{doc}: no heading rendered"
    if page.locator("script[type='application/vnd.jupyter.widget-view+json']").count() or \
            page.locator(".cell_output .jupyter-widgets").count():
        widget(page, WIDGETS_ON_PAGE.get(doc, 1))  # wait for the widgets, so their scripts' errors are caught too
    problems = v.settle()
    page.screenshot(path=str(shots / f"{Path(doc).name}.png"), full_page=True)
    assert not problems, f"{doc}:\n" + "\n".join(problems[:30])


def test_other_pages_load_cleanly(visit, html):
    bad = []
    for path in site_pages(html):
        if path.removesuffix(".html") in DOCS:
            continue
        bad += [f"{path}: {p}" for p in visit(path).settle()]
    assert not bad, "\n".join(bad[:30])


# --- Widgets: move a control, the shown value is what lib's Python computes --------------------------------

BANK_STATES = [  # each applied on top of the previous one, starting from the chapter's preset
    {"pattern": "tile column", "pad": 0, "swizzle": False},
    {"pad": 1},
    {"pad": 0, "swizzle": True},
    {"pattern": "strided", "swizzle": False, "stride": 2},
    {"stride": 32},
    {"stride": 33},
    {"stride": 0},
    {"stride": 1, "element_bytes": 8},
    {"stride": 2},
]
BANK_SUMMARY = re.compile(r"(conflict-free|(\d+)-way bank conflict): (\d+) wavefronts? for an ideal (\d+)"
                          r".*?count (\d+) bank conflict")


def test_bank_conflict_widget_is_live(visit):
    v = visit("chapters/memory.html")
    box = widget(v.page)
    state = {"pattern": "tile column", "stride": 1, "offset": 0, "element_bytes": 4, "pad": 0, "swizzle": False}
    seen = set()
    for change in BANK_STATES:
        state.update(change)
        for name, value in change.items():
            if name == "pattern":
                control(box, "pattern", "select").select_option(value)
            elif name == "element_bytes":
                control(box, "element bytes", "select").select_option(str(value))
            elif name == "swizzle":
                control(box, "XOR swizzle", "input").set_checked(value)
            else:
                control(box, name, "input").fill(str(value))
        want = bank_conflicts.analyze(**state)
        text = box.inner_text()
        m = BANK_SUMMARY.search(text)
        assert m, f"{state}: no summary in the widget's text:\n{text[:500]}"
        degree = 1 if m[1] == "conflict-free" else int(m[2])
        shown = {"degree": degree, "wavefronts": int(m[3]), "ideal": int(m[4]), "conflicts": int(m[5])}
        assert shown == {k: want[k] for k in shown}, f"{state}: the page shows {shown}, Python says {want}"
        seen.add(degree)
    assert len(seen) >= 3, f"the grid should reach several conflict degrees, saw {seen}"
    assert not v.settle(), v.problems


OCCUPANCY_STATES = [("H200", 256, 32, 0), ("H200", 1024, 64, 0), ("H200", 128, 128, 40960),
                    ("H200", 96, 40, 102400), ("H200", 1024, 65, 0), ("H200", 256, 32, 231424)]
OCCUPANCY_SUMMARY = re.compile(r"(\d+) blocks × (\d+) warps = (\d+) of (\d+) warps per SM \((\d+)% occupancy\), "
                               r"limited by (.+?)\.")


def test_occupancy_widget_is_live(visit):
    v = visit("chapters/hardware.html")
    box = widget(v.page)
    other = next(k for k in GPUS if k != "H200")
    states = OCCUPANCY_STATES + [(other, 512, 40, 20480)]
    for gpu, threads, regs, smem in states:
        box.locator("select").first.select_option(gpu)
        control(box, "threads per block", "input").fill(str(threads))
        control(box, "registers per thread", "input").fill(str(regs))
        control(box, "shared memory per block", "input").fill(str(smem))
        want = occupancy_model.occupancy(gpu, threads, regs, smem)
        text = box.inner_text()
        where = f"{gpu}, {threads} threads, {regs} registers, {smem} B"
        if want["error"]:
            assert f"Does not launch: {want['error']}" in text, f"{where}: Python says {want['error']!r}:\n{text[:400]}"
            continue
        m = OCCUPANCY_SUMMARY.search(text)
        assert m, f"{where}: no summary in the widget's text:\n{text[:400]}"
        shown = (int(m[1]), int(m[3]), int(m[5]), m[6])
        percent = math.floor(100 * want["occupancy"] + 0.5)  # the page rounds halves up (12.5 % shows as 13 %)
        expected = (want["blocks"], want["warps"], percent, " and ".join(want["limiting"]))
        assert shown == expected, f"{where}: the page shows {shown}, Python says {expected}"
    assert not v.settle(), v.problems


ROOFLINE_STATES = [("H200", 11.1, 8.3), ("H200", 12.0, 9.0), ("H200", 9.0, 10.5), ("H100", 13.5, 9.2),
                   ("H200", 15.0, 3.0)]
ROOFLINE_SUMMARY = re.compile(r"(\S+) FLOP/B: (memory|compute)-bound on FP32 \(ridge (\S+)\); attainable (\S+) "
                              r"TFLOP/s FP32, (\S+) TF32, (\S+) FP16; no faster than (\S+) ms on (.+?)\.$", re.M)


def test_roofline_widget_is_live(visit):
    v = visit("chapters/matmul.html")
    box = widget(v.page)
    specs = roofline_model.widget_specs()
    for gpu, log_flops, log_bytes in ROOFLINE_STATES:
        assert gpu in specs
        box.locator("select").first.select_option(gpu)
        control(box, "FLOPs", "input").fill(str(log_flops))
        control(box, "bytes", "input").fill(str(log_bytes))
        want = roofline_model.analyze(specs[gpu], 10 ** log_flops, 10 ** log_bytes)
        text = box.inner_text()
        where = f"{gpu}, 10^{log_flops} FLOPs, 10^{log_bytes} bytes"
        m = ROOFLINE_SUMMARY.search(text)
        assert m, f"{where}: no summary in the widget's text:\n{text[:400]}"
        assert m[2] == want["bound"] and m[8] == specs[gpu]["name"], f"{where}: {m[0]!r} vs {want}"
        for shown, key in zip(m.group(1, 3, 4, 5, 6, 7), ["intensity", "ridge_fp32", "attainable_fp32",
                                                          "attainable_tf32", "attainable_fp16", "floor_ms"]):
            if want[key] is None:
                assert shown == "n/a", f"{where}: {key} shown as {shown}, Python has none"
            else:
                assert close_to(float(shown), want[key], 3), f"{where}: {key} shown as {shown}, Python {want[key]}"
    assert not v.settle(), v.problems


SOFTMAX_STATES = [("spike-late", 4, 4), ("spike-late", 4, 2), ("masked", 4, 2), ("masked", 4, 4),
                  ("rising", 3, 6), ("overflow-scale", 5, 4)]


def shown_value(text: str) -> float | None:
    text = text.strip()
    return None if text == "—" else -math.inf if text == "−∞" else float(text)


def test_online_softmax_widget_is_live(visit):
    v = visit("chapters/softmax.html")
    box = widget(v.page)
    rows = online_softmax.presets()
    for preset, tile, step in SOFTMAX_STATES:
        box.locator("select").first.select_option(preset)
        control(box, "tile size", "input").fill(str(tile))
        control(box, "tiles merged", "input").fill(str(step))
        steps = online_softmax.online_steps(rows[preset], tile)
        where = f"{preset}, tile {tile}, {step} tiles merged"
        assert f"{step} of {len(steps)}" in box.inner_text(), where
        table = box.locator("table").last.locator("tr")
        assert table.count() == 1 + step, f"{where}: {table.count() - 1} rows in the state table"
        for i, s in enumerate(steps[:step]):
            cells = table.nth(i + 1).locator("td").all_inner_texts()
            assert cells[1] == f"{s['start']}–{s['stop'] - 1}", f"{where}, tile {i + 1}: columns {cells[1]}"
            m_before, m_after = cells[4].split("→")
            for text, exact, name in [(cells[2], s["tile_m"], "tile max"), (cells[3], s["tile_l"], "tile sum"),
                                      (m_before, s["m_before"], "m before"), (m_after, s["m"], "m"),
                                      (cells[5], s["rescale"], "rescale"), (cells[6], s["l"], "l")]:
                got = shown_value(text)
                ok = (got is None and exact is None) or (got is not None and exact is not None and (
                    got == exact or math.isclose(got, exact, rel_tol=1e-3, abs_tol=6e-5)))
                assert ok, f"{where}, tile {i + 1}: {name} shown as {text!r}, Python says {exact}"
    assert not v.settle(), v.problems


# --- What readers of a course site expect -----------------------------------------------------------------

def test_search_finds_chapters(visit):
    v = visit("search.html?q=warp")
    results = v.page.locator("#search-results li")
    results.first.wait_for(timeout=WIDGET_TIMEOUT_MS)
    links = {urlsplit(h).path.rsplit("/", 1)[-1] for h in results.locator("a").evaluate_all(
        "as => as.map(a => a.getAttribute('href'))")}
    assert len(links) >= 2, f"searching 'warp' found only {links}"
    assert not v.settle(), v.problems


def test_previous_and_next_chain_the_chapters(visit):
    v = visit(f"{DOCS[0]}.html")
    visited = [DOCS[0]]
    for _ in DOCS[1:]:
        nxt = v.page.locator("a.right-next")
        assert nxt.count() == 1, f"{visited[-1]}: no 'next' link"
        nxt.click()
        v.page.wait_for_load_state("load")
        visited.append(urlsplit(v.page.url).path.lstrip("/").removesuffix(".html"))
        prev = v.page.locator("a.left-prev").get_attribute("href")
        assert prev and prev.endswith(Path(visited[-2]).name + ".html"), f"{visited[-1]}: previous is {prev}"
    assert visited == DOCS, f"next-links visit {visited}, the toc says {DOCS}"


@pytest.mark.parametrize("doc", DOCS)
def test_chapter_offers_notebook_source_and_colab(html, doc):
    text = (html / f"{doc}.html").read_text()
    for suffix in (".ipynb", ".md"):
        hrefs = re.findall(rf'href="([^"]*_sources/{re.escape(doc)}{re.escape(suffix)})"', text)
        assert hrefs, f"{doc}: no download link for {suffix}"
        assert (html / f"_sources/{doc}{suffix}").is_file(), f"{doc}: {hrefs[0]} is not in the build"
    colab = re.findall(r'href="(https://colab\.research\.google\.com/[^"]+)"', text)
    assert colab and colab[0].endswith(".ipynb"), f"{doc}: no Colab link to a notebook ({colab})"


@pytest.mark.parametrize("doc", DOCS)
def test_downloaded_notebook_installs_the_book_on_colab(html, doc):
    """Its first cell fetches the book and installs requirements.txt, on Colab only; the chapter's own cells
    follow, executed."""
    repository = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    nb = json.loads((html / f"_sources/{doc}.ipynb").read_text())
    first = "".join(nb["cells"][0]["source"])
    for needed in ('if "google.colab" in sys.modules:', f"git clone --quiet --depth 1 {repository} ",
                   "pip install --quiet -r ../requirements.txt"):
        assert needed in first, f"{doc}: the first cell lacks {needed!r}:\n{first}"
    assert any(c["cell_type"] == "code" and c.get("outputs") for c in nb["cells"]), f"{doc}: no executed output"


# Every table and output block of the article, with how far it sticks out of the text column or scrolls
# sideways inside itself (the reader would have to scroll to read it). Widgets (anywidget's own layout) and
# images (scaled by the theme) are left out.
CLIPPED_JS = r"""() => {
  const column = document.querySelector("article.bd-article").getBoundingClientRect();
  const blocks = document.querySelectorAll(
    "article.bd-article table, article.bd-article .cell_output pre, article.bd-article .cell_output .output");
  const clipped = [];
  for (const el of blocks) {
    if (el.closest(".jupyter-widgets, .widget-subarea") || el.offsetParent === null) continue;
    const box = el.getBoundingClientRect();
    const inside = el.scrollWidth - el.clientWidth;
    const beyond = Math.max(box.right - column.right, column.left - box.left);
    if (inside > 1 || beyond > 1) {
      const text = (el.innerText || "").trim().split("\n")[0].slice(0, 60);
      clipped.push(`${el.tagName.toLowerCase()}.${[...el.classList].join(".")}: ` +
                   `${Math.round(Math.max(inside, beyond))} px too wide ("${text}")`);
    }
  }
  return clipped;
}"""


@pytest.mark.parametrize("doc", [d for d in DOCS if d.startswith("chapters/")])
def test_nothing_is_clipped_at_1280_px(visit, doc):
    v = visit(f"{doc}.html")
    assert v.page.evaluate("window.innerWidth") == DESKTOP["width"]
    assert v.page.locator("article.bd-article").count() == 1, f"{doc}: no article column found"
    clipped = v.page.evaluate(CLIPPED_JS)
    assert not clipped, f"{doc}: {len(clipped)} blocks wider than the text column:\n" + "\n".join(clipped)


@pytest.mark.parametrize("doc", DOCS)
def test_readable_at_phone_width(visit, shots, doc):
    v = visit(f"{doc}.html", viewport=PHONE)
    overflow = v.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    v.page.screenshot(path=str(shots / f"{Path(doc).name}.phone.png"))
    assert overflow <= 1, f"{doc}: the page is {overflow} px wider than a {PHONE['width']} px phone screen"


CONTRAST_JS = """el => {
  const rgba = (c) => { const v = c.match(/[\\d.]+/g).map(Number); return v.length === 3 ? [...v, 1] : v; };
  const lum = ([r, g, b]) => [r, g, b].map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
    .reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
  let worst = { ratio: Infinity };
  for (const text of el.querySelectorAll("label, code")) {  // control names and their readouts
    const fg = getComputedStyle(text).color;
    let bg = "rgb(255, 255, 255)";
    for (let n = text; n; n = n.parentElement) {
      const c = getComputedStyle(n).backgroundColor;
      if (rgba(c)[3] > 0) { bg = c; break; }
    }
    const [a, b] = [lum(rgba(fg)), lum(rgba(bg))].sort((x, y) => y - x);
    const ratio = (a + 0.05) / (b + 0.05);
    if (ratio < worst.ratio) worst = { fg, bg, ratio, text: text.textContent };
  }
  return worst;
}"""


@pytest.mark.parametrize("doc", ["chapters/memory", "chapters/hardware", "chapters/matmul", "chapters/softmax"])
def test_widgets_render_in_the_dark_theme(visit, shots, doc):
    v = visit(f"{doc}.html", dark=True)
    assert v.page.evaluate("document.documentElement.dataset.theme") == "dark"
    box = widget(v.page)
    box.scroll_into_view_if_needed()
    box.screenshot(path=str(shots / f"{Path(doc).name}.widget-dark.png"))
    # The widget's labels and readouts (drawn in the inherited colour, as its SVG text is too) must stand out from
    # whatever background they end up on in the dark theme: WCAG's contrast ratio, 4.5 for body text.
    contrast = box.evaluate(CONTRAST_JS)
    assert contrast["ratio"] >= 4.5, f"{doc}: widget text {contrast} in the dark theme"
    assert not v.settle(), v.problems



# --- The Hopper chapter's swizzle and descriptor explorer (lib/widgets/swizzle.js vs lib.hw.wgmma_layout) ---------

SWIZZLE_STATES = [  # (mode, element bytes, rows, element row, element k, accumulator N, thread)
    ("128B", 2, 16, 3, 9, 64, 37), ("none", 2, 64, 45, 13, 256, 127), ("none", 4, 32, 9, 5, 8, 5),
    ("64B", 4, 8, 7, 15, 128, 64), ("32B", 2, 64, 62, 11, 16, 96)]
SWIZZLE_ELEMENT = re.compile(r"A\[(\d+)\]\[(\d+)\] → byte (\d+) \(0x[0-9a-f]+\), bank (\d+), 16-byte chunk (\d+) ")
SWIZZLE_OWNED = re.compile(r"c(\d+) → C\[(\d+)\]\[(\d+)\]")


def test_swizzle_explorer_is_live(visit):
    from lib.widgets import swizzle

    v = visit("chapters/hopper.html")
    box = widget(v.page)
    for mode, item, rows, r, k, n, thread in SWIZZLE_STATES:
        control(box, "swizzle", "select").select_option(mode)
        control(box, "element bytes", "select").select_option(str(item))
        control(box, "rows", "select").select_option(str(rows))
        kelems = int(control(box, "K elements", "select").input_value())
        assert kelems in swizzle.k_choices(mode, item), f"{mode}, {item} B: K = {kelems}"
        control(box, "element row", "input").fill(str(r))
        control(box, "element k", "input").fill(str(k))
        control(box, "accumulator N", "select").select_option(str(n))
        control(box, "thread", "input").fill(str(thread))
        where = f"{mode}, {item}-byte elements, {rows} × {kelems}, A[{r}][{k}], N {n}, thread {thread}"
        text = box.inner_text()
        m = SWIZZLE_ELEMENT.search(text)
        assert m, f"{where}: no element readout in the widget's text:\n{text[:500]}"
        want = swizzle.element(mode, rows, kelems, item, r, k)
        shown = tuple(int(x) for x in m.groups())
        assert shown == (r, k, want["byte"], want["bank"], want["chunk"]), f"{where}: shown {shown}, Python {want}"
        desc = re.search(r"descriptor of wgmma K step 0: .*?= (0x[0-9a-f]{16})", text)
        if kelems * item >= 32:
            assert desc and int(desc[1], 16) == swizzle.step_descriptor(mode, rows, kelems, item, 0, 0), \
                f"{where}: descriptor {desc and desc[1]}"
        owned = [(int(i), int(a), int(b)) for i, a, b in SWIZZLE_OWNED.findall(text)]
        expected = swizzle.thread_elements(n, thread)
        assert owned and owned == [(i, *expected[i]) for i in range(len(owned))], f"{where}: owned {owned[:8]}"
    assert not v.settle(), v.problems
