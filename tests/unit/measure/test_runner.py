"""Failures the cell runner names where the figure would have been (a /metrics scrape that fails), and the client's
check of itself in a measured cell."""

import shutil

import pytest
from paths import ROOT, STANDIN_SETS
from scripted_sse import ScriptedServer

from stackbench.engines import adapter_for
from stackbench.engines.vllm import VllmAdapter
from stackbench.measure.runner import CellResult, CellRunner
from stackbench.plan import expand, launchspec
from stackbench.rehearsal.standin import StandinEngine, Timing


def test_a_scrape_with_no_server_says_why():
    counters, why = CellRunner("http://127.0.0.1:9", VllmAdapter(), None, None).scrape()
    assert counters is None and why.startswith("http://127.0.0.1:9/metrics: ConnectError")


def test_a_scrape_refused_by_the_server_names_its_status():
    with ScriptedServer([]) as server:  # answers POST only: GET /metrics gets 501
        counters, why = CellRunner(server.base_url, VllmAdapter(), None, None).scrape()
    assert counters is None and why == f"{server.base_url}/metrics: HTTP 501"


def test_the_scrape_failure_is_in_the_cells_note(tmp_path):
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    cfg = expand.load_run_config(tmp_path, {"nodes": ["local-cpu"]})
    node = expand.load_node("local-cpu", cfg, tmp_path)
    cell = launchspec.build(cfg, node, node.launches[0]).cells[0]
    result = CellResult(cell, "ok", scrape_note="/metrics scrape failed, acceptance not measured: x: HTTP 501")
    assert "/metrics scrape failed, acceptance not measured: x: HTTP 501" in result.row_extra()["note"]


@pytest.mark.parametrize(("asked", "processes"), [("auto", 1), (2, 2)])
def test_a_measured_cell_carries_the_clients_own_load_and_the_servers_token_rate_beside_its_own(tmp_path, asked, processes):
    """On the stand-in (a test double, served from a thread) in llama.cpp's formats: the cell's rows hold the
    client's loop lag and CPU share, a client at c2 on a 100 ms chunk gap is not flagged (auto: one process, its
    warm-up far from a busy core), and the server's own token counter over the window counts what the client
    received, read by one process or spread over two."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    # the default's classes draw from prompt sets: stand-ins of their fetched files, not the public sets
    cfg = expand.load_run_config(tmp_path, {"nodes": ["local-cpu"], "paths": {"datasets": str(STANDIN_SETS)},
                                            "measure": {"repeats": 2, "warmup_requests": 1, "client_processes": asked}})
    node = expand.load_node("local-cpu", cfg, tmp_path)
    spec = launchspec.build(cfg, node, node.launches[0])
    cell = next(c for c in spec.cells if c.workload.name == "code" and c.concurrency == 2 and c.power_cap_w is None)
    timing = Timing(ttft_s=0.02, interval_s=0.1, tokens_per_chunk=1, reasoning_tokens=0, content_tokens=5,
                    engine="llamacpp")
    with StandinEngine(timing) as engine:
        result = CellRunner(engine.base_url, adapter_for("llamacpp"), spec, None).run(cell)
    assert result.status == "ok", result.reason
    figures = {f.metric: f for f in result.figures}
    assert figures["client_loop_lag_p99_ms"].n >= 10 and figures["client_cpu_share"].value < 0.9
    assert figures["client_cpu_share"].n == processes and f"{processes} client process" in figures["client_cpu_share"].note
    assert figures["client_saturated"].value == 0.0 and result.client_note is None, result.client_note
    assert figures["server_generated_tps"].value == pytest.approx(figures["client_received_tps"].value)
    # 3 repeats (the run's own, over measure's) x 2 streams x 6 tokens
    assert "the client's 36 tokens / the server's 36" in figures["server_generated_tps"].note
    assert sorted((r["repeat"], r["stream"]) for r in result.requests) == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
