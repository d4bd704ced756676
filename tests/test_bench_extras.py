"""The recorders added beside the ladders: the reduction's exact-sum check (kernels/reduction_accuracy.py, on the
simulator at a small size) and the ncu profile of the matmul ladder (lib/measure/ncu.py, kernels/matmul_profile.py:
parsing and grouping of ncu's output, the page's table and plot, without a GPU)."""
import subprocess

import numpy as np
import pandas as pd
import pytest

from kernels import matmul_profile, reduction_accuracy
from lib.measure import ncu


def test_every_sum_rung_is_exact_on_plus_minus_one_and_close_on_normals():
    rows = reduction_accuracy.accuracy_rows(700, np.random.default_rng(5))
    assert len(rows) >= 9  # every sum rung (and torch.sum on a GPU)
    for row in rows:
        assert row["signs_error"] == 0, row["kernel"]
        assert row["normal_rel_error"] < row["seed_a1_rtol"], row["kernel"]


def test_the_plus_minus_one_input_catches_a_lost_block():
    """The property the check rests on: at this size a sum that skipped one 256-element block is off by an
    integer (nonzero for this input), while float32 adds ±1 exactly in any order."""
    _, signs = reduction_accuracy._inputs(1 << 16, np.random.default_rng(3))
    exact = int(signs.astype(np.int64).sum())
    shuffled = np.random.default_rng(4).permutation(signs)
    assert float(np.cumsum(shuffled, dtype=np.float32)[-1]) == exact
    assert int(signs[:-256].astype(np.int64).sum()) != exact


def _ncu_text(names_and_durations):
    lines = ['"ID","Process ID","Kernel Name","Metric Name","Metric Unit","Metric Value"']
    for i, (name, ns, stalls) in enumerate(names_and_durations):
        lines.append(f'"{i}","1","{name}","{ncu.DURATION}","ns","{ns:,}"')
        for metric, value in stalls.items():
            lines.append(f'"{i}","1","{name}","{metric}","","{value}"')
    return "==PROF== Connected\nprogram output\n" + "\n".join(lines)


LONG = {ncu.STALL_METRIC.format("long_scoreboard"): 30.0, ncu.STALL_METRIC.format("selected"): 1.0,
        ncu.CYCLES_PER_ISSUE: 40.0, ncu.OCCUPANCY: 95.0, ncu.ISSUE_BUSY: 12.0,
        ncu.STALL_METRIC.format("mio_throttle"): 9.0}


def test_launches_are_grouped_by_marker_and_the_longest_kernel_speaks_for_its_rung():
    marker = "void cudapy::kernels::matmul_profile::profile_marker_kernel(Array<float>)"
    text = _ncu_text([(marker, 1, {}), ("rung_a(float)", 5000, LONG), (marker, 1, {}),
                      ("zero_fill", 10, {}), ("rung_b_main(float)", 900, {ncu.OCCUPANCY: 50.0})])
    launches = ncu.parse_csv(text)
    assert [x["name"] for x in launches][1] == "rung_a(float)" and launches[1]["metrics"][ncu.DURATION] == 5000
    got = matmul_profile.by_rung(launches, ["a", "b"])
    assert [(g["rung"], g["kernel"], g["launches"]) for g in got] == [("a", "rung_a", 1), ("b", "rung_b_main", 2)]
    with pytest.raises(RuntimeError, match="cannot be assigned"):
        matmul_profile.by_rung(launches, ["a", "b", "c"])


def test_stall_table_names_the_largest_reasons_and_fits_the_page():
    import matplotlib
    matplotlib.use("Agg")
    df = pd.DataFrame([{"kernel": "k", "metric": m, "value": v} for m, v in LONG.items()])
    table = ncu.stall_table(df)
    assert table.iloc[0]["stall 1"] == "long_scoreboard 75%" and table.iloc[0]["stall 2"] == "mio_throttle 22%"
    assert table.iloc[0]["occup. %"] == 95.0
    ax = ncu.plot_stalls(df)
    assert [t.get_text() for t in ax.get_legend().get_texts()][:2] == ["long_scoreboard", "mio_throttle"]


def test_profile_drops_a_metric_ncu_does_not_know(tmp_path, monkeypatch):
    """A fake ncu refuses one metric by name, then succeeds: the run is repeated without it, not lost."""
    calls = []

    def fake_run(cmd, **kw):
        metrics = cmd[cmd.index("--metrics") + 1].split(",")
        calls.append(metrics)
        if "bogus__metric.sum" in metrics:
            return subprocess.CompletedProcess(cmd, 1, "", "==ERROR== Failed to find metric bogus__metric.sum")
        return subprocess.CompletedProcess(cmd, 0, _ncu_text([("k", 10, {})]), "")

    monkeypatch.setattr(ncu.shutil, "which", lambda name: "/fake/ncu")
    monkeypatch.setattr(ncu.subprocess, "run", fake_run)
    launches, dropped, _ = ncu.profile(["prog"], [ncu.DURATION, "bogus__metric.sum"], cwd=tmp_path)
    assert dropped == ["bogus__metric.sum"] and calls[-1] == [ncu.DURATION] and len(launches) == 1
    monkeypatch.setattr(ncu.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 2, "", "boom"))
    with pytest.raises(RuntimeError, match="ncu failed"):
        ncu.profile(["prog"], [ncu.DURATION], cwd=tmp_path)


def test_the_ncu_workload_runs_the_recorded_autotune_winner_not_a_new_sweep(monkeypatch):
    from kernels import matmul as mm

    impls = matmul_profile.implementations()
    ladder = matmul_profile._ladder()
    assert [n for n, _, _ in impls] == [r.name for r in ladder.rungs] + [b.name for b in ladder.baselines]
    used = []
    monkeypatch.setattr(mm, "autotune", lambda *a, **k: pytest.fail("the ncu workload started a sweep"))
    monkeypatch.setattr(mm, "launch_warptile", lambda a, b, c, cfg, where: used.append((cfg, where)))
    run = dict((n, r) for n, r, _ in impls)["matmul_autotuned"]
    run(None, None, None)
    assert used == [(mm.recorded_config(), "matmul_autotuned")]
