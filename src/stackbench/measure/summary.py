"""Turn one cell's raw request records and counter deltas into results-contract figures.

A cell is (workload, load, power cap) inside one launch, the load a closed loop of c streams or an
open-loop request rate; it has several repeats. Per-repeat figures are summarised as the median with min,
max, the per-repeat values and the median's 95% order-statistic interval; latency distributions (TPOT, ITL,
inter-chunk latency) are percentiles over every request, token or chunk gap of the cell, each with its sample
count; every figure with a spread says what it is over (spread_over);
counter-based figures (acceptance) are pooled over the whole cell from counter deltas, never read from a
cumulative gauge. Load figures (steady-state window, goodput, the knee of a concurrency sweep) follow
vLLM `bench serve` and ML.ENERGY, as each function says.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

import numpy

from stackbench.config.model import Load
from stackbench.engines.base import SpecCounters
from stackbench.host.hostload import HostLoad
from stackbench.host.telemetry import WindowReading, counter_energy_j, power_by_time, power_integral
from stackbench.measure import correctness
from stackbench.measure.client import RequestRecord
from stackbench.results import estimators, metrics
from stackbench.results.estimators import median_interval
from stackbench.results.metrics import SERVER_DECODE_TPS, SERVER_PREFILL_TPS, M

# A percentile from fewer samples than this says so in its note.
FEW_SAMPLES = 100
# A median whose 95% confidence interval reaches further than this fraction of it says so in its note.
CI_FLAG_FRACTION = 0.05
# What a figure's min, max and percentiles are over (the rows' spread_over): only a spread over repeats is a
# repeat-to-repeat spread (results/basis.py WIDE_NOTE); one over requests, tokens or chunk gaps is the cell's
# distribution.
REPEATS, REQUESTS, TOKENS, CHUNKS = "repeats", "requests", "tokens", "chunks"
MEDIAN_INTERVAL = "95% order-statistic interval of the median (binomial, distribution-free)"


@dataclass(frozen=True)
class Figure:
    metric: str  # a registered name (results/metrics.py): an unknown one raises where the figure is made
    value: float | None
    stat: str
    n: int | None
    value_min: float | None = None
    value_max: float | None = None
    ttft_included: str = "no"
    note: str | None = None
    ci_low: float | None = None  # the median's 95% interval over repeats (median_interval); None below 6 repeats
    ci_high: float | None = None
    prompt_tokens: int | None = None  # a figure about one request of its own (the needle), not the cell's median
    mad: float | None = None  # median absolute deviation over repeats (analysis.decide's robust score reads it)
    spread_over: str | None = None  # what value_min / value_max (and a percentile) range over: REPEATS, REQUESTS, ...
    repeat_values: tuple[float, ...] | None = None  # the figure of each repeat, in order (analysis.decide's interval)

    def __post_init__(self):
        metrics.checked(self.metric)

    @property
    def unit(self) -> str:
        return metrics.unit_of(self.metric)


def finite(values) -> list[float]:
    """The values that are numbers: a missing (None) or undefined (NaN, infinite) one has no place in a statistic."""
    return [v for v in values if v is not None and math.isfinite(v)]


def _median_figure(metric: str, per_repeat: list[float | None], ttft_included: str = "no") -> Figure | None:
    """Median over the repeats that have the figure, with min, max, the repeats' values and the median's 95%
    interval (median_interval); an interval wider than +-5% of the median says so in the note."""
    values = finite(per_repeat)
    if not values:
        return None
    median = statistics.median(values)
    ci = median_interval(values)
    note = None
    if ci and max(median - ci[0], ci[1] - median) > CI_FLAG_FRACTION * abs(median):
        note = f"{MEDIAN_INTERVAL} wider than +-{CI_FLAG_FRACTION:.0%} of its value ({len(values)} repeats)"
    mad = estimators.mad(values)
    # One repeat has no range: "8940 (8940-8940)" would read as a spread of zero.
    low, high = (min(values), max(values)) if len(values) > 1 else (None, None)
    return Figure(metric, median, "median", len(values), low, high, ttft_included, note,
                  *(ci or (None, None)), mad=mad, spread_over=REPEATS, repeat_values=tuple(values))


def percentile_figures(name: str, values: list[float], unit: str, what: str, over: str,
                       median_metric: str | None = None) -> list[Figure]:
    """Median and p90/p99 of `values` (numpy's linear interpolation, as vLLM `bench serve` reports them),
    each with its sample count and `over`, what the samples are (REQUESTS, TOKENS, CHUNKS); a percentile from
    fewer than FEW_SAMPLES samples says so; missing or undefined samples are not counted. Each is named as
    metrics.percentile_name names it: `<name>_p<q>_<unit>`, the median `median_metric` where given."""
    values = finite(values)
    if not values:
        return []
    n = len(values)
    few = f"; only {n} samples (fewer than {FEW_SAMPLES}): a rough percentile" if n < FEW_SAMPLES else ""
    low, high = (float(min(values)), float(max(values))) if n > 1 else (None, None)  # one sample: no range
    return [Figure(metrics.percentile_name(name, q, unit, median_metric), float(numpy.percentile(values, q)),
                   "median" if q == 50 else f"p{q}", n, low, high, note=f"{what}, {q}th percentile{few}", spread_over=over)
            for q in metrics.PERCENTILES]


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
    server_prefill = [r.server[SERVER_PREFILL_TPS] for r in ok if r.server.get(SERVER_PREFILL_TPS)]
    server_decode = [r.server[SERVER_DECODE_TPS] for r in ok if r.server.get(SERVER_DECODE_TPS)]
    return {
        # Decode rate per request: (output tokens - 1) / (last token - first token), mean over requests.
        M.decode_tps: statistics.mean(decode) if decode else None,
        # Output throughput as vLLM `bench serve` "Output token throughput": all output tokens / wall time.
        M.aggregate_tps: sum(r.tokens for r in ok) / (t1 - t0) if t1 > t0 else None,
        # Seed 000's "双流聚合 90.9 + 79.2 = 170.1": each stream's decode rate (mean over its requests), summed
        # over the streams; TTFT excluded, unlike aggregate_tps.
        M.aggregate_decode_tps: aggregate_decode_rate(ok),
        # Request wall time, end to end (vLLM `bench serve` E2EL: submit to the last chunk with choices), mean over
        # requests; seed 000's serialised 64K pair and seed 002's multi-turn round are read on it.
        M.request_wall_s: statistics.mean([wall(r) for r in ok]),
        M.request_wall_later_turns_s: statistics.mean([wall(r) for r in later]) if later else None,
        # Two or more streams at once (seed 000's two 64K requests, 84.4 s = 2 x 42 s): all of them, first
        # submit to last chunk, and how far their decode spans overlap, 1 parallel, 0 serialised.
        M.batch_wall_s: t1 - t0 if len({r.stream for r in ok}) > 1 else None,
        M.stream_overlap: stream_overlap(ok),
        M.e2e_tps: statistics.mean([r.e2e_tps for r in ok if r.e2e_tps]) if any(r.e2e_tps for r in ok) else None,
        M.ttft_s: statistics.mean(ttft) if ttft else None,
        M.ttfc_s: statistics.mean([r.ttfc_s for r in ok if r.ttfc_s is not None]) if ok else None,
        M.ttft_first_turn_s: statistics.mean([r.ttft_s for r in first if r.ttft_s is not None]) if later else None,
        M.ttft_later_turns_s: statistics.mean([r.ttft_s for r in later if r.ttft_s is not None]) if later else None,
        M.prefill_tps: statistics.mean(prefill) if prefill else None,
        M.server_decode_tps: statistics.mean(server_decode) if server_decode else None,
        M.server_prefill_tps: statistics.mean(server_prefill) if server_prefill else None,
    }


def wall(record: RequestRecord) -> float:
    return (record.t_last_chunk or record.t_end) - record.t_submit


def stream_overlap(ok: list[RequestRecord]) -> float | None:
    """How far the streams' first-to-last-token spans overlap (a stream's span: its first request's first
    token to its last request's last token): (sum of spans - their union) / (sum - the longest), 1 when they
    run side by side, 0 when one waits for the other (a server serialising them)."""
    by_stream: dict[int, list[RequestRecord]] = {}
    for r in ok:
        if r.t_first_token is not None and r.t_last_token is not None:
            by_stream.setdefault(r.stream, []).append(r)
    if len(by_stream) < 2:
        return None
    spans = sorted((min(r.t_first_token for r in rs), max(r.t_last_token for r in rs)) for rs in by_stream.values())
    total = sum(b - a for a, b in spans)
    union, (start, end) = 0.0, spans[0]
    for a, b in spans[1:]:
        if a > end:
            union, start, end = union + end - start, a, b
        else:
            end = max(end, b)
    union += end - start
    room = total - max(b - a for a, b in spans)
    if not room > 0:
        return None
    return min(1.0, max(0.0, (total - union) / room))  # a share: the sums' rounding must not take it past 0 or 1


def aggregate_decode_rate(ok: list[RequestRecord]) -> float | None:
    """The sum over streams of each stream's mean decode rate ((output tokens - 1) / (last - first token))."""
    streams: dict[int, list[float]] = {}
    for r in ok:
        if r.decode_tps:
            streams.setdefault(r.stream, []).append(r.decode_tps)
    return sum(statistics.mean(rates) for rates in streams.values()) if streams else None


# The per-cell figures, as the metric registry lists them.
CELL_FIGURES = metrics.names(group="cell")
TTFT_INSIDE = set(metrics.names(group="cell", ttft_included="yes"))


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
    for metric in CELL_FIGURES:
        figure = _median_figure(metric, [r.get(metric) for r in per_repeat], "yes" if metric in TTFT_INSIDE else "no")
        if figure:
            figures.append(figure)
    ok = [r for records in repeats for r in records if r.status == "ok"]
    # TPOT per request as vLLM `bench serve` defines it, (E2EL - TTFT) / (output tokens - 1) with its TTFT
    # and E2EL (first and last chunk with choices); then percentiles over requests.
    figures += percentile_figures("tpot", [r.tpot_ms for r in ok if r.tpot_ms is not None], "ms",
                                  "TPOT per request, (latency - TTFT) / (output tokens - 1) as vLLM bench serve",
                                  REQUESTS, median_metric=M.tpot_ms)
    # Per-token ITL as SGLang `bench_serving`'s native backend (`async_request_sglang_generate`): each chunk's
    # gap divided by the tokens it carries. (Its chat backend appends one gap per chunk with text.)
    figures += percentile_figures("itl", [gap for r in ok for gap in r.per_token_itl_ms()], "ms",
                                  f"per-token ITL, chunk gap / tokens in chunk ({tokens_per_chunk_source(ok)})", TOKENS)
    # The raw gap between chunks, whatever each carries: vLLM `bench serve`'s ITL, here named inter-chunk
    # latency so it is never read as the per-token ITL above.
    figures += percentile_figures("icl", [gap for r in ok for gap in r.inter_chunk_ms()], "ms",
                                  "inter-chunk latency, gap between SSE chunks with choices (vLLM bench serve ITL)", CHUNKS)
    figures += acceptance_figures(counters, len(repeats))
    return figures


def validity_figures(records: list[RequestRecord], chunks_are_tokens: bool) -> list[Figure]:
    """output_len_ok (our own): the share of requests whose server-reported completion_tokens equal the
    max_tokens asked (min_tokens = max_tokens) and, where `chunks_are_tokens` (one token per streamed chunk:
    no speculation, no usage streamed per chunk), whose client-side chunk count agrees within one
    (correctness.output_len_ok). Below 1 the cell measured a different workload than it names."""
    ok = [r for r in records if r.status == "ok" and r.requested_tokens is not None]
    if not ok:
        return []
    passed = sum(correctness.output_len_ok(r.requested_tokens, r.content_chunks + r.reasoning_chunks if chunks_are_tokens else None,
                                           r.completion_tokens) for r in ok)
    compared = ("server's completion_tokens against max_tokens, the client's chunk count within one of it" if chunks_are_tokens
                else "server's completion_tokens against max_tokens (chunks may carry several tokens: the client's count is not compared)")
    return [Figure(M.output_len_ok, passed / len(ok), "mean", len(ok), note=f"{passed} of {len(ok)} requests as asked; {compared}")]


def output_text(record: RequestRecord) -> str:
    return record.reasoning + record.content


def degeneration_figures(records: list[RequestRecord]) -> list[Figure]:
    """repetition_ratio (our own, correctness.repetition_ratio): the share of an output's word 4-grams that
    repeat an earlier one, median over requests; `looping`: the share of requests above LOOP_THRESHOLD. The
    chat endpoints return no token ids, so words (whitespace split) stand in for tokens."""
    ratios = [correctness.repetition_ratio(output_text(r)) for r in records if r.status == "ok"]
    ratios = [x for x in ratios if x is not None]
    if not ratios:
        return []
    loops = sum(correctness.is_looping(x) for x in ratios)
    words = "4-grams of whitespace-split words (no token ids from the chat endpoint)"
    # No min/max: over requests, not repeats, they would be read (and flagged) as a spread across repeats.
    return [Figure(M.repetition_ratio, statistics.median(ratios), "median", len(ratios),
                   note=f"repeated {words}, median over requests"),
            Figure(M.looping, loops / len(ratios), "mean", len(ratios),
                   note=f"{loops} of {len(ratios)} outputs loop (repetition_ratio > {correctness.LOOP_THRESHOLD:g})")]


def acceptance_figures(delta: SpecCounters | None, repeats: int) -> list[Figure]:
    """Acceptance length = 1 + accepted / drafts over the cell (vLLM's and llama.cpp's mean acceptance
    length from spec_decode_* counter deltas); rate = accepted / draft tokens; per-position rates."""
    if delta is None or not delta.drafts >= 0:  # no counters (no speculation), a reset between the scrapes, or NaN
        return []
    if delta.drafts == 0:  # a speculating server that drafted nothing ran its no-spec path (analysis.decide: did not speculate)
        return [Figure(M.spec_drafts, 0.0, "single", repeats, note="the server's draft counter did not move over the cell")]
    pooled = dict(stat="mean", n=repeats, note="pooled over the cell from /metrics counter deltas")
    figures = [
        Figure(M.accept_len, 1 + delta.accepted / delta.drafts, **pooled),
        Figure(M.spec_drafts, delta.drafts, "single", repeats),
        Figure(M.spec_draft_tokens, delta.draft_tokens, "single", repeats),
        Figure(M.spec_accepted_tokens, delta.accepted, "single", repeats),
    ]
    if delta.draft_tokens > 0:
        figures.append(Figure(M.accept_rate, delta.accepted / delta.draft_tokens, **pooled))
    for position, accepted in sorted(delta.accepted_per_pos.items()):
        figures.append(Figure(metrics.ACCEPT_RATE_POS.member(position + 1), accepted / delta.drafts, **pooled))
    return figures


def spread_is_wide(figure: Figure, ratio: float) -> bool:
    return bool(figure.value_min and figure.value_max and figure.value_max / figure.value_min > ratio)


def telemetry_figures(reading: WindowReading, output_tokens: int) -> list[Figure]:
    """NVML figures of one cell's measured window, summed over the launch's GPUs, and per GPU (power_w_per_gpu,
    energy_j_per_token_per_gpu: what a per-GPU limit is compared with). Power as
    nvmlDeviceGetPowerUsage reports it (a 1 s average on Ampere and newer), sampled every 0.5 s inside the
    window; energy from nvmlDeviceGetTotalEnergyConsumption at the window's edges; J/token = that energy
    over the window's output tokens (reasoning included)."""
    notes = [f"NVML over the measured window ({reading.duration_s:.1f} s) on the launch's GPUs only: "
             f"{', '.join(reading.gpu_uuids)}"]
    if reading.sampler_errors:
        notes.append(f"sampler errors: {reading.sampler_errors[0]} ({len(reading.sampler_errors)} in the window)")
    note = "; ".join(notes)
    figures = []
    if reading.power_mean_w is not None:
        figures += [Figure(M.power_w, reading.power_mean_w, "mean", reading.power_samples, ttft_included="yes", note=note),
                    Figure(M.power_p95_w, reading.power_p95_w, "p95", reading.power_samples, ttft_included="yes", note=note)]
    if reading.power_mean_w_by_gpu:
        each = ", ".join(f"{uuid} {watts:.1f} W" for uuid, watts in reading.power_mean_w_by_gpu.items())
        figures.append(Figure(M.power_w_per_gpu, max(reading.power_mean_w_by_gpu.values()), "mean",
                              reading.power_samples, ttft_included="yes", note=f"{note}; the highest GPU's; each: {each}"))
    if reading.vram_peak_mib is not None:
        figures.append(Figure(M.vram_mib, reading.vram_peak_mib, "peak", reading.power_samples, note=note))
    per_token = energy_per_token_figure(reading, output_tokens, note)
    if per_token.value is not None and reading.gpu_uuids:
        gpus = len(reading.gpu_uuids)
        figures.append(Figure(M.energy_j_per_token_per_gpu, per_token.value / gpus, "mean", per_token.n,
                              ttft_included="yes", note=f"energy_j_per_token / {gpus} GPUs"))
    return [*figures, per_token, *clock_figures(reading.clock)]


def energy_per_token_figure(reading: WindowReading, output_tokens: int, note: str) -> Figure:
    """energy_j_per_token over the whole window, or the row without a value and why: no energy reading
    (energy_source says why), none above 0 J (no GPU spends nothing: a counter that did not resolve the
    window), or no output tokens to divide it by."""
    energy = reading.energy_j
    if energy is None:
        why = reading.energy_source
    elif not 0 < energy < math.inf:  # NaN too
        why = f"no energy figure: {energy:g} J over the {reading.duration_s:.1f} s window ({reading.energy_source})"
    elif not output_tokens > 0:
        why = "no energy figure: no output tokens in the window"
    else:
        source = energy_note(energy, reading.energy_sampled_j) if reading.energy_source == "energy counter" \
            else f"energy from {reading.energy_source}"
        return Figure(M.energy_j_per_token, energy / output_tokens, "mean", output_tokens,
                      ttft_included="yes", note=f"{note}; {source}")
    return Figure(M.energy_j_per_token, None, "mean", None, note=f"{note}; {why}")


# The clock rows: (metric, key in telemetry.clock_state, stat, worst of the GPUs).
CLOCK_ROWS = [(M.clock_event_share_thermal, "share_thermal", "single", max),
              (M.clock_event_share_hw_slowdown, "share_hw_slowdown", "single", max),
              (M.clock_event_share_power_brake, "share_power_brake", "single", max),
              (M.clock_event_share_sw_power_cap, "share_sw_power_cap", "single", max),
              (M.sm_clock_mhz, "sm_clock_mhz", "median", min), (M.gpu_temp_max_c, "temp_max_c", "peak", max)]


def clock_figures(clock: dict[str, dict[str, float]]) -> list[Figure]:
    """The measured window's clock event shares, SM clock median and temperature maximum: one row each with
    the worst of the launch's GPUs, every GPU's own value in its note."""
    if not clock:
        return []
    figures = []
    for metric, key, stat, worst in CLOCK_ROWS:
        each = ", ".join(f"{uuid} {state[key]:.3g}" for uuid, state in clock.items())
        figures.append(Figure(metric, worst(state[key] for state in clock.values()), stat, len(clock),
                              note=f"per GPU: {each}"))
    return figures


def slowdown_note(figures: list[Figure], capped: bool) -> str | None:
    """Why a cell's speed is not its stack's: a GPU slowed by anything but its own cap (thermal, HW slowdown,
    power brake: metrics.SLOWDOWN_METRICS) in any sample of the window; on a capped cell the SW power cap
    share is named as what the cap did."""
    shares = {f.metric: f for f in figures if f.metric.startswith("clock_event_share_")}
    slowed = [f"{name.removeprefix('clock_event_share_').replace('_', ' ')} in {shares[name].value:.0%} of samples "
              f"({shares[name].note})" for name in metrics.SLOWDOWN_METRICS if name in shares and shares[name].value > 0]
    if slowed:
        return "GPU SLOWED, not the stack's speed: " + "; ".join(slowed)
    cap = shares.get(M.clock_event_share_sw_power_cap)
    if capped and cap and cap.value > 0:
        return f"SW power cap held the clocks in {cap.value:.0%} of samples (the cell's own cap)"
    return None


def host_figures(load: HostLoad, busy: bool, why: str | None = None) -> list[Figure]:
    """The host's CPUs outside the launch over a window (host/hostload.py): the mean and busiest-stretch outside
    share, the load average per core, and host_busy (1 where `busy`, with `why` as its note: a launch's own row;
    a cell's reason reaches every row of the cell through its note instead)."""
    note = f"over {load.seconds:.1f} s on {load.cores} cores; outside the launch: {load.processes()}"
    return [Figure(M.host_outside_cpu_share, load.outside_share, "mean", load.intervals, note=note),
            Figure(M.host_outside_cpu_share_peak, load.peak_share, "peak", load.intervals,
                   note=f"busiest {load.window_s:g} s; {note}"),
            Figure(M.host_load_per_core, load.load_per_core, "peak", load.intervals, note=note),
            Figure(M.host_busy, 1.0 if busy else 0.0, "single", 1, note=why or note)]


# -- load: steady state, goodput, knee --------------------------------------------------------------------

def steady_window(records: list[RequestRecord], concurrency: int) -> tuple[float, float] | None:
    """The span in which all `concurrency` streams are busy, as ML.ENERGY measures it: from the first token
    of the c-th request to arrive at one, until the (N-c)-th request finishes (its last token). None when a
    repeat has too few requests for one (N <= c: each stream needs two or more)."""
    ok = [r for r in records if r.status == "ok" and r.t_first_token is not None]
    if len(ok) <= concurrency:
        return None
    start = sorted(r.t_first_token for r in ok)[concurrency - 1]
    end = sorted(r.t_last_token for r in ok)[len(ok) - concurrency - 1]
    return (start, end) if end > start else None


def token_arrivals(record: RequestRecord) -> list[tuple[float, float]]:
    """(time, tokens) per text-carrying chunk: streamed usage increments where the engine sends them, else
    the final count spread evenly over the chunks (as per-token ITL does)."""
    times = record.chunk_times
    if not times:
        return []
    if len(record.chunk_token_counts) == len(times):
        counts = record.chunk_token_counts
        return list(zip(times, [counts[0], *(b - a for a, b in zip(counts, counts[1:]))]))
    return [(t, record.tokens / len(times)) for t in times]


def tokens_between(records: list[RequestRecord], start: float, end: float) -> float:
    """Output tokens that arrived in (start, end]: adjacent spans share no token."""
    return sum(n for r in records if r.status == "ok" for t, n in token_arrivals(r) if start < t <= end)


def meets_slo(record: RequestRecord, load: Load) -> bool:
    """vLLM `bench serve --goodput`: a request is good when its TTFT and TPOT are within every limit set
    (TPOT of a one-token answer counts as 0, as there)."""
    if record.status != "ok" or record.ttft_s is None:
        return False
    ttft_ok = load.slo_ttft_s is None or record.ttft_s <= load.slo_ttft_s
    tpot_ok = load.slo_tpot_ms is None or (record.tpot_ms or 0.0) <= load.slo_tpot_ms
    return ttft_ok and tpot_ok


def load_repeat_figures(records: list[RequestRecord], load: Load, concurrency: int | None) -> dict[str, float | None]:
    """Figures of one repeat that depend on the load: request throughput, goodput and SLO attainment (over
    the repeat's duration, first submit to last end, as vLLM's benchmark duration), and for a closed loop
    the steady-state window with its ramp and tail apart."""
    ok = [r for r in records if r.status == "ok"]
    if not ok:
        return {}
    t0, t_end = min(r.t_submit for r in records), max(r.t_end or r.t_submit for r in records)
    duration = t_end - t0
    # vLLM "Request throughput (req/s)": completed requests / benchmark duration.
    out: dict[str, float | None] = {M.request_rps: len(ok) / duration if duration > 0 else None}
    if load.has_slo and duration > 0:
        good = sum(meets_slo(r, load) for r in records)
        # vLLM "Request goodput (req/s)": requests within every SLO / benchmark duration.
        out[M.goodput_rps] = good / duration
        out[M.slo_attainment] = good / len(records)
    window = steady_window(records, concurrency) if concurrency else None
    if window:
        start, end = window
        t_last = max(r.t_last_token for r in ok if r.t_last_token is not None)
        out[M.aggregate_tps_steady] = tokens_between(ok, start, end) / (end - start)
        out[M.steady_window_s] = end - start
        out[M.aggregate_tps_ramp] = tokens_between(ok, t0, start) / (start - t0) if start > t0 else None
        out[M.aggregate_tps_tail] = tokens_between(ok, end, t_last) / (t_last - end) if t_last > end else None
    return out


LOAD_FIGURES = metrics.names(group="load")
LOAD_NOTES = {
    M.aggregate_tps_steady: "output tokens that arrived while all streams were busy (c-th first token to the (N-c)-th "
                            "request's end, as ML.ENERGY) / that span; ramp and tail excluded",
    M.aggregate_tps_ramp: "output tokens before the steady window / first submit to its start",
    M.aggregate_tps_tail: "output tokens after the steady window / its end to the last token",
    M.goodput_rps: "requests within the workload's SLO / repeat duration (vLLM bench serve --goodput)",
    M.slo_attainment: "share of the repeat's requests within the workload's SLO",
}


def load_figures(repeats: list[list[RequestRecord]], load: Load, concurrency: int | None) -> list[Figure]:
    """Medians over repeats of the load figures, each with its 95% interval; SLO figures name the limits."""
    per_repeat = [load_repeat_figures(records, load, concurrency) for records in repeats]
    limits = ", ".join(f"{name} <= {value:g} {unit}" for name, value, unit in
                       (("TTFT", load.slo_ttft_s, "s"), ("TPOT", load.slo_tpot_ms, "ms")) if value is not None)
    figures = []
    for metric in LOAD_FIGURES:
        # Every load figure spans prefills: later requests' TTFTs fall inside even the steady window.
        figure = _median_figure(metric, [r.get(metric) for r in per_repeat], "yes")
        if figure is None:
            continue
        note = LOAD_NOTES.get(metric)
        if metric in (M.goodput_rps, M.slo_attainment):
            note = f"{note}: {limits}"
        figures.append(replace(figure, note="; ".join(n for n in (note, figure.note) if n) or None))
    return figures


def steady_telemetry_figures(spans: list[tuple[float, float, float, list[dict]]],
                             tokens_per_response: float | None = None) -> list[Figure]:
    """Power and energy per token over the steady windows only. `spans` holds, per repeat, (start, end,
    output tokens inside, the NVML samples from telemetry.MAX_SAMPLE_GAP_S before it to as long after).
    Energy is the energy counter's delta over each window, interpolated at its edges from the samples that
    bracket them (telemetry.counter_energy_j); the integral of the sampled power beside it in the note, with
    their agreement. A window whose samples leave a gap over the limit, or whose counter did not advance (too
    short for its step), is left out; with no window left, or no output token inside them, the row stays
    without a value and says why. Power is the mean of the samples inside (NVML's 1-second averages). With
    `tokens_per_response` (the cell's mean output tokens per response), energy per response too."""
    energy = sampled = seconds = tokens = 0.0
    samples: list[float] = []
    windows, why_not = 0, []
    for start, end, inside_tokens, rows in spans:
        joules, why = counter_energy_j(rows, start, end)
        if joules is None:
            why_not.append(why)
            continue
        power = [watts for t, watts in power_by_time(rows) if start <= t <= end]
        energy, sampled = energy + joules, sampled + (power_integral(rows, start, end) or 0.0)
        seconds, tokens, samples, windows = seconds + end - start, tokens + inside_tokens, samples + power, windows + 1
    if not windows:
        return [Figure(M.energy_j_per_token_steady, None, "mean", None,
                       note=f"no energy figure: {why_not[0]} ({len(why_not)} of {len(spans)} steady windows)")] if why_not else []
    note = (f"steady windows only ({seconds:.1f} s in {windows} repeats{f', {len(why_not)} left out: ' + why_not[0] if why_not else ''}): "
            f"{energy_note(energy, sampled)}")
    power_row = [Figure(M.power_w_steady, statistics.fmean(samples), "mean", len(samples),
                        note=f"steady windows only: mean of {len(samples)} NVML 1-second power averages inside them")] if samples else []
    if not tokens > 0:  # NaN too
        return [Figure(M.energy_j_per_token_steady, None, "mean", None,
                       note=f"no energy figure: no output tokens arrived in the steady windows; {note}"), *power_row]
    return [Figure(M.energy_j_per_token_steady, energy / tokens, "mean", int(tokens), note=note),
            *power_row, *steady_response_energy(energy, tokens, tokens_per_response, note)]


def energy_note(counter_j: float, sampled_j: float | None) -> str:
    """Where an energy figure comes from and how the sampled power's integral agrees with it (in percent of
    the counter's delta, where that moved: a figure exists only then)."""
    if not sampled_j:
        return f"energy counter delta {counter_j:.1f} J (no sampled power to cross-check)"
    agreement = f" ({(sampled_j - counter_j) / counter_j:+.1%})" if counter_j > 0 else ""
    return f"energy counter delta {counter_j:.1f} J; sampled power integral {sampled_j:.1f} J{agreement}"


# -- energy per response (ML.ENERGY reports it beside energy per token) ------------------------------------

def steady_response_energy(energy_j: float, tokens: float, tokens_per_response: float | None, note: str) -> list[Figure]:
    """energy_j_per_response_steady: the steady windows' energy (the energy counter's deltas,
    steady_telemetry_figures) over the responses' worth of output tokens that arrived in them (tokens inside /
    the cell's mean output tokens per response): responses straddle the window's edges, so they are counted
    by their tokens, as ML.ENERGY's energy per response is J/token x the mean response length."""
    if not (tokens_per_response and tokens_per_response > 0):  # None, 0, negative or NaN: no response length
        return []
    responses = tokens / tokens_per_response
    return [Figure(M.energy_j_per_response_steady, energy_j / responses, "mean", int(tokens),
                   note=f"{note}; over {responses:.1f} responses' worth of tokens ({tokens_per_response:.0f} tokens each)")]


def knee_figure(levels: dict[int, dict[str, float]], load: Load) -> Figure | None:
    """knee_concurrency from a concurrency sweep: `levels` maps each concurrency to its cell's median
    figures. The knee is the last concurrency whose aggregate throughput rose by more than
    `knee_fraction` over the level below, and below the first concurrency whose slo_attainment falls under
    the SLO's minimum. Throughput is aggregate_tps_steady where every level has it, else aggregate_tps."""
    if len(levels) < 2:
        return None
    order = sorted(levels)
    metric = M.aggregate_tps_steady if all(M.aggregate_tps_steady in levels[c] for c in order) else M.aggregate_tps
    if not all(metric in levels[c] for c in order):
        return None
    rule = f"last concurrency whose {metric} rose > {load.knee_fraction:.0%} over the level below"

    def breaks_slo(c: int) -> bool:
        return load.has_slo and levels[c].get(M.slo_attainment, 1.0) < load.slo_min_attainment

    if breaks_slo(order[0]):
        return Figure(M.knee_concurrency, None, "single", len(order),
                      note=f"{rule}; none: SLO attainment below {load.slo_min_attainment:g} already at c={order[0]}")
    knee, why = order[0], None
    for lower, higher in zip(order, order[1:]):
        if breaks_slo(higher):
            why = f"SLO attainment below {load.slo_min_attainment:g} at c={higher}"
            break
        base, top = levels[lower][metric], levels[higher][metric]
        if not (math.isfinite(top) and math.isfinite(base) and base > 0):  # a rise over nothing is no rise
            return Figure(M.knee_concurrency, None, "single", len(order),
                          note=f"{rule}; none: {metric} {base:g} at c={lower} and {top:g} at c={higher} give no rise")
        rise = top / base - 1
        if rise <= load.knee_fraction:
            why = f"rose {rise:.1%} from c={lower} to c={higher}"
            break
        knee = higher
    why = why or f"lower bound: still rising at the highest level swept (c={order[-1]})"
    return Figure(M.knee_concurrency, knee, "single", len(order), note=f"{rule}; {why}")
