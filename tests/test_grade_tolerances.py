"""Tolerances from error analysis: tight enough that one lost block, one lost partial or one output element off
by its own size fails at the exercise's largest GPU size, loose enough for every correct float32 order.
numpy only (no kernel runs): the references are perturbed by hand."""
import numpy as np
import pytest

from lib.grading.check import compare, prefix_sum_rounding
from lib.grading.exercises import EXERCISES

CPU_SECONDS_SIZE_CAP = 20_000_000   # elements of the largest input built here (a few seconds of numpy)


def _largest_gpu_size(ex):
    """The exercise's largest GPU size whose inputs stay within a few seconds of numpy here."""
    fits = [s for s in ex.gpu_cases if int(np.prod(s)) <= CPU_SECONDS_SIZE_CAP]
    return max(fits, key=lambda s: int(np.prod(s)))


def _typical_launch(ex_id, size):
    """The structure of a typical correct GPU answer at this size: 256-thread blocks, a grid capped at 1024
    blocks (grid-stride) for the reductions, one element per thread otherwise."""
    n = int(np.prod(size))
    blocks = -(-n // 256)
    if ex_id in ("reduce_sum", "sum_of_squares"):  # the grid-stride reductions to one number
        blocks = min(blocks, 1024)
    return {"threads": blocks * 256, "block_threads": 256}


def _rejects(actual, expected, tol):
    return compare(actual, expected, tol.rtol, tol.atol, tol.scale) is not None


@pytest.mark.parametrize("exercise_id", sorted(EXERCISES))
def test_one_output_element_off_by_its_own_size_fails_at_the_largest_gpu_size(exercise_id):
    ex = EXERCISES[exercise_id]
    size = _largest_gpu_size(ex)
    inputs = ex.make_inputs(size, np.random.default_rng(0))
    expected = ex.reference(*inputs)
    tol = ex.tolerance(*inputs, expected, launch=_typical_launch(exercise_id, size))
    assert not _rejects(expected.astype(np.float32), expected, tol)  # the rounded reference itself passes
    flat = expected.ravel()
    nonzero = np.flatnonzero(np.isfinite(flat) & (flat != 0))
    magnitudes = np.abs(flat[nonzero])
    for j in (nonzero[np.argmax(magnitudes)], nonzero[np.argsort(magnitudes)[magnitudes.size // 2]]):
        wrong = flat.copy()
        wrong[j] *= 2.0  # off by its own size
        assert _rejects(wrong.reshape(expected.shape).astype(np.float32), expected, tol), (exercise_id, j)


@pytest.mark.parametrize("exercise_id", ["reduce_sum", "scan_inclusive", "scan_exclusive"])
@pytest.mark.parametrize("block", [256, 1024])
def test_a_lost_block_fails_at_the_largest_gpu_size(exercise_id, block):
    """Dropping the elements of one block (anywhere, for 95% of the blocks) is caught. A block whose
    elements happen to sum to almost nothing cannot be told from a correct answer by any tolerance."""
    ex = EXERCISES[exercise_id]
    size = _largest_gpu_size(ex)
    (x,) = ex.make_inputs(size, np.random.default_rng(1))
    expected = ex.reference(x)
    tol = ex.tolerance(x, expected, launch=_typical_launch(exercise_id, size))
    n = x.size - x.size % block
    block_sums = x[:n].astype(np.float64).reshape(-1, block).sum(axis=1)
    bound = np.broadcast_to(tol.rtol * np.asarray(tol.scale, np.float64) + tol.atol, expected.shape)
    if exercise_id == "reduce_sum":
        caught = np.abs(block_sums) > bound[0]
    else:
        # a block lost at b shifts every later output by its sum: caught when it exceeds the bound there
        starts = np.arange(block_sums.size) * block + (exercise_id == "scan_exclusive")
        tightest = np.minimum.accumulate(bound[::-1])[::-1]   # the smallest bound at or after each index
        caught = np.abs(block_sums) > tightest[np.minimum(starts, x.size - 1)]
    assert caught.mean() >= 0.95, f"only {caught.mean():.1%} of lost blocks of {block} are caught"
    # and a lost 32-element partial (one warp's) is still caught at least half the time
    warp_sums = x[:n].astype(np.float64).reshape(-1, 32).sum(axis=1)
    if exercise_id == "reduce_sum":
        assert (np.abs(warp_sums) > bound[0]).mean() >= 0.5


def test_the_2_pow_24_sum_tolerance_is_far_tighter_than_the_old_rule():
    """The old K-scaled rule admitted ~144 at 2^28 (~36 at 2^24) while kernels err by <= 0.024; this one,
    for a grid-stride launch of 1024 x 256 threads, stays below 1 at 2^24."""
    ex = EXERCISES["reduce_sum"]
    n = 2 ** 24
    (x,) = ex.make_inputs((n,), np.random.default_rng(2))
    tol = ex.tolerance(x, ex.reference(x), launch={"threads": 1024 * 256, "block_threads": 256})
    assert 0.01 < float(np.ravel(tol.rtol * tol.scale)[0]) < 1.0


@pytest.mark.parametrize("n", [1000, 2 ** 16, 2 ** 20 + 1, 2 ** 22])
def test_every_correct_float32_order_passes_within_its_launch_structure(n):
    ex = EXERCISES["reduce_sum"]
    rng = np.random.default_rng(n)
    (x,) = ex.make_inputs((n,), rng)
    expected = ex.reference(x)
    head = n - n % 256
    orders = {  # (float32 result, the launch that computes it this way)
        "one thread, in order": (np.cumsum(x, dtype=np.float32)[-1], {"threads": 1, "block_threads": 1}),
        "one thread, reversed": (np.cumsum(x[::-1], dtype=np.float32)[-1], {"threads": 1, "block_threads": 1}),
        "pairwise tree": (np.sum(x, dtype=np.float32), {"threads": n, "block_threads": 256}),
        "per-element atomics, shuffled": (np.cumsum(rng.permutation(x), dtype=np.float32)[-1],
                                          {"threads": n, "block_threads": 256}),
        "blocks of 256, partials in order": (
            np.cumsum(np.append(x[:head].reshape(-1, 256).sum(axis=1, dtype=np.float32),
                                np.sum(x[head:], dtype=np.float32)), dtype=np.float32)[-1],
            {"threads": n, "block_threads": 256}),
    }
    for name, (value, launch) in orders.items():
        tol = ex.tolerance(x, expected, launch=launch)
        assert not _rejects(np.array([value]), expected, tol), name


def test_prefix_sum_rounding_matches_a_direct_count():
    """sqrt(Σ s²) of the model, computed by hand for chunks of 3 over 7 elements."""
    x = np.array([1.0, -2.0, 3.0, 0.5, 0.25, -1.0, 4.0])
    got = prefix_sum_rounding(x, 3)
    local = [1.0, -1.0, 2.0, 0.5, 0.75, -0.25, 4.0]          # partials within each chunk of 3
    carries = [0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 1.75]           # the running total before each chunk
    outputs = np.cumsum(x)
    expected = []
    for j in range(7):
        squares = sum(v * v for v in local[:j + 1])           # every partial of this and earlier chunks
        chain = [2.0, 1.75][: j // 3]                         # carries formed before this chunk
        depth = 4  # ceil(log2 7) + 1 additions at the output's own magnitude
        expected.append(np.sqrt(squares + sum(c * c for c in chain) + depth * outputs[j] ** 2))
    assert np.allclose(got, expected), (got, expected, carries)
