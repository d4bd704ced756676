"""The fragment-layout widget: its JavaScript layouts against lib.runtime.mma.LAYOUTS (node), and its hovering in
Chromium on a one-widget page with a stand-in for the anywidget model (no book build needed)."""
import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from lib.runtime import mma
from lib.widgets import fragments
from tests.test_browser import CHROMIUM, FLAGS


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_js_layouts_equal_lib_mma(tmp_path):
    (tmp_path / "fragments.mjs").write_text(fragments.JS.read_text())
    script = tmp_path / "run.mjs"
    script.write_text(textwrap.dedent("""
        import { SHAPES, OPERANDS, WARP, laneElements, owners } from "./fragments.mjs";
        const out = {};
        for (const s of SHAPES) for (const op of OPERANDS) {
          out[`${s} ${op}`] = {
            lanes: Array.from({ length: WARP }, (_, lane) => laneElements(s, op, lane)),
            owners: owners(s, op),
          };
        }
        console.log(JSON.stringify({ shapes: SHAPES, out }));
    """))
    proc = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    js = json.loads(proc.stdout)
    assert tuple(js["shapes"]) == fragments.SHAPES
    for shape in fragments.SHAPES:
        for op in fragments.OPERANDS:
            got = js["out"][f"{shape} {op}"]
            for lane in range(32):
                assert [tuple(e) for e in got["lanes"][lane]] == mma.lane_elements(shape, op, lane), (shape, op, lane)
            assert got["owners"] == mma.owners(shape, op).tolist(), (shape, op)


def test_widget_refuses_bad_state():
    w = fragments.fragment_widget("m16n8k16.f16", "B", lane=5)
    assert "export default" in w._esm and (w.shape, w.operand, w.lane) == ("m16n8k16.f16", "B", 5)
    for kwargs in (dict(shape="m8n8k4"), dict(operand="D"), dict(lane=32)):
        with pytest.raises(ValueError):
            fragments.fragment_widget(**kwargs)


PAGE = """<!doctype html><html><body><div id="w"></div><script type="module">
{js}
const state = {{ shape: "m16n8k8.tf32", operand: "A", lane: -1 }};
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


@pytest.fixture(scope="module")
def page(playwright, tmp_path_factory):
    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} is missing"
    js = fragments.JS.read_text().replace("export default", "const __widget =").replace("export ", "")
    html = tmp_path_factory.mktemp("fragments") / "index.html"
    html.write_text(PAGE.format(js=js))
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


def _outlined(pg, selector):
    return pg.eval_on_selector_all(selector, "cells => cells.filter(c => c.style.outlineStyle === 'solid')"
                                              ".map(c => c.dataset.rc || c.dataset.lane)")


def test_hovering_a_lane_marks_its_elements(page):
    pg, errors = page
    pg.select_option("label:has-text('shape') select", "m16n8k16.f16")
    pg.hover(".fragment-lane[data-lane='9']")
    marked = sorted(tuple(map(int, rc.split(","))) for rc in _outlined(pg, ".fragment-element"))
    assert marked == sorted(mma.lane_elements("m16n8k16.f16", "A", 9))
    assert "lane 9 (group 2, thread 1" in pg.inner_text(".fragment-info")
    assert errors == []


def test_hovering_an_element_names_its_lane(page):
    pg, errors = page
    pg.select_option("label:has-text('shape') select", "m16n8k8.tf32")
    pg.select_option("label:has-text('operand') select", "B")
    pg.hover(".fragment-element[data-rc='5,3']")
    lane, i = mma.owners("m16n8k8.tf32", "B")[5, 3]
    assert f"B[5][3] is b{i} of lane {lane} " in pg.inner_text(".fragment-info")
    assert _outlined(pg, ".fragment-lane") == [str(lane)]
    assert errors == []
