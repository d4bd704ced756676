"""Clusters (lib.runtime.hopper.cluster_dims), DSMEM, the cluster barrier, TMA multicast and TMA stores, on
whatever this process runs on: the simulator here, the GPU on the H200 (the hand cases pass there too, which
is the check that the twins and the hardware agree). The misuse tests are the simulator's own: on a GPU
those kernels hang or read garbage."""
import numpy as np
import pytest
from numba import cuda, int64, uint8, uint32

import lib
from lib.runtime import hopper, simulator

simulator_only = pytest.mark.skipif(lib.ON_GPU, reason="the simulator's diagnostics (this kernel hangs a GPU)")


def _exchange_kernel():
    @cuda.jit
    def exchange(out):
        """Clusters of 2 blocks of 32 threads: each block fills its shared words, then every thread reads
        its partner's word through mapa, writes one into the partner's second array, and reads back its own."""
        mine = cuda.shared.array(32, uint32)
        inbox = cuda.shared.array(32, uint32)
        tid = cuda.threadIdx.x
        rank = hopper.cluster_ctarank()
        mine[tid] = 1000 * cuda.blockIdx.x + tid
        inbox[tid] = 0
        hopper.cluster_sync()
        other = rank ^ 1
        seen = hopper.ld_cluster_u32(hopper.mapa(hopper.smem_u32(mine) + 4 * tid, other))
        hopper.st_cluster_u32(hopper.mapa(hopper.smem_u32(inbox) + 4 * tid, other), 7 * cuda.blockIdx.x + tid)
        hopper.cluster_sync()        # the partner's stores have landed, and nobody exits while others read
        b = cuda.blockIdx.x
        out[b, tid, 0] = rank
        out[b, tid, 1] = hopper.cluster_nctarank()
        out[b, tid, 2] = hopper.clusterid_x()
        out[b, tid, 3] = hopper.nclusterid_x()
        out[b, tid, 4] = seen
        out[b, tid, 5] = inbox[tid]
    return hopper.cluster_dims(exchange, (2, 1, 1))


def test_cluster_ranks_dsmem_and_the_cluster_barrier():
    out = cuda.to_device(np.zeros((4, 32, 6), np.uint32))
    _exchange_kernel()[4, 32](out)
    o = out.copy_to_host()
    for b in range(4):
        partner = b ^ 1
        assert (o[b, :, 0] == b % 2).all() and (o[b, :, 1] == 2).all()
        assert (o[b, :, 2] == b // 2).all() and (o[b, :, 3] == 2).all()
        assert o[b, :, 4].tolist() == [1000 * partner + t for t in range(32)]
        assert o[b, :, 5].tolist() == [7 * partner + t for t in range(32)]


def test_cluster_dims_are_checked():
    with pytest.raises(ValueError, match="at most 8"):
        hopper.cluster_dims((4, 3, 1))
    with pytest.raises(ValueError, match="positive integers"):
        hopper.cluster_dims((0, 1, 1))
    kern = _exchange_kernel()
    with pytest.raises(ValueError, match=r"grid.x = 3 is not a multiple of 2"):
        kern[3, 32](cuda.to_device(np.zeros((3, 32, 6), np.uint32)))


def _multicast_kernel(mask_of_rank1=3, init_late=False):
    @cuda.jit
    def multicast(tmap, out):
        """Clusters of 2: block rank r loads rows 8r..8r+7 of a 16 × 32 float32 tensor and multicasts them
        to the CTAs of its mask; each block's mbarrier expects the whole 2 KB, then each block copies its
        tile out. With init_late, rank 1 initialises its barrier only after the first cluster barrier (too
        late: rank 0 may already have multicast into it)."""
        tile = cuda.shared.array(1024, np.float32)          # 4 KB: 2 KB of tile on a 128-byte boundary
        bars = cuda.shared.array(1, int64)
        tid = cuda.threadIdx.x
        rank = hopper.cluster_ctarank()
        base = hopper.smem_u32(tile)
        pad = (128 - (base & 127)) & 127
        bar = hopper.smem_u32(bars)
        if tid == 0 and not (init_late and rank == 1):
            hopper.mbar_init(bar, 1)
            hopper.fence_mbarrier_init()
        if init_late and rank == 0 and tid == 0:
            hopper.mbar_arrive_expect_tx(bar, 2048)
            hopper.tma_load_2d_multicast(base + pad, tmap, 0, 0, bar, 3)
        hopper.cluster_sync()
        if init_late and rank == 1 and tid == 0:
            hopper.mbar_init(bar, 1)
        if not init_late and tid == 0:
            hopper.mbar_arrive_expect_tx(bar, 2048)
            mask = 3 if rank == 0 else mask_of_rank1
            hopper.tma_load_2d_multicast(base + pad + 1024 * rank, tmap, 0, 8 * rank, bar, mask)
        while hopper.mbar_try_wait(bar, 0) == 0:
            pass
        for i in range(tid, 512, 32):
            out[cuda.blockIdx.x, i] = tile[pad // 4 + i]
        hopper.cluster_sync()
    return hopper.cluster_dims(multicast, (2, 1, 1))


def _run_multicast(**kw):
    x = np.arange(16 * 32, dtype=np.float32).reshape(16, 32)
    tmap = hopper.tensor_map_2d(cuda.to_device(x), 8, 32, "none")
    out = cuda.to_device(np.full((2, 512), -1, np.float32))
    _multicast_kernel(**kw)[2, 32](tmap, out)
    return x, out.copy_to_host()


def test_a_multicast_lands_in_every_block_and_completes_each_ones_barrier():
    """Each block issued half the rows; both must see the whole tensor (a twin that wrote only the issuing
    block, or counted the bytes only on its barrier, would leave each block half a tile or starve it)."""
    x, out = _run_multicast()
    assert (out[0] == x.reshape(-1)).all() and (out[1] == x.reshape(-1)).all()


@simulator_only
def test_a_multicast_that_misses_a_block_starves_its_barrier_by_name():
    with pytest.raises(simulator.DeadlockError, match=r"expect_tx 2048 bytes, 1024 delivered: 1024 bytes missing"):
        _run_multicast(mask_of_rank1=2)


@simulator_only
def test_a_mask_naming_a_block_outside_the_cluster_is_refused():
    with pytest.raises(simulator.SimulatorError, match=r"CTA mask 0b101 names block rank 2, but the cluster has 2"):
        _run_multicast(mask_of_rank1=5)


@simulator_only
def test_a_multicast_before_the_partner_initialised_its_barrier_is_named():
    with pytest.raises(simulator.SimulatorError, match=r"block rank 1 of the cluster has no mbarrier at shared "
                       r"0x[0-9a-f]+ yet: .*cluster_sync\(\) before any block multicasts into it"):
        _run_multicast(init_late=True)


@simulator_only
def test_a_cluster_barrier_that_not_all_threads_reach_deadlocks_by_name():
    @cuda.jit
    def one_leaves(out):
        if hopper.cluster_ctarank() == 1 and cuda.threadIdx.x == 5:
            return
        hopper.cluster_sync()
        out[cuda.blockIdx.x] = 1
    hopper.cluster_dims(one_leaves, (2, 1, 1))
    with pytest.raises(simulator.DeadlockError, match=r"(?s)deadlock in the cluster of blocks .*cluster_wait: phase 0 of "
                       r"the cluster barrier has 63 of 64 arrivals"):
        one_leaves[2, 32](cuda.device_array(2, np.float32))


@simulator_only
def test_a_cluster_wait_without_arrive_is_named():
    @cuda.jit
    def wait_only(out):
        hopper.cluster_wait()
        out[0] = 1
    hopper.cluster_dims(wait_only, (2, 1, 1))
    with pytest.raises(simulator.SimulatorError, match="waits without a cluster_arrive before it"):
        wait_only[2, 32](cuda.device_array(1, np.float32))


@simulator_only
def test_the_blocks_of_a_cluster_run_co_resident():
    """Block rank 0 waits on an mbarrier of its own that only block rank 1 arrives on, remotely: blocks
    run one after another would deadlock here (rank 0 could start first and wait forever)."""
    @cuda.jit
    def handshake(out):
        bars = cuda.shared.array(1, int64)
        bar = hopper.smem_u32(bars)
        rank = hopper.cluster_ctarank()
        if cuda.threadIdx.x == 0:
            hopper.mbar_init(bar, 1)
            hopper.fence_mbarrier_init()
        hopper.cluster_sync()
        if rank == 1 and cuda.threadIdx.x == 0:
            hopper.mbar_arrive_cluster(hopper.mapa(bar, 0))
        if rank == 0:
            while hopper.mbar_try_wait(bar, 0) == 0:
                pass
            out[cuda.threadIdx.x] = 1
        hopper.cluster_sync()
    hopper.cluster_dims(handshake, (2, 1, 1))
    for seed in range(3):
        out = cuda.to_device(np.zeros(32, np.float32))
        with simulator.schedule_seed(seed):
            handshake[2, 32](out)
        assert (out.copy_to_host() == 1).all()


def _store_kernel(reuse_early=False, wait=True):
    @cuda.jit
    def store(tmap, out):
        """One warp: stages a 16 × 32 float32 box (value 1 + element index) in shared memory and stores it
        with TMA at (column 0, row 8) of `out`; with reuse_early, the box is overwritten with -1 before the
        read wait."""
        buf = cuda.shared.array(1024, np.float32)
        tid = cuda.threadIdx.x
        base = hopper.smem_u32(buf)
        pad = (1024 - (base & 1023)) & 1023      # 512 floats fit past any 1 KB boundary of 4 KB
        for i in range(tid, 512, 32):
            buf[pad // 4 + i] = 1.0 + i
        hopper.fence_proxy_async()
        cuda.syncwarp()
        if tid == 0:
            hopper.tma_store_2d(tmap, 0, 8, base + pad)
            hopper.bulk_commit_group()
        if reuse_early:
            cuda.syncwarp()
            for i in range(tid, 512, 32):
                buf[pad // 4 + i] = -1.0
            cuda.syncwarp()
        if tid == 0 and wait:
            hopper.bulk_wait_group_read(0)
            hopper.bulk_wait_group(0)
    return store


def _run_store(**kw):
    out = cuda.to_device(np.zeros((20, 40), np.float32))      # the box's last 4 rows fall outside: clipped
    tmap = hopper.tensor_map_2d(out, 16, 32, "none")
    _store_kernel(**kw)[1, 32](tmap, out)
    return out.copy_to_host()


def test_a_tma_store_writes_its_box_and_clips_it_to_the_tensor():
    out = _run_store()
    want = np.zeros((20, 40), np.float32)
    want[8:20, :32] = 1.0 + np.arange(512, dtype=np.float32).reshape(16, 32)[:12]
    assert (out == want).all()


@simulator_only
def test_a_staging_buffer_rewritten_before_the_read_wait_is_what_gets_stored():
    """The twin reads the source when the group is waited for, the latest moment the hardware may: a kernel
    that reuses the buffer too early stores the new bytes (as it may on a GPU)."""
    assert (_run_store(reuse_early=True)[8:20, :32] == -1).all()


@simulator_only
def test_a_block_ending_with_stores_in_flight_is_named():
    with pytest.raises(simulator.SimulatorError, match=r"still has 1 TMA store\(s\) in flight"):
        _run_store(wait=False)
