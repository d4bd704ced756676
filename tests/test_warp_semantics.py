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
