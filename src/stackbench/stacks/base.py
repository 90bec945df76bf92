"""The small interface every engine adapter implements. Every engine difference lives behind it; the
server lifecycle, the load client, storage and the report are the same for all stacks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..plan import Launch


@dataclass
class SpecCounters:
    """Cumulative speculative-decoding counters read from one /metrics scrape."""

    drafts: float = 0.0  # verification steps
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_per_pos: dict[int, float] = field(default_factory=dict)

    def minus(self, earlier: "SpecCounters") -> "SpecCounters":
        positions = set(self.accepted_per_pos) | set(earlier.accepted_per_pos)
        return SpecCounters(
            drafts=self.drafts - earlier.drafts,
            draft_tokens=self.draft_tokens - earlier.draft_tokens,
            accepted=self.accepted - earlier.accepted,
            accepted_per_pos={p: self.accepted_per_pos.get(p, 0.0) - earlier.accepted_per_pos.get(p, 0.0) for p in positions},
        )


@dataclass
class ServerFacts:
    """What the engine says about itself at start-up (log lines, /props): pool sizes, memory, context."""

    kv_pool_tokens: int | None = None
    kv_cache_mib: float | None = None
    kv_dtype: str | None = None
    model_mib: float | None = None
    n_ctx: int | None = None
    slots: int | None = None
    extra: dict = field(default_factory=dict)


def counters_from_metrics(metrics_text: str, prefix: str) -> SpecCounters | None:
    """The <prefix>:spec_decode_*_total counters that llama.cpp and vLLM both export (positions 0-based)."""
    from .. import prometheus

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


class Adapter(Protocol):
    engine: str  # the results contract's stack name
    engine_label: str  # the engine's own name for the basis column
    health_path: str

    def argv(self, launch: Launch, binary: str, host: str, port: int, threads: int | None) -> list[str]: ...

    def request_extras(self, launch: Launch, output_tokens: int) -> dict: ...

    def parse_log(self, text: str) -> ServerFacts: ...

    def spec_counters(self, metrics_text: str) -> SpecCounters | None: ...

    def server_timings(self, final_chunk: dict) -> dict: ...


def render_flags(args: dict) -> list[str]:
    """Engine flags from a dict: underscores become dashes, true is a bare flag, false and null drop it,
    dicts are JSON, lists repeat the value; a later value replaces an earlier one (dict order)."""
    import json

    out: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
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
