"""lib.runtime.mma on whatever this process runs on: the simulator here, the GPU on the H200. The kernels read
their fragments with the index tables of lib.runtime.mma.LAYOUTS, so on a GPU a wrong table gives a wrong product:
passing there is the check that the simulator twin and the hardware agree."""
import numpy as np
import pytest
from numba import cuda

import lib
from lib.runtime import mma

WARP = 32


def _index_table(shape, operand):
    """(32, elements per lane, 2) int32: (row, col) of each element each lane holds."""
    return np.array([mma.lane_elements(shape, operand, lane) for lane in range(WARP)], dtype=np.int32)


def _tables(shape):
    return [cuda.to_device(_index_table(shape, op)) for op in "ABC"]


# --- mma.sync ---------------------------------------------------------------------------------------------
@cuda.jit
def mma_tf32_kernel(a, b, c, ia, ib, ic, d):
    """d = a @ b + c for one 16×8×8 tile, one warp: each lane loads its fragments through the index tables."""
    lane = cuda.threadIdx.x
    d0, d1, d2, d3 = mma.mma_m16n8k8_tf32(
        a[ia[lane, 0, 0], ia[lane, 0, 1]], a[ia[lane, 1, 0], ia[lane, 1, 1]],
        a[ia[lane, 2, 0], ia[lane, 2, 1]], a[ia[lane, 3, 0], ia[lane, 3, 1]],
        b[ib[lane, 0, 0], ib[lane, 0, 1]], b[ib[lane, 1, 0], ib[lane, 1, 1]],
        c[ic[lane, 0, 0], ic[lane, 0, 1]], c[ic[lane, 1, 0], ic[lane, 1, 1]],
        c[ic[lane, 2, 0], ic[lane, 2, 1]], c[ic[lane, 3, 0], ic[lane, 3, 1]])
    d[ic[lane, 0, 0], ic[lane, 0, 1]] = d0
    d[ic[lane, 1, 0], ic[lane, 1, 1]] = d1
    d[ic[lane, 2, 0], ic[lane, 2, 1]] = d2
    d[ic[lane, 3, 0], ic[lane, 3, 1]] = d3


@cuda.jit(device=True)
def _reg(m, table, lane, j):
    """Register j of a 16-bit operand: elements 2j (low half) and 2j + 1 (high half) of the lane."""
    return mma.pack_b16x2(m[table[lane, 2 * j, 0], table[lane, 2 * j, 1]],
                          m[table[lane, 2 * j + 1, 0], table[lane, 2 * j + 1, 1]])


def _mma_b16_kernel(bf16):
    @cuda.jit
    def kernel(a, b, c, ia, ib, ic, d):
        lane = cuda.threadIdx.x
        args = (_reg(a, ia, lane, 0), _reg(a, ia, lane, 1), _reg(a, ia, lane, 2), _reg(a, ia, lane, 3),
                _reg(b, ib, lane, 0), _reg(b, ib, lane, 1),
                c[ic[lane, 0, 0], ic[lane, 0, 1]], c[ic[lane, 1, 0], ic[lane, 1, 1]],
                c[ic[lane, 2, 0], ic[lane, 2, 1]], c[ic[lane, 3, 0], ic[lane, 3, 1]])
        if bf16:
            d0, d1, d2, d3 = mma.mma_m16n8k16_bf16(*args)
        else:
            d0, d1, d2, d3 = mma.mma_m16n8k16_f16(*args)
        d[ic[lane, 0, 0], ic[lane, 0, 1]] = d0
        d[ic[lane, 1, 0], ic[lane, 1, 1]] = d1
        d[ic[lane, 2, 0], ic[lane, 2, 1]] = d2
        d[ic[lane, 3, 0], ic[lane, 3, 1]] = d3
    return kernel


mma_f16_kernel, mma_bf16_kernel = _mma_b16_kernel(False), _mma_b16_kernel(True)


def _assert_close(actual, expected, bound, what):
    err = np.abs(actual.astype(np.float64) - expected)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert (err <= bound).all(), (f"{what}: element {worst} is {actual[worst]!r}, expected {expected[worst]!r} "
                                  f"(error {err[worst]:.3g} > bound {bound[worst]:.3g})")


def test_tf32_product_matches_float64():
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (16, 8)).astype(np.float32)
    b = rng.uniform(-1, 1, (8, 8)).astype(np.float32)
    c = rng.uniform(-1, 1, (16, 8)).astype(np.float32)
    d = cuda.device_array((16, 8), np.float32)
    mma_tf32_kernel[1, WARP](a, b, c, *_tables("m16n8k8.tf32"), d)
    got = d.copy_to_host()
    scale = np.abs(a.astype(np.float64)) @ np.abs(b) + np.abs(c)
    # against the TF32-rounded inputs only the float32 accumulation is left: a few 2^-24 of the scale
    exact = mma.round_tf32(a).astype(np.float64) @ mma.round_tf32(b) + c
    _assert_close(got, exact, 2.0 ** -20 * scale, "tf32 mma vs float64 of the TF32-rounded inputs")
    # against the float32 inputs: each input off by up to 2^-11 (10 mantissa bits, round to nearest)
    _assert_close(got, a.astype(np.float64) @ b + c, 2.0 ** -10 * scale, "tf32 mma vs float64")


def test_tf32_rounding_is_to_nearest_not_truncation():
    """1 + 2^-11 + 2^-13 rounds up to 1 + 2^-10 in TF32; truncation would give 1. One product shows it."""
    x = np.float32(1 + 2.0 ** -11 + 2.0 ** -13)
    assert mma.round_tf32(x) == np.float32(1 + 2.0 ** -10)
    assert mma.round_tf32(np.float32(-(1 + 2.0 ** -11))) == np.float32(-(1 + 2.0 ** -10))  # tie: away from 0
    a = np.zeros((16, 8), np.float32)
    b = np.zeros((8, 8), np.float32)
    a[:, 0], b[0, :] = x, 1
    d = cuda.device_array((16, 8), np.float32)
    mma_tf32_kernel[1, WARP](a, b, np.zeros((16, 8), np.float32), *_tables("m16n8k8.tf32"), d)
    assert (d.copy_to_host() == np.float32(1 + 2.0 ** -10)).all()


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_b16_product_matches_float64(kind):
    rng = np.random.default_rng(1)
    af, bf = rng.uniform(-1, 1, (16, 16)), rng.uniform(-1, 1, (16, 8))
    if kind == "f16":
        a, b = af.astype(np.float16).view(np.uint16), bf.astype(np.float16).view(np.uint16)
    else:
        a, b = mma.bf16_bits(af), mma.bf16_bits(bf)
    c = rng.uniform(-1, 1, (16, 8)).astype(np.float32)
    d = cuda.device_array((16, 8), np.float32)
    kernel = mma_f16_kernel if kind == "f16" else mma_bf16_kernel
    kernel[1, WARP](a, b, c, *_tables(f"m16n8k16.{kind}"), d)
    a64, b64 = mma.b16_values(a, kind), mma.b16_values(b, kind)
    # 16-bit inputs multiply exactly in float32: only the accumulation rounds
    _assert_close(d.copy_to_host(), a64 @ b64 + c, 2.0 ** -20 * (np.abs(a64) @ np.abs(b64) + np.abs(c)),
                  f"{kind} mma vs float64")


def test_layout_tables_cover_every_element_once():
    for (shape, operand), (rows, cols, per_lane, _) in mma.LAYOUTS.items():
        owners = mma.owners(shape, operand)
        assert (owners >= 0).all(), f"{shape} {operand}: an element no lane holds"
        assert rows * cols == WARP * per_lane


@cuda.jit
def to_tf32_kernel(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = mma.to_tf32(x[i])


def test_to_tf32_rounds_as_round_tf32():
    """Bit for bit: ties (low 13 bits 0x1000) go away from zero, infinities and NaN pass, the rest rounds."""
    bits = np.array([0x3F801000, 0xBF801000, 0x3F800FFF, 0x3F801001, 0x7F800000, 0xFF800000, 0x7FC00000],
                    dtype=np.uint32)
    x = np.concatenate([bits.view(np.float32),
                        np.random.default_rng(4).standard_normal(55).astype(np.float32)])
    out = np.zeros_like(x)
    to_tf32_kernel[1, 64](x, out)
    want = mma.round_tf32(x)
    assert (out.view(np.uint32) == want.view(np.uint32)).all(), (out.view(np.uint32), want.view(np.uint32))


@cuda.jit
def mma_tf32_prerounded_kernel(a, b, c, ia, ib, ic, d):
    """mma_tf32_kernel with the operands passed to the pre-rounded variant (no cvt in the instruction)."""
    lane = cuda.threadIdx.x
    d0, d1, d2, d3 = mma.mma_m16n8k8_tf32_prerounded(
        a[ia[lane, 0, 0], ia[lane, 0, 1]], a[ia[lane, 1, 0], ia[lane, 1, 1]],
        a[ia[lane, 2, 0], ia[lane, 2, 1]], a[ia[lane, 3, 0], ia[lane, 3, 1]],
        b[ib[lane, 0, 0], ib[lane, 0, 1]], b[ib[lane, 1, 0], ib[lane, 1, 1]],
        c[ic[lane, 0, 0], ic[lane, 0, 1]], c[ic[lane, 1, 0], ic[lane, 1, 1]],
        c[ic[lane, 2, 0], ic[lane, 2, 1]], c[ic[lane, 3, 0], ic[lane, 3, 1]])
    d[ic[lane, 0, 0], ic[lane, 0, 1]] = d0
    d[ic[lane, 1, 0], ic[lane, 1, 1]] = d1
    d[ic[lane, 2, 0], ic[lane, 2, 1]] = d2
    d[ic[lane, 3, 0], ic[lane, 3, 1]] = d3


def test_tf32_prerounded_product_matches_float64():
    rng = np.random.default_rng(6)
    a = mma.round_tf32(rng.standard_normal((16, 8)).astype(np.float32))
    b = mma.round_tf32(rng.standard_normal((8, 8)).astype(np.float32))
    c = rng.standard_normal((16, 8)).astype(np.float32)
    d = np.zeros((16, 8), np.float32)
    mma_tf32_prerounded_kernel[1, WARP](a, b, c, *_tables("m16n8k8.tf32"), d)
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    assert np.allclose(d, want, rtol=2.0 ** -20, atol=1e-5), np.abs(d - want).max()


@pytest.mark.skipif(lib.ON_GPU, reason="the twin's check; the hardware uses whatever bits it is given")
def test_tf32_prerounded_refuses_a_value_that_is_not_tf32():
    a = np.ones((16, 8), np.float32)
    a[3, 5] = np.float32(1.0 + 2.0 ** -20)          # not a TF32 value: 20 mantissa bits
    b, c = np.ones((8, 8), np.float32), np.zeros((16, 8), np.float32)
    with pytest.raises(Exception, match="a[0-3] = 1.0000009.* is not a TF32 value"):
        mma_tf32_prerounded_kernel[1, WARP](a, b, c, *_tables("m16n8k8.tf32"), np.zeros((16, 8), np.float32))


# --- ldmatrix ---------------------------------------------------------------------------------------------
ROW_STRIDE = 24  # 16-bit elements per shared row: 48 bytes, a multiple of 16, rows not packed back to back


def _ldmatrix_kernel(load, count, dtype, row_stride, col):
    """A one-warp kernel that stages src (32 rows of `row_stride` elements of `dtype`) in shared memory and
    calls `load` with lane l pointing at column `col` of row rows[l]; out[l, m] = the lane's register m."""
    elements = 32 * row_stride

    @cuda.jit
    def kernel(src, rows, out):
        tile = cuda.shared.array(elements, dtype=dtype)
        lane = cuda.threadIdx.x
        for k in range(lane, elements, WARP):
            tile[k] = src[k]
        cuda.syncthreads()
        r = load(tile, rows[lane] * row_stride + col)
        if count == 1:
            out[lane, 0] = r
        else:
            for m in range(count):
                out[lane, m] = r[m]
    return kernel


LDMATRIX = {(count, trans): _ldmatrix_kernel(getattr(mma, f"ldmatrix_x{count}" + ("_trans" if trans else "")),
                                             count, np.uint16, ROW_STRIDE, 8)
            for count in (1, 2, 4) for trans in (False, True)}


@pytest.mark.parametrize("count, trans", sorted(LDMATRIX))
def test_ldmatrix_fragments_match_the_layout(count, trans):
    rng = np.random.default_rng(count + 10 * trans)
    src = rng.integers(0, 1 << 16, 32 * ROW_STRIDE, dtype=np.uint16)
    rows = rng.permutation(32).astype(np.int32)            # lane l's row address: any row, any order
    out = cuda.to_device(np.zeros((WARP, count), np.uint32))
    LDMATRIX[(count, trans)][1, WARP](src, rows, out)
    got = out.copy_to_host()
    shared = src.reshape(32, ROW_STRIDE)
    for lane in range(WARP):
        for reg in range(count):
            halves = []
            for half in (0, 1):
                matrix, row, col = mma.ldmatrix_element(lane, reg, half, trans)
                halves.append(int(shared[rows[8 * matrix + row], 8 + col]))
            expected = halves[0] | halves[1] << 16
            assert got[lane, reg] == expected, (
                f"ldmatrix x{count}{' trans' if trans else ''}: lane {lane} register {reg} holds "
                f"{int(got[lane, reg]):#010x}, the layout says {expected:#010x}")


ROW_STRIDE_32 = 12  # float32 elements per shared row: 48 bytes, as above
LDMATRIX_TF32 = {count: _ldmatrix_kernel(getattr(mma, f"ldmatrix_x{count}_tf32"), count, np.float32, ROW_STRIDE_32, 4)
                 for count in (1, 2, 4)}


@pytest.mark.parametrize("count", sorted(LDMATRIX_TF32))
def test_ldmatrix_tf32_hands_each_lane_whole_words(count):
    """Register m of lane l is the float32 at (l >> 2, l & 3) of matrix m: both 16-bit halves of one word,
    compared bit for bit (random patterns, NaNs included)."""
    rng = np.random.default_rng(20 + count)
    src = rng.integers(0, 1 << 32, 32 * ROW_STRIDE_32, dtype=np.uint32).view(np.float32)
    rows = rng.permutation(32).astype(np.int32)
    out = cuda.to_device(np.zeros((WARP, count), np.float32))
    LDMATRIX_TF32[count][1, WARP](src, rows, out)
    got = out.copy_to_host().view(np.uint32)
    shared = src.view(np.uint32).reshape(32, ROW_STRIDE_32)
    for lane in range(WARP):
        for reg in range(count):
            matrix, row, col = mma.ldmatrix_element_tf32(lane, reg)
            expected = shared[rows[8 * matrix + row], 4 + col]
            assert got[lane, reg] == expected, (
                f"ldmatrix x{count} tf32: lane {lane} register {reg} holds {int(got[lane, reg]):#010x}, the "
                f"layout says {int(expected):#010x} (matrix {matrix}, row {row}, word {col})")


def test_ldmatrix_x4_tf32_gives_the_a_fragment():
    """With matrices at rows 0-7 / 8-15 × k 0-3 / 4-7 of a 16 × 8 A tile (matrix m: rows + 8(m & 1), words
    + 4(m >> 1)), register i of every lane is exactly element a_i of the TF32 A layout."""
    for lane in range(WARP):
        for reg in range(4):
            matrix, row, col = mma.ldmatrix_element_tf32(lane, reg)
            placed = (row + 8 * (matrix & 1), col + 4 * (matrix >> 1))
            assert placed == mma.lane_elements("m16n8k8.tf32", "A", lane)[reg], (lane, reg, placed)


def test_ldmatrix_cannot_give_the_tf32_b_fragment_from_k_rows():
    """The reason B keeps 4-byte loads: ldmatrix's word index within a row follows t = lane & 3 while the
    row follows g = lane >> 2, but in B's fragment (k, n) = (t + 4i, g) k follows t. With B's rows along k
    (K × N row-major), a lane's words all share one k row, and lanes of one g need different k."""
    for lane in range(WARP):
        ks = {mma.lane_elements("m16n8k8.tf32", "B", lane)[i][0] for i in range(2)}
        same_row_lanes = [other for other in range(WARP) if other >> 2 == lane >> 2]
        lane_ks = {mma.lane_elements("m16n8k8.tf32", "B", other)[0][0] for other in same_row_lanes}
        assert len(ks) == 2 and len(lane_ks) == 4   # ldmatrix would give these 4 lanes one row (one k)


def test_ldmatrix_tf32_names_a_misaligned_row():
    if not lib.SIMULATOR:
        pytest.skip("the simulator's message; the GPU faults instead")
    src = np.zeros(32 * ROW_STRIDE_32, np.float32)
    rows = np.arange(32, dtype=np.int32)
    kernel = _ldmatrix_kernel(mma.ldmatrix_x1_tf32, 1, np.float32, ROW_STRIDE_32, 2)   # 8 bytes into a row

    with pytest.raises(Exception, match="not 16-byte aligned"):
        kernel[1, WARP](src, rows, cuda.to_device(np.zeros((WARP, 1), np.float32)))


# --- cp.async ---------------------------------------------------------------------------------------------
N_COPY = 4 * 64  # float32 elements: 64 threads copy 16 bytes each, in two groups


@cuda.jit
def cp_async_kernel(src, out):
    """Thread i copies src[4i : 4i+4] into shared memory with a different cp.async flavour per quarter of
    the block; the first half of the copies is one group, the second half another."""
    tile = cuda.shared.array(N_COPY, dtype=np.float32)
    i = cuda.threadIdx.x
    base = 4 * i
    if i < 16:
        mma.cp_async_ca16(tile, base, src, base)
    elif i < 32:
        mma.cp_async_cg16(tile, base, src, base)
    mma.cp_async_commit()
    if i >= 32 and i < 48:
        mma.cp_async_ca8(tile, base, src, base)
        mma.cp_async_ca8(tile, base + 2, src, base + 2)
    elif i >= 48:
        for k in range(4):
            mma.cp_async_ca4(tile, base + k, src, base + k)
    mma.cp_async_commit()
    mma.cp_async_wait_group(1)   # the first group has landed; the second may not have yet
    cuda.syncthreads()
    if i < 32:
        for k in range(4):
            out[0, base + k] = tile[base + k]
    mma.cp_async_wait_all()
    cuda.syncthreads()
    for k in range(4):
        out[1, base + k] = tile[base + k]


def test_cp_async_copies_land_at_their_wait():
    src = np.random.default_rng(3).standard_normal(N_COPY).astype(np.float32)
    out = cuda.to_device(np.full((2, N_COPY), np.nan, np.float32))
    cp_async_kernel[1, 64](src, out)
    got = out.copy_to_host()
    assert (got[0, :128] == src[:128]).all(), "after wait_group(1) the first group must have landed"
    assert (got[1] == src).all(), "after wait_all every copy must have landed"


@pytest.mark.skipif(lib.ON_GPU, reason="the twin's deferred copy: on a GPU a read before the wait is a race")
def test_simulator_copies_only_at_the_wait():
    @cuda.jit
    def early_read(src, out):
        tile = cuda.shared.array(4, dtype=np.float32)
        tile[0] = -1.0
        mma.cp_async_ca16(tile, 0, src, 0)
        out[0] = tile[0]              # read before waiting: still the old value in the twin
        mma.cp_async_commit()
        mma.cp_async_wait_all()
        out[1] = tile[0]

    out = np.zeros(2, np.float32)
    early_read[1, 1](np.arange(1, 5, dtype=np.float32), out)
    assert out.tolist() == [-1.0, 1.0]


@pytest.mark.skipif(lib.ON_GPU, reason="simulator error messages")
def test_warp_wide_instructions_need_the_whole_warp():
    @cuda.jit
    def half_warp(d):
        lane = cuda.threadIdx.x
        if lane < 16:
            return
        x = mma.mma_m16n8k8_tf32(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0)
        d[lane] = x[0]

    with pytest.raises(Exception, match="all 32 lanes"):
        half_warp[1, WARP](np.zeros(WARP, np.float32))


# --- kernels/tensorcores.py on this device's sizes (simulator: small) -------------------------------------
def test_tensorcore_ladders_pass_their_checks():
    """Every rung at its ladder's simulator size, and on a GPU also at a second size with more K tiles than
    pipeline stages (the autotuned rung at its recorded configuration: no sweep in a test)."""
    from kernels import tensorcores as tc
    from lib.measure.bench import run_ladder

    for ladder in tc.LADDERS:
        (m, n, k), = ladder.sim_sizes
        sizes = ladder.sim_sizes + ([(2 * m, 2 * n, 8 * k)] if lib.ON_GPU else [])
        only = [r.name for r in ladder.rungs if not (lib.ON_GPU and "autotuned" in r.name)]
        _, _, failures = run_ladder(ladder, sizes=sizes, reps=3, only=only)
        assert failures == [], f"{ladder.topic}: {failures}"
    if lib.ON_GPU:
        for kind in tc.K_STEP:
            cfg = tc.recorded_tuned_config(kind)
            inputs = tc._inputs(kind)((256, 256, 256), np.random.default_rng(3))
            c = np.full((256, 256), np.nan, np.float32)
            tc.launch_mma_tiled(kind, *inputs, c, cfg)
            tol = tc.matmul_tolerance(kind)(*inputs, None)
            expected = tc._reference(kind)(*inputs)
            assert (np.abs(c - expected) <= tol.rtol * tol.scale).all(), f"autotuned {kind} {cfg}"


def test_rung_refuses_shapes_it_cannot_tile():
    from kernels.tensorcores import matmul_mma_global_tf32

    a, b = np.zeros((20, 8), np.float32), np.zeros((8, 8), np.float32)
    with pytest.raises(ValueError, match="M % 16"):
        matmul_mma_global_tf32(a, b, np.zeros((20, 8), np.float32))


@pytest.mark.parametrize("kind", ["tf32", "f16", "bf16"])
def test_ceiling_kernel_sums_exactly(kind):
    from kernels import tensorcores as tc

    kernel = tc.make_ceiling_kernel(kind, 2, iters=3)
    out = np.zeros(WARP, np.float32)
    kernel[1, WARP](tc.ceiling_operands(kind), out)
    assert (out == tc.ceiling_expected(kind, 2, iters=3)).all(), out


@pytest.mark.skipif(lib.ON_GPU, reason="simulator error messages (on a GPU a misaligned row is undefined)")
def test_ldmatrix_names_a_misaligned_row():
    src = np.zeros(32 * ROW_STRIDE, np.uint16)
    rows = np.arange(32, dtype=np.int32)
    misaligned = _ldmatrix_kernel(mma.ldmatrix_x1, 1, np.uint16, ROW_STRIDE, 4)   # 8 bytes into a row

    with pytest.raises(Exception, match="16-byte"):
        misaligned[1, WARP](src, rows, np.zeros((WARP, 1), np.uint32))
