"""The warp intrinsics against their PTX definitions, in whichever mode this process runs.

On CI this exercises lib's simulator; run on a GPU (the reference H200) the same expectations check the
hardware, which is what ties the simulator's semantics to a real GPU's.
"""
import numpy as np
import pytest
from numba import cuda

FULL = 0xFFFFFFFF
BLOCK, GRID = 64, 2                  # two warps per block, two blocks
N = BLOCK * GRID


@cuda.jit
def _shuffles(x, b, out):
    i = cuda.grid(1)
    out[0, i] = cuda.shfl_sync(FULL, x[i], b[i])
    out[1, i] = cuda.shfl_up_sync(FULL, x[i], b[i])
    out[2, i] = cuda.shfl_down_sync(FULL, x[i], b[i])
    out[3, i] = cuda.shfl_xor_sync(FULL, x[i], b[i])


@cuda.jit
def _votes(pred, value, out):
    i = cuda.grid(1)
    out[0, i] = cuda.ballot_sync(FULL, pred[i])
    out[1, i] = 1 if cuda.all_sync(FULL, pred[i]) else 0
    out[2, i] = 1 if cuda.any_sync(FULL, pred[i]) else 0
    out[3, i] = cuda.match_any_sync(FULL, value[i])
    out[4, i] = cuda.lanemask_lt()


def _expected_shuffles(x, b):
    out = np.empty((4, N), dtype=x.dtype)
    for g in range(N):
        lane, base, d = g % 32, g - g % 32, int(b[g]) & 31     # PTX: only b[4:0] counts
        for row, src in enumerate([d, lane - d, lane + d, lane ^ d]):
            out[row, g] = x[base + src] if 0 <= src < 32 else x[g]  # out of range: own value
    return out


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_shuffles_follow_ptx(dtype):
    rng = np.random.default_rng(1)
    x = (rng.permutation(N) * 3 - 100).astype(dtype)
    b = rng.integers(-40, 70, size=N).astype(np.int32)      # per-lane offsets, beyond 31 and negative too
    b[:32] = 33                                              # one warp with a uniform, wrapped offset
    out = np.zeros((4, N), dtype=dtype)
    _shuffles[GRID, BLOCK](x, b, out)
    np.testing.assert_array_equal(out, _expected_shuffles(x, b))


def test_votes_and_match_follow_ptx():
    rng = np.random.default_rng(2)
    pred = (rng.random(N) < 0.5).astype(np.int32)
    pred[32:64] = 1                                          # a warp where every lane votes yes
    pred[64:96] = 0                                          # and one where none does
    value = rng.integers(0, 3, size=N).astype(np.int32)
    out = np.zeros((5, N), dtype=np.int64)
    _votes[GRID, BLOCK](pred, value, out)
    for w in range(N // 32):
        lanes = slice(32 * w, 32 * w + 32)
        bits = sum(1 << k for k in range(32) if pred[lanes][k])
        assert set(out[0, lanes]) == {np.int64(np.uint32(bits).view(np.int32))}  # int32: all lanes = -1
        assert set(out[1, lanes]) == {int(pred[lanes].all())}
        assert set(out[2, lanes]) == {int(pred[lanes].any())}
        for k in range(32):
            same = sum(1 << j for j in range(32) if value[lanes][j] == value[lanes][k])
            assert out[3, 32 * w + k] == np.uint32(same).view(np.int32)
            assert out[4, 32 * w + k] == (1 << k) - 1


# ---- cases the review found the simulator getting wrong (D1-D4); each is legal CUDA with a defined result

@cuda.jit
def _branch_then_converged(x, out, high):
    i = cuda.grid(1)
    lane = cuda.threadIdx.x % 32
    v = x[i]
    if (lane >= 16) == (high == 1):
        mask = 0xFFFF0000 if high == 1 else 0x0000FFFF
        cuda.syncwarp(mask)
        v = cuda.shfl_sync(mask, v, 16 if high == 1 else 0)
    cuda.syncwarp(FULL)
    out[i] = cuda.shfl_sync(FULL, v, 31) + cuda.shfl_xor_sync(FULL, v, 1)


@pytest.mark.parametrize("high", [0, 1])
def test_partial_mask_in_a_branch_then_full_mask_after_it(high):
    """Each call's mask is the same in all its lanes, whichever half takes the branch."""
    x = np.arange(BLOCK, dtype=np.float64) * 3
    out = np.zeros(BLOCK)
    _branch_then_converged[1, BLOCK](x, out, high)
    g = np.arange(BLOCK)
    lane, base = g % 32, g - g % 32
    taken = (lane >= 16) == (high == 1)
    v = np.where(taken, x[base + (16 if high else 0)], x)
    np.testing.assert_array_equal(out, v[base + 31] + v[g ^ 1])


@cuda.jit
def _match(x, any_out, all_out, all_pred):
    i = cuda.grid(1)
    any_out[i] = cuda.match_any_sync(FULL, x[i])
    m, p = cuda.match_all_sync(FULL, x[i])
    all_out[i] = m
    all_pred[i] = p


@pytest.mark.parametrize("dtype,bits", [(np.float32, np.uint32), (np.float64, np.uint64)])
def test_match_compares_bit_patterns(dtype, bits):
    """match.sync compares bits (numba bitcasts the float): NaNs with different payloads differ, equal
    payloads match, -0.0 does not match 0.0 (== says otherwise on both counts). The masks are int32 and
    store into uint32 arrays as their bits."""
    width = np.dtype(dtype).itemsize * 8
    sign = 1 << (width - 1)
    nan = (0x7FF << 52 | 1 << 51) if width == 64 else (0xFF << 23 | 1 << 22)  # a quiet NaN's bits
    groups = [nan, nan | 1, nan | sign, 0, sign]  # NaN, NaN with another payload, -NaN, +0.0, -0.0
    x = np.zeros(32, dtype)
    xb = x.view(bits)
    for lane in range(32):
        xb[lane] = groups[min(lane // 4, 4)]
    any_out = np.zeros(32, np.uint32)
    all_out = np.ones(32, np.uint32)
    all_pred = np.ones(32, np.int32)
    _match[1, 32](x, any_out, all_out, all_pred)
    for lane in range(32):
        g = min(lane // 4, 4)
        assert any_out[lane] == sum(1 << other for other in range(32) if min(other // 4, 4) == g), lane
    assert (all_pred == 0).all() and (all_out == 0).all()
    xb[:] = nan | 1  # one NaN payload everywhere: all match
    _match[1, 32](x, any_out, all_out, all_pred)
    assert (any_out == FULL).all() and (all_out == FULL).all() and (all_pred == 1).all()


@cuda.jit
def _ballot_into_uint32(out):
    lane = cuda.threadIdx.x % 32
    out[0, cuda.threadIdx.x] = cuda.ballot_sync(FULL, lane == 31)
    out[1, cuda.threadIdx.x] = cuda.ballot_sync(FULL, True)


def test_ballot_stores_into_uint32_arrays_as_its_bits():
    out = np.zeros((2, 32), np.uint32)
    _ballot_into_uint32[1, 32](out)
    assert (out[0] == 0x80000000).all() and (out[1] == FULL).all()


@cuda.jit
def _small_block_reduce(x, out):
    i = cuda.threadIdx.x
    v = x[i]
    v += cuda.shfl_down_sync(0xFF, v, 4)
    v += cuda.shfl_down_sync(0xFF, v, 2)
    v += cuda.shfl_down_sync(0xFF, v, 1)
    out[i] = v
    out[8 + i] = cuda.ballot_sync(0xFF, i % 3 == 0)


def test_eight_thread_block_with_a_mask_of_its_lanes():
    """GPU-Puzzles' size: a block of 8 threads reducing with mask 0xFF (only lanes that exist)."""
    x = np.arange(1, 9, dtype=np.int64)
    out = np.zeros(16, np.int64)
    _small_block_reduce[1, 8](x, out)
    assert out[0] == x.sum()
    assert (out[8:] == 0b01001001).all()


@cuda.jit
def _partial_warp_full_mask(x, out):
    i = cuda.threadIdx.x
    out[0, i] = cuda.shfl_xor_sync(FULL, x[i], 1)
    out[1, i] = cuda.ballot_sync(FULL, x[i] % 2 == 0)
    cuda.syncwarp()


def test_full_mask_in_a_block_that_ends_in_a_partial_warp():
    """48 threads: the last warp has lanes 0-15; those lanes exchange among themselves, and a vote counts
    only them (as numba's own GPU tests of blocks of 10 threads rely on)."""
    x = np.arange(48, dtype=np.int32)
    out = np.zeros((2, 48), np.int64)
    _partial_warp_full_mask[1, 48](x, out)
    np.testing.assert_array_equal(out[0], x ^ 1)
    evens = sum(1 << k for k in range(0, 32, 2))
    assert (out[1, :32] == np.int32(np.uint32(evens).view(np.int32))).all()
    assert (out[1, 32:] == sum(1 << k for k in range(0, 16, 2))).all()
