"""Kernels of the Hopper chapter: C = A·Bᵀ on Hopper's own instructions (wgmma fed by TMA through
mbarriers), FP16, BF16 and TF32 in, float32 out, beside cuBLAS through torch. The instructions, their
simulator twins and the layout functions are in :mod:`lib.runtime.hopper`.

Layout: A is M × K and B is N × K, both row-major ("K-major", the layout wgmma reads for all three input
types; cuBLAS calls this product TN). 16-bit inputs travel as int16 bit patterns, as in the tensor-core
chapter. Each block computes a 128 × 256 tile of C with two consumer warpgroups (64 × 256 each, one
m64n256 wgmma per 32 bytes of K); tiles of K are 128 bytes wide (64 FP16/BF16 or 32 TF32 values), so one
TMA box row is one 128B-swizzled row, exactly the image wgmma's descriptor names.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
from numba import cuda, int64, uint8

import lib
from lib.grading.check import k_scaled_rtol
from lib.grading.spec import Tolerance
from lib.measure.bench import Baseline, Ladder, Rung
from lib.runtime import hopper
from lib.runtime.dynamic_shared import allow_dynamic_shared
from lib.runtime.mma import b16_values, bf16_bits
from lib.runtime.quiet_launches import quiet
from kernels import triton_baselines

CHAPTER = "hopper"
KINDS = ("f16", "bf16", "tf32")
PRECISION = {"f16": "float16", "bf16": "bfloat16", "tf32": "tf32"}
BM, BN = 128, 256                # block tile of C: two consumer warpgroups of 64 rows, N = 256 each
TILE_K_BYTES = 128               # one 128B-swizzled row of K per operand row and stage
STAGES = 4                       # ring of 4 × 48 KB
A_BYTES, B_BYTES = BM * TILE_K_BYTES, BN * TILE_K_BYTES
STAGE_BYTES = A_BYTES + B_BYTES  # 49152: what one stage's two TMA boxes bring (its expect_tx)
SMEM_BYTES = STAGES * STAGE_BYTES + 1024   # + slack to put the ring on a 1024-byte boundary
N_BARRIERS = 2 * STAGES          # full and empty barrier of each stage (8 bytes each)
GROUP_M = 16                     # tile order: 16 row tiles share the B columns they read (L2 reuse)
SWIZZLE_128B = hopper.SWIZZLE_MODES["128B"]
SBO = 8 * TILE_K_BYTES           # 8-row swizzle atoms, 1024 bytes apart
NACC = BN // 2                   # float32 accumulators per consumer thread


def tile_k(kind: str) -> int:
    return TILE_K_BYTES // hopper.KINDS[kind]


@cuda.jit(device=True)
def tile_of_block(pid, tiles_m, tiles_n):
    """(row tile, column tile) of block pid in grouped order: GROUP_M row tiles walk the columns together."""
    group = GROUP_M * tiles_n
    first_m = (pid // group) * GROUP_M
    size_m = min(tiles_m - first_m, GROUP_M)
    return first_m + (pid % group) % size_m, (pid % group) // size_m


@cuda.jit(device=True)
def issue_stage(tma_a, tma_b, ring, full, slot, kt, m0, n0, k_elems):
    """One thread: announce the stage's bytes on its full barrier and start the two TMA box copies."""
    a_dst = ring + slot * STAGE_BYTES
    bar = full + 8 * slot
    hopper.mbar_arrive_expect_tx(bar, STAGE_BYTES)
    hopper.tma_load_2d(a_dst, tma_a, kt * k_elems, m0, bar)
    hopper.tma_load_2d(a_dst + A_BYTES, tma_b, kt * k_elems, n0, bar)


def _mma_stage(kind):
    """acc += one stage: 4 wgmma m64n256 (32 bytes of K each) on the warpgroup's 64 rows of A and all of B."""
    if kind == "f16":
        wgmma = hopper.wgmma_m64n256k16_f16
    elif kind == "bf16":
        wgmma = hopper.wgmma_m64n256k16_bf16
    else:
        wgmma = hopper.wgmma_m64n256k8_tf32

    @cuda.jit(device=True)
    def mma_stage(ring, slot, consumer, acc):
        a = ring + slot * STAGE_BYTES + consumer * (A_BYTES // 2)
        da = hopper.make_desc(a, 16, SBO, SWIZZLE_128B)
        db = hopper.make_desc(ring + slot * STAGE_BYTES + A_BYTES, 16, SBO, SWIZZLE_128B)
        hopper.wgmma_fence()
        acc = wgmma(da, db, acc)          # +2 in the descriptor = +32 bytes of K inside the swizzle atom
        acc = wgmma(da + 2, db + 2, acc)
        acc = wgmma(da + 4, db + 4, acc)
        acc = wgmma(da + 6, db + 6, acc)
        hopper.wgmma_commit()
        return acc
    return mma_stage


@cuda.jit(device=True)
def ring_base(smem):
    """The shared address of the ring: the dynamic array's start rounded up to 1024 bytes (the swizzle's
    XOR reads absolute address bits, and numba cannot align a shared array)."""
    base = hopper.smem_u32(smem)
    return base + ((1024 - (base & 1023)) & 1023)


@cuda.jit(device=True)
def store_tile(c, acc, m0, n0, consumer, tid):
    """Each thread writes its accumulators where the m64nN fragment puts them (rows/columns beyond C
    are skipped)."""
    lane = tid % 32
    warp = (tid // 32) % 4
    hopper.store_acc(c, acc, m0 + 64 * consumer + 16 * warp + lane // 4, n0 + 2 * (lane % 4))


# --- rung 1: a TMA + mbarrier ring feeding wgmma ---------------------------------------------------------
def make_tma_pipeline_kernel(kind: str):
    k_elems = tile_k(kind)
    mma_stage = _mma_stage(kind)

    @cuda.jit
    def gemm_tma_pipeline(tma_a, tma_b, c, k_tiles):
        """C = A·Bᵀ, one 128 × 256 tile per block: two warpgroups compute; thread 0 keeps STAGES tiles of
        K in flight with TMA, each completing on its stage's mbarrier.

        Memory: A and B arrive by TMA (128 + 256 rows × 128 bytes per stage, 128B-swizzled), C is written
        once from registers. Launch: 1-D grid of ceil(M/128) · ceil(N/256) blocks, 256 threads, SMEM_BYTES
        of dynamic shared memory.
        """
        smem = cuda.shared.array(0, uint8)
        bars = cuda.shared.array(STAGES, int64)
        tid = cuda.threadIdx.x
        consumer = tid // 128
        ring = ring_base(smem)
        full = hopper.smem_u32(bars)
        tm, tn = tile_of_block(cuda.blockIdx.x, (c.shape[0] + BM - 1) // BM, (c.shape[1] + BN - 1) // BN)
        m0, n0 = tm * BM, tn * BN
        if tid == 0:
            hopper.tmap_acquire(tma_a)
            hopper.tmap_acquire(tma_b)
            for s in range(STAGES):
                hopper.mbar_init(full + 8 * s, 1)
            hopper.fence_mbarrier_init()
        cuda.syncthreads()
        if tid == 0:
            for s in range(min(STAGES, k_tiles)):
                issue_stage(tma_a, tma_b, ring, full, s, s, m0, n0, k_elems)
        acc = hopper.zeros_acc(NACC)
        for kt in range(k_tiles):
            slot = kt % STAGES
            while hopper.mbar_try_wait(full + 8 * slot, (kt // STAGES) & 1) == 0:
                pass
            acc = mma_stage(ring, slot, consumer, acc)
            hopper.wgmma_wait(0)
            cuda.syncthreads()            # both warpgroups are done with the slot: refill it
            if tid == 0 and kt + STAGES < k_tiles:
                issue_stage(tma_a, tma_b, ring, full, slot, kt + STAGES, m0, n0, k_elems)
        store_tile(c, acc, m0, n0, consumer, tid)
    return quiet(gemm_tma_pipeline), 256


# --- rung 2: warp specialisation: a producer warpgroup, two consumers, full and empty barriers -------------
def make_warp_specialized_kernel(kind: str, mma_in_flight: bool = False):
    k_elems = tile_k(kind)
    mma_stage = _mma_stage(kind)
    bounds = {} if lib.SIMULATOR else {"launch_bounds": (384, 1)}   # setmaxnreg needs a cap at entry

    @cuda.jit(**bounds)
    def gemm_warp_specialized(tma_a, tma_b, c, k_tiles):
        """C = A·Bᵀ with warpgroup 0 producing (one thread issues TMA, 40 registers) and warpgroups 1-2
        consuming (232 registers): a slot is refilled as soon as its 'empty' barrier says both consumers
        are done with it, with no block-wide barrier in the main loop.

        Launch: as gemm_tma_pipeline with 384 threads.
        """
        smem = cuda.shared.array(0, uint8)
        bars = cuda.shared.array(N_BARRIERS, int64)
        tid = cuda.threadIdx.x
        ring = ring_base(smem)
        full = hopper.smem_u32(bars)
        empty = full + 8 * STAGES
        tm, tn = tile_of_block(cuda.blockIdx.x, (c.shape[0] + BM - 1) // BM, (c.shape[1] + BN - 1) // BN)
        m0, n0 = tm * BM, tn * BN
        if tid == 0:
            hopper.tmap_acquire(tma_a)
            hopper.tmap_acquire(tma_b)
            for s in range(STAGES):
                hopper.mbar_init(full + 8 * s, 1)
                hopper.mbar_init(empty + 8 * s, 8)     # one arrival per consumer warp
            hopper.fence_mbarrier_init()
        cuda.syncthreads()
        if tid < 128:
            hopper.setmaxnreg_dec(40)
            if tid == 0:
                for kt in range(k_tiles):
                    slot = kt % STAGES
                    # parity of the previous round: passes at once in the first round (a fresh barrier)
                    while hopper.mbar_try_wait(empty + 8 * slot, ((kt // STAGES) & 1) ^ 1) == 0:
                        pass
                    issue_stage(tma_a, tma_b, ring, full, slot, kt, m0, n0, k_elems)
        else:
            hopper.setmaxnreg_inc(232)
            consumer = tid // 128 - 1
            acc = hopper.zeros_acc(NACC)
            for kt in range(k_tiles):
                slot = kt % STAGES
                while hopper.mbar_try_wait(full + 8 * slot, (kt // STAGES) & 1) == 0:
                    pass
                acc = mma_stage(ring, slot, consumer, acc)
                if mma_in_flight:             # the previous stage's MMAs are done: release its slot
                    hopper.wgmma_wait(1)
                    if tid % 32 == 0 and kt > 0:
                        hopper.mbar_arrive(empty + 8 * ((kt + STAGES - 1) % STAGES))
                else:
                    hopper.wgmma_wait(0)
                    if tid % 32 == 0:
                        hopper.mbar_arrive(empty + 8 * slot)
            hopper.wgmma_wait(0)
            store_tile(c, acc, m0, n0, consumer, tid)
    return quiet(gemm_warp_specialized), 384


# --- rung 4: a persistent grid: one block per SM walks the tiles, its producer runs ahead into the next ----
def make_persistent_kernel(kind: str):
    k_elems = tile_k(kind)
    mma_stage = _mma_stage(kind)
    bounds = {} if lib.SIMULATOR else {"launch_bounds": (384, 1)}

    @cuda.jit(**bounds)
    def gemm_persistent(tma_a, tma_b, c, k_tiles):
        """gemm_warp_specialized in a grid of one block per SM: each block takes tiles blockIdx.x,
        blockIdx.x + gridDim.x, ... in grouped order, and the ring's counters run on across tiles, so the
        producer fills the ring for the next tile while the consumers store the last one.

        Launch: min(tiles, SMs) blocks of 384 threads, SMEM_BYTES of dynamic shared memory.
        """
        smem = cuda.shared.array(0, uint8)
        bars = cuda.shared.array(N_BARRIERS, int64)
        tid = cuda.threadIdx.x
        ring = ring_base(smem)
        full = hopper.smem_u32(bars)
        empty = full + 8 * STAGES
        tiles_m, tiles_n = (c.shape[0] + BM - 1) // BM, (c.shape[1] + BN - 1) // BN
        if tid == 0:
            hopper.tmap_acquire(tma_a)
            hopper.tmap_acquire(tma_b)
            for s in range(STAGES):
                hopper.mbar_init(full + 8 * s, 1)
                hopper.mbar_init(empty + 8 * s, 8)
            hopper.fence_mbarrier_init()
        cuda.syncthreads()
        if tid < 128:
            hopper.setmaxnreg_dec(40)
            if tid == 0:
                it = 0
                for tile in range(cuda.blockIdx.x, tiles_m * tiles_n, cuda.gridDim.x):
                    tm, tn = tile_of_block(tile, tiles_m, tiles_n)
                    for kt in range(k_tiles):
                        slot = it % STAGES
                        while hopper.mbar_try_wait(empty + 8 * slot, ((it // STAGES) & 1) ^ 1) == 0:
                            pass
                        issue_stage(tma_a, tma_b, ring, full, slot, kt, tm * BM, tn * BN, k_elems)
                        it += 1
        else:
            hopper.setmaxnreg_inc(232)
            consumer = tid // 128 - 1
            it = 0
            for tile in range(cuda.blockIdx.x, tiles_m * tiles_n, cuda.gridDim.x):
                tm, tn = tile_of_block(tile, tiles_m, tiles_n)
                acc = hopper.zeros_acc(NACC)
                for kt in range(k_tiles):
                    slot = it % STAGES
                    while hopper.mbar_try_wait(full + 8 * slot, (it // STAGES) & 1) == 0:
                        pass
                    acc = mma_stage(ring, slot, consumer, acc)
                    hopper.wgmma_wait(0)
                    if tid % 32 == 0:
                        hopper.mbar_arrive(empty + 8 * slot)
                    it += 1
                store_tile(c, acc, tm * BM, tn * BN, consumer, tid)
    return quiet(gemm_persistent), 384


# --- rung 5: the TMA-store epilogue: registers -> shared -> TMA store, overlapped with the next tile ---------
STORE_ROWS, STORE_COLS = 16, 32              # one warp's box of C: 16 rows × 128 bytes, 128B-swizzled
STORE_BOX_BYTES = STORE_ROWS * STORE_COLS * 4
STAGING_BYTES = 8 * 2 * STORE_BOX_BYTES      # two boxes per consumer warp: one fills while one is stored
EPILOGUE_SMEM_BYTES = SMEM_BYTES + STAGING_BYTES


def make_epilogue_kernel(kind: str, cluster: int = 1, arrive_scope: str = "cta"):
    """Rung 5 (cluster = 1) and rung 6 (cluster = 2: two blocks of a cluster share the B tile, each loads
    half of it and multicasts it to both). arrive_scope "cluster" makes the consumers' remote arrivals
    .release.cluster instead of PTX's default (.release.cta): the first version of rung 6, kept to be
    profiled beside it (each such arrival costs a MEMBAR)."""
    if arrive_scope not in ("cta", "cluster"):
        raise ValueError(f"arrive_scope must be 'cta' or 'cluster', got {arrive_scope!r}")
    CTA_SCOPE = arrive_scope == "cta"
    k_elems = tile_k(kind)
    mma_stage = _mma_stage(kind)
    bounds = {} if lib.SIMULATOR else {"launch_bounds": (384, 1)}
    CL = cluster
    B_PART_BYTES, B_PART_ROWS = B_BYTES // CL, BN // CL   # what each block of a cluster loads of B
    EVERY_BLOCK = (1 << CL) - 1                           # multicast mask: every block of the cluster

    @cuda.jit(device=True)
    def release_slot(empty, slot):
        """A consumer warp is done with a slot: arrive on its 'empty' barrier in every block of
        the cluster (each block's producer refills its part of the slot in all of them)."""
        if CL == 1:
            hopper.mbar_arrive(empty + 8 * slot)
        else:
            for r in range(CL):
                if CTA_SCOPE:
                    hopper.mbar_arrive_cluster(hopper.mapa(empty + 8 * slot, r))
                else:
                    hopper.mbar_arrive_cluster_release_cluster(hopper.mapa(empty + 8 * slot, r))

    @cuda.jit(device=True)
    def issue_stage_shared(tma_a, tma_b, ring, full, slot, kt, m0, n0, rank):
        """The producer's stage: its own A box, and its part of the B tile (all of it without a
        cluster), multicast into the same slot of every block of the cluster."""
        a_dst = ring + slot * STAGE_BYTES
        bar = full + 8 * slot
        hopper.mbar_arrive_expect_tx(bar, STAGE_BYTES)    # own A + every block's part of B
        hopper.tma_load_2d(a_dst, tma_a, kt * k_elems, m0, bar)
        if CL == 1:
            hopper.tma_load_2d(a_dst + A_BYTES, tma_b, kt * k_elems, n0, bar)
        else:
            hopper.tma_load_2d_multicast(a_dst + A_BYTES + rank * B_PART_BYTES, tma_b,
                                         kt * k_elems, n0 + rank * B_PART_ROWS, bar,
                                         EVERY_BLOCK)

    # C leaves through shared memory, in boxes a TMA store writes out (rung 5)
    @cuda.jit(device=True)
    def store_tile_tma(tma_c, acc, staging, m0, n0, consumer, tid):
        """Each warp stages its 16 rows of the tile in 8 chunks of 32 columns, alternating two
        boxes, and one lane stores each chunk with TMA; the consumers go on to the next tile while
        the stores drain."""
        lane, warp = tid % 32, (tid // 32) % 4
        boxes = staging + (4 * consumer + warp) * (2 * STORE_BOX_BYTES)
        row = m0 + 64 * consumer + 16 * warp
        for j in range(BN // STORE_COLS):
            box = boxes + (j & 1) * STORE_BOX_BYTES
            if lane == 0:
                hopper.bulk_wait_group_read(1)   # the store of 2 chunks ago has read this box
            cuda.syncwarp()
            hopper.stage_acc_128b(box, acc, j, tid)
            hopper.fence_proxy_async()           # the shared stores, visible to TMA
            cuda.syncwarp()
            if lane == 0:
                hopper.tma_store_2d(tma_c, n0 + STORE_COLS * j, row, box)
                hopper.bulk_commit_group()

    @cuda.jit(**bounds)
    def gemm_tma_store(tma_a, tma_b, tma_c, c, k_tiles):
        """gemm_persistent whose consumers write C through shared memory with TMA stores: a warp stages a
        16 × 32 chunk of its accumulators (128B-swizzled), one lane starts the store, and the next chunk fills
        the other box meanwhile. After the last chunk the consumers start the next tile's MMAs at once, with
        the stores still in flight. With a cluster of 2 the two blocks compute vertically adjacent tiles,
        which read the same B tile: each block loads half of it and multicasts it into both.

        Memory: per stage, a block's TMA brings 16 KB of A and 32 KB of B (16 KB of which its partner loaded
        with a cluster of 2: a third less from L2); C leaves by TMA in 2 KB boxes.
        Launch: persistent, 384 threads, EPILOGUE_SMEM_BYTES of dynamic shared memory; with a cluster of 2,
        an even grid in clusters of (2, 1, 1).
        """
        smem = cuda.shared.array(0, uint8)
        bars = cuda.shared.array(N_BARRIERS, int64)
        tid = cuda.threadIdx.x
        ring = ring_base(smem)
        staging = ring + STAGES * STAGE_BYTES
        full = hopper.smem_u32(bars)
        empty = full + 8 * STAGES
        tiles_m, tiles_n = (c.shape[0] + BM - 1) // BM, (c.shape[1] + BN - 1) // BN
        if CL == 1:
            rank, first, step = 0, cuda.blockIdx.x, cuda.gridDim.x
        else:
            rank, first, step = hopper.cluster_ctarank(), hopper.clusterid_x(), hopper.nclusterid_x()
        rows_of_jobs = (tiles_m + CL - 1) // CL            # a job: CL vertically adjacent tiles
        if tid == 0:
            hopper.tmap_acquire(tma_a)
            hopper.tmap_acquire(tma_b)
            hopper.tmap_acquire(tma_c)
            for s in range(STAGES):
                hopper.mbar_init(full + 8 * s, 1)
                hopper.mbar_init(empty + 8 * s, 8 * CL)   # every consumer warp of the cluster
            hopper.fence_mbarrier_init()
        if CL == 1:
            cuda.syncthreads()
        else:
            hopper.cluster_sync()    # the partner's barriers exist before any multicast or remote arrival
        if tid < 128:
            hopper.setmaxnreg_dec(40)
            if tid == 0:
                it = 0
                for job in range(first, rows_of_jobs * tiles_n, step):
                    jm, tn = tile_of_block(job, rows_of_jobs, tiles_n)
                    for kt in range(k_tiles):
                        slot = it % STAGES
                        while hopper.mbar_try_wait(empty + 8 * slot, ((it // STAGES) & 1) ^ 1) == 0:
                            pass
                        issue_stage_shared(tma_a, tma_b, ring, full, slot, kt, (jm * CL + rank) * BM, tn * BN, rank)
                        it += 1
        else:
            hopper.setmaxnreg_inc(232)
            consumer = tid // 128 - 1
            it = 0
            for job in range(first, rows_of_jobs * tiles_n, step):
                jm, tn = tile_of_block(job, rows_of_jobs, tiles_n)
                acc = hopper.zeros_acc(NACC)
                for kt in range(k_tiles):
                    slot = it % STAGES
                    while hopper.mbar_try_wait(full + 8 * slot, (it // STAGES) & 1) == 0:
                        pass
                    acc = mma_stage(ring, slot, consumer, acc)
                    hopper.wgmma_wait(0)
                    if tid % 32 == 0:
                        release_slot(empty, slot)
                    it += 1
                store_tile_tma(tma_c, acc, staging, (jm * CL + rank) * BM, tn * BN, consumer, tid)
            if tid % 32 == 0:
                hopper.bulk_wait_group(0)        # the last stores have read the staging boxes
        if CL > 1:
            hopper.cluster_sync()    # no block exits while its partner may still arrive on its barriers
    if CL > 1:
        hopper.cluster_dims(gemm_tma_store, (CL, 1, 1))
    return quiet(gemm_tma_store), 384


MAKERS = {"tma_pipeline": make_tma_pipeline_kernel, "warp_specialized": make_warp_specialized_kernel,
          "mma_in_flight": lambda kind: make_warp_specialized_kernel(kind, mma_in_flight=True),
          "persistent": make_persistent_kernel, "tma_store": make_epilogue_kernel,
          "cluster": lambda kind: make_epilogue_kernel(kind, cluster=2)}
# Not a rung of the ladder: rung 6 as first written, profiled beside it (record_extra) to show what a
# cluster-scope release on every arrival costs.
PROFILE_ONLY = {"cluster_release_cluster": lambda kind: make_epilogue_kernel(kind, cluster=2, arrive_scope="cluster")}
PERSISTENT = {"persistent", "tma_store", "cluster", "cluster_release_cluster"}
TMA_STORE = {"tma_store", "cluster", "cluster_release_cluster"}   # rungs whose C leaves through a TMA tensor map
CLUSTER = {"cluster": 2, "cluster_release_cluster": 2}             # launched in clusters of that many blocks (along M)
_KERNELS: dict = {}


def kernel(rung: str, kind: str):
    """(compiled kernel, threads per block) of a rung for an input kind (built once)."""
    makers = {**MAKERS, **PROFILE_ONLY}
    if rung not in makers:
        raise ValueError(f"rung must be one of {sorted(makers)}, got {rung!r}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if (rung, kind) not in _KERNELS:
        _KERNELS[(rung, kind)] = makers[rung](kind)
    return _KERNELS[(rung, kind)]


def _as_operand(x, kind):
    """The device array TMA reads: 16-bit patterns as uint16 (the copy moves bytes), TF32 as float32."""
    want = np.float32 if kind == "tf32" else np.uint16
    if x.dtype.itemsize != np.dtype(want).itemsize:
        raise ValueError(f"{kind} inputs must have {np.dtype(want).itemsize}-byte elements, got {x.dtype}")
    return x if x.dtype == want else x.view(want)


def launch(rung: str, kind: str, a, b, c):
    """C (M × N float32) = A (M × K) · B (N × K)ᵀ with the rung's kernel; any M, N, K with K · item size a
    multiple of 16 bytes (TMA's row rule), edges zero-filled by TMA and masked at the store."""
    (m, k), (n, kb) = a.shape, b.shape
    if k != kb:
        raise ValueError(f"A is {m} × {k} but B is {n} × {kb}: both must be K-major with the same K")
    if tuple(c.shape) != (m, n):
        raise ValueError(f"C must be {m} × {n}, got {tuple(c.shape)}")
    fn, threads = kernel(rung, kind)
    ka = tile_k(kind)
    cl = CLUSTER.get(rung, 1)
    tma_a = hopper.tensor_map_2d(_as_operand(a, kind), BM, ka)
    tma_b = hopper.tensor_map_2d(_as_operand(b, kind), BN // cl, ka)
    k_tiles = (k + ka - 1) // ka
    args, smem = (tma_a, tma_b, c, k_tiles), SMEM_BYTES
    if rung in TMA_STORE:
        if n % 4:
            raise ValueError(f"{rung_name(rung, kind)} stores C with TMA, whose rows must be multiples of 16 bytes: "
                             f"N = {n} float32 is not a multiple of 4")
        args, smem = (tma_a, tma_b, hopper.tensor_map_2d(c, STORE_ROWS, STORE_COLS, "128B"), c, k_tiles), \
            EPILOGUE_SMEM_BYTES
    allow_dynamic_shared(fn, args, smem)
    grid = ((m + BM - 1) // BM) * ((n + BN - 1) // BN)
    if rung in PERSISTENT:      # one block per SM (a cluster's job is cl vertically adjacent tiles)
        sms = cuda.get_current_device().MULTIPROCESSOR_COUNT if lib.ON_GPU else 2
        jobs = ((m + BM * cl - 1) // (BM * cl)) * ((n + BN - 1) // BN)
        grid = cl * min(jobs, sms // cl)
    fn[grid, threads, 0, smem](*args)


# --- the ladder ----------------------------------------------------------------------------------------
def _inputs(kind):
    def make(size, rng):
        m, n, k = size
        a, b = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (n, k)).astype(np.float32)
        if kind == "tf32":
            return a, b
        if kind == "f16":
            return a.astype(np.float16).view(np.int16), b.astype(np.float16).view(np.int16)
        return bf16_bits(a).view(np.int16), bf16_bits(b).view(np.int16)
    return make


def values(kind, x):
    return x.astype(np.float64) if kind == "tf32" else b16_values(x, kind)


def _reference(kind):
    return lambda a, b: values(kind, a) @ values(kind, b).T


def gemm_tolerance(kind):
    """Relative to |A|·|B|ᵀ: float32 accumulation over K terms; TF32 adds its truncated inputs (each within
    2^-10 relative, a product within ~2^-9)."""
    def tolerance(a, b, expected):
        a64, b64 = values(kind, a), values(kind, b)
        rtol = k_scaled_rtol(a64.shape[1])
        note = f"K-scaled: dot products of {a64.shape[1]} terms, relative to |a| @ |b|ᵀ"
        if kind == "tf32":
            rtol, note = max(rtol, 2.0 ** -8), note + "; TF32 inputs truncated to 10-bit mantissas"
        return Tolerance(rtol=rtol, scale=np.abs(a64) @ np.abs(b64).T, note=note)
    return tolerance


def gemm_bytes(kind):
    width = hopper.KINDS[kind]
    return lambda size: width * (size[0] * size[2] + size[1] * size[2]) + 4 * size[0] * size[1]


def gemm_flops(size) -> int:
    m, n, k = size
    return 2 * m * n * k


def _torch_tf32(a, b, c):
    """torch.matmul(a, b.T) with TF32 tensor cores on (cuBLAS)."""
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        torch.matmul(a, b.t(), out=c)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _torch_b16(dtype_name):
    def run(a, b, c):
        """torch.mm(a, b.T) of 16-bit inputs with float32 output (cuBLAS accumulates in float32)."""
        import torch

        dtype = getattr(torch, dtype_name)
        torch.mm(a.view(dtype), b.view(dtype).t(), out_dtype=torch.float32, out=c)
    return run


BASELINES = {
    "f16": Baseline("torch.mm.fp16", _torch_b16("float16"), "cuBLAS, fp16 in, fp32 out", dtype="float16"),
    "bf16": Baseline("torch.mm.bf16", _torch_b16("bfloat16"), "cuBLAS, bf16 in, fp32 out", dtype="bfloat16"),
    "tf32": Baseline("torch.matmul.tf32", _torch_tf32, "cuBLAS, TF32 on", dtype="tf32"),
}
RUNG_NOTES = {"tma_pipeline": "TMA + mbarrier ring, 4 stages, 2 warpgroups",
              "warp_specialized": "+ producer warpgroup, setmaxnreg, empty barriers",
              "mma_in_flight": "+ wgmma_wait(1): one MMA batch stays in flight",
              "persistent": "warp_specialized, one block per SM over all tiles",
              "tma_store": "+ C through shared memory by TMA stores, overlapped",
              "cluster": "+ clusters of 2 along M, B tile multicast to both",
              "cluster_release_cluster": "cluster, its remote arrivals .release.cluster (profiled only)"}


def rung_name(rung: str, kind: str) -> str:
    return f"gemm_{rung}_{kind}"


def _rung(rung, kind):
    def run(a, b, c):
        launch(rung, kind, a, b, c)
    run.__name__ = rung_name(rung, kind)
    return Rung(rung_name(rung, kind), run, RUNG_NOTES[rung], dtype=PRECISION[kind])


SIZES = [(4096, 4096, 4096), (8192, 8192, 8192), (4000, 3000, 4000)]   # the last: ragged edges in M and N
# Simulator: one block, K of 5 tiles (the 4-stage ring wraps), and a ragged block (edges in M, N and K).
SIM_SIZES = {kind: [(BM, BN, 5 * tile_k(kind)), (100, 200, 5 * tile_k(kind) - 8)] for kind in KINDS}


def _triton_matmul(kind):
    def run(a, b, c):
        """Triton's tutorial matmul (kernels.triton_baselines: autotuned, float32 C) on the same A and B:
        A · (Bᵀ), B's transpose a strided view, as cuBLAS reads it."""
        import torch

        precision = PRECISION[kind]
        if kind != "tf32":
            a, b = a.view(getattr(torch, precision)), b.view(getattr(torch, precision))
        triton_baselines.matmul(a, b.t(), c, precision)
    return run


def triton_name(kind: str) -> str:
    return triton_baselines.matmul_name(PRECISION[kind])


def _baselines(kind):
    """cuBLAS; and Triton's tutorial matmul where Triton is installed (else hopper.triton.csv says why)."""
    out = [BASELINES[kind]]
    if triton_baselines.available():
        out.append(Baseline(triton_name(kind), _triton_matmul(kind), "Triton tutorial 03, autotuned, fp32 out",
                            dtype=PRECISION[kind]))
    return out


def _ladder(kind):
    return Ladder(chapter=CHAPTER, topic=f"{kind} gemm", description=f"C = A·Bᵀ, {kind} inputs, float32 out",
                  make_inputs=_inputs(kind), out_shape=lambda a, b: (a.shape[0], b.shape[0]),
                  reference=_reference(kind), bytes=gemm_bytes(kind), flops=gemm_flops, unit="TFLOP/s",
                  sizes=SIZES, sim_sizes=SIM_SIZES[kind], rungs=[_rung(r, kind) for r in MAKERS],
                  baselines=_baselines(kind), tolerance=gemm_tolerance(kind))


LADDERS = [_ladder(kind) for kind in KINDS]


# --- what record_extra writes: each kernel's resources, and Nsight Compute's view -------------------------
PROFILE_SIZE = (4096, 4096, 4096)
TENSOR_PIPE = ["sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
               "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"]
NCU_EXTRA = ["launch__registers_per_thread", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
             "lts__t_sector_hit_rate.pct", *TENSOR_PIPE]


def _one(per_signature):
    return next(iter(per_signature.values())) if isinstance(per_signature, dict) else per_signature


def kernel_resources() -> list[dict]:
    """Per rung and kind (GPU): registers, local bytes, SASS counts, and what ptxas -v says about the PTX
    assembled for sm_90a (the warnings numba's launch path hides: C7510, C7508). Each kernel is checked at
    a ragged size first."""
    import shutil

    from lib.grading.check import compare

    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    rows = []
    for kind in KINDS:
        lad = next(lad for lad in LADDERS if lad.topic == f"{kind} gemm")
        inputs = lad.make_inputs((300, 500, 8 * tile_k(kind)), np.random.default_rng(3))
        expected = lad.reference(*inputs)
        tol = lad.tolerance(*inputs, expected)
        for rung in MAKERS:
            d = [cuda.to_device(x) for x in inputs] + [cuda.device_array(expected.shape, np.float32)]
            launch(rung, kind, *d)
            bad = compare(d[2].copy_to_host(), expected, tol.rtol, tol.atol, tol.scale)
            if bad is not None:
                raise AssertionError(f"{rung_name(rung, kind)} failed its check: {bad.describe()}")
            fn, threads = kernel(rung, kind)
            sass = _one(fn.inspect_sass())
            ptx = _one(fn.inspect_asm()).replace(".target sm_90\n", ".target sm_90a\n")
            rep = hopper.ptxas_report(ptx, ptxas)
            if not rep["ok"] and "version" in rep["error"]:
                rep = hopper.ptxas_report(ptx, ptxas, version="9.0")
            counts = hopper.sass_counts(sass)
            rows.append(dict(kernel=rung_name(rung, kind), threads=threads, registers=int(_one(fn.get_regs_per_thread())),
                             local_bytes=int(_one(fn.get_local_mem_per_thread())),
                             smem_bytes=EPILOGUE_SMEM_BYTES if rung in TMA_STORE else SMEM_BYTES,
                             ptxas_registers=rep["registers"], spill_bytes=rep["spill_bytes"],
                             hidden_warnings="; ".join(rep["hidden"]) or "none",
                             hgmma=sum(v for k, v in counts.items() if k.startswith("HGMMA")),
                             utmaldg=sum(v for k, v in counts.items() if k.startswith("UTMALDG")),
                             syncs=sum(v for k, v in counts.items() if k.startswith("SYNCS")),
                             setmaxreg=sum(v for k, v in counts.items() if k.startswith("USETMAXREG")),
                             ldl_stl=counts.get("LDL", 0) + counts.get("STL", 0),
                             warpgroup_depbar=sum(v for k, v in counts.items() if k.startswith("WARPGROUP.DEPBAR"))))
    return rows


def profiled() -> list[tuple[str, object, bool]]:
    """(name, run, is_torch) of what ncu profiles: every FP16 rung, rung 6 as first written, and cuBLAS."""
    return [(rung_name(r, "f16"), lambda a, b, c, r=r: launch(r, "f16", a, b, c), False)
            for r in [*MAKERS, *PROFILE_ONLY]] + \
        [(BASELINES["f16"].name, BASELINES["f16"].run, True)]


def ncu_workload():
    """Each profiled implementation once at PROFILE_SIZE, after a marker kernel (run under ncu)."""
    from kernels.matmul_profile import profile_marker_kernel
    from lib.measure.bench import torch_views

    args = [cuda.to_device(x) for x in _inputs("f16")(PROFILE_SIZE, np.random.default_rng(0))]
    args.append(cuda.device_array(PROFILE_SIZE[:2], np.float32))
    marker = cuda.device_array(1, np.float32)
    for _, run, is_torch in profiled():
        run(*(torch_views(args) if is_torch else args))   # compile and warm up outside the profiled group
    cuda.synchronize()
    for _, run, is_torch in profiled():
        profile_marker_kernel[1, 1](marker)
        run(*(torch_views(args) if is_torch else args))
    cuda.synchronize()


def record_extra(folder) -> list[Path]:
    """On the GPU: hopper.kernels.csv (resources, SASS counts, ptxas warnings), hopper.triton.csv (what
    autotuning the Triton baseline cost in this run and what it chose, or why it was skipped) and, with ncu,
    hopper.ncu.csv (tensor pipe, issue, stall reasons of every FP16 rung and cuBLAS at 4096³)."""
    import pandas as pd

    from kernels.matmul_profile import by_rung
    from lib.measure.ncu import WARP_STATE, profile
    from lib.measure.results import environment

    if lib.SIMULATOR:
        raise RuntimeError("record_extra measures the GPU: run it with `make record` on a GPU")
    folder = Path(folder)
    env = environment()
    rows = [dict(r, **env) for r in kernel_resources()]
    paths = [folder / f"{CHAPTER}.kernels.csv"]
    with open(paths[0], "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    paths.append(triton_baselines.write_tuning(folder / f"{CHAPTER}.triton.csv", env,
                                               [triton_name(kind) for kind in KINDS]))
    try:
        launches, dropped, _ = profile([sys.executable, "-m", "kernels.hopper", "--ncu-workload"],
                                       WARP_STATE + NCU_EXTRA, cwd=lib.ROOT)
    except (RuntimeError, OSError) as err:
        print(f"hopper: no ncu counters recorded ({str(err)[:300]})")
        return paths
    if dropped:
        print(f"hopper: this ncu does not know {dropped}; recorded without them")
    names = [name for name, _, _ in profiled()]
    ncu_rows = [{"rung": r["rung"], "kernel": r["kernel"], "launches": r["launches"], "metric": metric,
                 "value": value, **env}
                for r in by_rung(launches, names) for metric, value in r["metrics"].items()]
    paths.append(folder / f"{CHAPTER}.ncu.csv")
    pd.DataFrame(ncu_rows).to_csv(paths[-1], index=False, float_format="%.6g")
    return paths


if __name__ == "__main__" and sys.argv[1:] == ["--ncu-workload"]:
    ncu_workload()


# --- the ladder as tables (for the chapter) ---------------------------------------------------------------
KIND_LABELS = {"f16": "FP16", "bf16": "BF16", "tf32": "TF32"}


def ladder_table(df, size="8192x8192x8192", rungs=None):
    """Recorded TFLOP/s of the rungs at `size`, one column per input kind, each with its ratio to cuBLAS
    measured in the same run (a 'cuBLAS' row last). The full ladder (`rungs` None) adds Triton's tutorial
    matmul from the same run, and the best rung's ratio to it. Rungs not recorded are left empty; a run
    recorded without Triton shows '—' there (hopper.triton.csv says why)."""
    import pandas as pd

    values = df[df["size"] == size].set_index("kernel")["value"]
    table = {}
    for kind, label in KIND_LABELS.items():
        base = values.get(BASELINES[kind].name)
        col = {}
        for rung in rungs or list(MAKERS):
            v = values.get(rung_name(rung, kind))
            col[f"{list(MAKERS).index(rung) + 1} {rung}"] = "" if v is None or base is None else f"{v:.0f} ({v / base:.2f}×)"
        col["cuBLAS"] = "" if base is None else f"{base:.0f}"
        if rungs is None:
            tri = values.get(triton_name(kind))
            best = max((values[rung_name(r, kind)] for r in MAKERS if rung_name(r, kind) in values), default=None)
            col["Triton"] = "—" if tri is None or base is None else f"{tri:.0f} ({tri / base:.2f}×)"
            col["best ÷ Triton"] = "—" if tri is None or best is None else f"{best / tri:.2f}×"
        table[label] = col
    out = pd.DataFrame(table)
    out.index.name = f"{size} (TFLOP/s, × cuBLAS)"
    return out


def clocks_note(df, size="8192x8192x8192") -> str:
    """How the recorded rows of one size ran: the SM clock range and the throttle reasons nvidia-smi gave while
    each was timed (columns sm_mhz and throttle of the recording), cuBLAS's and the best FP16 rung's clocks."""
    rows = df[df["size"] == size]
    if rows.empty:
        return f"{size}: not recorded"
    reasons = rows["throttle"].fillna("none").astype(str).value_counts()
    best = max((rung_name(r, "f16") for r in MAKERS if rung_name(r, "f16") in set(rows["kernel"])),
               key=lambda k: float(rows.loc[rows["kernel"] == k, "value"].iloc[0]), default=None)
    clock = rows.set_index("kernel")["sm_mhz"]
    said = ", ".join(f"{n} of {len(rows)} rows {why}" for why, n in reasons.items())
    line = f"{size}: {said}; SM clock {clock.min():.0f}-{clock.max():.0f} MHz"
    if best is not None and BASELINES["f16"].name in clock:
        line += f" (cuBLAS FP16 {clock[BASELINES['f16'].name]:.0f} MHz, {best} {clock[best]:.0f} MHz)"
    return line


def triton_note(folder=None) -> str:
    """What hopper.triton.csv says about the Triton baseline of the recorded run, in lines for the page."""
    return triton_baselines.tuning_summary(
        (Path(folder) if folder else lib.DATA / "results") / f"{CHAPTER}.triton.csv", CHAPTER)


def resources_table(folder=None):
    """The recorded FP16 rungs' registers, spills, SASS counts and the ptxas warnings numba hides."""
    import pandas as pd

    path = (Path(folder) if folder else lib.DATA / "results") / f"{CHAPTER}.kernels.csv"
    df = pd.read_csv(path)
    df = df[df["kernel"].str.endswith("_f16")].set_index("kernel")
    df.index = [k.removeprefix("gemm_").removesuffix("_f16") for k in df.index]
    df = df[["registers", "spill_bytes", "hgmma", "utmaldg", "syncs", "setmaxreg", "hidden_warnings"]]
    return df.rename(columns={"registers": "regs", "spill_bytes": "spills", "hidden_warnings": "warnings"})


def ncu_table(folder=None):
    """Nsight Compute on the FP16 rungs and cuBLAS at 4096³: tensor pipe busy, issue slots used, and the
    two largest stall reasons (warp cycles per issued instruction)."""
    import pandas as pd

    from lib.measure.ncu import STALL_METRIC, STALL_REASONS

    path = (Path(folder) if folder else lib.DATA / "results") / f"{CHAPTER}.ncu.csv"
    wide = pd.read_csv(path).pivot_table(index="rung", columns="metric", values="value")
    rows = {}
    for rung, r in wide.iterrows():
        pipe = next((r[m] for m in TENSOR_PIPE if m in r and not np.isnan(r[m])), np.nan)
        stalls = {s: r.get(STALL_METRIC.format(s), 0.0) for s in STALL_REASONS if s != "selected"}
        top = sorted(stalls.items(), key=lambda kv: -kv[1])[:2]
        rows[rung.removeprefix("gemm_").removesuffix("_f16")] = {
            "tensor pipe %": round(pipe, 1), "µs": round(r["gpu__time_duration.sum"] / 1e3, 1),
            "top stalls": ", ".join(f"{k} {v:.1f}" for k, v in top)}
    order = [*MAKERS, *PROFILE_ONLY, BASELINES["f16"].name]
    return pd.DataFrame(rows).T.reindex([o for o in order if o in rows])
