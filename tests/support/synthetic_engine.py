"""TEST DOUBLE, not an inference engine: a small OpenAI-compatible HTTP server whose timing is known in
advance, so that the client and summary can be checked against what it was built to emit.

Per chat request it streams, like vLLM or SGLang with a reasoning parser and MTP/EAGLE decoding:
a role-only chunk at once; after `ttft_s` a first chunk with one token (the prefill's); then one chunk
every `interval_s` carrying `tokens_per_chunk` tokens, reasoning first (`delta.reasoning_content`),
then content; `usage` in a final chunk (and on every chunk when the request asks for vLLM's
`stream_options.continuous_usage_stats`). A request with `tools` is answered with a streamed call of the
first tool (its name, then its arguments in three pieces). With `capacity` set it serves at most that many requests at once
(like an engine's slots): the others wait, unanswered, until one ends, so aggregate throughput stops
rising at `capacity` concurrent requests. Token i's text is "t<i> " (`word` changes the letter, `loop_period`
makes the text repeat, for the correctness checks). With `prompt_tokens` 0 a prompt's tokens are its
whitespace-separated words, in usage and on vLLM's `POST /tokenize` (`{"count": n}`); `bodies_file` appends
every chat request's JSON body to that file, one a line. Each decode chunk is one verification step that accepted
`tokens_per_chunk - 1` of `spec_tokens` drafts, counted in vLLM-style `vllm:spec_decode_*` counters on
/metrics. Also /health, /v1/models and /version.

In a thread: `with SyntheticEngine(Timing(...)) as engine: engine.base_url`.
As a process: `python tests/synthetic_engine.py --port 0 --ttft-s 0.2 ...` prints its URL on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Timing:
    ttft_s: float = 0.2
    interval_s: float = 0.02
    tokens_per_chunk: int = 3
    reasoning_tokens: int = 30  # decode tokens of thinking before the content (the prefill token thinks too)
    content_tokens: int = 30
    spec_tokens: int = 3  # drafts proposed per verification step
    prompt_tokens: int = 40  # 0: the words of the request's messages
    cached_prompt_tokens: int = 8
    broken_line_after: int | None = None  # send a non-JSON data line after this many decode chunks
    stall_after: int | None = None  # go silent (connection open) after this many decode chunks
    capacity: int = 0  # requests served at once; the rest wait for a free one (0: no limit)
    word: str = "t"  # token i's text is "<word><i> ": another word gives other text at the same speed
    loop_period: int = 0  # > 0: token i's text is "<word><i mod period> ", an output that loops
    bodies_file: str = ""  # append each chat request's body here (JSON lines)
    tokenize: int = 1  # 0: no /tokenize route (404), like an external server without one

    def token_text(self, index: int) -> str:
        return f"{self.word}{index % self.loop_period if self.loop_period else index} "

    @property
    def output_tokens(self) -> int:
        """The prefill token plus every decode chunk's tokens."""
        return 1 + self.reasoning_tokens + self.content_tokens

    @property
    def decode_tps(self) -> float:
        return self.tokens_per_chunk / self.interval_s

    @property
    def itl_ms(self) -> float:
        return self.interval_s * 1000 / self.tokens_per_chunk

    @property
    def accept_len(self) -> float:
        return float(self.tokens_per_chunk)


class Counters:
    """Cumulative vLLM-style speculative-decoding counters, shared by the request threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.drafts = self.draft_tokens = self.accepted = 0
        self.per_pos: dict[int, int] = {}

    def step(self, accepted: int, proposed: int) -> None:
        with self.lock:
            self.drafts += 1
            self.draft_tokens += proposed
            self.accepted += accepted
            for position in range(accepted):
                self.per_pos[position] = self.per_pos.get(position, 0) + 1

    def text(self) -> str:
        with self.lock:
            lines = ["# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
                     "# TYPE vllm:spec_decode_num_drafts_total counter",
                     f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="synthetic"}} {self.drafts}.0',
                     "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
                     f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="synthetic"}} {self.draft_tokens}.0',
                     "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
                     f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="synthetic"}} {self.accepted}.0',
                     "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter"]
            lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="synthetic",position="{p}"}} {n}.0'
                      for p, n in sorted(self.per_pos.items())]
        return "\n".join(lines) + "\n"


def _handler(timing: Timing, counters: Counters):
    slots = threading.BoundedSemaphore(timing.capacity) if timing.capacity else contextlib.nullcontext()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # the body ends when the connection closes: no chunked framing

        def log_message(self, *args) -> None:
            pass

        def _reply(self, status: int, body: str, content_type: str = "application/json") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._reply(200, "")
            elif self.path == "/v1/models":
                self._reply(200, json.dumps({"object": "list", "data": [{"id": "synthetic", "object": "model"}]}))
            elif self.path == "/version":
                self._reply(200, json.dumps({"version": "synthetic-test-double"}))
            elif self.path == "/metrics":
                self._reply(200, counters.text(), "text/plain; version=0.0.4")
            else:
                self._reply(404, json.dumps({"error": {"message": f"no route {self.path}"}}))

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/tokenize" and timing.tokenize:
                self._reply(200, json.dumps({"count": len(body["prompt"].split()), "max_model_len": 4096}))
                return
            if self.path != "/v1/chat/completions":
                self._reply(404, json.dumps({"error": {"message": f"no route {self.path}"}}))
                return
            if timing.bodies_file:
                with open(timing.bodies_file, "a") as out:
                    out.write(json.dumps(body) + "\n")
            with slots:  # a request without a free slot waits here, before any byte of its answer
                self._stream(body)

        def _stream(self, body: dict) -> None:
            continuous = bool((body.get("stream_options") or {}).get("continuous_usage_stats"))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            start = time.perf_counter()
            emitted = reasoning_emitted = 0
            prompt_tokens = timing.prompt_tokens or sum(len(m["content"].split()) for m in body["messages"])

            def send(delta: dict | None, usage: bool) -> None:
                chunk = {"id": "synthetic", "object": "chat.completion.chunk", "model": "synthetic",
                         "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": None}]}
                if usage:
                    chunk["usage"] = {
                        "prompt_tokens": prompt_tokens, "completion_tokens": emitted,
                        "total_tokens": prompt_tokens + emitted,
                        "prompt_tokens_details": {"cached_tokens": timing.cached_prompt_tokens},
                        "completion_tokens_details": {"reasoning_tokens": reasoning_emitted}}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")

            def wait_until(due: float) -> None:
                delay = due - (time.perf_counter() - start)
                if delay > 0:
                    time.sleep(delay)

            send({"role": "assistant", "content": ""}, usage=False)
            if body.get("tools"):  # answer with a call of the first tool, streamed as delta.tool_calls
                self._tool_call(body["tools"][0]["function"]["name"], send, wait_until)
                return
            wait_until(timing.ttft_s)
            emitted = 1
            reasoning_emitted = 1 if timing.reasoning_tokens else 0
            send({"reasoning_content" if reasoning_emitted else "content": timing.token_text(0)}, usage=continuous)
            chunks = (timing.reasoning_tokens + timing.content_tokens) // timing.tokens_per_chunk
            for step in range(1, chunks + 1):
                wait_until(timing.ttft_s + step * timing.interval_s)
                if step - 1 == timing.broken_line_after:
                    self.wfile.write(b"data: <html>upstream reset</html>\n\n")
                    return
                if step - 1 == timing.stall_after:
                    time.sleep(30)
                    return
                thinking = emitted - 1 < timing.reasoning_tokens
                text = "".join(timing.token_text(emitted + i) for i in range(timing.tokens_per_chunk))
                emitted += timing.tokens_per_chunk
                reasoning_emitted += timing.tokens_per_chunk if thinking else 0
                counters.step(timing.tokens_per_chunk - 1, timing.spec_tokens)
                send({"reasoning_content" if thinking else "content": text}, usage=continuous)
            send(None, usage=True)
            self.wfile.write(b"data: [DONE]\n\n")

        def _tool_call(self, name: str, send, wait_until) -> None:
            """The call's name after ttft_s, then its arguments in three pieces, one chunk per interval."""
            pieces = ['{"city": ', '"Hangzhou", ', '"days": 3}']
            for step, delta in enumerate([{"name": name, "arguments": ""}, *({"arguments": p} for p in pieces)]):
                wait_until(timing.ttft_s + step * timing.interval_s)
                call = {"index": 0, "function": delta, **({"id": "call-0", "type": "function"} if step == 0 else {})}
                send({"tool_calls": [call]}, usage=False)
            send(None, usage=True)
            self.wfile.write(b"data: [DONE]\n\n")

    return Handler


class SyntheticEngine:
    """The test double served from a thread on 127.0.0.1 and a free port."""

    def __init__(self, timing: Timing = Timing(), port: int = 0):
        self.timing = timing
        self.counters = Counters()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(timing, self.counters))
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "SyntheticEngine":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    for spec in fields(Timing):
        if spec.name not in ("broken_line_after", "stall_after"):
            parser.add_argument("--" + spec.name.replace("_", "-"), type=type(spec.default), default=spec.default)
    args = vars(parser.parse_args())
    port = args.pop("port")
    with SyntheticEngine(Timing(**args), port) as engine:
        print(engine.base_url, flush=True)
        engine.thread.join()


if __name__ == "__main__":
    main()
