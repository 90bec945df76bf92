"""Turn one cell's raw request records and counter deltas into results-contract figures.

A cell is (workload, concurrency, power cap) inside one launch; it has several repeats. Per-repeat
figures are summarised as the median with min and max; counter-based figures (acceptance) are pooled
over the whole cell from counter deltas, never read from a cumulative gauge.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from .client import RequestRecord
from .stacks.base import SpecCounters


@dataclass(frozen=True)
class Figure:
    metric: str
    value: float
    unit: str
    stat: str
    n: int | None
    value_min: float | None = None
    value_max: float | None = None
    ttft_included: str = "no"
    note: str | None = None


def _median_figure(metric: str, per_repeat: list[float], unit: str, ttft_included: str = "no") -> Figure | None:
    values = [v for v in per_repeat if v is not None]
    if not values:
        return None
    return Figure(metric, statistics.median(values), unit, "median", len(values), min(values), max(values), ttft_included)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def repeat_figures(records: list[RequestRecord]) -> dict[str, float | None]:
    """Figures of one repeat (all streams of it)."""
    ok = [r for r in records if r.status == "ok"]
    if not ok:
        return {}
    decode = [r.decode_tps for r in ok if r.decode_tps]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    first = [r for r in ok if r.turn == 0]
    later = [r for r in ok if r.turn > 0]
    t0 = min(r.t_submit for r in ok)
    t1 = max(r.t_last_content or r.t_end for r in ok)
    # Prefill rate counts the prompt tokens the server actually processed (cached ones excluded) where
    # it reports them, over the client-side TTFT.
    prefill = [r.server.get("server_prompt_n", r.prompt_tokens) / r.ttft_s for r in ok
               if r.server.get("server_prompt_n", r.prompt_tokens) and r.ttft_s]
    server_prefill = [r.server.get("server_prompt_per_second") for r in ok if r.server.get("server_prompt_per_second")]
    server_decode = [r.server.get("server_predicted_per_second") for r in ok if r.server.get("server_predicted_per_second")]
    return {
        "decode_tps": statistics.mean(decode) if decode else None,
        "aggregate_tps": sum(r.tokens for r in ok) / (t1 - t0) if t1 > t0 else None,
        "e2e_tps": statistics.mean([r.e2e_tps for r in ok if r.e2e_tps]) if any(r.e2e_tps for r in ok) else None,
        "ttft_s": statistics.mean(ttft) if ttft else None,
        "ttfc_s": statistics.mean([r.ttfc_s for r in ok if r.ttfc_s is not None]) if ok else None,
        "ttft_first_turn_s": statistics.mean([r.ttft_s for r in first if r.ttft_s is not None]) if later else None,
        "ttft_later_turns_s": statistics.mean([r.ttft_s for r in later if r.ttft_s is not None]) if later else None,
        "prefill_tps": statistics.mean(prefill) if prefill else None,
        "tpot_ms": 1000 / statistics.mean(decode) if decode else None,
        "server_decode_tps": statistics.mean(server_decode) if server_decode else None,
        "server_prefill_tps": statistics.mean(server_prefill) if server_prefill else None,
    }


UNITS = {"decode_tps": "tok/s", "aggregate_tps": "tok/s", "e2e_tps": "tok/s", "ttft_s": "s", "ttfc_s": "s",
         "ttft_first_turn_s": "s", "ttft_later_turns_s": "s", "prefill_tps": "tok/s", "tpot_ms": "ms",
         "server_decode_tps": "tok/s", "server_prefill_tps": "tok/s"}
TTFT_INSIDE = {"aggregate_tps", "e2e_tps"}


def cell_figures(repeats: list[list[RequestRecord]], counters: SpecCounters | None) -> list[Figure]:
    per_repeat = [repeat_figures(records) for records in repeats]
    figures = []
    for metric, unit in UNITS.items():
        figure = _median_figure(metric, [r.get(metric) for r in per_repeat], unit,
                                "yes" if metric in TTFT_INSIDE else "no")
        if figure:
            figures.append(figure)
    gaps = [gap for records in repeats for r in records if r.status == "ok" for gap in r.inter_token_ms()]
    if gaps:
        n = len(repeats)
        figures.append(Figure("itl_p50_ms", _percentile(gaps, 0.5), "ms", "median", n))
        figures.append(Figure("itl_p99_ms", _percentile(gaps, 0.99), "ms", "peak", n, note="99th percentile of inter-chunk gaps"))
    figures += acceptance_figures(counters, len(repeats))
    return figures


def acceptance_figures(delta: SpecCounters | None, repeats: int) -> list[Figure]:
    """Acceptance length = 1 + accepted / drafts over the cell; rate and per-position rates besides."""
    if delta is None or delta.drafts <= 0:
        return []
    pooled = dict(stat="mean", n=repeats, note="pooled over the cell from /metrics counter deltas")
    figures = [
        Figure("accept_len", 1 + delta.accepted / delta.drafts, "ratio", **pooled),
        Figure("spec_drafts", delta.drafts, "tokens", "single", repeats),
        Figure("spec_draft_tokens", delta.draft_tokens, "tokens", "single", repeats),
        Figure("spec_accepted_tokens", delta.accepted, "tokens", "single", repeats),
    ]
    if delta.draft_tokens > 0:
        figures.append(Figure("accept_rate", delta.accepted / delta.draft_tokens, "ratio", **pooled))
    for position, accepted in sorted(delta.accepted_per_pos.items()):
        figures.append(Figure(f"accept_rate_pos{position + 1}", accepted / delta.drafts, "ratio", **pooled))
    return figures


def spread_is_wide(figure: Figure, ratio: float) -> bool:
    return bool(figure.value_min and figure.value_max and figure.value_max / figure.value_min > ratio)


TELEMETRY_UNITS = {"power_w": "W", "power_p95_w": "W", "energy_j_per_token": "J/token", "vram_mib": "MiB"}


def telemetry_figures(window: dict) -> list[Figure]:
    """NVML figures of one cell (sampled every 0.5 s over its measured window)."""
    stats = {"power_w": "mean", "power_p95_w": "peak", "energy_j_per_token": "mean", "vram_mib": "peak"}
    return [Figure(metric, value, TELEMETRY_UNITS[metric], stats[metric], None, ttft_included="yes",
                   note="NVML, sampled every 0.5 s over the cell") for metric, value in window.items()]
