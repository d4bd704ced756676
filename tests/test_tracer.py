"""lib.grading.tracer: the sectors and wavefronts it reports for real kernels, against the chapter's models."""
import numpy as np
import pytest
from numba import cuda

import lib
from kernels import memory as mem
from lib.grading import tracer

RNG = np.random.default_rng(11)
on_simulator = pytest.mark.skipif(not lib.SIMULATOR, reason="the tracer runs kernels on the simulator")


def _copy_trace(stride, offset, n=256):
    src = cuda.to_device(RNG.standard_normal(offset + n * stride, dtype=np.float32))
    dst = cuda.device_array(n, dtype=np.float32)
    t = tracer.trace(mem.copy_strided_kernel, mem.blocks_for(n), mem.THREADS, src, dst, stride, offset)
    np.testing.assert_array_equal(dst.copy_to_host(), src.copy_to_host()[offset::stride][:n])  # it really ran
    return t


@on_simulator
@pytest.mark.parametrize("stride, offset", [(1, 0), (2, 0), (4, 0), (8, 0), (32, 0), (1, 1), (1, 8), (1, 32)])
def test_copy_sectors_match_the_sector_model(stride, offset):
    t = _copy_trace(stride, offset)
    loads = [r for r in t.requests if r.op == "load"]
    stores = [r for r in t.requests if r.op == "store"]
    assert len(loads) == len(stores) == 256 // 32          # one request per warp and access
    assert all(r.lanes == 32 and r.array == "src" for r in loads)
    assert {r.sectors for r in loads} == {mem.sectors_per_request(stride, offset)}
    assert {r.sectors for r in stores} == {4} and all(r.array == "dst" for r in stores)


@on_simulator
def test_a_partial_warp_counts_only_its_active_lanes():
    t = _copy_trace(1, 0, n=40)   # warp 0 full, warp 1 with 8 lanes; warps 2-7 exit before any access
    loads = sorted((r.warp, r.lanes, r.sectors) for r in t.requests if r.op == "load")
    assert loads == [(0, 32, 4), (1, 8, 1)]
    summary = t.summary()
    row = summary[(summary["op"] == "load")].iloc[0]
    assert row["requests"] == 2 and row["lanes"] == 20 and row["ideal sectors"] == 2.5
    assert "src[offset + i * stride]" in row["source"]


@on_simulator
@pytest.mark.parametrize("kind", ["tiled", "padded", "swizzled"])
def test_transpose_wavefronts_match_the_bank_model(kind):
    rows, cols = 64, 96
    a = cuda.to_device(RNG.standard_normal((rows, cols), dtype=np.float32))
    out = cuda.device_array((cols, rows), dtype=np.float32)
    kernel = getattr(mem, f"transpose_{kind}_kernel")
    t = tracer.trace(kernel, (cols // mem.TILE, rows // mem.TILE), (mem.TILE, mem.BLOCK_ROWS), a, out)
    np.testing.assert_array_equal(out.copy_to_host(), a.copy_to_host().T)
    predicted = mem.predicted_shared_wavefronts(kind, rows, cols)
    totals = t.totals()
    assert totals["shared load wavefronts"] == predicted["ld_wavefronts"]
    assert totals["shared store wavefronts"] == predicted["st_wavefronts"]
    worst = {r.op: 0 for r in t.requests}
    for r in t.requests:
        if r.space == "shared":
            worst[r.op] = max(worst[r.op], r.degree)
    assert worst["load"] == (32 if kind == "tiled" else 1) and worst["store"] == 1
    assert totals["global load sectors"] == totals["global store sectors"] == rows * cols * 4 // 32


@on_simulator
def test_two_shared_arrays_stay_apart_and_device_functions_are_traced():
    @cuda.jit(device=True)
    def read_twice(arr, i):
        return arr[i] + arr[i]

    @cuda.jit
    def kernel(x, out):
        a = cuda.shared.array(64, np.float32)
        b = cuda.shared.array(64, np.float32)
        i = cuda.threadIdx.x
        a[i] = x[i]
        b[i] = 2 * x[i]
        cuda.syncthreads()
        out[i] = read_twice(a, i) + b[63 - i]

    x = RNG.standard_normal(64, dtype=np.float32)
    out = cuda.device_array(64, dtype=np.float32)
    t = tracer.trace(kernel, 1, 64, cuda.to_device(x), out)
    np.testing.assert_allclose(out.copy_to_host(), 2 * x + 2 * x[::-1], rtol=1e-6)
    arrays = {r.array for r in t.requests if r.space == "shared"}
    assert len(arrays) == 2
    summary = t.summary()
    device_fn = summary[summary["source"].str.contains("arr\\[i\\] \\+ arr\\[i\\]")]
    assert len(device_fn) == 2 and set(device_fn["requests"]) == {2}  # two loads, two warps each


@on_simulator
def test_tracing_leaves_the_simulator_as_it_was():
    from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    before = (FakeWithinKernelCUDAArray.__getitem__, FakeWithinKernelCUDAArray.__setitem__, FakeCUDAShared.array)

    @cuda.jit
    def negative(x):
        x[cuda.threadIdx.x - 1] = 0

    with pytest.raises(IndexError, match="negative index"):   # the guard still applies while tracing
        tracer.trace(negative, 1, 32, cuda.to_device(np.zeros(32, dtype=np.float32)))
    after = (FakeWithinKernelCUDAArray.__getitem__, FakeWithinKernelCUDAArray.__setitem__, FakeCUDAShared.array)
    assert before == after


@on_simulator
def test_trace_refuses_what_is_not_a_kernel():
    with pytest.raises(TypeError, match="cuda.jit kernel"):
        tracer.trace(lambda x: x, 1, 32, 0)


@pytest.mark.skipif(lib.SIMULATOR, reason="the refusal is the GPU process's behaviour")
def test_trace_in_a_gpu_process_says_how_to_trace():
    with pytest.raises(tracer.TracerUnavailable, match="NUMBA_ENABLE_CUDASIM"):
        tracer.trace(mem.copy_strided_kernel, 1, 32)


def test_demo_runs_in_a_simulator_subprocess():
    text = tracer.in_simulator_process("kernels.memory", "traced_examples_text")
    rows = [line.split() for line in text.splitlines()]
    tiled_load = [r for r in rows if r[:1] == ["transpose_tiled_kernel"] and "load" in r]
    padded_load = [r for r in rows if r[:1] == ["transpose_padded_kernel"] and "load" in r]
    # the tiled transpose's 32-way conflict and the padded one's none, computed in a separate simulator process
    assert tiled_load and tiled_load[0][-3:-1] == ["32.0", "32.0"]
    assert padded_load and padded_load[0][-3:-1] == ["1.0", "1.0"]
    stride8 = [r for r in rows if r[:4] == ["8", "0", "src", "load"]]
    assert stride8 and stride8[0][5] == "32.0"


@on_simulator
def test_demo_tables():
    copies, transposes = mem.traced_examples()
    loads = copies[copies["op"] == "load"].set_index("stride")
    assert list(copies.columns) == ["stride", "offset", "array", "op", "requests", "sectors", "ideal", "used / moved"]
    assert loads.loc[8, "sectors"] == 32 and loads.loc[8, "used / moved"] == pytest.approx(0.125)
    worst = transposes.set_index(["kernel", "op"])["worst n-way"]
    assert worst[("transpose_tiled_kernel", "load")] == 32 and worst[("transpose_swizzled_kernel", "load")] == 1
