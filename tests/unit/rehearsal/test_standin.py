"""The stand-in engine (stackbench.rehearsal.standin, a TEST DOUBLE) against the engines' own parsers: what
it prints and serves must read as each engine's output does, sized from the model geometry and the node."""

import json
import re
from pathlib import Path

import httpx
import pytest
from paths import ROOT

from stackbench.config.rehearsal import STANDIN_VERSION
from stackbench.engines import adapter_for
from stackbench.engines.base import SERVER_SPEC_DRAFTED, ServerFacts
from stackbench.plan import expand
from stackbench.rehearsal import launcher, simgpu, standin
from stackbench.rehearsal.standin import Pace, StandinEngine, Timing


def seed_launch(node_name: str, launch_name: str):
    cfg = expand.load_run_config(ROOT, {"nodes": [node_name]})
    return expand.find_launch([expand.load_node(node_name, cfg, ROOT)], node_name, launch_name)


@pytest.mark.parametrize("node_name, launch_name", [("rtx5090", "llamacpp--nospec"), ("rtx5090", "sglang-eagle--eagle-3-1-4"),
                                                    ("rtx5090", "vllm-nvfp4-mtp--mtp-n2"), ("4xa6000-tp2", "sglang-dflash--dflash-n8")])
def test_start_up_lines_read_back_through_the_engine_parser_as_sized(monkeypatch, node_name, launch_name):
    monkeypatch.chdir(ROOT)
    node, launch = seed_launch(node_name, launch_name)
    adapter = adapter_for(launch.engine)
    facts = launcher.engine_facts(node, launch, adapter)
    parsed = adapter.parse_log("\n".join(standin.startup_lines(launch.engine, facts)))
    assert parsed.kv_pool_tokens == facts["kv_pool_tokens"] > 0
    assert parsed.model_mib == pytest.approx(facts["weights_mib"] if launch.engine == "llamacpp"
                                             else facts["weights_gib_per_gpu"] * 1024, rel=1e-3)
    assert parsed.n_ctx == launch.context_len
    # The pool fits the GPU: weights per GPU + KV pool within the node's memory.
    assert facts["weights_gib_per_gpu"] + facts["kv_cache_gib"] < node.gpu_memory_gib


def test_geometry_sizes_the_pool_tp_splits_the_kv_heads(monkeypatch):
    """Qwen3.8-27B (configs/models): 16 attention layers x 4 KV heads x (256 + 256) at fp8 = 32 KiB a token;
    TP 2 halves the heads per rank, so the same memory holds twice the tokens of its share."""
    monkeypatch.chdir(ROOT)
    node, launch = seed_launch("4xa6000-tp2", "sglang-eagle--eagle-3-1-4")
    facts = launcher.engine_facts(node, launch, adapter_for("sglang"))
    kv_bytes_per_token = 16 * 2 * (256 + 256) * 2  # bf16 (no kv_cache_dtype on this node), 2 of 4 heads per rank
    assert facts["kv_pool_tokens"] == int(facts["kv_cache_gib"] * 2**30 / kv_bytes_per_token)
    assert facts["weights_gib_per_gpu"] == pytest.approx(27e9 * 8.0 / 8 / 2**30 / 2)  # FP8 over TP 2


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp"])
def test_metrics_tokenize_and_context_errors_in_each_engines_format(engine):
    adapter = adapter_for(engine)
    facts = {"kv_pool_tokens": 5000, "context_len": 4096, "kv_cache_gib": 1.5, "kv_dtype": "fp8", "ctx_per_slot": 4096}
    timing = Timing(engine=engine, spec_tokens=3, tokens_per_chunk=3, reasoning_tokens=0, content_tokens=6,
                    interval_s=0.001, ttft_s=0.001, prompt_tokens=0, context_len=4096)
    with StandinEngine(timing, facts=facts) as server:
        with httpx.Client(base_url=server.base_url, timeout=10) as client:
            assert client.get(adapter.health_path).status_code == 200
            reply = client.post(adapter.tokenize_path, json=adapter.tokenize_body("m", "one two three")).json()
            assert adapter.token_count(reply) == 3
            body = {"model": "m", "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 7, "stream": True,
                    **adapter.request_extras(seed_launch("rtx5090", "llamacpp--nospec")[1], 7)}
            stream = client.post("/v1/chat/completions", json=body).text
            final = json.loads([line for line in stream.splitlines() if line.startswith("data: {")][-1][6:])
            metrics = client.get(adapter.metrics_path).text
            too_long = client.post("/v1/chat/completions", json={**body, "max_tokens": 5000})
            said = adapter.self_report(client, server.base_url)
    assert said["engine_version"] == STANDIN_VERSION  # its identity read through the engine's own route
    counters = adapter.spec_counters(metrics)
    assert counters is not None and counters.drafts == 2  # two verification steps of 3 tokens after the prefill's
    # The facts each engine's /metrics carries, as the stand-in was given them (llama.cpp's holds counters only).
    assert adapter.facts_from_metrics(metrics) == {
        "vllm": ServerFacts(kv_pool_tokens=5000, kv_dtype="fp8", extra={"block_size": 16}),
        "sglang": ServerFacts(kv_pool_tokens=5000, n_ctx=4096, kv_cache_mib=1.5 * 1024),
        "llamacpp": ServerFacts()}[engine]
    assert too_long.status_code == 400
    assert int(adapter.context_limit.search(too_long.json()["error"]["message"]).group(1)) == 4096
    timings = adapter.server_timings(final)
    if engine == "llamacpp":
        assert timings["server_predicted_n"] == 7 and timings[SERVER_SPEC_DRAFTED] == 6
    if engine == "sglang":
        assert timings["server_spec_verify_ct"] == 2 and timings["server_spec_accept_len_vllm_basis"] == 3.0


def test_a_request_with_tools_is_answered_by_one_call_without_content():
    timing = Timing(reasoning_tokens=0, content_tokens=3, tokens_per_chunk=1, interval_s=0.001, ttft_s=0.001)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    with StandinEngine(timing) as server:
        stream = httpx.post(server.base_url + "/v1/chat/completions", timeout=10, json={
            "messages": [{"role": "user", "content": "x"}], "tools": tools, "stream": True}).text
    deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in stream.splitlines()
              if line.startswith("data: {") and json.loads(line[6:])["choices"]]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    # Like an engine's tool-call parser: no content, the name on the first piece, arguments that parse once joined.
    assert [d for d in deltas if d.get("content")] == []
    assert [c["function"].get("name") for c in calls] == ["lookup", None, None, None]
    assert json.loads("".join(c["function"]["arguments"] for c in calls)) == {"text": "t0 t1 t2 t3 "}


def test_pace_follows_the_roofline_and_slows_under_a_cap(tmp_path):
    host = simgpu.simulated_host("NVIDIA GeForce RTX 3090", 2, 24, tmp_path / "gpus.json")
    facts = {"roofline_decode_tps": 100.0, "time_scale": 10, "gpu_uuids": ["GPU-simulated-0", "GPU-simulated-1"]}
    pace = Pace(facts, host)
    at_board_power = pace.interval_s()
    # Board power 350 W; demand 315 W: uncapped the GPU draws its demand, so the full rate.
    assert at_board_power == pytest.approx(1 / (standin.ROOFLINE_SHARE * 100.0) / 10)
    host.nvmlDeviceSetPowerManagementLimit(1, 157_500)  # half the demand on one GPU of the pair
    assert pace.interval_s() == pytest.approx(at_board_power / 0.5 ** standin.CAP_EXPONENT)


def test_pace_slows_with_the_context_it_attends_over_as_stated(monkeypatch):
    """rtx5090's SGLang INT4 stand-in against seed 000: decode at 128K slows by 1 + context x the KV's share
    of a step's bytes (seed 000's own ratio per verify step: 1.29); a 128,180-token prefill averages near
    its 1,136 tok/s; a short prompt prefills at the short rate."""
    monkeypatch.chdir(ROOT)
    node, launch = seed_launch("rtx5090", "sglang-nospec--nospec")
    facts = {**launcher.engine_facts(node, launch, adapter_for("sglang")), "time_scale": 1}
    pace = Pace(facts)
    slowdown = pace.interval_s(128_000) / pace.interval_s(0)
    assert slowdown == pytest.approx(1 + 128_000 * facts["kv_share_per_token"])
    assert 1.15 < slowdown < 1.45
    assert 128_180 / pace.ttft_s(128_180) == pytest.approx(1136, rel=0.3)
    short_rate = standin.PREFILL_PER_DECODE * pace.decode_tps
    assert 1000 / pace.ttft_s(1000) == pytest.approx(short_rate, rel=0.02)
    # A cached prefix is not computed again, but the new tokens attend over it.
    assert pace.ttft_s(1000, 100_000) > pace.ttft_s(1000) * 3


def test_ready_time_follows_the_weights():
    assert standin.ready_s(30e9) - standin.ready_s(15e9) == pytest.approx(15e9 / standin.LOAD_BYTES_PER_S)
    assert standin.ready_s(0) == standin.STARTUP_S


def test_a_rehearsal_figure_reads_at_the_modeled_pace():
    from stackbench.measure.summary import Figure
    from stackbench.rehearsal.backend import at_model_pace

    rate = at_model_pace(Figure("decode_tps", 3840.0, "median", 1, ci_low=3800.0, ci_high=3900.0), 50)
    assert (rate.value, rate.ci_low, rate.ci_high, rate.value_min) == (76.8, 76.0, 78.0, None)
    assert at_model_pace(Figure("batch_wall_s", 0.409, "median", 1), 50).value == pytest.approx(20.45)
    assert at_model_pace(Figure("energy_j_per_token", 0.1, "mean", 1), 50).value == pytest.approx(5.0)
    assert at_model_pace(Figure("tpot_ms", 0.0865, "median", 1), 50).value == pytest.approx(4.325)
    ratio = Figure("accept_len", 2.5, "mean", 1)
    assert at_model_pace(ratio, 50) is ratio


def test_argv_after_the_module_is_what_the_engine_parser_gets():
    assert standin.engine_flags("sglang", ["-m", "sglang.launch_server", "--port", "1"]) == ["--port", "1"]
    assert standin.engine_flags("vllm", ["vllm", "serve", "/m", "--port", "1"]) == ["--model", "/m", "--port", "1"]
    assert standin.engine_flags("llamacpp", ["--model", "/m.gguf"]) == ["--model", "/m.gguf"]
    assert standin.engine_flags("llamacpp", ["/app/llama-server", "--model", "/m.gguf"]) == ["--model", "/m.gguf"]


def test_parse_check_skipped_with_its_reason_without_the_environment(tmp_path):
    assert re.match(r"skipped: .*sglang-cpu/ready.json not built", standin.check_with_engine_parser("sglang", [], tmp_path))
    assert standin.check_with_engine_parser("llamacpp", [], tmp_path).startswith("skipped: llama-server parses its flags in C++")


def test_the_engine_parser_refusal_stops_the_stand_in(tmp_path):
    """A ready.json whose 'server' is a Python that fails the parse: the stand-in exits with the parser's
    last line, as the engine would exit before it is ready."""
    (tmp_path / "vllm-cpu").mkdir()
    refusing = tmp_path / "refusing-python"
    refusing.write_text("#!/bin/sh\necho 'error: unrecognized arguments: --no-such-flag' >&2\nexit 2\n")
    refusing.chmod(0o755)
    (tmp_path / "vllm-cpu/ready.json").write_text(json.dumps({"server": str(refusing)}))
    with pytest.raises(SystemExit, match="unrecognized arguments: --no-such-flag"):
        standin.check_with_engine_parser("vllm", ["--no-such-flag"], Path(tmp_path))


def test_a_datacenter_cells_512_streams_connect_at_once_and_each_is_answered():
    """A node may ask for concurrency 512: its rehearsal's stand-in takes every stream's connection at once (a
    listen backlog of socketserver's 5 drops some, and their clients stall until the stall timeout)."""
    import asyncio

    from stackbench.measure.client import StreamClient, run_streams
    from stackbench.measure.workloads import Request

    timing = Timing(ttft_s=0.01, interval_s=0.01, tokens_per_chunk=1, reasoning_tokens=0, content_tokens=2)

    async def cell(url):
        client = StreamClient(url, "synthetic", {}, stall_timeout_s=10, request_timeout_s=30)
        try:
            return await run_streams(client, [Request(("hi",), timing.output_tokens)] * 512, 512)
        finally:
            await client.aclose()

    with StandinEngine(timing) as engine:
        records = asyncio.run(cell(engine.base_url))
    assert len(records) == 512 and {(r.status, r.error) for r in records} == {("ok", None)}
