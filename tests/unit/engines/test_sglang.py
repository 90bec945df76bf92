"""SGLang adapter: launch argv and parsers for every log line and metric the pipeline reads, old and new
forms. Fixtures named *-cpu-real* are captured from SGLang 0.5.23's CPU engine on this machine (node
local-cpu with stacks=[sglang-cpu]); the speculative formats exist only on GPU, so their fixtures (*-gpu-*-from-source*)
are written from SGLang's source as quoted in research/server_metrics.md, as is the 0.4 log."""

import json

import pytest
from launch_helpers import make_launch as launch
from paths import FIXTURES

from stackbench.config.model import Model
from stackbench.engines.base import stated_limit
from stackbench.engines.sglang import SglangAdapter
from stackbench.serve.launchers import native_argv

FIXTURES = FIXTURES
sglang = SglangAdapter()



def test_sglang_argv_expresses_seed_002s_launch_command():
    item = launch("sglang", spec_method="mtp", spec_engine_type="EAGLE", spec_tokens=3,
                  spec_extra={"eagle_topk": 1, "num_draft_tokens": 4},
                  server_args={"tp_size": 2, "mem_fraction_static": 0.94, "kv_cache_dtype": "fp8_e5m2",
                               "max_running_requests": 2, "enable_cache_report": True, "trust_remote_code": True})
    argv = native_argv(sglang, item, "/env/bin/python", "127.0.0.1", 30000, None)
    assert argv[:3] == ["/env/bin/python", "-m", "sglang.launch_server"]
    text = " ".join(argv)
    for flag in ("--tp-size 2", "--mem-fraction-static 0.94", "--kv-cache-dtype fp8_e5m2", "--max-running-requests 2",
                 "--enable-cache-report", "--trust-remote-code", "--speculative-algorithm EAGLE",
                 "--speculative-num-steps 3", "--speculative-eagle-topk 1", "--speculative-num-draft-tokens 4",
                 "--context-length 131072", "--enable-metrics"):
        assert flag in text, flag
    assert item.tp == 2


def test_sglang_dflash_argv_sets_draft_tokens_and_draft_model():
    item = launch("sglang", spec_method="dflash", spec_engine_type="DFLASH", spec_tokens=8,
                  draft_model=Model("d", "/draft", "BF16", None), spec_extra={"draft_model_quantization": "unquant"})
    text = " ".join(native_argv(sglang, item, "python3", "127.0.0.1", 1, None))
    assert "--speculative-algorithm DFLASH --speculative-draft-model-path /draft --speculative-num-draft-tokens 8" in text
    assert "--speculative-draft-model-quantization unquant" in text and "--speculative-num-steps" not in text


def test_sglang_log_new_format():
    facts = sglang.parse_log((FIXTURES / "sglang/server-0.5.23-gpu-eagle-from-source.log").read_text())
    assert facts.kv_pool_tokens == 211357 and facts.kv_dtype == "float8_e4m3fn"
    assert facts.n_ctx == 131072 and facts.slots == 2
    assert facts.extra["mem_free_after_pool_gb"] == 1.57
    assert facts.extra["mamba_cache_slots"] == 16 and facts.extra["mamba_state_gb"] == pytest.approx(2.45)
    # SGLang's "GB" is GiB (bytes / 1 << 30), not 1e9 bytes: 9.72 GB is 9953 MiB, not 9270.
    assert facts.model_mib == pytest.approx(9.72 * 1024) and facts.kv_cache_mib == pytest.approx(6.92 * 1024)


def test_sglang_cpu_log_captured_from_the_real_server():
    facts = sglang.parse_log((FIXTURES / "sglang/server-0.5.23-cpu-real.log").read_text())
    # "KV Cache is allocated. dtype: torch.float16, #tokens: 8192, K size: 0.09 GB, V size: 0.09 GB"
    assert (facts.kv_pool_tokens, facts.kv_dtype, facts.kv_cache_mib) == (8192, "float16", pytest.approx(0.18 * 1024))
    # "max_total_num_tokens=8192, ..., max_running_requests=2048, context_len=4096, available_cpu_mem=..."
    assert (facts.n_ctx, facts.slots) == (4096, 2048)
    # "Load weight end. ... mem usage=0.30 GB." is the drop in the host's available memory on CPU: not reported.
    assert facts.model_mib is None and "host available memory" in facts.extra["model_mib_not_reported"]
    assert facts.backend == "CPU"
    assert {k: facts.extra[k] for k in ("device", "attention_backend", "sampling_backend")} == {
        "device": "cpu", "attention_backend": "torch_native", "sampling_backend": "pytorch"}
    assert facts.extra["sgl_kernel"].startswith("stackbench's import-only stand-in for sgl_kernel")


def test_sglang_cpu_metrics_captured_from_the_real_server():
    text = (FIXTURES / "sglang/metrics-0.5.23-cpu-real.txt").read_text()
    assert sglang.spec_counters(text) is None  # no speculation: SGLang exports no verify-call counter
    facts = sglang.facts_from_metrics(text)
    assert (facts.kv_pool_tokens, facts.n_ctx) == (8192, 4096)
    # Unrounded GiB: (8192 tokens + the padding slot SGLang reserves) x 30 layers x (K + V) x 3 KV heads
    # x 64 dims x 2 bytes = 180.02 MiB, which the log rounds to 0.18 GB = 184.3 MiB.
    assert facts.kv_cache_mib == pytest.approx(8193 * 30 * 2 * 3 * 64 * 2 / 2**20)
    assert facts.model_mib is None


def test_the_unrounded_pool_from_metrics_replaces_the_logs_rounded_one():
    """The run loop's merge (measure: log facts filled from /metrics) on the two real captures."""
    facts = sglang.parse_log((FIXTURES / "sglang/server-0.5.23-cpu-real.log").read_text())
    facts.fill_from(sglang.facts_from_metrics((FIXTURES / "sglang/metrics-0.5.23-cpu-real.txt").read_text()))
    assert facts.kv_cache_mib == pytest.approx(8193 * 30 * 2 * 3 * 64 * 2 / 2**20)  # 180.02 MiB, not 184.3
    assert facts.kv_dtype == "float16" and facts.n_ctx == 4096  # what the log said stays
    silent = sglang.parse_log((FIXTURES / "sglang/server-0.5.23-cpu-real.log").read_text())
    silent.fill_from(type(silent)())  # /metrics disabled: the rounded figure is still better than none
    assert silent.kv_cache_mib == pytest.approx(0.18 * 1024)


def test_sglang_server_info_captured_from_the_real_server():
    info = json.loads((FIXTURES / "sglang/server-info-0.5.23-cpu-real.json").read_text())
    assert sglang.parse_version(info) == "0.5.23"
    assert (info["device"], info["attention_backend"], info["context_length"]) == ("cpu", "torch_native", 4096)


def test_sglang_log_old_format_without_dtype_and_the_capped_warning():
    facts = sglang.parse_log((FIXTURES / "sglang/server-0.4-old-from-source.log").read_text())
    assert facts.kv_pool_tokens == 44913 and facts.kv_dtype is None
    assert facts.extra["mem_free_after_pool_gb"] == 7.90
    assert facts.extra["max_running_requests_capped"] == 1


def test_sglang_acceptance_on_vllms_basis_from_counters_never_the_gauge():
    counters = sglang.spec_counters((FIXTURES / "sglang/metrics-gpu-spec-from-source.txt").read_text())
    # 3520 generated tokens, 20 requests, 1000 verify calls. SGLang's own 3520 / 1000 = 3.52 counts the 20
    # first tokens that prefill made; 1 + accepted / verify steps = 1 + (3520 - 20 - 1000) / 1000 = 3.50.
    # The gauge's 9.99 is a 40-step window and never used.
    assert (counters.drafts, counters.accepted) == (1000, 2500)
    assert 1 + counters.accepted / counters.drafts == pytest.approx(3.50)


def test_sglang_acceptance_over_a_cell_is_the_counter_delta():
    text = (FIXTURES / "sglang/metrics-gpu-spec-from-source.txt").read_text()
    # One more request in the cell: 41 tokens, the first from prefill, then 10 verify steps of 4 tokens.
    streaming = 'is_streaming="true",model_name="qwen3.8-27b"}'
    later = (text.replace("} 3420.0", "} 3461.0").replace(f"{streaming} 19.0", f"{streaming} 20.0")
             .replace("} 1000.0", "} 1010.0"))
    delta = sglang.spec_counters(later).minus(sglang.spec_counters(text))
    assert (delta.drafts, delta.accepted) == (10, 30) and 1 + delta.accepted / delta.drafts == 4.0


def test_sglang_per_request_spec_details_and_extras():
    chunk = json.loads((FIXTURES / "sglang/final-chunk-gpu-spec-from-source.json").read_text())
    # SGLang's own 512 / 152 = 3.37; on vLLM's basis (512 - 1) / 152 = 3.36.
    assert sglang.server_timings(chunk) == {"server_spec_accept_length": 3.37, "server_spec_accept_rate": 0.79,
                                            "server_spec_verify_ct": 152, "server_spec_accepted_tokens": 359,
                                            "server_spec_drafted_tokens": 456,
                                            "server_spec_accept_len_vllm_basis": pytest.approx(511 / 152)}
    spec = launch("sglang", spec_method="mtp", spec_tokens=3)
    assert sglang.request_extras(spec, 64) == {"ignore_eos": True, "min_tokens": 64, "return_spec_tokens_details": True}
    assert "return_spec_tokens_details" not in sglang.request_extras(launch("sglang"), 64)


def test_sglang_rejection_states_its_limit():
    # The scheduler's check against the KV pool (managers/utils.py validate_input_length).
    message = json.loads((FIXTURES / "sglang/error-400-max-req-len-from-source.json").read_text())["message"]
    assert stated_limit(sglang, message) == 60967


def test_sglang_over_context_rejection_captured_from_the_real_server():
    # The tokenizer's check against the context length, answered with HTTP 400.
    reply = json.loads((FIXTURES / "sglang/error-400-context-0.5.23-cpu-real.json").read_text())
    assert reply["code"] == 400
    assert stated_limit(sglang, reply["message"]) == 4096



def test_sglang_stream_captured_from_the_real_server_has_usage_and_no_spec_details():
    lines = (FIXTURES / "sglang/stream-chat-0.5.23-cpu-real.sse").read_text().splitlines()
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: {")]
    # --enable-cache-report: the usage chunk counts cached prompt tokens; no speculation, no sglext details.
    assert chunks[-1]["usage"]["completion_tokens"] == 24
    assert chunks[-1]["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert [sglang.server_timings(chunk) for chunk in chunks] == [{}] * len(chunks)
