"""The swizzle and descriptor explorer: its JavaScript maths against lib.hw.wgmma_layout (node), element by
element for every mode, element size, K and row count it offers, and its view in Chromium on a one-widget page
with a stand-in for the anywidget model (no book build needed); the built chapter is checked in
tests/test_browser.py."""
import json
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from lib.hw import wgmma_layout as layout
from lib.widgets import swizzle
from tests.test_browser import CHROMIUM, FLAGS

DESCRIPTORS = [(0, 128, 256, "none"), (0x400, 16, 1024, "128B"), (0x2000, 16, 512, "64B"),
               (0x12340, 16, 256, "32B"), (0x3FFF0, 0x3FFF0, 0x3FFF0, "none")]


@pytest.fixture(scope="module")
def js():
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    return None


def _run_node(tmp_path, body: str) -> dict:
    (tmp_path / "swizzle.mjs").write_text(swizzle.JS.read_text())
    script = tmp_path / "run.mjs"
    script.write_text(textwrap.dedent(body))
    proc = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_js_layouts_descriptors_and_owners_equal_lib(js, tmp_path):
    out = _run_node(tmp_path, f"""
        import {{ MODES, ITEMSIZES, ROWS, STARTS, N_SIZES, kChoices, kmajorLayout, makeDescriptor,
                 decodeDescriptor, operandAddresses, stepStart, accElement, swizzle }} from "./swizzle.mjs";
        const layouts = {{}}, reads = {{}};
        for (const m of MODES) for (const item of ITEMSIZES) for (const ke of kChoices(m, item))
          for (const rows of ROWS) {{
            const lay = kmajorLayout(rows, ke, item, m);
            layouts[`${{m}} ${{item}} ${{ke}} ${{rows}}`] = lay;
            const steps = (ke * item) / 32;
            for (let s = 0; s < steps; s++) {{
              const d = makeDescriptor(stepStart(8192, lay.lbo, m, s), lay.lbo, lay.sbo, m);
              reads[`${{m}} ${{item}} ${{ke}} ${{rows}} ${{s}}`] = {{ desc: d.toString(), addr: operandAddresses(d, rows) }};
            }}
          }}
        const descs = {json.dumps(DESCRIPTORS)}.map(([a, l, s, m]) => {{
          const d = makeDescriptor(a, l, s, m);
          return {{ desc: d.toString(), fields: decodeDescriptor(d) }};
        }});
        const owners = Array.from({{ length: 128 }}, (_, t) => Array.from({{ length: 128 }}, (_, i) => accElement(t, i)));
        const sw = Object.fromEntries(MODES.map((m) => [m, Array.from({{ length: 4096 }}, (_, a) => swizzle(a, m))]));
        let refused = "";
        try {{ kmajorLayout(8, 32, 2, "128B"); }} catch (e) {{ refused = e.message; }}
        let misplaced = "";
        try {{ operandAddresses(makeDescriptor(0x2000 + 3 * 128, 16, 1024, "128B"), 64); }} catch (e) {{ misplaced = e.message; }}
        const choices = Object.fromEntries(MODES.flatMap((m) => ITEMSIZES.map((i) => [`${{m}} ${{i}}`, kChoices(m, i)])));
        console.log(JSON.stringify({{ MODES, ITEMSIZES, ROWS, STARTS, N_SIZES, layouts, reads, descs, owners, sw,
                                     refused, misplaced, choices }}));
    """)
    assert tuple(out["MODES"]) == swizzle.MODES and tuple(out["ROWS"]) == swizzle.ROWS
    assert tuple(out["ITEMSIZES"]) == swizzle.ITEMSIZES and tuple(out["STARTS"]) == swizzle.STARTS
    assert tuple(out["N_SIZES"]) == layout.N_SIZES
    for key, ks in out["choices"].items():
        mode, item = key.split()
        assert tuple(ks) == swizzle.k_choices(mode, int(item)), key
    assert len(out["layouts"]) == sum(len(swizzle.k_choices(m, i)) * len(swizzle.ROWS)
                                      for m in swizzle.MODES for i in swizzle.ITEMSIZES)
    for key, lay in out["layouts"].items():
        mode, item, ke, rows = key.split()
        idx, lbo, sbo, kstep = layout.kmajor_layout(int(rows), int(ke), int(item), mode)
        assert (np.array(lay["bytes"]) == idx * int(item)).all(), key
        assert (lay["lbo"], lay["sbo"], lay["kstep"]) == (lbo, sbo, kstep), key
    assert out["reads"], "no wgmma step was checked"
    for key, read in out["reads"].items():
        mode, item, ke, rows, s = key.split()
        desc = swizzle.step_descriptor(mode, int(rows), int(ke), int(item), 8192, int(s))
        assert int(read["desc"]) == desc, key
        assert (np.array(read["addr"]) == layout.operand_addresses(desc, int(rows))).all(), key
    for (addr, lbo, sbo, mode), got in zip(DESCRIPTORS, out["descs"]):
        want = layout.make_descriptor(addr, lbo, sbo, mode)
        assert int(got["desc"]) == want
        assert got["fields"] == layout.decode_descriptor(want)
    rows, cols = layout.acc_owner(256)
    assert (np.array(out["owners"]) == np.stack([rows, cols], axis=-1)).all()
    for mode, values in out["sw"].items():
        assert (np.array(values) == layout.swizzle(np.arange(4096), mode)).all(), mode
    with pytest.raises(ValueError) as py_refused:
        layout.kmajor_layout(8, 32, 2, "128B")
    assert out["refused"] == str(py_refused.value)
    assert "first 128-byte row" in out["misplaced"]


def test_widget_refuses_bad_state():
    w = swizzle.swizzle_widget("none", 4, rows=32, row=31, k=3, n=256, thread=127)
    assert "export default" in w._esm
    assert (w.mode, w.itemsize, w.rows, w.kelems, w.n, w.thread) == ("none", 4, 32, 8, 256, 127)
    assert swizzle.swizzle_widget("64B").kelems == 32
    for kwargs in (dict(mode="16B"), dict(itemsize=8), dict(rows=12), dict(mode="128B", kelems=32),
                   dict(start=0x10), dict(row=16), dict(n=48), dict(thread=128)):
        with pytest.raises(ValueError):
            swizzle.swizzle_widget(**kwargs)


def test_python_readouts_follow_the_layout():
    # 128B, FP16: element (3, 9) is byte 18 of row 3, chunk 1 -> chunk 1 ^ 3 = 2: byte 3·128 + 2·16 + 2 = 418
    e = swizzle.element("128B", 16, 64, 2, 3, 9, start=1024)
    assert e == dict(byte=1024 + 418, bank=(1024 + 418) // 4 % 32, chunk=2, lbo=16, sbo=1024)
    # no swizzle, TF32, K = 8: element (9, 5) is in core matrix (1, 1): 256 + 128 + 16 + 4
    assert swizzle.element("none", 16, 8, 4, 9, 5)["byte"] == 256 + 128 + 16 + 4
    assert swizzle.thread_elements(8, 37) == [(17, 2), (17, 3), (25, 2), (25, 3)]


# --- the view, on a page of its own ------------------------------------------------------------------------
PAGE = """<!doctype html><html><body><div id="w"></div><script type="module">
{js}
const state = {state};
const handlers = {{}};
const model = {{
  get: (k) => state[k],
  set: (k, v) => {{ state[k] = v; (handlers["change:" + k] || []).forEach((f) => f()); }},
  save_changes: () => {{}},
  on: (ev, f) => {{ (handlers[ev] = handlers[ev] || []).push(f); }},
}};
__widget.render({{ model, el: document.getElementById("w") }});
window.ready = true;
</script></body></html>"""

START = dict(mode="128B", itemsize=2, rows=16, kelems=64, start=0, row=0, k=0, n=64, thread=0)


@pytest.fixture(scope="module")
def page(playwright, tmp_path_factory):
    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} is missing"
    js = swizzle.JS.read_text().replace("export default", "const __widget =").replace("export ", "")
    html = tmp_path_factory.mktemp("swizzle") / "index.html"
    html.write_text(PAGE.format(js=js, state=json.dumps(START)))
    profile = tmp_path_factory.mktemp("profile")
    context = playwright.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, headless=True,
                                                            args=FLAGS)
    pg = context.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(html.as_uri())
    pg.wait_for_function("window.ready === true", timeout=10_000)
    yield pg, errors
    context.close()


def test_page_shows_what_python_computes(page):
    pg, errors = page
    for mode, item, rows, r, k in [("128B", 2, 16, 3, 9), ("none", 4, 32, 9, 5), ("32B", 2, 64, 45, 11),
                                   ("64B", 4, 8, 7, 15)]:
        pg.select_option("label:has-text('swizzle') select", mode)
        pg.select_option("label:has-text('element bytes') select", str(item))
        pg.select_option("label:has-text('rows') select", str(rows))
        pg.fill("label:has-text('element row') input", str(r))
        pg.fill("label:has-text('element k') input", str(k))
        ke = int(pg.input_value("label:has-text('K elements') select"))
        want = swizzle.element(mode, rows, ke, item, r, k)
        text = pg.inner_text(".swizzle-element")
        assert f"A[{r}][{k}] → byte {want['byte']} " in text and f"bank {want['bank']}," in text \
            and f"chunk {want['chunk']} of" in text, (mode, item, rows, text)
        desc = re.search(r"= (0x[0-9a-f]{16})", pg.inner_text(".swizzle-descriptor"))
        assert desc and int(desc[1], 16) == swizzle.step_descriptor(mode, rows, ke, item, 0, 0), mode
    pg.select_option("label:has-text('accumulator N') select", "8")
    pg.fill("label:has-text('thread') input", "37")
    assert "c0 → C[17][2], c1 → C[17][3], c2 → C[25][2], c3 → C[25][3]." in pg.inner_text(".swizzle-acc")
    assert errors == []
