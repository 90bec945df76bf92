"""SGLang's server (formats of 0.5.23 and older 0.4/0.5 builds; research/server_metrics.md section B).

The log lines, /metrics and /server_info it reads are tested on captures from SGLang 0.5.23's CPU engine
served on this machine (node local-cpu, stack sglang-cpu); the speculative formats exist only on GPU and are
tested on fixtures named *-gpu-*.

Units: SGLang prints sizes as "GB" but divides bytes by 1 << 30 (mem_cache/memory_pool.py `GB = 1024 *
1024 * 1024`, utils/common.py `get_available_gpu_memory`), so every "GB" here is GiB.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from stackbench.config.model import Launch
from stackbench.engines import prometheus
from stackbench.engines.base import (
    CacheOutlivesLaunch,
    KvAccounting,
    PythonEngine,
    PythonEngineFormats,
    RequestTrace,
    ServedCounts,
    ServerFacts,
    Slots,
    SpecCounters,
    get_json,
    python_engine_installed,
    register,
    render_flags,
    slots_from,
)
from stackbench.results.divergence import Position
from stackbench.results.metrics import SERVER_SPEC_ACCEPTED, SERVER_SPEC_DRAFTED, M

# The sgl_kernel stand-in's folder, found from the installed package (no import: engines never import provision).
CPU_OPS_STAND_IN = Path(__file__).resolve().parents[1] / "provision" / "sglang_cpu_ops"

# "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 123456, K size: 5.66 GB, V size: 5.66 GB"
# older builds have no "dtype: ..," part; MLA pools print a single "KV size".
KV_POOL = re.compile(r"KV Cache is allocated\.(?: dtype: (?P<dtype>\S+),)? #tokens: (?P<tokens>\d+), "
                     r"(?:K size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB|KV size: (?P<kv>[\d.]+) GB)")
MAX_TOTAL = re.compile(r"max_total_num_tokens=(?P<tokens>\d+)(?:.*?max_running_requests=(?P<running>\d+))?"
                       r"(?:.*?context_len=(?P<ctx>\d+))?")
POOL_END = re.compile(r"Memory pool end\. avail mem=(?P<gb>[\d.]+) GB")
WEIGHTS = re.compile(r"Load weight end\..*?mem usage=(?P<gb>[\d.]+) GB")
MAMBA = re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: (?P<slots>\d+), conv_state size: (?P<conv>[\d.]+)\s*GB, "
                   r"ssm_state size: (?P<ssm>[\d.]+)\s*GB")
CAPPED = re.compile(r"max_running_requests is capped to (?P<n>\d+)")
# The resolved arguments, printed once as a Python dict: "server_args={'model_path': ..., 'device': 'cpu', ...}"
SERVER_ARGS = re.compile(r"server_args=\{.*")
SERVER_ARG = "'{}': '(?P<value>[^']*)'"
# Printed by the project's sgl_kernel stand-in when SGLang imports it (src/stackbench/provision/sglang_cpu_ops).
KERNEL_STAND_IN = re.compile(r"^sgl_kernel stand-in: (?P<what>.+)$", re.MULTILINE)
ALGORITHMS = {"mtp": "EAGLE", "eagle": "EAGLE", "dflash": "DFLASH", "dspark": "DSPARK", "ngram": "NGRAM", "draft": "STANDALONE"}
GIB_IN_MIB = 1024  # every SGLang "GB" is GiB (module docstring)
# SGLang's own acceptance length (per request `spec_accept_length`, and the /metrics ratio) is
# completion tokens / verify steps, which counts each request's first token although prefill made it.
ACCEPT_LEN_BASIS = ("1 + accepted / verify steps (vLLM's and llama.cpp's basis), accepted = generated - requests - "
                    "verify steps from sglang:*_total deltas over the cell; SGLang's own figure counts the prefill token")


class SglangFormats(PythonEngineFormats):
    """SGLang's formats as the rehearsal's stand-in writes them (rehearsal/formats.py EngineFormats)."""

    flag_parser = ("sglang-cpu", "import argparse, sys\nfrom sglang.srt.server_args import ServerArgs\n"
                                 "p = argparse.ArgumentParser()\nServerArgs.add_cli_args(p)\np.parse_args(sys.argv[1:])\n")

    def startup_log(self, facts: dict, name: str) -> list[str]:
        """The lines of the captured logs under tests/fixtures/sglang/ that parse_log reads."""
        f = facts
        stamp = f"[{name} TP0]"
        half = f["kv_cache_gib"] / 2
        return [f"{stamp} server_args={{'model_path': '{f['model_path']}', 'device': 'cuda', "
                f"'attention_backend': '{f.get('attention_backend') or name}'}}",
                f"{stamp} Load weight end. elapsed=0.00 s, type={name}, avail mem={f['free_after_weights_gib']:.2f} GB, "
                f"mem usage={f['weights_gib_per_gpu']:.2f} GB.",
                f"{stamp} KV Cache is allocated. dtype: {f['kv_dtype']}, #tokens: {f['kv_pool_tokens']}, "
                f"K size: {half:.2f} GB, V size: {half:.2f} GB",
                f"{stamp} Memory pool end. avail mem={f['free_after_pool_gib']:.2f} GB",
                f"{stamp} max_total_num_tokens={f['kv_pool_tokens']}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                f"max_running_requests={f['slots']}, context_len={f['context_len']}, available_gpu_mem={f['free_after_pool_gib']:.2f} GB"]

    def metrics_exposition(self, counts: ServedCounts, facts: dict, name: str) -> str:
        """tests/fixtures/sglang/metrics-gpu-spec-from-source.txt's names (the scheduler's constants too)."""
        c, f = counts, facts
        labels = f'model_name="{name}"'
        lines = [f"sglang:num_requests_total{{{labels}}} {c.requests}.0",
                 f"sglang:generation_tokens_total{{{labels}}} {c.generated}.0",
                 f"sglang:prompt_tokens_total{{{labels}}} {c.prompt}.0",
                 f"sglang:cached_tokens_total{{{labels}}} {c.cached}.0",
                 f"sglang:token_usage{{{labels}}} {min(c.running, 1) * 0.01}",
                 f"sglang:cache_hit_rate{{{labels}}} {c.cached / c.prompt if c.prompt else 0.0}"]
        if c.drafts or f.get("spec_tokens"):  # a speculative server's counter, at zero before its first verify step
            lines.append(f"sglang:spec_verify_calls_total{{{labels}}} {c.drafts}.0")
        if f.get("kv_pool_tokens"):
            lines += [f"sglang:max_total_num_tokens{{{labels}}} {f['kv_pool_tokens']}.0",
                      f"sglang:context_len{{{labels}}} {f['context_len']}.0",
                      f"sglang:kv_cache_memory_usage_gb{{{labels}}} {f['kv_cache_gib']}"]
        return "\n".join(lines)

    def context_error(self, limit: int, asked: int) -> str:
        return f"The input ({asked} tokens) is longer than the model's context length ({limit} tokens)."

    def final_chunk_fields(self, trace: RequestTrace) -> dict:
        t = trace
        if not t.proposed:
            return {}
        return {"sglext": {"spec_tokens_details": {
            "spec_verify_ct": t.steps, "spec_accept_length": t.emitted / t.steps, "spec_accept_rate": t.correct / t.proposed,
            "spec_num_correct_drafts": t.correct, "spec_num_proposed_drafts": t.proposed}}}

    def info_routes(self, version: str, facts: dict, slots: int, context_len: int) -> dict[str, object]:
        info = {"version": version, "context_length": context_len or None, "tp_size": facts.get("tp"),
                "quantization": facts.get("quant"), "model_path": facts.get("model_path")}
        return {"/server_info": info, "/get_server_info": info}


@register
class SglangAdapter(PythonEngine):
    engine = "sglang"
    engine_label = "SGLang"
    health_path = "/health_generate"
    version_path = "/server_info"
    accept_len_basis = ACCEPT_LEN_BASIS
    # Each start's CUDA-graph capture over its batch sizes (no torch.compile by default), low and high seconds: an
    # assumption, not the posts' logs (none states it). Its argparse takes --tensor-parallel-size beside --tp-size, so
    # no foreign spelling is refused; /metrics needs --enable-metrics (engine_flags sets it).
    compile_s = (20.0, 90.0)
    formats = SglangFormats()
    image_entrypoint = ("python3", "-m", "sglang.launch_server")  # the lmsysorg/sglang image has no entrypoint
    image_version_command = ("python3", "-c", "import sglang; print(sglang.__version__)")
    generated_tokens_counter = "sglang:generation_tokens_total"  # summed over its is_streaming series
    # "maximum allowed length (N tokens)"; 0.5.23's tokenizer: "longer than the model's context length (N tokens)"
    context_limit = re.compile(r"(?:maximum allowed length|longer than the model's context length) \((\d+) tokens\)")
    reasoning_parser_arg = "reasoning_parser"
    # mem_fraction_static is sized per GPU at start-up when unset; 0.88 is ServerArgs' fallback
    gpu_memory_share = ("mem_fraction_static", 0.88)
    stream_interval_arg = "stream_interval"
    # The attention and sampling backends and the project's sgl_kernel stand-in (CPU) say how it ran.
    setup_facts = ("attention_backend", "sampling_backend", "sgl_kernel")
    # TP rank 0 logs its own GPU's KV; cell_size is scaled by 1 + draft layers / KV layers (the MTP head
    # shares the pool); the sliding-window pool is sized apart but logged over one K/V size with the rest.
    kv_accounting = KvAccounting(per_rank=True, pool_holds_draft=True, pool_holds_state=False, log_mixes_window=True)

    def tp_size(self, server_args: dict) -> int:
        return int(server_args.get("tp_size") or 1)

    def installed(self, env_name: str, python: Path, run) -> dict:
        return python_engine_installed("sglang", python, run)

    def self_report(self, client: httpx.Client, base_url: str) -> dict:
        """/server_info (older servers: /get_server_info): the resolved server args, flattened, plus
        `version`. `quantization: null` means no quantization flag, not an unquantized model."""
        info = get_json(client, base_url + "/server_info") or get_json(client, base_url + "/get_server_info")
        ctx, tp, quant = info.get("context_length"), info.get("tp_size"), info.get("quantization")
        return {"engine_version": self.parse_version(info) if info else "unknown",
                "context_len": ctx if isinstance(ctx, int) else None, "tp": tp if isinstance(tp, int) else None,
                "quant": quant if isinstance(quant, str) else "unknown"}

    def native_command(self, binary: str) -> list[str]:
        return [binary, "-m", "sglang.launch_server"]

    def native_env(self, launch: Launch, threads: int | None) -> dict[str, str]:
        """On CPU (--device cpu): SGLang's CPU engine, and stackbench's import-only sgl_kernel stand-in ahead
        of PyPI's CUDA-only sgl_kernel (provision/sglang_cpu_ops says why)."""
        if launch.server_args.get("device") != "cpu":
            return {}
        # Without SGLANG_USE_CPU_ENGINE rotary embedding imports vLLM's CUDA ops.
        return {"SGLANG_USE_CPU_ENGINE": "1", "PYTHONPATH": str(CPU_OPS_STAND_IN)}

    def engine_flags(self, launch: Launch, host: str, port: int | str, threads: int | None) -> list[str]:
        if launch.server_args.get("hicache_storage_backend"):  # HiCache's storage tier (docs.sglang.io "HiCache")
            raise CacheOutlivesLaunch("hicache_storage_backend")
        own = {"model_path": launch.model.path, "served_model_name": launch.model.name, "host": host, "port": port,
               "context_length": launch.context_len, "enable_metrics": True}
        spec = {}
        if launch.speculates:
            spec["speculative_algorithm"] = launch.spec_engine_type or ALGORITHMS[launch.spec_method]
            if launch.draft_model is not None:
                spec["speculative_draft_model_path"] = launch.draft_model.path
            if launch.spec_method == "dflash":
                spec["speculative_num_draft_tokens"] = launch.spec_tokens
            elif launch.spec_tokens:
                spec["speculative_num_steps"] = launch.spec_tokens
            spec.update({f"speculative_{k}": v for k, v in launch.spec_extra.items()})
        return render_flags(own, launch.server_args, spec)

    def parallel_args(self, tp: int, slots: int) -> dict:
        return {**({"tp_size": tp} if tp > 1 else {}), "max_running_requests": slots}

    def concurrent_slots(self, launch: Launch) -> Slots | None:
        return slots_from(launch, "max_running_requests")

    def request_extras(self, launch: Launch, output_tokens: int, reuse_prefix: bool = True) -> dict:
        extras = {} if output_tokens is None else {"ignore_eos": True, "min_tokens": output_tokens}
        if launch.speculates:
            extras["return_spec_tokens_details"] = True
        return extras

    def parse_log(self, text: str) -> ServerFacts:
        facts = ServerFacts()
        pool = KV_POOL.search(text)
        if pool:
            facts.kv_pool_tokens = int(pool["tokens"])
            gb = float(pool["kv"]) if pool["kv"] else float(pool["k"]) + float(pool["v"])
            facts.kv_cache_mib = gb * GIB_IN_MIB
            facts.rounded.add("kv_cache_mib")  # 0.18 GB for a 180.02 MiB pool: /metrics has it unrounded
            if pool["dtype"]:
                facts.kv_dtype = pool["dtype"].removeprefix("torch.")
        total = MAX_TOTAL.search(text)
        if total:
            # The scheduler's figure is canonical; it wins over the pool line.
            facts.kv_pool_tokens = int(total["tokens"])
            if total["running"]:
                facts.slots = int(total["running"])
            if total["ctx"]:
                facts.n_ctx = int(total["ctx"])
        end = POOL_END.search(text)
        if end:
            facts.extra[M.mem_free_after_pool_gb] = float(end["gb"])
        mamba = MAMBA.search(text)
        if mamba:
            facts.extra[M.mamba_cache_slots] = int(mamba["slots"])
            facts.extra[M.mamba_state_gb] = float(mamba["conv"]) + float(mamba["ssm"])
        capped = CAPPED.search(text)
        if capped:
            facts.extra[M.max_running_requests_capped] = int(capped["n"])
        args = SERVER_ARGS.search(text)
        for name in ("device", "attention_backend", "sampling_backend") if args else ():
            value = re.search(SERVER_ARG.format(name), args[0])
            if value:
                facts.extra[name] = value["value"]
        if "device" in facts.extra:
            facts.backend = facts.extra["device"].upper()
        weights = WEIGHTS.search(text)
        if weights and facts.backend == "CPU":
            # On CPU "mem usage" is the drop in the host's available memory across the load, which every
            # other process on the host moves (0.16 to 0.30 GB for the same 135M-parameter model here).
            facts.extra["model_mib_not_reported"] = "SGLang on CPU measures weights as the drop in host available memory"
        elif weights:
            facts.model_mib = float(weights["gb"]) * GIB_IN_MIB
        stand_in = KERNEL_STAND_IN.search(text)
        if stand_in:
            facts.extra["sgl_kernel"] = stand_in["what"]
        return facts

    def facts_from_metrics(self, metrics_text: str) -> ServerFacts:
        """The scheduler's constants (observability/metrics_collector.py, emitted once at start-up): pool
        size, context length and the KV pool's GiB, unrounded where the log prints 2 decimals (0.18 GB for
        a 180.02 MiB pool). The weights gauge is the log's "mem usage", so it is left to parse_log."""
        samples = prometheus.parse(metrics_text)
        facts = ServerFacts()
        tokens, context, kv_cache = (prometheus.value(samples, f"sglang:{name}")
                                     for name in ("max_total_num_tokens", "context_len", "kv_cache_memory_usage_gb"))
        facts.kv_pool_tokens = int(tokens) if tokens is not None else None
        facts.n_ctx = int(context) if context is not None else None
        facts.kv_cache_mib = kv_cache * GIB_IN_MIB if kv_cache is not None else None
        return facts

    def spec_counters(self, metrics_text: str) -> SpecCounters | None:
        """Acceptance from counters, never from the 40-step sglang:spec_accept_length gauge.

        The tokenizer adds a finished request's completion tokens, verify steps and 1 to
        sglang:generation_tokens_total, spec_verify_calls_total and num_requests_total together. Each
        request's first token comes from prefill and each verify step emits its accepted drafts plus one
        bonus token, so accepted = generated - requests - verify steps: 1 + accepted / verify steps is
        vLLM's and llama.cpp's acceptance length (ACCEPT_LEN_BASIS). The sum is linear in the counters,
        so its delta over a cell is the cell's own.
        """
        samples = prometheus.parse(metrics_text)
        verify = prometheus.value(samples, "sglang:spec_verify_calls_total")
        if verify is None:
            return None
        generated = prometheus.value(samples, "sglang:generation_tokens_total") or 0.0
        requests = prometheus.value(samples, "sglang:num_requests_total") or 0.0
        return SpecCounters(drafts=verify, accepted=generated - requests - verify)

    # Prompt log-probabilities (the divergence pass): the native /generate with return_logprob,
    # logprob_start_len 0 and top_logprobs_num k (python/sglang/srt/managers/io_struct.py GenerateReqInput).
    # meta_info.input_token_logprobs holds per prompt token i (logprob, id, text), the first logprob None;
    # meta_info.input_top_logprobs per i the top-k as (logprob, id, text), None for the first.
    prompt_logprobs_path = "/generate"

    def prompt_logprobs_body(self, model: str, token_ids: list[int], top_k: int) -> dict:
        return {"input_ids": token_ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
                "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": top_k}

    def prompt_positions(self, reply: dict, token_ids: list[int], top_k: int) -> list[Position]:
        meta = (reply[0] if isinstance(reply, list) else reply)["meta_info"]
        actual, tops = meta["input_token_logprobs"], meta["input_top_logprobs"]
        if len(actual) != len(token_ids) or len(tops) != len(token_ids):
            raise ValueError(f"SGLang input logprobs: {len(actual)} entries for a {len(token_ids)}-token prompt")
        positions = []
        for token, (logprob, token_id, *_), top in zip(token_ids[1:], actual[1:], tops[1:]):
            if token_id != token:
                raise ValueError(f"SGLang input logprobs: token {token_id} where the prompt has {token}")
            ranked = sorted(((int(t[1]), t[0]) for t in top[:top_k]), key=lambda t: -t[1])
            positions.append(Position(token, logprob, tuple(ranked)))
        return positions

    def server_timings(self, final_chunk: dict) -> dict:
        """SGLang's per-request speculative figures (sglext.spec_tokens_details), as SGLang defines them
        (server_spec_accept_length = completion tokens / verify steps), plus the same request's
        acceptance length on vLLM's basis, 1 + accepted / verify steps = (completion tokens - 1) / verify steps."""
        details = (final_chunk.get("sglext") or {}).get("spec_tokens_details")
        if isinstance(details, list):
            details = details[0] if details else None
        if not details:
            return {}
        keep = ("spec_accept_length", "spec_accept_rate", "spec_verify_ct")
        timings = {f"server_{k}": details[k] for k in keep if k in details}
        completion = (final_chunk.get("usage") or {}).get("completion_tokens")
        if completion and details.get("spec_verify_ct"):
            timings["server_spec_accept_len_vllm_basis"] = (completion - 1) / details["spec_verify_ct"]
        # The request's drafted and accepted tokens, where SGLang counts them (spec_num_proposed_drafts,
        # spec_num_correct_drafts); spec_verify_ct alone gives accept length, not a share of drafts.
        if "spec_num_proposed_drafts" in details and "spec_num_correct_drafts" in details:
            timings[SERVER_SPEC_DRAFTED] = details["spec_num_proposed_drafts"]
            timings[SERVER_SPEC_ACCEPTED] = details["spec_num_correct_drafts"]
        return timings
