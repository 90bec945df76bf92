"""The load client: which delta counts as the first token, what usage it keeps, how tokens per chunk are
learnt, how its loops send, and broken streams that become failed requests instead of crashes.

Against the synthetic engine (stackbench.rehearsal.standin, a test double) for what it streams; against a
scripted stream (tests/support/scripted_sse.py, a test double) for when: on a SteppedClock every stamp is the
scripted time of its chunk, so the timings are checked exactly, never against this machine's pace (that is
tests/integration/test_client_pace.py)."""

import asyncio
import time
from collections import Counter
from dataclasses import replace

import pytest
from scripted_sse import Answer, ScriptedServer, SteppedClock, chunk

from stackbench.measure.client import RequestRecord, StreamClient, run_open_loop, run_streams
from stackbench.measure.workloads import Request
from stackbench.rehearsal.standin import StandinEngine, Timing

CONTINUOUS_USAGE = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def one_request(timing: Timing, extras: dict | None = None) -> RequestRecord:
    async def scenario(url):
        client = StreamClient(url, "synthetic", extras or {}, stall_timeout_s=10, request_timeout_s=30)
        try:
            return await client.chat([{"role": "user", "content": "hi"}], timing.output_tokens, 0, 0)
        finally:
            await client.aclose()

    with StandinEngine(timing) as engine:
        return asyncio.run(scenario(engine.base_url))


def stepped(answer: Answer) -> RequestRecord:
    """One request to a scripted stream on a SteppedClock from 0: each chunk is stamped with its scripted time."""
    clock = SteppedClock()

    async def scenario(url):
        client = StreamClient(url, "m", {}, stall_timeout_s=10, request_timeout_s=30, clock=clock)
        try:
            return await client.chat([{"role": "user", "content": "hi"}], 4, 0, 0)
        finally:
            await client.aclose()

    with ScriptedServer([answer], clock=clock) as server:
        return asyncio.run(scenario(server.base_url))


def test_the_first_token_is_the_first_reasoning_delta_not_the_first_content():
    record = stepped(Answer([(0.25, chunk({"role": "assistant", "content": ""})), (0.25, chunk({"reasoning_content": "t0 "})),
                             (0.125, chunk({"reasoning_content": "t1 "})), (0.125, chunk({"content": "t2 "})),
                             (0.0, chunk(None, {"prompt_tokens": 4, "completion_tokens": 3}))]))
    assert record.status == "ok"
    assert record.ttft_s == 0.5  # the first reasoning; the content came at 0.75 s
    assert record.ttfc_s == 0.25  # vLLM's clock starts at the role-only chunk
    assert record.chunk_times == [0.5, 0.625, 0.75] and record.t_end == 0.75  # each chunk at its own arrival
    assert record.counted_text == "reasoning+content"


def test_usage_keeps_reasoning_and_cached_prompt_tokens():
    timing = Timing(reasoning_tokens=12, content_tokens=6, interval_s=0.01, ttft_s=0.05)
    record = one_request(timing)
    assert record.reasoning.startswith("t0 ") and record.content.startswith("t13 ")  # the stand-in thinks first
    assert (record.completion_tokens, record.reasoning_tokens) == (19, 13)
    assert (record.prompt_tokens, record.cached_prompt_tokens) == (40, 8)
    assert record.processed_prompt_tokens == 32  # prefill ran on the uncached tokens only
    row = record.to_row()
    assert row["counted_text"] == "reasoning+content" and row["reasoning_chars"] == len(record.reasoning)


def test_llamacpp_prompt_n_is_the_processed_count():
    record = RequestRecord(stream=0, turn=0, t_submit=0.0, prompt_tokens=40, cached_prompt_tokens=None,
                           server={"server_prompt_processed": 12})
    assert record.processed_prompt_tokens == 12


def test_the_standins_usage_per_chunk_is_learnt_as_each_chunks_token_count():
    timing = Timing(interval_s=0.001, ttft_s=0.001, tokens_per_chunk=3, reasoning_tokens=15, content_tokens=15)
    record = one_request(timing, CONTINUOUS_USAGE)
    assert record.chunk_token_counts[:3] == [1, 4, 7]
    assert len(record.per_token_itl_ms()) == 30  # one entry per token after the first
    assert one_request(timing).chunk_token_counts == []  # usage on the final chunk only


def decode_stream(usage_per_chunk: bool) -> Answer:
    """A role-only chunk at once, the first token at 0.25 s, then three chunks of 3 tokens 62.5 ms apart (10 tokens)."""
    def text(i: int, tokens: int) -> str:
        return chunk({"content": f"t{i} "}, {"prompt_tokens": 4, "completion_tokens": tokens} if usage_per_chunk else None)

    return Answer([(0.0, chunk({"role": "assistant", "content": ""})), (0.25, text(0, 1)),
                   *((0.0625, text(i, 1 + 3 * i)) for i in (1, 2, 3)), (0.0, chunk(None, {"prompt_tokens": 4, "completion_tokens": 10}))])


def test_per_token_itl_from_usage_streamed_per_chunk():
    record = stepped(decode_stream(usage_per_chunk=True))
    assert record.chunk_token_counts == [1, 4, 7, 10]
    assert record.per_token_itl_ms() == [62.5 / 3] * 9  # each 62.5 ms gap over the 3 tokens it brought
    assert record.inter_chunk_ms() == [250.0, 62.5, 62.5, 62.5]  # vLLM's ITL: a gap per chunk, the role-only one's too


def test_per_token_itl_from_the_final_count_spread_over_chunks():
    record = stepped(decode_stream(usage_per_chunk=False))
    assert record.chunk_token_counts == []
    # 10 tokens over 4 chunks: each 62.5 ms gap counts as 62.5 / (10 / 4) ms per token.
    assert record.per_token_itl_ms() == [25.0] * 3


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
    # Three chunks at once, then nothing for an hour: the stall, not this machine's pace, trips the timeout.
    stalling = Answer([(0.0, chunk({"reasoning_content": f"t{i} "})) for i in range(3)] + [(3600.0, chunk({"content": "late"}))])

    async def scenario(url):
        client = StreamClient(url, "m", {}, stall_timeout_s=0.5, request_timeout_s=30)
        try:
            return await client.chat([{"role": "user", "content": "hi"}], 4, 0, 0)
        finally:
            await client.aclose()

    with ScriptedServer([stalling]) as server:
        record = asyncio.run(scenario(server.base_url))
    assert (record.status, record.error) == ("timeout", "stream stalled: nothing received for 0.5 s")
    assert record.reasoning == "t0 t1 t2 "


def test_a_server_that_is_not_there_fails_the_request():
    async def scenario():
        client = StreamClient("http://127.0.0.1:9", "m", {}, stall_timeout_s=1, request_timeout_s=5)
        try:
            return await client.chat([{"role": "user", "content": "hi"}], 4, 0, 0)
        finally:
            await client.aclose()

    record = asyncio.run(scenario())
    assert record.status == "failed" and record.error.startswith("ClientConnectorError: Cannot connect to host 127.0.0.1:9")


def scripted_load(answers: list[Answer], scenario_of, together: int = 1):
    async def scenario(url):
        client = StreamClient(url, "m", {}, stall_timeout_s=10, request_timeout_s=30)
        try:
            return await scenario_of(client)
        finally:
            await client.aclose()

    with ScriptedServer(answers, together=together) as server:
        return asyncio.run(scenario(server.base_url))


ONE_TOKEN = Answer([(0.0, chunk({"content": "a"})), (0.0, chunk(None, {"prompt_tokens": 1, "completion_tokens": 1}))])
SEND_AT_S = [0.0, 0.1, 0.4]


def test_open_loop_sends_at_its_arrival_times_whatever_is_in_flight():
    requests = [Request(("hi",), 4)] * 3
    started = time.perf_counter()
    # The server answers none of the three before all three are in: a loop that waited for an answer before its
    # next send would get none, so every request is sent while the earlier ones are in flight.
    records = scripted_load([ONE_TOKEN], lambda client: run_open_loop(client, requests, SEND_AT_S), together=3)
    assert sorted(r.stream for r in records) == [0, 1, 2] and all(r.status == "ok" for r in records)
    # None before its time after the start (asyncio may fire a timer up to its clock's 1 ns resolution early).
    assert all(r.t_submit - started >= SEND_AT_S[r.request] - 1e-6 for r in records)


def test_closed_loop_streams_start_together_and_each_sends_its_next_request_after_its_answer():
    requests = [Request(("hi",), 4)] * 4
    # The server answers a pair of requests at once: the streams' first requests are in flight together.
    records = scripted_load([ONE_TOKEN], lambda client: run_streams(client, requests, 2), together=2)
    assert all(r.status == "ok" for r in records)
    for stream in (0, 1):
        first, second = [r for r in records if r.stream == stream]
        assert first.t_end <= second.t_submit


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
    # The first request in is held until all six are: only a stream taking every request left sends the sixth.
    held = replace(ONE_TOKEN, after_requests=6)
    records = scripted_load([held, ONE_TOKEN], lambda client: run_streams(client, [Request(("hi",), 4)] * 6, 2))
    assert all(r.status == "ok" for r in records) and len(records) == 6
    assert sorted(Counter(r.stream for r in records).values()) == [1, 5]


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


class RecordingClient:
    """A test double of StreamClient.chat: keeps what each request would send and answers "ok" at once."""

    def __init__(self):
        self.sent = []

    async def chat(self, messages, output_tokens, stream, turn, final_hook=None, tools=()):
        self.sent.append((list(messages), tools))
        return RequestRecord(stream=stream, turn=turn, t_submit=0.0, parts=[f"reply {turn}"])


def test_a_texts_earlier_messages_and_tools_are_sent_and_its_set_and_row_recorded():
    tools = ({"type": "function", "function": {"name": "area", "parameters": {"type": "object"}}},)
    request = Request(("first", "second"), 8, prefix=({"role": "system", "content": "Be brief."},), tools=tools,
                      prompt_set="mt-bench-2turn", prompt_row="81")
    client = RecordingClient()
    records = asyncio.run(run_streams(client, [request], 1))
    assert [m["role"] for m in client.sent[1][0]] == ["system", "user", "assistant", "user"]
    assert client.sent[0][1] == tools and client.sent[1][0][2]["content"] == "reply 0"
    assert [(r.prompt_set, r.prompt_row, r.turn) for r in records] == [("mt-bench-2turn", "81", 0), ("mt-bench-2turn", "81", 1)]
    assert {"prompt_set", "prompt_row"} <= set(records[0].to_row())
    body = StreamClient("http://x", "m", {"tools": ["the workload's"]}, 1, 1).body([], 8, tools)
    assert body["tools"] == list(tools)  # a text's own tools over the workload's
