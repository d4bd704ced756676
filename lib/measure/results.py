"""Recorded results: CSV rows under data/results/, raw samples beside them, and their tables and plots.

One file per chapter, ``data/results/<chapter>.csv``, rewritten whole by ``make record`` on the reference
GPU; ``<chapter>.samples.json`` holds every timing sample of every row. Only the project's benchmark code
writes here (:func:`write`); nothing is typed in.
"""
from __future__ import annotations

import datetime as _dt
import math
import json
from pathlib import Path

import numpy as np

from lib.mode import DATA
from lib.measure.clocks import FIELDS as CLOCK_FIELDS
from lib import mode

RESULTS = DATA / "results"
COLUMNS = ["chapter", "kernel", "size", "dtype", "median_ms", "q1_ms", "q3_ms", "reps", "value", "unit",
           "bytes", "flops", "device", "numba_cuda", "torch", "date", "timer", *CLOCK_FIELDS]
# "timer": how the row was timed (lib.measure.timing): "held" = the GPU's time for the work, the stream held while
# the host enqueued it; "events" = a plain pair of CUDA events, the host's launch cost included. Rows
# recorded before the column existed were timed the second way.
# sm_mhz, mem_mhz, power_w, temp_c, throttle: what NVML said as the row's repetitions ended (lib.measure.clocks);
# empty where it could not be read, and in rows recorded before these columns existed.
LEGACY_DEFAULTS = {"timer": "events", **dict.fromkeys(CLOCK_FIELDS, np.nan)}  # what old rows mean


def environment() -> dict:
    """Device and versions of this process, stamped on every row it records."""
    import numba_cuda

    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = ""
    return {"device": mode.DEVICE_NAME, "numba_cuda": numba_cuda.__version__, "torch": torch_version,
            "date": _dt.datetime.now(_dt.timezone.utc).date().isoformat()}


def make_row(chapter: str, kernel: str, size: str, dtype: str, timing, unit: str, env: dict,
             gpu: dict | None = None) -> dict:
    """A result row from a :class:`lib.measure.timing.Timing`; `size` is a label such as '268435456' or '4096x4096';
    `gpu` is the clocks, power and temperature as it ran (:func:`lib.measure.clocks.after_run`), empty if None."""
    gpu = {} if gpu is None else gpu
    unknown = set(gpu) - set(CLOCK_FIELDS)
    if unknown:
        raise ValueError(f"make_row: unknown GPU-state fields {sorted(unknown)} (known: {CLOCK_FIELDS})")
    return {"chapter": chapter, "kernel": kernel, "size": str(size), "dtype": dtype,
            "median_ms": timing.median_ms, "q1_ms": timing.q1_ms, "q3_ms": timing.q3_ms, "reps": timing.reps,
            "value": timing.value(unit), "unit": unit, "bytes": timing.bytes, "flops": timing.flops, **env,
            "timer": timing.timer, **{f: gpu.get(f) for f in CLOCK_FIELDS}}


def _sample_key(row: dict) -> str:
    return f"{row['kernel']}|{row['size']}|{row['dtype']}"


def write(chapter: str, rows: list[dict], samples: dict[str, list[float]], folder: Path = RESULTS) -> Path:
    """Replace a chapter's recorded results. `samples` maps each row's 'kernel|size|dtype' to its samples."""
    import pandas as pd

    if not rows:
        raise ValueError(f"no rows to record for chapter {chapter!r}")
    for row in rows:
        if row["chapter"] != chapter:
            raise ValueError(f"row for chapter {row['chapter']!r} written to {chapter!r}")
        if _sample_key(row) not in samples:
            raise ValueError(f"no raw samples for row {_sample_key(row)}")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{chapter}.csv"
    pd.DataFrame(rows, columns=COLUMNS).to_csv(path, index=False, float_format="%.6g")
    with open(folder / f"{chapter}.samples.json", "w") as f:
        json.dump({k: [round(float(x), 6) for x in v] for k, v in samples.items()}, f, indent=0)
    return path


def not_recorded(name: str, how: str = "") -> None:
    """Say on the page that ``data/results/<name>`` is missing and which command writes it (on the
    reference GPU), in lines that fit the text column. ``how`` adds a requirement ("with ncu")."""
    chapter = name.split(".")[0]
    print(f"not recorded yet: `python -m tools.record {chapter}` on a GPU{(' ' + how) if how else ''}\n"
          f"writes data/results/{name}")


def load(chapter: str, folder: Path = RESULTS):
    """A chapter's recorded rows as a DataFrame (empty, with the columns, if nothing was recorded yet)."""
    import pandas as pd

    path = folder / f"{chapter}.csv"
    if not path.exists():
        return pd.DataFrame(columns=COLUMNS)
    df = pd.read_csv(path, dtype={"size": str, "torch": str, "numba_cuda": str})
    for column, value in LEGACY_DEFAULTS.items():
        if column not in df.columns:
            df[column] = value
    missing = set(COLUMNS) - set(df.columns)
    if missing:
        raise ValueError(f"{path} lacks the columns {sorted(missing)}")
    return df


def load_samples(chapter: str, folder: Path = RESULTS) -> dict[str, np.ndarray]:
    path = folder / f"{chapter}.samples.json"
    if not path.exists():
        return {}
    with open(path) as f:
        return {k: np.array(v) for k, v in json.load(f).items()}


def timer_note(df) -> str:
    """How a table's rows were timed, in words (the `timer` column; see lib.measure.timing)."""
    plain = sorted(set(df.loc[df["timer"] != "held", "kernel"]))
    if not plain:
        return "times are the GPU's work per call (stream held while the host enqueued it)"
    if len(plain) == len(set(df["kernel"])):
        return "times are plain CUDA event pairs (host launch cost included)"
    return ("times are the GPU's work per call (stream held), except plain event pairs for "
            + ", ".join(plain))


def _label(df) -> str:
    devices = sorted(set(df["device"]))
    dates = sorted(set(df["date"]))
    return f"{', '.join(devices)}, {dates[-1] if len(dates) == 1 else dates[0] + ' to ' + dates[-1]}"


def table(chapter: str, live: list[dict] | None = None, baseline: str | None = None, folder: Path = RESULTS):
    """Recorded rows (and a reader's live rows beside them) as a table, one line per kernel and size.

    `baseline` names a kernel (e.g. 'torch.copy'); each row then gets its value as a percentage of that
    kernel's value at the same size and source.
    """
    import pandas as pd

    recorded = load(chapter, folder)
    frames = []
    if len(recorded):
        frames.append(recorded.assign(source="recorded"))
    if live:
        frames.append(pd.DataFrame(live, columns=COLUMNS).assign(source="your GPU"))
    if not frames:
        return pd.DataFrame(columns=["source", "kernel", "size", "median_ms", "value", "unit"])
    df = pd.concat(frames, ignore_index=True)
    out = df[["source", "device", "date", "kernel", "size", "dtype", "median_ms", "q1_ms", "q3_ms", "value",
              "unit"]].copy()
    if baseline is not None:
        base = df[df["kernel"] == baseline].set_index(["source", "size"])["value"]
        keys = list(zip(df["source"], df["size"]))
        out[f"% of {baseline}"] = [100 * v / base[k] if k in base.index else np.nan
                                   for v, k in zip(df["value"], keys)]
    return out


def compact(df):
    """A `table` narrowed to fit the page's text column: the kernel (its `_kernel` suffix dropped), the size
    (only if there is more than one), the median time, the value with its unit in the header, the baseline
    percentage if any, and the source only when a reader's live rows stand beside the recorded ones (device
    and date go in the lines above the table: see `caption`)."""
    import pandas as pd

    if not len(df):
        return df
    unit = df["unit"].iloc[0] if df["unit"].nunique() == 1 else "value"
    out = pd.DataFrame({"kernel": df["kernel"].str.replace("_kernel", "", regex=False)})
    if df["source"].nunique() > 1:
        out.insert(0, "source", df["source"])
    if df["size"].nunique() > 1:
        out["size"] = df["size"]
    out["ms"] = df["median_ms"]
    out[unit] = df["value"]
    for column in [c for c in df.columns if c.startswith("% of ")]:
        out[column.replace("% of ", "% ")] = df[column]
    return out.reset_index(drop=True)


def clock_note(df) -> str:
    """The SM clock, power and temperature the rows ran at, and any clock limit the driver reported, in
    words ('' if no row has them: recorded before the columns existed, or NVML unreadable)."""
    clocked = df.dropna(subset=["sm_mhz"])
    if not len(clocked):
        return ""

    def span(column):
        lo, hi = clocked[column].min(), clocked[column].max()
        return f"{lo:.0f}" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}"

    parts = [f"{label}{span(column)} {unit}" for label, column, unit in
             [("SM clock ", "sm_mhz", "MHz"), ("memory ", "mem_mhz", "MHz"), ("", "power_w", "W"),
              ("", "temp_c", "°C")] if clocked[column].notna().any()]
    limits = sorted({r for v in clocked["throttle"].dropna() for r in str(v).split("+")} - {"none"})
    note = ", ".join(parts) + " as each row's timing ended"
    if limits:
        note += f"; clocks limited by {', '.join(limits)} in some rows"
    elif clocked["throttle"].notna().any():
        note += "; no clock limit reported"
    if len(clocked) < len(df):
        note += f" ({len(df) - len(clocked)} of {len(df)} rows without clocks)"
    return note


def caption(recorded) -> str:
    """Where and how a chapter's recorded rows (`load(chapter)`) were timed, in lines that fit the page."""
    import textwrap

    clocks = clock_note(recorded)
    return textwrap.fill(f"recorded on {_label(recorded)} by `make record`; {timer_note(recorded)}"
                         + (f"; {clocks}" if clocks else ""), 76)


def plot(chapter: str, live: list[dict] | None = None, size: str | None = None, ax=None,
         folder: Path = RESULTS, title: str | None = None, drop: tuple[str, ...] = ()):
    """A horizontal bar per kernel at one size (the largest recorded if not given), recorded and live side
    by side, labelled with the device and date it was recorded on; `drop`: kernels left out (a row on
    another scale that would flatten the others)."""
    import matplotlib.pyplot as plt

    df = table(chapter, live, folder=folder)
    if not len(df):
        raise ValueError(f"nothing recorded for chapter {chapter!r} yet: run `make record` on a GPU")
    if size is None:
        size = max(df["size"], key=lambda s: (len(s), s))
    df = df[(df["size"] == str(size)) & ~df["kernel"].isin(drop)]
    unit = df["unit"].iloc[0]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.45 * len(df) + 1.2))
    kernels = list(dict.fromkeys(df["kernel"]))
    sources = list(dict.fromkeys(df["source"]))
    height = 0.8 / len(sources)
    colors = {"recorded": "#3b7dd8", "your GPU": "#e07b39"}
    for j, source in enumerate(sources):
        sub = df[df["source"] == source].set_index("kernel")
        ys = [i + j * height for i, k in enumerate(kernels) if k in sub.index]
        vals = [sub.loc[k, "value"] for k in kernels if k in sub.index]
        label = f"{source}: {_label(sub.reset_index())}"
        ax.barh(ys, vals, height=height, color=colors.get(source), label=label)
    ax.set_yticks([i + height * (len(sources) - 1) / 2 for i in range(len(kernels))], kernels)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title or f"{chapter}: size {size}")
    # below the axis label, not over the longest bars (which end at the right, where a legend would sit)
    from matplotlib.transforms import ScaledTranslation
    below = ax.transAxes + ScaledTranslation(0, -0.5, ax.figure.dpi_scale_trans)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0), bbox_transform=below, fontsize="small", frameon=False,
              title="recorded on" if sources == ["recorded"] else None)
    ax.figure.tight_layout()
    return ax


def show(chapter: str, live: list[dict] | None = None, baseline: str | None = None, size: str | None = None):
    """Display a chapter's table and plot in a notebook (recorded rows, and the reader's beside them)."""
    from IPython.display import display

    recorded = load(chapter)
    if not len(recorded) and not live:
        print(f"nothing recorded for {chapter!r} yet: `make record` on a GPU writes data/results/{chapter}.csv")
        return
    if len(recorded):
        print(caption(recorded))
    display(compact(table(chapter, live, baseline)).style.format(precision=3, na_rep="", thousands=",").hide(axis="index"))
    plot(chapter, live, size=size)


def roofline_points(folder: Path | None = None) -> tuple[list[dict], int]:
    """Every recorded row of every chapter (data/results/*.csv) that has both FLOPs and bytes, as a point:
    its intensity (recorded flops / bytes) and its achieved TFLOP/s (flops / median time). Returns the
    points and how many rows could not be placed (no FLOP count recorded, e.g. a copy)."""
    import pandas as pd

    folder = RESULTS if folder is None else Path(folder)
    points, unplaced = [], 0
    for path in sorted(folder.glob("*.csv")):
        try:
            df = pd.read_csv(path, comment="#")
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
            continue
        if not set(COLUMNS) - set(LEGACY_DEFAULTS) <= set(df.columns):
            continue  # not a ladder's results file (an autotune sweep, a latency table ...)
        for row in df.itertuples(index=False):
            flops, nbytes, ms = row.flops, row.bytes, row.median_ms
            if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (flops, nbytes, ms)):
                unplaced += 1
                continue
            points.append({"chapter": row.chapter, "kernel": row.kernel, "size": str(row.size),
                           "device": row.device, "intensity": flops / nbytes,
                           "tflops": flops / (ms * 1e-3) / 1e12})
    return points, unplaced


def glue(name: str, text: str) -> None:
    """A number for the page's prose (``{glue:text}`name```), computed from data/: myst-nb's glue, which the
    book's build has; where myst-nb is not installed (a notebook on a bare GPU machine) there is no prose to
    fill in and nothing to do."""
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        return
    myst_glue(name, text, display=False)
