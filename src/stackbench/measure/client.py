"""The load client: async aiohttp streaming against an OpenAI-compatible chat endpoint.

Per request it records raw timestamps (perf_counter): submit, first chunk, first token, every chunk that
carries text, end; plus the server's own token counts and timings. Aggregation happens later (summary),
so a figure can always be traced back to the requests behind it.

Two clocks per request, proved against vLLM 0.32's own request function
(vllm/benchmarks/lib/endpoint_request_func.py `async_request_openai_chat_completions`, run on the same
streams in tests/integration/test_conformance.py):
- vLLM's: every chunk with non-empty `choices` (a role-only first chunk and a text-less finish chunk
  included; the trailing usage-only chunk excluded) is a "choices chunk". vLLM's TTFT is the first one
  (our `ttfc_s`), its E2EL the last one (`request_wall_s`), its ITL the gaps between them (`icl`), its TPOT
  (E2EL - TTFT) / (output tokens - 1) and its output tokens usage.completion_tokens.
- Ours: the first token is the first delta carrying `content`, `reasoning_content` / `reasoning` or a tool
  call, so a reasoning model's thinking is measured like any other output and a role-only chunk is not a
  token (`ttft_s`); `counted_text` says which kinds arrived.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import asdict, dataclass, field

import aiohttp
import orjson

from stackbench.measure.workloads import Request
from stackbench.results.metrics import SERVER_PROMPT_PROCESSED

# Where the engines put a reasoning parser's output: vLLM and SGLang `reasoning_content`; vLLM >= 0.10 and
# llama.cpp may use `reasoning` (the first that carries text counts).
REASONING_FIELDS = ("reasoning_content", "reasoning")
JSON_HEADERS = {"Content-Type": "application/json"}
BUSY = (429, 503)  # the statuses that mean "try again later" (rate limited, overloaded)


class ServerBusy(Exception):
    """The server answered 429 or 503: worth sending again after a wait."""


@dataclass
class RequestRecord:
    stream: int
    turn: int
    t_submit: float
    requested_tokens: int | None = None  # max_tokens asked (= min_tokens where the engine takes it)
    t_first_chunk: float | None = None  # first chunk with non-empty choices, a role-only delta included (vLLM's TTFT)
    t_first_token: float | None = None  # first delta carrying content or reasoning
    t_last_token: float | None = None
    t_last_chunk: float | None = None  # last chunk with non-empty choices (vLLM's latency ends here, not at usage)
    t_end: float | None = None
    status: str = "ok"  # ok | rejected | failed | timeout
    http_status: int | None = None
    error: str | None = None
    resent: int = 0  # sends again after the server dropped a pooled connection before answering (StreamClient.RESENDS)
    request: int | None = None  # its conversation's index in the list run_streams was given
    salt: str = ""  # its conversation's salt (workloads.salt; "" unsalted): the same on every variant of a round
    prompt_sha: str = ""  # its conversation's first turn, salt included (workloads.Request.prompt_sha)
    prompt_set: str = ""  # the set, prompts_file or <workload>.yaml its text came from (workloads.Request)
    prompt_row: str = ""  # the text's row there: "HumanEval/12", a file's line number, a YAML prompt's index
    retried: int = 0  # sends again after a 429 or 503 (StreamClient.BUSY_RETRIES)
    content_chunks: int = 0
    reasoning_chunks: int = 0
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    cached_prompt_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens
    parts: list[str] = field(default_factory=list)  # content pieces as they arrived (kept on a timeout too)
    # The choice's finish_reason as the server streamed it (OpenAI chat API: stop | length | tool_calls | ...):
    # "length" is a reply cut off at max_tokens, which the accuracy set scores as invalid, not on its last number.
    finish_reason: str | None = None
    tool_name: str = ""  # the streamed tool call's function name (delta.tool_calls[0].function.name)
    tool_arguments: str = ""  # its arguments as streamed, concatenated (JSON text when complete)
    reasoning_parts: list[str] = field(default_factory=list)
    chunk_times: list[float] = field(default_factory=list)  # arrival of every chunk carrying text
    choice_times: list[float] = field(default_factory=list)  # arrival of every chunk with non-empty choices
    # Cumulative completion_tokens at each of those chunks, where the engine streams usage per chunk
    # (vLLM `continuous_usage_stats`); empty otherwise.
    chunk_token_counts: list[int] = field(default_factory=list)
    server: dict = field(default_factory=dict)

    @property
    def content(self) -> str:
        return "".join(self.parts)

    @property
    def reasoning(self) -> str:
        return "".join(self.reasoning_parts)

    @property
    def counted_text(self) -> str:
        """Which kinds of text the token timings counted: "content", "reasoning+content", ..."""
        kinds = [name for name, chunks in (("reasoning", self.reasoning_chunks), ("content", self.content_chunks)) if chunks]
        return "+".join(kinds) or "none"

    @property
    def tokens(self) -> int:
        """Server-reported output tokens (reasoning included); the client's chunk count where the server
        reports none."""
        if self.completion_tokens is not None:
            return self.completion_tokens
        return self.content_chunks + self.reasoning_chunks

    @property
    def processed_prompt_tokens(self) -> int | None:
        """Prompt tokens the engine actually ran through prefill: its own count where it gives one
        (llama.cpp `timings.prompt_n`), else usage.prompt_tokens minus usage.prompt_tokens_details.cached_tokens."""
        if SERVER_PROMPT_PROCESSED in self.server:
            return self.server[SERVER_PROMPT_PROCESSED]
        if self.prompt_tokens is None:
            return None
        return self.prompt_tokens - (self.cached_prompt_tokens or 0)

    @property
    def ttft_s(self) -> float | None:
        """SGLang `bench_serving`'s TTFT: submit to the first content, reasoning or tool-call text. vLLM `bench
        serve`'s TTFT also counts a role-only first chunk: that one is `ttfc_s`."""
        return None if self.t_first_token is None else self.t_first_token - self.t_submit

    @property
    def ttfc_s(self) -> float | None:
        """vLLM `bench serve` TTFT: submit to the first chunk with non-empty choices (a role-only one counts)."""
        return None if self.t_first_chunk is None else self.t_first_chunk - self.t_submit

    @property
    def decode_tps(self) -> float | None:
        """Ours: tokens after the first over first text to the last choices chunk (TTFT excluded). The span
        ends where vLLM's latency does, so an EOS token counted in usage but streamed without text (a
        finish chunk) is counted over the time it took."""
        if self.t_first_token is None or self.t_last_chunk is None or self.tokens < 2:
            return None
        span = self.t_last_chunk - self.t_first_token
        return (self.tokens - 1) / span if span > 0 else None

    @property
    def tpot_ms(self) -> float | None:
        """vLLM `bench serve` TPOT: (E2EL - TTFT) / (output tokens - 1), both from the choices chunks."""
        if self.t_first_chunk is None or self.t_last_chunk is None or self.tokens < 2:
            return None
        return (self.t_last_chunk - self.t_first_chunk) / (self.tokens - 1) * 1000

    @property
    def e2e_tps(self) -> float | None:
        if self.t_end is None or self.tokens < 1:
            return None
        return self.tokens / ((self.t_last_token or self.t_end) - self.t_submit)

    def inter_chunk_ms(self) -> list[float]:
        """vLLM `bench serve` ITL: gaps between consecutive chunks with non-empty choices (the role-only
        chunk to the first text included), one per chunk, whatever it carries."""
        return [(b - a) * 1000 for a, b in zip(self.choice_times, self.choice_times[1:])]

    def per_token_itl_ms(self) -> list[float]:
        """Inter-token latency per token, as SGLang `bench_serving`'s native backend: a chunk's gap divided by the tokens
        it carries, once per token. Tokens per chunk come from streamed usage where the engine sends it
        (a gap with no new token rolls into the next, as there); otherwise the final count is spread
        evenly over the chunks, which weights every gap alike (one entry per chunk keeps percentiles)."""
        if len(self.chunk_token_counts) == len(self.chunk_times) > 1:
            itl, last_time, last_count = [], self.chunk_times[0], self.chunk_token_counts[0]
            for now, count in zip(self.chunk_times[1:], self.chunk_token_counts[1:]):
                new = count - last_count
                if new <= 0:
                    continue
                itl += [(now - last_time) * 1000 / new] * new
                last_time, last_count = now, count
            return itl
        chunks = len(self.chunk_times)
        if chunks < 2 or not self.completion_tokens:  # no token reported: no gap to divide among tokens
            return []
        tokens_per_chunk = self.completion_tokens / chunks
        return [(b - a) * 1000 / tokens_per_chunk for a, b in zip(self.chunk_times, self.chunk_times[1:])]

    def to_row(self) -> dict:
        row = asdict(self)
        for bulky in ("chunk_times", "choice_times", "chunk_token_counts", "server", "parts", "reasoning_parts"):
            row.pop(bulky)
        row["content"] = self.content[:200]
        row["content_chars"], row["reasoning_chars"] = len(self.content), len(self.reasoning)
        # the whole reply's identity: a variant's greedy reply against no-spec's to the same request (analysis/pairing.py)
        row["reply_sha"] = hashlib.sha256((self.reasoning + "\x00" + self.content).encode()).hexdigest()[:16]
        row.update(self.server)
        row.update(ttft_s=self.ttft_s, ttfc_s=self.ttfc_s, decode_tps=self.decode_tps, tpot_ms=self.tpot_ms,
                   e2e_tps=self.e2e_tps, tokens=self.tokens, counted_text=self.counted_text,
                   processed_prompt_tokens=self.processed_prompt_tokens)
        return row


class StreamClient:
    """One aiohttp session per load run (the HTTP client vLLM `bench serve` and SGLang `bench_serving`
    use; httpx's per-read overhead cost a quarter of the ingest rate at 64 streams), with explicit
    timeouts. The session is made on the first request, inside the running event loop.

    `stall_timeout_s` is the socket read timeout: the longest silence allowed between two reads, which
    catches a server that accepts and never answers as well as one that streams and then stalls. `clock`
    stamps every record (time.perf_counter; a test passes one it holds).
    """

    RESENDS = 2
    # A 429 or 503 says "not now": sent again after 0.5, 1, 2 s, then the request fails with the server's message.
    BUSY_RETRIES = 3
    BUSY_BACKOFF_S = 0.5

    def __init__(self, base_url: str, model: str, extras: dict, stall_timeout_s: float, request_timeout_s: float,
                 api_key: str | None = None, clock=time.perf_counter):
        self.base_url = base_url
        self.url = base_url + "/v1/chat/completions"
        self.model = model
        self.extras = extras
        self.stall_timeout_s, self.request_timeout_s = stall_timeout_s, request_timeout_s
        self.api_key = api_key
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.session: aiohttp.ClientSession | None = None
        self.clock = clock

    def without_extras(self) -> StreamClient:
        """The same server and limits without the engine's fixed-length fields and the workload's (a
        calibration request of one token: min_tokens above max_tokens would be refused)."""
        return StreamClient(self.base_url, self.model, {}, self.stall_timeout_s, self.request_timeout_s, self.api_key, self.clock)

    def _session(self) -> aiohttp.ClientSession:
        # No connection limit (limit=0, as vLLM `bench serve` without --max-concurrency): the streams bound the
        # connections, and a pool of 256 held a 512-stream cell's second half back until the first's answers ended.
        if self.session is None:
            self.session = aiohttp.ClientSession(
                headers=self.headers, connector=aiohttp.TCPConnector(limit=0),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=self.stall_timeout_s))
        return self.session

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def post_json(self, path: str, body: dict) -> tuple[int | None, object]:
        """POST a JSON body to another endpoint of the server (tokenize): its status and parsed reply (None
        when no server answered, or the reply is not JSON)."""
        try:
            async with self._session().post(self.base_url + path, data=orjson.dumps(body), headers=JSON_HEADERS) as response:
                text = await response.read()
                try:
                    return response.status, orjson.loads(text)
                except ValueError:
                    return response.status, None
        except (aiohttp.ClientError, TimeoutError):
            return None, None

    def body(self, messages: list[dict], output_tokens: int, tools: tuple[dict, ...] = ()) -> dict:
        own = {"tools": list(tools)} if tools else {}  # a text's own tools (BFCL's functions) over the workload's
        return {"model": self.model, "messages": messages, "stream": True,
                "stream_options": {"include_usage": True}, "max_tokens": output_tokens,
                "temperature": 0.0, "seed": 0, **self.extras, **own}

    async def chat(self, messages: list[dict], output_tokens: int, stream: int, turn: int,
                   final_hook=None, tools: tuple[dict, ...] = ()) -> RequestRecord:
        record = RequestRecord(stream=stream, turn=turn, t_submit=self.clock(), requested_tokens=output_tokens)
        try:
            await asyncio.wait_for(self._send(record, messages, output_tokens, final_hook, tools), self.request_timeout_s)
        except aiohttp.ServerTimeoutError:  # a TimeoutError too, so it is caught before the request timeout
            record.status, record.error = "timeout", f"stream stalled: nothing received for {self.stall_timeout_s:g} s"
        except TimeoutError:
            record.status, record.error = "timeout", f"no complete answer within {self.request_timeout_s:.0f} s"
        except aiohttp.ClientError as err:
            record.status, record.error = "failed", f"{type(err).__name__}: {err}"
        record.t_end = self.clock()
        return record

    async def _send(self, record: RequestRecord, messages, output_tokens, final_hook, tools=()) -> None:
        """Send, and send again (at most RESENDS times) when the server closed the connection before any
        answer: the keep-alive race, where a pooled connection is reused just as the server closes it
        (llama-server's cpp-httplib closes one after CPPHTTPLIB_KEEPALIVE_MAX_COUNT requests, 5 by default,
        or 5 s idle; seen once in 24 requests of the default's c4 cell). Nothing of an answer had arrived,
        so nothing is counted twice; t_submit stays the first send, so the reconnect is inside the request's
        TTFT, as a user would see it."""
        for attempt in range(self.RESENDS + 1):
            try:
                return await self._retry_busy(record, messages, output_tokens, final_hook, tools)
            except aiohttp.ClientConnectorError:
                raise  # no server there: sending again would not help
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                if record.http_status is not None or attempt == self.RESENDS:
                    raise
                record.resent += 1

    async def _retry_busy(self, record: RequestRecord, messages, output_tokens, final_hook, tools=()) -> None:
        """Send, and while the server answers 429 or 503, wait (doubling from BUSY_BACKOFF_S) and send again,
        at most BUSY_RETRIES times; then the request fails with the server's last message. t_submit stays
        the first send, so the waits are inside the request's latency, as a user would see them."""
        for attempt in range(self.BUSY_RETRIES + 1):
            try:
                return await self._stream(record, messages, output_tokens, final_hook, tools)
            except ServerBusy as busy:
                if attempt == self.BUSY_RETRIES:
                    record.status, record.error = "failed", f"{busy} (still busy after {attempt} retries)"
                    return
                record.retried, record.status, record.error, record.http_status = attempt + 1, "ok", None, None
                await asyncio.sleep(self.BUSY_BACKOFF_S * 2 ** attempt)

    async def _stream(self, record: RequestRecord, messages, output_tokens, final_hook, tools=()) -> None:
        body = orjson.dumps(self.body(messages, output_tokens, tools))
        async with self._session().post(self.url, data=body, headers=JSON_HEADERS) as response:
            record.http_status = response.status
            if response.status != 200:
                text = (await response.read()).decode(errors="replace")
                record.status = "rejected" if 400 <= response.status < 500 else "failed"
                record.error = f"HTTP {response.status}: {_error_message(text)}"
                if response.status in BUSY:
                    raise ServerBusy(record.error)
                return
            # Read network chunks and split SSE lines ourselves: every line of one read is stamped with
            # its arrival time, and no per-line decoding layer sits between the socket and the clock.
            buffer, done = b"", False
            async for data in response.content.iter_any():
                now = self.clock()
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        done = True  # some servers keep the connection open after it
                        break
                    try:
                        chunk = orjson.loads(payload)
                    except ValueError:
                        chunk = None
                    if not isinstance(chunk, dict):
                        record.status = "failed"
                        record.error = f"SSE data line is not a JSON object: {payload[:120].decode(errors='replace')!r}"
                        return
                    if not self._take(record, chunk, payload, now, final_hook):
                        return
                if done:
                    break
        if not done:
            # A stream cut short (a proxy or server dropping it) is not an answer, whatever arrived.
            record.status, record.error = "failed", "stream closed without [DONE]"
        elif record.t_first_token is None:
            record.status, record.error = "failed", "stream ended without any content or reasoning"

    @staticmethod
    def _take(record: RequestRecord, chunk: dict, payload: bytes, now: float, final_hook) -> bool:
        """Fold one SSE chunk into the record; False when the server reported an error mid-stream."""
        if "error" in chunk:
            record.status, record.error = "failed", f"server error mid-stream: {_error_message(payload.decode())}"
            return False
        choices = chunk.get("choices")
        carried_text = False
        if choices:
            # vLLM's clock: every chunk with choices, text or not; the trailing usage-only chunk is none.
            record.t_first_chunk = record.t_first_chunk or now
            record.t_last_chunk = now
            record.choice_times.append(now)
            # Every chunk of a stream passes here: plain lookups, no per-chunk generator or list (measured:
            # benchmarks/client_ceiling.py, tokens per CPU second).
            for choice in choices:
                record.finish_reason = choice.get("finish_reason") or record.finish_reason
                delta = choice.get("delta")
                if not delta:
                    continue
                reasoning = delta.get(REASONING_FIELDS[0]) or delta.get(REASONING_FIELDS[1])
                if reasoning:
                    record.reasoning_chunks += 1
                    record.reasoning_parts.append(reasoning)
                content = delta.get("content")
                if content:
                    record.content_chunks += 1
                    record.parts.append(content)
                carried_text = carried_text or bool(reasoning or content)
                if delta.get("tool_calls"):
                    carried_text = StreamClient._take_tool_call(record, delta["tool_calls"]) or carried_text
        usage = chunk.get("usage")
        if carried_text:
            if record.t_first_token is None:
                record.t_first_token = now
            record.t_last_token = now
            record.chunk_times.append(now)
            if usage and usage.get("completion_tokens") is not None:
                record.chunk_token_counts.append(usage["completion_tokens"])
        if usage:
            record.completion_tokens = usage.get("completion_tokens")
            record.prompt_tokens = usage.get("prompt_tokens")
            record.cached_prompt_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
            record.reasoning_tokens = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
        if final_hook is not None:
            record.server.update(final_hook(chunk))
        return True

    @staticmethod
    def _take_tool_call(record: RequestRecord, tool_calls: list) -> bool:
        """A tool call streams as delta.tool_calls (OpenAI chat API): its name, then its arguments in pieces; True
        where this chunk carried a piece of the first call."""
        called = [c.get("function") or {} for c in tool_calls if c.get("index", 0) == 0]
        for function in called:
            record.tool_name += function.get("name") or ""
            record.tool_arguments += function.get("arguments") or ""
        if called:
            record.content_chunks += 1
        return bool(called)


def _error_message(text: str) -> str:
    try:
        doc = orjson.loads(text)
        error = doc.get("error", doc)
        return (error.get("message") if isinstance(error, dict) else str(error))[:300]
    except (ValueError, AttributeError):
        return text.strip()[:300]


async def _conversation(client: StreamClient, stream: int, request: Request, final_hook) -> list[RequestRecord]:
    """One conversation: the messages before its first turn, then its turns one after another, each answer
    appended before the next turn."""
    messages, records = list(request.prefix), []
    for turn, text in enumerate(request.turns):
        messages.append({"role": "user", "content": text})
        record = await client.chat(list(messages), request.output_tokens, stream, turn, final_hook, request.tools)
        records.append(record)
        if record.status != "ok":
            break
        messages.append({"role": "assistant", "content": record.content})
    return records


def _mark(records: list[RequestRecord], index: int, request: Request) -> None:
    """Which conversation and text each record answered, for the request files."""
    for record in records:
        record.request, record.salt, record.prompt_sha = index, request.salt, request.prompt_sha
        record.prompt_set, record.prompt_row = request.prompt_set, request.prompt_row


async def run_streams(client: StreamClient, requests: list[Request], concurrency: int, final_hook=None) -> list[RequestRecord]:
    """Closed loop: `concurrency` streams start together and pull requests from one shared queue, each
    sending the next as soon as its previous answer ends, as vLLM `bench serve --max-concurrency`'s
    semaphore keeps that many in flight: no stream idles while requests wait, so the steady window (all
    streams busy) means what it says. A stream whose request failed stops; the others take the rest."""
    queue = list(reversed(list(enumerate(requests))))  # pop() takes them in order, each with its index

    async def one(stream: int) -> list[RequestRecord]:
        records = []
        while queue:
            index, request = queue.pop()
            done = await _conversation(client, stream, request, final_hook)
            _mark(done, index, request)
            records += done
            if done[-1].status != "ok":
                break
        return records

    results = await asyncio.gather(*(one(i) for i in range(concurrency)))
    return [r for stream in results for r in stream]


async def run_conversations(client: StreamClient, conversations: list[list[str]], output_tokens: int,
                            final_hook=None) -> list[RequestRecord]:
    """All streams start together, one conversation each; a multi-turn stream sends its turns in order."""
    return await run_streams(client, [Request(tuple(turns), output_tokens) for turns in conversations], len(conversations),
                             final_hook)


async def run_open_loop(client: StreamClient, requests: list[Request], send_at_s: list[float],
                        final_hook=None) -> list[RequestRecord]:
    """Open loop: request i is sent `send_at_s[i]` seconds after the start, whether or not earlier ones
    have finished (vLLM `bench serve --request-rate`); each request is its own stream."""
    start = time.perf_counter()

    async def one(index: int, request: Request) -> list[RequestRecord]:
        await asyncio.sleep(max(0.0, start + send_at_s[index] - time.perf_counter()))
        done = await _conversation(client, index, request, final_hook)
        _mark(done, index, request)
        return done

    results = await asyncio.gather(*(one(i, r) for i, r in enumerate(requests)))
    return [r for stream in results for r in stream]
