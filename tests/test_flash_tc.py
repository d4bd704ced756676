"""FlashAttention on the tensor cores, on the simulator: FP16 and BF16, d = 64 and 128, causal, several key
tiles (the spike-late key in the last one forces a rescale), matched against float64 within the tolerance
derived from the input precision; a kernel with a wrong P fragment and an unmasked kernel fail that check;
the pack instruction's twin rounds as cvt.rn does; the launcher refuses what it cannot do."""
import numpy as np
import pytest
from numba import cuda

import kernels.flash_tc as F
from lib.runtime import mma
from lib.grading.check import compare


def inputs(kind, heads, n, d, seed=0, m=None):
    q, k, v = F.make_inputs(kind)((heads, n, d), np.random.default_rng(seed))
    if m is not None:
        q = np.ascontiguousarray(q[:, :m])
    return q, k, v


def run(kind, q, k, v, causal=False):
    out = cuda.to_device(np.full(q.shape, np.nan, dtype=np.float32))
    F.flash_tc(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), out, kind, causal)
    return out.copy_to_host()


def mismatch(kind, got, q, k, v, causal=False):
    expected = F.reference(kind, causal)(q, k, v)
    tol = F.tolerance(kind, causal)(q, k, v, expected)
    return compare(got, expected, tol.rtol, tol.atol, tol.scale)


@pytest.mark.parametrize("kind, heads, n, d, m, causal", [
    ("fp16", 1, 128, 64, 64, False),     # one query block, two key tiles of 64: the rescale and both stages
    ("bf16", 2, 64, 64, None, False),    # two heads
    ("fp16", 1, 64, 128, None, False),   # d = 128: two key tiles of 32
    ("fp16", 1, 128, 64, None, True),    # causal: block 0 skips tile 1, block 1 masks its diagonal tile
    ("bf16", 1, 64, 128, None, True),    # causal, d = 128: the second tile is wholly masked for warps 0, 1
])
def test_matches_float64(kind, heads, n, d, m, causal):
    q, k, v = inputs(kind, heads, n, d, seed=n + d, m=m)
    got = run(kind, q, k, v, causal)
    bad = mismatch(kind, got, q, k, v, causal)
    assert bad is None, bad.describe()
    if causal:   # query 0 sees key 0 only
        np.testing.assert_allclose(got[0, 0], F.values(v[0, 0], kind), rtol=1e-6)


def test_unmasked_kernel_fails_the_causal_check():
    q, k, v = inputs("fp16", 1, 64, 64, seed=3)
    assert mismatch("fp16", run("fp16", q, k, v), q, k, v, causal=True) is not None


def test_wrong_probability_fragment_fails(monkeypatch):
    """P's halves swapped in each register (keys 2t and 2t + 1 exchanged): a plausible layout slip. The mutant
    is a device function around the real pack (the PTX intrinsic on a GPU, its twin on the simulator)."""
    twin = F.pack_f16x2

    @cuda.jit(device=True)
    def swapped(lo, hi):
        return twin(hi, lo)

    monkeypatch.setattr(F, "pack_f16x2", swapped)
    monkeypatch.setattr(F, "_KERNELS", {})
    q, k, v = inputs("fp16", 1, 64, 64, seed=4)
    bad = mismatch("fp16", run("fp16", q, k, v), q, k, v)
    assert bad is not None and bad.n_wrong > q.size // 4, "swapped probabilities must be caught"


@cuda.jit
def _pack_both(lo, hi, out):
    if cuda.grid(1) == 0:
        out[0] = F.pack_f16x2(lo[0], hi[0])
        out[1] = F.pack_bf16x2(lo[1], hi[1])


def test_pack_rounds_to_nearest_even():
    """In a kernel, so the same test checks the PTX cvt.rn on a GPU and the twin on the simulator."""
    lo = np.array([1.0, 1.0 + 2.0 ** -8], np.float32)     # bf16: halfway between two values: ties to even (1.0)
    hi = np.array([-2.0, 1.0 + 3 * 2.0 ** -9], np.float32)  # bf16: rounds up to 1 + 2^-7
    out = cuda.to_device(np.zeros(2, np.uint32))
    _pack_both[1, 32](cuda.to_device(lo), cuda.to_device(hi), out)
    f16, bf16 = (int(x) for x in out.copy_to_host())
    assert f16 & 0xFFFF == np.float16(1.0).view(np.uint16) and f16 >> 16 == np.float16(-2.0).view(np.uint16)
    assert mma.bf16_values(np.uint16(bf16 & 0xFFFF)) == 1.0
    assert mma.bf16_values(np.uint16(bf16 >> 16)) == 1.0 + 2.0 ** -7


def test_tolerance_follows_the_probability_format():
    assert F.flash_tc_rtol("bf16", 4096, 64) > 4 * F.flash_tc_rtol("fp16", 4096, 64)
    assert F.flash_tc_rtol("fp16", 4096, 64) < 2.0 ** -9


def test_launcher_errors():
    q, k, v = inputs("fp16", 1, 64, 64)
    out = cuda.device_array(q.shape, np.float32)
    with pytest.raises(ValueError, match="m % 64"):
        F.flash_tc(q[:, :48].copy(), k, v, out[:, :48], "fp16")
    with pytest.raises(ValueError, match="kind"):
        F.flash_tc(q, k, v, out, "fp8")
    with pytest.raises((TypeError, ValueError), match="int16"):
        F.flash_tc(q.astype(np.float32), k, v, out, "fp16")
    with pytest.raises(ValueError, match="not built"):
        F.flash_tc(*inputs("fp16", 1, 64, 32), cuda.device_array((1, 64, 32), np.float32), "fp16")
    with pytest.raises(ValueError, match="causal"):
        q2, k2, v2 = inputs("fp16", 1, 128, 64, m=64)
        F.flash_tc(q2, k2, v2, cuda.device_array(q2.shape, np.float32), "fp16", causal=True)


def test_byte_counts():
    assert F.qkvo_bytes(16, 4096, 64) == 16 * 4096 * 64 * 10
    # every one of the 64 query blocks reads all 64 key tiles (k and v, 2 bytes each); causal about half
    assert F.kv_bytes(16, 4096, 64) == 16 * 64 * 4096 * 64 * 4
    assert F.kv_bytes(16, 4096, 64, causal=True) == 16 * (64 * 65 // 2) * 64 * 64 * 4
