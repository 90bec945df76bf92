"""Rows say what they are: what their spread is over (the 'wide spread across repeats' flag only on a figure
whose min/max are over repeats; a percentile over tokens keeps its sample-count note), and a rehearsal's rows
are source = rehearsal."""

from types import SimpleNamespace

from paths import ROOT

from stackbench.config.model import Workload
from stackbench.engines import ADAPTERS
from stackbench.measure import summary
from stackbench.measure.rows import RowMaker
from stackbench.plan import expand, launchspec
from stackbench.rehearsal import backend
from stackbench.results import basis
from stackbench.results.store import MEASURED

RATIO = 1.25


def maker() -> RowMaker:
    """A RowMaker with an empty launch basis: what these tests read is per figure, not per launch."""
    made = object.__new__(RowMaker)
    made.launch_basis, made.spread_flag_ratio, made.accept_len_basis = {}, RATIO, None
    return made


CELL = SimpleNamespace(power_cap_w=None, concurrency=1, workload=Workload(
    name="code", kind="single", prompts=("hi",), output_tokens=64, prompt_tokens=None, turns=1, salt=True,
    concurrency=(1,), not_for_ranking=True))


def rows_of(*figures: summary.Figure) -> dict[str, dict]:
    return {row["metric"]: row for row in maker().cell_rows(CELL, list(figures), "ok", None)}


def test_only_a_spread_over_repeats_is_flagged_wide_and_a_percentiles_count_note_stays():
    repeats = summary._median_figure("decode_tps", [50.0, 60.0, 90.0])  # 90 / 50 > 1.25
    itl = summary.percentile_figures("itl", [5.0] * 40 + [50.0] * 5, "ms", "per-token ITL", summary.TOKENS)
    rows = rows_of(repeats, *itl)
    assert rows["decode_tps"]["note"].startswith(basis.WIDE_NOTE) and rows["decode_tps"]["spread_over"] == "repeats"
    assert rows["decode_tps"]["repeat_values"] == [50.0, 60.0, 90.0]
    p50 = rows["itl_p50_ms"]
    assert p50["value_max"] / p50["value_min"] > RATIO and p50["spread_over"] == "tokens"
    assert not basis.is_wide(p50) and "only 45 samples" in p50["note"]
    assert rows["decode_tps"]["not_for_ranking"] is True  # the workload's mark travels on its rows


def test_a_wide_flag_keeps_the_note_it_joins():
    wide = summary._median_figure("aggregate_tps", [10.0, 11.0, 12.0, 12.0, 13.0, 30.0])
    note = rows_of(wide)["aggregate_tps"]["note"]
    assert note.startswith(basis.WIDE_NOTE) and "interval of the median" in note


def test_a_rehearsals_rows_are_rehearsal_rows_and_a_real_runs_measured(monkeypatch):
    """The same launch planned for real and for a rehearsal (stand-in engine, simulated GPUs), each on the backend
    its spec chooses: only the rehearsal's rows say source = rehearsal, and every measured-rows filter still takes them."""
    monkeypatch.chdir(ROOT)
    sources = []
    for given in ({"nodes": ["rtx5090"]}, {"nodes": ["rtx5090"], "rehearsal": {"node": "rtx5090"}}):
        cfg, nodes = expand.load_plan(ROOT, given)
        node, launch = expand.find_launch(nodes, "rtx5090", "llamacpp--nospec")
        spec = launchspec.build(cfg, node, launch)
        sources.append(RowMaker(spec, "run", ADAPTERS["llamacpp"], RATIO, backend.for_spec(spec).source).basis(None)["source"])
    assert sources == ["measured", "rehearsal"] and set(sources) == set(MEASURED)


def external_rows(engine: str, identity: dict) -> tuple[dict, list[dict]]:
    """An external launch's basis and server rows after the server was asked about itself (no log)."""
    from launch_helpers import make_launch

    from stackbench.engines.base import ServerFacts

    launch = make_launch(engine, launch_mode="external", launch_target="http://own:8000", context_len=4096)
    node = SimpleNamespace(name="n", os="linux", gpu_count=1, gpu_model="RTX", bandwidth_gbs=None, file="n.yaml")
    made = RowMaker(SimpleNamespace(node=node, launch=launch, engine={}), "run", ADAPTERS[engine], RATIO)
    made.learn(ServerFacts(), {"launch_mode": "external", "engine_image": "external endpoint", **identity})
    return made.basis(None), made.server_rows(ServerFacts(), None, None)


def test_what_an_external_endpoint_cannot_report_reads_so_never_blank():
    shown, rows = external_rows("openai-compatible", {
        "engine_version": basis.NOT_REPORTED, "engine_setup": "served models: m; metrics: no /metrics route",
        "not_reported": ("kv_pool_tokens", "accept_len")})
    assert shown["engine_version"] == shown["kv_dtype"] == basis.NOT_REPORTED
    assert shown["engine_setup"] == "served models: m; metrics: no /metrics route"
    missing = {r["metric"]: (r["status"], r["reason"]) for r in rows if r["status"] == "not_run"}
    assert missing == {"kv_pool_tokens": ("not_run", "kv_pool_tokens: not reported by this endpoint"),
                       "accept_len": ("not_run", "accept_len: not reported by this endpoint")}


def test_an_engines_own_adapter_in_external_mode_says_its_pool_is_not_reported_but_keeps_its_version():
    shown, rows = external_rows("llamacpp", {"engine_version": "b11434-0c1f39a3", "quant": "Q4_1"})
    assert shown["engine_version"] == "b11434-0c1f39a3" and shown["kv_dtype"] == basis.NOT_REPORTED
    assert shown["engine_setup"] == "unknown"
    assert [(r["metric"], r["reason"]) for r in rows if r["status"] == "not_run"] == [("kv_pool_tokens", basis.not_reported("kv_pool_tokens"))]
