"""External mode: a server somebody else started. Readiness and liveness really probe it; the basis the
pipeline did not set (engine version, context length, TP, quantization) comes from the server's own
reports or is unknown. The llama.cpp case runs a real llama-server started apart from the launcher; the
vLLM and SGLang replies are fixtures written from their source (tests/fixtures/external/*-from-source*); the llama.cpp /props fixture is a capture."""

from __future__ import annotations

import http.server
import json
import threading
import time

import httpx
import pytest
from launch_helpers import TEST_MODEL, chat, make_launch, measured_one_launch, one_model_node
from paths import FIXTURES

from stackbench.engines import adapter_for
from stackbench.rehearsal.standin import StandinEngine, Timing
from stackbench.serve.launchers import open_launcher
from stackbench.serve.process import ReadyTimeout, ServerError, ServerProcess, free_port

FIXTURES = FIXTURES / "external"


def external(tmp_path, url: str, engine: str = "llamacpp"):
    launch = make_launch(engine, node="ci-cpu", launch_mode="external", launch_target=url, context_len=4096)
    return open_launcher(launch, adapter_for(engine), {}, tmp_path / "run", None, None)


@pytest.fixture
def separate_llama_server(tmp_path, llamacpp_env):
    """A llama-server started the way a person would, not by any launcher: one slot of 1024 tokens, with
    /metrics on (the run loop reads its counters around every cell)."""
    port = free_port()
    argv = [llamacpp_env["server"], "--model", str(TEST_MODEL), "--host", "127.0.0.1", "--port", str(port),
            "--ctx-size", "1024", "--parallel", "1", "--threads", "2", "--metrics"]
    with ServerProcess(argv, tmp_path / "their-server.log", f"http://127.0.0.1:{port}", "/health") as server:
        yield server


@pytest.mark.integration
def test_a_separately_started_llama_server_is_measured_with_its_own_basis(tmp_path, separate_llama_server):
    launcher = external(tmp_path, separate_llama_server.base_url + "/")
    # The server is already up (its fixture waited for /health): ready by the second poll at most (on a loaded
    # machine the first probe can time out: CI once read 30.06 s), never a wait toward ready_timeout_s.
    assert launcher.start(ready_timeout_s=120, poll_s=30) < 2 * 30
    assert launcher.argv == [] and launcher.base_url == separate_llama_server.base_url
    assert chat(launcher.base_url)["usage"]["completion_tokens"] > 0
    props = httpx.get(separate_llama_server.base_url + "/props").json()
    assert launcher.identity() == {
        "launch_mode": "external", "engine_image": "external endpoint",
        "engine_version": props["build_info"],  # the server's word, not the environment's ready.json
        "context_len": 1024,  # what the server runs with, not the node's context_len (4096)
        "quant": "Q4_1",  # the GGUF's file type as the server reads it
        "tp": None,  # llama.cpp has no tensor parallelism to report
    }
    assert launcher.alive()
    launcher.stop()
    assert launcher.alive() and separate_llama_server.alive()  # stop() leaves somebody else's server running
    separate_llama_server.stop()
    assert not launcher.alive()  # liveness really probes


@pytest.mark.integration
def test_the_run_loop_marks_rows_external_with_the_servers_basis(repo_copy, tmp_path, separate_llama_server):
    node = one_model_node({"mode": "external", "url": separate_llama_server.base_url})
    node["context_len"] = 4096  # the node's word, which the server contradicts
    node["models"]["smollm2-135m-q4-1"]["quant"] = "Q8_0"
    rows = measured_one_launch(repo_copy, "ci-external", node, tmp_path / "run")
    decode = rows[(rows["metric"] == "decode_tps") & (rows["status"] == "ok")]
    assert len(decode) == 1 and decode["value"].iloc[0] > 0
    assert set(rows["launch_mode"]) == {"external"} and set(rows["engine_image"]) == {"external endpoint"}
    build = httpx.get(separate_llama_server.base_url + "/props").json()["build_info"]
    assert set(rows["engine_version"]) == {build} and set(rows["quant"]) == {"Q4_1"}
    assert set(rows["context_len"]) == {1024} and rows["tp"].isna().all()
    assert separate_llama_server.alive()  # measured, not stopped


def test_a_server_that_answers_but_is_not_ready_times_out_naming_the_url(tmp_path):
    """A server that answers 503 while it loads is waited for (an unanswering URL is refused at once:
    tests/unit/serve/test_launchers.py)."""
    class Loading(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(503)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Loading)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        with pytest.raises(ReadyTimeout, match=f"not ready after 1 s at {url}/health"):
            external(tmp_path, url).start(ready_timeout_s=1)
    finally:
        server.shutdown()


def test_a_server_without_the_stacks_health_route_fails_at_once_naming_it(tmp_path):
    """A vLLM-speaking stand-in (TEST DOUBLE) reached as an external SGLang server answers 404 at
    /health_generate: it will never be ready, so the start says so instead of waiting ready_timeout_s."""
    with StandinEngine(Timing(engine="vllm")) as engine:
        launcher = external(tmp_path, engine.base_url, engine="sglang")
        started = time.monotonic()
        with pytest.raises(ServerError, match=f"{engine.base_url} has no route /health_generate .*not the SGLang server"):
            launcher.start(ready_timeout_s=60)
        assert time.monotonic() - started < 5
        # Its own route answers at the first poll: no poll interval waited.
        assert external(tmp_path, engine.base_url, engine="vllm").start(ready_timeout_s=5, poll_s=30) < 30


def replies(routes: dict[str, str]) -> httpx.Client:
    """An httpx client whose transport answers from fixture files (a test double of the server)."""
    def answer(request: httpx.Request) -> httpx.Response:
        name = routes.get(request.url.path)
        return httpx.Response(200, json=json.loads((FIXTURES / name).read_text())) if name else httpx.Response(404)
    return httpx.Client(transport=httpx.MockTransport(answer))


def test_llamacpp_with_several_slots_leaves_the_server_context_unknown():
    """/props trimmed to the keys read, captured from llama-server b11434 --ctx-size 1024 --parallel 2:
    each slot reports 512, which --kv-unified would report as 1024, so the total is not knowable."""
    client = replies({"/props": "llamacpp-b11434-props--ctx-size-1024--parallel-2.json"})
    assert adapter_for("llamacpp").self_report(client, "http://llama") == {
        "engine_version": "b0-unknown", "context_len": None, "quant": "Q4_1"}


def test_vllm_reports_version_and_max_model_len_but_not_tp_or_quant():
    client = replies({"/version": "vllm-version-from-source.json", "/v1/models": "vllm-v1-models-from-source.json"})
    assert adapter_for("vllm").self_report(client, "http://vllm") == {"engine_version": "0.11.0", "context_len": 32768}


@pytest.mark.parametrize("path", ["/server_info", "/get_server_info"])
def test_sglang_reports_version_context_tp_and_quant_on_either_route(path):
    client = replies({path: "sglang-server-info-from-source.json"})
    assert adapter_for("sglang").self_report(client, "http://sglang") == {
        "engine_version": "0.5.5", "context_len": 40960, "tp": 4, "quant": "fp8"}


@pytest.mark.parametrize("engine", ["llamacpp", "vllm", "sglang"])
def test_a_server_that_reports_nothing_leaves_every_figure_unknown(engine):
    report = adapter_for(engine).self_report(replies({}), "http://silent")
    assert report["engine_version"] == "unknown"
    assert report.get("context_len") is None and report.get("tp") is None and report.get("quant", "unknown") == "unknown"
