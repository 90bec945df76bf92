"""Correctness beside speed, end to end against the synthetic engine (a TEST DOUBLE): two engines behind
external mode at the same speed, the second answering with other text from token 20 on. Its probe outputs
are compared with the no-spec launch's at collect, and the headline flags it beside its speed figures."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import serving
from paths import ROOT
from synthetic_engine import Timing

from stackbench import analysis, measure, plan
from stackbench.cli import collect_results
from stackbench.config import ConfigError
from stackbench.measure import probes
from stackbench.plan import expand, launchspec
from stackbench.report import render
from stackbench.results import store

REFERENCE = Timing(ttft_s=0.05, interval_s=0.01, tokens_per_chunk=1, reasoning_tokens=0, content_tokens=30)
# The same speed; from token 20 on its text differs ("t0" where the reference says "t20"), without looping.
DIFFERENT = Timing(ttft_s=0.05, interval_s=0.01, tokens_per_chunk=1, reasoning_tokens=0, content_tokens=30, loop_period=20)
NODE = "two-doubles"


def two_engine_node(tmp_path: Path, reference_url: str, candidate_url: str) -> plan.Node:
    for name in ("configs", "workflow/schemas"):
        shutil.copytree(ROOT / name, tmp_path / name)
    (tmp_path / "configs/workloads/code.yaml").write_text(yaml.safe_dump(
        {"prompts": ["Write a Python hello world."], "output_tokens": REFERENCE.output_tokens}))
    external = {"hardware": {"gpu": {"model": "none", "count": 0}}, "concurrency": [1], "workloads": ["code", "probes"],
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
        parts = [measure.LaunchRun(launchspec.build(cfg, node, launch), tmp_path / "runs" / launch.name).run()
                 for launch in node.launches]
    collect_results(parts, tmp_path / "results.parquet")
    render.write_report(tmp_path / "results.parquet", tmp_path / "reports", ROOT / "data/published")
    return tmp_path


def test_the_probe_outputs_are_kept_with_each_run(measured):
    for launch in ("vllm-cpu--nospec", "vllm-cpu--ngram-n3"):
        (doc,) = json.loads((measured / "runs" / launch / store.PROBE_OUTPUTS).read_text())
        assert doc["workload"] == "probes" and doc["variant"] == launch.split("--")[1]
        assert {"smoke-capital", "prompt-1", "cache-cold", "needle"} <= set(doc["outputs"])
        assert doc["outputs"]["prompt-1"]["pieces_are_tokens"]  # one token per chunk: compared token by token


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
    assert ("≠ vllm / ngram-n3: greedy outputs differ from no-spec at token 20 (agreement 0.65): its speed is not of"
            " the same output") in headline
    assert headline.index(rows["nospec"]) < headline.index(rows["ngram-n3"])  # the flagged variant never tops it


def test_the_correctness_section_shows_the_probes_per_variant(measured):
    section = (measured / f"reports/tables/correctness-{NODE}.md").read_text()
    assert "smoke score" in section and "needle pass" in section and "cache consistent" in section
    assert "Correctness beside speed" in (measured / "reports/report.md").read_text()
    results = store.read_results(measured / "results.parquet")
    probes_rows = results[results["workload"] == "probes"].set_index(["variant", "metric"])["value"]
    # The double answers "t0 t1 ...": no smoke question passes, no needle is found, and cold equals hot.
    assert probes_rows[("nospec", "smoke_score")] == 0 and probes_rows[("nospec", "needle_pass")] == 0
    assert probes_rows[("nospec", "cache_consistent")] == 1


def doc(variant: str, spec_method: str, outputs: dict) -> dict:
    return {"ref": f"n/{variant}@1", "node": "n", "stack": "llamacpp", "variant": variant, "spec_method": spec_method,
            "model": "m", "workload": "probes", "outputs": outputs}


def output(text: str, pieces_are_tokens: bool) -> dict:
    return {"text": text, "pieces": text.split(" "), "completion_tokens": len(text.split(" ")), "pieces_are_tokens": pieces_are_tokens}


def test_identical_outputs_read_as_the_no_spec_reference_and_words_are_said_when_tokens_are_not_known():
    basis = pd.DataFrame([{"ref": "n/draft@1", "workload": "probes", "node": "n", "stack": "llamacpp", "variant": "draft",
                           "spec_method": "draft", "source": "measured", "metric": "smoke_score"}])
    rows = probes.agreement_rows([doc("nospec", "none", {"p": output("a b c", True)}),
                                  doc("draft", "draft", {"p": output("a b c", False)})], basis)
    by_metric = {r["metric"]: r for r in rows}
    assert by_metric["output_agreement"]["value"] == 1 and by_metric["first_divergence_token"]["value"] is None
    assert by_metric["first_divergence_token"]["unit"] == "words" and "word by word" in by_metric["output_agreement"]["note"]
    verdict = analysis.correctness_by_variant(pd.DataFrame(rows).assign(status="ok", workload="probes", prompt_tokens=None))
    assert verdict.set_index("variant").loc["draft", "outputs"] == "= no-spec" and not verdict["flagged"].any()


def test_a_variant_whose_cells_loop_reads_loops_in_the_headline_verdict():
    rows = pd.DataFrame([{"node": "n", "stack": "llamacpp", "variant": "draft", "workload": w, "metric": "looping", "value": v,
                          "unit": "ratio", "prompt_tokens": None, "source": "measured", "status": "ok"}
                         for w, v in (("prose", 0.5), ("code", 0.0))])
    verdict = analysis.correctness_by_variant(rows).set_index("variant").loc["draft"]
    assert verdict["outputs"] == "loops: prose" and verdict["flagged"]
    assert verdict["caveat"] == "outputs loop in prose: speed of degenerate, predictable text"


def test_a_probe_workload_without_its_probes_is_refused_naming_the_file(tmp_path):
    for name in ("configs", "workflow/schemas"):
        shutil.copytree(ROOT / name, tmp_path / name)
    (tmp_path / "configs/workloads/probes.yaml").write_text(yaml.safe_dump({"kind": "probe", "prompts": ["Hi."]}))
    with pytest.raises(ConfigError, match=r"configs/workloads/probes.yaml: probes: required with kind probe"):
        expand.load_workload("probes", [1], tmp_path, "test")


@pytest.mark.integration
def test_the_real_llama_server_runs_the_probes_and_compares_the_draft_launch_with_no_spec(ci_repo):
    """The CI node's two llama.cpp launches (no-spec, draft n=2) with the probes beside code, through Snakemake.
    Its 2048-token context over 4 slots takes 512 tokens a request: the ~750-token needle is refused, and
    the other probes still count."""
    node_file = ci_repo / "configs/nodes/ci-cpu.yaml"
    node = yaml.safe_load(node_file.read_text())
    node_file.write_text(yaml.safe_dump({**node, "workloads": ["code", "probes"], "concurrency": [1]}))
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "report"], cwd=ci_repo,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = store.read_results(ci_repo / "data/results.parquet")
    probe = results[(results["workload"] == "probes") & (results["variant"] == "nospec")].set_index("metric")
    assert 0 <= probe.loc["smoke_score", "value"] <= 1 and probe.loc["cache_consistent", "value"] in (0, 1)
    assert pd.isna(probe.loc["needle_pass", "value"]) and "rejected" in probe.loc["needle_pass", "note"]
    assert probe.loc["max_input_tokens", "value"] == 512  # what llama-server says a slot takes
    agreement = results[results["metric"] == "output_agreement"]
    assert list(agreement["variant"]) == ["draft-n2"] and 0 <= agreement["value"].iloc[0] <= 1
    code = results[(results["workload"] == "code") & (results["metric"] == "output_len_ok")]
    assert set(code["value"]) == {1.0}  # llama.cpp honours the fixed length (ignore_eos, n_predict)
    headline = (ci_repo / "reports/tables/headline-ci-cpu.md").read_text()
    assert "| outputs |" in headline
    outputs = json.loads((ci_repo / "data/runs/ci-cpu/llamacpp--nospec" / store.PROBE_OUTPUTS).read_text())
    assert outputs[0]["outputs"]["prompt-1"]["pieces_are_tokens"]  # llama.cpp streams one token per chunk
