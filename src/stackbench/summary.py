"""Turn one cell's raw request records and counter deltas into results-contract figures.

A cell is (workload, concurrency, power cap) inside one launch; it has several repeats. Per-repeat
figures are summarised as the median with min and max; latency distributions (TPOT, ITL, inter-chunk
latency) are percentiles over every request or token of the cell, each with its sample count;
counter-based figures (acceptance) are pooled over the whole cell from counter deltas, never read from a
cumulative gauge.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy

from .client import RequestRecord
from .stacks.base import SpecCounters
from .telemetry import WindowReading

# A percentile from fewer samples than this says so in its note.
FEW_SAMPLES = 100


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


def percentile_figures(name: str, values: list[float], unit: str, what: str, median_metric: str | None = None) -> list[Figure]:
    """Median and p90/p99 of `values` (numpy's linear interpolation, as vLLM `bench serve` reports them),
    each with its sample count; a percentile from fewer than FEW_SAMPLES samples says so. The median is
    `<name>_p50_<unit>` unless `median_metric` names it."""
    if not values:
        return []
    n = len(values)
    few = f"; only {n} samples (fewer than {FEW_SAMPLES}): a rough percentile" if n < FEW_SAMPLES else ""
    return [Figure((q == 50 and median_metric) or f"{name}_p{q}_{unit}", float(numpy.percentile(values, q)), unit,
                   "median" if q == 50 else f"p{q}", n, float(min(values)), float(max(values)),
                   note=f"{what}, {q}th percentile{few}")
            for q in (50, 90, 99)]


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
    t1 = max(r.t_last_token or r.t_end for r in ok)
    # Prefill rate: prompt tokens the engine actually processed (cached ones excluded: llama.cpp
    # `timings.prompt_n`, else usage prompt_tokens - prompt_tokens_details.cached_tokens) over the
    # client-side TTFT; the client-side counterpart of llama.cpp `timings.prompt_per_second`.
    prefill = [r.processed_prompt_tokens / r.ttft_s for r in ok if r.processed_prompt_tokens and r.ttft_s]
    server_prefill = [r.server["server_prompt_per_second"] for r in ok if r.server.get("server_prompt_per_second")]
    server_decode = [r.server["server_predicted_per_second"] for r in ok if r.server.get("server_predicted_per_second")]
    return {
        # Decode rate per request: (output tokens - 1) / (last token - first token), mean over requests.
        "decode_tps": statistics.mean(decode) if decode else None,
        # Output throughput as vLLM `bench serve` "Output token throughput": all output tokens / wall time.
        "aggregate_tps": sum(r.tokens for r in ok) / (t1 - t0) if t1 > t0 else None,
        "e2e_tps": statistics.mean([r.e2e_tps for r in ok if r.e2e_tps]) if any(r.e2e_tps for r in ok) else None,
        "ttft_s": statistics.mean(ttft) if ttft else None,
        "ttfc_s": statistics.mean([r.ttfc_s for r in ok if r.ttfc_s is not None]) if ok else None,
        "ttft_first_turn_s": statistics.mean([r.ttft_s for r in first if r.ttft_s is not None]) if later else None,
        "ttft_later_turns_s": statistics.mean([r.ttft_s for r in later if r.ttft_s is not None]) if later else None,
        "prefill_tps": statistics.mean(prefill) if prefill else None,
        "server_decode_tps": statistics.mean(server_decode) if server_decode else None,
        "server_prefill_tps": statistics.mean(server_prefill) if server_prefill else None,
    }


UNITS = {"decode_tps": "tok/s", "aggregate_tps": "tok/s", "e2e_tps": "tok/s", "ttft_s": "s", "ttfc_s": "s",
         "ttft_first_turn_s": "s", "ttft_later_turns_s": "s", "prefill_tps": "tok/s",
         "server_decode_tps": "tok/s", "server_prefill_tps": "tok/s"}
TTFT_INSIDE = {"aggregate_tps", "e2e_tps"}


def tokens_per_chunk_source(records: list[RequestRecord]) -> str:
    """How per-token ITL learnt each chunk's token count (for the figure's note and the row basis)."""
    streamed = [r for r in records if r.chunk_token_counts]
    if streamed and len(streamed) == len(records):
        return "usage streamed per chunk"
    return "final count spread over chunks" if not streamed else "usage per chunk where streamed, else spread"


def cell_basis(repeats: list[list[RequestRecord]]) -> dict[str, str]:
    """What the cell's token timings counted, for the rows' basis: which text kinds arrived
    (`counted_text`, e.g. "reasoning+content") and where tokens per chunk came from."""
    ok = [r for records in repeats for r in records if r.status == "ok"]
    kinds = sorted({r.counted_text for r in ok}) or ["none"]
    return {"counted_text": ",".join(kinds), "tokens_per_chunk": tokens_per_chunk_source(ok) if ok else "none"}


def cell_figures(repeats: list[list[RequestRecord]], counters: SpecCounters | None) -> list[Figure]:
    per_repeat = [repeat_figures(records) for records in repeats]
    figures = []
    for metric, unit in UNITS.items():
        figure = _median_figure(metric, [r.get(metric) for r in per_repeat], unit,
                                "yes" if metric in TTFT_INSIDE else "no")
        if figure:
            figures.append(figure)
    ok = [r for records in repeats for r in records if r.status == "ok"]
    # TPOT per request as vLLM `bench serve` defines it, (latency - TTFT) / (output tokens - 1); then
    # percentiles over requests.
    figures += percentile_figures("tpot", [r.tpot_ms for r in ok if r.tpot_ms is not None], "ms",
                                  "TPOT per request, (latency - TTFT) / (output tokens - 1) as vLLM bench serve",
                                  median_metric="tpot_ms")
    # Per-token ITL as SGLang `bench_serving`: each chunk's gap divided by the tokens it carries.
    figures += percentile_figures("itl", [gap for r in ok for gap in r.per_token_itl_ms()], "ms",
                                  f"per-token ITL, chunk gap / tokens in chunk ({tokens_per_chunk_source(ok)})")
    # The raw gap between chunks, whatever each carries: inter-chunk latency, never called ITL.
    figures += percentile_figures("icl", [gap for r in ok for gap in r.inter_chunk_ms()], "ms",
                                  "inter-chunk latency, gap between text-carrying SSE chunks")
    figures += acceptance_figures(counters, len(repeats))
    return figures


def acceptance_figures(delta: SpecCounters | None, repeats: int) -> list[Figure]:
    """Acceptance length = 1 + accepted / drafts over the cell (vLLM's and llama.cpp's mean acceptance
    length from spec_decode_* counter deltas); rate = accepted / draft tokens; per-position rates."""
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


def telemetry_figures(reading: WindowReading, output_tokens: int) -> list[Figure]:
    """NVML figures of one cell's measured window, summed over the launch's GPUs. Power as
    nvmlDeviceGetPowerUsage reports it (a 1 s average on Ampere and newer), sampled every 0.5 s inside the
    window; energy from nvmlDeviceGetTotalEnergyConsumption at the window's edges; J/token = that energy
    over the window's output tokens (reasoning included)."""
    notes = [f"NVML over the measured window ({reading.duration_s:.1f} s, {len(reading.gpu_uuids)} GPU)"]
    if reading.sampler_errors:
        notes.append(f"sampler errors: {reading.sampler_errors[0]} ({len(reading.sampler_errors)} in the window)")
    note = "; ".join(notes)
    figures = []
    if reading.power_mean_w is not None:
        figures += [Figure("power_w", reading.power_mean_w, "W", "mean", reading.power_samples, ttft_included="yes", note=note),
                    Figure("power_p95_w", reading.power_p95_w, "W", "p95", reading.power_samples, ttft_included="yes", note=note)]
    if reading.vram_peak_mib is not None:
        figures.append(Figure("vram_mib", reading.vram_peak_mib, "MiB", "peak", reading.power_samples, note=note))
    if reading.energy_j is not None and output_tokens > 0:
        figures.append(Figure("energy_j_per_token", reading.energy_j / output_tokens, "J/token", "mean", output_tokens,
                              ttft_included="yes", note=f"{note}; energy from {reading.energy_source}"))
    return figures
