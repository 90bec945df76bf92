"""Fault injection: what the pipeline records for each fault, with no server left behind.

Which engine each claim runs on (docs/benchmarks.md, the CI section): a claim about llama-server itself
(its last words on a corrupt model, the message it exits with on a taken port) runs on the real llama-server;
a claim about our process handling (a missing model file, a taken port retried on another, SIGTERM, a
changed workload rerunning exactly its cells) runs on the ENGINE DOUBLE installed as llama-server
(tests/support/engine_double.py: the stand-in engine in llama.cpp's formats, the real launcher and run loop).
Hangs cannot be provoked in a real server on demand, so they run against a small asyncio SSE server in this
file, a test double named as such. See also test_integration_llamacpp.py.
"""

import asyncio
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from helpers import ci_launch_run as launch_run
from helpers import ci_measure_argv as measure_argv
from launch_helpers import TEST_MODEL, server_pid

from stackbench.measure.client import StreamClient
from stackbench.results import store
from stackbench.serve import process
from stackbench.serve.process import group_members


# -- hangs, against a test-double SSE server ----------------------------------------------------------
async def hanging_server(mode: str):
    """Test double: an OpenAI-style SSE endpoint that misbehaves in one named way."""

    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        if mode == "accept-never-answer":
            await asyncio.sleep(60)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        if mode == "stream-then-stall":
            for i in range(3):
                data = f'data: {{"choices":[{{"delta":{{"content":"t{i}"}}}}]}}\n\n'.encode()
                writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                await writer.drain()
            await asyncio.sleep(60)
        if mode == "error-mid-stream":
            for data in (b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n', b'data: {"error":{"message":"CUDA error: out of memory"}}\n\n'):
                writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def ask(mode: str, stall_timeout_s: float, request_timeout_s: float):
    """One chat request from our client to the misbehaving test-double server."""

    async def scenario():
        server = await hanging_server(mode)
        port = server.sockets[0].getsockname()[1]
        client = StreamClient(f"http://127.0.0.1:{port}", "m", {}, stall_timeout_s, request_timeout_s)
        record = await client.chat([{"role": "user", "content": "hi"}], 8, 0, 0)
        await client.aclose()
        server.close()
        return record

    return asyncio.run(scenario())


@pytest.mark.parametrize("mode, status, error", [
    ("accept-never-answer", "timeout", "stream stalled: nothing received for 1 s"),
    ("stream-then-stall", "timeout", "stream stalled: nothing received for 1 s"),
    ("error-mid-stream", "failed", "server error mid-stream: CUDA error: out of memory"),
])
def test_hung_or_broken_streams_become_failed_requests(mode, status, error):
    started = time.monotonic()
    record = ask(mode, stall_timeout_s=1.0, request_timeout_s=10)
    assert (record.status, record.error) == (status, error)
    assert time.monotonic() - started < 5
    if mode == "stream-then-stall":
        assert record.content_chunks == 3 and record.content == "t0t1t2"  # what arrived before the stall is kept


def test_client_side_request_timeout():
    record = ask("stream-then-stall", stall_timeout_s=30, request_timeout_s=1.5)
    assert record.status == "timeout" and record.error == "no complete answer within 2 s"


# -- faults of a launch: the real llama-server where the claim is about it, else the engine double -----


def node_models(repo: Path, **models):
    node = repo / "configs/nodes/ci-cpu.yaml"
    doc = yaml.safe_load(node.read_text())
    doc["models"].update(models)
    node.write_text(yaml.safe_dump(doc))


@pytest.mark.integration
def test_missing_model_file_is_not_run_with_file_and_field(ci_double_repo, tmp_path, monkeypatch):
    """Our check before any start (no server is started): on the engine double."""
    node_models(ci_double_repo, **{"smollm2-135m-q4km": {"gguf": "/nowhere/model.gguf", "quant": "Q4_K_M"}})
    run = launch_run(ci_double_repo, "llamacpp--nospec", tmp_path / "run")
    monkeypatch.chdir(ci_double_repo)
    results = store.read_results(run.run())
    # code and json at c1 and c2, and the probes every launch runs by default
    assert set(results["status"]) == {"not_run"} and len(results) == 5
    assert results["reason"].iloc[0] == "model file missing: /nowhere/model.gguf (models.smollm2-135m-q4km in configs/nodes/ci-cpu.yaml)"
    assert run.launches == 0


@pytest.mark.integration
def test_corrupt_model_fails_every_cell_with_the_engines_last_words(ci_repo, tmp_path, monkeypatch):
    """llama-server's own last words on a model it cannot load: on the real llama-server."""
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(Path(ci_repo / "data/models/smollm2-135m-q4km.gguf").read_bytes()[:1_000_000])
    node_models(ci_repo, **{"smollm2-135m-q4km": {"gguf": str(corrupt), "quant": "Q4_K_M"}})
    run = launch_run(ci_repo, "llamacpp--nospec", tmp_path / "run")
    monkeypatch.chdir(ci_repo)
    results = store.read_results(run.run())
    results = results[results["workload"] != "server"]
    assert set(results["status"]) == {"failed"} and len(results) == 5  # the probes' cell among them
    assert results["reason"].iloc[0].startswith("server exited with code 1 before it was ready; last log line:")
    assert "exiting due to model loading error" in results["reason"].iloc[0]
    assert run.launches == 1  # a server that never became ready is not relaunched for every cell


@pytest.mark.integration
def test_port_taken_is_retried_on_another_port(ci_double_repo, tmp_path, monkeypatch):
    """Our retry on a fresh port after the server says it could not bind: on the engine double (which exits
    with the OS's "Address already in use"); llama-server's own message is the next test's claim."""
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    taken = blocker.getsockname()[1]
    real_free_port = process.free_port
    ports = iter([taken])
    monkeypatch.setattr(process, "free_port", lambda host: next(ports, None) or real_free_port(host))
    (ci_double_repo / "configs/nodes/ci-cpu.yaml").write_text(
        (ci_double_repo / "configs/nodes/ci-cpu.yaml").read_text().replace("- json\n", ""))
    run = launch_run(ci_double_repo, "llamacpp--nospec", tmp_path / "run")
    monkeypatch.chdir(ci_double_repo)
    results = store.read_results(run.run())
    blocker.close()
    assert set(results.loc[results["workload"] != "server", "status"]) == {"ok"}
    assert run.launches == 1  # the retry on a fresh port happens inside the launch's start
    log = (tmp_path / "run/server.log").read_text()
    assert f"cannot listen on 127.0.0.1:{taken}" in log and "Address already in use" in log
    assert log.count("engine test double listening on") == 1  # the second attempt, on another port


@pytest.mark.integration
def test_llama_server_on_a_taken_port_exits_with_the_message_the_retry_reads(llamacpp_env):
    """llama-server's own bind failure: on the real llama-server, started on a port that is taken; what it
    says is what process.BIND_FAILURE reads (the run loop's retry is the test above, on the double)."""
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    taken = blocker.getsockname()[1]
    try:
        done = subprocess.run([llamacpp_env["server"], "-m", str(TEST_MODEL), "--host", "127.0.0.1", "--port", str(taken),
                               "-c", "512"], capture_output=True, text=True, timeout=120)
    finally:
        blocker.close()
    said = done.stdout + done.stderr
    assert done.returncode != 0, said[-2000:]
    assert "couldn't bind HTTP server socket" in said and process.BIND_FAILURE.search(said), said[-2000:]


@pytest.mark.integration
def test_sigterm_during_a_cell_stops_the_server_and_keeps_finished_cells(ci_double_repo, tmp_path, monkeypatch):
    """Our signal handling and process group: on the engine double (a request about 0.5 s, a cell about 2 s)."""
    monkeypatch.setenv("ENGINE_DOUBLE_INTERVAL_S", "0.02")
    out = tmp_path / "run"
    proc = subprocess.Popen(measure_argv(ci_double_repo, "llamacpp--nospec", out), cwd=ci_double_repo,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((out / "cells").glob("*--????????????????.parquet")):
        time.sleep(0.2)
    pgid = server_pid(out)
    proc.terminate()
    proc.wait(timeout=60)
    assert proc.returncode != 0
    assert group_members(pgid) == []
    kept = list((out / "cells").glob("*--????????????????.parquet"))
    assert kept and all(store.read_results(p)["status"].eq("ok").all() for p in kept)


@pytest.mark.integration
def test_a_changed_workload_reruns_exactly_its_cells(ci_double_repo, tmp_path, monkeypatch):
    """Our cell fingerprints and cell store: on the engine double (it answers with exactly max_tokens)."""
    ci_repo = ci_double_repo
    monkeypatch.chdir(ci_repo)
    launch_run(ci_repo, "llamacpp--nospec", tmp_path / "run").run()
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "run/cells").glob("*--????????????????.parquet")}
    (ci_repo / "configs/workloads/json.yaml").write_text(yaml.safe_dump({"prompts": ["Return a JSON list of 4 colours."], "output_tokens": 16}))
    run = launch_run(ci_repo, "llamacpp--nospec", tmp_path / "run")
    results = store.read_results(run.run())
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "run/cells").glob("*--????????????????.parquet")}
    code_cells = {n for n in before if n.startswith("code--")}
    assert len(code_cells) == 2 and all(after[n] == before[n] for n in code_cells)  # not re-measured
    new = set(after) - set(before)
    assert len(new) == 2 and {n.split("--")[0] for n in new} == {"json"}  # measured under the new config
    assert results[(results["workload"] == "json")]["output_tokens"].dropna().unique().tolist() == [16]
