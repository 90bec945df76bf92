"""The openai-compatible stack measures a llama-server somebody started by hand (the pipeline-built binary, the
test model, one slot, no --metrics) through the real run loop: decode figures from the stream, the KV pool and
acceptance "not reported by this endpoint", the server left running. One cell of 16 tokens: seconds."""

from __future__ import annotations

import pytest
from launch_helpers import TEST_MODEL, measured_one_launch, one_model_node

from stackbench.results.basis import NOT_REPORTED
from stackbench.serve.process import ServerProcess, free_port


@pytest.fixture
def their_llama_server(tmp_path, llamacpp_env):
    port = free_port()
    argv = [llamacpp_env["server"], "--model", str(TEST_MODEL), "--host", "127.0.0.1", "--port", str(port),
            "--ctx-size", "1024", "--parallel", "1", "--threads", "2"]
    with ServerProcess(argv, tmp_path / "their-server.log", f"http://127.0.0.1:{port}", "/health") as server:
        yield server


@pytest.mark.integration
def test_a_llama_server_started_by_hand_is_measured_as_an_openai_endpoint(repo_copy, tmp_path, their_llama_server):
    node = one_model_node({"mode": "external", "url": their_llama_server.base_url})
    node["runs"][0].update(stack="openai-compatible", server_args={})
    node.update(probes=None, divergence=None, launches=1)
    rows = measured_one_launch(repo_copy, "ci-openai", node, tmp_path / "run")
    decode = rows[(rows["metric"] == "decode_tps") & (rows["status"] == "ok")]
    assert len(decode) == 1 and decode["value"].iloc[0] > 0
    assert set(rows["stack"]) == {"openai-compatible"} and set(rows["engine"]) == {"OpenAI-compatible endpoint"}
    assert set(rows["engine_version"]) == {NOT_REPORTED} and set(rows["kv_dtype"]) == {NOT_REPORTED}
    unreported = rows[rows["reason"].str.endswith(NOT_REPORTED, na=False)]
    assert sorted(unreported["metric"]) == ["accept_len", "kv_pool_tokens"] and set(unreported["status"]) == {"not_run"}
    assert set(rows["engine_setup"]) == {f"served models: {TEST_MODEL}; metrics: no /metrics route"}
    # prompts sized from usage (no tokenize route asked), and the server is somebody else's: still running
    assert their_llama_server.alive()
