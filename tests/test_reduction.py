"""The reduction chapter's kernels: every rung of the sum and the max gives the whole reduction at ragged
multi-block sizes, at size 1 and for an empty input (the identity), whatever `out` held before; the
launchers refuse bad arguments; the ladders are declared consistently."""
import math

import numpy as np
import pytest
from numba import cuda

import lib
import kernels.reduction as R
from lib.grading.check import compare
from lib.grading.exercises import EXERCISES

SUM_LAUNCHERS = [pytest.param(r.run, id=r.name) for r in R.SUM_RUNGS]


def _run(launcher, x):
    out = cuda.to_device(np.full(1, np.nan, dtype=np.float32))  # NaN: an unwritten or un-zeroed out shows
    launcher(cuda.to_device(x), out)
    return out.copy_to_host()


@pytest.mark.parametrize("launcher", SUM_LAUNCHERS)
@pytest.mark.parametrize("n", [1, 700])  # 700: 3 blocks of 256 with a ragged end (2 blocks of 512)
def test_every_sum_rung_adds_every_element_once(launcher, n):
    rng = np.random.default_rng(n)
    x = rng.uniform(0.5, 1.5, n).astype(np.float32)  # one-signed: a lost or doubled term is far off
    expected = np.array([np.sum(x, dtype=np.float64)])
    tol = EXERCISES["reduce_sum"].tolerance(x, expected)
    got = _run(launcher, x)
    assert compare(got, expected, tol.rtol, tol.atol, tol.scale) is None, (got, expected)


@pytest.mark.parametrize("launcher", SUM_LAUNCHERS)
def test_every_sum_rung_gives_zero_for_an_empty_input(launcher):
    assert _run(launcher, np.zeros(0, dtype=np.float32))[0] == 0.0


@pytest.mark.parametrize("n", [3, 4, 1027])  # fewer floats than one float4; exactly one; a ragged tail of 3
def test_float4_rung_adds_the_tail_and_falls_back_for_an_unaligned_view(n):
    x = np.random.default_rng(n).uniform(0.5, 1.5, n + 1).astype(np.float32)
    for view, host in ((cuda.to_device(x[:n]), x[:n]), (cuda.to_device(x)[1:], x[1:])):
        out = cuda.to_device(np.full(1, np.nan, dtype=np.float32))
        R.grid_stride_float4(view, out)
        expected = np.array([np.sum(host, dtype=np.float64)])
        tol = EXERCISES["reduce_sum"].tolerance(host, expected)
        assert compare(out.copy_to_host(), expected, tol.rtol, tol.atol, tol.scale) is None


def test_one_block_partials_land_in_the_right_slots():
    """The first pass of rung 4 alone: partial b must be the sum of elements 512·b .. 512·b + 511."""
    x = np.arange(1100, dtype=np.float32)
    partial = cuda.to_device(np.full(3, np.nan, dtype=np.float32))
    R.reduce_warp_shuffle[3, R.BLOCK](cuda.to_device(x), partial)
    expected = [x[b * 2 * R.BLOCK:(b + 1) * 2 * R.BLOCK].sum(dtype=np.float64) for b in range(3)]
    np.testing.assert_array_equal(partial.copy_to_host(), np.array(expected, dtype=np.float32))


@pytest.mark.parametrize("n", [1, 700])
def test_max_uses_minus_infinity_as_identity(n):
    x = -np.random.default_rng(n).uniform(1.0, 2.0, n).astype(np.float32)  # all below 0: 0 would win
    assert _run(R.max_grid_stride, x)[0] == x.max()


def test_max_of_an_empty_input_is_minus_infinity():
    assert _run(R.max_grid_stride, np.zeros(0, dtype=np.float32))[0] == -math.inf


@pytest.mark.parametrize("launcher", [R.interleaved_divergent, R.grid_stride_ilp, R.grid_stride_float4,
                                      R.max_grid_stride])
def test_launchers_refuse_bad_arguments(launcher):
    x = cuda.to_device(np.ones(10, dtype=np.float32))
    with pytest.raises(TypeError, match="float32"):
        launcher(cuda.to_device(np.ones(10)), cuda.device_array(1, np.float32))
    with pytest.raises(ValueError, match=r"shape \(1,\)"):
        launcher(x, cuda.device_array(2, np.float32))
    with pytest.raises(ValueError, match="1-D"):
        launcher(cuda.to_device(np.ones((2, 5), dtype=np.float32)), cuda.device_array(1, np.float32))


def test_ladders_name_kernels_of_this_module_uniquely():
    names = [r.name for ladder in R.LADDERS for r in ladder.rungs + ladder.baselines]
    assert len(names) == len(set(names))  # results are keyed by kernel name within the chapter
    for ladder in R.LADDERS[:2]:
        assert ladder.sizes == [R.N] and ladder.sim_sizes and ladder.sim_sizes[0] % R.BLOCK
        for rung in ladder.rungs:
            assert hasattr(getattr(R, rung.name), "py_func" if lib.ON_GPU else "fn"), rung.name
    assert [lad.topic for lad in R.LADDERS] == ["sum", "max", "copy ceiling"]
    assert R.LADDERS[2].sizes == [R.N]


def test_partials_buffers_are_reused_not_reallocated():
    assert R.partials_buffer(5) is R.partials_buffer(5)
    assert R.partials_buffer(5) is not R.partials_buffer(6)


@pytest.mark.skipif(lib.ON_GPU, reason="on a GPU record_extra measures")
def test_record_extra_refuses_the_simulator(tmp_path):
    with pytest.raises(RuntimeError, match="GPU"):
        R.record_extra(tmp_path)


def test_pass_grids_shrink_to_one_block():
    assert R.pass_grids(1 << 28, 256) == [1 << 20, 4096, 16, 1]
    assert R.pass_grids(1 << 28, 512) == [1 << 19, 1024, 2, 1]
    assert R.pass_grids(1, 256) == [1] and R.pass_grids(257, 256) == [2, 1]
