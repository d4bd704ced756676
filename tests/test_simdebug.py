"""The simulator's debugger (lib/runtime/simdebug.py): it catches uninitialised shared/local reads, shared-memory
barrier races and global read-modify-write races, naming lines and threads; and it stays silent on correct
code: warp-synchronous accesses, atomics, reads after a barrier, a thread's own writes, later launches, the
book's kernels and the exercise solutions."""
import inspect
import re

import numpy as np
import pytest

import lib

pytestmark = pytest.mark.skipif(not lib.SIMULATOR, reason="the debugger is part of the simulator")

if lib.SIMULATOR:
    from numba import cuda, float32, int32

    from lib.runtime import gpucompile
    from lib.runtime import simdebug, simulator
    from lib.runtime.simulator import SimulatorError

    import kernels.debugging as D


@pytest.fixture(autouse=True)
def debugger_on():
    """Every test runs with the debugger on and without the GPU-compile check (its own tests cover it)."""
    with simdebug.enabled(), gpucompile.unchecked():
        yield


def line_of(kernel, text: str) -> int:
    """The file line number of the first line of `kernel`'s source containing `text`."""
    lines, start = inspect.getsourcelines(kernel.py_func)
    return start + next(k for k, line in enumerate(lines) if text in line)


# --- uninitialised memory ----------------------------------------------------------------------------
def test_uninitialised_shared_read_names_line_block_thread_and_array():
    with pytest.raises(simdebug.UninitializedReadError) as err:
        D.launch("block_sum_unguarded_tail")
    message = str(err.value)
    last_block = (D.N - 1) // D.THREADS
    assert f"of block ({last_block}, 0, 0)" in message
    assert f"debugging.py:{line_of(D.block_sum_unguarded_tail, 'cache[t] += cache[t + s]')}" in message
    assert re.search(r"read cache\[\d+\], which no thread of this block has written", message)
    assert isinstance(err.value, SimulatorError)


def test_the_fixed_kernels_are_silent_and_right():
    for name in ("block_sum", "scan_one_buffer", "sum_into_one_atomic"):
        got, expected = D.launch(name)
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_each_block_has_its_own_shared_memory():
    """Block 1 must not see what block 0 stored (numba's simulator shares one array per launch)."""
    @cuda.jit
    def only_block_zero_stores(out):
        s = cuda.shared.array(32, float32)
        if cuda.blockIdx.x == 0:
            s[cuda.threadIdx.x] = 1.0
        cuda.syncthreads()
        out[cuda.grid(1)] = s[cuda.threadIdx.x]

    out = cuda.to_device(np.zeros(64, np.float32))
    with pytest.raises(simdebug.UninitializedReadError, match=r"of block \(1, 0, 0\)"):
        only_block_zero_stores[2, 32](out)


def test_shared_and_local_arrays_start_poisoned_and_local_reads_are_checked():
    @cuda.jit
    def peek(out_f, out_i):
        f = cuda.shared.array(4, float32)
        i = cuda.shared.array(4, int32)
        out_f[0] = np.asarray(f)[0]   # a whole-array view: not checked, shows the poison
        out_i[0] = np.asarray(i)[0]

    out_f = cuda.to_device(np.zeros(1, np.float32))
    out_i = cuda.to_device(np.zeros(1, np.int32))
    peek[1, 1](out_f, out_i)
    assert np.isnan(out_f.copy_to_host()[0])
    assert out_i.copy_to_host()[0] == np.array(simdebug.POISON_INT, np.uint32).view(np.int32)

    @cuda.jit
    def local_half_written(out):
        acc = cuda.local.array(4, float32)
        for k in range(3):
            acc[k] = k
        total = float32(0)
        for k in range(4):
            total += acc[k]
        out[0] = total

    with pytest.raises(simdebug.UninitializedReadError, match=r"read acc\[3\], which this thread has not"):
        local_half_written[1, 1](cuda.to_device(np.zeros(1, np.float32)))


def test_dynamic_shared_memory_is_per_block_and_shared_between_views():
    @cuda.jit
    def dynamic(out):
        f = cuda.shared.array(0, float32)
        t = cuda.threadIdx.x
        f[t] = float32(t + cuda.blockIdx.x)
        cuda.syncthreads()
        bits = cuda.shared.array(0, int32)          # the same bytes, read as int32
        out[cuda.grid(1)] = bits[(t + 1) % cuda.blockDim.x]

    out = cuda.to_device(np.zeros(64, np.int32))
    dynamic[2, 32, 0, 32 * 4](out)
    expected = np.concatenate([(np.roll(np.arange(32), -1) + b).astype(np.float32).view(np.int32)
                               for b in range(2)])
    np.testing.assert_array_equal(out.copy_to_host(), expected)

    @cuda.jit
    def dynamic_unwritten(out):
        f = cuda.shared.array(0, float32)
        if cuda.threadIdx.x < 16:
            f[cuda.threadIdx.x] = 1.0
        cuda.syncthreads()
        out[cuda.threadIdx.x] = f[cuda.threadIdx.x]

    with pytest.raises(simdebug.UninitializedReadError, match="dynamic shared memory"):
        dynamic_unwritten[1, 32, 0, 32 * 4](cuda.to_device(np.zeros(32, np.float32)))


def test_views_slices_and_whole_array_operations_keep_working():
    @cuda.jit
    def through_views(out):
        tile = cuda.shared.array((4, 8), float32)
        flat = cuda.shared.array(32, float32)
        t = cuda.threadIdx.x
        row = tile[t // 8]
        row[t % 8] = t                  # a write through a row view counts for tile[t // 8, t % 8]
        if t == 0:
            flat[:] = 1.0               # a slice write by one thread
        cuda.syncthreads()
        out[t] = tile[t // 8, t % 8] + flat[t] + tile.sum() - tile[0].sum()

    out = cuda.to_device(np.zeros(32, np.float32))
    through_views[1, 32](out)
    t = np.arange(32)
    np.testing.assert_array_equal(out.copy_to_host(), t + 1 + t.sum() - t[:8].sum())


# --- shared-memory races -----------------------------------------------------------------------------
def test_hillis_steele_without_its_second_barrier_is_a_race_with_both_lines():
    with pytest.raises(simdebug.RaceError) as err:
        D.launch("scan_one_buffer_racy")
    message = str(err.value)
    write = line_of(D.scan_one_buffer_racy, "temp[t] = value")
    read = line_of(D.scan_one_buffer_racy, "value += temp[t - offset]")
    assert f"debugging.py:{write}" in message and f"debugging.py:{read}" in message
    assert "cuda.syncthreads()" in message and "shared-memory race on temp[" in message
    assert len(set(re.findall(r"thread \((\d+), 0, 0\)", message))) == 2  # two different threads


def test_write_after_read_in_one_interval_is_a_race():
    @cuda.jit
    def rotate(out):
        s = cuda.shared.array(64, float32)
        t = cuda.threadIdx.x
        s[t] = t
        cuda.syncthreads()
        left = s[(t + 1) % 64]
        s[t] = left            # another thread may not have read s[t] yet
        out[t] = left

    # whichever of the two threads the schedule runs first, the other's access is the race
    with pytest.raises(simdebug.RaceError, match=r"(reads\s+it at .*\n.*writes|writes\s+it at .*\n.*reads)\s+it at"):
        rotate[1, 64](cuda.to_device(np.zeros(64, np.float32)))


def test_warp_synchronous_code_is_not_a_race_but_an_unordered_warp_is():
    @cuda.jit
    def neighbours_after_syncwarp(out):
        s = cuda.shared.array(64, float32)
        t = cuda.threadIdx.x
        s[t] = t
        cuda.syncwarp(0xFFFFFFFF)                 # orders the lanes of each warp, not the two warps
        v = s[t ^ 1]                              # a neighbour in the same warp
        v += cuda.shfl_xor_sync(0xFFFFFFFF, v, 16)
        s[t ^ 16] = v                             # after the shuffle: lane t ^ 16 has read its s[t ^ 1]
        out[t] = v

    out = cuda.to_device(np.zeros(64, np.float32))
    neighbours_after_syncwarp[1, 64](out)
    lanes = np.arange(64)
    np.testing.assert_array_equal(out.copy_to_host(), (lanes ^ 1) + ((lanes ^ 16) ^ 1))

    @cuda.jit
    def neighbours_without_syncwarp(out):
        s = cuda.shared.array(64, float32)
        t = cuda.threadIdx.x
        s[t] = t
        out[t] = s[t - 1] if t > 0 else float32(0)   # lane t - 1 of the same warp wrote it just before

    # lane t - 1 may run before lane t (a race) or after it (a read of memory not written yet): either is
    # reported, whichever order the schedule's seed gives, and both name cuda.syncwarp
    for seed in range(4):
        with simulator.schedule_seed(seed), pytest.raises(
                (simdebug.RaceError, simdebug.UninitializedReadError), match="cuda.syncwarp"):
            neighbours_without_syncwarp[1, 64](cuda.to_device(np.zeros(64, np.float32)))

    @cuda.jit
    def across_warps_after_syncwarp(out):
        s = cuda.shared.array(64, float32)
        t = cuda.threadIdx.x
        s[t] = t
        cuda.syncwarp(0xFFFFFFFF)                 # does not order warp 0 against warp 1
        out[t] = s[(t + 32) % 64]

    with pytest.raises(simdebug.RaceError):
        across_warps_after_syncwarp[1, 64](cuda.to_device(np.zeros(64, np.float32)))


def test_no_false_alarms_own_writes_barriers_atomics_same_value():
    @cuda.jit
    def careful(x, out):
        s = cuda.shared.array(64, float32)
        flag = cuda.shared.array(1, int32)
        counter = cuda.shared.array(1, int32)
        t = cuda.threadIdx.x
        s[t] = x[t]
        s[t] += 1.0                 # re-reading its own write
        if t == 0:
            counter[0] = 0
        flag[0] = 7                 # every thread writes the same value: benign
        cuda.syncthreads()
        cuda.atomic.add(counter, 0, 1)
        v = s[63 - t] + flag[0]     # other threads' writes, after the barrier
        cuda.syncthreads()
        out[t] = v + counter[0]

    x = np.arange(64, dtype=np.float32)
    out = cuda.to_device(np.zeros(64, np.float32))
    careful[1, 64](cuda.to_device(x), out)
    np.testing.assert_array_equal(out.copy_to_host(), x[::-1] + 1 + 7 + 64)


# --- global memory ---------------------------------------------------------------------------------
def test_global_plus_equals_race_names_both_threads_and_suggests_an_atomic():
    with pytest.raises(simdebug.RaceError) as err:
        D.launch("sum_into_one")
    message = str(err.value)
    assert "read-modify-write out[0]" in message and "cuda.atomic.add(out, 0, value)" in message
    assert message.count(f"debugging.py:{line_of(D.sum_into_one, 'out[0] += x[i]')}") == 2


def test_global_race_between_blocks_and_none_across_barriers_or_launches():
    @cuda.jit
    def one_per_block(out):
        if cuda.threadIdx.x == 0:
            out[0] = out[0] + 1.0

    with pytest.raises(simdebug.RaceError, match="different blocks"):
        one_per_block[2, 32](cuda.to_device(np.zeros(1, np.float32)))

    @cuda.jit
    def in_turns(out):
        for turn in range(4):
            if cuda.threadIdx.x == turn:
                out[0] += 1.0       # one thread per barrier interval: ordered
            cuda.syncthreads()

    out = cuda.to_device(np.zeros(1, np.float32))
    in_turns[1, 32](out)
    one_per_block[1, 32](out)       # a later launch read-modify-writes what the last one wrote
    one_per_block[1, 32](out)
    assert out.copy_to_host()[0] == 6


def test_allow_races_opts_a_kernel_out_visibly():
    @cuda.jit
    def racy_on_purpose(out):
        out[0] += 1.0

    simdebug.allow_races(racy_on_purpose, why="a test of the opt-out")
    try:
        racy_on_purpose[1, 4](cuda.to_device(np.zeros(1, np.float32)))
        assert simdebug.allowed_races()["racy_on_purpose"] == "a test of the opt-out"
    finally:
        simdebug._ALLOWED.pop(racy_on_purpose.py_func.__code__)
    with pytest.raises(ValueError, match="needs a reason"):
        simdebug.allow_races(racy_on_purpose, why="")


def test_switching_off_runs_the_buggy_kernel_unchecked():
    with simdebug.disabled():
        assert not simdebug.installed()
        got, expected = D.launch("scan_one_buffer_racy")   # runs; the result is whatever the timing gave
        assert got.shape == expected.shape
    assert simdebug.installed()


def test_the_tracer_still_works_with_the_debugger_on():
    from lib.grading.tracer import trace

    from kernels import memory as mem

    a = cuda.to_device(np.arange(mem.TILE * mem.TILE, dtype=np.float32).reshape(mem.TILE, mem.TILE))
    at = cuda.device_array((mem.TILE, mem.TILE), dtype=np.float32)
    summary = trace(mem.transpose_tiled_kernel, (1, 1), (mem.TILE, mem.BLOCK_ROWS), a, at).summary()
    assert set(summary["space"]) == {"global", "shared"}
    np.testing.assert_array_equal(at.copy_to_host(), a.copy_to_host().T)


# --- the simulator-only kernel of the chapter --------------------------------------------------------
def test_a_python_list_in_a_kernel_is_reported_by_the_gpu_compile_check():
    values = cuda.to_device(np.arange(64, dtype=np.int64))
    counts = cuda.to_device(np.zeros(64 * D.BINS, np.int64))
    message = gpucompile.compile_error(D.bin_count_with_a_list, values, counts)
    assert message is not None, "numba compiled a kernel that builds a Python list for a GPU"
    assert "list" in message.lower()


# --- silence on the book's own code ---------------------------------------------------------------------
def test_every_exercise_solution_passes_its_grade_with_the_debugger_on(monkeypatch):
    """Each chapter's graded solution cells, run in order in one namespace (a later solution may use an
    earlier one); every grade(...) must pass (a debugger report fails the grade with its message)."""
    from lib.grading.grader import cases
    from tools.notebooks import read, toc_chapters
    from tools.student import is_solution

    monkeypatch.setattr(cases, "SIM_WORK_SCALE", 0.1)  # the fixed sizes, hardly grown: silence, not scale
    reports, failures = [], []

    def grade(exercise_id, fn, *args, **kwargs):
        report = lib.grade(exercise_id, fn, *args, **kwargs)
        reports.append(exercise_id)
        if not report.passed:
            failures.append(f"{exercise_id}: {report.status}: {report.message[:600]}")
        return report

    for path in toc_chapters():
        namespace = {"grade": grade, "__name__": f"solutions_of_{path.stem}"}
        graded = [c for c in read(path).cells if is_solution(c) and "grade(" in c.source]
        for k, cell in enumerate(graded):
            exec(compile(cell.source, f"<{path.name} solution {k}>", "exec"), namespace)
    assert len(reports) >= 15, f"only {len(reports)} graded solutions found: {reports}"
    assert not failures, "\n".join(failures)
