"""The reduction, scan, softmax, attention and tensor-core exercises that replaced the ones kernels/ answered
(warp_argmax, sum_of_squares, max_row_sum, segmented_scan, scan_reverse, log_softmax_rows, causal_attention,
mma_tile): their references, their inputs' traps, and that every known-wrong variant whose model needs no launch
is visibly wrong at one of the exercise's GPU sizes (numpy only; the GPU run of tests/test_variants.py then has
a size at which to name it). Each variant running, failing and being named on the simulator, and each solution
passing, is tests/test_variants.py's job."""
from __future__ import annotations

import numpy as np
import pytest

from lib.runtime import mma
from lib.grading.check import compare
from lib.grading.exercises import EXERCISES, RETIRED, causal_visible
from lib.grading.variants import SIMULATOR_ONLY_MODELS, VARIANTS
from lib.grading.variants import tensorcores as tc

NEW = ["warp_argmax", "sum_of_squares", "max_row_sum", "segmented_scan", "scan_reverse", "log_softmax_rows",
       "causal_attention", "mma_tile"]
ELEMENT_CAP = 2_500_000  # the largest GPU size checked here (a second or two of numpy)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # overflowing exp on purpose


def _inputs(ex_id, size, seed=0):
    ex = EXERCISES[ex_id]
    inputs = ex.make_inputs(size, np.random.default_rng(seed))
    return ex, inputs, ex.reference(*inputs)


def test_the_new_exercises_are_registered_and_the_retired_ones_are_on_no_page():
    assert set(NEW) <= set(EXERCISES) and not set(NEW) & RETIRED
    assert RETIRED <= set(EXERCISES)
    assert "warp_reduce" not in EXERCISES and "reduce_max" not in EXERCISES


@pytest.mark.parametrize("ex_id", NEW)
def test_each_launch_free_model_is_wrong_at_some_gpu_size(ex_id):
    ex = EXERCISES[ex_id]
    sizes = [s for s in ex.gpu_cases if int(np.prod(s)) <= ELEMENT_CAP]
    for variant in VARIANTS[ex_id]:
        if (ex_id, variant.name) in SIMULATOR_ONLY_MODELS:
            continue
        shown = needs_launch = False
        for size in sizes:
            _, inputs, expected = _inputs(ex_id, size)
            model = variant.model(*inputs, [])
            if model is None:
                needs_launch = True
                break
            tol = ex.tolerance(*inputs, expected)
            scale = np.abs(expected) if tol.scale is None else tol.scale
            shown = shown or compare(model, expected, tol.rtol, tol.atol, scale) is not None
        assert needs_launch or shown, f"{variant.name}: right at every GPU size {sizes}"


# --- reduction ---------------------------------------------------------------------------------------------------
def test_warp_argmax_takes_the_first_of_tied_maxima_and_never_a_padding_index():
    x = np.array([1, 3, 3, 0] + [3] * 28 + [-2, -1, -1], np.float32)
    assert EXERCISES["warp_argmax"].reference(x).tolist() == [1.0, 33.0]
    _, (x,), expected = _inputs("warp_argmax", (1001,))
    assert (x < 0).all() and expected[-1] < x.size  # odd sizes are negative; the short chunk's answer is in x
    ties = [np.sum(c == c.max()) > 1 for c in np.array_split(x[:992], 31)]
    assert sum(ties) > 20  # quarter-integers: most chunks have their maximum more than once


def test_max_row_sum_is_negative_at_odd_row_counts():
    for size in [(1, 1), (37, 53), (4099, 1000)]:
        _, (a,), expected = _inputs("max_row_sum", size)
        assert expected[0] < 0, size  # 0 is not the identity of max


# --- scan --------------------------------------------------------------------------------------------------------
def test_segmented_scan_restarts_at_every_head():
    ex = EXERCISES["segmented_scan"]
    x = np.arange(1, 9, dtype=np.float32)
    flags = np.array([0, 0, 1, 0, 0, 1, 1, 0], np.float32)
    assert ex.reference(x, flags).tolist() == [1, 3, 3, 7, 12, 6, 7, 15]
    assert ex.reference(x, np.zeros(8, np.float32)).tolist() == np.cumsum(x).tolist()
    assert ex.reference(x, np.ones(8, np.float32)).tolist() == x.tolist()


def test_scan_inputs_make_every_order_exact():
    """Multiples of 1/64: a float32 sequential scan equals the float64 reference bit for bit."""
    for ex_id in ("segmented_scan", "scan_reverse"):
        _, inputs, expected = _inputs(ex_id, (1_048_583,))
        x = inputs[0]
        assert np.all(x * 64 == np.round(x * 64))
        suffix = np.cumsum(x[::-1], dtype=np.float32)[::-1] if ex_id == "scan_reverse" else None
        if suffix is not None:
            assert np.array_equal(suffix.astype(np.float64), expected)


def test_segments_cross_blocks():
    _, (x, flags), _ = _inputs("segmented_scan", (1_048_583,))
    heads = np.flatnonzero(flags)
    assert 30 < np.diff(heads).mean() < 70  # about one head in 48
    assert np.mean(np.diff(heads) > 128) > 0.05  # many segments span a whole 128-wide tile


# --- softmax -----------------------------------------------------------------------------------------------------
def test_log_softmax_inputs_underflow_softmax_but_not_its_log():
    _, (x,), expected = _inputs("log_softmax_rows", (1000, 1000))
    assert np.isfinite(expected).all()
    x32 = x.astype(np.float32)
    softmax32 = np.exp(x32 - x32.max(axis=1, keepdims=True))
    assert (softmax32 == 0).sum() > 10_000  # log(softmax) would be -inf there
    shifted = x - x.max(axis=1, keepdims=True)
    assert not ((shifted < -60) & (shifted > -140)).any()  # no element near exp's underflow edge
    assert (x[::3] > 88.8).any()  # and rows where exp without the max overflows


# --- attention ---------------------------------------------------------------------------------------------------
def test_causal_visibility_aligns_the_queries_to_the_last_positions():
    v = causal_visible(2, 4)
    assert v.tolist() == [[True, True, True, False], [True, True, True, True]]
    ex, (q, k, v), expected = _inputs("causal_attention", (1, 45, 64))
    p = np.exp(q.astype(np.float64) @ k.T.astype(np.float64) / 8.0)
    np.testing.assert_allclose(expected, (p / p.sum()) @ v, rtol=1e-12)  # one query: the last, sees every key
    _, (q, k, v), _ = _inputs("causal_attention", (50, 45, 8))
    assert q.shape == (45, 8)  # m is cut to n


# --- tensor cores ------------------------------------------------------------------------------------------------
def test_mma_tile_model_of_the_right_layout_is_the_product():
    """The variants' lane-by-lane model, run with the PTX layouts, gives a @ b.T: the model reads lib.runtime.mma's
    table the way the hardware does."""
    ex, (a, b), expected = _inputs("mma_tile", (37,))
    model = tc._fragment_model(a, b, tc.RIGHT)
    tol = ex.tolerance(a, b, expected)
    assert compare(model, expected, tol.rtol, tol.atol, tol.scale) is None
    rounded = mma.round_tf32(a).astype(np.float64) @ mma.round_tf32(b).astype(np.float64).transpose(0, 2, 1)
    np.testing.assert_allclose(model, rounded, rtol=1e-12)


@pytest.mark.parametrize("mistake", [tc.A_AS_C, tc.GROUPS_OF_8, tc.C_ROWS_SWAPPED, tc.B_NOT_TRANSPOSED])
def test_each_layout_mistake_breaks_every_tile(mistake):
    ex, (a, b), expected = _inputs("mma_tile", (37,))
    tol = ex.tolerance(a, b, expected)
    bad = np.abs(tc._fragment_model(a, b, mistake) - expected) > tol.rtol * tol.scale
    assert bad.reshape(37, -1).any(axis=1).all()


def test_mma_tile_tolerance_rejects_a_dropped_product_term():
    """The TF32 bound is far below one product of 8: leaving out k = 7 fails everywhere it matters."""
    ex, (a, b), expected = _inputs("mma_tile", (100,))
    tol = ex.tolerance(a, b, expected)
    short = np.asarray(a[:, :, :7], np.float64) @ np.asarray(b[:, :, :7], np.float64).transpose(0, 2, 1)
    assert (np.abs(short - expected) > tol.rtol * tol.scale).mean() > 0.9
