"""Properties of the pure figure functions (measure/summary.py, host/telemetry.py's windows) over empty,
one-sample, zero-length and zero-delta windows, NaN and missing inputs (issue 45): a figure is a finite number
or None with a note that says why, never an exception that stops the launch; medians lie within their data,
intervals hold their point estimate, energy adds up over adjacent spans."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stackbench.config.model import Load
from stackbench.engines.base import SpecCounters
from stackbench.host import telemetry
from stackbench.measure import summary
from stackbench.measure.client import RequestRecord

FAST = settings(max_examples=50, deadline=None)

numbers = st.floats(-1e6, 1e6, allow_nan=False)
undefined = st.sampled_from([None, math.nan, math.inf, -math.inf])
maybe_numbers = st.lists(st.one_of(numbers, undefined), max_size=25)
seconds = st.floats(0.0, 20.0)


def is_figure(figure: summary.Figure) -> bool:
    """Right or absent with a reason: a finite value, or None with a note."""
    return (figure.value is not None and math.isfinite(figure.value)) or (figure.value is None and bool(figure.note))


# -- medians over repeats, percentiles over samples --------------------------------------------------------
@FAST
@given(maybe_numbers)
def test_a_median_over_repeats_is_over_the_finite_ones_and_lies_within_them(per_repeat):
    figure = summary._median_figure("decode_tps", per_repeat)
    values = [v for v in per_repeat if v is not None and math.isfinite(v)]
    if not values:
        assert figure is None
        return
    assert is_figure(figure) and figure.n == len(values) and figure.repeat_values == tuple(values)
    assert min(values) <= figure.value <= max(values)
    if len(values) > 1:
        assert (figure.value_min, figure.value_max) == (min(values), max(values)) and figure.mad >= 0
    else:
        assert figure.value_min is figure.value_max is None  # one repeat has no range
    if figure.ci_low is not None:
        assert figure.ci_low <= figure.value <= figure.ci_high


@FAST
@given(maybe_numbers)
def test_percentiles_count_only_finite_samples_rise_with_the_rank_and_stay_within_the_samples(samples):
    figures = summary.percentile_figures("itl", samples, "ms", "per-token ITL", summary.TOKENS)
    values = [v for v in samples if v is not None and math.isfinite(v)]
    if not values:
        assert figures == []
        return
    p50, p90, p99 = figures
    assert all(is_figure(f) and f.n == len(values) for f in figures)
    assert min(values) <= p50.value <= p90.value <= p99.value <= max(values)


# -- the whole window's telemetry ------------------------------------------------------------------------
energies = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.just(0.0))
sources = st.sampled_from(["energy counter", "integrated 0.5 s power samples: energy counter went backwards (reset)",
                           "no energy figure: the energy counter of GPU-a did not advance over the 0.4 s window"])
watts = st.one_of(st.none(), st.floats(0.0, 5000.0))


@FAST
@given(energy_j=energies, source=sources, duration_s=seconds, sampled_j=st.one_of(st.none(), st.floats(-1e6, 1e6)),
       power_w=watts, output_tokens=st.integers(0, 10_000))
def test_whole_window_telemetry_has_one_energy_row_right_or_empty_with_its_reason(energy_j, source, duration_s, sampled_j,
                                                                                   power_w, output_tokens):
    reading = telemetry.WindowReading(duration_s, energy_j, source, power_w, power_w, int(power_w is not None), power_w,
                                      ("GPU-a",), energy_sampled_j=sampled_j)
    figures = summary.telemetry_figures(reading, output_tokens)
    assert all(is_figure(f) for f in figures)
    (energy,) = [f for f in figures if f.metric == "energy_j_per_token"]
    if energy.value is not None:
        assert energy_j > 0 and output_tokens > 0 and energy.value == pytest.approx(energy_j / output_tokens)
    else:
        assert energy.note.startswith("NVML over the measured window") and len(energy.note.split("; ")) > 1


@FAST
@given(counter_j=st.floats(-1e6, 1e6), sampled_j=st.one_of(st.none(), st.floats(-1e6, 1e6)))
def test_the_energy_note_reads_any_counter_delta_zero_included(counter_j, sampled_j):
    assert f"energy counter delta {counter_j:.1f} J" in summary.energy_note(counter_j, sampled_j)


# -- counter energy and power over windows ---------------------------------------------------------------
def samples(times: list[float], watts_per_gpu: float, gpus: int = 2, step_j: float = 0.0) -> list[dict]:
    """NVML samples at `times` of `gpus` GPUs each drawing `watts_per_gpu`, their counters read in whole `step_j`
    steps (0: exact)."""
    def counter(t: float) -> float:
        joules = 1000.0 + watts_per_gpu * t
        return joules - joules % step_j if step_j else joules

    return [{"t": t, "gpu_uuid": f"GPU-{g}", "power_w": watts_per_gpu, "energy_j": counter(t)}
            for t in times for g in range(gpus)]


sample_times = st.lists(st.floats(0.0, 20.0), max_size=30, unique=True).map(sorted)


@st.composite
def windows(draw, shortest: float = 0.0) -> tuple[float, float]:
    """A window in [0, 20] s at least `shortest` long (zero length by default)."""
    start = draw(st.floats(0.0, 20.0 - shortest))
    return start, start + draw(st.floats(shortest, 20.0 - start))


@FAST
@given(times=sample_times, window=windows(), step_j=st.sampled_from([0.0, 1.0, 500.0]), watts_per_gpu=st.floats(0.0, 700.0))
def test_counter_energy_is_a_positive_number_or_none_with_a_reason(times, window, step_j, watts_per_gpu):
    joules, why = telemetry.counter_energy_j(samples(times, watts_per_gpu, step_j=step_j), *window)
    if joules is None:
        assert why and why != "energy counter"
    else:
        assert math.isfinite(joules) and joules > 0 and why == "energy counter"


@FAST
@given(window=windows(shortest=1e-3), watts_per_gpu=st.floats(1.0, 700.0))
def test_counter_energy_of_a_linear_counter_sampled_every_half_second_is_power_times_time(window, watts_per_gpu):
    """(Over a window shorter than a float's resolution of the counter's reading, that reads no change too.)"""
    start, end = window
    joules, _ = telemetry.counter_energy_j(samples([i * 0.5 for i in range(41)], watts_per_gpu), start, end)
    assert joules == pytest.approx(2 * watts_per_gpu * (end - start), rel=1e-6)


def test_an_empty_window_has_no_counter_energy_and_says_so():
    assert telemetry.counter_energy_j(samples([0.0, 0.5], 250.0), 0.3, 0.3) == (None, "an empty window (0.3 s to 0.3 s)")


@FAST
@given(times=sample_times.filter(bool), window=windows(), watts_per_gpu=st.floats(0.0, 700.0))
def test_the_sampled_power_integral_of_a_constant_draw_is_power_times_time(times, window, watts_per_gpu):
    start, end = window
    assert telemetry.power_integral(samples(times, watts_per_gpu), start, end) == pytest.approx(
        2 * watts_per_gpu * (end - start), rel=1e-9, abs=1e-6)


@FAST
@given(times=sample_times, window=windows())
def test_the_longest_sample_gap_is_within_the_window_and_at_least_its_share(times, window):
    start, end = window
    inside = [t for t in times if start <= t <= end]
    gap = telemetry.sample_gap_s(times, start, end)
    assert (end - start) / (len(inside) + 1) - 1e-9 <= gap <= end - start


inside_tokens = st.one_of(st.just(0.0), st.floats(0.01, 1e4), st.just(math.nan))  # none, or some share of a chunk's


@FAST
@given(spans=st.lists(st.tuples(windows(), inside_tokens, sample_times), max_size=4),
       step_j=st.sampled_from([0.0, 500.0]), watts_per_gpu=st.floats(0.0, 700.0),
       tokens_per_response=st.one_of(st.none(), st.just(math.nan), st.floats(0.0, 1e4)))
def test_steady_telemetry_has_an_energy_row_for_any_windows_right_or_empty_with_its_reason(spans, step_j, watts_per_gpu,
                                                                                          tokens_per_response):
    spans = [(start, end, tokens, samples(times, watts_per_gpu, step_j=step_j)) for (start, end), tokens, times in spans]
    figures = summary.steady_telemetry_figures(spans, tokens_per_response)
    assert all(is_figure(f) for f in figures)
    energy = [f for f in figures if f.metric == "energy_j_per_token_steady"]
    assert len(energy) == (1 if spans else 0)
    assert all(f.value > 0 for f in figures if f.metric.startswith("energy_") and f.value is not None)


# -- load: steady windows, tokens over spans, the knee ---------------------------------------------------
@st.composite
def requests(draw) -> RequestRecord:
    """A completed request: submit, first token after it (TTFT >= 1 ms: RequestRecord.e2e_tps divides by the
    span from submit to the last token), then 1 to 20 tokens spread over its chunks, zero-length spans included."""
    submit = draw(st.floats(0.0, 10.0))
    first = submit + draw(st.floats(1e-3, 2.0))
    last = first + draw(st.floats(0.0, 5.0))
    chunks = draw(st.integers(1, 20))
    times = [first + (last - first) * i / max(chunks - 1, 1) for i in range(chunks)]
    record = RequestRecord(stream=draw(st.integers(0, 3)), turn=0, t_submit=submit, t_first_chunk=first, t_first_token=first,
                           t_last_token=last, t_last_chunk=last, t_end=last, completion_tokens=draw(st.integers(chunks, 40)))
    record.content_chunks, record.chunk_times, record.choice_times = chunks, times, times
    return record


@FAST
@given(st.lists(requests(), max_size=12), st.integers(1, 4))
def test_a_steady_window_has_length_and_starts_when_the_cth_request_has_its_first_token(records, concurrency):
    window = summary.steady_window(records, concurrency)
    if len(records) <= concurrency:
        assert window is None
    elif window is not None:
        start, end = window
        assert start < end and sum(r.t_first_token <= start for r in records) >= concurrency


@FAST
@given(st.lists(requests(), min_size=1, max_size=12), st.lists(st.floats(-1.0, 40.0), min_size=3, max_size=3).map(sorted))
def test_tokens_over_adjacent_spans_add_up_and_over_all_time_are_every_token(records, edges):
    a, b, c = edges
    assert summary.tokens_between(records, a, b) + summary.tokens_between(records, b, c) == pytest.approx(
        summary.tokens_between(records, a, c))
    assert summary.tokens_between(records, -math.inf, math.inf) == pytest.approx(sum(r.tokens for r in records))


@FAST
@given(st.lists(requests(), max_size=12), st.one_of(st.none(), st.integers(1, 4)),
       st.one_of(st.none(), st.floats(0.0, 5.0)), st.one_of(st.none(), st.floats(0.0, 500.0)))
def test_repeat_and_load_figures_are_finite_or_missing(records, concurrency, slo_ttft_s, slo_tpot_ms):
    load = Load(slo_ttft_s=slo_ttft_s, slo_tpot_ms=slo_tpot_ms)
    figures = {**summary.repeat_figures(records), **summary.load_repeat_figures(records, load, concurrency)}
    assert all(v is None or (math.isfinite(v) and v >= 0) for v in figures.values())
    assert all(figures.get(share) is None or 0 <= figures[share] <= 1 for share in ("slo_attainment", "stream_overlap"))
    for figure in summary.cell_figures([records], None) + summary.load_figures([records], load, concurrency):
        assert is_figure(figure)


throughputs = st.one_of(st.floats(0.0, 1e4), st.just(math.nan))


@FAST
@given(st.dictionaries(st.integers(1, 64), st.fixed_dictionaries({"aggregate_tps": throughputs}, optional={
    "slo_attainment": st.floats(0.0, 1.0)}), min_size=2, max_size=6), st.one_of(st.none(), st.floats(0.1, 5.0)))
def test_the_knee_is_a_swept_concurrency_or_none_with_a_reason(levels, slo_ttft_s):
    knee = summary.knee_figure(levels, Load(slo_ttft_s=slo_ttft_s))
    assert is_figure(knee) and (knee.value is None or knee.value in levels)


counts = st.integers(-10, 10_000).map(float)  # counter deltas count steps and tokens: whole, negative after a reset


@FAST
@given(st.builds(SpecCounters, drafts=st.one_of(counts, st.just(math.nan)), draft_tokens=counts, accepted=counts,
                 accepted_per_pos=st.dictionaries(st.integers(0, 3), counts, max_size=3)))
def test_acceptance_from_counter_deltas_is_finite_or_absent(delta):
    figures = summary.acceptance_figures(delta, 3)
    assert all(is_figure(f) for f in figures)
    # Figures only from a real count of drafts; none drafted is the one spec_drafts 0 row (did not speculate).
    if delta.drafts == 0:
        assert [(f.metric, f.value) for f in figures] == [("spec_drafts", 0.0)]
    else:
        assert figures == [] or delta.drafts > 0
