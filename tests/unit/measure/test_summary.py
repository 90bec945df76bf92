"""Client + summary on the synthetic engine's own stream (stackbench.rehearsal.standin, a test double whose
timing is known in advance), replayed at the times it schedules on a clock the test holds: TTFT, decode rate,
per-token ITL, inter-chunk latency, TPOT and acceptance come out exactly as it was built to emit; percentiles
carry their sample count. The same figures measured live on this machine are
tests/integration/test_measure_synthetic.py."""

import asyncio
import json
from dataclasses import replace

import httpx
import pytest
from scripted_sse import Answer, ScriptedServer, SteppedClock

from stackbench.engines.vllm import VllmAdapter
from stackbench.host import telemetry
from stackbench.measure import summary
from stackbench.measure.client import RequestRecord, StreamClient, run_conversations
from stackbench.rehearsal.standin import StandinEngine, Timing

TIMING = Timing(ttft_s=1.0, interval_s=0.03, tokens_per_chunk=3, reasoning_tokens=30, content_tokens=30, spec_tokens=3)
VLLM_TPOT_MS = (TIMING.ttft_s + (TIMING.output_tokens - 1) / TIMING.decode_tps) / (TIMING.output_tokens - 1) * 1000
CONTINUOUS_USAGE = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def standin_answer(timing: Timing, extras: dict, requests: int):
    """What the stand-in streams for one request, at the times it schedules them (rehearsal/standin.py: the
    role-only chunk at once, the first token ttft_s in, every later text chunk interval_s after the one before,
    the closing chunks at once), and its speculative counters' deltas over `requests` such requests. It is
    asked at its own pace cut to a millisecond: what it streams does not depend on its pace."""
    adapter, fast = VllmAdapter(), replace(timing, ttft_s=0.001, interval_s=0.001)
    body = StreamClient("", "synthetic", extras, stall_timeout_s=10, request_timeout_s=60).body([{"role": "user", "content": "hi"}],
                                                                                                  timing.output_tokens)
    with StandinEngine(fast) as engine:
        before = adapter.spec_counters(httpx.get(engine.base_url + "/metrics").text)
        streams = [httpx.post(engine.base_url + "/v1/chat/completions", json=body, timeout=30).text for _ in range(requests)]
        after = adapter.spec_counters(httpx.get(engine.base_url + "/metrics").text)
    steps, texts = [], 0
    for payload in [line.removeprefix("data: ") for line in streams[0].splitlines() if line.startswith("data: {")]:
        delta = (json.loads(payload)["choices"] or [{}])[0].get("delta") or {}
        carries_text = any(delta.get(kind) for kind in ("content", "reasoning_content", "tool_calls"))
        steps.append((0.0 if not carries_text else timing.interval_s if texts else timing.ttft_s, payload))
        texts += carries_text
    return Answer(steps), after.minus(before)


def measure_cell(timing: Timing, extras: dict, repeats: int = 3, streams: int = 2):
    """The cell's repeats as the client records the stand-in's answers on a SteppedClock (each chunk stamped at
    its scheduled time), and their figures: exactly what the stand-in was built to emit, whatever this machine's pace."""
    answer, counters = standin_answer(timing, extras, repeats * streams)
    clock = SteppedClock()

    async def cell(url):
        client = StreamClient(url, "synthetic", extras, stall_timeout_s=10, request_timeout_s=60, clock=clock)
        try:
            return [await run_conversations(client, [["hi"]] * streams, timing.output_tokens) for _ in range(repeats)]
        finally:
            await client.aclose()

    with ScriptedServer([answer], together=streams, clock=clock) as server:  # the streams' requests answered alike, at once
        records = asyncio.run(cell(server.base_url))
    return records, {f.metric: f for f in summary.cell_figures(records, counters)}


@pytest.fixture(scope="module")
def streamed_usage():
    return measure_cell(TIMING, CONTINUOUS_USAGE)


def test_ttft_decode_rate_and_tpot_match_the_engine(streamed_usage):
    records, figures = streamed_usage
    assert figures["ttft_s"].value == pytest.approx(TIMING.ttft_s)
    assert figures["decode_tps"].value == pytest.approx(TIMING.decode_tps)  # 100 tok/s
    # vLLM's TPOT starts at the role-only chunk the double sends at once: prefill and decode over 60 tokens.
    assert figures["tpot_ms"].value == pytest.approx(VLLM_TPOT_MS)
    assert figures["tpot_ms"].n == 6 and "fewer than 100" in figures["tpot_ms"].note


def test_per_token_itl_and_inter_chunk_latency_are_told_apart(streamed_usage):
    _, figures = streamed_usage
    assert figures["itl_p50_ms"].value == pytest.approx(TIMING.itl_ms)  # 10 ms per token
    assert figures["icl_p50_ms"].value == pytest.approx(TIMING.interval_s * 1000)  # 30 ms per chunk
    assert figures["itl_p50_ms"].n == 6 * 60 and "usage streamed per chunk" in figures["itl_p50_ms"].note
    assert figures["icl_p50_ms"].n == 6 * 21  # vLLM's ITL: the role-only chunk to the first text is a gap too
    assert figures["itl_p99_ms"].stat == "p99" and "fewer than" not in figures["itl_p99_ms"].note


def test_acceptance_from_counter_deltas(streamed_usage):
    _, figures = streamed_usage
    assert figures["accept_len"].value == pytest.approx(TIMING.accept_len)  # 3 tokens per verification step
    assert figures["accept_rate"].value == pytest.approx(2 / 3)
    assert figures["accept_rate_pos1"].value == 1.0 and figures["accept_rate_pos2"].value == 1.0


def test_the_basis_says_reasoning_was_counted(streamed_usage):
    records, _ = streamed_usage
    assert summary.cell_basis(records) == {"counted_text": "reasoning+content", "tokens_per_chunk": "usage streamed per chunk"}


def test_without_streamed_usage_itl_spreads_the_final_count():
    records, figures = measure_cell(TIMING, {}, repeats=1, streams=1)
    # 61 tokens over 21 chunks: 30 ms / (61 / 21) per token, about 3% above the true 10 ms.
    assert figures["itl_p50_ms"].value == pytest.approx(30 * 21 / 61)
    assert summary.cell_basis(records)["tokens_per_chunk"] == "final count spread over chunks"


def test_percentiles_carry_their_count_and_say_when_it_is_small():
    few = summary.percentile_figures("itl", [1.0, 2.0, 3.0], "ms", "test", summary.TOKENS)
    assert [(f.metric, f.value, f.n) for f in few] == [("itl_p50_ms", 2.0, 3), ("itl_p90_ms", 2.8, 3), ("itl_p99_ms", 2.98, 3)]
    assert all("only 3 samples" in f.note for f in few) and {f.spread_over for f in few} == {"tokens"}
    many = summary.percentile_figures("itl", [float(v) for v in range(200)], "ms", "test", summary.REQUESTS)
    assert many[0].n == 200 and "fewer" not in many[0].note


def test_prefill_rate_uses_processed_tokens():
    record = RequestRecord(stream=0, turn=0, t_submit=0.0, t_first_chunk=0.1, t_first_token=0.5, t_last_token=1.0,
                           t_last_chunk=1.0, t_end=1.0, completion_tokens=10, prompt_tokens=100, cached_prompt_tokens=60)
    record.content_chunks, record.chunk_times = 1, [0.5]
    assert summary.repeat_figures([record])["prefill_tps"] == pytest.approx(40 / 0.5)


def test_telemetry_figures_name_the_window_and_the_energy_source():
    reading = telemetry.WindowReading(duration_s=10.0, energy_j=2000.0, energy_source="energy counter",
                                      power_mean_w=200.0, power_p95_w=240.0, power_samples=20, vram_peak_mib=9000.0,
                                      gpu_uuids=("GPU-a", "GPU-b"), sampler_errors=("NVML error while sampling: GPU is lost",))
    figures = {f.metric: f for f in summary.telemetry_figures(reading, output_tokens=1000)}
    assert figures["energy_j_per_token"].value == 2.0 and "energy counter delta 2000.0 J" in figures["energy_j_per_token"].note
    assert "on the launch's GPUs only: GPU-a, GPU-b" in figures["power_w"].note
    assert (figures["power_w"].value, figures["power_w"].n, figures["power_p95_w"].stat) == (200.0, 20, "p95")
    assert "sampler errors: NVML error while sampling: GPU is lost" in figures["power_w"].note
    assert "power_w_per_gpu" not in figures  # no GPU's own mean read: no per-GPU figure made up from the sum
    empty = telemetry.WindowReading(0.2, None, "no energy figure: why", None, None, 0, None, ("GPU-a",))
    assert [(f.metric, f.value) for f in summary.telemetry_figures(empty, 10)] == [("energy_j_per_token", None)]
    assert summary.telemetry_figures(empty, 10)[0].note.endswith("no energy figure: why")


def test_two_gpus_power_is_carried_per_gpu_beside_the_nodes_total():
    rows = [{"t": t, "gpu_uuid": uuid, "power_w": watts} for t in (0.0, 0.5, 1.0)
            for uuid, watts in (("GPU-a", 300.0), ("GPU-b", 200.0 + 20 * t))]
    by_gpu = telemetry.power_by_gpu(rows)
    assert by_gpu == {"GPU-a": 300.0, "GPU-b": pytest.approx(210.0)}
    reading = telemetry.WindowReading(duration_s=1.0, energy_j=1000.0, energy_source="energy counter", power_mean_w=510.0,
                                      power_p95_w=519.0, power_samples=3, vram_peak_mib=None, gpu_uuids=("GPU-a", "GPU-b"),
                                      power_mean_w_by_gpu=by_gpu)
    figures = {f.metric: f for f in summary.telemetry_figures(reading, output_tokens=100)}
    assert (figures["power_w"].value, figures["power_w_per_gpu"].value) == (510.0, 300.0)
    assert "each: GPU-a 300.0 W, GPU-b 210.0 W" in figures["power_w_per_gpu"].note
    assert (figures["energy_j_per_token"].value, figures["energy_j_per_token_per_gpu"].value) == (10.0, 5.0)


def test_the_aggregate_decode_rate_sums_the_streams_rates_without_ttft_and_the_wall_aggregate_includes_it(streamed_usage):
    _, figures = streamed_usage
    # Two streams at 100 tok/s each, after a 1 s TTFT: seed 000's "90.9 + 79.2" kind of sum is 200; the wall
    # aggregate (61 tokens each over ~1.6 s) is far below it.
    assert figures["aggregate_decode_tps"].value == pytest.approx(2 * TIMING.decode_tps)
    assert figures["aggregate_decode_tps"].ttft_included == "no" and figures["aggregate_tps"].ttft_included == "yes"
    assert figures["aggregate_tps"].value < 0.5 * figures["aggregate_decode_tps"].value
    wall = TIMING.ttft_s + (TIMING.output_tokens - 1) / TIMING.tokens_per_chunk * TIMING.interval_s
    assert figures["request_wall_s"].value == pytest.approx(wall)


def test_the_aggregate_decode_rate_takes_each_streams_mean_over_its_requests():
    def record(stream, start, rate):
        r = RequestRecord(stream=stream, turn=0, t_submit=start, t_first_chunk=start + 1, t_first_token=start + 1,
                          t_last_token=start + 1 + 10 / rate,
                          t_last_chunk=start + 1 + 10 / rate, t_end=start + 1 + 10 / rate, completion_tokens=11)
        r.content_chunks, r.chunk_times = 11, [start + 1]
        return r

    records = [record(0, 0.0, 90.0), record(0, 2.0, 92.0), record(1, 0.0, 80.0)]
    assert summary.repeat_figures(records)["aggregate_decode_tps"] == pytest.approx(91.0 + 80.0)


def record(stream: int, first: float, last: float) -> RequestRecord:
    return RequestRecord(stream=stream, turn=0, t_submit=first, t_first_token=first, t_last_token=last)


def test_two_perfectly_parallel_streams_of_two_requests_overlap_fully():
    records = [record(0, 0, 1), record(0, 1, 2), record(1, 0, 1), record(1, 1, 2)]
    assert summary.stream_overlap(records) == pytest.approx(1.0)


def test_a_stream_that_waits_for_the_other_does_not_overlap():
    records = [record(0, 0, 1), record(0, 1, 2), record(1, 2, 3), record(1, 3, 4)]
    assert summary.stream_overlap(records) == pytest.approx(0.0)


def test_a_median_over_three_repeats_carries_no_interval():
    figure = summary._median_figure("decode_tps", [9.0, 10.0, 30.0])
    # The mean's Student's t interval would centre on 16.3; the median's has no 95% interval at 3 repeats.
    assert (figure.value, figure.ci_low, figure.ci_high) == (10.0, None, None)
    assert figure.spread_over == "repeats" and figure.repeat_values == (9.0, 10.0, 30.0)


def test_a_speculating_server_that_drafted_nothing_says_so_and_one_without_counters_says_nothing():
    from stackbench.engines.base import SpecCounters

    (idle,) = summary.acceptance_figures(SpecCounters(), repeats=2)
    assert (idle.metric, idle.value, idle.n) == ("spec_drafts", 0.0, 2)  # analysis.decide reads it: did not speculate
    assert summary.acceptance_figures(None, repeats=2) == []  # no speculation on the server: no counters
    drafted = {f.metric: f.value for f in summary.acceptance_figures(SpecCounters(drafts=4, draft_tokens=16, accepted=6), 2)}
    assert drafted["spec_drafts"] == 4 and drafted["accept_len"] == 2.5
