"""The GPU chapter: the occupancy calculator on cases worked by hand, its JavaScript twin against it on a
grid, and the chapter's kernels on the simulator at ragged sizes."""
import itertools
import json
import shutil
import subprocess

import numpy as np
import pytest
from numba import cuda

import lib
from kernels.hardware import (BRANCH_KERNELS, WARP, branch_matches, run_branches, vector_add_float4,
                              warp_sum)
from lib.hw.gpu_diagram import GH100, fused_off_tpcs
from lib.hw.occupancy import limits_for, occupancy
from lib.hw.specs import GPUS
from lib.widgets.occupancy import JS, occupancy_widget


# --- the calculator, worked by hand -------------------------------------------------------------------
@pytest.mark.parametrize("threads, regs, smem, blocks, limiting", [
    (256, 32, 0, 8, ["warps", "registers"]),        # 8 warps/block; 1024 regs/warp -> 16 warps per partition
    (32, 16, 0, 32, ["blocks"]),                     # one-warp blocks: the 32-block cap, half the warp slots
    (1024, 64, 0, 1, ["registers"]),                 # 2048 regs/warp -> 8 warps per partition -> 32 warps
    (256, 33, 0, 6, ["registers"]),                  # 33·32 = 1056 -> 1280 regs/warp: 12 warps per partition
    (256, 40, 0, 6, ["registers"]),                  # 1280 regs/warp exactly: same as 33
    (128, 32, 48 * 1024, 4, ["shared memory"]),      # 48 KB + 1 KB reserved = 50176 B: 233472 // 50176 = 4
    (128, 32, 100 * 1024, 2, ["shared memory"]),     # above 48 KB: opt-in, 2 × 101 KB fit in 228 KB
    (128, 32, 227 * 1024, 1, ["shared memory"]),     # the opt-in maximum: exactly the SM's 228 KB with 1 KB
    (96, 32, 7 * 1024, 21, ["warps", "registers"]),  # 3 warps/block: 64 // 3 = 21; 7 + 1 KB each: 28 fit
])
def test_occupancy_on_the_h200_matches_the_hand_count(threads, regs, smem, blocks, limiting):
    r = occupancy("H200", threads, regs, smem)
    assert r["error"] == "" and r["blocks"] == blocks and r["limiting"] == limiting, r
    assert r["warps"] == blocks * -(-threads // 32) and r["occupancy"] == r["warps"] / 64


def test_allocation_granularities():
    one_byte = occupancy("H200", 256, 32, 1)
    assert one_byte["smem_per_block"] == 1152            # 1 B + 1024 reserved, rounded up to 128
    assert occupancy("H200", 256, 32, 0)["smem_per_block"] == 1024
    assert occupancy("T4", 256, 32, 1)["smem_per_block"] == 256   # before cc 8.0: no reserve, 256-B units
    assert occupancy("T4", 256, 32, 0)["limits"]["shared memory"] is None
    assert occupancy("H200", 32, 1, 0)["regs_per_block"] == 256   # a warp takes at least 256 registers
    assert occupancy("H200", 33, 8, 0)["regs_per_block"] == 2 * 256  # a partial warp is a whole warp


@pytest.mark.parametrize("args, reason", [
    ((1025, 32, 0), "1 to 1024 threads"),
    ((0, 32, 0), "1 to 1024 threads"),
    ((256, 256, 0), "at most 255 registers"),
    ((1024, 65, 0), "registers one block may have"),          # 2304 regs/warp × 32 warps > 65536
    ((128, 32, 228 * 1024), "KB of shared memory"),
    ((128, 32, 48 * 1024 + 1), ""),                           # just above 48 KB is fine with the opt-in
])
def test_launches_that_cannot_happen_are_explained(args, reason):
    r = occupancy("H200", *args)
    if not reason:
        assert r["error"] == "" and r["blocks"] == 4
        return
    assert reason in r["error"] and r["blocks"] == 0 and r["limiting"] == []


def test_every_gpu_of_the_specs_has_limits():
    for key, spec in GPUS.items():
        g = limits_for(spec)
        r = occupancy(g, 1024, 16, 0)
        assert r["blocks"] == spec.max_threads_per_sm // 1024, key


# --- the widget's JavaScript equals the Python --------------------------------------------------------
GRID = list(itertools.product(["H200", "A100", "L4", "T4"], [1, 32, 33, 96, 128, 256, 384, 640, 1024, 1025],
                              [0, 16, 32, 33, 40, 64, 65, 128, 168, 255, 256],
                              [0, 1, 4096, 7 * 1024, 48 * 1024, 48 * 1024 + 1, 99 * 1024, 163 * 1024,
                               227 * 1024, 228 * 1024]))


@pytest.mark.skipif(shutil.which("node") is None, reason="node is needed to run the widget's JavaScript")
def test_javascript_twin_agrees_with_python_on_a_grid(tmp_path):
    gpus = {k: limits_for(GPUS[k]) for k in ["H200", "A100", "L4", "T4"]}
    module = tmp_path / "occupancy.mjs"
    module.write_text(JS.read_text())
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([[gpus[g], t, r, s] for g, t, r, s in GRID]))
    script = (f"import {{ occupancy }} from {json.dumps(module.as_uri())};\n"
              f"import {{ readFileSync }} from 'node:fs';\n"
              f"const cases = JSON.parse(readFileSync({json.dumps(str(cases))}, 'utf8'));\n"
              "console.log(JSON.stringify(cases.map((c) => occupancy(...c))));\n")
    run = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    from_js = json.loads(run.stdout)
    assert len(from_js) == len(GRID)
    for case, js in zip(GRID, from_js):
        py = occupancy(gpus[case[0]], *case[1:])
        assert js == py, f"{case}: JS {js} != Python {py}"
    assert len({(r["blocks"], tuple(r["limiting"])) for r in from_js}) > 20  # the grid exercises many outcomes


def test_widget_carries_every_gpu_and_its_starting_point():
    w = occupancy_widget("A100", threads=128, registers=64, shared_bytes=1000)
    assert set(w.gpus) == set(GPUS) and w.gpus["A100"] == limits_for(GPUS["A100"])
    assert (w.gpu, w.threads, w.registers, w.shared_bytes) == ("A100", 128, 64, 1000)
    assert "export function occupancy" in w._esm and "export default" in w._esm
    with pytest.raises(KeyError, match="H200"):
        occupancy_widget("B200")


# --- the diagram ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("enabled", [144, 132, 114])
def test_diagram_fuses_off_whole_tpcs(enabled):
    off = fused_off_tpcs(enabled)
    assert len(off) == (144 - enabled) // 2
    assert all(0 <= g < GH100["gpcs"] and 0 <= t < GH100["tpcs_per_gpc"] for g, t in off)


# --- kernels on the simulator ---------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 31, 45, 300, 513])
def test_warp_sum(n):
    x = np.random.default_rng(n).uniform(-1, 1, n).astype(np.float32)
    out = cuda.device_array((n + WARP - 1) // WARP, dtype=np.float32)
    warp_sum(cuda.to_device(x), out)
    padded = np.concatenate([x, np.zeros(-n % WARP, np.float32)]).astype(np.float64).reshape(-1, WARP)
    np.testing.assert_allclose(out.copy_to_host(), padded.sum(axis=1), rtol=1e-5, atol=1e-6)


def test_warp_sum_rejects_a_wrong_output_shape():
    with pytest.raises(ValueError):
        warp_sum(cuda.to_device(np.ones(64, np.float32)), cuda.device_array(1, np.float32))


@pytest.mark.parametrize("n", [1, 3, 4, 7, 4099])
def test_vector_add_float4(n):
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = cuda.to_device(np.full(n, np.nan, np.float32))
    vector_add_float4(cuda.to_device(a), cuda.to_device(b), out)
    np.testing.assert_array_equal(out.copy_to_host(), a + b)


def test_vector_add_float4_refuses_bad_input():
    a = cuda.to_device(np.ones(9, np.float32))
    with pytest.raises(TypeError):
        vector_add_float4(cuda.to_device(np.ones(9)), a, cuda.device_array(9, np.float32))
    with pytest.raises(ValueError, match="16-byte boundary"):
        vector_add_float4(a[1:], a[1:], cuda.device_array(8, np.float32))


@pytest.mark.parametrize("name", sorted(BRANCH_KERNELS))
def test_branch_kernels_compute_and_report_their_active_lanes(name):
    kernel, path_b = BRANCH_KERNELS[name]
    n = 300  # two blocks; the last warp (lanes 0..11 of warp 9) is partial
    x = np.random.default_rng(0).uniform(-1, 1, n).astype(np.float32)
    out, masks = cuda.device_array(n, np.float32), cuda.device_array(n, np.uint32)
    run_branches(kernel, cuda.to_device(x), out, masks)
    assert branch_matches(out.copy_to_host(), x, path_b(np.arange(n)))
    other = BRANCH_KERNELS[next(k for k in BRANCH_KERNELS if k != name)][1]
    assert not branch_matches(out.copy_to_host(), x, other(np.arange(n)))  # the check tells the paths apart
    got = masks.copy_to_host()
    live_last = (1 << (n % WARP)) - 1
    for i in range(n):
        lanes = live_last if i >= n - n % WARP else 0xFFFFFFFF
        if name == "branch_by_lane_kernel":
            lanes &= 0xAAAAAAAA if i % 2 else 0x55555555
        assert got[i] == lanes, f"thread {i}: activemask {got[i]:#010x}, expected {lanes:#010x}"


def test_run_branches_rejects_a_wrong_mask_type():
    x = cuda.to_device(np.ones(32, np.float32))
    with pytest.raises(TypeError):
        run_branches(BRANCH_KERNELS["branch_by_lane_kernel"][0], x, cuda.device_array(32, np.float32),
                     cuda.device_array(32, np.float32))


# --- reading listings -----------------------------------------------------------------------------------
def test_annotate_keeps_the_stamp_and_notes_only_known_instructions():
    from lib.measure.ptx import SASS_NOTES, annotate

    sass = ("// recorded on NVIDIA H200, 2026-12-01\n"
            "        /*0000*/                   LDC R1, c[0x0][0x28] ;\n"
            "        /*0010*/                   S2R R0, SR_TID.X ;\n"
            "        /*0080*/                   LDG.E.128 R4, desc[UR4][R2.64] ;\n"
            "        /*0090*/                   LDG.E R8, desc[UR4][R6.64] ;\n"
            "        /*00a0*/                   SHFL.DOWN PT, R9, R8, 0x10, 0x1f ;\n"
            "        /*00b0*/                   EXIT ;\n")
    lines = annotate(sass, SASS_NOTES).splitlines()
    assert lines[0].startswith("// recorded on NVIDIA H200")
    assert len(lines) == 6 and not any("LDC" in line for line in lines)
    assert "128-bit" in lines[2] and "32-bit" in lines[3] and "shuffle" in lines[4] and "done" in lines[5]
    assert annotate(sass, SASS_NOTES, limit=2).splitlines()[-1] == "…"


def test_show_says_when_nothing_is_recorded(tmp_path, capsys):
    from lib.measure.ptx import show

    show("no_such_kernel", "sass", folder=tmp_path)
    assert "not recorded yet" in capsys.readouterr().out
    (tmp_path / "hardware.k.ptx").write_text("// stamp\n\tadd.f32 \t%f3, %f2, %f1;\n\tmov.b32 %r1, 0;\n")
    show("k", "ptx", folder=tmp_path)
    out = capsys.readouterr().out
    assert "add.f32" in out and "mov.b32" not in out
