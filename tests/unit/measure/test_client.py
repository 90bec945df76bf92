"""The load client against the synthetic engine (stackbench.rehearsal.standin, a test double with timing
known in advance): which delta counts as the first token, what usage it keeps, how tokens per chunk
are learnt, and broken streams that become failed requests instead of crashes."""

import asyncio
from dataclasses import replace

import pytest
from scripted_sse import Answer, ScriptedServer, chunk

from stackbench.measure.client import RequestRecord, StreamClient, run_open_loop, run_streams
from stackbench.measure.workloads import Request
from stackbench.rehearsal.standin import StandinEngine, Timing

CONTINUOUS_USAGE = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def one_request(timing: Timing, extras: dict | None = None, stall_timeout_s: float = 10) -> RequestRecord:
    async def scenario(url):
        client = StreamClient(url, "synthetic", extras or {}, stall_timeout_s=stall_timeout_s, request_timeout_s=30)
        try:
            return await client.chat([{"role": "user", "content": "hi"}], timing.output_tokens, 0, 0)
        finally:
            await client.aclose()

    with StandinEngine(timing) as engine:
        return asyncio.run(scenario(engine.base_url))


def test_the_first_token_is_the_first_reasoning_delta_not_the_first_content():
    timing = Timing(ttft_s=0.5, interval_s=0.05, reasoning_tokens=30, content_tokens=6)
    record = one_request(timing)
    assert record.status == "ok"
    assert record.ttft_s == pytest.approx(0.5, abs=0.1)  # content starts 0.5 + 10 x 0.05 s = 1.0 s in
    assert record.ttfc_s < 0.1  # the role-only chunk arrives at once
    assert record.counted_text == "reasoning+content"
    assert record.reasoning.startswith("t0 ") and record.content.startswith("t31 ")


def test_usage_keeps_reasoning_and_cached_prompt_tokens():
    timing = Timing(reasoning_tokens=12, content_tokens=6, interval_s=0.01, ttft_s=0.05)
    record = one_request(timing)
    assert (record.completion_tokens, record.reasoning_tokens) == (19, 13)
    assert (record.prompt_tokens, record.cached_prompt_tokens) == (40, 8)
    assert record.processed_prompt_tokens == 32  # prefill ran on the uncached tokens only
    row = record.to_row()
    assert row["counted_text"] == "reasoning+content" and row["reasoning_chars"] == len(record.reasoning)


def test_llamacpp_prompt_n_is_the_processed_count():
    record = RequestRecord(stream=0, turn=0, t_submit=0.0, prompt_tokens=40, cached_prompt_tokens=None,
                           server={"server_prompt_processed": 12})
    assert record.processed_prompt_tokens == 12


def test_per_token_itl_from_usage_streamed_per_chunk():
    timing = Timing(interval_s=0.03, tokens_per_chunk=3, reasoning_tokens=15, content_tokens=15)
    record = one_request(timing, CONTINUOUS_USAGE)
    assert record.chunk_token_counts[:3] == [1, 4, 7]
    itl = record.per_token_itl_ms()
    assert len(itl) == 30  # one entry per token after the first
    assert sorted(itl)[15] == pytest.approx(10.0, rel=0.1)  # 30 ms gap / 3 tokens
    assert sorted(record.inter_chunk_ms())[5] == pytest.approx(30.0, rel=0.1)


def test_per_token_itl_from_the_final_count_spread_over_chunks():
    timing = Timing(interval_s=0.03, tokens_per_chunk=3, reasoning_tokens=15, content_tokens=15)
    record = one_request(timing)
    assert record.chunk_token_counts == []
    # 31 tokens over 11 chunks: each 30 ms gap counts as 30 / (31 / 11) ms per token.
    assert sorted(record.per_token_itl_ms())[5] == pytest.approx(30.0 * 11 / 31, rel=0.1)


def test_tpot_follows_vllm_latency_minus_ttft_over_tokens_after_the_first():
    # The role-only chunk at 0.3 s is vLLM's TTFT; a finish chunk without text at 1.5 s ends its latency.
    record = RequestRecord(stream=0, turn=0, t_submit=0.0, t_first_chunk=0.3, t_first_token=0.5, t_last_token=1.4,
                           t_last_chunk=1.5, completion_tokens=11)
    assert record.tpot_ms == pytest.approx(120.0)  # (1.5 - 0.3) s / 10 tokens
    assert record.decode_tps == pytest.approx(10 / 1.0)  # first text to the last choices chunk


def test_the_usage_only_chunk_ends_no_clock_and_the_role_chunk_starts_vllms():
    record = RequestRecord(stream=0, turn=0, t_submit=0.0)
    take = StreamClient._take
    take(record, {"choices": [{"delta": {"role": "assistant", "content": ""}}]}, b"", 0.1, None)
    take(record, {"choices": [{"delta": {"content": "a"}}]}, b"", 0.3, None)
    take(record, {"choices": [{"delta": {}, "finish_reason": "stop"}]}, b"", 0.4, None)
    take(record, {"choices": [], "usage": {"completion_tokens": 3, "prompt_tokens": 5}}, b"", 0.9, None)
    assert (record.ttfc_s, record.ttft_s, record.t_last_chunk, record.t_last_token) == (0.1, 0.3, 0.4, 0.3)
    assert record.inter_chunk_ms() == pytest.approx([200.0, 100.0])  # vLLM's ITL: gaps between choices chunks
    assert record.tokens == 3


def test_a_non_json_data_line_fails_the_request_with_the_reason():
    record = one_request(Timing(ttft_s=0.02, interval_s=0.01, broken_line_after=2))
    assert record.status == "failed"
    assert record.error == "SSE data line is not a JSON object: '<html>upstream reset</html>'"
    assert record.reasoning.startswith("t0 ")  # what arrived before is kept


def test_the_reasoning_field_counts_as_a_first_token_too():
    record = RequestRecord(stream=0, turn=0, t_submit=0.0)
    assert StreamClient._take(record, {"choices": [{"delta": {"reasoning": "x"}}]}, b"", 1.0, None)
    assert record.counted_text == "reasoning" and record.t_first_token == 1.0


def test_a_stream_that_stalls_times_out_and_keeps_what_arrived():
    record = one_request(Timing(ttft_s=0.02, interval_s=0.01, stall_after=2), stall_timeout_s=0.5)
    assert (record.status, record.error) == ("timeout", "stream stalled: nothing received for 0.5 s")
    assert record.reasoning == "t0 t1 t2 t3 t4 t5 t6 "


def test_a_server_that_is_not_there_fails_the_request():
    async def scenario():
        client = StreamClient("http://127.0.0.1:9", "m", {}, stall_timeout_s=1, request_timeout_s=5)
        try:
            return await client.chat([{"role": "user", "content": "hi"}], 4, 0, 0)
        finally:
            await client.aclose()

    record = asyncio.run(scenario())
    assert record.status == "failed" and record.error.startswith("ClientConnectorError: Cannot connect to host 127.0.0.1:9")


def run_load(timing: Timing, scenario_of):
    async def scenario(url):
        client = StreamClient(url, "synthetic", {}, stall_timeout_s=10, request_timeout_s=30)
        try:
            return await scenario_of(client)
        finally:
            await client.aclose()

    with StandinEngine(timing) as engine:
        return asyncio.run(scenario(engine.base_url))


def test_open_loop_sends_at_its_arrival_times_whatever_is_in_flight():
    timing = Timing(ttft_s=0.05, interval_s=0.02, reasoning_tokens=0, content_tokens=30)  # 0.25 s per request
    requests = [Request(("hi",), timing.output_tokens)] * 3
    records = run_load(timing, lambda client: run_open_loop(client, requests, [0.0, 0.1, 0.4]))
    submits = sorted(r.t_submit for r in records)
    # The second goes out while the first still streams; each request is its own stream.
    assert [b - submits[0] for b in submits[1:]] == pytest.approx([0.1, 0.4], abs=0.03)
    assert sorted(r.stream for r in records) == [0, 1, 2] and all(r.status == "ok" for r in records)


def test_closed_loop_streams_send_their_requests_back_to_back():
    timing = Timing(ttft_s=0.05, interval_s=0.02, reasoning_tokens=0, content_tokens=15)
    requests = [Request(("hi",), timing.output_tokens)] * 4
    records = run_load(timing, lambda client: run_streams(client, requests, 2))
    for stream in (0, 1):
        first, second = [r for r in records if r.stream == stream]
        assert first.t_end <= second.t_submit < first.t_end + 0.05
    starts = sorted(r.t_submit for r in records)
    assert starts[1] - starts[0] < 0.05 and starts[2] - starts[0] > 0.1  # together, then each waits its 0.15 s answer


class DroppingServer:
    """Fault injection (a test double, not an engine): a raw HTTP server that reads each request and closes
    the connection without answering for the first `drops` connections, then answers with a one-token
    SSE stream; as a llama-server does when a pooled keep-alive connection is closed under a new request."""

    def __init__(self, drops: int):
        self.drops, self.connections = drops, 0

    async def handle(self, reader, writer):
        self.connections += 1
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")))
        await reader.readexactly(length)
        if self.connections <= self.drops:
            writer.close()
            return
        chunk = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
                     b"Content-Length: " + str(len(chunk)).encode() + b"\r\n\r\n" + chunk)
        await writer.drain()
        writer.close()

    def ask(self) -> RequestRecord:
        async def scenario():
            server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            client = StreamClient(f"http://127.0.0.1:{port}", "m", {}, stall_timeout_s=5, request_timeout_s=10)
            try:
                return await client.chat([{"role": "user", "content": "hi"}], 4, 0, 0)
            finally:
                await client.aclose()
                server.close()

        return asyncio.run(scenario())


def test_a_connection_dropped_before_any_answer_is_sent_again():
    record = DroppingServer(drops=1).ask()
    assert record.status == "ok" and record.content == "hi" and record.resent == 1
    assert record.to_row()["resent"] == 1


def test_a_server_that_keeps_dropping_fails_the_request_after_the_resends():
    server = DroppingServer(drops=10)
    record = server.ask()
    assert record.status == "failed" and record.error.startswith("ServerDisconnectedError")
    assert record.resent == StreamClient.RESENDS and server.connections == StreamClient.RESENDS + 1


def test_closed_loop_streams_pull_from_one_queue_so_none_idles_while_requests_wait():
    """A long first request keeps its stream busy; the other stream takes every request left (vLLM's
    --max-concurrency semaphore), instead of idling after a fixed half."""
    timing = Timing(ttft_s=0.02, interval_s=0.01, reasoning_tokens=0, content_tokens=3, follow_request=1)
    requests = [Request(("hi",), 300)] + [Request(("hi",), 4)] * 5  # the double answers max_tokens: 1 s, then 0.03 s each
    records = run_load(timing, lambda client: run_streams(client, requests, 2))
    assert all(r.status == "ok" for r in records) and len(records) == 6
    assert [r.requested_tokens for r in records if r.stream == 0] == [300]
    assert [r.requested_tokens for r in records if r.stream == 1] == [4] * 5


# -- faults, against a scripted SSE server (tests/support/scripted_sse.py, a test double) -------------------
def scripted(answers: list[Answer], monkeypatch) -> tuple[RequestRecord, int]:
    monkeypatch.setattr(StreamClient, "BUSY_BACKOFF_S", 0.01)  # the schedule's shape, not its 3.5 s

    async def one(url):
        client = StreamClient(url, "m", {}, stall_timeout_s=5, request_timeout_s=30)
        try:
            return await client.chat([{"role": "user", "content": "hi"}], 4, 0, 0)
        finally:
            await client.aclose()

    with ScriptedServer(answers) as server:
        record = asyncio.run(one(server.base_url))
    return record, server.requests


ANSWER = Answer([(0.0, chunk({"role": "assistant", "content": ""})), (0.0, chunk({"content": "a b"})),
                 (0.0, chunk(None, {"prompt_tokens": 1, "completion_tokens": 2}))])


def busy(status: int) -> Answer:
    return Answer(status=status, body='{"error": {"message": "too many requests in flight", "code": %d}}' % status)


def test_a_stream_closed_without_done_is_not_an_answer(monkeypatch):
    record, _ = scripted([replace(ANSWER, done=False)], monkeypatch)
    assert (record.status, record.error) == ("failed", "stream closed without [DONE]")
    assert record.content == "a b"  # what arrived is kept


@pytest.mark.parametrize("status", [429, 503])
def test_busy_answers_are_sent_again_after_a_wait(status, monkeypatch):
    record, sent = scripted([busy(status), busy(status), ANSWER], monkeypatch)
    assert (record.status, record.retried, sent) == ("ok", 2, 3)
    assert record.content == "a b" and record.http_status == 200


def test_a_server_busy_past_the_retries_fails_with_its_message(monkeypatch):
    record, sent = scripted([busy(503)], monkeypatch)
    assert sent == StreamClient.BUSY_RETRIES + 1
    assert record.status == "failed"
    assert record.error == "HTTP 503: too many requests in flight (still busy after 3 retries)"


def test_another_4xx_is_rejected_at_once_with_the_servers_message(monkeypatch):
    record, sent = scripted([Answer(status=400, body='{"error": {"message": "max_tokens must be at least 1"}}')], monkeypatch)
    assert (record.status, record.error, sent) == ("rejected", "HTTP 400: max_tokens must be at least 1", 1)
