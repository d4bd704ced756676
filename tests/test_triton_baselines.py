"""kernels/triton_baselines.py and the Triton rows of the Hopper and FlashAttention-3 tables, without Triton:
the modules import and import neither Triton nor torch, a skipped baseline says why in what a recording writes,
and the tables read recorded data with or without Triton rows."""
import subprocess
import sys

import numpy as np
import pandas as pd

import lib
from kernels import flash3 as F, hopper as H, triton_baselines as T


def test_importing_the_chapters_imports_neither_triton_nor_torch():
    code = ("import lib, sys; import kernels.triton_baselines, kernels.hopper, kernels.flash3; "
            "print(sorted(m for m in ('triton', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=lib.ROOT,
                         env={"NUMBA_ENABLE_CUDASIM": "1", "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_reason_names_what_is_missing(monkeypatch):
    if lib.SIMULATOR:
        assert not T.available() and "simulator" in T.unavailable_reason()
    monkeypatch.setattr(lib, "ON_GPU", True)
    real = T.importlib.util.find_spec
    monkeypatch.setattr(T.importlib.util, "find_spec", lambda name: None if name == "triton" else real(name))
    assert T.unavailable_reason().startswith("triton is not installed")


def test_without_triton_the_ladders_keep_cublas_alone():
    if T.available():
        return  # on a GPU with Triton the baseline is there (the recording checks and times it)
    for lad in H.LADDERS:
        assert [b.name for b in lad.baselines] == [H.BASELINES[lad.topic.split()[0]].name]


def test_a_skipped_baseline_is_recorded_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "unavailable_reason", lambda: "triton is not installed (test)")
    names = [H.triton_name(kind) for kind in H.KINDS]
    path = T.write_tuning(tmp_path / "hopper.triton.csv", {"device": "test"}, names)
    df = T.read_tuning(path)
    assert list(df["kernel"]) == names and set(df["status"]) == {"skipped"}
    assert set(df["note"]) == {"triton is not installed (test)"} and set(df["device"]) == {"test"}
    note = H.triton_note(tmp_path)
    assert note.count("skipped: triton is not installed (test)") == 3


def test_a_tuned_recording_says_what_autotuning_cost(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "unavailable_reason", lambda: None)
    monkeypatch.setattr(T, "_TUNING", [
        {"kernel": "triton.matmul.fp16", "shape": "8192x8192x8192", "autotune_s": 7.5,
         "config": "BLOCK_SIZE_M=128, BLOCK_SIZE_N=256, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, stages=3, warps=8"},
        {"kernel": "triton.attention.fp16", "shape": "16x4096x64", "autotune_s": 2.5, "config": "x"}])
    T.write_tuning(tmp_path / "hopper.triton.csv", {}, ["triton.matmul.fp16", "triton.matmul.bf16"])
    note = H.triton_note(tmp_path)
    assert "added 8 s" in note and "for 1 shapes" in note          # the attention entry is not hopper's
    assert "M=128, N=256, K=64, GROUP=8" in note
    assert "triton.matmul.bf16 not run" in note
    assert all(len(line) <= 76 for line in note.splitlines())


def test_notes_say_when_nothing_was_recorded(tmp_path):
    assert "not recorded yet" in H.triton_note(tmp_path) and "not recorded yet" in F.triton_note(tmp_path)


def _gemm_rows(with_triton):
    rows = []
    for kind in H.KINDS:
        rows.append((H.BASELINES[kind].name, 800.0))
        rows += [(H.rung_name(r, kind), 700.0 + 10 * i) for i, r in enumerate(H.MAKERS)]
        if with_triton:
            rows.append((H.triton_name(kind), 640.0))
    return pd.DataFrame({"kernel": [k for k, _ in rows], "value": [v for _, v in rows],
                         "size": "8192x8192x8192"})


def test_gemm_table_without_triton_rows_shows_dashes():
    table = H.ladder_table(_gemm_rows(False))
    assert set(table.loc["Triton"]) == {"—"} and set(table.loc["best ÷ Triton"]) == {"—"}
    assert "Triton" not in H.ladder_table(_gemm_rows(False), rungs=["tma_pipeline"]).index


def test_gemm_table_gives_triton_and_the_best_rung_over_it():
    table = H.ladder_table(_gemm_rows(True))
    best = 700.0 + 10 * (len(H.MAKERS) - 1)
    assert table.loc["Triton", "FP16"] == "640 (0.80×)"
    assert table.loc["best ÷ Triton", "BF16"] == f"{best / 640:.2f}×"


def _vs_sdpa(tmp_path, triton):
    row = {"kind": "fp16", "heads": 16, "n": 4096, "d": 128, "causal": False, "sdpa_tflops": 600.0}
    for i, rung in enumerate(F.RUNGS):
        row[f"{rung}_tflops"], row[f"{rung}_x_sdpa"] = 500.0 + 50 * i, (500.0 + 50 * i) / 600
    if triton:
        row.update(triton_tflops=550.0, triton_ws_tflops=np.nan, triton_note="cfg")
    pd.DataFrame([row, {**row, "causal": True}]).to_csv(tmp_path / "flash3.vs_sdpa.csv", index=False)
    return 500.0 + 50 * (len(F.RUNGS) - 1), F.RUNGS[-1]


def test_attention_table_without_triton_columns_shows_dashes(tmp_path):
    best, rung = _vs_sdpa(tmp_path, triton=False)
    table = F.vs_triton_table(tmp_path)
    assert set(table["Triton"]) == {"—"} and set(table["÷ Triton"]) == {"—"}
    assert set(table["best rung"]) == {f"{best:.0f} {rung}"}
    assert list(F.vs_sdpa_table(tmp_path).columns) == ["SDPA", *F.RUNGS]


def test_attention_table_takes_the_faster_triton_variant(tmp_path):
    best, _ = _vs_sdpa(tmp_path, triton=True)
    table = F.vs_triton_table(tmp_path)
    assert table.iloc[0]["Triton"] == "550 (0.92×)" and table.iloc[0]["÷ Triton"] == f"{best / 550:.2f}×"


def test_the_recorded_attention_names_are_the_tutorial_variants():
    names = F.triton_names()
    assert "triton.attention.fp16.ws" in names and "triton.attention.bf16.causal" in names
    assert not any(n.endswith(".causal.ws") for n in names)   # Triton 3.6 does not specialise the causal one
