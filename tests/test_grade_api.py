"""The grader's split API (plan, prepare_case, execute_case, judge), its checks of untrusted executions, the
rule that zero checks are never a pass, and diagnoses that name the mistake."""
import importlib.util
import io
import math

import numpy as np
import pytest
from numba import cuda, float32

import lib
from lib import grade
from lib.grading.spec import Variant
from lib.grading.grader import ERROR, FAILED, NOT_ATTEMPTED, PASSED, CaseResult, Execution, GradeTimeout, execute_case, judge, plan, prepare_case, verdict
from lib.grading.grader import cases as grader_cases


@cuda.jit
def _add(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def vector_add(a, b, out):
    _add[(out.size + 127) // 128, 128](a, b, out)


def _round_trip(execution: Execution) -> Execution:
    buffer = io.BytesIO()
    np.savez(buffer, **execution.to_arrays())
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as arrays:
        return Execution.from_arrays(arrays)


# --- the four steps, and what crosses a process boundary ---------------------------------------------------
def test_the_split_api_composes_like_grade_and_executions_survive_serialisation():
    planner = plan("vector_add", seed=3, on_gpu=lib.ON_GPU)
    rng = np.random.default_rng(3)
    results = []
    for size in planner:
        case = prepare_case("vector_add", size, rng)
        execution = _round_trip(execute_case(vector_add, case.public()))
        assert execution.launches and execution.launches[0]["name"] == "_add"
        results.append(judge(case, execution, planner.history))
        planner.observe(size, execution.launches, execution.seconds)
    report = verdict("vector_add", 3, results, len(planner.planned))
    assert report.status == PASSED and report.planned == len(results) >= 3, str(report)


def test_the_public_case_holds_no_reference():
    case = prepare_case("reduce_sum", (1000,), np.random.default_rng(0))
    assert case.expected.size == 1 and case.public().expected.size == 0


def _good_execution(case):
    return execute_case(vector_add, case.public())


@pytest.mark.parametrize("tamper, why", [
    (lambda e: setattr(e, "outputs", [e.outputs[0].astype(np.float64)]), "float32"),
    (lambda e: setattr(e, "outputs", [e.outputs[0][:-1]]), "shape"),
    (lambda e: setattr(e, "outputs", []), "outputs"),
    (lambda e: setattr(e, "inputs_after", e.inputs_after[:1]), "inputs"),
    (lambda e: setattr(e, "launches", [{"name": "x"}]), "launch"),
    (lambda e: setattr(e, "launches", [dict(e.launches[0], grid=["1"])]), "launch"),
    (lambda e: setattr(e, "launches", [dict(e.launches[0], book="no")]), "launch"),
    (lambda e: setattr(e, "outcome", "passed"), "outcome"),
])
def test_judge_refuses_malformed_executions(tamper, why):
    case = prepare_case("vector_add", (300,), np.random.default_rng(1))
    execution = _good_execution(case)
    assert judge(case, execution).passed
    tamper(execution)
    result = judge(case, execution)
    assert not result.passed and "malformed" in result.message and why in result.message, result.message


def test_malformed_serialised_execution_is_a_value_error():
    with pytest.raises(ValueError, match="malformed"):
        Execution.from_arrays({"meta": np.array("{not json")})


def test_plan_secret_and_extra_sizes():
    public = plan("reduce_sum", seed=5, on_gpu=True)
    hidden = plan("reduce_sum", seed=5, on_gpu=True, secret=True, extra_sizes=[(777,)])
    assert list(public) != list(hidden)[:-1] and hidden.planned[-1] >= (777,) and hidden.planned[0] == (1,)
    with pytest.raises(ValueError, match="does not fit"):
        plan("matmul_at", seed=5, on_gpu=True, extra_sizes=[(3,)])


# --- zero checks are never a pass ----------------------------------------------------------------------------
def test_raising_grade_timeout_from_the_students_code_is_not_a_pass():
    def sneaky(a, b, out):
        raise GradeTimeout()
    report = grade("vector_add", sneaky)
    assert not report.passed and report.status == ERROR and "GradeTimeout" in report.message, str(report)


def test_an_exception_whose_str_raises_is_reported():
    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no")

    def student(a, b, out):
        raise Unprintable()
    report = grade("vector_add", student)
    assert report.status == ERROR and "Unprintable" in report.message and "could not be shown" in report.message


def test_fewer_cases_than_planned_or_none_is_never_a_pass():
    ok = CaseResult((10,), True, 0.1)
    assert verdict("vector_add", 1, [ok, ok, ok], planned=3).passed
    short = verdict("vector_add", 1, [ok, ok], planned=3)
    assert not short.passed and "2 of 3" in short.message
    assert not verdict("vector_add", 1, [], planned=0).passed


def test_a_failure_inside_the_grader_is_an_error_not_a_pass(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("judge broke")
    monkeypatch.setattr("lib.grading.grader.judge", broken)
    report = grade("vector_add", vector_add)
    assert report.status == ERROR and "judge broke" in report.message, str(report)


def test_the_stub_is_not_attempted():
    assert grade("vector_add", lib.stub).status == NOT_ATTEMPTED


# --- diagnoses --------------------------------------------------------------------------------------------------
@cuda.jit
def _add_nan_every_7th(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = (math.inf - math.inf) if i % 7 == 3 else a[i] + b[i]


@cuda.jit
def _add_skip_every_7th(a, b, out):
    i = cuda.grid(1)
    if i < out.size and i % 7 != 3:
        out[i] = a[i] + b[i]


@cuda.jit
def _add_into_out(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] += a[i] + b[i]


def _launch(kernel):
    return lambda a, b, out: kernel[(out.size + 127) // 128, 128](a, b, out)


@pytest.fixture
def no_variants(monkeypatch):
    """The grader's own diagnoses, without the known variants (lib.grading.variants) that name these mistakes first."""
    monkeypatch.setattr(grader_cases, "variants", lambda exercise_id: [])


def test_computed_nan_is_told_from_never_written_and_from_added_into(no_variants):
    computed = grade("vector_add", _launch(_add_nan_every_7th))
    assert computed.status == FAILED and "computed as NaN or inf" in computed.hint, str(computed)
    unwritten = grade("vector_add", _launch(_add_skip_every_7th))
    assert unwritten.status == FAILED and "never written" in unwritten.hint, str(unwritten)
    added = grade("vector_add", _launch(_add_into_out))
    assert added.status == FAILED and "adds into it without setting it first" in added.hint, str(added)


@cuda.jit
def _outer_xy_swapped(x, y, out):
    i, j = cuda.grid(2)  # x taken as the row: the grid below runs x along the columns
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = x[i] * y[j]


def _outer_swapped(x, y, out):
    rows, cols = out.shape
    _outer_xy_swapped[((cols + 15) // 16, (rows + 15) // 16), (16, 16)](x, y, out)


def test_an_outer_product_with_x_and_y_swapped_is_not_told_to_round_up(no_variants):
    report = grade("outer_product", _outer_swapped)
    assert report.status == FAILED, str(report)
    assert "round" not in report.hint.lower() and "swaps x and y" in report.hint, str(report)


@pytest.mark.skipif(importlib.util.find_spec("lib.grading.variants") is None, reason="needs the known variants (lib.grading.variants)")
def test_with_the_known_variants_the_swapped_outer_product_is_named_and_not_told_to_round_up():
    report = grade("outer_product", _outer_swapped)
    assert report.status == FAILED and any(c.mistake for c in report.cases), str(report)
    assert "round" not in report.hint.lower(), str(report)


def test_the_replay_line_is_in_the_html_report_too():
    report = grade("vector_add", _launch(_add_skip_every_7th), seed=11)
    assert "seed=11" in str(report) and "seed=11" in report._repr_html_()


@cuda.jit
def _scan_block_local_128(x, out):
    buf = cuda.shared.array(128, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[t] = x[i] if i < x.size else float32(0)
    offset = 1
    while offset < 128:
        cuda.syncthreads()
        left = buf[t - offset] if t >= offset else float32(0)
        cuda.syncthreads()
        buf[t] += left
        offset *= 2
    if i < x.size:
        out[i] = buf[t]


def _block_local_model(x, launches):
    """What a scan without a carry between blocks of the launched size outputs."""
    block = launches[0]["block"][0] if launches else None
    if not block:
        return None
    x = np.asarray(x, np.float64)
    padded = np.concatenate([x, np.zeros(-x.size % block)]).reshape(-1, block)
    return np.cumsum(padded, axis=1).ravel()[:x.size]


def test_a_known_variant_is_named(monkeypatch):
    no_carry = Variant("no carry between blocks",
                       "each block scanned its own elements, but no block added the totals of the blocks before it",
                       _block_local_model, lambda x, out: None)
    monkeypatch.setattr(grader_cases, "variants", lambda exercise_id: [no_carry])
    report = grade("scan_inclusive", lambda x, out: _scan_block_local_128[(x.size + 127) // 128, 128](x, out))
    assert report.status == FAILED and report.hint == no_carry.mistake, str(report)
    assert any(c.mistake == "no carry between blocks" for c in report.cases)


def test_time_running_out_after_every_size_passed_is_incomplete_not_failed():
    """A correct kernel on a slow machine (here: a host sleep from the third size on) is "incomplete": not a
    pass, and not a failure either; a hang at the first size is still "timed out"."""
    import time as _time

    from lib.grading.grader import INCOMPLETE, TIMEOUT

    def slow_but_right(a, b, out):
        vector_add(a, b, out)
        if a.size > 2000:
            _time.sleep(30)

    report = grade("vector_add", slow_but_right, time_limit_s=4)
    assert report.status == INCOMPLETE and not report.passed, str(report)
    assert report.message.startswith(f"incomplete: the {report.cases_passed} size(s) checked all passed")
    assert "not a wrong answer" in report.hint and "INCOMPLETE" in str(report)
    hang = grade("vector_add", lambda a, b, out: _time.sleep(30), time_limit_s=2)
    assert hang.status == TIMEOUT, str(hang)


def test_every_exercise_says_how_far_the_simulator_grows_it():
    """sim_work bounds every grown size (and so the grader's memory and a check's time); an exercise without it
    is refused on the simulator rather than grown to a default that a heavy tile exercise could not afford."""
    from lib.grading.exercises import EXERCISES

    assert all(ex.sim_work and ex.sim_work >= 1 for ex in EXERCISES.values()), \
        [e for e, ex in EXERCISES.items() if not ex.sim_work]
