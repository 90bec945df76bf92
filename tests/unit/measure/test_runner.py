"""Failures the cell runner names where the figure would have been: a /metrics scrape that fails."""

import shutil

from paths import ROOT
from scripted_sse import ScriptedServer

from stackbench.engines.vllm import VllmAdapter
from stackbench.measure.runner import CellResult, CellRunner
from stackbench.plan import expand, launchspec


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
