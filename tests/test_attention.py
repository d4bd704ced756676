"""The attention chapter: both paths checked on the simulator against float64 at ragged sizes (several query
blocks and key tiles, partial last tiles, two heads, m ≠ n, a single key), the causal variant, head dims 64
and 128, path 1 with the softmax the GPU uses, the spike-late inputs, a check that catches a missing
rescale, the byte counts and the launchers' errors."""
import numpy as np
import pytest
from numba import cuda

import kernels.attention as A
from kernels.softmax import softmax_on_chip
from lib.grading.check import compare


def run(launch, q, k, v):
    out = cuda.to_device(np.full(q.shape, np.nan, dtype=np.float32))
    launch(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), out)
    return out.copy_to_host()


def assert_attention(got, q, k, v, causal=False):
    expected, scale = A.attention64(q, k, v, causal)
    bad = compare(got, expected, A.attention_rtol(k.shape[1], q.shape[2]), 0.0, scale)
    assert bad is None, bad.describe()


def inputs(heads, n, d, seed=0, m=None):
    q, k, v = A.attention_inputs((heads, n, d), np.random.default_rng(seed))
    if m is not None:
        q = np.ascontiguousarray(q[:, :m])
    return q, k, v


def test_flash_d64_two_heads_ragged():
    q, k, v = inputs(2, 70, 64)       # 2 query blocks of 64, 3 key tiles of 32 (the last holds 6 keys)
    assert_attention(run(A.flash_attention, q, k, v), q, k, v)


def test_flash_d128_ragged():
    q, k, v = inputs(2, 37, 128, seed=1)   # 2 query blocks of 32, 3 key tiles of 16
    assert_attention(run(A.flash_attention, q, k, v), q, k, v)


@pytest.mark.parametrize("launch, n, seed", [(A.flash_attention_causal, 70, 2),
                                            (A.flash_attention_wide_causal, 130, 7),
                                            (A.flash_attention_balanced_causal, 130, 9)])
def test_flash_causal(launch, n, seed):
    q, k, v = inputs(1, n, 64, seed=seed)
    got = run(launch, q, k, v)
    assert_attention(got, q, k, v, causal=True)
    assert np.allclose(got[0, 0], v[0, 0]), "query 0 sees only key 0"
    full = A.attention_reference(q, k, v)
    assert not np.allclose(got, full, atol=1e-3), "the causal output must differ from the unmasked one"


def test_flash_fewer_queries_than_keys():
    q, k, v = inputs(1, 40, 64, seed=3, m=5)
    assert_attention(run(A.flash_attention, q, k, v), q, k, v)


def test_wide_kernel_ragged_multi_block_and_m_not_n():
    q, k, v = inputs(1, 150, 64, seed=5)   # 2 query blocks of 128, 3 key tiles of 64 (the last holds 22)
    assert_attention(run(A.flash_attention_wide, q, k, v), q, k, v)
    q, k, v = inputs(1, 40, 64, seed=6, m=3)
    assert_attention(run(A.flash_attention_wide, q, k, v), q, k, v)



def test_regs_kernel_ragged_both_head_dims_and_m_not_n():
    q, k, v = inputs(1, 70, 64, seed=10)    # one query block of 128 (70 rows used), key tiles of 64 and 6
    assert_attention(run(A.flash_attention_regs, q, k, v), q, k, v)
    q, k, v = inputs(1, 70, 128, seed=11)   # d = 128: a block of 128 queries, key tiles of 64 and 6
    assert_attention(run(A.flash_attention_regs, q, k, v), q, k, v)
    q, k, v = inputs(1, 9, 64, seed=12, m=3)
    assert_attention(run(A.flash_attention_regs, q, k, v), q, k, v)


@pytest.mark.parametrize("d, blocks", [(64, 2), (128, 1)])
def test_regs_configurations(d, blocks):
    """The blocks of the register-blocked kernel that an H200 SM's 228 KB of shared memory holds (the chapter's
    resource table says 2 at d = 64, 1 of 256 threads at d = 128), and the tables' launch figures."""
    assert sorted(A.REGS_CONFIGS) == [64, 128]
    shape = A.regs_shape(d, **A.REGS_CONFIGS[d])
    assert blocks * (shape["smem_bytes"] + 1024) <= 228 * 1024 < (blocks + 1) * (shape["smem_bytes"] + 1024)
    assert shape["GROUPS"] * shape["TM"] == shape["BR"] and shape["DIMS"] * shape["LANES"] == d
    assert A.dynamic_shared_bytes(f"flash_attention_regs d={d}") == shape["smem_bytes"]
    assert A.regs_threads(d) == shape["THREADS"] == shape["GROUPS"] * shape["LANES"]


def test_regs_tiles_name_every_option():
    """The d = 128 tile table (record_regs_tiles) holds the configured tile once, and every entry sets each
    option REGS_CONFIGS[128] sets, so none of them inherits the configured tile's values by accident."""
    assert sum(tile == A.REGS_CONFIGS[128] for tile in A.REGS_TILES_128) == 1
    for tile in A.REGS_TILES_128:
        assert set(A.REGS_CONFIGS[128]) <= set(tile)
        A.regs_shape(128, **tile)


@pytest.mark.parametrize("size, causal, m, options", [
    ((1, 70, 64), True, None, dict(TM=8, TN=4, LANES=16, THREADS=256, P_OVER_K=True, QK_UNROLL=2, PV_UNROLL=1)),
    ((1, 37, 128), False, 9, dict(TM=4, TN=8, LANES=8, THREADS=128, P_OVER_K=True, QK_UNROLL=4)),
])
def test_regs_kernel_options(size, causal, m, options):
    """The optional tile shapes: 16 lanes a row group (a fourth shuffle round), 256 threads, p_t written over
    k_t (one barrier more), other unrolls; one query block, a partial key tile, the mask or m < n."""
    q, k, v = inputs(*size, seed=13, m=m)
    got = run(lambda *a: A.flash_attention_regs(*a, causal=causal, **options), q, k, v)
    assert_attention(got, q, k, v, causal=causal)


def test_regs_shape_options():
    plain, shared = A.regs_shape(128, 4, 8), A.regs_shape(128, 4, 8, P_OVER_K=True)
    assert shared["P_T"] == shared["K_T"] and shared["V_S"] - shared["K_T"] >= shared["BC"] * shared["RW"]
    assert shared["smem_bytes"] == plain["smem_bytes"] - 4 * plain["BC"] * plain["RW"]
    wide = A.regs_shape(128, 8, 4, LANES=16, THREADS=256)
    assert (wide["BR"], wide["BC"], wide["DIMS"], wide["GROUPS"]) == (128, 64, 8, 16)
    with pytest.raises(ValueError, match="LANES must be 8 or 16"):
        A.regs_shape(128, 4, 4, LANES=4)
    with pytest.raises(ValueError, match="head dimension 96"):
        A.make_flash_regs_kernel(96, False)


def test_path1_steps_add_up_to_the_napkin_counts():
    heads, n, d = 2, 24, 64
    q, k, v = (cuda.to_device(x) for x in inputs(heads, n, d))
    steps = A.path1_steps(q, k, v, cuda.device_array((heads, n, d), np.float32))
    assert [s[0] for s in steps] == ["scores q @ k.T", "row softmax", "p @ v"]
    assert sum(s[2] for s in steps) == A.score_bytes(heads, n, n) + A.qkvo_bytes(heads, n, d)
    assert sum(s[3] for s in steps) == A.attention_flops(heads, n, d)


def test_wide_kernel_refuses_other_head_dims():
    q, k, v = inputs(1, 8, 128)
    with pytest.raises(ValueError, match="64"):
        run(A.flash_attention_wide, q, k, v)


def test_single_key_returns_its_value():
    q, k, v = inputs(1, 1, 64, seed=4)
    got = run(A.flash_attention, q, k, v)
    assert np.allclose(got, v, rtol=1e-6)


def test_materialised_ragged():
    q, k, v = inputs(1, 37, 64, seed=5)
    assert_attention(run(A.attention_materialised, q, k, v), q, k, v)


def test_materialised_with_the_softmax_the_gpu_uses(monkeypatch):
    """On the simulator path 1 runs the warp-per-row softmax; on a GPU the on-chip one: check that too."""
    monkeypatch.setattr(A, "PATH1_SOFTMAX", softmax_on_chip)
    q, k, v = inputs(1, 3, 8, seed=6)
    assert_attention(run(A.attention_materialised, q, k, v), q, k, v)


def test_spike_late_key_holds_the_row_maximum():
    q, k, v = inputs(2, 1024, 64, seed=7)
    s = np.einsum("znd,zmd->znm", q.astype(np.float64), k.astype(np.float64))
    assert (s.argmax(axis=2) == 1023).mean() > 0.99


def emulate_tiles(q, k, v, tile, rescale=True):
    """The online algorithm in float64, tile by tile, optionally forgetting to rescale old terms."""
    qs = q.astype(np.float64) / np.sqrt(q.shape[1])
    m = np.full(q.shape[0], -np.inf)
    l, o = np.zeros(q.shape[0]), np.zeros(q.shape)
    for j0 in range(0, k.shape[0], tile):
        s = qs @ k[j0:j0 + tile].T.astype(np.float64)
        new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - new) if rescale else np.where(np.isneginf(m), 0.0, 1.0)
        p = np.exp(s - new[:, None])
        l = l * alpha + p.sum(axis=1)
        o = o * alpha[:, None] + p @ v[j0:j0 + tile]
        m = new
    return o / l[:, None]


def test_the_check_catches_a_missing_rescale():
    q, k, v = (x[0] for x in inputs(1, 70, 64, seed=8))
    expected, scale = A.attention64(q[None], k[None], v[None])
    rtol = A.attention_rtol(70, 64)
    assert compare(emulate_tiles(q, k, v, 32)[None], expected, rtol, 0.0, scale) is None
    assert compare(emulate_tiles(q, k, v, 32, rescale=False)[None], expected, rtol, 0.0, scale) is not None


def test_byte_counts():
    heads, n, d = 16, 4096, 64
    assert A.score_bytes(heads, n, n) == 16 * heads * n * n
    assert A.qkvo_bytes(heads, n, d) == 16 * heads * n * d
    full = A.flash_kv_bytes(heads, n, d)
    assert full == 8 * heads * (n // 64) * n * d
    causal = A.flash_kv_bytes(heads, n, d, causal=True)
    assert 0.5 * full < causal < 0.55 * full
    assert A.attention_flops(heads, n, d, causal=True) * 2 == A.attention_flops(heads, n, d)


@pytest.mark.parametrize("d", A.HEAD_DIMS)
def test_configurations_fit_in_static_shared_memory(d):
    shape = A.flash_shape(d)
    assert shape["smem_bytes"] <= A.STATIC_SMEM_LIMIT
    assert shape["GROUPS"] * shape["ROWS"] == shape["BR"]


def test_launcher_errors():
    q, k, v = (cuda.to_device(x) for x in inputs(1, 8, 64))
    out = cuda.device_array((1, 8, 64), np.float32)
    with pytest.raises(TypeError, match="float32"):
        A.flash_attention(cuda.to_device(np.zeros((1, 8, 64))), k, v, out)
    with pytest.raises(ValueError, match="head dimension 32"):
        x = cuda.to_device(np.zeros((1, 8, 32), np.float32))
        A.flash_attention(x, x, x, x)
    with pytest.raises(ValueError, match="k must have shape"):
        A.attention_materialised(q, cuda.to_device(np.zeros((2, 8, 64), np.float32)), v, out)
    with pytest.raises(ValueError, match="`out` must have shape"):
        A.flash_attention(q, k, v, cuda.device_array((1, 8, 63), np.float32))
    short_q = cuda.to_device(np.zeros((1, 4, 64), np.float32))
    with pytest.raises(ValueError, match="causal"):
        A.flash_attention_causal(short_q, k, v, cuda.device_array((1, 4, 64), np.float32))
    with pytest.raises(ValueError, match="zero keys"):
        empty = cuda.to_device(np.zeros((1, 0, 64), np.float32))
        A.flash_attention(q, empty, empty, out)
