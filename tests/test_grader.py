"""The grader: correct code passes, the stub is 'not attempted', wrong code fails with the right message,
and the tolerances accept every correct float32 evaluation order while rejecting real errors."""
import time

import numpy as np
import pytest
from numba import cuda

import lib
from lib import grade
from lib.grading.check import compare, hint, k_scaled_rtol
from lib.grading.exercises import EXERCISES
from lib.grading.grader import ERROR, FAILED, NOT_ATTEMPTED, PASSED, TIMEOUT

from kernels.intro import vector_add as book_vector_add


@cuda.jit
def _add(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def vector_add(a, b, out):
    """A student's correct answer (defined outside the book's kernels/)."""
    _add[(out.size + 255) // 256, 256](a, b, out)


# --- compare / hint -------------------------------------------------------------------------------
def test_compare_finds_the_first_wrong_element_and_unwritten_ones():
    expected = np.arange(6, dtype=np.float64).reshape(2, 3)
    actual = expected.copy()
    actual[1, 1] = 7.0
    actual[1, 2] = np.nan
    bad = compare(actual, expected, rtol=1e-6)
    assert bad.index == (1, 1) and bad.where() == "row 1, column 1"
    assert (bad.expected, bad.actual, bad.n_wrong, bad.n_unwritten) == (4.0, 7.0, 2, 1)
    assert compare(expected, expected, rtol=0.0) is None


def test_compare_handles_infinities_and_nan_expectations():
    assert compare(np.array([np.inf, np.nan]), np.array([np.inf, np.nan]), rtol=0) is None
    assert compare(np.array([-np.inf]), np.array([np.inf]), rtol=1) is not None
    assert compare(np.array([1.0]), np.array([np.nan]), rtol=1) is not None


def test_hints_recognise_an_unwritten_tail_and_nothing_written():
    expected = np.ones(100)
    tail = expected.copy()
    tail[90:] = np.nan
    assert "tail" in hint(compare(tail, expected, 1e-6))
    assert "no element was written" in hint(compare(np.full(100, np.nan), expected, 1e-6))


def test_k_scaled_rule():
    assert k_scaled_rtol(1) == 1e-5
    assert k_scaled_rtol(2 ** 20) == pytest.approx(4 * 2 ** -23 * 1024)


# --- every exercise: its reference passes, a perturbed answer fails -------------------------------
@cuda.jit
def _copy_flat(src, dst):
    for i in range(cuda.grid(1), src.size, cuda.gridsize(1)):
        dst[i] = src[i]


def _from_reference(ex, perturb=None):
    """The reference answer (computed on the host), stored by a kernel of the test's own (a grid-stride copy),
    so the grader's rule that a kernel of one's own must run is met."""
    def fn(*args):
        *inputs, out = args
        result = ex.reference(*[a.copy_to_host() for a in inputs]).astype(np.float32)
        if perturb is not None:
            perturb(result)
        src = cuda.to_device(np.ascontiguousarray(result).reshape(-1))
        _copy_flat[(src.size + 255) // 256, 256](src, out.reshape(out.size))
    return fn


@pytest.mark.parametrize("exercise_id", sorted(EXERCISES))
def test_reference_answer_passes(exercise_id):
    ex = EXERCISES[exercise_id]
    report = grade(exercise_id, _from_reference(ex))
    if lib.SIMULATOR and ex.perf is not None and ex.perf.read_ratio is not None:
        # Every output is right, but the sum was made on the host: the traced bytes read (one copy of the
        # result) are fewer than any correct kernel reads, and that property, and only it, fails the grade.
        assert report.status == FAILED and report.cases_passed == report.planned, str(report)
        assert [c.name for c in report.perf if not c.passed] == ["bytes read"], str(report)
    else:
        assert report.status == PASSED, str(report)
    assert len(report.cases) == report.planned >= len(ex.sim_cases if lib.SIMULATOR else ex.gpu_cases)
    assert any(c.size[0] == 1 for c in report.cases)  # a size of 1 is always among the cases


@pytest.mark.parametrize("exercise_id", sorted(EXERCISES))
def test_a_slightly_wrong_answer_fails(exercise_id):
    def perturb(result):
        flat = result.reshape(-1)
        flat[-1] = flat[-1] * np.float32(1.001) + np.float32(1e-3)
    report = grade(exercise_id, _from_reference(EXERCISES[exercise_id], perturb))
    assert report.status == FAILED and "wrong" in report.message, str(report)


# --- student code: stub, wrong kernels, exceptions, hangs -----------------------------------------
def test_correct_solution_passes_and_the_report_renders():
    report = grade("vector_add", vector_add)
    assert report.passed and bool(report)
    assert "PASSED" in str(report) and "passed" in report._repr_html_()
    assert "_add[" in str(report) and "_add[" in report._repr_html_()  # the launches are shown
    assert "tolerance" in str(report)
    assert report.to_dict()["passed"] is True


def test_the_books_own_kernel_is_not_an_answer():
    report = grade("vector_add", book_vector_add)
    assert report.status == FAILED and "book's own kernels" in report.message, str(report)


def test_stub_is_not_attempted():
    report = grade("vector_add", lib.stub)
    assert report.status == NOT_ATTEMPTED and not report.passed
    assert "not attempted" in report._repr_html_()


@cuda.jit
def _add_floor_blocks(a, b, out):
    i = cuda.grid(1)
    out[i] = a[i] + b[i]


@cuda.jit
def _add_unguarded(a, b, out):
    i = cuda.grid(1)
    out[i] = a[i] + b[i]


@cuda.jit
def _add_into_a(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        a[i] = a[i] + b[i]
        out[i] = a[i]


@cuda.jit
def _add_wrong_math(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] - b[i]


@cuda.jit
def _spin(a, b, out):
    while True:
        pass


def test_blocks_rounded_down_leave_the_tail_unwritten(monkeypatch):
    monkeypatch.setattr("lib.grading.grader.cases.variants", lambda exercise_id: [])  # the grader's own hint, unnamed
    report = grade("vector_add", lambda a, b, out: _add_floor_blocks[a.size // 256, 256](a, b, out))
    ex = EXERCISES["vector_add"]
    assert len(report.cases) == len(ex.sim_cases if lib.SIMULATOR else ex.gpu_cases)
    # size 1: a grid of 0 blocks, refused by the launch on a GPU and on the simulator alike
    assert report.status in (FAILED, ERROR)  # whichever failing size comes first decides which
    empty = next(c for c in report.cases if c.size == (1,))
    assert empty.raised and "grid values must be >= 1" in empty.message and "round the block count up" in empty.hint
    tail = next(c for c in report.cases if c.size[0] > 256 and c.size[0] % 256)
    assert "never written" in tail.hint and "tail" in tail.hint and "first at index" in tail.message


@pytest.mark.skipif(lib.ON_GPU, reason="a GPU does not check bounds: the stray writes land silently")
def test_missing_guard_reports_the_index_error_with_thread_and_line():
    report = grade("vector_add", lambda a, b, out: _add_unguarded[(a.size + 255) // 256, 256](a, b, out))
    assert report.status == ERROR
    assert "IndexError" in report.message and "ctaid" in report.message and "guard" in report.hint


def test_modified_input_is_caught():
    report = grade("vector_add", lambda a, b, out: _add_into_a[(a.size + 255) // 256, 256](a, b, out))
    assert report.status == FAILED and "input `a` was modified" in report.message


def test_wrong_values_name_expected_and_actual():
    report = grade("vector_add", lambda a, b, out: _add_wrong_math[(a.size + 255) // 256, 256](a, b, out), seed=7)
    assert report.status == FAILED and "expected" in report.message and "got" in report.message
    again = grade("vector_add", lambda a, b, out: _add_wrong_math[(a.size + 255) // 256, 256](a, b, out), seed=7)
    assert again.message == report.message  # the seed replays the same inputs


def test_exception_in_student_code_is_a_report_not_a_traceback():
    def student(a, b, out):
        raise ValueError("oops")
    report = grade("vector_add", student)
    assert report.status == ERROR and "ValueError: oops" in report.message and "line" in report.message


def test_wrong_signature_is_explained():
    report = grade("vector_add", lambda a, out: None)
    assert report.status == ERROR and "takes 3 arguments" in report.message


def test_unknown_exercise_lists_the_known_ones():
    with pytest.raises(KeyError, match="vector_add"):
        grade("no_such_exercise", vector_add)


@pytest.mark.skipif(lib.ON_GPU, reason="a spinning kernel cannot be stopped on a GPU: it would hold the device")
def test_a_hanging_kernel_times_out_and_the_next_check_still_works():
    t0 = time.perf_counter()
    report = grade("vector_add", lambda a, b, out: _spin[1, 32](a, b, out), time_limit_s=2)
    assert report.status == TIMEOUT and "did not return within 2 s" in report.message
    assert time.perf_counter() - t0 < 15
    assert grade("vector_add", vector_add).passed
