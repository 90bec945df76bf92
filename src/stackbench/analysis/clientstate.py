"""Cells measured by a load client that could not keep up (measure/clientload.py: metric client_saturated above 0,
its note saying why): their chunks were stamped late, so their speed is the client's, not the stack's. The headline
marks them and What to run leaves them out, as it does a throttled GPU's (analysis.gpustate) and a busy host's
(analysis.hoststate)."""

from __future__ import annotations

import pandas as pd

from stackbench.analysis.common import CELL
from stackbench.results.metrics import M

# The flag and what its reason is made of: the rows an analysis reading saturated_cells needs.
CLIENT_METRICS = (M.client_saturated, M.client_cpu_share, M.client_loop_lag_p99_ms)


def saturated_cells(results: pd.DataFrame) -> pd.DataFrame:
    """One row per cell whose client was saturated: CELL and `saturated` ("client saturated: its event loop busy
    97% of a core, loop lag p99 31.0 ms")."""
    flagged = results[(results["metric"] == M.client_saturated) & (results["value"] > 0)].drop_duplicates(CELL)[CELL]

    def values(metric: str) -> list:
        found = results[results["metric"] == metric].drop_duplicates(CELL)[CELL + ["value"]]
        return flagged.merge(found, on=CELL, how="left")["value"].tolist()

    def reason(share: float, lag: float) -> str:
        parts = [f"its event loop busy {share:.0%} of a core"] if share == share else []
        parts += [f"loop lag p99 {lag:.1f} ms"] if lag == lag else []
        return "client saturated" + (": " + ", ".join(parts) if parts else "")

    return flagged.assign(saturated=[reason(s, g) for s, g in zip(values(M.client_cpu_share),
                                                                    values(M.client_loop_lag_p99_ms))]).reset_index(drop=True)


def saturated_of(rows: pd.DataFrame, results: pd.DataFrame) -> pd.Series:
    """For each of `rows` (carrying CELL), why its client was saturated, '' where it was not."""
    joined = rows[CELL].merge(saturated_cells(results), on=CELL, how="left")["saturated"]
    return joined.astype(object).fillna("").set_axis(rows.index)
