"""lib's pure parts: the timer's maths, the spec table, results I/O, argument checks, mode detection."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import lib
from lib.measure import results
from lib.hw import specs
from lib.measure.timing import Timing, TimingUnavailable, reps_for, time_cuda
from lib.runtime.validate import require


# --- timing ---------------------------------------------------------------------------------------
def test_timing_statistics_and_rates():
    t = Timing([4.0, 1.0, 2.0, 3.0, 5.0], bytes=8_000_000_000, flops=2_000_000_000_000)
    assert (t.q1_ms, t.median_ms, t.q3_ms, t.reps) == (2.0, 3.0, 4.0, 5)
    assert t.gbps == pytest.approx(8e9 / 3e-3 / 1e9)
    assert t.tflops == pytest.approx(2e12 / 3e-3 / 1e12)
    assert t.value("GB/s") == t.gbps and t.value("TFLOP/s") == t.tflops and t.value("ms") == 3.0
    frac = t.fraction_of_peak(specs.GPUS["H200"])
    assert frac["bandwidth"] == pytest.approx(t.gbps / 4800)
    assert frac["fp32"] == pytest.approx(t.tflops / 67.0)


def test_timing_rejects_bad_samples_and_units():
    with pytest.raises(ValueError):
        Timing([])
    with pytest.raises(ValueError):
        Timing([1.0, -2.0])
    with pytest.raises(ValueError, match="bytes"):
        Timing([1.0]).value("GB/s")
    with pytest.raises(ValueError, match="unknown unit"):
        Timing([1.0], bytes=1).value("GiB/s")


def test_reps_for_fills_the_budget_within_bounds():
    assert reps_for(4.0) == 100
    assert reps_for(1000.0) == 10
    assert reps_for(0.001) == 200


@pytest.mark.skipif(lib.ON_GPU, reason="the refusal is the simulator's behaviour")
def test_timer_refuses_on_the_simulator():
    with pytest.raises(TimingUnavailable, match="simulator"):
        time_cuda(lambda: None, bytes=1)


class _FakeCuda:
    """Just enough of numba.cuda for lib.measure.timing._Held: events whose elapsed time is 1 ms, a log of calls."""

    def __init__(self):
        self.log = []

    def event(self):
        log = self.log

        class Event:
            def record(self):
                log.append("record")

            def synchronize(self):
                log.append("sync")
        return Event()

    def event_elapsed_time(self, start, stop):
        return 1.0

    def synchronize(self):
        self.log.append("device sync")


class _FakeHold:
    def __init__(self):
        self.holds = []

    def __getitem__(self, config):
        def launch(ns):
            import warnings
            # what numba-cuda says of every one-block launch; the hold is one thread on purpose
            warnings.warn(UserWarning("\x1b[1mGrid size 1 will likely result in GPU under-utilization due to "
                                      "low occupancy.\x1b[0m"))
            self.holds.append(int(ns))
        return launch


def _held_with(monkeypatch, fn, start_ns, max_ns):
    from lib.measure import timing

    hold = _FakeHold()
    monkeypatch.setattr(timing, "_hold_kernel", lambda: hold)
    monkeypatch.setattr(timing, "HOLD_START_NS", start_ns)
    monkeypatch.setattr(timing, "HOLD_MAX_NS", max_ns)
    sample = timing._Held(_FakeCuda(), fn)
    return sample, hold


def test_held_sample_grows_the_hold_until_the_host_fits_inside(monkeypatch):
    import time

    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sample, hold = _held_with(monkeypatch, lambda: time.sleep(0.003), start_ns=1_000_000,
                                  max_ns=64_000_000)
        assert sample() == 1.0 and sample.held
    assert not caught  # the hold's own launches never warn the reader
    timed = hold.holds[1:]   # the first launch (0 ns) only compiles the kernel
    # 1 ms and 2 ms are shorter than the 3 ms the host spends enqueuing: doubled until 4 ms covers it
    assert timed[:3] == [1_000_000, 2_000_000, 4_000_000] and sample.ns >= 4_000_000
    assert sample() == 1.0 and hold.holds[-1] == sample.ns  # later samples start from the grown hold


def test_held_sample_gives_up_on_a_call_that_waits_for_the_gpu(monkeypatch):
    import time

    # a call that takes longer on the host than the largest hold (here 4 ms) can never be held: it is then
    # timed by a plain event pair and says so, instead of passing for a held time
    sample, hold = _held_with(monkeypatch, lambda: time.sleep(0.006), start_ns=1_000_000, max_ns=4_000_000)
    assert sample() == 1.0 and not sample.held
    assert hold.holds[1:] == [1_000_000, 2_000_000, 4_000_000]
    n = len(hold.holds)
    sample()
    assert len(hold.holds) == n  # no more holds once given up


@pytest.mark.skipif(not lib.ON_GPU, reason="needs a CUDA GPU")
def test_held_timer_on_a_gpu_removes_the_launch_cost():
    from numba import cuda

    from kernels.intro import empty_kernel

    x = cuda.device_array(1, dtype=np.float32)
    plain = time_cuda(lambda: empty_kernel[1, 32](x), hold=False, reps=50)
    held = time_cuda(lambda: empty_kernel[1, 32](x), reps=50)
    assert held.timer == "held" and plain.timer == "events"
    assert held.median_ms < plain.median_ms  # an empty kernel: the plain pair is mostly the host's launch
    waits = time_cuda(lambda: (empty_kernel[1, 32](x), cuda.synchronize()), reps=3)
    assert waits.timer == "events"


# --- specs ----------------------------------------------------------------------------------------
FP32_LANES_PER_SM = {"Hopper": 128, "Ada Lovelace": 128, "Ampere": 64, "Turing": 64}


@pytest.mark.parametrize("key", sorted(specs.GPUS))
def test_spec_is_consistent_and_sourced(key):
    s = specs.GPUS[key]
    assert "https://" in s.source
    # FP32 peak = SMs x FP32 lanes x 2 (FMA) x boost clock: the datasheet figure must follow from the others
    derived = s.sms * FP32_LANES_PER_SM[s.arch] * 2 * s.boost_mhz * 1e6 / 1e12
    assert derived == pytest.approx(s.fp32_tflops, rel=0.01)
    assert s.max_warps_per_sm * 32 == s.max_threads_per_sm
    assert s.ridge_fp32 == pytest.approx(s.fp32_tflops * 1e3 / s.bandwidth_gbs)


@pytest.mark.parametrize("name,key", [("NVIDIA H200", "H200"), ("NVIDIA H100 80GB HBM3", "H100"),
                                      ("NVIDIA A100-SXM4-80GB", "A100"), ("Tesla T4", "T4"),
                                      ("NVIDIA L4", "L4"), ("NVIDIA GeForce RTX 4090", "RTX 4090"),
                                      ("NVIDIA L40S", None), ("CUDA simulator", None)])
def test_spec_for_device_names(name, key):
    got = specs.spec_for(name)
    assert (got.key if got else None) == key


def test_spec_table_lists_every_gpu():
    assert len(specs.table()) == len(specs.GPUS) >= 6


# --- results --------------------------------------------------------------------------------------
def _row(kernel, value_ms, size="1024"):
    t = Timing([value_ms, value_ms * 1.1, value_ms * 0.9], bytes=8 * 1024)
    env = {"device": "Test GPU", "numba_cuda": "0.30.4", "torch": "2.11", "date": "2026-11-30"}
    return results.make_row("demo", kernel, size, "float32", t, "GB/s", env), t


def test_results_round_trip(tmp_path):
    (r1, t1), (r2, t2) = _row("torch.copy", 1.0), _row("copy_kernel", 2.0)
    samples = {"torch.copy|1024|float32": list(t1.samples_ms), "copy_kernel|1024|float32": list(t2.samples_ms)}
    results.write("demo", [r1, r2], samples, folder=tmp_path)
    df = results.load("demo", folder=tmp_path)
    assert list(df.columns) == results.COLUMNS
    assert list(df["kernel"]) == ["torch.copy", "copy_kernel"]
    assert df["value"].iloc[1] == pytest.approx(t2.gbps, rel=1e-5)
    assert results.load_samples("demo", folder=tmp_path)["copy_kernel|1024|float32"].tolist() == \
        pytest.approx(list(t2.samples_ms))
    table = results.table("demo", baseline="torch.copy", folder=tmp_path)
    assert table["% of torch.copy"].tolist() == pytest.approx([100.0, 50.0])


def test_results_say_how_each_row_was_timed(tmp_path):
    (r1, _), (r2, _) = _row("torch.copy", 1.0), _row("copy_kernel", 2.0)
    assert r1["timer"] == "held"
    r2["timer"] = "events"
    results.write("demo", [r1, r2], {"torch.copy|1024|float32": [1.0], "copy_kernel|1024|float32": [2.0]},
                  folder=tmp_path)
    df = results.load("demo", folder=tmp_path)
    assert list(df["timer"]) == ["held", "events"]
    assert "except plain event pairs for copy_kernel" in results.timer_note(df)
    assert "stream held" in results.timer_note(df.iloc[:1])
    # a file recorded before the column existed was timed by plain event pairs, and is read as such
    old = tmp_path / "old.csv"
    df.drop(columns="timer").to_csv(old, index=False)
    assert set(results.load("old", folder=tmp_path)["timer"]) == {"events"}
    assert "host launch cost included" in results.timer_note(results.load("old", folder=tmp_path))


def test_results_refuse_rows_without_samples_or_of_another_chapter(tmp_path):
    r, _ = _row("k", 1.0)
    with pytest.raises(ValueError, match="samples"):
        results.write("demo", [r], {}, folder=tmp_path)
    with pytest.raises(ValueError, match="chapter"):
        results.write("other", [r], {"k|1024|float32": [1.0]}, folder=tmp_path)


def test_live_rows_sit_beside_recorded_ones_in_table_and_plot(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    r, t = _row("copy_kernel", 2.0)
    results.write("demo", [r], {"copy_kernel|1024|float32": list(t.samples_ms)}, folder=tmp_path)
    mine, _ = _row("copy_kernel", 4.0)
    mine["device"] = "Reader GPU"
    table = results.table("demo", live=[mine], folder=tmp_path)
    assert list(table["source"]) == ["recorded", "your GPU"]
    ax = results.plot("demo", live=[mine], folder=tmp_path)
    assert ax.get_xlabel() == "GB/s"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("Test GPU, 2026-11-30" in s for s in labels) and any("Reader GPU" in s for s in labels)
    other, t_other = _row("copy_other_kernel", 1.0)
    results.write("demo", [r, other], {"copy_kernel|1024|float32": list(t.samples_ms),
                                       "copy_other_kernel|1024|float32": list(t_other.samples_ms)}, folder=tmp_path)
    shown = lambda ax: [t.get_text() for t in ax.get_yticklabels()]  # noqa: E731
    assert shown(results.plot("demo", folder=tmp_path)) == ["copy_kernel", "copy_other_kernel"]
    assert shown(results.plot("demo", folder=tmp_path, drop=("copy_other_kernel",))) == ["copy_kernel"]


def test_missing_chapter_loads_empty():
    assert len(results.load("no-such-chapter")) == 0


RECORDED = sorted(p for p in results.RESULTS.glob("*.csv") if "." not in p.stem)  # chapter tables, not extras


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
def test_recorded_results_are_complete(path):
    """Every recorded row names its device, versions and date, has a positive value, and its raw samples
    reproduce its median."""
    df = results.load(path.stem)
    samples = results.load_samples(path.stem)
    assert len(df)
    for _, row in df.iterrows():
        assert row["device"] and row["numba_cuda"] and row["date"]
        assert row["value"] > 0 and row["q1_ms"] <= row["median_ms"] <= row["q3_ms"]
        s = samples[f"{row['kernel']}|{row['size']}|{row['dtype']}"]
        assert len(s) == row["reps"]
        assert np.median(s) == pytest.approx(row["median_ms"], rel=1e-4)


# --- argument checks ------------------------------------------------------------------------------
def test_require_names_the_problem():
    from numba import cuda
    x = cuda.to_device(np.zeros((4, 6), np.float32))
    assert require(x, "x", ndim=2) is x
    with pytest.raises(TypeError, match="`y` must be float32, got float64"):
        require(np.zeros(3), "y")
    with pytest.raises(ValueError, match="must be 1-D"):
        require(x, "x", ndim=1)
    with pytest.raises(ValueError, match=r"shape \(4, 5\)"):
        require(x, "x", shape=(4, 5))
    with pytest.raises(ValueError, match="C-contiguous"):
        require(np.zeros((4, 6), np.float32)[:, ::2], "x")
    with pytest.raises(TypeError, match="numba device array"):
        require([1.0, 2.0], "x")


# --- mode detection -------------------------------------------------------------------------------
def test_import_lib_prints_one_line_and_picks_a_mode():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    code = "import lib, json; print(json.dumps([lib.SIMULATOR, lib.DEVICE_NAME, lib.pick(1, 2)]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=lib.ROOT, check=True).stdout.splitlines()
    assert len(out) == 2 and out[0].startswith("lib: ")
    simulator, name, picked = json.loads(out[1])
    assert simulator == lib.SIMULATOR and picked == (1 if simulator else 2)
    assert ("simulator" in out[0]) == simulator and (name in out[0] or simulator)


def test_forcing_the_simulator_is_respected():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, "-c", "import lib; print(lib.SIMULATOR)"], capture_output=True,
                         text=True, env=env, cwd=lib.ROOT, check=True).stdout.split()
    assert out[-1] == "True"


def test_notebook_runner_names_the_cell_a_kernel_died_in(tmp_path):
    """tools.notebooks: a kernel that dies mid-notebook is reported with the cell it died in (an H200 run of a
    chapter once ended with nothing but nbclient's "Kernel died")."""
    from tools.notebooks import execute

    page = tmp_path / "dies.md"
    page.write_text("---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
                    "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n# t\n\n"
                    "```{code-cell} ipython3\nx = 1\n```\n\n```{code-cell} ipython3\nimport os\nos._exit(3)\n```\n")
    _, _, error = execute(page, timeout=60)
    assert error is not None and "died in cell 2" in str(error) and "os._exit(3)" in str(error)
