"""Integration tests against SGLang's real server (PyPI sglang 0.5.23, its CPU engine with torch_native
attention and the project's import-only sgl_kernel stand-in) serving SmolLM2-135M converted from the
GGUF. The environment and the converted model are made by the workflow's own rules the first time
(about 10 minutes: SGLang's environment, and vLLM's, which converts the model); each launch is ready in
40 s to 2 minutes on 2 shared cores. Kept short: one workload, one concurrency, two repeats."""

import os
import signal
import time
from pathlib import Path

import pytest
from helpers import report_one_node
from launch_helpers import server_pid
from paths import ROOT

from stackbench.engines.sglang import SglangAdapter
from stackbench.plan import expand
from stackbench.serve.launchers import native_argv
from stackbench.serve.process import ReadyTimeout, ServerProcess, free_port, group_members

pytestmark = pytest.mark.integration
NODE = "local-cpu"


def server(log: Path) -> ServerProcess:
    """The node's SGLang launch, started the way the native launcher starts it (its adapter's environment)."""
    _, nodes = expand.load_plan(ROOT, {"nodes": [NODE], "stacks": ["sglang-cpu"]})
    launch = nodes[0].launches[0]
    port = free_port()
    adapter = SglangAdapter()
    argv = native_argv(adapter, launch, str(ROOT / ".envs/sglang-cpu/venv/bin/python"), "127.0.0.1", port, 2)
    return ServerProcess(argv, log, f"http://127.0.0.1:{port}", adapter.health_path,
                         env={**adapter.native_env(launch, 2), **launch.env})


def test_sglang_on_cpu_measures_decode_prefill_ttft_kv_pool_and_says_what_it_is(sglang_ready, repo_copy):
    os.symlink(ROOT / ".envs", repo_copy / ".envs")
    (repo_copy / "data/models").parent.mkdir(exist_ok=True)
    os.symlink(ROOT / "data/models", repo_copy / "data/models")
    results = report_one_node(repo_copy, NODE, output_tokens=24, stacks=["sglang-cpu"])
    measured = results[(results["source"] == "measured") & (results["stack"] == "sglang")]
    cells = measured[measured["workload"] != "server"]
    assert set(cells["status"]) == {"ok"}, cells[["variant", "status", "reason"]].drop_duplicates().to_string()
    by = measured[measured["status"] == "ok"].set_index(["variant", "metric"])["value"]
    for metric in ("decode_tps", "prefill_tps", "ttft_s"):
        assert by[("nospec", metric)] > 0, metric
    assert by[("nospec", "kv_pool_tokens")] == 8192  # "max_total_num_tokens=8192" from the log
    assert 150 < by[("nospec", "kv_cache_mib")] < 200  # 0.18 GiB (SGLang's "GB"), about 180 MiB
    assert ("nospec", "accept_len") not in by.index
    row = measured.iloc[0]
    assert (row["engine"], row["engine_version"], row["kv_dtype"]) == ("SGLang", "0.5.23", "bfloat16")
    log = (repo_copy / f"data/runs/{NODE}/sglang-cpu--nospec/server.log").read_text()
    assert "sgl_kernel stand-in:" in log and "'attention_backend': 'torch_native'" in log
    pgid = server_pid(repo_copy / f"data/runs/{NODE}/sglang-cpu--nospec")
    assert group_members(pgid) == []  # HTTP server, scheduler and detokenizer all gone


def test_teardown_after_the_http_server_died_leaves_no_scheduler_or_detokenizer(sglang_ready, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    proc = server(tmp_path / "server.log").start()
    pgid = proc.pgid
    try:
        proc.wait_ready(600)
        assert len(group_members(pgid)) >= 3, "expected SGLang's scheduler and detokenizer beside the HTTP server"
        os.kill(pgid, signal.SIGKILL)  # the HTTP server (the group leader) dies without cleaning up
    finally:
        proc.stop()
    assert group_members(pgid) == []


def test_teardown_while_sglang_is_still_loading_leaves_nothing(sglang_ready, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    proc = server(tmp_path / "server.log").start()
    pgid = proc.pgid
    try:
        deadline = time.monotonic() + 300
        while len(group_members(pgid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(group_members(pgid)) >= 3, "SGLang's scheduler and detokenizer never started"
        with pytest.raises(ReadyTimeout):
            proc.wait_ready(1)  # the scheduler is still loading the model
    finally:
        proc.stop()
    assert group_members(pgid) == []
