"""The tensor-core ladder's kernel factory, its bank model and its recorded extras (the rungs themselves
are checked against float64 in tests/test_mma.py::test_tensorcore_ladders_pass_their_checks)."""
import numpy as np
import pytest

import lib
from kernels import tensorcores as tc
from lib.widgets.bank_conflicts import conflict_report


@pytest.mark.parametrize("kind", ["tf32", "f16"])
@pytest.mark.parametrize("operand", ["A", "B"])
@pytest.mark.parametrize("bn", [64, 128, 256])
def test_swizzled_fragment_loads_are_conflict_free(kind, operand, bn):
    swizzled = conflict_report(*tc.fragment_addresses(kind, operand, bn, True))
    plain = conflict_report(*tc.fragment_addresses(kind, operand, bn, False))
    assert swizzled["conflicts"] == 0, swizzled
    # without the swizzle: A's 64-byte rows put 4 rows on one bank group, B's long rows 8 (ldmatrix) or 4
    want = 8 if (operand == "B" and kind != "tf32") else 4
    assert plain["degree"] == want, plain


@pytest.mark.parametrize("bn", [64, 128, 256])
def test_interleaved_b_loads_are_conflict_free_when_swizzled(bn):
    swizzled = conflict_report(*tc.fragment_addresses("tf32", "B", bn, True, b_interleaved=True))
    plain = conflict_report(*tc.fragment_addresses("tf32", "B", bn, False, b_interleaved=True))
    assert swizzled["conflicts"] == 0, swizzled
    assert plain["degree"] == 4, plain        # 4 rows (t) at one chunk column share a bank group


def test_bad_configurations_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="48 KiB"):
        tc.make_mma_tiled_kernel("f16", 256, 256, 64, 64, 3, True)
    with pytest.raises(ValueError, match="BN % WN"):
        tc.make_mma_tiled_kernel("tf32", 128, 128, 48, 32, 3, True)
    with pytest.raises(ValueError, match="swizzle needs"):
        tc.make_mma_tiled_kernel("f16", 32, 16, 16, 8, 3, True)
    with pytest.raises(ValueError, match="kind must be"):
        tc.make_mma_tiled_kernel("fp8", 128, 128, 64, 32, 3, True)
    with pytest.raises(ValueError, match="A_LDMATRIX is a TF32 option"):
        tc.make_mma_tiled_kernel("f16", 128, 128, 64, 32, 3, True, A_LDMATRIX=True)
    with pytest.raises(ValueError, match="B_INTERLEAVED is a TF32 option"):
        tc.make_mma_tiled_kernel("bf16", 128, 128, 64, 32, 3, True, B_INTERLEAVED=True)
    with pytest.raises(ValueError, match="PREROUNDED is a TF32 option"):
        tc.make_mma_tiled_kernel("f16", 128, 128, 64, 32, 3, True, PREROUNDED=True)
    with pytest.raises(ValueError, match="WN must be a multiple of 32"):
        tc.make_mma_tiled_kernel("tf32", 128, 128, 64, 16, 3, True, B_INTERLEAVED=True)


def test_recorded_winner_without_newer_options_reads_them_as_off(tmp_path, monkeypatch):
    """A sweep recorded before an option existed has no column for it: the option is off, not an error."""
    path = tmp_path / "sweep.csv"
    path.write_text("# header\nkind,BM,BN,WM,WN,STAGES,SWIZZLE,ASYNC,MAXREG,winner\n"
                    "tf32,128,256,64,64,2,True,True,0,True\n")
    monkeypatch.setattr(tc, "AUTOTUNE_FILE", path)
    assert tc.recorded_tuned_config("tf32") == tc.tiled_config(128, 256, 64, 64, 2, True)


def test_launcher_refuses_shapes_it_cannot_tile():
    a, b = np.zeros((128, 40), np.int16), np.zeros((40, 128), np.int16)
    with pytest.raises(ValueError, match="K % 32"):
        tc.launch_mma_tiled("f16", a, b, np.zeros((128, 128), np.float32), tc.RUNG_CONFIGS["swizzle"])


@pytest.mark.parametrize("kind, wn, options", [
    ("tf32", 32, {}), ("tf32", 32, {"A_LDMATRIX": True, "B_INTERLEAVED": True}),
    ("tf32", 64, {"A_LDMATRIX": True, "B_INTERLEAVED": True, "LEAN_INDEX": True, "PREROUNDED": True}),
    ("bf16", 32, {}), ("bf16", 32, {"LEAN_INDEX": True})], ids=str)
def test_pipeline_ring_wraps_correctly(kind, wn, options):
    """64 × 64 tiles, 3 stages, K of 5 stages: every slot of the ring is refilled at least once; also with
    each option of the kernel (a wrong lane mapping, swizzle, interleave or ring slot gives wrong products)."""
    cfg = tc.tiled_config(64, 64, 32, wn, 3, True, **options)
    k = 5 * tc.BK_BYTES // (4 if kind == "tf32" else 2)
    a, b = tc._inputs(kind)((64, 64, k), np.random.default_rng(5))
    c = np.full((64, 64), np.nan, np.float32)
    tc.launch_mma_tiled(kind, a, b, c, cfg)
    expected = tc._reference(kind)(a, b)
    tol = tc.matmul_tolerance(kind)(a, b, expected)
    err = np.abs(c - expected)
    worst = np.unravel_index(np.argmax(err - tol.rtol * tol.scale), err.shape)
    assert (err <= tol.rtol * tol.scale).all(), f"element {worst}: {c[worst]} vs {expected[worst]}"


def test_sass_counts_skip_placeholders():
    listing = "\n".join(["        /*0010*/                   HMMA.16816.F32 R4, R8, R12, R4 ;",
                         "        /*0020*/              @!PT LDS RZ, [RZ] ;",
                         "        /*0030*/               @P0 LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64] ;",
                         "        /*0040*/                   LDSM.16.M88.4 R8, [R8] ;"])
    counts = tc.sass_counts(listing)
    assert (counts["HMMA"], counts["LDS"], counts["LDGSTS"], counts["LDSM"]) == (1, 0, 1, 1)


def test_measured_roofs_are_the_recorded_ceiling():
    from lib.widgets.roofline import measured_roofs

    ceiling = tc.load_ceiling()
    roofs = {r["label"]: r for r in measured_roofs()}
    assert roofs["mma.sync TF32 (measured)"]["tflops"] == ceiling[ceiling["kind"] == "tf32"]["tflops"].max()
    assert roofs["mma.sync FP16 (measured)"]["gpu"] == "H200"


def test_recorded_sweep_names_one_winner_per_kind():
    sweep = tc.load_extra("autotune")
    for kind in tc.K_STEP:
        rows = sweep[sweep["kind"] == kind]
        assert rows["winner"].sum() == 1
        best = rows[rows["winner"]].iloc[0]
        assert best["tflops"] == rows["tflops"].max()
        assert tc.recorded_tuned_config(kind)["BM"] == best["BM"]


def test_ladder_table_reads_the_recorded_rows():
    from lib.measure import results

    recorded = results.load("tensorcores")
    table = tc.ladder_table(recorded)
    rows = recorded[recorded["size"] == "4096x4096x4096"].set_index("kernel")["value"]
    value, base = rows["matmul_mma_swizzle_f16"], rows["torch.matmul.fp16"]
    assert table.loc["4 swizzle", "FP16"] == f"{value:.1f} ({value / base:.3f}×)"
    assert list(table.index)[-1] == "cuBLAS"
    with pytest.raises(ValueError, match="step must be"):
        tc.rung_name("tiled", "f16")


def test_every_row_is_labelled_with_the_precision_the_tensor_cores_multiply():
    """The 16-bit inputs travel as int16 bit patterns; a row must not be labelled int16."""
    import kernels.flash_tc as ftc
    import kernels.tensorcores as tc

    for module, allowed in ((tc, {"tf32", "float16", "bfloat16"}), (ftc, {"float16", "bfloat16", ""})):
        for ladder in module.LADDERS:
            for r in [*ladder.rungs, *ladder.baselines]:
                assert r.dtype in allowed, (ladder.topic, r.name, r.dtype)
    labels = {r.name: r.dtype for lad in tc.LADDERS for r in [*lad.rungs, *lad.baselines]}
    assert labels["torch.matmul.bf16"] == "bfloat16" and labels["matmul_mma_autotuned_f16"] == "float16"
