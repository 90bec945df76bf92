"""The metric registry (results/metrics.py) is the one list of per-cell metrics: the summary computes exactly
its cell figures, with its units, statistics and TTFT basis, and the headline, analyses and charts read it."""

from stackbench.measure import summary
from stackbench.measure.client import RequestRecord
from stackbench.report import queries
from stackbench.report.headline import HEADLINE
from stackbench.results import metrics
from stackbench.results.metrics import METRICS


def records() -> list[RequestRecord]:
    """Two turns of one conversation (test data, not a measurement): every per-cell figure has a value."""
    made = []
    for turn, start in ((0, 0.0), (1, 2.0)):
        record = RequestRecord(stream=0, turn=turn, t_submit=start, t_first_chunk=start + 0.1, t_first_token=start + 0.5,
                               t_last_token=start + 1.0, t_last_chunk=start + 1.0, t_end=start + 1.0, completion_tokens=10,
                               prompt_tokens=100, cached_prompt_tokens=60)
        record.content_chunks, record.chunk_times = 1, [start + 0.5]
        made.append(record)
    return made


def test_the_summary_computes_exactly_the_registered_cell_figures():
    assert set(summary.repeat_figures(records())) == set(metrics.names(group="cell"))


def test_each_cell_figure_carries_the_unit_statistic_and_basis_the_registry_states():
    figures = {f.metric: f for f in summary.cell_figures([records(), records()], None)}
    registered = [name for name in metrics.names(group="cell") if name in figures]
    assert len(registered) >= 8
    for name in registered:
        metric, figure = METRICS[name], figures[name]
        assert (figure.unit, figure.stat, figure.ttft_included) == (metric.unit, metric.stat, metric.ttft_included), name


def test_every_entry_says_which_direction_is_better_and_cites_a_definition():
    for metric in METRICS.values():
        assert metric.better in ("higher", "lower", None) and len(metric.definition) > 15, metric.name
        assert metric.group in ("cell", "load", "fact"), metric.name


def test_the_headline_analyses_and_charts_read_the_registry():
    assert [c.metric for c in HEADLINE] == [m.name for m in metrics.HEADLINE]
    assert HEADLINE[2].title == "TTFT ms" and HEADLINE[2].scale == 1000.0
    assert set(queries.CHART_METRICS) <= set(queries.ANALYSIS_METRICS) == set(metrics.names(analysed=True))
    assert summary.LOAD_UNITS == {m.name: m.unit for m in METRICS.values() if m.group == "load"}
