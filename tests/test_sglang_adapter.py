"""SGLang adapter: launch argv and parsers for every log line and metric the pipeline reads, old and new
forms. These fixtures are written from the engine's formats as quoted in research/server_metrics.md."""

import json
from pathlib import Path

import pytest

from stackbench.client import stated_limit
from stackbench.plan import Launch, Model
from stackbench.stacks.sglang import SglangAdapter

FIXTURES = Path(__file__).parent / "fixtures"
sglang = SglangAdapter()


def launch(engine, **extra):
    base = dict(node="n", stack_config=engine, engine=engine, variant="v", spec_method="none", spec_engine_type=None,
                spec_tokens=None, spec_extra={}, server_args={}, model=Model("qwen38", "/models/q", "AWQ", None),
                draft_model=None, launch_mode="native", launch_target=None, env_name=engine, context_len=131072,
                bind_host="127.0.0.1")
    return Launch(**{**base, **extra})


def test_sglang_argv_expresses_seed_002s_launch_command():
    item = launch("sglang", spec_method="mtp", spec_engine_type="EAGLE", spec_tokens=3,
                  spec_extra={"eagle_topk": 1, "num_draft_tokens": 4},
                  server_args={"tp_size": 2, "mem_fraction_static": 0.94, "kv_cache_dtype": "fp8_e5m2",
                               "max_running_requests": 2, "enable_cache_report": True, "trust_remote_code": True})
    argv = sglang.argv(item, "/env/bin/python", "127.0.0.1", 30000, None)
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
    text = " ".join(sglang.argv(item, "python3", "127.0.0.1", 1, None))
    assert "--speculative-algorithm DFLASH --speculative-draft-model-path /draft --speculative-num-draft-tokens 8" in text
    assert "--speculative-draft-model-quantization unquant" in text and "--speculative-num-steps" not in text


def test_sglang_log_new_format():
    facts = sglang.parse_log((FIXTURES / "sglang/server-0.5.23-eagle.log").read_text())
    assert facts.kv_pool_tokens == 211357 and facts.kv_dtype == "float8_e4m3fn"
    assert facts.n_ctx == 131072 and facts.slots == 2
    assert facts.extra["mem_free_after_pool_gb"] == 1.57
    assert facts.extra["mamba_cache_slots"] == 16 and facts.extra["mamba_state_gb"] == pytest.approx(2.45)
    assert facts.model_mib == pytest.approx(9.72e9 / 2**20)


def test_sglang_log_old_format_without_dtype_and_the_capped_warning():
    facts = sglang.parse_log((FIXTURES / "sglang/server-0.4-old.log").read_text())
    assert facts.kv_pool_tokens == 44913 and facts.kv_dtype is None
    assert facts.extra["mem_free_after_pool_gb"] == 7.90
    assert facts.extra["max_running_requests_capped"] == 1


def test_sglang_acceptance_from_counters_never_the_gauge():
    counters = sglang.spec_counters((FIXTURES / "sglang/metrics.txt").read_text())
    # (3420 + 100) generated tokens over 1000 verify calls: 3.52, not the gauge's 9.99.
    assert 1 + counters.accepted / counters.drafts == pytest.approx(3.52)


def test_sglang_per_request_spec_details_and_extras():
    chunk = json.loads((FIXTURES / "sglang/final-chunk-spec.json").read_text())
    assert sglang.server_timings(chunk) == {"server_spec_accept_length": 3.37, "server_spec_accept_rate": 0.79,
                                            "server_spec_verify_ct": 152, "server_spec_num_correct_drafts": 359,
                                            "server_spec_num_proposed_drafts": 456}
    spec = launch("sglang", spec_method="mtp", spec_tokens=3)
    assert sglang.request_extras(spec, 64) == {"ignore_eos": True, "min_tokens": 64, "return_spec_tokens_details": True}
    assert "return_spec_tokens_details" not in sglang.request_extras(launch("sglang"), 64)


def test_sglang_rejection_states_its_limit():
    message = json.loads((FIXTURES / "sglang/error-400.json").read_text())["message"]
    assert stated_limit(message) == 60967

