"""The softmax chapter: every rung checked on the simulator at ragged sizes (masked entries, a fully masked
row, rows in [80, 100]), the naive kernel's overflow, the merge operator's laws, the launchers' errors, the
online_merge exercise and the step-through widget's JavaScript against its Python twin."""
import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import kernels.softmax as sm
import lib
from lib.measure.bench import run_ladder
from lib.grading.check import compare
from lib.grading.exercises import EXERCISES
from lib.widgets import online_softmax as ow

STABLE = {
    "three_pass": sm.softmax_three_pass_expf,
    "three_pass_fastmath": sm.softmax_three_pass_fastmath,
    "online": sm.softmax_online,
    "warp_per_row": sm.softmax_warp_per_row,
    "on_chip": sm.softmax_on_chip,
    "on_chip_fastmath": sm.softmax_on_chip_fastmath,
    "warp_vector": sm.softmax_warp_vector,
    "on_chip_shared": sm.softmax_on_chip_shared,
    "on_chip_async": sm.softmax_on_chip_async,
}


def run(launch, x):
    d_out = cuda.to_device(np.full(x.shape, np.nan, dtype=np.float32))
    launch(cuda.to_device(x), d_out)
    return d_out.copy_to_host()


def assert_softmax(got, x):
    expected = sm.softmax_reference(x)
    tol = sm.softmax_tolerance(x, expected)
    bad = compare(got, expected, tol.rtol, tol.atol)
    assert bad is None, bad.describe()


def hard_rows(rows, cols, seed=0):
    """Ladder inputs plus one fully masked row and one row with a single unmasked entry."""
    (x,) = sm.softmax_inputs((rows, cols), np.random.default_rng(seed))
    x[-1] = -np.inf
    if rows > 2:
        x[-2] = -np.inf
        x[-2, cols // 2] = 3.0
    return x


@pytest.mark.parametrize("name", list(STABLE))
def test_rung_ragged_with_masks(name):
    x = hard_rows(4, 300)  # 300 = 256 + 44: a ragged second round of every thread
    got = run(STABLE[name], x)
    assert_softmax(got, x)
    assert np.all(got[-1] == 0.0), "a fully masked row must give zeros"
    assert got[-2, 150] == pytest.approx(1.0) and np.count_nonzero(got[-2]) == 1


@pytest.mark.parametrize("name", list(STABLE))
def test_rung_single_element(name):
    got = run(STABLE[name], np.array([[95.0]], dtype=np.float32))
    assert got[0, 0] == pytest.approx(1.0, rel=1e-6)


def test_warp_per_row_partial_last_block():
    x = hard_rows(11, 45, seed=3)  # 11 rows: the second block has 3 of its 8 warps
    assert_softmax(run(sm.softmax_warp_per_row, x), x)


@pytest.mark.parametrize("cols", [257, 1100])
def test_on_chip_item_counts(cols):
    """2 and 8 values per thread: the kernel compiled for the smallest count that holds the row."""
    x = hard_rows(2, cols, seed=cols)
    assert_softmax(run(sm.softmax_on_chip, x), x)
    assert sm.on_chip_kernel(cols) is sm._ON_CHIP_KERNELS[(2 if cols == 257 else 8, False)]


@pytest.mark.parametrize("rows_per_warp", [1, 3])
def test_warp_vector_rows_per_warp_and_partial_last_block(rows_per_warp):
    """11 rows: the last warp with work owns rows past the end (it re-reads the last row and stores
    nothing for them); 200 columns: the second float4 round of some lanes is past the row's end."""
    x = hard_rows(11, 200, seed=rows_per_warp)
    got = run(lambda a, b: sm.softmax_warp_vector(a, b, rows_per_warp=rows_per_warp), x)
    assert_softmax(got, x)


@pytest.mark.parametrize("cols, falls_back", [(128, False), (1024, False), (1028, True), (62, True)])
def test_warp_vector_hands_other_rows_to_on_chip(monkeypatch, cols, falls_back):
    """Rows longer than VECTOR_MAX_COLS, or not a multiple of 4 (a float4 would straddle two rows), go
    to softmax_on_chip; the rest get the vector kernel compiled for the fewest float4s per lane."""
    x = hard_rows(3, cols, seed=cols)
    calls = []
    on_chip = sm.softmax_on_chip
    monkeypatch.setattr(sm, "softmax_on_chip", lambda a, b: calls.append(a.shape) or on_chip(a, b))
    assert_softmax(run(sm.softmax_warp_vector, x), x)
    assert calls == ([x.shape] if falls_back else [])
    if not falls_back:
        quads = {128: 1, 1024: 8}[cols]
        assert sm.warp_vector_kernel(cols) is sm._VECTOR_KERNELS[(quads, sm.VECTOR_ROWS_PER_WARP)]


@pytest.mark.parametrize("reg_items, shared_items", [(2, 3), (2, 4), (4, 2), (1, 0)])
def test_on_chip_shared_kernel_small_blocks(reg_items, shared_items):
    """The registers + shared memory kernel in a 64-thread block: rows that fill every slot, and ragged
    ones; a batch of shared loads smaller than the register array (2, 3) and one that divides it (4, 2)."""
    kernel = sm.make_softmax_on_chip_shared_kernel(reg_items, shared_items, threads=64)
    for cols in (64 * (reg_items + shared_items), 64 * (reg_items + shared_items) - 37):
        x = hard_rows(3, cols, seed=cols)
        d_out = cuda.to_device(np.full(x.shape, np.nan, dtype=np.float32))
        kernel[3, 64, 0, 4 * 64 * shared_items](cuda.to_device(x), d_out)
        assert_softmax(d_out.copy_to_host(), x)


def test_on_chip_shared_picks_the_fewest_shared_values_that_hold_the_row():
    assert sm.on_chip_shared_kernel(sm.ON_CHIP_MAX_COLS + 1)[1] == 4 * sm.SHARED_THREADS * sm.SHARED_ITEMS[0]
    kernel, nbytes = sm.on_chip_shared_kernel(65536)                  # 512 x (32 + 96): 192 KB shared
    assert nbytes == 4 * sm.SHARED_THREADS * 96 and sm._SHARED_KERNELS[(32, 96, sm.SHARED_THREADS)] is kernel
    with pytest.raises(ValueError, match="does not fit"):
        sm.on_chip_shared_kernel(sm.SHARED_MAX_COLS + 1)


def test_on_chip_shared_launcher_uses_shared_memory_and_hands_over_outside_it(monkeypatch):
    calls = []
    on_chip = sm.softmax_on_chip
    monkeypatch.setattr(sm, "softmax_on_chip", lambda a, b: calls.append("on_chip") or on_chip(a, b))
    launch = lambda a, b: sm.softmax_on_chip_shared(a, b, threads=64, reg_items=2)  # noqa: E731
    x = hard_rows(3, 300, seed=7)     # 64 threads x (2 registers + 32 shared): the shared path
    assert_softmax(run(launch, x), x)
    assert calls == []
    x = hard_rows(3, 100, seed=8)     # 100 <= 64 x 2: registers alone hold it, softmax_on_chip runs
    assert_softmax(run(launch, x), x)
    assert calls == ["on_chip"]
    x = np.random.default_rng(6).normal(0, 3, (1, 64 * (2 + sm.SHARED_ITEMS[-1]) + 1)).astype(np.float32)
    assert_softmax(run(launch, x), x)  # longer than 64 x (2 + 96): the online kernel


@pytest.mark.parametrize("reg_items, shared_items, groups", [(4, 8, 2), (4, 16, 4), (8, 8, 1), (4, 0, 1)])
def test_on_chip_async_kernel_small_blocks(reg_items, shared_items, groups):
    """The cp.async kernel in a 64-thread block: rows that fill every slot and ragged ones (the last float4s
    of some threads past the row's end, in the register part and in the last groups), one or more commit
    groups, and no shared part at all. The simulator's cp.async writes shared memory only at the wait, so
    a missing or too-early wait_group reads stale slots and fails here."""
    kernel = sm.make_softmax_on_chip_async_kernel(reg_items, shared_items, threads=64, groups=groups)
    full = 64 * (reg_items + shared_items)
    for cols in (full, full - 4 * 37):
        x = hard_rows(3, cols, seed=cols + groups)
        d_out = cuda.to_device(np.full(x.shape, np.nan, dtype=np.float32))
        kernel[3, 64, 0, 4 * 64 * shared_items](cuda.to_device(x).reshape(x.size), d_out.reshape(x.size), cols)
        assert_softmax(d_out.copy_to_host(), x)


def test_on_chip_async_picks_the_fewest_shared_values_that_hold_the_row():
    kernel, nbytes = sm.on_chip_async_kernel(65536)                   # 512 x (32 + 96): 192 KB shared
    assert nbytes == 4 * sm.ASYNC_THREADS * 96
    assert sm._ASYNC_KERNELS[(sm.ASYNC_REG_ITEMS, 96, sm.ASYNC_THREADS, sm.ASYNC_GROUPS)] is kernel
    assert sm.on_chip_async_kernel(sm.ON_CHIP_MAX_COLS + 4)[1] == 4 * sm.ASYNC_THREADS * sm.ASYNC_SHARED_ITEMS[0]
    with pytest.raises(ValueError, match="does not fit"):
        sm.on_chip_async_kernel(sm.ASYNC_MAX_COLS + 4)


def test_on_chip_async_launcher_hands_other_rows_to_on_chip_shared(monkeypatch):
    """Rows the registers of `threads` hold alone (up to 1024 floats), rows that are not a multiple of 4, rows
    too long for both kernels, and a matrix that does not start on a 16-byte boundary go to
    softmax_on_chip_shared; the rest run the cp.async kernel (or, 1028 to 8192 floats, the register-only one)."""
    calls = []
    shared = sm.softmax_on_chip_shared
    monkeypatch.setattr(sm, "softmax_on_chip_shared", lambda a, b: calls.append(a.shape[1]) or shared(a, b))
    launch = lambda a, b: sm.softmax_on_chip_async(a, b, threads=64, reg_items=4, groups=2)  # noqa: E731
    too_long = 64 * (4 + sm.ASYNC_SHARED_ITEMS[-1]) + 4     # for 64 threads; 1024 < it <= 8192: registers only
    for cols, falls_back in [(300, False), (302, True), (256, True), (too_long, False),
                             (sm.ASYNC_ROW_MAX_COLS + 4, True)]:
        x = hard_rows(2, cols, seed=cols)
        assert_softmax(run(launch, x), x)
        assert calls == ([cols] if falls_back else []), cols
        calls.clear()
    x = hard_rows(2, 300, seed=9)
    d_x = cuda.to_device(np.concatenate([[0.0], x.ravel()]).astype(np.float32))[1:].reshape(x.shape)
    d_out = cuda.to_device(np.full(x.size + 1, np.nan, dtype=np.float32))[1:].reshape(x.shape)
    launch(d_x, d_out)                  # both 4 bytes past a 16-byte boundary: no float4 can be read
    assert_softmax(d_out.copy_to_host(), x)
    assert calls == [300]


def test_kernel_that_runs_names_the_fallbacks():
    ran = sm.kernel_that_runs
    assert ran("softmax_warp_vector_kernel", 512) == "softmax_warp_vector_kernel"
    assert ran("softmax_warp_vector_kernel", 8192) == "softmax_on_chip_kernel"
    assert ran("softmax_warp_vector_kernel", 65536) == "softmax_online_kernel"
    assert ran("softmax_on_chip_shared_kernel", 4096) == "softmax_on_chip_kernel"
    assert ran("softmax_on_chip_shared_kernel", 65536) == "softmax_on_chip_shared_kernel"
    assert ran("softmax_on_chip_shared_kernel", sm.SHARED_MAX_COLS + 1) == "softmax_online_kernel"
    assert ran("softmax_on_chip_async_kernel", 65536) == "softmax_on_chip_async_kernel"
    assert ran("softmax_on_chip_async_kernel", 65532) == "softmax_on_chip_async_kernel"
    assert ran("softmax_on_chip_async_kernel", 65534) == "softmax_on_chip_shared_kernel"  # not a multiple of 4
    assert ran("softmax_on_chip_async_kernel", 8192) == "softmax_on_chip_async_kernel"   # registers only
    assert ran("softmax_on_chip_async_kernel", 1028) == "softmax_on_chip_async_kernel"
    assert ran("softmax_on_chip_async_kernel", 1024) == "softmax_on_chip_kernel"         # short rows
    assert ran("softmax_on_chip_async_kernel", 8196) == "softmax_on_chip_kernel"
    assert ran("softmax_on_chip_async_kernel", 16384) == "softmax_on_chip_kernel"
    assert ran("softmax_on_chip_async_kernel", 8190) == "softmax_on_chip_kernel"
    assert ran("softmax_on_chip_async_kernel", sm.ASYNC_MAX_COLS + 4) == "softmax_online_kernel"
    assert ran("softmax_on_chip_async_kernel", sm.ASYNC_MAX_COLS + 2) == "softmax_online_kernel"
    assert ran("softmax_on_chip_fastmath_kernel", 65536) == "softmax_online_kernel"
    assert ran("softmax_three_pass_kernel", 65536) == "softmax_three_pass_kernel"


def test_on_chip_falls_back_beyond_registers():
    x = np.random.default_rng(5).normal(0, 3, (1, sm.ON_CHIP_MAX_COLS + 1)).astype(np.float32)
    assert_softmax(run(sm.softmax_on_chip, x), x)


def test_permuted_columns_permute_the_output():
    """The block merges its threads' states in a different grouping when the columns move; the result
    must not care (the merge is associative and commutative up to rounding)."""
    x = hard_rows(2, 300, seed=11)[:1]
    perm = np.random.default_rng(2).permutation(300)
    a = run(sm.softmax_online, x)
    b = run(sm.softmax_online, np.ascontiguousarray(x[:, perm]))
    np.testing.assert_allclose(b, a[:, perm], rtol=1e-5, atol=1e-8)


def test_naive_is_right_on_small_values_and_nan_on_large():
    x = np.random.default_rng(0).normal(0, 1, (2, 40)).astype(np.float32)
    assert_softmax(run(sm.softmax_naive, x), x)
    x[1, 7] = 89.0  # exp(89) = inf in float32
    got = run(sm.softmax_naive, x)
    assert np.isnan(got[1, 7]) and np.all(got[1, np.arange(40) != 7] == 0.0)
    assert_softmax(run(sm.softmax_three_pass_expf, x), x)


@pytest.mark.parametrize("launch", [sm.softmax_online, sm.softmax_on_chip, sm.softmax_naive,
                                    sm.softmax_warp_vector, sm.softmax_on_chip_shared, sm.softmax_on_chip_async])
def test_launcher_errors(launch):
    x = np.zeros((2, 3), dtype=np.float32)
    with pytest.raises(TypeError, match="float32"):
        launch(x.astype(np.float64), x)
    with pytest.raises(ValueError, match="2-D"):
        launch(x.ravel(), x.ravel())
    with pytest.raises(ValueError, match="shape"):
        launch(x, np.zeros((3, 2), dtype=np.float32))


def test_ladder_checks_every_rung():
    _, _, failures = run_ladder(sm.LADDERS[0], sizes=[(3, 70)])
    assert failures == []


def test_reference_masking_convention():
    x = np.array([[-np.inf, -np.inf], [0.0, -np.inf]], dtype=np.float32)
    np.testing.assert_array_equal(sm.softmax_reference(x), [[0.0, 0.0], [1.0, 0.0]])


# --- the merge operator: laws, tested on many random splits and orders ---------------------------------
def random_row(rng, n):
    row = rng.normal(0, 4, n)
    row[rng.random(n) < 0.2] = -np.inf
    if n and rng.random() < 0.3:
        row[rng.integers(n)] = rng.uniform(80, 100)  # a spike anywhere, early or late
    return [float(v) for v in row]


def close(a, b):
    return a[0] == b[0] and math.isclose(a[1], b[1], rel_tol=1e-12, abs_tol=0.0)


def test_merge_identity_commutative_associative():
    rng = np.random.default_rng(0)
    for _ in range(300):
        a, b, c = (ow.tile_state(random_row(rng, int(rng.integers(0, 6)))) for _ in range(3))
        assert ow.merge(a, ow.IDENTITY) == a and ow.merge(ow.IDENTITY, a) == a
        assert ow.merge(a, b) == ow.merge(b, a)  # exactly: IEEE + and * commute
        assert close(ow.merge(ow.merge(a, b), c), ow.merge(a, ow.merge(b, c)))
    assert ow.merge(ow.IDENTITY, ow.IDENTITY) == ow.IDENTITY  # not NaN


def test_any_split_and_order_gives_the_direct_state():
    rng = np.random.default_rng(1)
    for _ in range(300):
        row = random_row(rng, int(rng.integers(1, 40)))
        cuts = sorted(rng.choice(np.arange(1, len(row)), size=min(len(row) - 1, int(rng.integers(0, 6))),
                                 replace=False).tolist()) if len(row) > 1 else []
        parts = [ow.tile_state(p) for p in np.split(np.array(row), cuts)]
        order = rng.permutation(len(parts))
        state = ow.IDENTITY
        for i in order:
            state = ow.merge(state, parts[i])
        assert close(state, ow.tile_state(row))
        # A random binary tree of merges (what a block reduction does) gives the same state.
        pool = list(parts)
        while len(pool) > 1:
            i, j = sorted(rng.choice(len(pool), size=2, replace=False))
            merged = ow.merge(pool[i], pool[j])
            pool = [p for k, p in enumerate(pool) if k not in (i, j)] + [merged]
        assert close(pool[0], ow.tile_state(row))


def test_online_steps_spike_late_rescales_at_the_end():
    row = ow.presets()["spike-late"]
    steps = ow.online_steps(row, 4)
    assert steps[0]["rescale"] is None
    assert steps[-1]["m"] == 9.0 and steps[-1]["rescale"] < 1e-3
    assert math.isclose(steps[-1]["l"], ow.tile_state(row)[1], rel_tol=1e-12)
    probs = ow.softmax(row)
    assert math.isclose(sum(probs), 1.0, rel_tol=1e-12)
    assert ow.softmax([None, None]) == [0.0, 0.0]
    with pytest.raises(ValueError):
        ow.online_steps(row, 0)


# --- the widget's JavaScript equals its Python twin ------------------------------------------------------
def encode(x):
    return None if x == -math.inf else x


def test_widget_js_matches_python(tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    module = tmp_path / "online_softmax.mjs"
    module.write_text(Path(ow.__file__).with_suffix(".js").read_text())
    rng = np.random.default_rng(7)
    rows = list(ow.presets().values()) + [
        [None if v == -math.inf else v for v in random_row(rng, int(rng.integers(1, 20)))] for _ in range(30)]
    cases = [(row, tile) for row in rows for tile in (1, 2, 3, 4, 7, 16)]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    script = tmp_path / "run.mjs"
    script.write_text(
        "import * as w from './online_softmax.mjs';\n"
        "import { readFileSync } from 'node:fs';\n"
        "const cases = JSON.parse(readFileSync(process.argv[2], 'utf8'));\n"
        "const enc = (k, v) => (v === -Infinity ? null : v);\n"
        "console.log(JSON.stringify(cases.map(([row, tile]) => "
        "({ steps: w.onlineSteps(row, tile), softmax: w.softmax(row) })), enc));\n")
    out = subprocess.run([node, str(script), str(tmp_path / "cases.json")], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    results = json.loads(out)
    assert len(results) == len(cases)
    for (row, tile), js in zip(cases, results):
        py_steps = ow.online_steps(row, tile)
        assert len(js["steps"]) == len(py_steps)
        for a, b in zip(js["steps"], py_steps):
            assert a.keys() == b.keys()
            for key in b:
                want = encode(b[key]) if isinstance(b[key], float) else b[key]
                if isinstance(want, float):
                    assert math.isclose(a[key], want, rel_tol=1e-12, abs_tol=1e-300), (row, tile, key)
                else:
                    assert a[key] == want, (row, tile, key)
        np.testing.assert_allclose(js["softmax"], ow.softmax(row), rtol=1e-12, atol=0)


def test_widget_builds_from_presets():
    w = ow.widget("spike-late", tile=4)
    assert w.preset == "spike-late" and w.tile == 4 and "export default" in w._esm
    with pytest.raises(ValueError, match="unknown preset"):
        ow.widget("nope")


# --- the online_merge exercise ---------------------------------------------------------------------------
def test_online_merge_reference_and_inputs():
    ex = EXERCISES["online_merge"]
    m, l = ex.make_inputs((7, 5), np.random.default_rng(0))
    assert np.all(np.isneginf(m[-1])) and np.all(l[-1] == 0)
    expected = ex.reference(m, l)
    assert expected[-1, 0] == -np.inf and expected[-1, 1] == 0.0
    for r in range(6):
        state = ow.IDENTITY
        for t in range(5):
            state = ow.merge(state, (float(m[r, t]), float(l[r, t])))
        assert expected[r, 0] == state[0] and math.isclose(expected[r, 1], state[1], rel_tol=1e-9)


def test_exp_error_table_counts_ulps():
    x = np.linspace(-87.0, 0.0, 10001).astype(np.float32)
    rounded = np.exp(x.astype(np.float64)).astype(np.float32)  # correctly rounded: at most half an ulp
    ulps, rel, kept = sm.exp_error_table(x, rounded)
    assert kept.size == x.size and ulps.max() <= 0.5 and rel.max() < 2 ** -23
    off_by_two = np.nextafter(np.nextafter(rounded, np.inf), np.inf)
    assert sm.exp_error_table(x, off_by_two)[0].max() > 1.5


def test_record_exp_accuracy_writes_bins(tmp_path):
    """Runs on the simulator with a few inputs (Python's exp there, so the error is only rounding)."""
    env = {"device": "sim", "numba_cuda": "x", "torch": "", "date": "2026-01-01"}
    path = sm.record_exp_accuracy(tmp_path, env, n=256)
    import pandas as pd
    acc = pd.read_csv(path)
    assert set(acc["function"]) == {"expf", "__expf (fastmath)"}
    assert acc["inputs"].sum() == 2 * 512
    if lib.SIMULATOR:  # Python's exp: only the final rounding to float32
        assert (acc["max_ulp"] <= 0.5).all()
    else:  # CUDA's expf is within 2 ulp (CUDA C++ Programming Guide, mathematical functions appendix)
        assert (acc[acc["function"] == "expf"]["max_ulp"] <= 2).all()


def test_async_group_counts_recorded_include_the_configured_one():
    """record_async_groups times the rung's own group count among the others, and every count splits each
    shared part the picker can choose into whole float4s per group."""
    assert sm.ASYNC_GROUPS in sm.ASYNC_GROUP_COUNTS
    for groups in sm.ASYNC_GROUP_COUNTS:
        for items in sm.ASYNC_SHARED_ITEMS:
            assert (items // sm.VECTOR) % groups == 0, (groups, items)


def test_on_chip_async_launcher_runs_rows_the_registers_hold_without_a_shared_part(monkeypatch):
    """Rows of 1028 to 8192 floats (multiples of 4) run the kernel with no shared part, 256 threads of 8, 16 or
    32 values; ragged ones included. Other widths go to on_chip_shared."""
    calls = []
    shared = sm.softmax_on_chip_shared
    monkeypatch.setattr(sm, "softmax_on_chip_shared", lambda a, b: calls.append(a.shape[1]) or shared(a, b))
    for cols, items in [(1028, 8), (2052, 16), (4096, 16), (8188, 32)]:
        x = hard_rows(2, cols, seed=cols)
        assert_softmax(run(sm.softmax_on_chip_async, x), x)
        assert sm._ASYNC_KERNELS.get((items, 0, sm.ASYNC_ROW_THREADS, 1)) is sm.async_row_kernel(cols)
    assert calls == []
    for cols in (1024, 2050):
        x = hard_rows(2, cols, seed=cols)
        assert_softmax(run(sm.softmax_on_chip_async, x), x)
    assert calls == [1024, 2050]
    with pytest.raises(ValueError, match="register-only"):
        sm.async_row_kernel(sm.ASYNC_ROW_MAX_COLS + 4)
