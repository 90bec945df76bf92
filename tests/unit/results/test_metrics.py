"""The metric registry (results/metrics.py) is the one home of every metric name: the summary computes exactly
its cell figures, with its units, statistics and TTFT basis; the headline, analyses and charts read it; every
writer raises on a name it does not hold, and every row a run, a post or the golden report's input carries
is under a registered name."""

import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from helpers import unregistered
from paths import FIXTURES, ROOT

from stackbench.config import ConfigError
from stackbench.engines import ADAPTERS
from stackbench.measure import summary
from stackbench.measure.client import RequestRecord
from stackbench.measure.rows import RowMaker
from stackbench.report import queries
from stackbench.report.headline import HEADLINE
from stackbench.results import metrics, published
from stackbench.results.metrics import FAMILIES, GROUPS, METRICS, M


def records() -> list[RequestRecord]:
    """Two turns of one conversation (test data, not a measurement): every per-cell figure and latency percentile
    has a value."""
    made = []
    for turn, start in ((0, 0.0), (1, 2.0)):
        record = RequestRecord(stream=0, turn=turn, t_submit=start, t_first_chunk=start + 0.1, t_first_token=start + 0.5,
                               t_last_token=start + 1.0, t_last_chunk=start + 1.0, t_end=start + 1.0, completion_tokens=10,
                               prompt_tokens=100, cached_prompt_tokens=60)
        record.content_chunks, record.chunk_times = 2, [start + 0.5, start + 1.0]
        record.choice_times = [start + 0.1, *record.chunk_times]
        made.append(record)
    return made


def test_the_summary_computes_exactly_the_registered_cell_figures():
    assert set(summary.repeat_figures(records())) == set(metrics.names(group="cell"))


def test_each_cell_figure_carries_the_unit_statistic_and_basis_the_registry_states():
    figures = {f.metric: f for f in summary.cell_figures([records(), records()], None)}
    assert len([name for name in metrics.names(group="cell") if name in figures]) >= 8
    assert {"tpot_ms", "tpot_p99_ms", "itl_p90_ms", "icl_p50_ms"} <= set(figures)  # the latency percentiles too
    for name, figure in figures.items():
        metric = METRICS[name]
        assert (figure.unit, figure.stat, figure.ttft_included) == (metric.unit, metric.stat, metric.ttft_included), name


def test_every_entry_says_which_direction_is_better_and_cites_a_definition():
    for entry in [*METRICS.values(), *FAMILIES]:
        assert entry.better in ("higher", "lower", None) and len(entry.definition) > 15, entry
        assert entry.group in GROUPS, entry


def test_a_unit_is_left_to_the_writer_only_where_it_varies():
    """first_divergence_token is in tokens or in words, as the outputs were compared; every other entry has one unit."""
    assert [m.name for m in METRICS.values() if m.unit is None] == ["first_divergence_token", "cross_stack_divergence"]


def test_the_headline_analyses_and_charts_read_the_registry():
    assert [c.metric for c in HEADLINE] == [m.name for m in metrics.HEADLINE]
    assert HEADLINE[2].title == "TTFT ms" and HEADLINE[2].scale == 1000.0
    assert set(queries.CHART_METRICS) <= set(queries.ANALYSIS_METRICS) == set(metrics.names(analysed=True))
    assert summary.LOAD_FIGURES == tuple(m.name for m in METRICS.values() if m.group == "load")


def test_a_misspelt_name_raises_where_it_is_read_and_where_it_is_written():
    misspelt = "lopping"
    assert M.looping == "looping"
    with pytest.raises(AttributeError):
        getattr(M, misspelt)
    with pytest.raises(metrics.UnknownMetric, match=misspelt):
        metrics.checked(misspelt)
    with pytest.raises(metrics.UnknownMetric):
        summary.Figure(misspelt, 0.5, "mean", 4)
    with pytest.raises(metrics.UnknownMetric):
        metrics.row_fields("decode_tsp")
    assert metrics.row_fields(M.mean_kld) == {"metric": "mean_kld", "unit": "nats"}


def test_a_figure_takes_its_unit_from_the_registry():
    assert summary.Figure(M.power_w, 250.0, "mean", 10).unit == "W"
    assert summary.Figure(metrics.ACCEPT_RATE_POS.member(2), 0.4, "mean", 3).unit == "ratio"


def test_a_family_holds_its_indexed_members_and_no_other_name():
    assert metrics.checked(metrics.ACCEPT_RATE_POS.member(12)) == "accept_rate_pos12"
    assert metrics.unit_of(metrics.REQUEST_ACCEPT_RATE_BIN.member(9)) == "requests"
    for name in ("accept_rate_pos", "accept_rate_posx", "request_accept_rate_bin-1"):
        with pytest.raises(metrics.UnknownMetric):
            metrics.checked(name)
    assert not [name for name in METRICS if any(family.holds(name) for family in FAMILIES)]


def test_every_name_the_code_reads_from_the_registry_is_registered():
    """M.<name> fails only when its line runs: a branch no test reaches (an adapter's rarer log line) is read
    here, as text, in every source and test file."""
    spelt = {(path.relative_to(ROOT), name) for path in [*ROOT.glob("src/**/*.py"), *ROOT.glob("tests/**/*.py")]
             for name in re.findall(r"\bM\.(\w+)", path.read_text(encoding="utf-8"))}
    assert len(spelt) > 100
    assert sorted((str(path), name) for path, name in spelt if name not in METRICS) == []


def test_every_number_an_adapter_reads_from_a_start_up_log_becomes_a_registered_row():
    """The adapters name the extra facts their logs state (ServerFacts.extra): each becomes a server row under
    that name (RowMaker.server_rows), so each must be registered before a launch prints it."""
    launch = SimpleNamespace(launch_mode="external", probes_off=None, accuracy_off=None)
    maker = object.__new__(RowMaker)
    maker.launch_basis, maker.spec = {}, SimpleNamespace(launch=launch, node=SimpleNamespace(gpu_count=1, bandwidth_gbs=None))
    written = set()
    for stack, adapter in ADAPTERS.items():
        for log in sorted((FIXTURES / stack).glob("*.log")):
            written |= {row["metric"] for row in maker.server_rows(adapter.parse_log(log.read_text()), 12.0, None)}
    assert {"kv_layers", "mem_free_after_pool_gb", "kv_max_concurrency"} <= written
    assert unregistered(written) == []


def test_every_row_of_the_golden_reports_input_and_of_the_posts_is_registered():
    golden = pd.read_parquet(FIXTURES / "results/report/results.parquet", columns=["source", "metric"])
    assert set(golden["source"]) >= {"measured", "published"}
    assert unregistered(golden["metric"]) == []
    assert unregistered(record["metric"] for record in published.load_all(ROOT / "data/published")) == []


def test_a_post_under_an_unregistered_name_is_refused_where_it_is_written(tmp_path: Path):
    source = next((ROOT / "data/published").glob("*.yaml")).read_text(encoding="utf-8")
    name = re.search(r"metric: (\w+)", source)[1]
    (tmp_path / "post.yaml").write_text(source.replace(f"metric: {name}", "metric: decode_tsp", 1), encoding="utf-8")
    with pytest.raises(ConfigError, match="decode_tsp"):
        published.load_file(tmp_path / "post.yaml")


def test_docs_metrics_names_every_registered_metric_as_the_registry_writes_it():
    """docs/metrics.md's registry part is the registry's (`stackbench docs-metrics`): out of step, this fails."""
    from stackbench import cli
    from stackbench.results import metrics

    doc = (ROOT / cli.METRICS_DOC).read_text()
    assert cli.metrics_doc(doc) == doc, "docs/metrics.md is out of step with results/metrics.py: run `stackbench docs-metrics`"
    listed = set(re.findall(r"^\| `([^`]+)` \|", doc.split(cli.REGISTRY_BEGIN)[1], flags=re.MULTILINE))
    assert listed == set(metrics.METRICS) | {f"{f.prefix}<i>" for f in metrics.FAMILIES}
    with pytest.raises(ConfigError, match="docs/metrics.md: needs one line"):
        cli.metrics_doc(doc.replace(cli.REGISTRY_END, ""))
