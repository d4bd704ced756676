"""lib.measure.clocks and the clock columns of lib.measure.results; lib.measure.bench's dtype label. No GPU needed: NVML's readings are
stood in for where a test needs them, and on a machine without NVML the columns must stay empty."""
import numpy as np
import pandas as pd
import pytest

import lib
from lib.measure import bench, clocks, results
from lib.measure.timing import Timing

ENV = {"device": "Test GPU", "numba_cuda": "0.30.4", "torch": "2.11", "date": "2026-11-30"}
BUSY = {"sm_mhz": 1980, "mem_mhz": 3201, "power_w": 400.0, "temp_c": 50, "throttle": "none"}


def test_reasons_name_the_bits():
    assert clocks.reasons(0) == "none"
    assert clocks.reasons(0x1 | 0x4) == "idle+sw_power_cap"
    assert clocks.reasons(0x40 | 0x10000) == "hw_thermal+0x10000"


def test_summary_takes_medians_the_hottest_reading_and_every_limit_but_idle():
    readings = [BUSY, dict(BUSY, sm_mhz=1755, power_w=690.0, temp_c=61, throttle="sw_power_cap"),
                dict(BUSY, sm_mhz=1980, throttle="idle"), dict.fromkeys(clocks.FIELDS)]
    got = clocks.summarize(readings)
    assert got == {"sm_mhz": 1980.0, "mem_mhz": 3201.0, "power_w": 400.0, "temp_c": 61.0,
                   "throttle": "sw_power_cap"}
    assert clocks.summarize([dict(BUSY, throttle="idle")])["throttle"] == "none"
    assert clocks.summarize([]) == clocks.EMPTY
    # a field the GPU cannot report (power under MIG) stays empty, the others are kept
    assert clocks.summarize([dict(BUSY, power_w=None)])["power_w"] is None


def test_after_run_is_one_reading_with_idle_not_counted_as_a_limit(monkeypatch):
    monkeypatch.setattr(clocks, "sample", lambda: dict(BUSY, throttle="idle+sw_power_cap"))
    assert clocks.after_run() == dict(BUSY, sm_mhz=1980.0, mem_mhz=3201.0, temp_c=50.0, throttle="sw_power_cap")


def test_without_nvml_the_fields_are_empty_never_guessed(monkeypatch):
    monkeypatch.setattr(clocks, "_nvml", False)
    assert clocks.sample() == clocks.EMPTY and clocks.limits() == {} and clocks.after_run() == clocks.EMPTY


def _row(gpu=None):
    t = Timing([1.0, 1.1, 0.9], bytes=8 * 1024)
    return results.make_row("demo", "copy_kernel", "1024", "float32", t, "GB/s", ENV, gpu=gpu), t


def test_clock_columns_round_trip_and_reach_the_caption(tmp_path):
    r, t = _row(clocks.summarize([BUSY, dict(BUSY, sm_mhz=1830, throttle="sw_power_cap")]))
    bare, _ = _row()
    bare["kernel"] = "torch.copy"
    results.write("demo", [r, bare], {"copy_kernel|1024|float32": list(t.samples_ms),
                                      "torch.copy|1024|float32": list(t.samples_ms)}, folder=tmp_path)
    df = results.load("demo", folder=tmp_path)
    assert list(df.columns) == results.COLUMNS
    assert df["sm_mhz"].iloc[0] == 1905.0 and np.isnan(df["sm_mhz"].iloc[1])
    note = results.clock_note(df)
    assert "SM clock 1905 MHz" in note and "400 W" in note and "sw_power_cap" in note
    assert "1 of 2 rows without clocks" in note
    text = results.caption(df)
    assert "SM clock" in text and all(len(line) <= bench.PAGE_WIDTH for line in text.splitlines())
    with pytest.raises(ValueError, match="unknown GPU-state fields"):
        _row({"clock": 1980})


def test_files_recorded_before_the_clock_columns_still_load(tmp_path):
    r, _ = _row()
    pd.DataFrame([r]).drop(columns=clocks.FIELDS).to_csv(tmp_path / "old.csv", index=False)
    df = results.load("old", folder=tmp_path)
    assert list(df.columns) == results.COLUMNS and df["sm_mhz"].isna().all()
    assert results.clock_note(df) == "" and "SM clock" not in results.caption(df)


def _copy_ladder(rungs):
    return bench.Ladder(
        chapter="demo", topic="copy", description="copy", make_inputs=lambda n, rng: (
            rng.standard_normal(n).astype(np.float32),),
        out_shape=lambda x: x.shape, reference=lambda x: x.astype(np.float64), bytes=lambda n: 8 * n,
        flops=None, unit="GB/s", sizes=[64], sim_sizes=[64], rungs=rungs)


def test_rows_are_labelled_with_the_rungs_precision(monkeypatch):
    """A rung that states its precision is labelled with it (not float32), the others with their inputs'
    dtype; and each timed row carries the clock fields."""
    def copy(x, out):
        out.copy_to_device(x)

    monkeypatch.setattr(lib.mode, "ON_GPU", True)  # the timer is stood in for: only the labelling is tested
    monkeypatch.setattr("lib.measure.timing.time_cuda", lambda fn, **kw: Timing([1.0, 1.2], bytes=kw["bytes"]))
    monkeypatch.setattr(clocks, "_nvml", False)
    rows, samples, failures = bench.run_ladder(
        _copy_ladder([bench.Rung("copy_as_stored", copy), bench.Rung("copy_fp16", copy, dtype="float16")]),
        sizes=[64])
    assert not failures and [r["dtype"] for r in rows] == ["float32", "float16"]
    assert set(samples) == {"copy_as_stored|64|float32", "copy_fp16|64|float16"}
    assert all(set(clocks.FIELDS) <= set(r) and r["sm_mhz"] is None for r in rows)
