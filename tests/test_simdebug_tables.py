"""The debugger's records of global arrays (lib/runtime/simdebug.py): a 1-D array keeps its last readers and
writers in lists indexed by the element (the accessors' fast path), a larger or N-D array in dicts, and both
report the same races. In a 1-D array an element is one entry however the kernel spells its index (an int, a
numpy integer, a 1-tuple), and a store through a slice is checked element by element."""
import numpy as np
import pytest

import lib

pytestmark = pytest.mark.skipif(not lib.SIMULATOR, reason="the debugger is part of the simulator")

if lib.SIMULATOR:
    from numba import cuda

    from lib.runtime import gpucompile, simdebug, simulator

SPELLINGS = {"int": lambda i: i, "numpy integer": lambda i: np.int64(i), "1-tuple": lambda i: (i,)}


@pytest.fixture(autouse=True)
def debugger_on():
    with simdebug.enabled(), gpucompile.unchecked():
        yield


@pytest.fixture(params=["lists", "dicts"])
def tables(request, monkeypatch):
    """Each test runs with list tables (the default for these sizes) and with dicts (FLAT_LIMIT 0, as for a
    1-D array of more than FLAT_LIMIT elements)."""
    if request.param == "dicts":
        monkeypatch.setattr(simdebug, "FLAT_LIMIT", 0)
    return request.param


def test_the_tables_a_launch_keeps(tables):
    seen = []

    @cuda.jit
    def touch(x, m, out):
        i = cuda.grid(1)
        out[i] = x[i] + m[0, i]
        if i == 0:
            seen.extend(simdebug._current_launch().arrays.values())

    for blocks in (1, 2):
        seen.clear()
        touch[blocks, 32](np.ones(64, np.float32), np.ones((1, 64), np.float32), np.zeros(64, np.float32))
        by_dims = {g.ary.ndim: g for g in seen}
        one_d, two_d = by_dims[1], by_dims[2]
        assert one_d.flat and not two_d.flat and two_d.lists is False
        assert one_d.lists == (tables == "lists")
        assert type(one_d.reads) is (list if tables == "lists" else dict)
        assert type(two_d.reads) is dict and one_d.blocks == (blocks > 1)


@pytest.mark.parametrize("read_as", SPELLINGS)
@pytest.mark.parametrize("write_as", SPELLINGS)
def test_a_read_modify_write_race_in_one_block_whatever_the_spelling(tables, read_as, write_as):
    r, w = SPELLINGS[read_as], SPELLINGS[write_as]

    @cuda.jit
    def plus_one(out):
        out[w(0)] = out[r(0)] + 1.0

    with pytest.raises(simdebug.RaceError, match=r"read-modify-write out\[0\] without an atomic"):
        plus_one[1, 32](np.zeros(4, np.float32))


@pytest.mark.parametrize("read_as", SPELLINGS)
@pytest.mark.parametrize("write_as", SPELLINGS)
def test_reading_another_blocks_write_whatever_the_spelling(tables, read_as, write_as):
    r, w = SPELLINGS[read_as], SPELLINGS[write_as]

    @cuda.jit
    def neighbour(out, got):
        b = cuda.blockIdx.x
        if cuda.threadIdx.x == 0:
            out[w(b)] = b
            got[b] = out[r((b + 1) % 2)]

    with pytest.raises(simdebug.RaceError, match="global-memory race between blocks"):
        neighbour[2, 32](np.zeros(2, np.float32), np.zeros(2, np.float32))


def test_blocks_storing_through_a_slice_are_checked_element_by_element(tables):
    @cuda.jit
    def block_number_into_both(out):
        if cuda.threadIdx.x == 0:
            out[0:2] = cuda.blockIdx.x

    @cuda.jit
    def each_block_its_own(out):
        if cuda.threadIdx.x == 0:
            b = cuda.blockIdx.x
            out[2 * b:2 * b + 2] = b

    with pytest.raises(simdebug.RaceError, match=r"write different values to out\[[01]\]"):
        block_number_into_both[2, 32](np.zeros(4, np.float32))
    out = np.zeros(4, np.float32)
    each_block_its_own[2, 32](out)
    np.testing.assert_array_equal(out, [0, 0, 1, 1])


def test_correct_kernels_are_silent_and_past_the_end_is_numpys_error(tables):
    @cuda.jit
    def grid_stride_add(x, y, out):
        for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
            out[i] = x[i] + y[i]

    @cuda.jit
    def one_past(x, out):
        out[0] = x[x.size]

    @cuda.jit
    def store_past(out):
        out[out.size] = 1.0

    x, y = np.arange(1000, dtype=np.float32), np.ones(1000, np.float32)
    for blocks in (1, 3):
        out = np.zeros_like(x)
        grid_stride_add[blocks, 32](x, y, out)
        np.testing.assert_array_equal(out, x + y)
    for launch in (lambda: one_past[1, 1](x, np.zeros(1, np.float32)), lambda: store_past[2, 1](x)):
        with pytest.raises(IndexError, match="index 1000 is out of bounds for axis 0 with size 1000"):
            launch()


def test_a_read_of_another_blocks_write_names_the_line_of_the_write(tables):
    @cuda.jit
    def block_one_reads_block_zeros(out, got):
        if cuda.threadIdx.x == 0:
            if cuda.blockIdx.x == 0:
                out[0] = 7.0  # the write
            else:
                got[0] = out[0]

    messages = set()
    for seed in range(4):
        with simulator.schedule_seed(seed), pytest.raises(simdebug.RaceError) as err:
            block_one_reads_block_zeros[2, 32](np.zeros(1, np.float32), np.zeros(1, np.float32))
        messages.add(str(err.value).split(": ", 1)[1])
    line = next(n for n, text in enumerate(open(__file__), 1) if "out[0] = 7.0  # the write" in text)
    assert any(f"of block (0, 0, 0) writes it at tests/test_simdebug_tables.py:{line}" in m
               and "of block (1, 0, 0) reads  it at" in m for m in messages), messages
