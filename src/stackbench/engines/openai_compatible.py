"""Any OpenAI-compatible server as an engine (stack `openai-compatible`): a server its owner started (Ollama, TGI,
LMDeploy, TabbyAPI, trtllm-serve, or llama-server, vLLM and SGLang themselves), reached in external mode only.

It measures what the OpenAI chat API gives every client: TTFT and decode from the streamed chunks, usage's token
counts (stream_options.include_usage), the reply. Readiness is GET /v1/models (OpenAI's models.list, which every such
server has); there is no tokenize route (prompts are sized from usage: measure/calibrate.py), no server timings and
no fixed output length (max_tokens only: `ignore_eos` and `min_tokens` are engines' extensions). Where the server's
/metrics is Prometheus text of an engine this package knows (vLLM `vllm:`, SGLang `sglang:`, llama.cpp `llamacpp:`),
that engine's own parsers read its speculative counters and pool facts, and the rows' engine_setup says which were
read; what the endpoint does not report (KV pool, acceptance, version) reads results.basis.NOT_REPORTED.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from stackbench.config.model import Launch
from stackbench.engines import prometheus
from stackbench.engines.base import KvAccounting, ServerFacts, Slots, SpecCounters, get_json
from stackbench.engines.llamacpp import LlamaCppAdapter
from stackbench.engines.sglang import SglangAdapter
from stackbench.engines.vllm import VllmAdapter
from stackbench.results.basis import NOT_REPORTED
from stackbench.results.metrics import M

MODELS_PATH = "/v1/models"  # OpenAI's models.list: {"object": "list", "data": [{"id": ...}, ...]}

# The engines whose /metrics families an endpoint may expose, by their metric-name prefix: their own adapters parse
# them (spec_counters, facts_from_metrics, generated_tokens_counter), so a figure means here what it means there.
FAMILIES = {adapter.engine: adapter for adapter in (VllmAdapter(), SglangAdapter(), LlamaCppAdapter())}


def families_in(samples: prometheus.Samples) -> list[str]:
    """The known families (FAMILIES' prefixes) that have a sample in a scrape, in FAMILIES' order."""
    prefixes = {name.split(":", 1)[0] for name, _ in samples if ":" in name}
    return [family for family in FAMILIES if family in prefixes]


def metrics_read(metrics_text: str | None) -> tuple[str, ServerFacts, bool]:
    """What one /metrics scrape lets this engine read: the rows' line saying which counter families were read
    (or that none were), the pool facts their engines' parsers found, and whether speculative counters are there.
    None or text that is not the exposition format: nothing read."""
    if metrics_text is None:
        return "metrics: no /metrics route", ServerFacts(), False
    try:
        samples = prometheus.parse(metrics_text)
    except prometheus.MetricsFormatError:
        return "metrics: /metrics is not Prometheus text, none read", ServerFacts(), False
    found = families_in(samples)
    if not found:
        return "metrics: no vllm:, sglang: or llamacpp: counters at /metrics, none read", ServerFacts(), False
    facts, read, speculates = ServerFacts(), [], False
    for family in found:
        adapter = FAMILIES[family]
        facts.fill_from(adapter.facts_from_metrics(metrics_text))
        if adapter.spec_counters(metrics_text) is not None:
            speculates = True
            read.append(f"{family}:spec_decode_* read" if family != "sglang" else "sglang:spec_verify_calls_total read")
        if prometheus.value(samples, adapter.generated_tokens_counter) is not None:
            read.append(f"{adapter.generated_tokens_counter} present")
    pool = [f"KV pool {facts.kv_pool_tokens} tokens read"] if facts.kv_pool_tokens is not None else []
    said = "; ".join(read + pool) or "no counter this engine reads"
    return f"metrics: {', '.join(f'{family}:*' for family in found)} exposed ({said})", facts, speculates


class OpenAICompatibleAdapter:
    """Every member the run loop calls, written out against today's Adapter Protocol (engines/base.py); those an
    external launch never reaches (build, native start, a scoring tool) say so when called."""

    engine = "openai-compatible"
    engine_label = "OpenAI-compatible endpoint"
    health_path = MODELS_PATH
    stop_grace_s = 0.0  # never started here, never stopped
    version_path = None  # the OpenAI API names no version route
    accept_len_basis = ("1 + accepted / drafts from the speculative counters of the engine family the endpoint's "
                        "/metrics exposes, on that engine's basis (the rows' engine_setup names the family)")
    image_entrypoint: tuple[str, ...] = ()
    image_version_command: tuple[str, ...] = ()
    metrics_path = "/metrics"
    generated_tokens_counter = ""  # which family's counter is unknown before the scrape: none is read as the rate
    # OpenAI's own wording for an over-long prompt (vLLM copies it): "This model's maximum context length is N tokens."
    context_limit = re.compile(r"maximum context length is (\d+) tokens")
    reasoning_parser_arg = None  # the owner set the server up: nothing here turns a parser on
    stream_interval_arg = None
    setup_facts = ("metrics",)
    setup_env: tuple[str, ...] = ()
    kv_accounting = KvAccounting(per_rank=False, pool_holds_draft=False, pool_holds_state=False, log_mixes_window=False)
    foreign_args: dict[str, str] = {}
    gpu_memory_share = None
    kv_dtype_arg, default_kv_dtype = "", NOT_REPORTED
    tokenize_path = None  # not an OpenAI route: measure/calibrate.py sizes prompts from usage.prompt_tokens
    tools: dict[str, str] = {}
    scores_prompts = "none"  # no prompt log-probabilities in the OpenAI chat API: the divergence pass says so
    prompt_logprobs_path = None
    # Only external launches: nothing here builds or starts such a server (plan/expand.py refuses the others).
    launch_modes = ("external",)

    # -- what the run loop asks of a running endpoint ------------------------------------------------
    def self_report(self, client: httpx.Client, base_url: str) -> dict:
        """/v1/models (the served models; vLLM adds max_model_len) and /metrics where it is Prometheus text: the
        version is NOT_REPORTED, the context the served model's max_model_len where given; `engine_setup` says
        which models are served and which counter families were read, `not_reported` the launch's figures
        this endpoint cannot give."""
        models = [m for m in get_json(client, base_url + MODELS_PATH).get("data") or [] if isinstance(m, dict)]
        max_len = models[0].get("max_model_len") if models else None
        text = None
        try:
            reply = client.get(base_url + self.metrics_path)
            text = reply.text if reply.status_code == 200 else None
        except httpx.HTTPError:
            pass
        line, facts, speculates = metrics_read(text)
        served = ", ".join(str(m.get("id")) for m in models) or "none listed"
        return {"engine_version": NOT_REPORTED, "context_len": max_len if isinstance(max_len, int) else None,
                "engine_setup": f"served models: {served}; {line}",
                "not_reported": tuple(m for m, known in ((M.kv_pool_tokens, facts.kv_pool_tokens is not None),
                                                         (M.accept_len, speculates)) if not known)}

    def parse_log(self, text: str) -> ServerFacts:
        return ServerFacts()  # the log is on the machine that started the server

    def parse_version(self, reply: dict) -> str:
        return NOT_REPORTED

    def version_from_output(self, text: str) -> str:
        return NOT_REPORTED

    def facts_from_metrics(self, metrics_text: str) -> ServerFacts:
        """The pool facts of whichever known family the scrape holds (metrics_read); none where it holds none."""
        return metrics_read(metrics_text)[1]

    def spec_counters(self, metrics_text: str) -> SpecCounters | None:
        """The speculative counters of the first known family that exports them; None where none does. Raises
        prometheus.MetricsFormatError on text that is not the exposition format, as every engine's does."""
        samples = prometheus.parse(metrics_text)
        for family in families_in(samples):
            counters = FAMILIES[family].spec_counters(metrics_text)
            if counters is not None:
                return counters
        return None

    def server_timings(self, final_chunk: dict) -> dict:
        return {}  # the OpenAI chunk carries no server timings

    def request_extras(self, launch: Launch, output_tokens: int | None, reuse_prefix: bool = True) -> dict:
        return {}  # max_tokens and stream_options.include_usage are in every body (measure/client.py)

    def request_context(self, launch: Launch) -> int:
        return launch.context_len

    def tokenize_body(self, model: str, text: str) -> dict:
        return {"model": model, "prompt": text}

    def token_count(self, reply: dict) -> int | None:
        return None  # no tokenize route of its own: the calibration requests size the prompts

    def token_ids(self, reply: dict) -> list[int] | None:
        return None

    # -- the plan ------------------------------------------------------------------------------------
    def tp_size(self, server_args: dict) -> int:
        return 1  # not ours to set; the server reports none

    def default_env(self, gpu: dict) -> str:
        return self.engine  # never built: an external launch needs no environment

    def engine_flags(self, launch: Launch, host: str, port: int | str, threads: int | None) -> list[str]:
        return []  # nothing is started

    def concurrent_slots(self, launch: Launch) -> Slots | None:
        return None  # the owner's server decides

    def parallel_args(self, tp: int, slots: int) -> dict:
        return {}

    # -- what only a launch started here would need ---------------------------------------------------
    def _not_here(self, what: str):
        raise NotImplementedError(f"{self.engine}: {what}; the stack measures a server its owner started "
                                  "(launch: {mode: external, url: ...})")

    def requirements_name(self, env_name: str) -> str:
        self._not_here("no environment to build")

    def build_settings(self, env_name: str, requirements: Path) -> dict:
        self._not_here("no environment to build")

    def build_inputs(self, env_name: str) -> dict[str, str]:
        return {}

    def build_expected(self, env_name: str) -> str:
        return "nothing to build: an external endpoint"

    def remove_after_install(self, env_name: str) -> tuple[str, ...]:
        return ()

    def installed(self, env_name: str, python: Path, run) -> dict:
        self._not_here("no environment to build")

    def native_command(self, binary: str) -> list[str]:
        self._not_here("no native server to start")

    def native_env(self, launch: Launch, threads: int | None) -> dict[str, str]:
        return {}

    def prompt_logprobs_body(self, model, token_ids, top_k):
        self._not_here("no prompt log-probabilities in the OpenAI chat API")

    def prompt_positions(self, reply, token_ids, top_k):
        self._not_here("no prompt log-probabilities in the OpenAI chat API")

    def prompt_scorer(self, spec, top_k: int) -> str:
        return f"{self.engine_label}: no prompt scoring"

    def score_with_tool(self, engine, model_path, text_file, scoring, threads, base, flags=()):
        self._not_here("no scoring tool")

    def scoring_flags(self, launch: Launch, reference: bool = False) -> list[str]:
        return []

    def exact_kld(self, reference_base, candidate_base):
        self._not_here("no scoring tool")
