"""The memory chapter: kernels checked on the simulator at ragged sizes, the bank-conflict and sector
models on known cases and against Nsight Compute's counts, and the widget's JS twin against Python."""
import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

from kernels import memory as mem
from lib.measure import ncu
from lib.widgets import bank_conflicts as bc

RNG = np.random.default_rng(7)


# --- bank-conflict model ------------------------------------------------------------------------------
@pytest.mark.parametrize("stride, degree, wavefronts", [(1, 1, 1), (2, 2, 2), (4, 4, 4), (32, 32, 32),
                                                        (33, 1, 1), (3, 1, 1), (16, 16, 16), (0, 1, 1)])
def test_strided_four_byte_reads(stride, degree, wavefronts):
    r = bc.analyze("strided", stride=stride)
    assert (r["degree"], r["wavefronts"], r["conflicts"]) == (degree, wavefronts, wavefronts - 1)


def test_gpu_md_counter_ratios():
    """GPU.md: ncu read 4.25 M, 8.47 M, 134.4 M, 4.25 M wavefronts at strides 1, 2, 32, 33 (same work)."""
    measured = {1: 4.25, 2: 8.47, 32: 134.4, 33: 4.25}
    for stride, millions in measured.items():
        predicted = bc.wavefronts([4 * lane * stride for lane in range(32)])
        assert predicted == pytest.approx(millions / measured[1], rel=0.02)


def test_broadcast_and_inactive_lanes():
    same_word = [40] * 32
    assert bc.conflict_report(same_word) == {"wavefronts": 1, "ideal": 1, "conflicts": 0, "degree": 1}
    two_words_one_bank = [0] * 16 + [128] * 16
    assert bc.conflict_report(two_words_one_bank)["degree"] == 2
    only_lane_5 = [None] * 32
    only_lane_5[5] = 4096
    assert bc.conflict_report(only_lane_5)["wavefronts"] == 1
    assert bc.conflict_report([None] * 32)["wavefronts"] == 0


def test_eight_byte_elements_split_into_half_warps():
    assert bc.analyze("strided", stride=1, element_bytes=8)["wavefronts"] == 2      # 256 bytes: 2 x 128
    assert bc.analyze("strided", stride=1, element_bytes=8)["conflicts"] == 0
    assert bc.analyze("strided", stride=2, element_bytes=8)["degree"] == 2
    assert bc.analyze("strided", stride=16, element_bytes=8)["degree"] == 16        # 128 bytes apart
    assert bc.analyze("strided", stride=17, element_bytes=8)["degree"] == 1
    assert bc.conflict_report([16 * lane for lane in range(32)], 16)["wavefronts"] == 4


def test_tile_walks_padding_and_swizzle():
    assert bc.analyze("tile row")["degree"] == 1
    assert bc.analyze("tile column")["degree"] == 32
    assert bc.analyze("tile column", pad=1)["degree"] == 1
    assert bc.analyze("tile column", pad=2)["degree"] == 2
    for offset in (0, 5, 31):
        assert bc.analyze("tile column", offset=offset, swizzle=True)["degree"] == 1
        assert bc.analyze("tile row", offset=offset, swizzle=True)["degree"] == 1
        assert bc.analyze("tile column", offset=offset, element_bytes=8, swizzle=True)["degree"] == 1


def test_model_rejects_bad_input():
    with pytest.raises(ValueError, match="32 lanes"):
        bc.conflict_report([0] * 31)
    with pytest.raises(ValueError, match="multiple of 8"):
        bc.conflict_report([4 * lane for lane in range(32)], 8)
    with pytest.raises(ValueError, match="access_bytes"):
        bc.lane_groups(2)
    with pytest.raises(ValueError, match="pattern"):
        bc.analyze("diagonal")


def test_transpose_predictions():
    tiled = mem.predicted_shared_wavefronts("tiled", 64, 96)
    tiles, requests = 2 * 3, mem.TILE
    assert tiled == {"ld_wavefronts": tiles * requests * 32, "ld_conflicts": tiles * requests * 31,
                     "st_wavefronts": tiles * requests, "st_conflicts": 0}
    for kind in ("padded", "swizzled"):
        assert mem.predicted_shared_wavefronts(kind, 64, 96) == {
            "ld_wavefronts": tiles * requests, "ld_conflicts": 0, "st_wavefronts": tiles * requests,
            "st_conflicts": 0}
    with pytest.raises(ValueError):
        mem.predicted_shared_wavefronts("tiled", 33, 64)


def test_sectors_per_request():
    assert [mem.sectors_per_request(s) for s in mem.STRIDES] == [4, 8, 16, 32, 32, 32]
    assert [mem.sectors_per_request(1, o) for o in (1, 4, 7, 8, 32)] == [5, 5, 5, 4, 4]
    assert mem.sectors_per_request(1, 0, element_bytes=8) == 8


# --- widget: JS twin ----------------------------------------------------------------------------------
GRID = [dict(pattern=p, stride=s, offset=o, element_bytes=e, pad=pad, swizzle=sw)
        for p in bc.PATTERNS for s in (0, 1, 2, 3, 8, 16, 17, 32, 33, 64) for o in (0, 3, 17)
        for e in (4, 8) for pad in (0, 1, 2) for sw in (False, True)
        if p == "strided" or s == 1]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_js_twin_equals_python(tmp_path):
    module = tmp_path / "bank_conflicts.mjs"
    module.write_text((Path(bc.__file__).with_suffix(".js")).read_text())
    (tmp_path / "grid.json").write_text(json.dumps(GRID))
    script = tmp_path / "run.mjs"
    script.write_text(textwrap.dedent("""
        import { readFileSync } from "fs";
        import { analyze } from "./bank_conflicts.mjs";
        const grid = JSON.parse(readFileSync(new URL("./grid.json", import.meta.url)));
        console.log(JSON.stringify(grid.map((state) => analyze(state))));
    """))
    proc = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    js = json.loads(proc.stdout)
    assert len(js) == len(GRID)
    for state, got in zip(GRID, js):
        assert got == bc.analyze(**state), state


def test_widget_carries_the_js_and_refuses_bad_state():
    w = bc.widget(pattern="tile column", pad=1)
    assert "export default" in w._esm and (w.pattern, w.pad) == ("tile column", 1)
    with pytest.raises(ValueError):
        bc.widget(pattern="nope")


# --- kernels on the simulator ----------------------------------------------------------------------------
def _transpose_check(launch, shape):
    a = RNG.standard_normal(shape, dtype=np.float32)
    out = cuda.to_device(np.full(shape[::-1], np.nan, dtype=np.float32))
    launch(cuda.to_device(a), out)
    np.testing.assert_array_equal(out.copy_to_host(), a.T)


@pytest.mark.parametrize("launch", [mem.transpose_naive, mem.transpose_tiled, mem.transpose_padded,
                                    mem.transpose_swizzled, mem.transpose_batched, mem.transpose_wide])
def test_transposes_ragged(launch):
    _transpose_check(launch, (37, 45))   # 2 x 2 tiles, both edges ragged (one ragged 64-tile)


def test_wide_transpose_interior_and_edge_tiles():
    # 2 x 3 tiles of 64: the first tile of the first row lies wholly inside (the unchecked path), the
    # others are cut by the bottom or right edge (the checked path); non-square and both sides ragged.
    _transpose_check(mem.transpose_wide, (100, 130))
    _transpose_check(mem.transpose_wide, (64, 64))  # exactly one interior tile, no edge


def test_vector_transpose_interior_edge_and_fallback():
    # sides multiples of 4: 2 x 3 tiles of 64, the first interior (float4 path), the others cut by an edge
    _transpose_check(mem.transpose_vector, (100, 132))
    _transpose_check(mem.transpose_vector, (64, 128))  # two interior tiles, no edge
    _transpose_check(mem.transpose_vector, (4, 4))     # one edge tile smaller than a thread's float4 rows
    _transpose_check(mem.transpose_vector, (37, 45))   # sides not multiples of 4: transpose_wide instead


def test_vector_transpose_sends_a_misaligned_view_to_transpose_wide(monkeypatch):
    """A view that starts 12 bytes into its allocation cannot be read 16 bytes at a time: the launcher
    hands it to transpose_wide (the simulator would read it anyway, so the hand-over is what is checked)."""
    calls = []
    monkeypatch.setattr(mem, "transpose_wide", lambda a, out: calls.append(a.shape) or out.copy_to_device(
        np.ascontiguousarray(a.copy_to_host().T)))
    a = RNG.standard_normal(4 + 64 * 64, dtype=np.float32)
    d_a = cuda.to_device(a)[3:-1].reshape(64, 64)
    out = cuda.to_device(np.full((64, 64), np.nan, dtype=np.float32))
    mem.transpose_vector(d_a, out)
    assert calls == [(64, 64)]
    mem.transpose_vector(cuda.to_device(a[:64 * 64].reshape(64, 64)), out)  # aligned: its own kernel
    assert calls == [(64, 64)]


@pytest.mark.parametrize("launch", [mem.transpose_tiled, mem.transpose_swizzled, mem.transpose_batched,
                                    mem.transpose_wide, mem.transpose_vector])
def test_transposes_single_row_and_element(launch):
    _transpose_check(launch, (1, 40))
    _transpose_check(launch, (1, 1))


def test_transpose_launcher_errors():
    a = cuda.to_device(np.zeros((4, 6), dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        mem.transpose_padded(a, cuda.device_array((4, 6), dtype=np.float32))
    with pytest.raises(TypeError, match="float32"):
        mem.transpose_naive(a, cuda.device_array((6, 4), dtype=np.float64))


@pytest.mark.parametrize("stride, offset", [(1, 0), (3, 0), (32, 0), (1, 5), (2, 7)])
def test_copy_strided(stride, offset):
    n = 700
    src = RNG.standard_normal(offset + n * stride, dtype=np.float32)
    dst = cuda.to_device(np.full(n, np.nan, dtype=np.float32))
    mem.copy_strided(cuda.to_device(src), dst, stride, offset)
    np.testing.assert_array_equal(dst.copy_to_host(), src[offset::stride][:n])


def test_copy_strided_errors():
    src = cuda.to_device(np.zeros(100, dtype=np.float32))
    with pytest.raises(ValueError, match="need 101"):
        mem.copy_strided(src, cuda.device_array(51, dtype=np.float32), 2, 0)
    with pytest.raises(ValueError, match="stride"):
        mem.copy_strided(src, cuda.device_array(10, dtype=np.float32), 0, 0)


@pytest.mark.parametrize("n", [1, 3, 4, 1030])
def test_copy_four_per_thread(n):
    src = RNG.standard_normal(n, dtype=np.float32)
    dst = cuda.to_device(np.full(n, np.nan, dtype=np.float32))
    mem.copy_four_per_thread(cuda.to_device(src), dst)
    np.testing.assert_array_equal(dst.copy_to_host(), src)


def test_random_cycle_is_one_cycle_and_the_chase_matches_the_host():
    next_index = mem.random_cycle(300, np.random.default_rng(1))
    seen, j = set(), 0
    for _ in range(300):
        seen.add(j)
        j = int(next_index[j])
    assert j == 0 and len(seen) == 300
    last = cuda.device_array(1, dtype=np.int32)
    mem.pointer_chase(cuda.to_device(next_index), 57, last)
    assert int(last.copy_to_host()[0]) == mem.chase_on_host(next_index, 57) != 0


def test_a_line_spaced_cycle_visits_one_element_per_line():
    next_index = mem.random_cycle(32 * 40, np.random.default_rng(2), spacing=mem.LINE_INTS)
    seen, j = set(), 0
    for _ in range(40):
        seen.add(j)
        j = int(next_index[j])
    assert j == 0 and seen == set(range(0, 32 * 40, 32))
    assert (np.delete(next_index, sorted(seen)) == -1).all()
    with pytest.raises(ValueError, match="spacing"):
        mem.random_cycle(16, np.random.default_rng(0), spacing=32)


def test_shared_probe_reads_what_it_should():
    out = cuda.device_array(64, dtype=np.float64)
    mem.shared_probe_f32_kernel[1, 64](out, 2)
    lane = np.arange(64) % 32
    expected = [sum(lane_i * 2 + r for r in range(mem.PROBE_READS)) for lane_i in lane]
    np.testing.assert_array_equal(out.copy_to_host(), expected)


def test_parse_ncu_csv():
    text = textwrap.dedent('''\
        lib: running on NVIDIA H200
        ==PROF== Connected to process
        "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
        "1","9","python3","h","_ZN7kernels22transpose_padded_kernel","1","7","(32, 8, 1)","(32, 32, 1)","0","9.0","Command line profiler metrics","m1","","1,024"
        "0","9","python3","h","_ZN7kernels22transpose_tiled_kernel","1","7","(32, 8, 1)","(32, 32, 1)","0","9.0","Command line profiler metrics","m1","","1,048,576"
        "0","9","python3","h","_ZN7kernels22transpose_tiled_kernel","1","7","(32, 8, 1)","(32, 32, 1)","0","9.0","Command line profiler metrics","m2","","7"
        ''')
    launches = ncu.parse_csv(text)
    assert [launch["metrics"] for launch in launches] == [{"m1": 1048576.0, "m2": 7.0}, {"m1": 1024.0}]
    assert "transpose_tiled_kernel" in launches[0]["name"]
