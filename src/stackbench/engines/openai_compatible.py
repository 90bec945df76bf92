"""Any OpenAI-compatible server as an engine (stack `openai-compatible`): a server its owner started (Ollama, TGI,
LMDeploy, TabbyAPI, trtllm-serve, or llama-server, vLLM and SGLang themselves), reached in external mode only.

It measures what the OpenAI chat API gives every client: TTFT and decode from the streamed chunks, usage's token
counts (stream_options.include_usage), the reply. Readiness is GET /v1/models (OpenAI's models.list, which every such
server has); there is no tokenize route (prompts are sized from usage: measure/calibrate.py), no server timings and
no fixed output length (max_tokens only: `ignore_eos` and `min_tokens` are engines' extensions). Where the server's
/metrics is Prometheus text of an engine this package knows (vLLM `vllm:`, SGLang `sglang:`, llama.cpp `llamacpp:`),
that engine's own parsers read its speculative counters and pool facts, and the rows' engine_setup says which were
read; what the endpoint does not report (KV pool, acceptance, version) reads results.basis.NOT_REPORTED.

The base class's defaults (engines/base.py Adapter) describe such a server already: /v1/models for readiness,
no log, no server timings, no fixed-length fields, nothing to build or start (engine_flags refuses a native or
image launch at plan). What is here is what differs: no tokenize route, how it reports on itself, its /metrics.
"""

from __future__ import annotations

import httpx

from stackbench.engines import prometheus
from stackbench.engines.base import ADAPTERS, Adapter, ServerFacts, SpecCounters, get_json, register
from stackbench.results.basis import NOT_REPORTED
from stackbench.results.metrics import M

MODELS_PATH = "/v1/models"  # OpenAI's models.list: {"object": "list", "data": [{"id": ...}, ...]}

# The engines whose /metrics families an endpoint may expose, by their metric-name prefix (the registry's key): their
# own adapters parse them (spec_counters, facts_from_metrics, generated_tokens_counter), so a figure means here what
# it means there.
FAMILIES = ("vllm", "sglang", "llamacpp")


def families_in(samples: prometheus.Samples) -> list[str]:
    """The known families (FAMILIES) that have a sample in a scrape, in FAMILIES' order."""
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
        adapter = ADAPTERS[family]
        facts.fill_from(adapter.facts_from_metrics(metrics_text))
        if adapter.spec_counters(metrics_text) is not None:
            speculates = True
            read.append(f"{family}:spec_decode_* read" if family != "sglang" else "sglang:spec_verify_calls_total read")
        if adapter.generated_tokens_counter and prometheus.value(samples, adapter.generated_tokens_counter) is not None:
            read.append(f"{adapter.generated_tokens_counter} present")
    pool = [f"KV pool {facts.kv_pool_tokens} tokens read"] if facts.kv_pool_tokens is not None else []
    said = "; ".join(read + pool) or "no counter this engine reads"
    return f"metrics: {', '.join(f'{family}:*' for family in found)} exposed ({said})", facts, speculates


@register
class OpenAICompatibleAdapter(Adapter):
    engine = "openai-compatible"
    engine_label = "OpenAI-compatible endpoint"
    accept_len_basis = ("1 + accepted / drafts from the speculative counters of the engine family the endpoint's "
                        "/metrics exposes, on that engine's basis (the rows' engine_setup names the family)")
    tokenize_path = None  # not an OpenAI route: measure/calibrate.py sizes prompts from usage.prompt_tokens

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

    def parse_version(self, reply: dict) -> str:
        return NOT_REPORTED

    def facts_from_metrics(self, metrics_text: str) -> ServerFacts:
        """The pool facts of whichever known family the scrape holds (metrics_read); none where it holds none."""
        return metrics_read(metrics_text)[1]

    def spec_counters(self, metrics_text: str) -> SpecCounters | None:
        """The speculative counters of the first known family that exports them; None where none does. Raises
        prometheus.MetricsFormatError on text that is not the exposition format, as every engine's does."""
        samples = prometheus.parse(metrics_text)
        for family in families_in(samples):
            counters = ADAPTERS[family].spec_counters(metrics_text)
            if counters is not None:
                return counters
        return None
