"""Test double: an OpenAI-style chat endpoint that plays scripted answers, one per request in order (the
last one repeats). An answer is either an SSE stream, a list of (seconds to wait, data payload) steps
written as `data: <payload>` events, or an error status with its body. No engine behind it: the timing of
every chunk is known in advance, so two clients can be held to the same stream."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Answer:
    steps: list[tuple[float, str]] = field(default_factory=list)  # (s after the previous step, SSE data payload)
    status: int = 200
    body: str = ""  # an error answer's body
    done: bool = True  # end with `data: [DONE]`


def chunk(delta: dict | None = None, usage: dict | None = None, finish: str | None = None) -> str:
    """One chat.completion.chunk payload: a choice with `delta` (none: the usage-only chunk, `choices: []`)."""
    doc: dict = {"id": "c", "object": "chat.completion.chunk", "model": "m",
                 "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        doc["usage"] = usage
    return json.dumps(doc)


class ScriptedServer:
    """`with ScriptedServer([answer, ...]) as server:` serves them on server.base_url; server.requests counts.

    With `together=n`, a stream starts once n requests wait for it and is written to all of them at once,
    from one thread: every client reads the same bytes at the same instants, whatever the machine's load
    does to the server's sleeps."""

    def __init__(self, answers: list[Answer], together: int = 1):
        self.answers, self.requests, self.together = answers, 0, together
        self.lock, self.waiting = threading.Lock(), []
        script = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep the test output clean
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with script.lock:
                    answer = script.answers[min(script.requests // script.together, len(script.answers) - 1)]
                    script.requests += 1
                if answer.status != 200:
                    body = answer.body.encode()
                    self.send_response(answer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")  # the stream ends where the connection does
                self.end_headers()
                self.wfile.flush()
                finished = threading.Event()
                with script.lock:
                    script.waiting.append((self.wfile, finished))
                    group = script.waiting if len(script.waiting) == script.together else None
                    if group:
                        script.waiting = []
                if group:
                    play(answer, [wfile for wfile, _ in group])
                    for _, event in group:
                        event.set()
                finished.wait()
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> ScriptedServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def play(answer: Answer, writers: list) -> None:
    """Write the answer's steps to every writer, each step at its time from the start: a late wake-up does
    not shift the rest."""
    due = time.perf_counter()
    for wait, payload in [*answer.steps, *([(0.0, "[DONE]")] if answer.done else [])]:
        due += wait
        time.sleep(max(0.0, due - time.perf_counter()))
        for wfile in writers:
            wfile.write(f"data: {payload}\n\n".encode())
            wfile.flush()
