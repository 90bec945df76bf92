"""Load arithmetic on hand-made request records (no server): the steady-state window, goodput and SLO
attainment, the knee rule, Student's t intervals, arrival times; and the load's part in a cell's identity."""

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml
from paths import ROOT

from stackbench.config import ConfigError
from stackbench.config.model import Load, Workload
from stackbench.measure import summary, workloads
from stackbench.measure.client import RequestRecord
from stackbench.plan import expand, launchspec


def record(stream: int, submit: float, first: float, last: float, tokens: int, chunks: int) -> RequestRecord:
    """A finished request whose `chunks` text chunks arrive evenly from `first` to `last`."""
    step = (last - first) / (chunks - 1)
    times = [first + i * step for i in range(chunks)]
    return RequestRecord(stream=stream, turn=0, t_submit=submit, t_first_chunk=first, t_first_token=first, t_last_token=last,
                         t_last_chunk=last, t_end=last, completion_tokens=tokens, chunk_times=times)


# Two streams, two requests each. Stream 0: 0-1 s then 1-2 s; stream 1 starts late: 0-1.5 s then 1.5-3 s.
# Every request waits 0.5 s for its first token and then sends 11 chunks of 10 tokens, one every 0.05 s.
def two_streams() -> list[RequestRecord]:
    return [record(0, 0.0, 0.5, 1.0, 110, 11), record(0, 1.0, 1.5, 2.0, 110, 11),
            record(1, 0.0, 1.0, 1.5, 110, 11), record(1, 1.5, 2.0, 2.5, 110, 11)]


def test_steady_window_runs_from_the_c_th_first_token_to_the_n_minus_c_th_end():
    records = two_streams()
    # First tokens 0.5, 1.0, 1.5, 2.0: the 2nd is 1.0. Ends 1.0, 1.5, 2.0, 2.5: the (4-2) = 2nd is 1.5.
    assert summary.steady_window(records, 2) == (1.0, 1.5)
    # Tokens in (1.0, 1.5]: stream 1's first request, its 10 chunks after 1.0; stream 0's second request,
    # its first chunk at 1.5.
    assert summary.tokens_between(records, 1.0, 1.5) == pytest.approx(10 * 10 + 10)
    assert summary.steady_window(records[:2], 2) is None  # one request per stream: no steady state


def test_steady_throughput_excludes_ramp_and_tail():
    figures = summary.load_repeat_figures(two_streams(), Load(), 2)
    assert figures["aggregate_tps_steady"] == pytest.approx(110 / 0.5)
    assert figures["steady_window_s"] == pytest.approx(0.5)
    # Ramp (0, 1.0]: stream 0's first request (110) and stream 1's first chunk (10). Tail (1.5, 2.5]: the
    # rest of stream 0's second request (100) and stream 1's second (110). All 440 tokens counted once.
    assert figures["aggregate_tps_ramp"] == pytest.approx(120 / 1.0)
    assert figures["aggregate_tps_tail"] == pytest.approx(210 / 1.0)
    assert "goodput_rps" not in figures  # no SLO set


def test_streamed_usage_counts_tokens_where_they_arrived():
    streamed = record(0, 0.0, 1.0, 2.0, 7, 3)
    streamed.chunk_token_counts = [1, 4, 7]
    assert summary.token_arrivals(streamed) == [(1.0, 1), (1.5, 3), (2.0, 3)]
    assert summary.tokens_between([streamed], 1.0, 2.0) == 6


def test_goodput_counts_requests_within_every_limit_over_the_repeat_duration():
    records = two_streams()  # TTFT 0.5 s each; TPOT 0.5 s / 109 tokens = 4.6 ms
    records[3].t_first_token = 2.3  # TTFT 0.8 s: misses a 0.6 s limit
    records[2].status = "failed"  # never good
    load = Load(slo_ttft_s=0.6, slo_tpot_ms=5.0)
    figures = summary.load_repeat_figures(records, load, 2)
    assert figures["slo_attainment"] == pytest.approx(2 / 4)
    assert figures["goodput_rps"] == pytest.approx(2 / 2.5)  # first submit 0 to last end 2.5 s
    assert figures["request_rps"] == pytest.approx(3 / 2.5)
    assert not summary.meets_slo(records[0], Load(slo_tpot_ms=4.0))


def levels(*tps: float, attainment: tuple[float, ...] = ()) -> dict[int, dict[str, float]]:
    out = {c + 1: {"aggregate_tps_steady": value} for c, value in enumerate(tps)}
    for c, value in enumerate(attainment):
        out[c + 1]["slo_attainment"] = value
    return out


def test_knee_is_the_last_level_that_still_rose_by_more_than_the_fraction():
    knee = summary.knee_figure(levels(100, 180, 195, 200), Load(knee_fraction=0.1))
    assert knee.value == 2 and "rose 8.3% from c=2 to c=3" in knee.note and knee.n == 4
    assert summary.knee_figure(levels(100, 180, 195, 200), Load(knee_fraction=0.05)).value == 3


def test_knee_stops_where_the_slo_breaks_and_says_when_it_is_a_lower_bound():
    slo = Load(knee_fraction=0.1, slo_ttft_s=1.0, slo_min_attainment=0.9)
    assert summary.knee_figure(levels(100, 200, 300, attainment=(1.0, 0.95, 0.5)), slo).value == 2
    assert summary.knee_figure(levels(100, 200, attainment=(0.5, 0.4)), slo).value is None
    rising = summary.knee_figure(levels(100, 200, 300), slo)
    assert rising.value == 3 and "lower bound" in rising.note
    assert summary.knee_figure(levels(100), slo) is None  # one level is not a sweep


def test_knee_falls_back_to_whole_repeat_throughput_when_a_level_has_no_steady_window():
    sweep = {1: {"aggregate_tps": 100.0, "aggregate_tps_steady": 100.0}, 2: {"aggregate_tps": 150.0}}
    knee = summary.knee_figure(sweep, Load())
    assert knee.value == 2 and "aggregate_tps rose" in knee.note


def test_the_medians_five_percent_flag():
    wide = summary._median_figure("aggregate_tps", [10.0, 11.0, 12.0, 12.0, 13.0, 14.0])
    assert (wide.ci_low, wide.ci_high) == (10.0, 14.0) and "interval of the median (binomial, distribution-free) wider than +-5%" in wide.note
    assert summary._median_figure("aggregate_tps", [100.0, 100.5, 101.0, 100.2, 100.1, 100.3]).note is None
    once = summary._median_figure("aggregate_tps", [100.0])
    assert (once.value, once.value_min, once.value_max) == (100.0, None, None)  # one repeat: no range to show
    (one_sample, *_) = summary.percentile_figures("tpot", [6.1], "ms", "per request", summary.REQUESTS, median_metric="tpot_ms")
    assert (one_sample.value, one_sample.value_min, one_sample.value_max) == (6.1, None, None)


def test_arrivals_constant_poisson_and_gamma():
    constant = workloads.arrival_offsets(Load(arrival="constant", requests=5), 4.0, 0)
    assert constant == pytest.approx([0, 0.25, 0.5, 0.75, 1.0])
    poisson = workloads.arrival_offsets(Load(requests=4000), 4.0, 0)
    assert poisson[-1] / (len(poisson) - 1) == pytest.approx(0.25, rel=0.05)  # mean gap 1/rate
    assert poisson == workloads.arrival_offsets(Load(requests=4000), 4.0, 0)  # the seed fixes them
    assert poisson != workloads.arrival_offsets(Load(requests=4000), 4.0, 1)  # each repeat its own
    bursty = workloads.arrival_offsets(Load(arrival="gamma", burstiness=0.5, requests=4000), 4.0, 0)
    assert bursty[-1] / (len(bursty) - 1) == pytest.approx(0.25, rel=0.1)  # same mean rate, burstier
    timed = workloads.arrival_offsets(Load(arrival="constant", duration_s=1.0), 4.0, 0)
    assert timed == pytest.approx([0, 0.25, 0.5, 0.75])


def test_synthetic_lengths_are_drawn_from_the_seed():
    code = Workload("code", "single", ("Write code.",), 48, None, 1, False, (1,))
    load = Load(input_tokens=(100, 200), output_tokens=(10, 20), seed=3)
    first = workloads.requests(code, load, 50, 0)
    assert first == workloads.requests(code, load, 50, 0)
    assert {10, 20} <= {r.output_tokens for r in first} <= set(range(10, 21))
    lengths = [len(r.turns[0]) // workloads.CHARS_PER_TOKEN for r in first]
    assert 90 <= min(lengths) and max(lengths) <= 210
    assert [r.output_tokens for r in workloads.requests(code, Load(), 3, 0)] == [48, 48, 48]


@pytest.fixture
def repo(tmp_path) -> Path:
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    return tmp_path


def spec_of(repo: Path, launch: str = "llamacpp--nospec--once") -> launchspec.LaunchSpec:
    """A launch of the default; by default its no-spec launch of the one-off sets (code-load among them: Launch.once)."""
    cfg = expand.load_run_config(repo, {"nodes": ["local-cpu"]})
    node = expand.load_node("local-cpu", cfg, repo)
    return launchspec.build(cfg, node, next(l for l in node.launches if l.name == launch))


# The workload fields a cell's fingerprint held before load settings existed.
CELL_WORKLOAD_FIELDS = ("name", "kind", "prompts", "output_tokens", "prompt_tokens", "turns", "salt", "concurrency")


def test_closed_loop_cells_without_load_settings_keep_their_fingerprints(repo):
    # multi-turn (a one-off set): a default workload still written with its prompts; a class drawn from a prompt set
    # has more fields
    spec = spec_of(repo)
    cell = next(c for c in spec.cells if c.workload.name == "multi-turn")
    assert cell.load == Load() and cell.key == "multi-turn--c1--nocap"
    # The cell fingerprint as it was computed before loads (and repeats to a precision) existed, under the
    # current definitions version (a new one measures every cell again, on purpose: test_definitions.py).
    before = hashlib.sha256(json.dumps({
        "server": spec.server_fingerprint, "definitions": launchspec.DEFINITIONS,
        "workload": {k: getattr(cell.workload, k) for k in CELL_WORKLOAD_FIELDS},
        "concurrency": 1, "cap": None,
        "measure": {k: v for k, v in dataclasses.asdict(spec.measure).items()
                    if k not in launchspec.NOT_IN_CELL_IDENTITY + launchspec.PRECISION_SETTINGS}},
        sort_keys=True, default=str).encode()).hexdigest()[:16]
    assert spec.cell_fingerprint(cell) == before


def test_rate_cells_have_their_own_keys_and_survive_the_spec_file(repo, tmp_path):
    spec = spec_of(repo)
    keys = [c.key for c in spec.cells]
    assert {"code-load--c4--nocap", "code-load--r2--nocap", "code-load--r4--nocap"} <= set(keys)
    assert len(set(keys)) == len(keys)
    again = launchspec.read(launchspec.write(spec, tmp_path / "launch.json"))
    assert again == spec
    rate_cell = next(c for c in again.cells if c.rate == 2)
    assert rate_cell.concurrency is None and rate_cell.load.arrival == "poisson"
    assert len({spec.cell_fingerprint(c) for c in spec.cells}) == len(spec.cells)


def test_an_open_loop_without_an_end_names_the_file_and_field(repo):
    path = repo / "configs/workloads/code-load.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["load"].pop("requests")
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"code-load.yaml: load.rates: an open-loop run needs load.requests or load.duration_s"):
        spec_of(repo)


def test_steady_energy_is_the_counters_delta_interpolated_at_the_windows_edges():
    def sample(t, watts, joules, gpu="GPU-a"):
        return {"t": t, "gpu_uuid": gpu, "power_w": watts, "energy_j": joules, "memory_used_mib": 1.0}

    # One GPU whose counter reads 0, 100, 300, 600 J at 0, 1, 2, 3 s; a second at 200 W throughout.
    samples = [sample(t, w, j) for t, w, j in ((0.0, 100.0, 0.0), (1.0, 200.0, 100.0), (2.0, 300.0, 300.0), (3.0, 300.0, 600.0))]
    samples += [sample(t, 200.0, 200.0 * t, "GPU-b") for t in (0.0, 1.0, 2.0, 3.0)]
    energy, power = summary.steady_telemetry_figures([(0.5, 2.5, 100, samples), (5.0, 6.0, 10, [])])
    # GPU-a: 450 - 50 J interpolated at 2.5 and 0.5 s; GPU-b: 400 J. The window without samples is left out, named.
    assert energy.value == pytest.approx((400 + 400) / 100) and "steady windows only (2.0 s in 1 repeats, 1 left out" in energy.note
    assert power.value == pytest.approx((400 + 500) / 2) and power.n == 2  # summed over GPUs at 1 s and 2 s
    assert summary.steady_telemetry_figures([(0.0, 2.0, 100, [])])[0].value is None
