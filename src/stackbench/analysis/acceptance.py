"""Acceptance per request by content class: per speculative cell (a workload is a content class: code,
prose, JSON, ...), the token-weighted and request-weighted acceptance of its requests (measure/acceptance.py)
and their distribution, beside the cell's pooled /metrics acceptance rate."""

from __future__ import annotations

import pandas as pd

from stackbench.results.metrics import M
from stackbench.results.store import MEASURED

# (column title, metric): the per-request figures first, the counter-pooled one last.
COLUMNS = [("token-weighted", M.accept_rate_token_weighted), ("request-weighted", M.accept_rate_request_weighted),
           ("p10", M.request_accept_rate_p10), ("median", M.request_accept_rate_p50), ("p90", M.request_accept_rate_p90),
           ("pooled /metrics", M.accept_rate)]
ACCEPTANCE_METRICS = tuple(metric for _, metric in COLUMNS)
KEYS = ["node", "stack", "variant", "power_cap_w", "workload", "concurrency"]


def acceptance_by_workload(results: pd.DataFrame) -> pd.DataFrame:
    """One row per measured cell with per-request acceptance, one column per COLUMNS entry, and the number of
    requests behind them."""
    rows = results[results["source"].isin(MEASURED) & (results["status"] == "ok") & results["value"].notna()
                   & results["metric"].isin(ACCEPTANCE_METRICS)]
    per_request = rows[rows["metric"] == M.accept_rate_token_weighted]
    if per_request.empty:
        return pd.DataFrame()
    wide = rows.groupby(KEYS + ["metric"], dropna=False)["value"].median().unstack("metric")
    wide = wide.reindex(columns=list(ACCEPTANCE_METRICS)).set_axis([title for title, _ in COLUMNS], axis=1).reset_index()
    requests = per_request.groupby(KEYS, dropna=False)["n"].max().rename("requests").reset_index()
    table = wide.merge(requests, on=KEYS)
    return table.sort_values(KEYS, kind="stable").reset_index(drop=True)
