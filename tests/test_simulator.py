"""Tests of lib/runtime/simulator.py: the warp intrinsics and block scheduler added to numba's CUDA simulator.

Every expectation is computed in numpy from the PTX definition (shfl.sync with width 32, vote.sync,
match.sync), never by calling the implementation. Each launch runs in a helper thread joined with a
timeout, so a scheduler regression that hangs fails the test instead of the whole suite.
"""
import os
import sys

# Before lib / numba: this module tests the simulator. Not where numba.cuda is already on a GPU (a whole
# test run there): numba re-reads the variable later and would turn its next kernels into simulated ones.
if "numba.cuda" not in sys.modules:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import lib  # noqa: E402
from numba import cuda  # noqa: E402
from numba.cuda.core import config as _numba_config  # noqa: E402

if not _numba_config.ENABLE_CUDASIM:  # numba.cuda was imported in GPU mode by an earlier module
    pytest.skip("numba.cuda was already imported with the simulator off", allow_module_level=True)

from lib.runtime import simulator  # noqa: E402
from lib.runtime.gpucompile import simulator_only  # noqa: E402  (kernels that look at Python objects)
from numba.cuda import shfl_down_sync as imported_shfl_down_sync  # noqa: E402  (needs lib first)

FULL = 0xFFFFFFFF
POISON_I32 = np.int32(np.int64(0xDEADBEEF).astype(np.int32))  # 0xDEADBEEF as int32: -559038737
LAUNCH_TIMEOUT = 20.0  # seconds; every launch here takes well under 2 s


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------
def launch(kernel, grid, block, *args, timeout=LAUNCH_TIMEOUT):
    """kernel[grid, block](*args) in a helper thread; fails the test if it does not finish in time.
    Returns the elapsed seconds; re-raises the launch's exception."""
    box = {}

    def target():
        try:
            kernel[grid, block](*args)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            box["error"] = e

    th = threading.Thread(target=target, daemon=True, name="sim-launch")
    start = time.monotonic()
    th.start()
    th.join(timeout)
    elapsed = time.monotonic() - start
    if th.is_alive():
        pytest.fail(f"kernel launch still running after {timeout} s: the simulator hangs")
    if "error" in box:
        raise box["error"]
    return elapsed


def launch_error(kernel, grid, block, *args, timeout=LAUNCH_TIMEOUT):
    """The exception a launch raises (fails if it raises nothing or hangs), and the elapsed time."""
    start = time.monotonic()
    try:
        launch(kernel, grid, block, *args, timeout=timeout)
    except pytest.fail.Exception:
        raise
    except Exception as e:  # noqa: BLE001
        return e, time.monotonic() - start
    pytest.fail("the launch was expected to raise but finished normally")


def distinct_values(n, dtype, seed=0):
    """n distinct values of dtype, using the type's range (int64 above 2**32, non-integral floats)."""
    perm = np.random.default_rng(seed).permutation(n).astype(np.int64)
    dtype = np.dtype(dtype)
    if dtype == np.int32:
        return (perm * 1_000_003 - 2**30).astype(np.int32)
    if dtype == np.int64:
        return perm * (2**40 + 3) - 2**45
    if dtype == np.float32:
        return (perm * 0.75 - 40.125).astype(np.float32)
    if dtype == np.float64:
        return perm * (1 + 2.0**-40) - 1e3
    raise ValueError(dtype)


def shfl_source(mode, lane, b):
    """PTX shfl.sync, width 32 (c = 0x1f, or 0 for up): the source lane, or None for 'keep own value'."""
    b = int(b) & 31  # bval = b[4:0]
    if mode == "idx":
        src = b
    elif mode == "up":
        src = lane - b
    elif mode == "down":
        src = lane + b
    elif mode == "xor":
        src = lane ^ b
    else:
        raise ValueError(mode)
    return src if 0 <= src <= 31 else None


def expected_shuffle(mode, x, b, block, live=None):
    """Per-thread result over a 1-D grid of 1-D blocks (block a multiple of 32). `live[g]` False: thread
    g exited before the shuffle; reading it gives the poison value."""
    out = x.copy()
    for g in range(len(x)):
        if live is not None and not live[g]:
            continue
        lane = (g % block) % 32
        src = shfl_source(mode, lane, b[g])
        if src is None:
            continue
        s = g - lane + src
        if live is None or live[s]:
            out[g] = x[s]
        else:
            out[g] = np.nan if np.issubdtype(x.dtype, np.floating) else POISON_I32
    return out


def as_i32(bits):
    return np.int64(bits & 0xFFFFFFFF).astype(np.int32)


# --------------------------------------------------------------------------------------------------
# kernels (written as they would run on a GPU)
# --------------------------------------------------------------------------------------------------
@cuda.jit
def shfl_idx_kernel(x, b, out):
    i = cuda.grid(1)
    for k in range(b.shape[0]):
        out[k, i] = cuda.shfl_sync(FULL, x[i], b[k, i])


@cuda.jit
def shfl_up_kernel(x, b, out):
    i = cuda.grid(1)
    for k in range(b.shape[0]):
        out[k, i] = cuda.shfl_up_sync(FULL, x[i], b[k, i])


@cuda.jit
def shfl_down_kernel(x, b, out):
    i = cuda.grid(1)
    for k in range(b.shape[0]):
        out[k, i] = cuda.shfl_down_sync(FULL, x[i], b[k, i])


@cuda.jit
def shfl_xor_kernel(x, b, out):
    i = cuda.grid(1)
    for k in range(b.shape[0]):
        out[k, i] = cuda.shfl_xor_sync(FULL, x[i], b[k, i])


SHFL_KERNELS = {"idx": shfl_idx_kernel, "up": shfl_up_kernel, "down": shfl_down_kernel,
                "xor": shfl_xor_kernel}
UNIFORM_B = [0, 1, 5, 16, 31, 32, 33, 63, -1]  # 32 -> 0, 33 -> 1, 63 -> 31, -1 -> 31 (low 5 bits)


@pytest.mark.parametrize("mode", ["idx", "up", "down", "xor"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_shuffles_match_ptx_definition(mode, dtype):
    # blocks of 64 (dtype int*) or 96 threads, 2 blocks: several warps per block and per grid
    block = 64 if dtype in (np.int32, np.float32) else 96
    grid = 2
    n = grid * block
    x = distinct_values(n, dtype, seed=n)
    lane = (np.arange(n) % block) % 32
    rows = [np.full(n, v, dtype=np.int32) for v in UNIFORM_B]
    rows.append(((lane * 7 + 3) % 45).astype(np.int32))  # a different source/delta per lane, some > 31
    b = np.stack(rows)
    out = np.zeros((len(rows), n), dtype=dtype)
    launch(SHFL_KERNELS[mode], grid, block, x, b, out)
    for k in range(len(rows)):
        want = expected_shuffle(mode, x, b[k], block)
        np.testing.assert_array_equal(out[k], want, err_msg=f"{mode} b={b[k][:4]}... dtype={dtype}")


def test_shuffle_edge_semantics_spelled_out():
    """A few lanes checked by hand, independent of the expectation helper."""
    block = 64
    x = np.arange(block, dtype=np.float64) * 10  # value = 10 * thread index
    b = np.array([np.full(block, d, np.int32) for d in (16, 32, 33)])
    out = np.zeros((3, block))
    launch(shfl_down_kernel, 1, block, x, b, out)
    assert out[0, 0] == 160 and out[0, 15] == 310 and out[0, 16] == 160  # 16 + 16 > 31: own value
    assert out[0, 32] == 480 and out[0, 47] == 630 and out[0, 48] == 480  # never crosses into warp 0/2
    np.testing.assert_array_equal(out[1], x)  # delta 32 == 0
    assert out[2, 0] == 10 and out[2, 30] == 310 and out[2, 31] == 310 and out[2, 63] == 630  # 33 == 1
    up = np.zeros((3, block))
    launch(shfl_up_kernel, 1, block, x, b, up)
    assert up[0, 15] == 150 and up[0, 16] == 0 and up[0, 48] == 320  # lane - 16 < 0: own value
    assert up[2, 0] == 0 and up[2, 32] == 320 and up[2, 33] == 320  # 33 == 1
    idx = np.zeros((3, block))
    launch(shfl_idx_kernel, 1, block, x, b, idx)
    np.testing.assert_array_equal(idx[0], np.repeat([160.0, 480.0], 32))
    np.testing.assert_array_equal(idx[1], np.repeat([0.0, 320.0], 32))  # lane 32 -> lane 0
    np.testing.assert_array_equal(idx[2], np.repeat([10.0, 330.0], 32))  # lane 33 -> lane 1


# ---- reductions and scans ------------------------------------------------------------------------
@cuda.jit
def reduce_kernel(x, warp_sums, xor_sums, block_sums):
    i = cuda.grid(1)
    tid = cuda.threadIdx.x
    lane = tid % 32
    warp = tid // 32
    partial = cuda.shared.array(32, dtype=x.dtype)
    # tree reduction: lane 0 ends with the warp's sum
    v = x[i]
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(FULL, v, offset)
        offset //= 2
    if lane == 0:
        warp_sums[i // 32] = v
        partial[warp] = v
    # butterfly: every lane ends with the warp's sum
    w = x[i]
    m = 1
    while m < 32:
        w += cuda.shfl_xor_sync(FULL, w, m)
        m *= 2
    xor_sums[i] = w
    # block: the first warp reduces the warps' sums
    cuda.syncthreads()
    if warp == 0:
        nwarps = cuda.blockDim.x // 32
        s = partial[lane] if lane < nwarps else x.dtype.type(0)
        offset = 16
        while offset > 0:
            s += cuda.shfl_down_sync(FULL, s, offset)
            offset //= 2
        if lane == 0:
            block_sums[cuda.blockIdx.x] = s


@pytest.mark.parametrize("dtype,block", [(np.int32, 96), (np.float64, 64)])
def test_warp_shuffle_reductions(dtype, block):
    grid = 2
    n = grid * block
    rng = np.random.default_rng(1)
    x = rng.integers(-1000, 1000, n).astype(dtype)  # integer-valued: exact in any summation order
    warp_sums = np.zeros(n // 32, dtype)
    xor_sums = np.zeros(n, dtype)
    block_sums = np.zeros(grid, dtype)
    launch(reduce_kernel, grid, block, x, warp_sums, xor_sums, block_sums)
    want_warp = x.reshape(-1, 32).sum(axis=1)
    np.testing.assert_array_equal(warp_sums, want_warp)
    np.testing.assert_array_equal(xor_sums, np.repeat(want_warp, 32))
    np.testing.assert_array_equal(block_sums, x.reshape(grid, block).sum(axis=1))


@cuda.jit
def scan_kernel(x, warp_scan, block_scan):
    i = cuda.grid(1)
    tid = cuda.threadIdx.x
    lane = tid % 32
    warp = tid // 32
    totals = cuda.shared.array(32, dtype=x.dtype)
    v = x[i]
    d = 1
    while d < 32:
        y = cuda.shfl_up_sync(FULL, v, d)
        if lane >= d:
            v += y
        d *= 2
    warp_scan[i] = v
    if lane == 31:
        totals[warp] = v
    cuda.syncthreads()
    if warp == 0:
        nwarps = cuda.blockDim.x // 32
        t = totals[lane] if lane < nwarps else x.dtype.type(0)
        d = 1
        while d < 32:
            y = cuda.shfl_up_sync(FULL, t, d)
            if lane >= d:
                t += y
            d *= 2
        totals[lane] = t  # inclusive scan of the warps' totals
    cuda.syncthreads()
    if warp > 0:
        v += totals[warp - 1]
    block_scan[i] = v


def test_inclusive_warp_and_block_scan_with_shfl_up():
    grid, block = 2, 96
    n = grid * block
    x = np.random.default_rng(2).integers(-50, 100, n).astype(np.int64) * (2**33 + 1)
    warp_scan = np.zeros(n, np.int64)
    block_scan = np.zeros(n, np.int64)
    launch(scan_kernel, grid, block, x, warp_scan, block_scan)
    np.testing.assert_array_equal(warp_scan, np.cumsum(x.reshape(-1, 32), axis=1).ravel())
    np.testing.assert_array_equal(block_scan, np.cumsum(x.reshape(grid, block), axis=1).ravel())


# ---- lanes that exit early -------------------------------------------------------------------------
@cuda.jit
def early_exit_kernel(x, n, b, out, total):
    i = cuda.grid(1)
    if i >= n:
        return
    out[0, i] = cuda.shfl_down_sync(FULL, x[i], b[0])
    out[1, i] = cuda.shfl_xor_sync(FULL, x[i], b[1])
    out[2, i] = cuda.shfl_sync(FULL, x[i], b[2])
    out[3, i] = cuda.shfl_up_sync(FULL, x[i], b[3])
    cuda.syncwarp()
    v = x[i]
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(FULL, v, offset)
        offset //= 2
    if cuda.laneid == 0:
        total[i // 32] = v


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # int32 sums wrap, as on a GPU
@pytest.mark.parametrize("dtype,grid,block,n", [(np.float64, 2, 64, 84), (np.int32, 2, 96, 141),
                                                 (np.float32, 1, 64, 5)])
def test_early_exit_before_full_mask_shuffle(dtype, grid, block, n):
    size = grid * block
    x = np.zeros(size, dtype)
    x[:n] = distinct_values(n, dtype, seed=3)
    b = np.array([3, 7, 19, 2], np.int32)
    out = np.zeros((4, size), dtype)
    total = np.zeros(size // 32, dtype)
    launch(early_exit_kernel, grid, block, x, n, b, out, total)
    live = np.arange(size) < n
    for k, mode in enumerate(["down", "xor", "idx", "up"]):
        want = expected_shuffle(mode, x, np.full(size, b[k]), block, live)
        want[~live] = 0  # exited threads wrote nothing
        np.testing.assert_array_equal(out[k], want, err_msg=mode)
    # the poison is there: some live lane read an exited lane
    poisoned = np.isnan(out[0]) if dtype != np.int32 else out[0] == POISON_I32
    assert poisoned[:n].any()
    # full warps reduce correctly; the partial warp's lane 0 sum includes poison
    full_warps = n // 32
    v = x[:full_warps * 32].reshape(-1, 32).copy()
    for offset in (16, 8, 4, 2, 1):  # the tree's own summation order, so floats compare exactly
        src = np.arange(32) + offset
        v = v + np.where(src < 32, v[:, np.minimum(src, 31)], v)
    np.testing.assert_array_equal(total[:full_warps], v[:, 0])
    if dtype != np.int32:
        assert np.isnan(total[full_warps])  # lane 0 read exited lanes in the tree reduction


# ---- partial masks -------------------------------------------------------------------------------
@cuda.jit
def low_half_kernel(x, out, votes):
    i = cuda.grid(1)
    lane = cuda.threadIdx.x % 32
    out[0, i] = x[i]
    out[1, i] = x[i]
    if lane < 16:
        m = 0x0000FFFF
        out[0, i] = cuda.shfl_xor_sync(m, x[i], 1)
        out[1, i] = cuda.shfl_down_sync(m, x[i], 8)  # lanes 8-15 read lanes 16-23: not in the mask
        votes[0, i] = cuda.ballot_sync(m, x[i] > 0)
        votes[1, i] = cuda.all_sync(m, lane < 16)
        votes[2, i] = cuda.any_sync(m, lane == 20)
        cuda.syncwarp(m)


@cuda.jit
def two_halves_kernel(x, out):
    i = cuda.grid(1)
    lane = cuda.threadIdx.x % 32
    if lane < 16:
        m = 0x0000FFFF
        v = cuda.shfl_sync(m, x[i], 3)  # broadcast lane 3 to lanes 0-15
        v += cuda.shfl_down_sync(m, x[i], 1)
        out[0, i] = v
        out[1, i] = cuda.ballot_sync(m, True)
    else:
        m = 0xFFFF0000
        v = cuda.shfl_sync(m, x[i], 20)  # broadcast lane 20 to lanes 16-31
        v += cuda.shfl_up_sync(m, x[i], 1)
        v += cuda.shfl_xor_sync(m, x[i], 2)  # one more round than the other half
        out[0, i] = v
        out[1, i] = cuda.ballot_sync(m, True)


def test_partial_mask_low_half_only():
    grid, block = 2, 64
    n = grid * block
    x = distinct_values(n, np.float64, seed=4)
    out = np.zeros((2, n))
    votes = np.zeros((3, n), np.int64)
    launch(low_half_kernel, grid, block, x, out, votes)
    lane = np.arange(n) % 32
    lo = lane < 16
    np.testing.assert_array_equal(out[0][~lo], x[~lo])
    np.testing.assert_array_equal(out[0][lo], x[np.arange(n) ^ 1][lo])
    src_ok = lo & (lane + 8 < 16)
    np.testing.assert_array_equal(out[1][src_ok], x[np.arange(n) + 8 * src_ok][src_ok])
    assert np.isnan(out[1][lo & ~src_ok]).all()  # lanes 8-15 read outside the mask: poison
    np.testing.assert_array_equal(out[1][~lo], x[~lo])
    for w in range(n // 32):
        sl = slice(32 * w, 32 * w + 16)
        bits = sum(1 << ln for ln in range(16) if x[32 * w + ln] > 0)
        assert (votes[0, sl] == as_i32(bits)).all()
        assert (votes[1, sl] == 1).all()  # all 16 lanes in the mask have lane < 16
        assert (votes[2, sl] == 0).all()  # lane 20 is not in the mask


def test_two_halves_with_disjoint_masks_concurrently():
    grid, block = 2, 64
    n = grid * block
    x = distinct_values(n, np.int64, seed=5)
    out = np.zeros((2, n), np.int64)
    launch(two_halves_kernel, grid, block, x, out)
    poison = np.int64(0xDEADBEEF)  # an int64 operand read from a lane outside the mask

    def from_mask(g, src, lo, hi):  # value of lane src of g's warp if lo <= src <= hi, else poison
        return x[g - g % 32 + src] if lo <= src <= hi else poison

    want = np.zeros((2, n), np.int64)
    for g in range(n):
        lane = g % 32
        if lane < 16:
            want[0, g] = from_mask(g, 3, 0, 15) + from_mask(g, lane + 1, 0, 15)  # lane 15 -> 16: poison
            want[1, g] = 0x0000FFFF
        else:
            want[0, g] = (from_mask(g, 20, 16, 31) + from_mask(g, lane - 1, 16, 31)  # 16 -> 15: poison
                          + from_mask(g, lane ^ 2, 16, 31))
            want[1, g] = as_i32(0xFFFF0000)
    np.testing.assert_array_equal(out, want)


# ---- votes -----------------------------------------------------------------------------------------
@cuda.jit
def vote_kernel(pred_in, out):
    i = cuda.grid(1)
    p = pred_in[i] != 0
    out[0, i] = cuda.ballot_sync(FULL, p)
    out[1, i] = cuda.all_sync(FULL, p)
    out[2, i] = cuda.any_sync(FULL, p)
    out[3, i] = cuda.eq_sync(FULL, p)


def test_votes_with_mixed_predicates():
    grid, block = 2, 96
    n = grid * block
    rng = np.random.default_rng(6)
    pred = rng.integers(0, 2, n).astype(np.int32)
    pred[0:32] = 1       # block 0 warp 0: all true -> ballot -1
    pred[32:64] = 0      # block 0 warp 1: all false
    pred[64:96] = 0
    pred[64 + 31] = 1    # block 0 warp 2: only lane 31 -> ballot INT_MIN
    pred[96:128] = 0
    pred[96] = 1         # block 1 warp 0: only lane 0
    out = np.zeros((4, n), np.int64)
    launch(vote_kernel, grid, block, pred, out)
    for w in range(n // 32):
        p = pred[32 * w:32 * w + 32].astype(bool)
        bits = sum(1 << ln for ln in range(32) if p[ln])
        sl = slice(32 * w, 32 * w + 32)
        assert (out[0, sl] == as_i32(bits)).all(), w
        assert (out[1, sl] == int(p.all())).all(), w
        assert (out[2, sl] == int(p.any())).all(), w
        assert (out[3, sl] == int(p.all() or not p.any())).all(), w
    assert (out[0, 0:32] == -1).all()  # full warp's ballot: int32 -1, as numba types it on the GPU
    assert (out[0, 64:96] == -2**31).all()
    assert (out[0, 96:128] == 1).all()


def test_vote_result_types():
    """all/any/eq return booleans, ballot a numpy int32 as numba types it (simulator only: Python types)."""
    seen = []

    @simulator_only
    @cuda.jit
    def k():
        lane = cuda.threadIdx.x % 32
        r = (cuda.ballot_sync(FULL, True), cuda.all_sync(FULL, lane < 40), cuda.any_sync(FULL, lane > 40),
             cuda.eq_sync(FULL, lane < 3))
        if cuda.threadIdx.x == 5:
            seen.append(r)

    launch(k, 1, 64)
    (ballot, all_, any_, eq), = seen
    assert ballot == -1 and type(ballot) is np.int32
    assert all_ is True and any_ is False and eq is False


# ---- match ---------------------------------------------------------------------------------------
@cuda.jit
def match_kernel(x, any_out, all_out, all_pred):
    i = cuda.grid(1)
    any_out[i] = cuda.match_any_sync(FULL, x[i])
    m, p = cuda.match_all_sync(FULL, x[i])
    all_out[i] = m
    all_pred[i] = p


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_match_any_and_match_all(dtype):
    grid, block = 2, 64
    n = grid * block
    lane = np.arange(n) % 32
    vals = np.empty(n, dtype)
    vals[0:32] = lane[0:32] // 4            # groups of 4
    vals[32:64] = 7                         # all equal
    vals[64:96] = np.random.default_rng(7).integers(0, 3, 32)  # a few classes, scattered
    vals[96:128] = lane[96:128]             # all different
    if dtype == np.int64:
        vals = vals * 2**35 + 1             # values that differ only above 32 bits
    any_out = np.zeros(n, np.int64)
    all_out = np.zeros(n, np.int64)
    all_pred = np.zeros(n, np.int64)
    launch(match_kernel, grid, block, vals, any_out, all_out, all_pred)
    for w in range(n // 32):
        v = vals[32 * w:32 * w + 32]
        same = bool((v == v[0]).all())
        for ln in range(32):
            g = 32 * w + ln
            bits = sum(1 << o for o in range(32) if v[o] == v[ln])
            assert any_out[g] == as_i32(bits), (w, ln)
            assert all_out[g] == (-1 if same else 0), (w, ln)
            assert all_pred[g] == int(same), (w, ln)


# ---- syncwarp, lanemask_lt, activemask ----------------------------------------------------------
@cuda.jit
def syncwarp_kernel(x, out):
    i = cuda.grid(1)
    tid = cuda.threadIdx.x
    buf = cuda.shared.array(128, dtype=np.float64)
    v = x[i]
    for step in range(3):
        buf[tid] = v
        cuda.syncwarp()
        v = v + buf[tid ^ 1] + buf[tid ^ 16] * 0.5  # neighbours in the same warp only
        cuda.syncwarp()
    if tid % 32 < 16:  # only the lower half, with its own mask
        buf[tid] = v
        cuda.syncwarp(0x0000FFFF)
        v = buf[tid ^ 8]
    out[i] = v


def test_syncwarp_orders_shared_memory_within_a_warp():
    grid, block = 2, 64
    n = grid * block
    x = distinct_values(n, np.float64, seed=8)
    out = np.zeros(n)
    launch(syncwarp_kernel, grid, block, x, out)
    v = x.copy()
    idx = np.arange(n)
    for _ in range(3):
        v = v + v[idx ^ 1] + v[idx ^ 16] * 0.5
    lo = idx % 32 < 16
    want = np.where(lo, v[idx ^ 8], v)
    np.testing.assert_array_equal(out, want)


@cuda.jit
def lanemask_activemask_kernel(lt, active, lane_out):
    i = cuda.grid(1)
    lt[i] = cuda.lanemask_lt()
    active[i] = cuda.activemask()
    lane_out[i] = cuda.laneid


def test_lanemask_lt_and_activemask_in_converged_code():
    grid, block = (2, (16, 4))  # 2-D blocks: the lane is the linear thread index mod 32
    n = 2 * 64
    lt = np.zeros(n, np.int64)
    active = np.zeros(n, np.int64)
    lane_out = np.zeros(n, np.int64)

    @cuda.jit
    def k2(lt, active, lane_out):
        t = cuda.threadIdx.x + cuda.blockDim.x * cuda.threadIdx.y
        g = t + cuda.blockIdx.x * cuda.blockDim.x * cuda.blockDim.y
        lt[g] = cuda.lanemask_lt()
        active[g] = cuda.activemask()
        lane_out[g] = cuda.laneid

    launch(k2, grid, block, lt, active, lane_out)
    lane = np.arange(n) % 32
    np.testing.assert_array_equal(lane_out, lane)
    np.testing.assert_array_equal(lt, (1 << lane) - 1)  # uint32 values (numba types it uint32)
    np.testing.assert_array_equal(active, np.full(n, 0xFFFFFFFF))
    lt1, active1, lane1 = (np.zeros(128, np.int64) for _ in range(3))
    launch(lanemask_activemask_kernel, 2, 64, lt1, active1, lane1)
    assert lt1[31] == 0x7FFFFFFF and lt1[32] == 0 and lt1[0] == 0 and lt1[66] == 3
    np.testing.assert_array_equal(active1, np.full(128, 0xFFFFFFFF))  # even lanes that finish first


@cuda.jit
def activemask_exit_kernel(x, n, active, out):
    i = cuda.grid(1)
    if i >= n:
        return
    m = cuda.activemask()
    active[i] = m
    out[i] = cuda.shfl_down_sync(m, x[i], 1)  # the usual pattern: the surviving lanes as the mask


@pytest.mark.parametrize("n", [84, 70])
def test_activemask_after_early_exit_names_the_surviving_lanes(n):
    grid, block = 2, 64
    size = grid * block
    x = distinct_values(size, np.float64, seed=13)
    active = np.zeros(size, np.int64)
    out = np.zeros(size)
    launch(activemask_exit_kernel, grid, block, x, n, active, out)
    live = np.arange(size) < n
    want = np.zeros(size, np.int64)
    for g in range(n):
        base = g - g % 32
        want[g] = sum(1 << ln for ln in range(32) if base + ln < n)
    np.testing.assert_array_equal(active, want)
    last = n - 1
    expect = expected_shuffle("down", x, np.ones(size, np.int64), block, live)
    expect[~live] = 0
    np.testing.assert_array_equal(out[:last], expect[:last])
    assert np.isnan(out[last]) == (last % 32 != 31)  # its source exited, unless it is lane 31


@cuda.jit
def activemask_divergent_kernel(active):
    i = cuda.grid(1)
    lane = cuda.threadIdx.x % 32
    if lane < 16:
        active[0, i] = cuda.activemask()
    else:
        active[0, i] = cuda.activemask()
    if lane % 3 == 0:
        active[1, i] = cuda.activemask()
    cuda.syncthreads()  # the other lanes wait here: not active in the branch above
    active[2, i] = cuda.activemask()  # converged again


def test_activemask_in_divergent_branches():
    grid, block = 1, 64
    active = np.zeros((3, 64), np.int64)
    launch(activemask_divergent_kernel, grid, block, active)
    lane = np.arange(64) % 32
    np.testing.assert_array_equal(active[0], np.where(lane < 16, 0x0000FFFF, 0xFFFF0000))
    third = sum(1 << ln for ln in range(0, 32, 3))
    np.testing.assert_array_equal(active[1], np.where(lane % 3 == 0, third, 0))
    np.testing.assert_array_equal(active[2], np.full(64, 0xFFFFFFFF))


@cuda.jit
def xor16_2d_kernel(x, out):
    t = cuda.threadIdx.x + cuda.blockDim.x * cuda.threadIdx.y
    out[t] = cuda.shfl_xor_sync(FULL, x[t], 16)


def test_warps_of_a_2d_block_follow_the_linear_thread_index():
    x = distinct_values(64, np.float32, seed=9)
    out = np.zeros(64, np.float32)
    launch(xor16_2d_kernel, 1, (8, 8), x, out)  # rows of 8: lane ^ 16 is two rows away
    np.testing.assert_array_equal(out, x[np.arange(64) ^ 16])


# ---- errors --------------------------------------------------------------------------------------
@cuda.jit
def any_shfl_kernel(x, out):
    i = cuda.grid(1)
    out[i] = cuda.shfl_down_sync(FULL, x[i], 1)


def test_block_size_not_a_multiple_of_32_works_and_missing_lanes_count_as_exited():
    """48 threads: the last warp has lanes 0-15 only. A full mask waits for the lanes that exist (as on the
    hardware: numba's own GPU tests shuffle and match in blocks of 10 threads); reading a missing lane
    is undefined, so lane 15 of the last warp gets the poison."""
    x = np.arange(48, dtype=np.float32)
    out = np.zeros(48, np.float32)
    launch(any_shfl_kernel, 1, 48, x, out)
    np.testing.assert_array_equal(out[:31], x[1:32])
    assert out[31] == x[31]                          # lane 31 + 1 is out of range: keeps its own value
    np.testing.assert_array_equal(out[32:47], x[33:48])
    assert np.isnan(out[47])                         # lane 16 of the last warp does not exist


@cuda.jit
def deadlock_kernel(x, out):
    i = cuda.grid(1)
    if cuda.threadIdx.x % 32 < 16:
        out[i] = cuda.shfl_sync(FULL, x[i], 0)
    else:
        cuda.syncthreads()


def test_deadlock_is_reported_with_the_waits():
    x = np.arange(64, dtype=np.float64)
    err, elapsed = launch_error(deadlock_kernel, 1, 64, x, np.zeros(64), timeout=15)
    assert isinstance(err, simulator.DeadlockError), repr(err)
    msg = str(err)
    assert "deadlock" in msg
    assert "syncthreads()" in msg and "shfl_sync" in msg
    assert "0-15" in msg and "16-31" in msg  # the lanes waiting in each place are named
    assert elapsed < 5


@cuda.jit
def deadlock_syncwarp_kernel(out):
    lane = cuda.threadIdx.x % 32
    if lane == 0:
        cuda.syncwarp()  # the other lanes never arrive: they wait in a different barrier forever
    else:
        cuda.syncthreads()
    out[cuda.threadIdx.x] = 1


def test_deadlock_syncwarp_vs_syncthreads():
    err, elapsed = launch_error(deadlock_syncwarp_kernel, 1, 32, np.zeros(32), timeout=15)
    assert isinstance(err, simulator.DeadlockError), repr(err)
    assert "syncwarp" in str(err) and "syncthreads()" in str(err)
    assert elapsed < 5


@cuda.jit
def mismatched_mask_kernel(x, out):
    i = cuda.grid(1)
    if cuda.threadIdx.x % 32 < 16:
        out[i] = cuda.shfl_sync(FULL, x[i], 0)
    else:
        out[i] = cuda.shfl_sync(0xFFFF0000, x[i], 16)


@cuda.jit
def mismatched_op_kernel(x, out):
    i = cuda.grid(1)
    if cuda.threadIdx.x % 32 < 16:
        out[i] = cuda.shfl_down_sync(FULL, x[i], 1)
    else:
        out[i] = cuda.ballot_sync(FULL, x[i] > 3)


@cuda.jit
def mask_without_self_kernel(x, out):
    i = cuda.grid(1)
    out[i] = cuda.shfl_sync(0x0000FFFF, x[i], 0)  # lanes 16-31 are not in their own mask


def test_a_lane_at_a_later_collective_with_another_mask_waits():
    """Lanes 16-31 finish their own shuffle (mask 0xFFFF0000) and exit; the full-mask shuffle of lanes 0-15
    then waits only for the lanes that have not exited (PTX: "all non-exited threads")."""
    x = np.arange(64, dtype=np.float64)
    out = np.zeros(64)
    launch(mismatched_mask_kernel, 1, 64, x, out)
    lane = np.arange(64) % 32
    np.testing.assert_array_equal(out, np.where(lane < 16, x - lane, x - lane + 16))


@cuda.jit
def overlapping_masks_deadlock_kernel(x, out):
    i = cuda.grid(1)
    if cuda.threadIdx.x % 32 < 16:
        out[i] = cuda.shfl_sync(FULL, x[i], 0)
    else:
        out[i] = cuda.shfl_sync(0xFFFF0000, x[i], 16)
        cuda.syncthreads()  # lanes 16-31 never reach the full-mask shuffle and never exit


def test_overlapping_masks_that_never_meet_are_a_deadlock_naming_both():
    x = np.arange(64, dtype=np.float64)
    err, elapsed = launch_error(overlapping_masks_deadlock_kernel, 1, 64, x, np.zeros(64), timeout=15)
    assert isinstance(err, simulator.DeadlockError), repr(err)
    assert "shfl_sync(mask=0xffffffff)" in str(err) and "syncthreads()" in str(err), str(err)
    assert elapsed < 5


@pytest.mark.parametrize("kernel,words", [
    (mismatched_op_kernel, ["shfl_down_sync", "ballot_sync"]),
    (mask_without_self_kernel, ["does not include"]),
])
def test_inconsistent_rendezvous_raises(kernel, words):
    x = np.arange(64, dtype=np.float64)
    err, elapsed = launch_error(kernel, 1, 64, x, np.zeros(64), timeout=15)
    assert isinstance(err, simulator.SimulatorError), repr(err)
    for w in words:
        assert w in str(err), str(err)
    assert "tid=[" in str(err)
    assert elapsed < 5


@cuda.jit
def negative_read_kernel(x, out):
    i = cuda.grid(1)
    out[i] = x[i - 1]  # thread 0 reads x[-1]


@cuda.jit
def negative_write_kernel(x, out):
    i = cuda.grid(1)
    out[i - 1, 0] = x[i]  # 2-D, negative first index for thread 0


def test_negative_global_index_raises_index_error():
    x = np.arange(32, dtype=np.float32)
    err, _ = launch_error(negative_read_kernel, 1, 32, x, np.zeros(32, np.float32), timeout=15)
    assert isinstance(err, IndexError) and "negative index" in str(err)
    assert "wrap it like numpy" in str(err) and "on purpose" in str(err)  # says what a GPU would do
    err, _ = launch_error(negative_write_kernel, 1, 32, x, np.zeros((32, 2), np.float32), timeout=15)
    assert isinstance(err, IndexError) and "negative index" in str(err)
    # positive indices still work (and the guard does not break slicing-free 2-D access)
    out = np.zeros(32, np.float32)

    @cuda.jit
    def ok(x, out):
        i = cuda.grid(1)
        out[i] = x[31 - i]

    launch(ok, 1, 32, x, out)
    np.testing.assert_array_equal(out, x[::-1])


@cuda.jit
def failing_thread_kernel(x, out, where):
    i = cuda.grid(1)
    if i == 37:
        out[i + 1000] = 1.0  # out of bounds: IndexError in thread 37 (block 1, tid 5)
    if where == 0:
        cuda.syncthreads()
        out[i] = x[i]
    else:
        out[i] = cuda.shfl_down_sync(FULL, x[i], 1)


@pytest.mark.parametrize("where", [0, 1])  # the others wait in syncthreads / in a shuffle
def test_exception_in_one_thread_propagates(where):
    x = np.arange(64, dtype=np.float64)
    err, elapsed = launch_error(failing_thread_kernel, 2, 32, x, np.zeros(64), where, timeout=15)
    assert isinstance(err, IndexError), repr(err)
    assert "tid=[5, 0, 0]" in str(err) and "ctaid=[1, 0, 0]" in str(err), str(err)
    assert elapsed < 5
    # the simulator is usable again afterwards
    out = np.zeros(64)
    launch(failing_thread_kernel, 1, 32, x, out, where)
    np.testing.assert_array_equal(out[:32], x[:32] if where == 0 else np.r_[x[1:32], x[31]])


# ---- syncthreads still works --------------------------------------------------------------------
@cuda.jit
def shared_reduce_kernel(x, out):
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    buf = cuda.shared.array(128, dtype=np.float64)
    buf[tid] = x[i]
    cuda.syncthreads()
    s = cuda.blockDim.x // 2
    while s > 0:
        if tid < s:
            buf[tid] += buf[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid == 0:
        out[cuda.blockIdx.x] = buf[0]


@pytest.mark.parametrize("block", [64, 128])
def test_syncthreads_shared_memory_tree_reduction(block):
    grid = 2
    x = np.random.default_rng(10).integers(-100, 100, grid * block).astype(np.float64)
    out = np.zeros(grid)
    launch(shared_reduce_kernel, grid, block, x, out)
    np.testing.assert_array_equal(out, x.reshape(grid, block).sum(axis=1))


def test_syncthreads_without_warp_intrinsics_allows_any_block_size():
    """48 threads: fine as long as no warp intrinsic is called."""

    @cuda.jit
    def k(x, out):
        tid = cuda.threadIdx.x
        buf = cuda.shared.array(48, dtype=np.float64)
        buf[tid] = x[tid]
        cuda.syncthreads()
        out[tid] = buf[47 - tid]

    x = np.arange(48, dtype=np.float64)
    out = np.zeros(48)
    launch(k, 1, 48, x, out)
    np.testing.assert_array_equal(out, x[::-1])


@cuda.jit
def syncthreads_vote_kernel(pred, out):
    i = cuda.grid(1)
    p = pred[i]
    out[0, i] = cuda.syncthreads_count(p)
    out[1, i] = cuda.syncthreads_and(p)
    out[2, i] = cuda.syncthreads_or(p)


def test_syncthreads_count_and_or():
    grid, block = 3, 64
    n = grid * block
    pred = np.random.default_rng(11).integers(0, 2, n).astype(np.int32)
    pred[64:128] = 1   # block 1: all true
    pred[128:192] = 0  # block 2: all false
    out = np.zeros((3, n), np.int64)
    launch(syncthreads_vote_kernel, grid, block, pred, out)
    p = pred.reshape(grid, block).astype(bool)
    np.testing.assert_array_equal(out[0], np.repeat(p.sum(axis=1), block))
    np.testing.assert_array_equal(out[1], np.repeat(p.all(axis=1).astype(int), block))
    np.testing.assert_array_equal(out[2], np.repeat(p.any(axis=1).astype(int), block))
    assert 0 < out[0, 0] < 64  # block 0 is mixed


# ---- importing an intrinsic by name --------------------------------------------------------------
def test_from_numba_cuda_import_shfl_down_sync():
    @simulator_only  # an import inside a kernel: numba cannot compile that for a GPU
    @cuda.jit
    def k(x, out):
        from numba.cuda import shfl_down_sync

        i = cuda.grid(1)
        out[0, i] = shfl_down_sync(0xFFFFFFFF, x[i], 2)
        out[1, i] = imported_shfl_down_sync(0xFFFFFFFF, x[i], 30)

    x = distinct_values(64, np.int32, seed=12)
    out = np.zeros((2, 64), np.int32)
    launch(k, 1, 64, x, out)
    np.testing.assert_array_equal(out[0], expected_shuffle("down", x, np.full(64, 2), 64))
    np.testing.assert_array_equal(out[1], expected_shuffle("down", x, np.full(64, 30), 64))


def test_poison_from_python_int_values_fits_int32_arrays():
    """A shuffled Python int (e.g. an index) read from an exited lane must still store into int32."""

    @cuda.jit
    def k(out, n):
        i = cuda.grid(1)
        if i >= n:
            return
        out[i] = cuda.shfl_down_sync(FULL, i * 2, 4)

    out = np.zeros(32, np.int32)
    launch(k, 1, 32, out, 20)
    np.testing.assert_array_equal(out[:16], np.arange(4, 20) * 2)
    assert (out[16:20] == POISON_I32).all()


# --------------------------------------------------------------------------------------------------
# public API for the debugger and other tools
# --------------------------------------------------------------------------------------------------
def test_current_thread_is_none_outside_a_kernel():
    assert simulator.current_thread() is None


@simulator_only  # it calls lib.runtime.simulator's Python API
@cuda.jit
def _api_probe(out, seqs):
    t = simulator.current_thread()
    m = t.manager
    i = t.thread_id
    before = m.barrier_generation
    cuda.syncthreads()
    out[t.blockIdx.x, i, 0] = t.threadIdx.x
    out[t.blockIdx.x, i, 1] = m.barrier_generation - before
    out[t.blockIdx.x, i, 2] = m.grid_point[0]
    s0 = m.warp_seq(i // 32)
    cuda.syncwarp(FULL)
    seqs[t.blockIdx.x, i, 0] = m.warp_seq(i // 32) - s0
    seqs[t.blockIdx.x, i, 1] = 1 if m.ordered_by_warp(i // 32, s0, 0, 31) else 0
    seqs[t.blockIdx.x, i, 2] = 1 if m.ordered_by_warp(i // 32, m.warp_seq(i // 32), 0, 31) else 0


def test_current_thread_and_manager_state():
    out = np.zeros((2, 64, 3), np.int64)
    seqs = np.zeros((2, 64, 3), np.int64)
    launch(_api_probe, 2, 64, out, seqs)
    assert (out[:, :, 0] == np.arange(64)).all()
    assert (out[:, :, 1] == 1).all()                      # one barrier completed between the reads
    assert (out[:, :, 2] == np.arange(2)[:, None]).all()  # grid_point is the block's index
    assert (seqs[:, :, 0] == 1).all() and (seqs[:, :, 1] == 1).all() and (seqs[:, :, 2] == 0).all()


def _sum_of_lanes(ops):
    total = sum(v for (v,) in ops.values())
    return {lane: (total, sorted(ops)) for lane in ops}


@simulator_only
@cuda.jit
def _generic_collective(out, lanes_seen):
    i = cuda.threadIdx.x
    if i >= 40:
        return  # lanes 8-31 of warp 1 exited: they are not waited for
    total, lanes = simulator.warp_collective("sum", FULL, (i,), _sum_of_lanes)
    out[i] = total
    lanes_seen[i] = len(lanes)


def test_warp_collective_runs_compute_once_over_the_arrived_lanes():
    out = np.zeros(64, np.int64)
    seen = np.zeros(64, np.int64)
    launch(_generic_collective, 1, 64, out, seen)
    assert (out[:32] == sum(range(32))).all() and (seen[:32] == 32).all()
    assert (out[32:40] == sum(range(32, 40))).all() and (seen[32:40] == 8).all()


def test_block_listener_sees_every_block_start_and_end():
    events = []
    simulator.add_block_listener(lambda m: events.append(("start", m.grid_point)),
                                 lambda m: events.append(("end", m.grid_point)))
    try:
        launch(_api_probe, 2, 64, np.zeros((2, 64, 3), np.int64), np.zeros((2, 64, 3), np.int64))
    finally:
        simulator._block_listeners.pop()
    assert [kind for kind, _ in events] == ["start", "end", "start", "end"]
    assert events[0][1] == events[1][1] and events[2][1] == events[3][1]  # one block after another
    assert {events[0][1], events[2][1]} == {(0, 0, 0), (1, 0, 0)}


# --------------------------------------------------------------------------------------------------
# the cooperative scheduler: async stop, deterministic order, the launching thread restored
# --------------------------------------------------------------------------------------------------
class _Stop(Exception):
    pass


@cuda.jit
def spin_kernel(flag):
    if cuda.threadIdx.x == 3:
        while flag[0] == 0:  # never ends: only an exception from outside stops it
            pass
    cuda.syncthreads()


def _runs_in(th, function_name):
    frame = sys._current_frames().get(th.ident)
    while frame is not None:
        if frame.f_code.co_name == function_name:
            return True
        frame = frame.f_back
    return False


def test_an_async_exception_stops_a_kernel_stuck_in_a_loop():
    """The grader's time limit raises an exception in the launching thread (PyThreadState_SetAsyncExc)."""
    import ctypes

    box = {}

    def target():
        try:
            spin_kernel[1, 64](np.zeros(1, np.int32))
        except BaseException as e:  # noqa: BLE001
            box["error"] = e
        box["after"] = threading.current_thread()

    th = threading.Thread(target=target, daemon=True)
    th.start()
    deadline = time.monotonic() + 20
    while not _runs_in(th, "spin_kernel") and time.monotonic() < deadline:
        time.sleep(0.05)  # until the kernel itself spins (the launch's checks come first)
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(th.ident), ctypes.py_object(_Stop))
    th.join(10)
    assert not th.is_alive(), "the kernel did not stop"
    assert isinstance(box["error"], _Stop) and "tid=[3, 0, 0]" in str(box["error"]), repr(box["error"])
    assert box["after"] is th  # threading.current_thread() is the real thread again
    assert simulator.current_thread() is None


def test_schedule_is_drawn_from_the_seed_and_replays():
    """Threads start in an order drawn from the schedule's seed (not thread-id order, which a GPU does not
    promise), go on after a barrier in the same order, and the same seed replays it."""
    def run(seed):
        order = []

        @simulator_only
        @cuda.jit
        def k():
            order.append((0, simulator.current_thread().thread_id))
            cuda.syncthreads()
            order.append((1, simulator.current_thread().thread_id))

        with simulator.schedule_seed(seed):
            launch(k, 1, (4, 2, 2))
        return order

    first = run(7)
    ids = [t for phase, t in first if phase == 0]
    assert sorted(ids) == list(range(16)) and ids != list(range(16))
    assert first == [(phase, t) for phase in range(2) for t in ids]  # the barrier keeps the order
    assert run(7) == first
    assert run(8) != first


@cuda.jit
def atomics_kernel(count, biggest, x):
    i = cuda.grid(1)
    cuda.atomic.add(count, 0, 1)
    cuda.atomic.max(biggest, 0, x[i])
    cuda.atomic.add(count, 1 + i % 3, x[i])


def test_atomics_across_threads_and_blocks():
    x = np.random.default_rng(13).integers(-50, 50, 4 * 96).astype(np.int64)
    count = np.zeros(4, np.int64)
    biggest = np.full(1, -1000, np.int64)
    launch(atomics_kernel, 4, 96, count, biggest, x)
    assert count[0] == x.size and biggest[0] == x.max()
    np.testing.assert_array_equal(count[1:], [x[k::3].sum() for k in range(3)])


@cuda.jit
def print_kernel():
    if cuda.threadIdx.x < 3:
        print("thread", cuda.threadIdx.x, "of block", cuda.blockIdx.x)


def test_print_from_kernels_comes_in_the_schedules_order(capsys):
    with simulator.schedule_seed(3):
        launch(print_kernel, 2, 32)
        order = simulator.last_launch()
    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines) == sorted(f"thread {t} of block {b}" for b in range(2) for t in range(3))
    blocks = [int(line.split()[-1]) for line in lines]
    assert blocks == sorted(blocks, key=[b[0] for b in order.blocks].index)  # block by block, in run order
    with simulator.schedule_seed(3):
        launch(print_kernel, 2, 32)
    assert capsys.readouterr().out.splitlines() == lines


@cuda.jit
def grid_sync_kernel(x, tmp, out):
    i = cuda.grid(1)
    g = cuda.cg.this_grid()
    tmp[i] = x[i]
    g.sync()
    out[i] = tmp[i] + tmp[(i + 1) % tmp.size]


def test_cooperative_grid_sync_in_one_block():
    x = np.arange(64, dtype=np.float64)
    out = np.zeros(64)
    launch(grid_sync_kernel, 1, 64, x, np.zeros(64), out)
    np.testing.assert_array_equal(out, x + np.roll(x, -1))


def test_debug_kernels_raise_on_division_by_zero_and_leave_the_caller_s_settings():
    @cuda.jit(debug=True, opt=False)
    def k(x, out):
        i = cuda.grid(1)
        out[i] = (x[i] + 1) / x[0]  # x[0] is 0: a numpy float division by zero

    before = np.geterr()
    err, _ = launch_error(k, 1, 32, np.zeros(32, np.float32), np.zeros(32, np.float32))
    assert isinstance(err, FloatingPointError) and re.match(r"tid=\[\d+, 0, 0\] ctaid=\[0, 0, 0\]", str(err)), \
        repr(err)
    assert np.geterr() == before


def test_simbench_finds_its_kernels_and_the_attention_solution_in_its_chapter():
    """tools.simbench (the simulator's benchmark) reads the exercise solution from chapters/attention.md:
    this fails when the chapter's layout changes, not only when someone runs the benchmark."""
    from tools import simbench

    cases = simbench.cases()
    assert [case[0] for case in cases] == ["grid_stride_add", "grid_stride_add_64_blocks", "barriers", "warp_shuffle",
                                           "transpose_tiled", "attention", "graded_vector_add"]
    assert [case[0] for case in cases[:3]] == list(simbench.PLAIN_CASES)  # what --plain times on numba's own
    attention = simbench._attention_solution()
    assert callable(attention) and attention.__module__ == "attention_solution"


def test_an_empty_launch_is_an_error_as_on_a_gpu():
    """A block count rounded down for a small n gives a grid of 0 blocks: cuda.core refuses it on a GPU."""
    @cuda.jit
    def write_one(out):
        out[0] = 1.0

    out = np.zeros(1, dtype=np.float32)
    with pytest.raises(ValueError, match=r"grid values must be >= 1 \(got \(0, 1, 1\)\)"):
        write_one[0, 32](out)
    write_one[1, 32](out)
    assert out[0] == 1.0
