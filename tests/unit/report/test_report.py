"""The report: `snakemake --cores 1 report` end to end in a temporary copy, the headline first, no leaked
NaN/None/cnan, Snakemake's own --report, and the page in headless Chromium (DOM and screenshot).

The tests that run Snakemake (published_report) or Chromium are in the integration lane; the rest render
the report in-process (write_report) and are in the fast lane."""

from pathlib import Path

import pandas as pd
import pytest
from paths import ROOT
from report_pages import assert_no_leaks, measured_rows, without_plotly_library, write_mixed_report

from stackbench.analysis import decide
from stackbench.report import derived, queries, render
from stackbench.report.headline import NOT_SAME_OUTPUT, SLOWED_GPU, headline_table
from stackbench.report.seeds import _one_cap
from stackbench.results import store


@pytest.fixture(scope="module")
def mixed_report(tmp_path_factory) -> Path:
    """write_report on published rows plus the hand-built measured run above."""
    return write_mixed_report(tmp_path_factory.mktemp("mixed"))


def test_no_nan_none_or_cnan_anywhere(mixed_report):
    assert_no_leaks(mixed_report)


def test_charts_are_drawn_per_node_and_name_their_sources(mixed_report):
    page = without_plotly_library((mixed_report / "index.html").read_text(encoding="utf-8"))
    assert "Aggregate throughput against concurrency on test-cpu" in page
    assert "Single-stream throughput against GPU power cap on 2x3090-nvlink" in page
    assert "published 002 §reply by Leon-Y: power sweep" in page  # the sweep's series names whose it is
    # One copy of plotly.js however many charts.
    assert page.count("Plotly.newPlot") >= 4 and (mixed_report / "index.html").read_text().count("plotly.js v") <= 2


def test_full_tables_are_files_and_a_paginated_view(mixed_report):
    cells = pd.read_parquet(mixed_report / "tables/cells-test-cpu.parquet")
    assert len(cells) == 2 * 2 * 2 + 2  # cells plus one server row set per launch
    header = (mixed_report / "tables/cells-test-cpu.csv").read_text().splitlines()[0]
    assert header.startswith("source,ref,stack,variant") and "ttft_ms" in header and "ttft_s" not in header
    assert cells["ttft_ms"].dropna().round(1).eq(394.2).all()
    page = (mixed_report / "index.html").read_text(encoding="utf-8")
    assert "stackbenchPager('cells-test-cpu')" in page


def test_a_power_sweep_headline_reads_its_highest_cap_and_keeps_launch_figures():
    """Hand-built rows (test data): a variant swept over two caps, its pool logged once per launch uncapped."""

    base = dict(source="measured", ref="test-run", node="test-gpu", stack="vllm", variant="mtp-n2", status="ok",
                stat="median", workload="code", note=None, value_min=None, value_max=None, spec_method="mtp")
    rows = store.to_table([dict(base, metric="decode_tps", concurrency=1, power_cap_w=cap, power_cap_enforced_w=cap, value=speed)
                           for cap, speed in ((220.0, 116.0), (300.0, 170.0))]
                          + [dict(base, metric="kv_pool_tokens", concurrency=None, power_cap_w=None, workload=None, value=184242.0)]).to_pandas()
    results = queries.Results(rows)
    table = headline_table(queries.headline_input(results), "test-gpu")
    got = dict(zip(table.columns, table.rows[0]))
    assert got["decode tok/s"] == "170" and got["KV pool tokens"] == "184242"


def test_a_cap_the_gpu_refused_is_no_cap_in_the_headline_and_is_said():
    """Hand-built rows (test data): 300 W was refused (above the card's limit), 220 W applied. The headline
    reads the cell that ran at stock power (uncapped), not the 220 W one, and the report says why."""

    base = dict(source="measured", ref="test-run", node="test-gpu", stack="vllm", variant="mtp-n2", status="ok",
                stat="median", workload="code", value_min=None, value_max=None, spec_method="mtp", gpu="RTX 5090",
                metric="decode_tps", concurrency=1)
    rows = store.to_table([dict(base, power_cap_w=220.0, power_cap_enforced_w=220.0, value=116.0, note=None),
                           dict(base, power_cap_w=300.0, power_cap_enforced_w=None, value=175.0,
                                note="closed loop; power cap not applied: 300 W is above the maximum limit 250 W")]).to_pandas()
    results = queries.Results(rows)
    table = headline_table(queries.headline_input(results), "test-gpu")
    assert dict(zip(table.columns, table.rows[0]))["decode tok/s"] == "175"
    assert queries.caps_not_applied(results) == {
        "test-gpu": "cap not applied on test-gpu (RTX 5090; 300.0 W asked): 300 W is above the maximum limit 250 W"}


def test_caps_not_swept_are_said_under_the_tables_that_read_caps():
    """Hand-built rows (test data), issue 60: the stock cell drew 380 W per GPU, so 400 W and 450 W were not swept
    (measure/sequencer.py); the report says which caps on how many cells, and why."""
    why = "not swept: cap 400 W is at or above the stock cell's measured draw 380 W per GPU (code--c1--nocap)"
    base = dict(source="measured", node="test-gpu", stack="vllm", variant="mtp-n2", workload="code", concurrency=1,
                metric="cell_status", status=store.NOT_SWEPT, value=None)
    rows = store.to_table([dict(base, ref="r1", power_cap_w=400.0, reason=why),
                           dict(base, ref="r1", power_cap_w=450.0, reason=why.replace("400 W", "450 W")),
                           dict(base, ref="r2", power_cap_w=400.0, reason=why)]).to_pandas()
    assert queries.caps_not_swept(queries.Results(rows)) == {"test-gpu": (
        "caps not swept on test-gpu: 400/450 W in 3 cells, each at or above its launch's stock cell's measured "
        "draw per GPU plus the sequencer's margin for transients (measure/sequencer.py CAP_BIND_MARGIN), where it could "
        f"not bind; those cells have no figure (e.g. {why})")}
    assert queries.caps_not_applied(queries.Results(rows)) == {}  # never asked of the GPU, so never refused by it


def test_seed_tables_read_the_cap_applied_not_the_one_asked():
    """Hand-built rows (test data): the same refused 300 W and applied 220 W cells. The rows a seed table takes
    (queries.method_input) carry the cap applied, so the one it shows per launch is the stock-power cell."""
    from types import SimpleNamespace


    base = dict(source="measured", ref="test-run", node="test-gpu", stack="vllm", variant="mtp-n2", status="ok",
                stat="median", workload="code", value_min=None, value_max=None, metric="decode_tps", concurrency=1, note=None)
    rows = store.to_table([dict(base, power_cap_w=220.0, power_cap_enforced_w=220.0, value=116.0),
                           dict(base, power_cap_w=300.0, power_cap_enforced_w=None, value=175.0),
                           dict(base, source="published", ref="002_x.txt §a", table_id="t", workload=None, value=90.0)]).to_pandas()
    picked = queries.method_input(queries.Results(rows), {"t": SimpleNamespace(method=("code",))})
    caps = {value: None if pd.isna(cap) else cap for value, cap in zip(picked["value"], picked["power_cap_w"])}
    assert caps == {116.0: 220.0, 175.0: None}
    assert _one_cap(picked)["value"].tolist() == [175.0]


def test_measured_variants_share_the_aggregate_concurrency():
    """Hand-built rows (test data): nospec alone swept to c4 (a load workload on one launch), draft-n2 ran
    c1-c2. Both aggregates are read at c2, the highest both ran; a published row keeps its own highest."""

    base = dict(source="measured", ref="test-run", node="test-cpu", stack="llamacpp", status="ok", stat="median",
                workload="code", note=None, value_min=None, value_max=None, power_cap_w=None, metric="aggregate_tps")
    rows = [dict(base, variant=variant, concurrency=c, value=100.0 * c + bonus)
            for variant, top, bonus in (("nospec", 4, 0.0), ("draft-n2", 2, 5.0)) for c in range(1, top + 1)]
    rows += [dict(base, source="published", ref="004_x.txt §a", variant="mtp-n2", concurrency=c, value=300.0 + c)
             for c in (3, 4)]
    table = headline_table(queries.headline_input(queries.Results(store.to_table(rows).to_pandas())), "test-cpu")
    got = {row[table.columns.index("variant")]: row[table.columns.index("aggregate tok/s")] for row in table.rows}
    assert got == {"nospec": "200 @c2", "draft-n2": "205 @c2", "mtp-n2": "304 @c4"}


def test_a_failed_background_write_fails_the_report(tmp_path, monkeypatch):
    """Fault injection: the analysis files are written on a worker thread; its error reaches the caller
    instead of leaving a report with a missing file. The hand-built run alone (no published rows: a report in
    about a tenth of the time) has analysis tables of its own to write."""
    store.atomic_write_parquet(store.to_table(pd.DataFrame(measured_rows())), tmp_path / "results.parquet")

    def disk_full(table, paths):
        raise OSError(f"No space left on device: {paths[0][0].name}")

    monkeypatch.setattr(derived, "copy_out", disk_full)
    with pytest.raises(OSError, match="No space left on device: analysis-"):
        render.write_report(tmp_path / "results.parquet", tmp_path / "reports", ROOT / "data/published")


def test_what_to_run_comes_per_node_and_concurrency_with_its_rule_under_it(mixed_report):
    markdown = (mixed_report / "report.md").read_text(encoding="utf-8")
    section = markdown.split("## What to run", 1)[1].split("\n## ", 1)[0]
    assert "### What to run on test-cpu" in section
    assert decide.RULE in section
    table = (mixed_report / "tables" / "what-to-run-test-cpu.csv").read_text(encoding="utf-8")
    # The hand-built run is one launch: nothing is decided, and each row says why.
    rows = [line for line in table.splitlines() if line.startswith("llamacpp,")]
    assert len(rows) == 4  # code and json, c1 and c2
    assert all(",undecided,no-spec," in row and "the first look is at" in row for row in rows)
    assert "<h2>What to run</h2>" in (mixed_report / "index.html").read_text(encoding="utf-8")


def test_a_depth_and_cap_sweep_gets_its_energy_tables():
    """Hand-built rows (test data): no-spec and draft-n2 each at 300 and 400 W on a GPU node."""
    from stackbench import analysis
    from stackbench.report import decisions

    base = dict(source="measured", ref="test-run", node="test-gpu", stack="vllm", status="ok", stat="median",
                workload="code", concurrency=1)
    rows = []
    for variant, depth, bonus in (("nospec", None, 0.0), ("draft-n2", 2, 30.0)):
        for cap, speed, watts in ((400.0, 100.0, 390.0), (300.0, 90.0, 300.0)):
            cell = dict(base, variant=variant, spec_method="none" if depth is None else "draft", spec_tokens=depth,
                        power_cap_w=cap, power_cap_enforced_w=cap)
            rows += [dict(cell, metric="decode_tps", value=speed + bonus), dict(cell, metric="power_w", value=watts),
                     dict(cell, metric="energy_j_per_token_steady", value=watts / (speed + bonus)),
                     dict(cell, metric="energy_j_per_response_steady", value=64 * watts / (speed + bonus))]
    results = queries.Results(store.to_table(rows).to_pandas())
    cells = analysis.energy_cells(queries.decide_input(results), pd.DataFrame(columns=["node", "stack", "variant", "flagged"]))
    made = {t.table_id: t for t in decisions.energy_tables(cells)}
    assert set(made) == {"what-to-run-energy", "what-to-run-cap-floor", "what-to-run-depth-by-cap"}
    depth = made["what-to-run-depth-by-cap"]
    assert depth.columns[-2:] == ["400 W", "300 W"] and [row[4] for row in depth.rows] == ["0", "2"]
    fewest = dict(zip(made["what-to-run-energy"].columns, made["what-to-run-energy"].rows[0]))
    assert fewest["fewest J/token"] == "vllm / draft-n2 @ 300 W"


def test_a_headline_figure_from_a_slowed_gpu_is_marked_with_a_caveat():
    """Hand-built rows (test data): draft-n2's single-stream cell ran on a thermally slowed GPU, nospec's did not."""
    from stackbench import analysis

    base = dict(source="measured", ref="test-run", node="test-gpu", stack="vllm", status="ok", stat="median", workload="code",
                note=None, value_min=None, value_max=None, power_cap_w=None, concurrency=1, spec_method="none")
    rows = [dict(base, variant="nospec", metric="decode_tps", value=100.0),
            dict(base, variant="draft-n2", metric="decode_tps", value=150.0, spec_method="draft"),
            dict(base, variant="draft-n2", metric="clock_event_share_thermal", value=0.75, spec_method="draft", stat="single"),
            dict(base, variant="nospec", metric="clock_event_share_thermal", value=0.0, stat="single")]
    frame = store.to_table(rows).to_pandas()  # every column a results table has
    table = headline_table(queries.headline_input(queries.Results(frame)), "test-gpu",
                                  slowed=analysis.slowed_cells(frame))
    got = {row[table.columns.index("variant")]: row[table.columns.index("decode tok/s")] for row in table.rows}
    assert got == {"nospec": "100", "draft-n2": "150" + SLOWED_GPU}
    assert any("draft-n2 decode tok/s: measured on a GPU slowed by thermal 75%" in line for line in table.caveats)


def test_a_variant_whose_outputs_differ_keeps_its_reason_in_the_headline():
    """Hand-built rows and verdict (test data): draft-n2 answers other text than no-spec; its ≠ line says why
    (a cell flag's reason, computed per column, once shadowed it and left "≠ vllm / draft-n2: ;")."""
    base = dict(source="measured", ref="test-run", node="test-gpu", stack="vllm", status="ok", stat="median", workload="code",
                note=None, value_min=None, value_max=None, power_cap_w=None, concurrency=1, spec_method="none")
    rows = [dict(base, variant="nospec", metric="decode_tps", value=100.0),
            dict(base, variant="draft-n2", metric="decode_tps", value=150.0, spec_method="draft")]
    why = "greedy outputs differ from no-spec at token 20 (agreement 0.65)"
    correctness = pd.DataFrame([{"node": "test-gpu", "stack": "vllm", "variant": "draft-n2", "outputs": "differs at token 20",
                                 "flagged": True, "caveat": why, "accuracy_text": ""}])
    table = headline_table(queries.headline_input(queries.Results(store.to_table(rows).to_pandas())), "test-gpu",
                           correctness=correctness)
    got = {row[table.columns.index("variant")]: row[table.columns.index("decode tok/s")] for row in table.rows}
    assert got == {"nospec": "100", "draft-n2": "150" + NOT_SAME_OUTPUT}
    assert f"{NOT_SAME_OUTPUT} vllm / draft-n2: {why}; do not rank it on the figures marked {NOT_SAME_OUTPUT}." in table.caveats


def test_a_figure_an_endpoint_cannot_give_reads_not_reported_where_the_headline_shows_it():
    """Hand-built rows (test data): a native llama.cpp launch logged its KV pool; the openai-compatible endpoint beside
    it has the launch row measure/rows.py writes for a pool it cannot report. Its cell says so; a blank stays "—"."""
    from stackbench.results.basis import NOT_REPORTED, not_reported

    base = dict(source="measured", ref="test-run", node="test-cpu", status="ok", stat="median", workload="code", note=None,
                value_min=None, value_max=None, power_cap_w=None, variant="nospec", concurrency=1)
    rows = [dict(base, stack=stack, metric="decode_tps", value=value) for stack, value in (("llamacpp", 80.0),
                                                                                           ("openai-compatible", 79.0))]
    rows += [dict(base, stack="llamacpp", metric="kv_pool_tokens", workload=None, concurrency=None, stat="single", value=4096.0),
             dict(base, stack="openai-compatible", metric="kv_pool_tokens", workload="server", concurrency=None,
                  stat="single", value=None, status="not_run", reason=not_reported("kv_pool_tokens"))]
    results = queries.Results(store.to_table(rows).to_pandas())
    table = headline_table(queries.headline_input(results), "test-cpu", not_reported=queries.not_reported(results))
    pool = {row[table.columns.index("stack")]: row[table.columns.index("KV pool tokens")] for row in table.rows}
    assert pool == {"llamacpp": "4096†", "openai-compatible": NOT_REPORTED}  # † a single figure
    plain = headline_table(queries.headline_input(results), "test-cpu")
    assert {row[plain.columns.index("KV pool tokens")] for row in plain.rows} == {"4096†", "—"}
