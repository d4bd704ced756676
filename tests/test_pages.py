"""Helpers that shape what a reader sees on a chapter page, without building the book: numba's low-occupancy
warning silenced for the book's own kernels only (lib/runtime/quiet_launches.py), recorded listings shortened to the
page's width (lib/measure/ptx.py), and result lines and tables narrowed to the text column (lib/measure/results.py)."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pandas as pd
import pytest

from lib.measure import ptx, results
from lib.measure.bench import PAGE_WIDTH

ROOT = Path(__file__).resolve().parent.parent

# numba only warns about small grids with its real (GPU) dispatcher, which can configure a launch without a
# GPU; the test process runs the simulator, so the check runs in a process of its own with the simulator off.
# lib/runtime/quiet_launches.py is loaded from its file: `import lib` would switch the simulator on.
WARNING_CHECK = textwrap.dedent("""
    import importlib.util, json, sys, types, warnings
    from numba import cuda

    spec = importlib.util.spec_from_file_location("quiet_launches", sys.argv[1])
    q = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(q)

    @cuda.jit
    def readers_kernel(x):          # defined in __main__: a kernel of the reader's own
        x[0] = 1

    book = types.ModuleType("kernels.demo")   # a module of the book, as kernels/*.py are
    exec("from numba import cuda\\n@cuda.jit\\ndef book_kernel(x):\\n    x[0] = 2\\n", book.__dict__)
    book.readers_kernel = readers_kernel      # imported into the module, not defined there
    quieted = q.quiet_kernels(book.__dict__)

    def caught(launch):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            launch()
        return [(type(w.message).__name__, str(w.message), q.is_low_occupancy_warning(w.message))
                for w in seen]

    def inside_on_purpose():
        with q.on_purpose():
            readers_kernel[1, 32]
            warnings.warn("another warning", UserWarning)

    print(json.dumps({
        "quieted": quieted,
        "book small": caught(lambda: book.book_kernel[1, 32]),
        "reader small": caught(lambda: readers_kernel[1, 32]),
        "reader large": caught(lambda: readers_kernel[256, 32]),
        "reader on purpose": caught(inside_on_purpose),
        "quiet twice": q.quiet(q.quiet(book.book_kernel)) is book.book_kernel,
    }))
""")


def test_low_occupancy_warning_is_silenced_for_book_kernels_only():
    import json

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", WARNING_CHECK, str(ROOT / "lib" / "runtime" / "quiet_launches.py")],
                          capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["quieted"] == ["book_kernel"]
    assert got["book small"] == []
    # The reader's kernel gets numba's warning, exactly the one the filter is written for ...
    assert len(got["reader small"]) == 1, got["reader small"]
    name, message, matched = got["reader small"][0]
    assert name == "NumbaPerformanceWarning" and "Grid size 1" in message and matched
    # ... not when its grid is large, and inside on_purpose() only that warning is dropped.
    assert got["reader large"] == []
    assert got["reader on purpose"] == [["UserWarning", "another warning", False]]
    assert got["quiet twice"] is True


def test_the_filter_matches_numbas_highlighted_message_too():
    """Where colorama is installed (the H200's image), numba wraps the message in terminal escapes."""
    from numba.cuda.core.errors import NumbaPerformanceWarning

    from lib.runtime import quiet_launches as q

    for text in ("Grid size 4 will likely result in GPU under-utilization due to low occupancy.",
                 "\x1b[1mGrid size 4 will likely result in GPU under-utilization due to low occupancy.\x1b[0m"):
        assert q.is_low_occupancy_warning(NumbaPerformanceWarning(text))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with q.on_purpose():
                warnings.warn(NumbaPerformanceWarning(text))
        assert seen == []
    assert not q.is_low_occupancy_warning(NumbaPerformanceWarning("\x1b[1mSomething else\x1b[0m"))


def test_quiet_kernels_needs_a_module_namespace():
    from lib.runtime.quiet_launches import quiet_kernels

    try:
        quiet_kernels({"x": 1})
    except ValueError as err:
        assert "globals()" in str(err)
    else:
        raise AssertionError("quiet_kernels accepted a namespace with no __name__")


def test_annotate_counts_a_run_of_the_same_note_on_one_line():
    sass = "// recorded on a test GPU, with a stamp long enough to need wrapping onto a second line of the page\n" + \
        "".join(f"        /*{16 * i:04x}*/                   FFMA R{i}, R1, R2, R{i} ;\n" for i in range(10)) + \
        "        /*0100*/                   EXIT ;\n"
    lines = ptx.annotate(sass, ptx.SASS_NOTES).splitlines()
    assert all(len(line) <= PAGE_WIDTH for line in lines), lines
    assert lines[0].startswith("// recorded on") and lines[1].startswith("//   ")
    ffma = [line for line in lines if "FFMA" in line]
    assert len(ffma) == 2, lines               # the first two of the run, then one counting line
    assert any("and 8 more" in line for line in lines)
    assert "thread done" in lines[-1]


def test_count_finds_opcodes_with_and_without_a_predicate(tmp_path):
    (tmp_path / "hardware.k.sass").write_text(
        "// stamp\n"
        "        /*0000*/                   BRA `(.L_x_0) ;\n"
        "        /*0010*/              @!P0 BRA `(.L_x_1) ;\n"
        "        /*0020*/                   BRX R2 ;\n"
        "        /*0030*/                   EXIT ;\n")
    assert ptx.count("k", "BRA", folder=tmp_path) == 2
    assert ptx.count("k", "EXIT", folder=tmp_path) == 1
    assert ptx.count("k", "BSSY", folder=tmp_path) == 0
    assert ptx.count("missing", "BRA", folder=tmp_path) is None


def test_compact_table_keeps_what_a_reader_compares():
    df = pd.DataFrame({"source": ["recorded"] * 2, "device": ["H200"] * 2, "date": ["2026-11-30"] * 2,
                       "kernel": ["copy_kernel", "torch.copy"], "size": ["1024"] * 2, "dtype": ["float32"] * 2,
                       "median_ms": [2.0, 1.0], "q1_ms": [1.9, 0.9], "q3_ms": [2.1, 1.1],
                       "value": [50.0, 100.0], "unit": ["GB/s"] * 2, "% of torch.copy": [50.0, 100.0]})
    out = results.compact(df)
    assert list(out.columns) == ["kernel", "ms", "GB/s", "% torch.copy"]
    assert list(out["kernel"]) == ["copy", "torch.copy"]
    both = results.compact(pd.concat([df, df.assign(source="your GPU", size="2048")], ignore_index=True))
    assert list(both.columns) == ["source", "kernel", "size", "ms", "GB/s", "% torch.copy"]


def test_caption_fits_the_page():
    recorded = results.load("intro")
    if not len(recorded):
        return  # nothing recorded: no caption to check
    text = results.caption(recorded)
    assert "recorded on" in text and all(len(line) <= PAGE_WIDTH for line in text.splitlines())


def _is_kernel_decorator(node) -> bool:
    """@cuda.jit or @cuda.jit(...) without device=True (numba's; @triton.jit is not one)."""
    call = node if isinstance(node, ast.Call) else None
    target = call.func if call else node
    if not (isinstance(target, ast.Attribute) and target.attr == "jit" and getattr(target.value, "id", "") == "cuda"):
        return False
    return not any(k.arg == "device" and getattr(k.value, "value", False) for k in (call.keywords if call else []))


def test_every_book_kernel_is_quieted():
    """On a GPU, a book kernel left out would print numba's warning into a reader's page; the simulator cannot
    show it, so the source is checked: a kernels/ module that defines kernels calls quiet_kernels(globals())
    after the last of them, and a kernel made inside a function (a factory) passes through quiet() there,
    unless the factory's result is bound to a module-level name (which quiet_kernels then finds)."""
    missing = []
    for path in sorted((ROOT / "kernels").glob("*.py")):
        tree = ast.parse(path.read_text())
        kernel_lines = [n.lineno for n in tree.body
                        if isinstance(n, ast.FunctionDef) and any(map(_is_kernel_decorator, n.decorator_list))]
        quiet_lines = [n.lineno for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                       and getattr(n.value.func, "id", "") == "quiet_kernels"]
        if kernel_lines and not (quiet_lines and max(quiet_lines) > max(kernel_lines)):
            missing.append(f"{path.name}: no quiet_kernels(globals()) after its last kernel")
        bound = {n.value.func.id for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                 and isinstance(n.value.func, ast.Name)}
        for outer in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            inner = [n.name for n in outer.body
                     if isinstance(n, ast.FunctionDef) and any(map(_is_kernel_decorator, n.decorator_list))]
            quieted = {a.id for c in ast.walk(outer) if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "quiet"
                       for a in c.args if isinstance(a, ast.Name)}
            missing += [f"{path.name}: {outer.name} makes kernel {name} without quiet()"
                        for name in inner if name not in quieted and outer.name not in bound]
    assert not missing, "\n".join(missing)


def test_roofline_widget_can_show_one_chapters_points():
    from lib.widgets import roofline as roofline_widget

    every = roofline_widget.widget()
    recorded = {p["chapter"] for p in every.points}
    if "tensorcores" not in recorded:
        return  # nothing recorded for the chapter: no points to filter
    one = roofline_widget.widget(chapters=("tensorcores",))
    assert one.points and {p["chapter"] for p in one.points} == {"tensorcores"}
    assert len(one.points) < len(every.points)
    with pytest.raises(ValueError, match="no recorded points for chapter"):
        roofline_widget.widget(chapters=("no_such_chapter",))


def test_every_code_cell_of_a_chapter_is_a_cell():
    """jupytext reads a chapter into cells; a fence it cannot match (a ````{dropdown} right before a code cell,
    say) silently turns the rest of the page into one markdown cell, whose code then shows as text and
    never runs."""
    import jupytext

    from tools.notebooks import toc_docs

    for doc in toc_docs():
        path = ROOT / f"{doc}.md"
        if not path.exists():
            continue
        cells = jupytext.read(path).cells
        swallowed = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and "```{code-cell}" in c.source]
        assert not swallowed, f"{doc}: markdown cell {swallowed[0]} contains a code cell: {cells[swallowed[0]].source[:200]!r}"
        written = path.read_text().count("```{code-cell}")
        assert sum(c.cell_type == "code" for c in cells) == written, f"{doc}: {written} code cells written"
        for i, cell in enumerate(c for c in cells if c.cell_type == "code"):
            python = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("!", "%")))
            try:
                ast.parse(python)
            except SyntaxError as error:
                raise AssertionError(f"{doc}: code cell {i} is not Python: {error}\n{cell.source[:300]}") from None
