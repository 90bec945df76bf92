"""Cells measured on a GPU slowed by something other than their own cap (thermal, HW slowdown, power brake:
results.metrics.SLOWDOWN_METRICS, from NVML's clock event reasons): their speed is not their stack's, so the
headline marks them and What to run and the cap analyses leave them out, as nvbench discards throttled
samples. The SW power cap on a capped cell is the cap itself and never flags it."""

from __future__ import annotations

import pandas as pd

from stackbench.analysis.common import CELL
from stackbench.results.metrics import SLOWDOWN_METRICS


def slowed_cells(results: pd.DataFrame) -> pd.DataFrame:
    """One row per slowed cell: CELL and `slowed` ("thermal 100%; power brake 5%")."""
    rows = results[results["metric"].isin(SLOWDOWN_METRICS) & (results["value"] > 0)]
    what = rows["metric"].str.removeprefix("clock_event_share_").str.replace("_", " ") + " " \
        + rows["value"].map("{:.0%}".format).astype(str)
    return rows[CELL].assign(slowed=what).groupby(CELL, dropna=False, sort=False)["slowed"].agg("; ".join).reset_index()


def slowed_of(rows: pd.DataFrame, results: pd.DataFrame) -> pd.Series:
    """For each of `rows` (carrying CELL), why its cell is slowed, '' where it is not."""
    joined = rows[CELL].merge(slowed_cells(results), on=CELL, how="left")["slowed"]
    return joined.fillna("").set_axis(rows.index)
