"""The load client: async httpx streaming against an OpenAI-compatible chat endpoint.

Per request it records raw timestamps (perf_counter): submit, first chunk, first content token, every
content chunk, end; plus the server's own token counts and timings. Aggregation happens later
(analysis of these records), so a figure can always be traced back to the requests behind it.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import asdict, dataclass, field

import httpx


@dataclass
class RequestRecord:
    stream: int
    turn: int
    t_submit: float
    t_first_chunk: float | None = None
    t_first_content: float | None = None
    t_last_content: float | None = None
    t_end: float | None = None
    status: str = "ok"  # ok | rejected | failed | timeout
    http_status: int | None = None
    error: str | None = None
    content_chunks: int = 0
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    parts: list[str] = field(default_factory=list)  # content pieces as they arrived (kept on a timeout too)
    chunk_times: list[float] = field(default_factory=list)
    server: dict = field(default_factory=dict)

    @property
    def content(self) -> str:
        return "".join(self.parts)

    @property
    def tokens(self) -> int:
        """Server-reported output tokens; the client's chunk count where the server reports none."""
        return self.completion_tokens if self.completion_tokens is not None else self.content_chunks

    @property
    def ttft_s(self) -> float | None:
        return None if self.t_first_content is None else self.t_first_content - self.t_submit

    @property
    def ttfc_s(self) -> float | None:
        return None if self.t_first_chunk is None else self.t_first_chunk - self.t_submit

    @property
    def decode_tps(self) -> float | None:
        """Tokens after the first over the time after the first: TTFT excluded."""
        if self.t_first_content is None or self.t_last_content is None or self.tokens < 2:
            return None
        span = self.t_last_content - self.t_first_content
        return (self.tokens - 1) / span if span > 0 else None

    @property
    def e2e_tps(self) -> float | None:
        if self.t_end is None or self.tokens < 1:
            return None
        return self.tokens / ((self.t_last_content or self.t_end) - self.t_submit)

    def inter_token_ms(self) -> list[float]:
        return [(b - a) * 1000 for a, b in zip(self.chunk_times, self.chunk_times[1:])]

    def to_row(self) -> dict:
        row = asdict(self)
        row.pop("chunk_times")
        row.pop("server")
        row.pop("parts")
        row["content"] = self.content[:200]
        row.update(self.server)
        row.update(ttft_s=self.ttft_s, ttfc_s=self.ttfc_s, decode_tps=self.decode_tps, e2e_tps=self.e2e_tps,
                   tokens=self.tokens)
        return row


class StreamClient:
    """One httpx.AsyncClient per load run, with explicit timeouts.

    `stall_timeout_s` is the read timeout: the longest silence allowed between two chunks, which catches
    a server that accepts and never streams as well as one that streams and then stalls.
    """

    def __init__(self, base_url: str, model: str, extras: dict, stall_timeout_s: float, request_timeout_s: float,
                 api_key: str | None = None):
        self.url = base_url + "/v1/chat/completions"
        self.model = model
        self.extras = extras
        self.request_timeout_s = request_timeout_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=10.0, read=stall_timeout_s, write=10.0, pool=10.0),
            headers=headers, limits=httpx.Limits(max_connections=256, max_keepalive_connections=256))

    async def aclose(self) -> None:
        await self.client.aclose()

    def body(self, messages: list[dict], output_tokens: int) -> dict:
        return {"model": self.model, "messages": messages, "stream": True,
                "stream_options": {"include_usage": True}, "max_tokens": output_tokens,
                "temperature": 0.0, "seed": 0, **self.extras}

    async def chat(self, messages: list[dict], output_tokens: int, stream: int, turn: int,
                   final_hook=None) -> RequestRecord:
        record = RequestRecord(stream=stream, turn=turn, t_submit=time.perf_counter())
        try:
            await asyncio.wait_for(self._stream(record, messages, output_tokens, final_hook), self.request_timeout_s)
        except asyncio.TimeoutError:
            record.status, record.error = "timeout", f"no complete answer within {self.request_timeout_s:.0f} s"
        except httpx.TimeoutException as err:
            record.status, record.error = "timeout", f"stream stalled: {type(err).__name__}"
        except httpx.HTTPError as err:
            record.status, record.error = "failed", f"{type(err).__name__}: {err}"
        record.t_end = time.perf_counter()
        return record

    async def _stream(self, record: RequestRecord, messages, output_tokens, final_hook) -> None:
        async with self.client.stream("POST", self.url, json=self.body(messages, output_tokens)) as response:
            record.http_status = response.status_code
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")
                record.status = "rejected" if 400 <= response.status_code < 500 else "failed"
                record.error = f"HTTP {response.status_code}: {_error_message(text)}"
                return
            # Read network chunks and split SSE lines ourselves: every line of one read is stamped with
            # its arrival time, and no per-line decoding layer sits between the socket and the clock.
            buffer, done = b"", False
            async for data in response.aiter_bytes():
                now = time.perf_counter()
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.startswith(b"data:"):
                        continue
                    if record.t_first_chunk is None:
                        record.t_first_chunk = now
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        done = True  # some servers keep the connection open after it
                        break
                    if not self._take(record, json.loads(payload), payload, now, final_hook):
                        return
                if done:
                    break
        if record.t_first_content is None and record.status == "ok":
            record.status, record.error = "failed", "stream ended without any content"

    @staticmethod
    def _take(record: RequestRecord, chunk: dict, payload: bytes, now: float, final_hook) -> bool:
        """Fold one SSE chunk into the record; False when the server reported an error mid-stream."""
        if "error" in chunk:
            record.status, record.error = "failed", f"server error mid-stream: {_error_message(payload.decode())}"
            return False
        for choice in chunk.get("choices") or []:
            text = (choice.get("delta") or {}).get("content")
            if text:
                if record.t_first_content is None:
                    record.t_first_content = now
                record.t_last_content = now
                record.chunk_times.append(now)
                record.content_chunks += 1
                record.parts.append(text)
        usage = chunk.get("usage")
        if usage:
            record.completion_tokens = usage.get("completion_tokens")
            record.prompt_tokens = usage.get("prompt_tokens")
        if final_hook is not None:
            record.server.update(final_hook(chunk))
        return True


# How each engine states the limit when it refuses an over-long request with HTTP 400.
LIMIT_PATTERNS = (
    re.compile(r"available context size \((\d+) tokens\)"),  # llama.cpp
    re.compile(r"maximum allowed length \((\d+) tokens\)"),  # SGLang
    re.compile(r"maximum context length is (\d+) tokens"),  # vLLM
)


def stated_limit(message: str | None) -> int | None:
    """The token limit an engine names in its rejection message, or None."""
    for pattern in LIMIT_PATTERNS:
        match = pattern.search(message or "")
        if match:
            return int(match[1])
    return None


def _error_message(text: str) -> str:
    try:
        doc = json.loads(text)
        error = doc.get("error", doc)
        return (error.get("message") if isinstance(error, dict) else str(error))[:300]
    except (ValueError, AttributeError):
        return text.strip()[:300]


async def run_conversations(client: StreamClient, conversations: list[list[str]], output_tokens: int,
                            final_hook=None) -> list[RequestRecord]:
    """All streams start together; a multi-turn stream sends its turns one after another."""

    async def one(stream: int, turns: list[str]) -> list[RequestRecord]:
        messages, records = [], []
        for turn, text in enumerate(turns):
            messages.append({"role": "user", "content": text})
            record = await client.chat(list(messages), output_tokens, stream, turn, final_hook)
            records.append(record)
            if record.status != "ok":
                break
            messages.append({"role": "assistant", "content": record.content})
        return records

    results = await asyncio.gather(*(one(i, turns) for i, turns in enumerate(conversations)))
    return [r for stream in results for r in stream]
