"""Per-request acceptance in the report: the by-content-class table and the histogram chart, from rows that
measure/acceptance.py writes (built here from hand-made request counts: test data)."""

import pandas as pd
import pyarrow as pa
from test_analysis import frame, measured

from stackbench import analysis
from stackbench.measure import acceptance
from stackbench.measure.client import RequestRecord
from stackbench.report import charts


def cell_rows(workload: str, pairs: list[tuple[int, int]]) -> list[dict]:
    records = [RequestRecord(stream=0, turn=0, t_submit=0.0, server={"server_spec_accepted_tokens": a,
                                                                      "server_spec_drafted_tokens": d}) for a, d in pairs]
    return [measured(variant="draft-n4", spec_method="draft", spec_tokens=4, workload=workload, metric=f.metric,
                     value=f.value, stat=f.stat, n=f.n, unit=f.unit) for f in acceptance.request_acceptance_figures(records)]


def test_acceptance_by_content_class_puts_both_weightings_side_by_side():
    rows = frame(cell_rows("code", [(90, 100), (10, 100)]), cell_rows("prose", [(5, 10), (150, 300)]),
                 measured(variant="draft-n4", spec_method="draft", spec_tokens=4, workload="code", metric="accept_rate",
                          value=0.49, stat="mean"))
    table = analysis.acceptance_by_workload(rows).set_index("workload")
    assert table.loc["code", "token-weighted"] == 0.5 and table.loc["code", "request-weighted"] == 0.5
    assert table.loc["prose", "token-weighted"] == 155 / 310 and table.loc["code", "pooled /metrics"] == 0.49
    assert table.loc["code", "requests"] == 2 and pd.isna(table.loc["prose", "pooled /metrics"])


def test_the_histogram_draws_one_bar_series_per_cell():
    rows = frame(cell_rows("code", [(90, 100), (10, 100), (95, 100)]), cell_rows("prose", [(5, 10)]))
    figure = charts.request_acceptance_histogram(rows, "cpu")
    assert [t["name"] for t in figure["data"]] == ["measured / llamacpp / draft-n4 / code / c1",
                                                   "measured / llamacpp / draft-n4 / prose / c1"]
    code = figure["data"][0]
    assert sum(code["y"]) == 3 and code["y"][9] == 2 and code["x"][0] == 0.05
    assert charts.request_acceptance_histogram(frame(measured()), "cpu") is None


def test_the_histogram_and_the_position_chart_read_arrow_backed_names():
    """A frame read through pyarrow may hold its names as Arrow strings (the probes' report in CI did): the charts
    select a family's rows the same way on them, and a node without such rows has no chart (mapping a function over
    an empty Arrow string column keeps its string type, which no mask can be made of)."""
    rows = frame(cell_rows("code", [(90, 100), (10, 100), (95, 100)]),
                 measured(variant="draft-n4", spec_method="draft", spec_tokens=4, workload="code", metric="accept_rate_pos1",
                          value=0.4, stat="mean"))
    arrow = rows.astype({"metric": pd.ArrowDtype(pa.large_string())})
    assert charts.request_acceptance_histogram(arrow, "cpu")["data"] == charts.request_acceptance_histogram(rows, "cpu")["data"]
    assert charts.per_position_acceptance(arrow, "cpu")["data"] == charts.per_position_acceptance(rows, "cpu")["data"]
    assert charts.request_acceptance_histogram(arrow.iloc[0:0], "cpu") is None
    assert charts.per_position_acceptance(arrow.iloc[0:0], "cpu") is None
