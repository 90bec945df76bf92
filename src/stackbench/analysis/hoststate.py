"""Cells measured on a host busy outside their launch (host/hostload.py: metric host_busy above 0, its note naming
the processes), and launches refused on one (status host_busy): another workload took the CPUs that are a CPU
engine's compute, or a GPU server's scheduler and client, so their figures are not the stack's. What to run, the
variance table and the noise floor leave such cells out, as they leave out a throttled GPU's (analysis.gpustate)."""

from __future__ import annotations

import re

import pandas as pd

from stackbench.analysis.common import CELL
from stackbench.results.metrics import M

# A cell across its launch replicates: every launch of one server configuration measures the same cell.
CELL_ACROSS_LAUNCHES = [c for c in CELL if c not in ("ref", "replicate")]
PROCESS = re.compile(r"([^,:;()]+?) \(pid (\d+)\)")
REFUSED = "host_busy"  # the cell status of a launch refused on a busy host


def _text(rows: pd.DataFrame, column: str) -> pd.Series:
    """A text column of `rows`, '' where it is missing (the analysis frame leaves notes out) or null."""
    if column not in rows.columns:
        return pd.Series("", index=rows.index, dtype=object)
    return rows[column].where(rows[column].notna(), "").astype(str)


def busy_rows(results: pd.DataFrame) -> pd.DataFrame:
    """One row per flagged cell of each launch: CELL and `busy`, the reason: when (before the launch, during the
    cell), the busiest stretch's outside share, and the processes its note names (where the frame has notes)."""
    rows = results[(results["metric"] == M.host_busy) & (results["value"] > 0) & (results["workload"] != "server")]
    rows = rows.drop_duplicates(CELL)
    note = _text(rows, "note")
    peaks = results[results["metric"] == M.host_outside_cpu_share_peak].drop_duplicates(CELL)[CELL + ["value"]]
    peak = rows[CELL].merge(peaks, on=CELL, how="left")["value"].set_axis(rows.index)

    def reason(note: str, peak: float) -> str:
        when = [w for w in ("before the launch", "during the cell") if f"HOST BUSY {w}" in note]
        share = f"processes outside the launch up to {peak:.0%} of the cores" if peak == peak else "outside share not stated"
        named = processes_in([note])
        return f"host busy{' ' + ' and '.join(when) if when else ''}: {share}" + (f" ({named})" if named else "")

    return rows[CELL].assign(busy=[reason(n, p) for n, p in zip(note, peak)])


def busy_of(cells: pd.DataFrame, results: pd.DataFrame, every_replicate: bool = True) -> pd.Series:
    """For each of `cells` (carrying the cell's columns), why it ran on a busy host, '' where it did not. With
    `every_replicate`, a cell is busy where ANY launch replicate of it was, and the reason names each one
    (`replicate 2: HOST BUSY ...`); without, only the row's own launch counts (as analysis.gpustate.slowed_of)."""
    flagged = busy_rows(results)
    if flagged.empty:
        return pd.Series("", index=cells.index, dtype=object)
    key = [c for c in (CELL_ACROSS_LAUNCHES if every_replicate else CELL) if c in cells.columns]
    if every_replicate:
        replicate = flagged["replicate"].map(lambda r: f"replicate {r:.0f}" if r == r else "replicate ?")
        flagged = flagged.assign(busy=replicate + ": " + flagged["busy"])
    reasons = flagged.groupby(key, dropna=False, sort=False)["busy"].agg(lambda r: "; ".join(dict.fromkeys(r))).reset_index()
    joined = cells[key].merge(reasons, on=key, how="left")["busy"]
    return joined.fillna("").set_axis(cells.index).astype(object)


def cell_label(rows: pd.DataFrame) -> pd.Series:
    """'code c4', 'chat 2 req/s', 'code c1 300 W': a cell as the report names it."""
    def one(row) -> str:
        parts = [str(row["workload"])]
        if row.get("request_rate") == row.get("request_rate") and row.get("request_rate") is not None:
            parts.append(f"{row['request_rate']:g} req/s")
        elif row.get("concurrency") == row.get("concurrency") and row.get("concurrency") is not None:
            parts.append(f"c{row['concurrency']:.0f}")
        if row.get("power_cap_w") == row.get("power_cap_w") and row.get("power_cap_w") is not None:
            parts.append(f"{row['power_cap_w']:g} W")
        return " ".join(parts)

    return rows.apply(one, axis=1).astype(object) if len(rows) else pd.Series([], index=rows.index, dtype=object)


def processes_in(texts) -> str:
    """The outside processes named in these reasons, each once, in order of appearance: 'python3 (pid 4242), make (pid 17)'."""
    found = dict.fromkeys(f"{name.strip()} (pid {pid})" for text in texts for name, pid in PROCESS.findall(text or ""))
    return ", ".join(found)


LAUNCH_KEY = ["node", "ref", "stack", "variant", "replicate"]


def busy_launches(results: pd.DataFrame) -> pd.DataFrame:
    """One row per measured launch that ran on, or was refused on, a busy host: node, ref, stack, variant,
    replicate, `refused` (its cells got status host_busy, nothing measured), `cells` (how many were flagged or
    refused), `cell_list` ('code c1, code c4') and `processes` (the outside processes the reasons name; '' where
    the frame carries neither notes nor reasons). Empty (with these columns) where none did."""
    columns = [*LAUNCH_KEY, "refused", "cells", "cell_list", "processes"]
    flagged = busy_rows(results)
    flagged = flagged.assign(why=flagged["busy"], refused=False)
    refused = results[(results["status"] == REFUSED) & (results["workload"] != "server")].drop_duplicates(CELL)
    refused = refused[CELL].assign(why=_text(refused, "reason"), refused=True)
    both = pd.concat([flagged.drop(columns="busy"), refused], ignore_index=True)
    if both.empty:
        return pd.DataFrame(columns=columns)
    both = both.assign(label=cell_label(both))
    rows = []
    for launch, group in both.groupby(LAUNCH_KEY, dropna=False, sort=False):
        rows.append({**dict(zip(LAUNCH_KEY, launch)), "refused": bool(group["refused"].all()),
                     "cells": int(group["label"].nunique()), "cell_list": ", ".join(dict.fromkeys(group["label"])),
                     "processes": processes_in(group["why"])})
    return pd.DataFrame(rows, columns=columns)


def busy_lines(results: pd.DataFrame) -> list[str]:
    """The report's first lines about a busy host: one per launch, e.g. 'local-cpu llamacpp nospec (replicate 1):
    host busy in 3 cells, left out (code c1, code c2, prose c1): python3 (pid 4242)'."""
    lines = []
    for row in busy_launches(results).itertuples(index=False):
        replicate = f" (replicate {row.replicate:.0f})" if row.replicate == row.replicate and row.replicate is not None else ""
        what = "refused on a busy host" if row.refused else "host busy"
        by = f": {row.processes}" if row.processes else ""
        lines.append(f"{row.node} {row.stack} {row.variant}{replicate}: {what} in {row.cells} cell"
                     f"{'s' if row.cells != 1 else ''}, left out ({row.cell_list}){by}")
    return lines
