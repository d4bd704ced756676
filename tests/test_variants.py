"""The known-wrong variants of every graded exercise (lib.grading.variants): each is really wrong, its model reproduces
what its kernel outputs, and the grader names its mistake; beside them, the book's own solutions pass on the
same inputs.

Two modes, one file:

* on the simulator (CI), every variant and every solution runs once, on inputs from the exercise at a size
  that spans at least three blocks of the variant's launch (and past any fixed launch), through the
  grader's own steps (execute_case, judge);
* on a GPU, every solution and every variant goes through ``grade()`` at the exercise's GPU sizes: each
  solution must pass, each variant must fail. Where ``CUDA_BOOK_VARIANTS_REPORT`` names a file, a summary
  (status, named mistake, seconds per check) is written there as JSON.

The variants' kernels live in lib/, which the grader counts as the book's own code (a book kernel is never
an answer); here they stand for a student's, so the module fixture makes lib/grading/variants count as the
student's own.
"""
from __future__ import annotations

import importlib.util
import json
import linecache
import math
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

import lib
import lib.runtime.launches as launch_hooks
from lib.grading.check import compare
from lib.grading.exercises import EXERCISES, RETIRED
from lib.grading.grader import ERROR, FAILED, PASSED, grade
from lib.grading.grader.cases import execute_case, judge, launch_structure, prepare_case
from lib.grading.variants import DIAGNOSED, MAY_PASS_ON_A_GPU, NOT_ON_A_GPU, RACES, SIMULATOR_ONLY_MODELS, VARIANTS

ROOT = Path(__file__).resolve().parent.parent
# the wrong kernels overflow exp and divide inf by inf on purpose: numpy's warnings about it are expected
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# Simulator sizes: at least three blocks of each variant's launch, past every fixed launch (64 threads; an
# 8x8 grid of 16x16 blocks covers 128 x 128), more than 256 first-pass partials of 32 elements (the one-block
# second pass), K past one 16-wide tile and not one more than a multiple of it, matrix sides past one 32-wide
# tile and not multiples of it, M <= N for matmul_bias_relu (the bias indexed by the row stays in range there),
# ragged everywhere.
SIM_SIZES = {
    "vector_add": (1001,), "add_reversed": (1001,), "outer_product": (20, 140), "transpose_batched": (3, 70, 45),
    "row_col_sums": (20, 300), "matmul_bias_relu": (20, 130, 19), "matmul_at": (20, 130, 19),
    "reduce_sum": (9001,), "warp_argmax": (1001,), "sum_of_squares": (9001,), "max_row_sum": (301, 37),
    "scan_inclusive": (555,), "scan_exclusive": (555,), "segmented_scan": (555,), "scan_reverse": (555,),
    "compact_positive": (555,), "online_merge": (300, 9), "softmax_rows": (300, 37), "log_softmax_rows": (300, 37),
    "attention": (70, 20, 8), "causal_attention": (90, 120, 8), "attention_tile_update": (140, 16, 8),
    "mma_tile": (37,), "wgmma_tile": (5,), "ring_copy": (203,), "pv_tile": (3,),
}


# Inputs where every variant of the exercise shows its mistake (the first seed from 0 that satisfies this).
TELLING = {
    "compact_positive": lambda x: x[-1] > 0,  # "last element dropped" only shows when x[-1] is kept
}

# Mistakes whose outputs coincide at some sizes (the grader names the first in the list there). None today.
COINCIDE: dict = {}

ALL = [(ex_id, v.name) for ex_id in sorted(VARIANTS) for v in VARIANTS[ex_id]]


@pytest.fixture(scope="module", autouse=True)
def variants_count_as_student_code():
    """lib/grading/variants is book code to the grader; in these tests its kernels play a student's."""
    original = launch_hooks._origin

    def origin(py_func):
        file, book = original(py_func)
        return (file, False) if file and "/lib/grading/variants/" in file.replace("\\", "/") else (file, book)

    launch_hooks._origin = origin
    try:
        yield
    finally:
        launch_hooks._origin = original


def _variant(ex_id, name):
    return next(v for v in VARIANTS[ex_id] if v.name == name)


_cases: dict = {}


def _case(ex_id):
    """The simulator case of an exercise (cached: every variant of it sees the same inputs)."""
    if ex_id not in _cases:
        ex = EXERCISES[ex_id]
        telling = TELLING.get(ex_id, lambda *inputs: True)
        for seed in range(200):
            case = prepare_case(ex, SIM_SIZES[ex_id], np.random.default_rng(seed))
            if telling(*case.inputs):
                break
        else:
            raise AssertionError(f"{ex_id}: no seed below 200 gives inputs on which every variant shows")
        _cases[ex_id] = case
    return _cases[ex_id]


def _tolerance(ex_id, case, execution):
    ex = EXERCISES[ex_id]
    tol = ex.tolerance(*case.inputs, case.expected, launch=launch_structure(execution.launches))
    return tol, (np.abs(case.expected) if tol.scale is None else tol.scale)


def _check_model(ex_id, variant, case, execution):
    """The model, asked for each fill the output had, reproduces the kernel's output within the check's own
    bound (the grader's rule for naming a mistake); it may decline (None) only for the NaN fill of an output
    that is added into. Returns how many fills it reproduced."""
    tol, scale = _tolerance(ex_id, case, execution)
    reproduced = 0
    for fill, actual in zip(execution.fills, execution.outputs):
        model = variant.model(*case.inputs, execution.launches, fill=fill)
        if model is None:
            assert math.isnan(fill), f"{variant.name}: the model declined the fill {fill}"
            continue
        model = np.asarray(model, np.float64)
        assert model.shape == actual.shape, f"{variant.name}: model shape {model.shape}, output {actual.shape}"
        bad = compare(actual, model, tol.rtol, tol.atol, scale)
        assert bad is None, f"{variant.name}: the model differs from the kernel (fill {fill}): {bad.describe()}"
        reproduced += 1
    return reproduced


def test_every_exercise_has_at_least_four_variants_with_distinct_names():
    assert set(VARIANTS) == set(EXERCISES)
    for ex_id, variants in VARIANTS.items():
        names = [v.name for v in variants]
        assert len(names) >= 4 and len(set(names)) == len(names), ex_id
        for v in variants:
            assert v.mistake and v.mistake[0].islower() and callable(v.model) and callable(v.kernel), v.name
    for ex_id, name in RACES | SIMULATOR_ONLY_MODELS | MAY_PASS_ON_A_GPU | set(DIAGNOSED) | NOT_ON_A_GPU:
        _variant(ex_id, name)  # each name in these sets is a variant


def test_models_decline_a_launch_they_cannot_read():
    """A model that needs the launch says None when there is none of the student's own (only the book's)."""
    book = [{"name": "k", "module": "kernels.scan", "qualname": "k", "grid": [4, 1, 1], "block": [128, 1, 1],
             "shared_bytes": 0, "book": True}]
    case = prepare_case(EXERCISES["scan_inclusive"], (555,), np.random.default_rng(0))
    no_carry = _variant("scan_inclusive", "no carry between blocks")
    assert no_carry.model(*case.inputs, book) is None and no_carry.model(*case.inputs, []) is None


# --- the simulator: each variant is wrong, modelled and named ----------------------------------------------------

@pytest.mark.skipif(lib.ON_GPU, reason="simulator sizes; the GPU runs grade() below")
@pytest.mark.parametrize("ex_id, name", ALL, ids=[f"{e}:{n}" for e, n in ALL])
def test_variant_is_wrong_modelled_and_named(ex_id, name):
    variant = _variant(ex_id, name)
    case = _case(ex_id)
    execution = execute_case(variant.kernel, case.public())
    if (ex_id, name) in RACES:
        # A GPU loses updates at random; the simulator runs threads one at a time, so only its debugger sees it.
        if importlib.util.find_spec("lib.runtime.simdebug") is None:
            pytest.skip("the race shows only with the simulator's debugger (lib.runtime.simdebug), not present here")
        assert execution.outcome == "raised" and "race" in execution.error.lower(), execution.error
        return
    if (ex_id, name) in DIAGNOSED:
        # a broken protocol (an mbarrier's phase or byte count): the simulator stops it with a report naming it
        assert execution.outcome == "raised", f"{name}: {execution.outcome}"
        missing = [p for p in DIAGNOSED[(ex_id, name)] if not re.search(p, execution.error)]
        assert not missing, f"{name}: the report lacks {missing}:\n{execution.error}"
        assert not judge(case, execution).passed
        return
    assert execution.outcome == "ran", execution.error
    result = judge(case, execution)
    assert not result.passed, f"{name} passed: it is not wrong on these inputs"
    assert "wrong" in result.message
    assert _check_model(ex_id, variant, case, execution) >= 1
    # named as itself: alone, or beside the variants that give the same output on these inputs
    assert name in result.mistake.split(" or "), f"{name}: the grader named {result.mistake!r} ({result.hint})"
    assert result.hint == variant.mistake or (" or " in result.mistake and variant.mistake in result.hint)


# --- the book's solutions, on the same inputs (simulator) or through grade() (GPU) --------------------------------

def _solutions() -> dict:
    """exercise id -> the solution function of the chapters' cells tagged `solution`, and of the set-up page's
    open check (run in one namespace per chapter, in order, as a reader would: a later solution may call an
    earlier one)."""
    import jupytext

    class Recorded:
        passed = True

    found = {}
    for path in sorted((ROOT / "chapters").glob("*.md")):
        space = {"__name__": f"solutions_{path.stem}", "display": lambda *a: None}
        exec("import math\nimport numpy as np\nfrom numba import cuda, float32", space)
        for cell in jupytext.read(path).cells:
            tags = cell.get("metadata", {}).get("tags", [])
            # the set-up page's check is graded in the open: its answer is vector_add's solution
            if ("solution" not in tags and path.stem != "setup") or "grade(" not in cell.source:
                continue
            space["grade"] = lambda ex_id, fn, *a, **k: found.__setitem__(ex_id, fn) or Recorded()
            name = f"<solution {path.stem} {len(found)}>"
            # the source where inspect finds it, so the simulator's GPU-compile check reads the kernels
            linecache.cache[name] = (len(cell.source), None, cell.source.splitlines(True), name)
            real = lib.grade
            lib.grade = space["grade"]  # the set-up cell imports grade from lib itself
            try:
                exec(compile(cell.source, name, "exec"), space)
            finally:
                lib.grade = real
    return found


SOLUTIONS = _solutions()


def test_every_exercise_has_a_solution():
    assert set(SOLUTIONS) == set(EXERCISES) - RETIRED  # a retired exercise is on no page


@pytest.mark.skipif(lib.ON_GPU, reason="simulator sizes; the GPU runs grade() below")
@pytest.mark.parametrize("ex_id", sorted(set(EXERCISES) - RETIRED))
def test_solution_passes_where_the_variants_fail(ex_id):
    case = _case(ex_id)
    execution = execute_case(SOLUTIONS[ex_id], case.public())
    result = judge(case, execution)
    assert result.passed, f"{ex_id}: {result.message} {result.hint}"


# --- the GPU: grade() at the exercise's GPU sizes -----------------------------------------------------------------

_gpu_summary: dict = {}


def _record(key, report, seconds):
    _gpu_summary[key] = {"status": report.status, "seconds": round(seconds, 2),
                         "mistakes": sorted({c.mistake for c in report.cases if c.mistake}),
                         "sizes": [list(c.size) for c in report.cases], "message": report.message[:200]}
    path = os.environ.get("CUDA_BOOK_VARIANTS_REPORT")
    if path:
        Path(path).write_text(json.dumps(_gpu_summary, indent=1, sort_keys=True))


@pytest.mark.skipif(not lib.ON_GPU, reason="GPU sizes")
@pytest.mark.parametrize("ex_id", sorted(set(EXERCISES) - RETIRED))
def test_solution_passes_on_the_gpu(ex_id):
    t0 = time.perf_counter()
    report = grade(ex_id, SOLUTIONS[ex_id], seed=1)
    _record(f"{ex_id}:solution", report, time.perf_counter() - t0)
    assert report.status == PASSED, str(report)


@pytest.mark.skipif(not lib.ON_GPU, reason="GPU sizes")
@pytest.mark.parametrize("ex_id, name", ALL, ids=[f"{e}:{n}" for e, n in ALL])
def test_variant_fails_on_the_gpu(ex_id, name):
    if (ex_id, name) in NOT_ON_A_GPU:
        pytest.skip("this mistake hangs a GPU (a phase that never completes): only the simulator names it")
    variant = _variant(ex_id, name)
    t0 = time.perf_counter()
    report = grade(ex_id, variant.kernel, seed=1)
    _record(f"{ex_id}:{name}", report, time.perf_counter() - t0)
    if (ex_id, name) in MAY_PASS_ON_A_GPU and report.status == PASSED:
        return  # undefined behaviour that this GPU runs right: only the simulator can show it
    # FAILED, or ERROR where the mistake also crashes at some size (a grid of 0 blocks is refused on a GPU)
    assert report.status in (FAILED, ERROR) and any(not c.passed and not c.raised for c in report.cases), str(report)
    named = {c.mistake for c in report.cases if c.mistake}
    if (ex_id, name) in RACES:
        return  # a race's result is arbitrary: it may equal another mistake's (on the H200 at n = 1000 the
        #         racing sum once equalled the last block's partial, "each block stores into out[0]")
    # named as itself, or not at all (an order the GPU does not keep); never as another mistake, unless the two
    # give the same output at that size
    # (a case whose inputs fit several mistakes names them all: "A or B")
    assert all(name in m.split(" or ") or m in COINCIDE.get((ex_id, name), set()) for m in named), \
        f"{name} was named {named}"
    if (ex_id, name) not in SIMULATOR_ONLY_MODELS:
        assert any(name in m.split(" or ") for m in named), f"{name} was not named:\n{report}"


# --- models at the GPU's sizes: float32 rounding the simulator's small cases never reach (H200, 2026-12-02) ---
def test_exp_overflow_models_take_float32s_boundary_for_what_it_is():
    """float32 exp overflows from 88.72283935546875 on (the float32 nearest log(FLT_MAX), just above it): a
    model that took that value for finite said 0 where the GPU's softmax gave inf / inf = NaN, and was ruled
    out of a 4096 × 4099 case on the H200 (two inputs were exactly that value)."""
    from lib.grading.variants._common import EXP_OVERFLOW
    from lib.grading.variants.softmax import _log_softmax_no_max, _no_max

    edge = np.float32(88.72283935546875)
    xs = [np.nextafter(edge, np.float32(0)), edge, np.nextafter(edge, np.float32(100))]
    for v in xs:
        x = np.array([[v, 0.0, -3.0]], np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            e32 = np.exp(x)                        # float32 arithmetic, as the kernel's
            want = e32 / e32.sum(axis=1, keepdims=True)
        got = _no_max(x, [])
        assert np.array_equal(np.isnan(got), np.isnan(want)) and np.allclose(got[~np.isnan(got)], want[~np.isnan(want)]), \
            (float(v), got, want)
        assert np.isneginf(_log_softmax_no_max(x, [])).all() == bool(np.isinf(e32).any()), float(v)
    assert np.isinf(np.exp(edge)) and float(edge) > EXP_OVERFLOW


def test_a_mistake_is_recognised_through_the_rounding_of_its_own_values():
    """'M and L swapped' puts a sum of exponentials (~300) where the reference has a maximum near 0: the
    float32 kernel's rounding of that sum is far outside rtol·|M| but well inside rtol·|L|. Judged against the
    reference's magnitude only, the model was ruled out of a 65536 × 64 case on the H200."""
    from lib.grading.grader.cases import Case, Execution, REPRODUCES, model_verdicts

    ex = EXERCISES["online_merge"]
    rng = np.random.default_rng(0)
    rows, tiles = 256, 64
    m = rng.uniform(-0.02, 0.02, (rows, tiles)).astype(np.float32)
    l = rng.uniform(3.0, 6.0, (rows, tiles)).astype(np.float32)
    big = np.full(rows, -np.inf, np.float32)     # the kernel's loop, in float32, vectorised over the rows
    total = np.zeros(rows, np.float32)
    with np.errstate(invalid="ignore"):
        for t in range(tiles):
            new = np.maximum(big, m[:, t])
            total = total * np.exp(big - new) + l[:, t] * np.exp(m[:, t] - new)
            big = new
    out = np.stack([total, big], axis=1).astype(np.float32)      # the columns swapped
    expected = np.asarray(ex.reference(m, l), np.float64)
    case = Case(ex.id, (rows, tiles), (m, l), expected, tuple(ex.out_shape(m, l)))
    tol = ex.tolerance(m, l, expected, launch=None)
    assert compare(out[:, 0], expected[:, 1], tol.rtol, tol.atol, np.abs(expected[:, 0])) is not None, \
        "the inputs no longer show the rounding this test is about"
    verdicts = model_verdicts(ex, case, Execution("ran", outputs=[out], fills=[math.nan]), tol)
    assert verdicts.get("M and L swapped") == REPRODUCES, verdicts
