"""Nsight Compute from Python: run a workload under ``ncu``, read its counters per launch, and say why warps
waited (the stall reasons of ncu's Warp State section) in a table and a plot that fit the page.

A warp scheduler issues at most one instruction per cycle. ncu counts, for every cycle in which an instruction
was issued, how many warps were waiting and on what: ``smsp__average_warps_issue_stalled_<reason>_per_issue_
active.ratio``. Summed over the reasons (plus "selected", the warp that issued) it is the *warp cycles per
issued instruction*: the average time between two instructions of one warp. The reason that takes most of it
is what limits the kernel: long_scoreboard = waiting for global or local memory, mio_throttle and
short_scoreboard = shared memory, math_pipe_throttle = the arithmetic units are busy (a compute-bound kernel),
barrier = __syncthreads, not_selected = the warp was ready but another one issued (plenty of ready warps).
"""
from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

STALL_REASONS = ["long_scoreboard", "short_scoreboard", "mio_throttle", "lg_throttle", "barrier",
                 "math_pipe_throttle", "wait", "not_selected", "selected", "dispatch_stall", "no_instruction",
                 "branch_resolving", "tex_throttle", "membar", "drain", "imc_miss", "misc", "sleeping"]
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
CYCLES_PER_ISSUE = "smsp__average_warps_active_per_issue_active.ratio"
ISSUE_BUSY = "smsp__issue_active.avg.pct_of_peak_sustained_active"         # % of cycles an instruction issued
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"            # achieved, % of 64 warps per SM
THEORETICAL_OCCUPANCY = "sm__maximum_warps_per_active_cycle_pct"
DURATION = "gpu__time_duration.sum"                                        # ns
WARP_STATE = [CYCLES_PER_ISSUE, ISSUE_BUSY, OCCUPANCY, THEORETICAL_OCCUPANCY, DURATION] + \
    [STALL_METRIC.format(r) for r in STALL_REASONS]


def parse_csv(text: str) -> list[dict]:
    """One dict per profiled launch, in launch order: its kernel name and {metric: value}, from the output
    of ``ncu --csv`` (the program's own lines and ncu's ==PROF== lines are skipped)."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    launches: dict[int, dict] = {}
    for rec in csv.DictReader(lines):
        try:
            value = float(rec["Metric Value"].replace(",", ""))
            launch = launches.setdefault(int(rec["ID"]), {"name": rec["Kernel Name"], "metrics": {}})
        except (KeyError, ValueError):
            continue
        launch["metrics"][rec["Metric Name"]] = value
    return [launches[i] for i in sorted(launches)]


def profile(program: list[str], metrics: list[str], cwd: Path, timeout_s: int = 540):
    """Run `program` under ncu (clocks left alone, as the book's timer leaves them) and return
    ``(launches, dropped, log)``: :func:`parse_csv` of every launch, the metrics this ncu does not know (they
    are dropped and the run repeated rather than losing all counters to one name), and the end of ncu's
    output. Raises RuntimeError if ncu is missing or the run fails for another reason."""
    ncu = shutil.which("ncu") or ("/usr/local/cuda/bin/ncu" if Path("/usr/local/cuda/bin/ncu").exists() else None)
    if ncu is None:
        raise RuntimeError("ncu (Nsight Compute) not found on PATH or in /usr/local/cuda/bin")
    metrics, dropped = list(metrics), []
    for _ in range(4):
        cmd = [ncu, "--clock-control", "none", "--csv", "--metrics", ",".join(metrics), *program]
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
        log = (proc.stderr[-3000:] + "\n" + proc.stdout[-3000:]).strip()
        if proc.returncode == 0:
            return parse_csv(proc.stdout), dropped, log
        errors = " ".join(line for line in log.splitlines() if "ERROR" in line)  # they name the bad metric
        unknown = {m for m in metrics if m.split(".")[0] in errors}
        if not unknown:
            raise RuntimeError(f"ncu failed (exit {proc.returncode}):\n{log}")
        dropped += sorted(unknown)
        metrics = [m for m in metrics if m not in unknown]
    raise RuntimeError(f"ncu kept refusing metrics (dropped {dropped}):\n{log}")


def stall_table(df, top: int = 2):
    """A narrow per-kernel summary of long-format counters (columns kernel, metric, value): achieved
    occupancy, issue slots busy, warp cycles per issued instruction, and the `top` stall reasons with the
    share of those cycles each takes."""
    import pandas as pd

    rows = []
    for kernel, sub in df.groupby("kernel", sort=False):
        m = dict(zip(sub["metric"], sub["value"]))
        stalls = {r: m[STALL_METRIC.format(r)] for r in STALL_REASONS if STALL_METRIC.format(r) in m}
        total = m.get(CYCLES_PER_ISSUE, float("nan"))
        row = {"kernel": kernel, "occup. %": m.get(OCCUPANCY), "issue %": m.get(ISSUE_BUSY),
               "cyc/inst": total}
        ranked = sorted(stalls.items(), key=lambda kv: -kv[1])[:top]
        for i, (reason, value) in enumerate(ranked, 1):
            row[f"stall {i}"] = f"{reason} {100 * value / total:.0f}%"
        rows.append(row)
    return pd.DataFrame(rows)


def plot_stalls(df, ax=None, top: int = 6, title: str = ""):
    """Warp cycles per issued instruction of each kernel, split into its stall reasons (the `top` largest
    over all kernels; the rest as 'other'), one horizontal stacked bar per kernel."""
    import matplotlib.pyplot as plt

    table = {k: dict(zip(s["metric"], s["value"])) for k, s in df.groupby("kernel", sort=False)}
    totals = {r: sum(m.get(STALL_METRIC.format(r), 0.0) for m in table.values()) for r in STALL_REASONS}
    shown = [r for r in sorted(totals, key=lambda r: -totals[r]) if totals[r] > 0][:top]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.4 * len(table) + 1.6))
    kernels = list(table)
    left = [0.0] * len(kernels)
    colors = plt.get_cmap("tab10").colors
    for i, reason in enumerate(shown + ["other"]):
        if reason == "other":
            vals = [sum(table[k].get(STALL_METRIC.format(r), 0.0) for r in STALL_REASONS if r not in shown)
                    for k in kernels]
        else:
            vals = [table[k].get(STALL_METRIC.format(reason), 0.0) for k in kernels]
        ax.barh(range(len(kernels)), vals, left=left, color="#bbbbbb" if reason == "other" else colors[i],
                label=reason)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks(range(len(kernels)), kernels)
    ax.invert_yaxis()
    ax.set_xlabel("warp cycles per issued instruction, by what the warp waited on")
    if title:
        ax.set_title(title)
    ax.legend(fontsize="small", loc="lower right")
    ax.figure.tight_layout()
    return ax
