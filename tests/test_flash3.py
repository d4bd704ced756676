"""lib.runtime.hopper's FlashAttention-3 additions (wgmma with A from registers, B read MN-major) and
kernels/flash3.py, on whatever this process runs on: the simulator here, the GPU on the H200.

The single-wgmma kernels place their operands through lib's layout functions (a_fragment_element for A in
registers, mnmajor_layout for a transposed B): on a GPU a wrong fragment map, a wrong LBO/SBO or a wrong
transpose bit gives a wrong product, so passing there is the check that the twins and the hardware agree."""
import numpy as np
import pytest
from numba import cuda

import lib
from lib.grading.check import compare
from lib.runtime import hopper
from lib.runtime.mma import bf16_bits, b16_values


# --- layout truth ---------------------------------------------------------------------------------------
def test_a_fragment_covers_the_64_by_16_tile_once():
    t, r, h = np.meshgrid(np.arange(128), np.arange(4), np.arange(2), indexing="ij")
    rows, cols = hopper.a_fragment_element(t, r, h)
    seen = np.zeros((64, 16), int)
    np.add.at(seen, (rows, cols), 1)
    assert (seen == 1).all()


@pytest.mark.parametrize("j", [0, 3])
def test_accumulator_pairs_are_the_a_fragment_of_the_next_product(j):
    """S's accumulator registers 8j..8j+7 hold exactly the (row, col - 16j) that A registers 0-3 of k-slice j
    want, in the same thread: the conversion of P needs no shuffle."""
    for tid in (0, 37, 127):
        for r, (lo, hi) in enumerate(hopper.acc_to_a_registers(j)):
            for half, i in enumerate((lo, hi)):
                row, col = hopper.acc_element(tid, i)
                assert (row, col - 16 * j) == hopper.a_fragment_element(tid, r, half)


def test_mn_major_descriptor_names_the_tma_image():
    idx, lbo, sbo, kstep = hopper.mnmajor_layout(32, 128, 2, "128B")
    assert (lbo, sbo, kstep) == (32 * 128, 1024, 2048)
    assert len(np.unique(idx)) == idx.size
    for s in range(2):
        desc = hopper.make_descriptor(0x800 + s * kstep, lbo, sbo, "128B")
        addr = hopper.operand_addresses_mn(desc, 128, 16)
        assert ((addr - 0x800) // 2 == idx[16 * s:16 * s + 16].T).all()
    with pytest.raises(ValueError, match="atom"):
        hopper.operand_addresses_mn(hopper.make_descriptor(0x880, lbo, sbo, "128B"), 128)


@cuda.jit
def _pack_kernel(x, out):
    out[0] = hopper.pack_f16x2(x[0], x[1])
    out[1] = hopper.pack_bf16x2(x[0], x[1])


def test_the_pack_rounds_to_nearest_even_low_half_first():
    """lo in the low half, rounded to nearest even: 1 + 2^-11 is a tie between 1 and 1 + 2^-10 (FP16: 1) and
    1 + 2^-8 + 2^-11 rounds up in BF16's 8 bits."""
    x = np.array([1 + 2 ** -11, -2.0], np.float32)
    out = cuda.device_array(2, np.uint32)
    _pack_kernel[1, 1](cuda.to_device(x), out)
    f16, b16 = (int(w) for w in out.copy_to_host())
    assert f16 == (0xC000 << 16) | 0x3C00
    assert b16 == (int(bf16_bits(np.float32(-2.0))) << 16) | int(bf16_bits(x[0]))


# --- one wgmma of each new form on both sides ---------------------------------------------------------------
WG_SMEM = 1024 + 64 * 64 + 256 * 64   # 16-bit elements


def _make_kernel(n, kind, a_regs, trans_b, steps):
    wgmma = getattr(hopper, hopper.wgmma_ex_name(n, kind, a_regs, trans_b))
    nacc = n // 2

    @cuda.jit
    def one_wgmma_ex_kernel(a_bits, a_idx, a_reg, b_bits, b_idx, prm, out):
        """One warpgroup: A written to shared memory at a K-major layout (SS) or given as each thread's four
        registers per k16 step (RS), B written at a K-major or MN-major layout; `steps` wgmma k16."""
        sm = cuda.shared.array(WG_SMEM, np.uint16)
        tid = cuda.threadIdx.x
        base = hopper.smem_u32(sm)
        pad = ((1024 - (base & 1023)) & 1023) // 2
        for e in range(tid, a_idx.size, 128):
            sm[pad + a_idx[e]] = a_bits[e]
        boff = pad + 64 * 64
        for e in range(tid, b_idx.size, 128):
            sm[boff + b_idx[e]] = b_bits[e]
        hopper.fence_proxy_async()
        cuda.syncthreads()
        acc = hopper.zeros_acc(nacc)
        for s in range(steps):
            db = hopper.make_desc(base + 2 * boff + s * prm[3], prm[0], prm[1], 1)
            hopper.wgmma_fence()
            if a_regs:
                regs = (a_reg[s, tid, 0], a_reg[s, tid, 1], a_reg[s, tid, 2], a_reg[s, tid, 3])
                acc = wgmma(regs, db, acc)
            else:
                da = hopper.make_desc(base + 2 * pad + s * 32, 16, 1024, 1)
                acc = wgmma(da, db, acc)
            hopper.wgmma_commit()
            hopper.wgmma_wait(0)
        for i in range(nacc):
            out[tid, i] = acc[i]
    return one_wgmma_ex_kernel


def run_one(n, kind, a_regs, trans_b, kelems=64, swap_lbo_sbo=False, seed=0):
    """float64 product and the wgmma's (64 × n) of A (64 × kelems) and B (n × kelems) in `kind`."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (64, kelems)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, kelems)).astype(np.float32)
    bits = (lambda x: x.astype(np.float16).view(np.uint16)) if kind == "f16" else bf16_bits
    a_bits, b_bits = bits(a), bits(b)
    ref = b16_values(a_bits, kind) @ b16_values(b_bits, kind).T
    steps = kelems // 16
    a_idx, _, _, _ = hopper.kmajor_layout(64, kelems, 2, "128B")
    t, r, h = np.meshgrid(np.arange(128), np.arange(4), np.arange(2), indexing="ij")
    rows, cols = hopper.a_fragment_element(t, r, h)
    a_reg = np.zeros((steps, 128, 4), np.uint32)
    for s in range(steps):
        halves = a_bits[rows, cols + 16 * s].astype(np.uint32)
        a_reg[s] = halves[..., 0] | (halves[..., 1] << 16)
    if trans_b:     # B stored as its transpose, kelems × n, row k holding n contiguous values
        idx, lbo, sbo, kstep = hopper.mnmajor_layout(kelems, n, 2, "128B")
        b_store = np.ascontiguousarray(b_bits.T)
        if swap_lbo_sbo:
            lbo, sbo = sbo, lbo
    else:
        idx, lbo, sbo, kstep = hopper.kmajor_layout(n, kelems, 2, "128B")
        b_store = b_bits
    prm = np.array([lbo, sbo, 0, kstep], dtype=np.int64)
    out = cuda.device_array((128, n // 2), np.float32)
    kern = _make_kernel(n, kind, a_regs, trans_b, steps)
    kern[1, 128](cuda.to_device(a_bits.reshape(-1)), cuda.to_device(a_idx.reshape(-1)), cuda.to_device(a_reg),
                 cuda.to_device(b_store.reshape(-1)), cuda.to_device(idx.reshape(-1)), cuda.to_device(prm), out)
    got = np.zeros((64, n))
    rows, cols = hopper.acc_owner(n)
    got[rows, cols] = out.copy_to_host()
    return ref, got


FORMS = [(64, "f16", True, False), (64, "f16", True, True), (128, "f16", True, True), (64, "bf16", True, True),
         (128, "bf16", True, True), (64, "f16", False, True), (128, "bf16", False, True), (256, "f16", True, True)]


@pytest.mark.parametrize("n, kind, a_regs, trans_b", FORMS)
def test_one_new_wgmma_form_matches_float64(n, kind, a_regs, trans_b):
    ref, got = run_one(n, kind, a_regs, trans_b)
    assert np.abs(got - ref).max() < 1e-4 * 64


@pytest.mark.parametrize("n, kind", [(128, "f16"), (256, "bf16")])
def test_swapped_lbo_and_sbo_of_a_transposed_b_give_a_wrong_product(n, kind):
    """The test above can fail: LBO and SBO exchanged (N-adjacent boxes vs 8-row groups) is wrong on the H200
    (measured: max error 10-16) and on the simulator alike."""
    ref, got = run_one(n, kind, True, True, swap_lbo_sbo=True)
    assert np.abs(got - ref).max() > 1.0


simulator_only = pytest.mark.skipif(lib.ON_GPU, reason="the simulator's diagnostics")


@simulator_only
def test_an_rs_wgmma_without_fence_is_refused():
    from lib.runtime import simulator

    wgmma = hopper.wgmma_rs_m64n64k16_f16_tb

    @cuda.jit
    def no_fence(out):
        sm = cuda.shared.array(8192, np.uint16)
        base = hopper.smem_u32(sm)
        pad = (1024 - (base & 1023)) & 1023
        acc = hopper.zeros_acc(32)
        acc = wgmma((0, 0, 0, 0), hopper.make_desc(base + pad, 2048, 1024, 1), acc)
        out[cuda.threadIdx.x] = acc[0]

    with pytest.raises(simulator.SimulatorError, match="without wgmma_fence"):
        no_fence[1, 128](cuda.device_array(128, np.float32))


# --- the attention kernels -----------------------------------------------------------------------------------
from kernels import flash3 as F, flash_tc  # noqa: E402


def _attention(kind, d, causal, rung, heads, n, seed=0):
    q, k, v = flash_tc.make_inputs(kind)((heads, n, d), np.random.default_rng(seed))
    expected = flash_tc.reference(kind, causal)(q, k, v)
    tol = flash_tc.tolerance(kind, causal)(q, k, v, expected)
    out = cuda.to_device(np.full(q.shape, np.nan, np.float32))
    F.flash3(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), out, kind, causal, rung)
    return compare(out.copy_to_host(), expected, tol.rtol, tol.atol, tol.scale)


@pytest.mark.parametrize("rung", F.RUNGS)
def test_each_rung_matches_float64(rung):
    """Two query blocks of two key tiles each (the overlap loop runs); ws: one block, one tile."""
    n = (128 if rung == "ws" else 256) if lib.SIMULATOR else 1024
    assert _attention("fp16", 64, False, rung, 1 if lib.SIMULATOR else 3, n) is None


@pytest.mark.parametrize("rung, n", [("ws", 128), ("pingpong", 256)])
def test_causal_bf16_d128_matches_float64(rung, n):
    """The diagonal tile masked; at n = 256 the first query block skips the second key tile."""
    assert _attention("bf16", 128, True, rung, 1 if lib.SIMULATOR else 3, n if lib.SIMULATOR else 1024) is None


def test_the_two_stage_ring_wraps():
    """d = 128 keeps 2 K/V slots: 3 key tiles reuse slot 0 (its empty barrier's second phase)."""
    assert _attention("fp16", 128, False, "overlap", 1, 384 if lib.SIMULATOR else 2048) is None


def test_a_wrong_conversion_of_p_fails_the_check(monkeypatch):
    """The check can fail: P packed with its pairs' halves swapped (a column-order bug in the fragment
    conversion) is caught against float64."""
    real = hopper.pack_f16x2 if lib.SIMULATOR else None
    if real is None:
        pytest.skip("the intrinsic is compiled into the GPU kernel; the wrong variant is built on the simulator")
    monkeypatch.setattr(hopper, "pack_f16x2", lambda lo, hi: real(hi, lo))
    F._KERNELS.clear()
    try:
        bad = _attention("fp16", 64, False, "ws", 1, 128)
    finally:
        F._KERNELS.clear()
    assert bad is not None


@pytest.mark.parametrize("shape, d, match", [((1, 200, 64), 64, "multiple of 128"), ((1, 128, 96), 96, "one of"),
                                             ((1, 128, 64), 64, "int16")])
def test_bad_inputs_are_named(shape, d, match):
    dtype = np.float32 if match == "int16" else np.int16
    q = cuda.to_device(np.zeros(shape, dtype))
    out = cuda.to_device(np.zeros(shape, np.float32))
    with pytest.raises((ValueError, TypeError), match=match):
        F.flash3(q, q, q, out, "fp16")


def test_the_recording_check_passes_the_float64_answer_and_names_a_wrong_one(monkeypatch):
    """kernels.flash3._checked, the float64 check every rung, SDPA and Triton pass before they are timed."""
    from kernels import flash3 as F, flash_tc

    monkeypatch.setattr(F, "CHECK_SIZE", (1, 128))
    right = lambda q, k, v: flash_tc.reference("fp16", False)(q, k, v)  # noqa: E731
    F._checked("fp16", 64, False, "right d=64", right, np.random.default_rng(0))

    def wrong(q, k, v):
        out = right(q, k, v).copy()
        out[0, 5, 3] *= 1.01
        return out
    with pytest.raises(AssertionError, match="wrong d=64 failed its float64 check, not timed"):
        F._checked("fp16", 64, False, "wrong d=64", wrong, np.random.default_rng(0))
