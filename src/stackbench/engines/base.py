"""The small interface every engine adapter implements. Every engine difference lives behind it; the
server lifecycle, the load client, storage and the report are the same for all stacks."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from stackbench.config.model import Launch


@dataclass
class SpecCounters:
    """Cumulative speculative-decoding counters read from one /metrics scrape."""

    drafts: float = 0.0  # verification steps
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_per_pos: dict[int, float] = field(default_factory=dict)

    def minus(self, earlier: SpecCounters) -> SpecCounters:
        positions = set(self.accepted_per_pos) | set(earlier.accepted_per_pos)
        return SpecCounters(
            drafts=self.drafts - earlier.drafts,
            draft_tokens=self.draft_tokens - earlier.draft_tokens,
            accepted=self.accepted - earlier.accepted,
            accepted_per_pos={p: self.accepted_per_pos.get(p, 0.0) - earlier.accepted_per_pos.get(p, 0.0) for p in positions},
        )


@dataclass
class ServerFacts:
    """What the engine says about itself at start-up (log lines, /metrics): pool sizes, memory, context.

    Every size is the engine's own figure converted to MiB (vLLM and SGLang print GiB); None where the
    engine did not say, never an estimate.
    """

    kv_pool_tokens: int | None = None
    kv_cache_mib: float | None = None
    kv_dtype: str | None = None
    model_mib: float | None = None  # weights as loaded (engine's buffers / "Model loading took")
    weights_file_mib: float | None = None  # llama.cpp `print_info: file size`: the bytes one decode step reads
    weights_bpw: float | None = None  # llama.cpp `print_info: file size = ... (x BPW)`
    backend: str | None = None  # where the weights live: "CPU", "CUDA0", "CUDA0+CUDA1", ...
    offloaded_layers: int | None = None  # llama.cpp `offloaded N/M layers to GPU`: N
    model_layers: int | None = None  # ... and M
    n_ctx: int | None = None
    slots: int | None = None
    extra: dict = field(default_factory=dict)
    # Facts this source printed rounded (SGLang's log gives GB to 2 decimals): another source's figure for
    # them wins in fill_from.
    rounded: set[str] = field(default_factory=set)

    def fill_from(self, other: ServerFacts) -> None:
        """Take every fact `other` knows and this one does not (the log wins over /metrics), and `other`'s
        figure for a fact this one only has rounded."""
        for name in self.__dataclass_fields__:
            if name == "extra":
                self.extra = {**other.extra, **self.extra}
            elif name == "rounded":
                continue
            elif getattr(self, name) is None or (name in self.rounded and getattr(other, name) is not None):
                setattr(self, name, getattr(other, name))
                self.rounded.discard(name)


def counters_from_metrics(metrics_text: str, prefix: str) -> SpecCounters | None:
    """The <prefix>:spec_decode_*_total counters that llama.cpp and vLLM both export (positions 0-based)."""
    from stackbench.engines import prometheus

    samples = prometheus.parse(metrics_text)
    drafts = prometheus.value(samples, f"{prefix}:spec_decode_num_drafts_total")
    if drafts is None:
        return None  # no speculation on this server: the counters are not exported
    per_pos = prometheus.by_label(samples, f"{prefix}:spec_decode_num_accepted_tokens_per_pos_total", "position")
    return SpecCounters(
        drafts=drafts,
        draft_tokens=prometheus.value(samples, f"{prefix}:spec_decode_num_draft_tokens_total") or 0.0,
        accepted=prometheus.value(samples, f"{prefix}:spec_decode_num_accepted_tokens_total") or 0.0,
        accepted_per_pos={int(p): v for p, v in per_pos.items()},
    )


def spec_decode_lines(prefix: str, labels: str, counts: "ServedCounts") -> list[str]:
    """The <prefix>:spec_decode_*_total counters as llama.cpp and vLLM export them (what
    counters_from_metrics reads), for a stand-in that speaks their format."""
    sep = "," if labels else ""
    lines = []
    for name, value in (("num_drafts", counts.drafts), ("num_draft_tokens", counts.draft_tokens),
                        ("num_accepted_tokens", counts.accepted)):
        lines += [f"# TYPE {prefix}:spec_decode_{name}_total counter", f"{prefix}:spec_decode_{name}_total{{{labels}}} {value}.0"]
    lines.append(f"# TYPE {prefix}:spec_decode_num_accepted_tokens_per_pos_total counter")
    return [*lines, *(f'{prefix}:spec_decode_num_accepted_tokens_per_pos_total{{{labels}{sep}position="{p}"}} {n}.0'
                      for p, n in sorted(counts.per_pos.items()))]


@dataclass
class ServedCounts:
    """What a server has served so far, as a stand-in engine counts it: the figures each engine's /metrics
    exposes under its own names (its stand-in formats' metrics_exposition writes them, rehearsal/formats.py)."""

    requests: int = 0
    generated: int = 0
    prompt: int = 0
    cached: int = 0
    running: int = 0
    drafts: int = 0  # verification steps
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RequestTrace:
    """One streamed request as a stand-in served it: what an engine's final chunk reports about it (its stand-in
    formats' final_chunk_fields, rehearsal/formats.py)."""

    prompt_tokens: int
    cached: int
    prefill_ms: float
    decode_ms: float
    emitted: int
    steps: int  # verification steps (decode chunks)
    proposed: int  # draft tokens proposed over the steps
    correct: int  # of those, accepted


@dataclass(frozen=True)
class KvAccounting:
    """How the engine's logged KV pool relates to the model: what the KV-pool audit needs to know about
    the engine, carried in every row of the engine's launches (analysis reads rows, never adapters)."""

    per_rank: bool  # the logged KV and weight memory is one tensor-parallel rank's, not the whole model's
    pool_holds_draft: bool  # an MTP head's KV shares the pool (scaling its per-token size)
    pool_holds_state: bool  # a hybrid model's recurrent state shares the pool (bytes per token not comparable)
    log_mixes_window: bool  # the logged KV bytes cover sliding-window and full layers over one token count


def kv_accounting_columns(adapter: "Adapter") -> dict:
    """The engine's KvAccounting as the results columns that carry it (results/store.py ENGINE_FACTS)."""
    accounting = adapter.kv_accounting
    return {"logged_per_rank": accounting.per_rank, "kv_pool_holds_draft": accounting.pool_holds_draft,
            "kv_pool_holds_state": accounting.pool_holds_state, "kv_log_mixes_window": accounting.log_mixes_window}


@dataclass(frozen=True)
class Slots:
    """How many requests a server runs at once, and the flag that says so."""

    count: int
    flag: str


def streams_token_per_chunk(adapter: "Adapter", launch: Launch) -> bool:
    """Whether the launch streams one token per chunk, so the client's chunk count is a token count: no
    speculation (a verify step streams every token it accepted in one chunk) and a stream interval of 1
    (SGLang's and vLLM's --stream-interval, 1 by default), read from the launch's command."""
    interval = launch.server_args.get(adapter.stream_interval_arg) if adapter.stream_interval_arg else None
    return not launch.speculates and int(interval or 1) == 1


def slots_from(launch: Launch, key: str) -> Slots | None:
    """The server argument `key` as Slots; None when the run leaves it to the engine's default."""
    value = launch.server_args.get(key)
    return None if value is None else Slots(int(value), flag_name(key))


class Adapter:
    """Everything the run loop asks of an engine, with defaults that describe a plain OpenAI-compatible server: it
    streams /v1/chat/completions, lists its model at /v1/models and says nothing about itself. An engine subclasses
    it, registers itself (@register) and overrides only where it differs, by capability group: serve and parse,
    build, scoring, speculative counters, the rehearsal's formats. tests/unit/engines/test_adapter_interface.py
    checks that an override keeps the default's signature and that no engine restates a default."""

    # -- serve and parse -------------------------------------------------------------------------------
    engine: str  # the results contract's stack name (the registry's key)
    engine_label: str  # the engine's own name for the basis column
    health_path = "/v1/models"  # GET answers 200 once the server takes requests (every OpenAI-compatible server has it)
    stop_grace_s = 10.0  # after SIGTERM to the server's process group, how long its shutdown may take before SIGKILL
    version_path: str | None = None  # GET answers the engine version as JSON; None: the environment knows it, or nothing does
    image_entrypoint: tuple[str, ...] = ()  # what the engine's official image runs instead of the native binary
    image_version_command: tuple[str, ...] = ()  # asks the engine inside its image for its own version
    metrics_path = "/metrics"  # GET answers the Prometheus exposition (speculative counters, pool gauges), where served
    generated_tokens_counter: str | None = None  # its /metrics counter of output tokens generated (the server's own rate)
    # The engine's HTTP 400 for an over-long prompt; group 1 is the limit it states. OpenAI's own wording ("This
    # model's maximum context length is N tokens"), which vLLM keeps.
    context_limit = re.compile(r"maximum context length is (\d+) tokens")
    reasoning_parser_arg: str | None = None  # the server argument that streams thinking apart; None: not a flag here
    stream_interval_arg: str | None = None  # the server argument streaming a chunk every N tokens; None: one token a chunk
    setup_facts: tuple[str, ...] = ()  # ServerFacts.extra keys that describe how the server was set up (rows' note)
    setup_env: tuple[str, ...] = ()  # native_env variables that describe how it was set up (rows' engine_setup)
    kv_accounting = KvAccounting(per_rank=False, pool_holds_draft=False, pool_holds_state=False, log_mixes_window=False)
    # server_args keys another engine takes that this one spells its own way -> this engine's key: given as
    # they are, they would become a flag the engine rejects, so the plan refuses them (plan/expand.py).
    foreign_args: dict[str, str] = {}
    # The server argument for the share of GPU memory taken by weights + KV pool, and the engine's default
    # for it; None: the KV cache is sized from the context instead. With kv_dtype_arg and default_kv_dtype,
    # what a rehearsal's stand-in sizes its start-up lines from (stackbench.rehearsal.launcher).
    gpu_memory_share: tuple[str, float] | None = None
    kv_dtype_arg = "kv_cache_dtype"
    default_kv_dtype = "bfloat16"
    # POST: the engine's own tokenizer on plain text (no chat template), to size prompts; vLLM's and SGLang's
    # OpenAI-style route. A server without it answers 404 and is sized by calibration requests (measure/calibrate.py).
    tokenize_path = "/tokenize"

    def tokenize_body(self, model: str, text: str) -> dict:
        """The JSON body asking `tokenize_path` for the tokens of `text` (as served model `model`)."""
        return prompt_tokenize_body(model, text)

    def token_count(self, reply: dict) -> int | None:
        """How many tokens the tokenize reply holds; None when the reply is not the engine's format."""
        return reply_count(reply)

    def token_ids(self, reply: dict) -> list[int] | None:
        """The token ids of a tokenize reply; None when it holds none."""
        tokens = reply.get("tokens") if isinstance(reply, dict) else None
        return tokens if isinstance(tokens, list) and all(isinstance(t, int) for t in tokens) else None

    def request_context(self, launch: Launch) -> int:
        """The longest prompt plus output one request may hold as launched (the context, or its share per
        slot where slots do not share one pool)."""
        return launch.context_len  # one KV pool shared by every running request

    def tp_size(self, server_args: dict) -> int:
        """The tensor-parallel size these server arguments ask for (1 when unset)."""
        return 1

    def native_command(self, binary: str) -> list[str]:
        """What starts the engine natively: the server binary, or its Python with `-m <module>`."""
        return [binary]

    def native_env(self, launch: Launch, threads: int | None) -> dict[str, str]:
        """Environment variables the engine itself needs for this native launch (a backend switch, a library
        to preload), on top of the node's and run's `env`; they reach no other engine's server and no
        fingerprint, since the launch's own fields decide them."""
        return {}

    def engine_flags(self, launch: Launch, host: str, port: int | str, threads: int | None) -> list[str]:
        """The engine's own arguments for this launch, after the native command or the image's entrypoint
        (`port` may be the placeholder `<port>` when a command is only printed)."""
        raise NotLaunchable(f"{self.engine_label} is started by its owner: measure it with launch: {{mode: external, url: ...}}")

    def concurrent_slots(self, launch: Launch) -> Slots | None:
        """Requests the server runs at once as launched; None when the engine's default decides."""
        return None

    def parallel_args(self, tp: int, slots: int) -> dict:
        """The server arguments that run it on `tp` GPUs with `slots` requests at once (what init-node writes)."""
        return {}

    def request_extras(self, launch: Launch, output_tokens: int | None, reuse_prefix: bool = True) -> dict:
        """Engine-specific request body fields (fixed output length, stream_options, ...); `output_tokens`
        None: no fixed length, the answer ends where the model ends it (a tool call). `reuse_prefix` False: a
        salted workload's request, which no earlier request's prefix may serve (the engine's per-request switch,
        where it has one)."""
        return {}

    def parse_log(self, text: str) -> ServerFacts:
        """What the start-up log says (KV pool, weights, context, slots); nothing where no log is read."""
        return ServerFacts()

    def parse_version(self, reply: dict) -> str:
        """The version from the JSON reply of `version_path` ("unknown" when it is not there)."""
        return str(reply.get("version", "unknown"))

    def facts_from_metrics(self, metrics_text: str) -> ServerFacts:
        """Facts the log may lack, from one /metrics scrape; raises prometheus.MetricsFormatError."""
        from stackbench.engines import prometheus

        prometheus.parse(metrics_text)  # parsing still checks the format
        return ServerFacts()

    def server_timings(self, final_chunk: dict) -> dict:
        """The engine's own per-request figures from a streamed chunk, keys prefixed `server_`; where the
        engine has them, its prompt tokens processed, prefill and decode rates as SERVER_PROMPT_PROCESSED,
        SERVER_PREFILL_TPS and SERVER_DECODE_TPS."""
        return {}

    def version_from_output(self, text: str) -> str:
        """The version from what `image_version_command` printed ("unknown" when it is not there)."""
        return last_line(text)

    def self_report(self, client: httpx.Client, base_url: str) -> dict:
        """What a running server says about itself (external mode): `engine_version`, and `context_len`,
        `tp` and `quant` where the engine reports them; a figure it does not report stays "unknown" (None
        for numbers)."""
        return {"engine_version": "unknown"}

    # -- build: its environment (provision/envs.py builds it; env names are <engine>[-<flavour>]) -----------
    tools: dict[str, str] = {}  # model-recipe tools its environments provide (models/recipes.py): tool -> environment
    # The rehearsal's budget (rehearsal/budget.py), low and high seconds, stated assumptions: each start's compile
    # and CUDA-graph capture, the native environment's build on the GPU node and what it is. None: an engine the
    # pipeline does not start, which the budget refuses to price.
    compile_s: tuple[float, float] | None = None
    build_s: tuple[float, float] | None = None
    build_what: str | None = None

    def requirements_name(self, env_name: str) -> str:
        """envs/<name>.txt that pins this environment."""
        return env_name

    def build_settings(self, env_name: str, requirements: Path) -> dict:
        """Environment variables for installing it (build flags, caches); raises ValueError on an unknown flavour."""
        return {}

    def build_inputs(self, env_name: str) -> dict[str, str]:
        """Files besides its requirements that building this environment reads (a change rebuilds it)."""
        return {}

    def build_expected(self, env_name: str) -> str:
        """How long building this environment takes here, for the console while it builds (rule engine_env)."""
        return "pip installs the pinned packages from PyPI"

    def remove_after_install(self, env_name: str) -> tuple[str, ...]:
        """Packages the install pulls in that break the engine and are removed again."""
        return ()

    def installed(self, env_name: str, python: Path, run) -> dict:
        """ready.json facts of the installed engine: `server`, `version`, `build` (and the engine's tools);
        `run(argv)` runs a command and returns its output."""
        raise NotLaunchable(f"{self.engine_label}: no environment of it is built here (external mode only)")

    def default_env(self, gpu: dict) -> str:
        """The environment a native launch runs in on a node with this `hardware.gpu` (the engine's own, or
        a build flavour for the GPU's architecture); raises ValueError naming what is missing."""
        return self.engine

    # -- scoring: how the divergence pass (measure/divergence.py) has a text scored ------------------------
    # "server": prompt log-probabilities from prompt_logprobs_path; "tool": the engine's own scoring tool on the
    # model file (score_with_tool); None: the engine scores no text.
    scores_prompts: str | None = None
    prompt_logprobs_path: str | None = None

    def prompt_logprobs_body(self, model: str, token_ids: list[int], top_k: int) -> dict:
        """The body asking prompt_logprobs_path for the top-k log-probabilities at every position of a prompt
        given as token ids (no template, no special tokens added)."""
        raise NotImplementedError(f"{self.engine_label} returns no prompt log-probabilities")

    def prompt_positions(self, reply: dict, token_ids: list[int], top_k: int) -> list:
        """results.divergence.Position per position j of the prompt (the distribution over token j + 1)."""
        raise NotImplementedError(f"{self.engine_label} returns no prompt log-probabilities")

    def prompt_scorer(self, spec, top_k: int) -> str:
        """What scored the text, for the rows' note (engine, version, route, k)."""
        return (f"{self.engine_label} {spec.engine.get('version', 'unknown')}, prompt log-probabilities at "
                f"{self.prompt_logprobs_path}, top-{top_k}")

    def score_with_tool(self, engine: dict, model_path: str, text_file: Path, scoring: dict, threads: int | None,
                        base: Path, flags: list[str] = ()) -> tuple[list[list[int]], list, str, tuple[float, float]]:
        """The tool route: (token ids per chunk, Position per scored position, what scored it, the perplexity and
        its uncertainty as the tool prints them), with `flags` (scoring_flags); the tool's full-vocabulary file is
        left at `base` for exact_kld."""
        raise NotImplementedError(f"{self.engine_label} has no scoring tool")

    def scoring_flags(self, launch: Launch, reference: bool = False) -> list[str]:
        """The tool route: the launch's settings that change the logits, as the tool's flags (the reference's:
        placement only)."""
        return []

    def exact_kld(self, reference_base: Path, candidate_base: Path) -> list[float]:
        """The tool route: per position, the full-vocabulary KL(reference || candidate) from two tool files."""
        raise NotImplementedError(f"{self.engine_label} returns no full-vocabulary distribution")

    # -- speculative counters ----------------------------------------------------------------------------
    accept_len_basis = ""  # how accept_len is put on the common basis, 1 + accepted / drafts (rows say it)

    def spec_counters(self, metrics_text: str) -> SpecCounters | None:
        """Cumulative speculative-decoding counters; None when the server does not speculate or does not say.
        Raises prometheus.MetricsFormatError on text that is not the exposition format."""
        return None

    # -- the rehearsal's formats -----------------------------------------------------------------------
    # The engine's formats as the rehearsal's stand-in writes them (rehearsal/formats.py EngineFormats); None: the
    # engine is not rehearsed.
    formats = None


class NotLaunchable(ValueError):
    """The pipeline cannot start or build this engine: its server is started by its owner (external mode)."""


ADAPTERS: dict[str, Adapter] = {}


def register(cls: type[Adapter]) -> type[Adapter]:
    """Class decorator: the engine joins the registry under its stack name (engines/__init__.py imports every
    module of the package, so a new file is all an engine needs)."""
    if cls.engine in ADAPTERS:
        raise ValueError(f"two engines named {cls.engine!r}: {type(ADAPTERS[cls.engine]).__name__} and {cls.__name__}")
    ADAPTERS[cls.engine] = cls()
    return cls


def get_json(client: httpx.Client, url: str) -> dict:
    """The JSON object at url, or {} when the server has no such endpoint or answers something else."""
    try:
        reply = client.get(url)
        body = reply.json() if reply.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


class FlagConflict(ValueError):
    """A server argument the pipeline sets itself (host, port, model, context, speculation) was also given."""

    def __init__(self, key: str):
        self.key = key
        super().__init__(f"{key}: set by the pipeline from the node and stack (model, host, port, context, "
                         "speculative settings); remove it from server_args")


class CacheOutlivesLaunch(FlagConflict):
    """A server argument that keeps prefix caches beyond the server process (a storage tier on disk or elsewhere):
    What to run's rounds send every launch the same texts (measure/workloads.py Texts), so a later launch would
    find an earlier one's prefixes cached."""

    def __init__(self, key: str):
        ValueError.__init__(self, f"{key}: a cache tier that outlives the server serves one launch's prompts to the "
                                  "next, and What to run's rounds send every launch the same texts "
                                  "(docs/what-to-run.md); remove it")
        self.key = key


def flag_name(key: str) -> str:
    """The flag a server_args key becomes: underscores become dashes."""
    return "--" + key.replace("_", "-")


def render_flags(*groups: dict) -> list[str]:
    """The one renderer of engine flags: underscores become dashes, true is a bare flag, false and null drop
    it, dicts are JSON, lists repeat the value. Each flag comes from one group: the pipeline's own (model,
    host, port, context, speculation) and the user's server_args never both set one, so no flag is passed
    twice (FlagConflict names the key; the plan checks every launch with it)."""
    import json

    merged: dict = {}
    for group in groups:
        for key, value in group.items():
            if key in merged:
                raise FlagConflict(key)
            merged[key] = value
    out: list[str] = []
    for key, value in merged.items():
        flag = flag_name(key)
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, dict):
            out += [flag, json.dumps(value, separators=(",", ":"))]
        elif isinstance(value, list):
            out += [flag, *[str(v) for v in value]]
        else:
            out += [flag, str(value)]
    return out


def prompt_tokenize_body(model: str, text: str) -> dict:
    """vLLM's and SGLang's /tokenize completion form (both name the fields alike): the served model and a
    plain prompt, special tokens off (no BOS counted, as for a passage inside a chat prompt)."""
    return {"model": model, "prompt": text, "add_special_tokens": False}


def reply_count(reply: dict) -> int | None:
    """vLLM's TokenizeResponse and SGLang's reply carry the length as `count` (an int for one prompt)."""
    count = reply.get("count")
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def stated_limit(adapter: "Adapter", message: str | None) -> int | None:
    """The token limit the engine names when it refuses an over-long request (HTTP 400), or None."""
    match = adapter.context_limit.search(message or "")
    return int(match[1]) if match else None


class PythonEngine(Adapter):
    """What the Python engines (SGLang, vLLM) do alike: one environment per engine and flavour, installed as
    PyPI wheels (the GPU and CPU flavours pin different torch builds), the version in their JSON replies under
    "version" and printed last by their image, prompts scored through their server."""

    # An API server, an engine core and a worker per TP rank, each freeing its CUDA context in turn on SIGTERM:
    # a shutdown SIGKILLed early leaves the driver to reclaim the memory later, under the next launch.
    stop_grace_s = 30.0
    # Their wheels and CUDA libraries from PyPI (several GB), once on the GPU node before the run: an assumption.
    build_s = (180.0, 900.0)
    build_what = "pip install (wheels, CUDA libraries)"
    scores_prompts = "server"

    def build_expected(self, env_name: str) -> str:
        return "pip installs the pinned wheels from PyPI: minutes, most of it downloading torch"

    def score_with_tool(self, engine, model_path, text_file, scoring, threads, base, flags=()):
        raise NotImplementedError(f"{self.engine_label} scores a text through its server ({self.prompt_logprobs_path})")

    def exact_kld(self, reference_base, candidate_base):
        raise NotImplementedError(f"{self.engine_label} returns a top-k, not the full vocabulary")


class PythonEngineFormats:
    """What the Python engines' formats share, as the rehearsal's stand-in writes them: their /tokenize reply."""

    def tokenize_reply(self, ids: list[int], context_len: int) -> dict:
        return {"tokens": ids, "count": len(ids), "max_model_len": context_len}


def python_engine_installed(distribution: str, python: Path, run) -> dict:
    """A Python engine starts as `python -m <module>`: its server binary is the environment's Python, its
    version the installed distribution's."""
    version = run([str(python), "-c", f"import importlib.metadata as m; print(m.version('{distribution}'))"])
    return {"server": str(python.absolute()), "version": version.strip().splitlines()[-1], "build": "wheels from PyPI"}


def last_line(text: str) -> str:
    """A Python engine's `print(<module>.__version__)`: the last line printed, after any import warnings."""
    return text.strip().splitlines()[-1] if text.strip() else "unknown"
