"""The simulator promises no order the GPU does not (lib.runtime.simulator's schedule, lib.runtime.simdebug's checks between
blocks): blocks and threads run in an order drawn from a seed, a replay replays it, atomics hand out values in
that order, and a block that reads what another block of the same launch wrote (or writes what it read)
without a fence and a flag is a race. The issue's two wrong kernels, which passed for every seed when blocks
and threads ran in index order, are rejected for every seed tried here."""
import numpy as np
import pytest

import lib

pytestmark = pytest.mark.skipif(not lib.SIMULATOR, reason="the simulator's schedule")

if lib.SIMULATOR:
    from numba import cuda, float32, int32

    from lib.grading.grader import grade
    from lib.runtime import gpucompile, simdebug, simulator

SEEDS = (0, 1, 2)


@pytest.fixture(autouse=True)
def debugger_on():
    with simdebug.enabled():
        yield


# --- the order ---------------------------------------------------------------------------------------
if lib.SIMULATOR:
    @cuda.jit
    def stamp_blocks(counter, order):
        """order[block] = the how-many-th block this one was to reach the atomic (one thread per block)."""
        if cuda.threadIdx.x == 0:
            order[cuda.blockIdx.x] = cuda.atomic.add(counter, 0, 1)


def block_order(seed, blocks=12):
    counter, order = np.zeros(1, np.int32), np.zeros(blocks, np.int32)
    with simulator.schedule_seed(seed):
        stamp_blocks[blocks, 4](counter, order)
        record = simulator.last_launch()
    assert [b[0] for b in sorted(record.blocks, key=lambda b: order[b[0]])] == [b[0] for b in record.blocks]
    return order.tolist()


def test_blocks_run_in_an_order_drawn_from_the_seed_and_a_replay_replays_it():
    first = block_order(5)
    assert sorted(first) == list(range(12)) and first != list(range(12))  # every block once, not index order
    assert block_order(5) == first
    assert len({tuple(block_order(seed)) for seed in range(6)}) == 6


def test_a_schedule_counts_its_launches_and_restores_the_one_before():
    outer = simulator.current_schedule()
    with simulator.schedule_seed([7, 3]) as schedule:
        assert simulator.current_schedule() is schedule and schedule.launches == 0
        stamp_blocks[2, 1](np.zeros(1, np.int32), np.zeros(2, np.int32))
        stamp_blocks[2, 1](np.zeros(1, np.int32), np.zeros(2, np.int32))
        assert schedule.launches == 2 and simulator.last_launch().index == 1
        assert simulator.last_launch().seed == [7, 3]
    assert simulator.current_schedule() is outer


@pytest.mark.parametrize("seed", [-1, 1.5, "3", [], [1, -2], True])
def test_a_bad_seed_is_refused_by_name(seed):
    with pytest.raises(ValueError, match="a schedule seed is a non-negative integer"):
        simulator.set_schedule_seed(seed)


def test_an_error_names_its_schedule_and_the_replay_fails_the_same_way():
    @cuda.jit
    def fails_in_one_block(out):
        if cuda.blockIdx.x == 3 and cuda.threadIdx.x == 1:
            out[0] = out[-1]  # a negative index: refused
        out[1] = 1.0

    def run():
        with simulator.schedule_seed(11), pytest.raises(IndexError) as err:
            fails_in_one_block[6, 2](np.zeros(4, np.float32))
        return err.value

    err = run()
    note = "\n".join(err.__notes__)
    assert "simulator schedule: seed 11, launch 0 of that schedule" in note
    assert "lib.runtime.simulator.schedule_seed(11)" in note and "tid=[1, 0, 0] ctaid=[3, 0, 0]" in str(err)
    assert run().__notes__ == err.__notes__


def test_atomics_hand_out_values_in_the_simulated_order_not_the_index_order():
    @cuda.jit
    def claim_slots(x, out, counter):
        i = cuda.grid(1)
        if i < x.size:
            out[cuda.atomic.add(counter, 0, 1)] = x[i]

    x = np.arange(300, dtype=np.float32)
    seen = []
    for seed in SEEDS:
        out, counter = np.zeros(300, np.float32), np.zeros(1, np.int32)
        with simulator.schedule_seed(seed):
            claim_slots[3, 128](x, out, counter)
        assert counter[0] == 300 and sorted(out) == list(x)  # every value once, each in a slot of its own
        assert not (out == x).all()
        seen.append(out.tolist())
    assert seen[0] != seen[1] != seen[2]
    # within one warp too: lanes are not served in lane order
    out, counter = np.zeros(32, np.float32), np.zeros(1, np.int32)
    with simulator.schedule_seed(0):
        claim_slots[1, 32](x[:32].copy(), out, counter)
    assert sorted(out) == list(x[:32]) and not (out == x[:32]).all()


# --- races between blocks ----------------------------------------------------------------------------
if lib.SIMULATOR:
    @cuda.jit
    def neighbour_block_value(x, out):
        """Block b copies x into out, then reads out at the first element of block b + 1's part."""
        i = cuda.grid(1)
        out[i] = x[i]
        cuda.syncthreads()
        j = (cuda.blockIdx.x + 1) * cuda.blockDim.x
        if cuda.threadIdx.x == 0 and j < out.size:
            x[i] = out[j]


@pytest.mark.parametrize("seed", SEEDS)
def test_reading_what_another_block_wrote_is_a_race_in_either_order(seed):
    x = np.arange(128, dtype=np.float32)
    with simulator.schedule_seed(seed), pytest.raises(simdebug.RaceError) as err:
        neighbour_block_value[4, 32](x, np.zeros(128, np.float32))
    message = str(err.value)
    assert "global-memory race between blocks" in message and "out[" in message
    assert "cuda.threadfence()" in message and "in different blocks" in message
    assert ("reads out[" in message) or ("writes out[" in message)


if lib.SIMULATOR:
    @cuda.jit(device=True)
    def _publish(values, status, tile, value, fence):
        values[tile] = value
        if fence:
            cuda.threadfence()
        cuda.atomic.exch(status, tile, 1)

    @cuda.jit
    def chained_sum(x, prefix, status, ticket, fence_writer, fence_reader):
        """prefix[k] = x[0] + ... + x[k], one tile (block) each, tiles numbered by an atomic ticket; tile k
        waits for tile k - 1's flag, then reads its prefix with a plain load."""
        if cuda.threadIdx.x != 0:
            return
        tile = cuda.atomic.add(ticket, 0, 1)
        carry = float32(0)
        if tile > 0:
            while cuda.atomic.add(status, tile - 1, 0) == 0:
                pass
            if fence_reader:
                cuda.threadfence()
            carry = prefix[tile - 1]
        _publish(prefix, status, tile, carry + x[tile], fence_writer)


@pytest.mark.parametrize("fence_writer, fence_reader", [(True, True), (True, False), (False, True), (False, False)])
def test_a_value_published_with_a_fence_and_a_flag_is_no_race_without_the_fence_it_is(fence_writer, fence_reader):
    """The writer must fence between the value and the flag; the reader's atomic read of the flag counts as
    its synchronisation (as in the CUDA guide's last-block sum, which reads the partials after an atomic,
    without a fence of its own), so the reader's fence is not required."""
    x = np.arange(1, 9, dtype=np.float32)

    def run():
        prefix = np.full(8, np.nan, np.float32)
        chained_sum[8, 32](x, prefix, np.zeros(8, np.int32), np.zeros(1, np.int32), fence_writer, fence_reader)
        return prefix

    if fence_writer:
        for seed in SEEDS:
            with simulator.schedule_seed(seed):
                np.testing.assert_array_equal(run(), np.cumsum(x))
    else:
        with pytest.raises(simdebug.RaceError, match="global-memory race between blocks"):
            run()


def test_blocks_writing_the_same_value_are_not_a_race_different_values_are():
    @cuda.jit
    def found_flag(x, flag):
        if x[cuda.grid(1)] > 0:
            flag[0] = 1               # every block that finds one writes the same value: benign

    @cuda.jit
    def last_block_wins(flag):
        flag[0] = cuda.blockIdx.x    # different values: which one is left depends on the order

    flag = np.zeros(1, np.int32)
    found_flag[4, 32](np.ones(128, np.float32), flag)
    assert flag[0] == 1
    with pytest.raises(simdebug.RaceError, match="write different values to flag"):
        last_block_wins[4, 32](flag)


# --- the two wrong kernels -------------------------------------------------------------------
SUFFIX_TILE = 128

if lib.SIMULATOR:
    @cuda.jit
    def suffix_scan_carry_from_out(x, out):
        """A single-pass suffix scan: block b scans tile nblocks - 1 - b in shared memory and takes its
        carry from out at the start of the next tile, written by another block, with no flag: the last
        tile runs in block 0, so in index order the carry is always there; on a GPU it may be NaN."""
        s = cuda.shared.array(SUFFIX_TILE, float32)
        t = cuda.threadIdx.x
        tile = cuda.gridDim.x - 1 - cuda.blockIdx.x
        i = tile * SUFFIX_TILE + t
        s[t] = x[i] if i < x.size else float32(0)
        cuda.syncthreads()
        offset = 1
        while offset < SUFFIX_TILE:
            v = s[t]
            if t + offset < SUFFIX_TILE:
                v += s[t + offset]
            cuda.syncthreads()
            s[t] = v
            cuda.syncthreads()
            offset *= 2
        carry = float32(0)
        following = (tile + 1) * SUFFIX_TILE
        if following < x.size:
            carry = out[following]          # BUG: another block's output, read without a flag
        if i < x.size:
            out[i] = s[t] + carry

    def scan_reverse_single_pass(x, out):
        blocks = (x.size + SUFFIX_TILE - 1) // SUFFIX_TILE
        suffix_scan_carry_from_out[blocks, SUFFIX_TILE](x, out)

    @cuda.jit
    def fill_zero(out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = 0.0

    @cuda.jit
    def compact_by_atomic_slots(x, out, counter):
        i = cuda.grid(1)
        if i < x.size and x[i] > 0:
            out[cuda.atomic.add(counter, 0, 1)] = x[i]   # BUG: slots in the order threads get there

    def compact_positive_atomic(x, out):
        blocks = (x.size + 255) // 256
        fill_zero[blocks, 256](out)
        compact_by_atomic_slots[blocks, 256](x, out, cuda.to_device(np.zeros(1, np.int32)))


def _grade_twice(exercise, fn, seed):
    reports = []
    for _ in range(2):
        with simulator.schedule_seed(seed), gpucompile.unchecked():
            reports.append(grade(exercise, fn, seed=seed))
    return reports


def _case_messages(report):
    return [(c.size, c.passed, c.message) for c in report.cases]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_suffix_scan_reading_its_carry_from_another_blocks_output_is_rejected(seed):
    first, again = _grade_twice("scan_reverse", scan_reverse_single_pass, seed)
    assert not first.passed
    failed = [c for c in first.cases if not c.passed]
    assert failed and "global-memory race between blocks" in failed[0].message
    assert _case_messages(again) == _case_messages(first)  # the same seed replays the same schedule


@pytest.mark.parametrize("seed", SEEDS)
def test_compaction_through_atomic_slots_is_rejected(seed):
    first, again = _grade_twice("compact_positive", compact_positive_atomic, seed)
    assert not first.passed and not any(c.raised for c in first.cases)  # wrong values, no error
    assert _case_messages(again) == _case_messages(first)


# --- kernels that take `cuda` through a closure, forall -----------------------------------------------
def test_a_kernel_that_takes_cuda_through_a_closure_runs_as_on_a_gpu():
    """GPU-Puzzles hands numba.cuda to a factory; the kernel reaches it through a closure cell."""
    import numba

    def map_test(cuda):
        def call(out, a, size):
            local_i = cuda.threadIdx.x
            if local_i < size:
                out[local_i] = a[local_i] + 10

        return call

    kernel = numba.cuda.jit(map_test(numba.cuda))
    a = np.arange(4, dtype=np.float32)
    out = np.zeros(4, np.float32)
    with gpucompile.unchecked():
        kernel[1, 8](out, a, 4)
    np.testing.assert_array_equal(out, a + 10)
    assert kernel.py_func.__closure__[0].cell_contents is numba.cuda  # restored after the launch


def test_forall_of_zero_tasks_launches_nothing_as_on_a_gpu():
    @cuda.jit
    def add_one(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] += 1

    x = np.zeros(5, np.float32)
    add_one.forall(0)(x)
    assert (x == 0).all()
    add_one.forall(5)(x)
    assert (x == 1).all()
    with pytest.raises(ValueError, match="negative task count"):
        add_one.forall(-1)
