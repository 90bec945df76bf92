"""The judged rule, in one place: a cell with one stream is judged on its per-stream decode rate, a cell with
several on its aggregate output rate (results/metrics.py defines both). Measurement (a cell's precision stop
rule), What to run, the headline, the charts and the plausibility checks all read it from here, as a
function, a SQL fragment or a frame helper, so the rule and its single-stream test never drift apart.
"""

from __future__ import annotations

import pandas as pd

from stackbench.results.metrics import M

SINGLE_STREAM = 1  # the concurrency of a single-stream cell
SINGLE_STREAM_METRIC = M.decode_tps  # judged at one stream: the per-request decode rate, TTFT excluded
CONCURRENT_METRIC = M.aggregate_tps  # judged at several: all output tokens / wall time
JUDGED_METRICS = (SINGLE_STREAM_METRIC, CONCURRENT_METRIC)


def judged_metric(concurrency) -> str:
    """The figure a cell with `concurrency` streams is judged on."""
    return SINGLE_STREAM_METRIC if concurrency == SINGLE_STREAM else CONCURRENT_METRIC


def single_stream(frame: pd.DataFrame) -> pd.Series:
    """Which rows are single-stream cells (False where the concurrency is not stated)."""
    return frame["concurrency"] == SINGLE_STREAM


def judged_rows(frame: pd.DataFrame) -> pd.Series:
    """Which rows carry the figure their cell is judged on: decode rate at one stream, aggregate at several."""
    single = single_stream(frame)
    return ((frame["metric"] == SINGLE_STREAM_METRIC) & single) | ((frame["metric"] == CONCURRENT_METRIC)
                                                                   & ~single & frame["concurrency"].notna())


def single_stream_sql(alias: str = "") -> str:
    """The SQL test that a row (of table `alias`, where given) is a single-stream cell."""
    return f"{alias + '.' if alias else ''}concurrency = {SINGLE_STREAM}"


def judged_metric_sql(alias: str = "") -> str:
    """The SQL expression of the metric a row's cell is judged on."""
    return f"case when {single_stream_sql(alias)} then '{SINGLE_STREAM_METRIC}' else '{CONCURRENT_METRIC}' end"
