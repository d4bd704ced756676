"""The scan chapter's kernels: every block scan and the three-phase scans at ragged sizes over several
blocks, the single-pass scan over many tiles, its look-back against the host model (including the paths
the simulator's in-order blocks never take: long AGGREGATE chains, windows of 32, waiting on a tile that
publishes later), exclusive scans, identities, and launcher errors."""
import threading
import time

import numpy as np
import pytest
from numba import cuda

import lib
from kernels import scan as S
from lib.grading.exercises import EXERCISES

RNG = np.random.default_rng(2024)


def _inputs(n):
    return RNG.uniform(-1, 1, n).astype(np.float32)


def _check_inclusive(x, got):
    expected = np.cumsum(x.astype(np.float64))
    tol = EXERCISES["scan_inclusive"].tolerance(x, expected)
    assert np.all(np.abs(got - expected) <= tol.rtol * tol.scale), \
        f"first wrong at {np.argmax(np.abs(got - expected) > tol.rtol * tol.scale)}"


def _run(launch, x, **kwargs):
    out = cuda.to_device(np.full(x.size, np.nan, dtype=np.float32))
    launch(cuda.to_device(x), out, **kwargs)
    return out.copy_to_host()


@pytest.mark.parametrize("kind", list(S.BLOCK_SCANS))
@pytest.mark.parametrize("n", [1, 700])  # 700: three blocks of 256 (two of 512), the last one ragged
def test_three_phase_scan(kind, n):
    x = _inputs(n)
    _check_inclusive(x, _run(S.scan_three_phase, x, kind=kind))


@pytest.mark.parametrize("kind", list(S.BLOCK_SCANS))
def test_block_scan_restarts_at_each_block(kind):
    x = _inputs(600)
    got = _run(S.scan_block, x, kind=kind)
    elems = S.BLOCK_SCANS[kind][1]
    expected = np.concatenate([np.cumsum(x[i:i + elems].astype(np.float64)) for i in range(0, x.size, elems)])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)


def test_three_phase_is_exact_on_integers():
    x = np.ones(600, dtype=np.float32)  # integer partial sums are exact in float32: any lost term shows
    for kind in S.BLOCK_SCANS:
        assert np.array_equal(_run(S.scan_three_phase, x, kind=kind), np.arange(1, 601, dtype=np.float32)), kind


@pytest.mark.parametrize("n", [1, 31, 40 * 32 - 5])  # the last: 40 tiles of 32, the last one ragged
def test_single_pass_over_many_small_tiles(n):
    x = _inputs(n)
    _check_inclusive(x, _run(S.scan_single_pass, x, threads=32, items=1))


def test_single_pass_with_several_warps_and_items_is_exact_on_integers():
    x = np.ones(5 * 128 + 77, dtype=np.float32)  # 64 threads × 2 items: 6 tiles, 2 warps each
    assert np.array_equal(_run(S.scan_single_pass, x, threads=64, items=2), np.arange(1, x.size + 1))


def test_single_pass_with_the_gpu_tile():
    x = _inputs(S.SINGLE_PASS_THREADS * S.ITEMS_PER_THREAD + 300)  # two tiles of 4096, the second ragged
    _check_inclusive(x, _run(S.scan_single_pass, x))


def test_single_pass_can_run_twice_in_a_row():
    # the ticket counter and the status flags must be reset by each launch, or tile numbers run past the end
    x = _inputs(200)
    for _ in range(2):
        _check_inclusive(x, _run(S.scan_single_pass, x, threads=32, items=2))


@pytest.mark.parametrize("n", [1, 3, 4, 5, 255, 257, 9 * 128 + 6])  # ragged within a float4 and a tile
def test_packed_single_pass_at_ragged_sizes(n):
    x = _inputs(n)
    _check_inclusive(x, _run(S.scan_single_pass_packed, x, threads=32, items=4))


def test_packed_single_pass_with_several_warps_is_exact_on_integers_and_runs_twice():
    x = np.ones(7 * 512 + 13, dtype=np.float32)  # 64 threads × 8 items: 8 tiles of 512, 2 warps each
    for _ in range(2):
        assert np.array_equal(_run(S.scan_single_pass_packed, x, threads=64, items=8), np.arange(1, x.size + 1))


def test_packed_single_pass_falls_back_for_a_view_that_is_not_16_byte_aligned():
    x = _inputs(301)
    d_x = cuda.to_device(x)[1:]
    out = cuda.device_array(300, dtype=np.float32)
    S.scan_single_pass_packed(d_x, out, threads=32, items=4)
    _check_inclusive(x[1:], out.copy_to_host())


@pytest.mark.parametrize("flag", [S.EMPTY, S.AGGREGATE, S.PREFIX])
@pytest.mark.parametrize("value", [0.0, -0.0, 1.5, -3.25e-7, 3.4e38, float("inf")])
def test_pack_keeps_the_flag_and_every_bit_of_the_value(flag, value):
    @cuda.jit
    def round_trip(flags, values, words):
        words[0] = S.pack(flags[0], values[0])
        f, v = S.unpack(words[0])
        flags[1], values[1] = f, v

    flags = cuda.to_device(np.array([flag, -1], dtype=np.int32))
    values = cuda.to_device(np.array([value, np.nan], dtype=np.float32))
    words = cuda.to_device(np.zeros(1, dtype=np.uint64))
    round_trip[1, 1](flags, values, words)
    f, v, w = flags.copy_to_host(), values.copy_to_host(), int(words.copy_to_host()[0])
    assert f[1] == flag and v[1].tobytes() == np.float32(value).tobytes()
    assert w >> 32 == flag and (w & 0xFFFFFFFF) == int(np.float32(value).view(np.uint32))


def test_packed_launcher_errors():
    x = cuda.to_device(np.zeros(8, np.float32))
    with pytest.raises(ValueError, match="multiple of 4"):
        S.scan_single_pass_packed(x, cuda.device_array(8, np.float32), threads=32, items=6)


@pytest.mark.parametrize("n", [1, 1000])
def test_exclusive_scan(n):
    x = _inputs(n)
    got = _run(S.scan_exclusive, x)
    assert got[0] == 0.0
    expected = np.concatenate([[0.0], np.cumsum(x.astype(np.float64))[:-1]])
    tol = EXERCISES["scan_exclusive"].tolerance(x, expected)
    assert np.all(np.abs(got - expected) <= tol.rtol * tol.scale)


def test_zeros_scan_to_zeros():
    x = np.zeros(300, dtype=np.float32)
    assert not _run(S.scan_three_phase, x).any()
    assert not _run(S.scan_single_pass, x, threads=32, items=2).any()


# --- the look-back itself, on crafted states ------------------------------------------------------------
@cuda.jit
def _look_back_kernel(tile, status, aggregates, prefixes, result):
    lane = cuda.threadIdx.x
    value = S.look_back(tile, lane, status, aggregates, prefixes)
    if lane == 0:
        result[0] = value


def _device_look_back(tile, status, aggregates, prefixes):
    result = cuda.to_device(np.full(1, np.nan, dtype=np.float32))
    _look_back_kernel[1, 32](tile, cuda.to_device(status), cuda.to_device(aggregates),
                             cuda.to_device(prefixes), result)
    return float(result.copy_to_host()[0])


def _state(tiles):
    status = np.full(tiles, S.AGGREGATE, dtype=np.int32)
    aggregates = np.arange(1, tiles + 1, dtype=np.float32)  # integers: sums are exact
    prefixes = 1000 * np.arange(1, tiles + 1, dtype=np.float32)
    return status, aggregates, prefixes


@pytest.mark.parametrize("tile, prefix_at", [(70, 5), (70, None), (1, 0), (40, 39), (33, 0)])
def test_look_back_matches_the_host_model(tile, prefix_at):
    status, aggregates, prefixes = _state(80)
    status[tile + 1:] = S.EMPTY           # successors: not yet published, never read
    if prefix_at is not None:
        status[prefix_at] = S.PREFIX
        status[:prefix_at] = S.EMPTY      # beyond the nearest PREFIX nothing is read, so nothing waits
    else:
        status[0] = S.PREFIX              # a chain of AGGREGATEs all the way down to tile 0
    expected, read = S.look_back_model(tile, status, aggregates, prefixes)
    assert _device_look_back(tile, status, aggregates, prefixes) == expected
    assert read[0] == tile - 1 and status[read[-1]] == S.PREFIX


def test_look_back_uses_the_nearest_prefix_not_a_farther_one():
    status, aggregates, prefixes = _state(10)
    status[[2, 6]] = S.PREFIX
    assert _device_look_back(9, status, aggregates, prefixes) == prefixes[6] + aggregates[7] + aggregates[8]


def test_look_back_model_refuses_to_read_past_an_empty_tile():
    status, aggregates, prefixes = _state(10)
    status[[0, 5]] = S.PREFIX, S.EMPTY
    with pytest.raises(RuntimeError, match="would wait for tile 5"):
        S.look_back_model(8, status, aggregates, prefixes)


@pytest.mark.skipif(lib.ON_GPU, reason="writes the simulator's host-side copy of device memory mid-kernel")
def test_look_back_waits_for_a_tile_that_publishes_later():
    # On the simulator predecessors are always done; here tile 2 is still EMPTY when tile 3 looks back,
    # and another thread publishes it 0.3 s later, as a slower block would on a GPU.
    status, aggregates, prefixes = _state(4)
    status[:] = S.PREFIX, S.AGGREGATE, S.EMPTY, S.EMPTY
    d_status, d_aggregates = cuda.to_device(status), cuda.to_device(aggregates)
    host_status, host_aggregates = d_status._ary, d_aggregates._ary  # the simulator keeps numpy arrays

    def publish_tile_2():
        time.sleep(0.3)
        host_aggregates[2] = 50.0
        host_status[2] = S.AGGREGATE
    writer = threading.Thread(target=publish_tile_2)
    result = cuda.to_device(np.full(1, np.nan, dtype=np.float32))
    t0 = time.perf_counter()
    writer.start()
    _look_back_kernel[1, 32](3, d_status, d_aggregates, cuda.to_device(prefixes), result)
    writer.join()
    assert time.perf_counter() - t0 >= 0.3
    assert result.copy_to_host()[0] == prefixes[0] + aggregates[1] + 50.0


# --- launchers refuse what the kernels cannot handle -------------------------------------------------------
def test_launchers_reject_bad_arguments():
    x = cuda.to_device(np.ones(10, dtype=np.float32))
    with pytest.raises(TypeError, match="float32"):
        S.scan_single_pass(cuda.to_device(np.ones(10)), cuda.device_array(10, np.float32))
    with pytest.raises(ValueError, match="shape"):
        S.scan_three_phase(x, cuda.device_array(9, np.float32))
    with pytest.raises(ValueError, match="1-D"):
        S.scan_exclusive(cuda.to_device(np.ones((2, 5), np.float32)), cuda.device_array((2, 5), np.float32))
    with pytest.raises(ValueError, match="unknown block scan"):
        S.scan_three_phase(x, cuda.device_array(10, np.float32), kind="sklansky")
    with pytest.raises(ValueError, match="multiple of 32"):
        S.scan_single_pass(x, cuda.device_array(10, np.float32), threads=48)


def test_drawings_follow_the_kernels_index_formulas():
    assert [len(s) for s in S.hillis_steele_steps(16)] == [15, 14, 12, 8]
    steps = S.blelloch_steps(16)
    assert [k for k, _ in steps] == ["up"] * 4 + ["down"] * 4
    assert steps[3] == ("up", [(7, 15)]) and steps[4] == ("down", [(7, 15)])
    status = np.array([2, 1, 1, 0], dtype=np.int32)
    assert S.look_back_model(3, status, np.ones(4), np.full(4, 10.0)) == (12.0, [2, 1, 0])
    S.draw_look_back(status, 3)
    S.draw_hillis_steele_vs_blelloch(8)
