"""The load client's pace on this machine, against the synthetic engine (stackbench.rehearsal.standin, a test
double with timing known in advance): the open loop sends on its schedule, and a closed-loop stream sends its
next request as soon as its answer ends. Each is judged against the same run's own figures (its schedule, its
requests' durations), never an absolute speed; what the loops do, whatever the pace, is checked exactly in
tests/unit/measure/test_client.py."""

import asyncio

import pytest

from stackbench.measure.client import StreamClient, run_open_loop, run_streams
from stackbench.measure.workloads import Request
from stackbench.rehearsal.standin import StandinEngine, Timing

pytestmark = pytest.mark.integration


def run_load(timing: Timing, scenario_of):
    async def scenario(url):
        client = StreamClient(url, "synthetic", {}, stall_timeout_s=10, request_timeout_s=30)
        try:
            return await scenario_of(client)
        finally:
            await client.aclose()

    with StandinEngine(timing) as engine:
        return asyncio.run(scenario(engine.base_url))


def test_open_loop_sends_on_its_schedule_while_earlier_requests_stream():
    timing = Timing(ttft_s=0.05, interval_s=0.02, reasoning_tokens=0, content_tokens=30)  # 0.25 s per request
    send_at_s = [0.0, 0.1, 0.4]
    requests = [Request(("hi",), timing.output_tokens)] * 3
    records = sorted(run_load(timing, lambda client: run_open_loop(client, requests, send_at_s)), key=lambda r: r.request)
    assert all(r.status == "ok" for r in records)
    # Each send within a third of the schedule's shortest gap of its time after the first.
    offsets = [r.t_submit - records[0].t_submit for r in records[1:]]
    assert offsets == pytest.approx(send_at_s[1:], abs=min(b - a for a, b in zip(send_at_s, send_at_s[1:])) / 3)
    assert records[1].t_submit < records[0].t_end  # the second went out while the first still streamed


def test_closed_loop_streams_send_their_next_request_as_soon_as_the_answer_ends():
    timing = Timing(ttft_s=0.05, interval_s=0.02, reasoning_tokens=0, content_tokens=15)  # 0.15 s per request
    requests = [Request(("hi",), timing.output_tokens)] * 4
    records = run_load(timing, lambda client: run_streams(client, requests, 2))
    for stream in (0, 1):
        first, second = [r for r in records if r.stream == stream]
        # No idling between a stream's requests: the gap is a small share of the answer it waited for.
        assert first.t_end <= second.t_submit < first.t_end + (first.t_end - first.t_submit) / 3
    starts = sorted(r.t_submit for r in records)
    assert starts[1] - starts[0] < (starts[2] - starts[0]) / 3  # the streams start together, then each waits its answer
