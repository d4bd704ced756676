"""lib.runtime.hopper and kernels/hopper.py on whatever this process runs on: the simulator here, the GPU on
the H200. The single-wgmma kernels place their operands through lib's layout functions, so on a GPU a wrong
layout, descriptor or fragment map gives a wrong product: passing there is the check that the twins and the
hardware agree. The diagnostics tests (a starved mbarrier, a wrong byte count, a missing fence, a race) are
the simulator's own: on a GPU those kernels would hang or compute garbage."""
import numpy as np
import pytest
from numba import cuda, int64, uint8

import lib
from kernels import hopper as H
from lib.grading.check import compare
from lib.runtime import hopper, simulator
from lib.runtime.mma import bf16_bits

simulator_only = pytest.mark.skipif(lib.ON_GPU, reason="the simulator's diagnostics (this kernel hangs a GPU)")


# --- layout truth ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["128B", "64B", "32B"])
def test_swizzle_permutes_16_byte_chunks_within_each_row_of_an_atom(mode):
    span = hopper.SWIZZLE_SPAN[mode]
    off = hopper.tma_box_offsets(8, span, mode)
    assert sorted(off.reshape(-1)) == list(range(8 * span))            # a permutation of the atom
    assert (off // span == np.arange(8)[:, None]).all()                  # bytes stay in their row
    assert ((off % 16) == np.arange(span)[None, :] % 16).all()           # and in their place in the chunk
    # chunk 0 of row r moves to chunk (address bits 7.. of the row) & mask: 128B row r -> chunk r
    assert (off[:, 0] % span // 16 == ((np.arange(8) * span) >> 7) & hopper.SWIZZLE_MASK[mode]).all()


def test_128b_layout_is_the_one_measured_on_the_h200():
    # chunk c of row r lands at chunk c ^ (r % 8): the probe's 128B image of a TMA box (design note, part C)
    idx, lbo, sbo, kstep = hopper.kmajor_layout(16, 64, 2, "128B")
    r, k = 11, 37
    assert idx[r, k] == (r * 128 + (((k * 2) // 16) ^ (r % 8)) * 16 + (k * 2) % 16) // 2
    assert (lbo, sbo, kstep) == (16, 1024, 32)


@pytest.mark.parametrize("mode, kelems", [("none", 16), ("128B", 64), ("64B", 32), ("32B", 16)])
def test_descriptor_addresses_match_the_layout(mode, kelems):
    """What operand_addresses reads for each K step is where kmajor_layout put the elements."""
    rows, start = 64, 0x2000
    idx, lbo, sbo, kstep = hopper.kmajor_layout(rows, kelems, 2, mode)
    for s in range(kelems // 16):
        desc = hopper.make_descriptor(start + s * (kstep if mode != "none" else 2 * lbo), lbo, sbo, mode)
        addr = hopper.operand_addresses(desc, rows)
        assert (addr[:, ::2] == start + 2 * idx[:, 16 * s:16 * s + 16]).all()
    assert hopper.decode_descriptor(hopper.make_descriptor(start, lbo, sbo, mode)) == dict(
        start=start, lbo=lbo, sbo=sbo, base_offset=0, mode=mode)


def test_descriptor_refuses_a_start_inside_a_swizzle_atom():
    with pytest.raises(ValueError, match="first 128-byte row"):
        hopper.operand_addresses(hopper.make_descriptor(0x2000 + 3 * 128, 16, 1024, "128B"), 64)


@pytest.mark.parametrize("n", [8, 64, 256])
def test_accumulator_owners_cover_the_tile_once(n):
    rows, cols = hopper.acc_owner(n)
    seen = np.zeros((64, n), int)
    np.add.at(seen, (rows, cols), 1)
    assert (seen == 1).all()


# --- one wgmma on both sides -------------------------------------------------------------------------------
WG_SMEM = 2048 + 64 * 64 + 256 * 64    # 16-bit elements: 1 KB alignment slack + A (64 × 64) + B (256 × 64)


def _make_wgmma_kernel(n, kind, mode, steps):
    wgmma = getattr(hopper, hopper.wgmma_name(n, kind))
    nacc = n // 2

    @cuda.jit
    def one_wgmma_kernel(a_bits, a_idx, b_bits, b_idx, prm, out):
        """One warpgroup: A (64 × K) and B (n × K) written to shared memory at the layout's offsets, then
        `steps` wgmma with descriptors advanced by prm[3] bytes each; every thread writes its fragment."""
        sm = cuda.shared.array(WG_SMEM, np.uint16)
        tid = cuda.threadIdx.x
        base = hopper.smem_u32(sm)
        pad = ((1024 - (base & 1023)) & 1023) // 2
        words = 2 if kind == "tf32" else 1            # a TF32 value is two 16-bit halves
        for e in range(tid, a_idx.size, 128):
            for h in range(words):
                sm[pad + words * a_idx[e] + h] = a_bits[words * e + h]
        boff = pad + 64 * 64 * words
        for e in range(tid, b_idx.size, 128):
            for h in range(words):
                sm[boff + words * b_idx[e] + h] = b_bits[words * e + h]
        hopper.fence_proxy_async()
        cuda.syncthreads()
        acc = hopper.zeros_acc(nacc)
        for s in range(steps):
            da = hopper.make_desc(base + 2 * pad + s * prm[3], prm[0], prm[1], prm[2])
            db = hopper.make_desc(base + 2 * boff + s * prm[3], prm[0], prm[4], prm[2])
            hopper.wgmma_fence()
            acc = wgmma(da, db, acc)
            hopper.wgmma_commit()
            hopper.wgmma_wait(0)
        for i in range(nacc):
            out[tid, i] = acc[i]
    return one_wgmma_kernel


@pytest.mark.parametrize("n, kind, mode, kelems", [
    (64, "f16", "none", 16), (64, "f16", "128B", 64), (256, "f16", "128B", 64), (64, "bf16", "64B", 32),
    (64, "tf32", "128B", 32), (8, "f16", "32B", 16)])
def test_one_wgmma_matches_float64(n, kind, mode, kelems):
    rng = np.random.default_rng(n)
    a = rng.uniform(-1, 1, (64, kelems)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, kelems)).astype(np.float32)
    item = hopper.KINDS[kind]
    if kind == "f16":
        a_bits, b_bits = a.astype(np.float16).view(np.uint16), b.astype(np.float16).view(np.uint16)
    elif kind == "bf16":
        a_bits, b_bits = bf16_bits(a), bf16_bits(b)
    else:
        a_bits, b_bits = a.view(np.uint16), b.view(np.uint16)     # each float32 as two halves, low first
    vals = {"f16": lambda x: x.view(np.float16).astype(np.float64), "tf32": lambda x: hopper.tf32_truncate(
        x.view(np.float32)).astype(np.float64), "bf16": lambda x: H.values("bf16", x.view(np.int16))}[kind]
    ref = vals(a_bits) @ vals(b_bits).T
    a_idx, lbo, sbo_a, kstep = hopper.kmajor_layout(64, kelems, item, mode)
    b_idx, _, sbo_b, _ = hopper.kmajor_layout(n, kelems, item, mode)
    step = kstep if mode != "none" else 2 * lbo
    prm = np.array([lbo, sbo_a, hopper.SWIZZLE_MODES[mode], step, sbo_b], dtype=np.int64)
    out = cuda.device_array((128, n // 2), np.float32)
    kern = _make_wgmma_kernel(n, kind, mode, kelems * item // 32)
    kern[1, 128](cuda.to_device(a_bits.reshape(-1)), cuda.to_device(a_idx.reshape(-1)),
                 cuda.to_device(b_bits.reshape(-1)), cuda.to_device(b_idx.reshape(-1)), cuda.to_device(prm), out)
    got = np.zeros((64, n))
    rows, cols = hopper.acc_owner(n)
    got[rows, cols] = out.copy_to_host()
    assert np.abs(got - ref).max() < 1e-4 * kelems


# --- the GEMM rungs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("rung", list(H.MAKERS))
@pytest.mark.parametrize("kind", H.KINDS)
def test_gemm_rung_matches_float64_with_ragged_edges(rung, kind):
    lad = next(lad for lad in H.LADDERS if lad.topic == f"{kind} gemm")
    size = (100, 200, 5 * H.tile_k(kind) - 8) if lib.SIMULATOR else (1000, 1300, 1000)
    a, b = lad.make_inputs(size, np.random.default_rng(1))
    ref = lad.reference(a, b)
    tol = lad.tolerance(a, b, ref)
    c = cuda.to_device(np.full(size[:2], np.nan, np.float32))
    H.launch(rung, kind, cuda.to_device(a), cuda.to_device(b), c)
    assert compare(c.copy_to_host(), ref, tol.rtol, tol.atol, tol.scale) is None


@pytest.mark.parametrize("rung", sorted(H.PERSISTENT))
def test_persistent_blocks_walk_several_tiles(rung):
    """More tiles than blocks (a cluster's second block gets an odd row of tiles with no rows of C in it)."""
    kind = "bf16"
    lad = next(lad for lad in H.LADDERS if lad.topic == f"{kind} gemm")
    size = (300, 400, 3 * H.tile_k(kind)) if lib.SIMULATOR else (5000, 6000, 512)   # more tiles than blocks
    a, b = lad.make_inputs(size, np.random.default_rng(2))
    ref = lad.reference(a, b)
    tol = lad.tolerance(a, b, ref)
    c = cuda.to_device(np.full(size[:2], np.nan, np.float32))
    H.launch(rung, kind, cuda.to_device(a), cuda.to_device(b), c)
    assert compare(c.copy_to_host(), ref, tol.rtol, tol.atol, tol.scale) is None


def test_tma_store_rungs_refuse_an_n_that_is_not_a_multiple_of_4():
    a = cuda.to_device(np.zeros((64, 64), np.int16))
    b = cuda.to_device(np.zeros((66, 64), np.int16))
    with pytest.raises(ValueError, match="N = 66 float32 is not a multiple of 4"):
        H.launch("tma_store", "f16", a, b, cuda.device_array((64, 66), np.float32))


def test_tma_refuses_rows_that_are_not_16_byte_multiples():
    a = cuda.to_device(np.zeros((64, 100), np.int16))
    b = cuda.to_device(np.zeros((64, 100), np.int16))
    with pytest.raises(ValueError, match="multiple of 16 bytes"):
        H.launch("tma_pipeline", "f16", a, b, cuda.device_array((64, 64), np.float32))


# --- the simulator's diagnostics ----------------------------------------------------------------------
def _copy_kernel(expect_bytes, fence=True, refill_early=False):
    @cuda.jit
    def tma_then_wgmma(tmap, out):
        """One warpgroup: thread 0 TMA-loads a 64 × 64 FP16 box (8 KB) into a 128B-swizzled tile; all wait,
        then one wgmma m64n8 reads it as A and B."""
        smem = cuda.shared.array(0, uint8)
        bars = cuda.shared.array(1, int64)
        tid = cuda.threadIdx.x
        base = hopper.smem_u32(smem)
        tile = base + ((1024 - (base & 1023)) & 1023)
        bar = hopper.smem_u32(bars)
        if tid == 0:
            hopper.mbar_init(bar, 1)
            hopper.fence_mbarrier_init()
        cuda.syncthreads()
        if tid == 0:
            hopper.mbar_arrive_expect_tx(bar, expect_bytes)
            hopper.tma_load_2d(tile, tmap, 0, 0, bar)
        while hopper.mbar_try_wait(bar, 0) == 0:
            pass
        if fence:
            hopper.wgmma_fence()
        acc = hopper.wgmma_m64n8k16_f16(hopper.make_desc(tile, 16, 1024, 1), hopper.make_desc(tile, 16, 1024, 1),
                                        hopper.zeros_acc(4))
        hopper.wgmma_commit()
        if refill_early and tid == 0:      # the slot is refilled before the wgmma reading it was waited for
            hopper.mbar_arrive_expect_tx(bar, 8192)
            hopper.tma_load_2d(tile, tmap, 0, 0, bar)
        hopper.wgmma_wait(0)
        out[tid] = acc[0]
    return tma_then_wgmma


def _run_copy(**kw):
    x = cuda.to_device(np.ones((64, 64), np.float16).view(np.uint16))
    tmap = hopper.tensor_map_2d(x, 64, 64, "128B")
    out = cuda.device_array(128, np.float32)
    _copy_kernel(**kw)[1, 128, 0, 2048 + 8192](tmap, out)
    return out.copy_to_host()


@simulator_only
def test_a_correct_copy_then_wgmma_runs():
    assert (_run_copy(expect_bytes=8192) == 16.0).all()      # ones: each element sums K = 16 products of one


@simulator_only
def test_a_starved_mbarrier_names_its_address_phase_and_missing_bytes():
    with pytest.raises(simulator.DeadlockError, match=r"mbarrier at shared 0x[0-9a-f]+ waiting for parity 0: "
                       r"phase 0 .*expect_tx 16384 bytes, 8192 delivered: 8192 bytes missing"):
        _run_copy(expect_bytes=16384)


@simulator_only
def test_too_small_an_expect_tx_is_named():
    with pytest.raises(simulator.SimulatorError, match="delivered 8192 bytes but expect_tx announced 4096"):
        _run_copy(expect_bytes=4096)


@simulator_only
def test_a_wgmma_without_fence_is_refused():
    with pytest.raises(simulator.SimulatorError, match="without wgmma_fence"):
        _run_copy(expect_bytes=8192, fence=False)


@simulator_only
def test_refilling_a_slot_a_pending_wgmma_reads_is_a_race():
    with pytest.raises(simulator.SimulatorError, match="race: tma_load_2d"):
        _run_copy(expect_bytes=8192, refill_early=True)


@simulator_only
def test_a_wgmma_missing_threads_of_its_warpgroup_deadlocks_by_name():
    @cuda.jit
    def partial_warpgroup(out):
        """Thread 127 leaves before the warpgroup's wgmma."""
        sm = cuda.shared.array(4096, np.uint16)
        tid = cuda.threadIdx.x
        base = hopper.smem_u32(sm)
        if tid == 127:
            return
        hopper.wgmma_fence()
        acc = hopper.wgmma_m64n8k16_f16(hopper.make_desc(base, 128, 256, 0), hopper.make_desc(base, 128, 256, 0),
                                        hopper.zeros_acc(4))
        out[tid] = acc[0]
    with pytest.raises(simulator.DeadlockError, match="wgmma_m64n8k16_f16 of threads 0-127: threads 127 have "
                       "not arrived"):
        partial_warpgroup[1, 128](cuda.device_array(128, np.float32))


@cuda.jit
def _early_wait_kernel(tmap, out):
    """Thread 0 writes 7 into a slot, starts a TMA copy of ones into it, then waits on the fresh barrier
    with parity 1 (which passes at once: the wrong parity) and reads the slot; then waits with parity 0 and
    reads it again; with a third output, it releases the slot (an arrival on a second barrier) and waits for
    parity 0 again, as a consumer whose parity does not flip would."""
    slot = cuda.shared.array(32 + 32, np.float32)
    bars = cuda.shared.array(2, int64)
    base = hopper.smem_u32(slot)
    pad = ((128 - (base & 127)) & 127) // 4
    bar = hopper.smem_u32(bars)
    if cuda.threadIdx.x == 0:
        for i in range(32):
            slot[pad + i] = 7.0
        hopper.mbar_init(bar, 1)
        hopper.mbar_init(bar + 8, 1)
        hopper.fence_mbarrier_init()
        hopper.mbar_arrive_expect_tx(bar, 128)
        hopper.tma_load_2d(base + 4 * pad, tmap, 0, 0, bar)
        while hopper.mbar_try_wait(bar, 1) == 0:
            pass
        out[0] = slot[pad]
        while hopper.mbar_try_wait(bar, 0) == 0:
            pass
        out[1] = slot[pad]
        while hopper.mbar_try_wait(bar, 0) == 0:   # the same phase again, before releasing: legal, at once
            pass
        if out.shape[0] > 2:          # released, then waiting for the phase it has already passed
            hopper.mbar_arrive(bar + 8)
            while hopper.mbar_try_wait(bar, 0) == 0:
                pass


@simulator_only
def test_a_wait_that_passes_at_once_does_not_deliver_the_copy():
    """A wait for a parity whose last phase already completed returns at once on the GPU, before the copy
    lands: the twin must not hand the thread the copy's bytes there (it would pass a kernel that reads
    them too early). Waiting again for a phase already passed is harmless before the thread releases the
    slot, and named as a race after."""
    tmap = hopper.tensor_map_2d(cuda.to_device(np.ones((1, 32), np.float32)), 1, 32, "none")
    out = cuda.device_array(2, np.float32)
    _early_wait_kernel[1, 32](tmap, out)
    assert out.copy_to_host().tolist() == [7.0, 1.0]
    with pytest.raises(simulator.SimulatorError, match=r"race: thread 0 waits again for a phase of the mbarrier"):
        _early_wait_kernel[1, 32](tmap, cuda.device_array(3, np.float32))
