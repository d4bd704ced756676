"""The SGEMM ladder on the simulator at ragged sizes, its launchers' errors, the warp-tile factory, and the
roofline maths with its JavaScript twin."""
from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import kernels.matmul as mm
from lib.hw import roofline
from lib.measure import results
from lib.grading.check import compare
from lib.grading.exercises import matmul_tolerance
from lib.hw.specs import GPUS
from lib.widgets import roofline as roofline_widget

RUNGS = {r.name: r.run for r in mm.RUNGS}
# One ragged size per rung that spans at least two blocks of that rung (no dimension a multiple of a tile).
MULTI_BLOCK = {
    "matmul_naive_kernel": (33, 17, 45),            # 2 blocks of 32 × 32 down M
    "matmul_coalesced_kernel": (17, 33, 45),        # 2 blocks across N
    "matmul_shared_tiled_kernel": (33, 17, 45),     # 2 blocks, 2 K-steps, the second ragged
    "matmul_blocktile_1d_kernel": (65, 17, 13),     # 2 row blocks of 64
    "matmul_blocktile_2d_kernel": (20, 130, 11),    # 2 column blocks of 128
    "matmul_vectorized_kernel": (130, 21, 12),      # 2 row blocks; K % 4 == 0 (float4 path) but N is not
    "matmul_warptile_kernel": (20, 133, 36),        # 2 column blocks, 3 double-buffered K-steps
    "matmul_autotuned": (33, 17, 45),
    "matmul_lean_kernel": (20, 36, 36),             # K, N % 4 == 0: float4 tiles then a ragged last tile
    "matmul_prefetch_kernel": (20, 36, 36),
    "matmul_prefetch_tuned_kernel": (20, 260, 20),  # 2 column blocks of 256; K tiles of 8, the last ragged
}


def run(fn, m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    c = cuda.to_device(np.full((m, n), np.nan, np.float32))
    fn(cuda.to_device(a), cuda.to_device(b), c)
    return a, b, c.copy_to_host()


def assert_matmul(a, b, got):
    expected = a.astype(np.float64) @ b.astype(np.float64)
    tol = matmul_tolerance(a, b, expected)
    bad = compare(got, expected, tol.rtol, tol.atol, tol.scale)
    assert bad is None, bad.describe()


@pytest.mark.parametrize("name", list(RUNGS))
def test_rung_ragged_multi_block(name):
    assert_matmul(*run(RUNGS[name], *MULTI_BLOCK[name]))


@pytest.mark.parametrize("name", ["matmul_naive_kernel", "matmul_shared_tiled_kernel", "matmul_vectorized_kernel",
                                  "matmul_warptile_kernel"])
def test_rung_one_by_one(name):
    a, b, got = run(RUNGS[name], 1, 1, 1)
    assert got[0, 0] == np.float32(a[0, 0] * b[0, 0])


def test_identity_is_exact():
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (9, 12)).astype(np.float32)
    c = cuda.to_device(np.full((9, 12), np.nan, np.float32))
    mm.matmul_vectorized(cuda.to_device(a), cuda.to_device(np.eye(12, dtype=np.float32)), c)
    assert np.array_equal(c.copy_to_host(), a)


def test_empty_inner_dimension_gives_zeros():
    c = cuda.to_device(np.full((3, 5), np.nan, np.float32))
    mm.matmul_warptile(cuda.to_device(np.zeros((3, 0), np.float32)), cuda.to_device(np.zeros((0, 5), np.float32)), c)
    assert np.array_equal(c.copy_to_host(), np.zeros((3, 5), np.float32))


def test_launcher_errors():
    a = cuda.to_device(np.ones((4, 3), np.float32))
    with pytest.raises(ValueError, match="inner dimensions"):
        mm.matmul_naive(a, cuda.to_device(np.ones((4, 3), np.float32)), cuda.device_array((4, 3), np.float32))
    with pytest.raises(TypeError, match="float32"):
        mm.matmul_blocktile_2d(a, cuda.to_device(np.ones((3, 2), np.float64)), cuda.device_array((4, 2), np.float32))
    with pytest.raises(ValueError, match="shape"):
        mm.matmul_warptile(a, cuda.to_device(np.ones((3, 2), np.float32)), cuda.device_array((2, 4), np.float32))
    with pytest.raises(ValueError, match="2-D"):
        mm.matmul_coalesced(cuda.to_device(np.ones(4, np.float32)), a, cuda.device_array((4, 3), np.float32))


def test_factory_bakes_each_configuration_once():
    small = dict(BM=64, BN=64, BK=8, WM=32, WN=32, TM=4, TN=4)   # 4 warps, 1×2 sub-tiles per lane
    kernel, threads = mm.make_warptile_kernel(**small)
    assert threads == 128 and mm.make_warptile_kernel(**small)[0] is kernel
    assert kernel is not mm.make_warptile_kernel(**mm.WARPTILE_DEFAULT)[0]
    assert_matmul(*run(lambda a, b, c: mm.launch_warptile(a, b, c, small), 70, 65, 19))


@pytest.mark.parametrize("prefetch", [False, True])
def test_lean_kernel_clamps_edges_and_zero_fills_the_last_tile(prefetch):
    small = dict(BM=64, BN=64, BK=8, WM=32, WN=32, TM=8, TN=4)   # 4 warps
    launch = lambda a, b, c: mm.launch_lean(a, b, c, small, prefetch=prefetch)   # noqa: E731
    # 2 × 2 blocks: rows of A and columns of B past the edge are clamped, K = 44 ends in a half tile
    assert_matmul(*run(launch, 70, 68, 44))
    assert_matmul(*run(launch, 33, 17, 45))   # rows not 16-byte aligned: every tile takes the guarded path


def test_prefetch_kernel_unrolled_8_with_padded_a_tile():
    # BK = 16 with 8 steps per trip: two trips per tile, the second wrapping to row 0; the A tile's rows
    # padded by 4 floats. 2 × 2 blocks of 64 × 64; K = 44: two whole tiles, then a ragged one.
    small = dict(BM=64, BN=64, BK=16, WM=32, WN=32, TM=8, TN=4)
    launch = lambda a, b, c: mm.launch_lean(a, b, c, small, prefetch=True, unroll=8, a_pad=4)   # noqa: E731
    assert_matmul(*run(launch, 70, 68, 44))


def test_lean_kernel_refuses_bad_unroll_and_padding():
    small = dict(BM=64, BN=64, BK=8, WM=32, WN=32, TM=8, TN=4)
    with pytest.raises(ValueError, match="unroll 2, 4 or 8, at most BK"):
        mm.make_lean_kernel(**small, prefetch=True, unroll=16)
    with pytest.raises(ValueError, match="unroll 2, 4 or 8"):
        mm.make_lean_kernel(**small, prefetch=True, unroll=3)
    with pytest.raises(ValueError, match="multiple of 4 floats"):
        mm.make_lean_kernel(**small, prefetch=True, a_pad=2)


def test_lean_kernel_refuses_32_bit_overflow():
    mm.check_i32_offsets(2 ** 15, 2 ** 16 - 1, 2 ** 15, "matmul_lean")   # just under 2^31 elements: fine
    with pytest.raises(ValueError, match="2\\^31"):
        mm.check_i32_offsets(2 ** 15, 2 ** 16, 2 ** 15, "matmul_lean")


def test_warptile_shape_rejects_uneven_configurations():
    assert mm.warptile_shape(**mm.WARPTILE_DEFAULT)["acc"] == 64 * 64 // 32
    with pytest.raises(ValueError, match="warp tiles"):
        mm.warptile_shape(BM=128, BN=128, BK=16, WM=48, WN=64, TM=8, TN=4)
    with pytest.raises(ValueError, match="multiples of 4"):
        mm.warptile_shape(BM=128, BN=128, BK=6, WM=64, WN=64, TM=8, TN=4)
    for cfg in mm.AUTOTUNE_SPACE:   # every candidate of the sweep tiles evenly
        shape = mm.warptile_shape(**cfg)
        assert shape["acc"] <= 128 and shape["smem_bytes"] <= 48 * 1024, cfg


def test_sass_mix_counts_instruction_kinds():
    sass = textwrap.dedent("""\
        /*0010*/  FFMA R1, R2, R3, R1 ;
        /*0020*/  LDS.128 R4, [R5] ;
        /*0030*/  LDS R6, [R7+0x4] ;
        /*0040*/  @P0 LDG.E.128 R8, desc[UR4][R2.64] ;
        /*0050*/  STL [R1], R9 ;
        /*0060*/  BAR.SYNC.DEFER_BLOCKING 0x0 ;
    """)
    mix = mm.sass_mix(sass)
    assert (mix["FFMA"], mix["LDS.128"], mix["LDS"], mix["LDG.128"], mix["STL"], mix["BAR"]) == (1, 1, 1, 1, 1, 1)


def test_traffic_formulas():
    assert mm.matmul_bytes((2, 3, 4)) == 4 * (8 + 12 + 6) and mm.matmul_flops((2, 3, 4)) == 48
    # a 128×128 tile reads A N/128 times and B M/128 times: at 4096³ that is 32× less than one per output
    naive = mm.global_load_bytes("matmul_coalesced_kernel", 4096, 4096, 4096)
    tiled = mm.global_load_bytes("matmul_blocktile_2d_kernel", 4096, 4096, 4096)
    assert naive == 8 * 4096 ** 3 and naive / tiled == 128
    assert mm.global_load_bytes("matmul_shared_tiled_kernel", 33, 17, 45) == 4 * (33 * 45 * 1 + 45 * 17 * 2)


def test_roofline_maths():
    h200 = GPUS["H200"]
    assert roofline.ridge_point(h200.fp32_tflops, h200.bandwidth_gbs) == pytest.approx(67 / 4.8)
    assert roofline.attainable_tflops(1.0, 67.0, 4800) == pytest.approx(4.8)
    assert roofline.attainable_tflops(1e3, 67.0, 4800) == 67.0
    r = roofline.analyze(roofline.widget_specs()["T4"], 1e9, 1e9)
    assert r["ridge_tf32"] is None and r["bound"] == "memory"
    assert r["floor_ms"] == pytest.approx(1e9 / 320e9 * 1e3)
    rows = {(row["GPU"], row["roof"]): row["ridge FLOP/B"] for row in roofline.ridge_table()}
    assert rows[("NVIDIA H100 SXM5", "FP32 (SIMT cores)")] > rows[("NVIDIA H200 SXM", "FP32 (SIMT cores)")]
    with pytest.raises(ValueError):
        roofline.intensity(1.0, 0.0)


def test_recorded_points_reads_every_ladder_csv(tmp_path):
    from lib.measure.results import COLUMNS

    row = dict.fromkeys(COLUMNS, "")
    row.update(chapter="x", kernel="k", size="8", median_ms=2.0, flops=4e9, bytes=1e9, device="d")
    copy = dict(row, kernel="copy", flops="")
    import pandas as pd
    pd.DataFrame([row, copy]).to_csv(tmp_path / "x.csv", index=False)
    (tmp_path / "x.autotune.csv").write_text("# a sweep\nconfig,tflops\nA,1\n")
    points, unplaced = results.roofline_points(tmp_path)
    assert unplaced == 1 and len(points) == 1
    assert points[0]["intensity"] == 4.0 and points[0]["tflops"] == pytest.approx(4e9 / 2e-3 / 1e12)


GRID = [{"gpu": g, "flops": 10.0 ** f, "bytes": 10.0 ** b}
        for g in ("H200", "H100", "T4", "L4") for f in (6, 9.3, 12, 14.7) for b in (3, 8.5, 11)]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_js_twin_equals_python(tmp_path):
    specs = roofline.widget_specs()
    (tmp_path / "roofline.mjs").write_text(Path(roofline_widget.__file__).with_suffix(".js").read_text())
    (tmp_path / "grid.json").write_text(json.dumps({"specs": specs, "grid": GRID}))
    script = tmp_path / "run.mjs"
    script.write_text(textwrap.dedent("""
        import { readFileSync } from "fs";
        import { analyze } from "./roofline.mjs";
        const { specs, grid } = JSON.parse(readFileSync(new URL("./grid.json", import.meta.url)));
        console.log(JSON.stringify(grid.map((g) => analyze(specs[g.gpu], g.flops, g.bytes))));
    """))
    proc = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    js = json.loads(proc.stdout)
    assert len(js) == len(GRID)
    for g, got in zip(GRID, js):
        want = roofline.analyze(specs[g["gpu"]], g["flops"], g["bytes"])
        assert got.keys() == want.keys(), g
        for key, value in want.items():
            assert got[key] == pytest.approx(value, rel=1e-12) if isinstance(value, float) else got[key] == value, (g, key)


def test_widget_carries_the_js_and_refuses_bad_state():
    w = roofline_widget.widget(gpu="H100", log10_flops=12.0)
    assert "export default" in w._esm and w.gpu == "H100" and "H200" in w.specs
    with pytest.raises(ValueError, match="unknown GPU"):
        roofline_widget.widget(gpu="Z9")
    with pytest.raises(ValueError, match="log10_bytes"):
        roofline_widget.widget(log10_bytes=20.0)
