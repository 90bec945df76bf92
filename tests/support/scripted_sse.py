"""Test double: an OpenAI-style chat endpoint that plays scripted answers, one per request in order (the
last one repeats). An answer is either an SSE stream, a list of (seconds to wait, data payload) steps
written as `data: <payload>` events, or an error status with its body. No engine behind it: the timing of
every chunk is known in advance, so two clients can be held to the same stream.

With a SteppedClock the waits are not slept but stepped: the clock reads each step's scripted time, and
the server writes the next step only once the client has read the clock for this one. A client stamping
its records with that clock (StreamClient's `clock`) gets the scripted times exactly, whatever the
machine's load."""

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
    after_requests: int = 0  # start streaming only once the server has had this many requests (a held answer)


def chunk(delta: dict | None = None, usage: dict | None = None, finish: str | None = None) -> str:
    """One chat.completion.chunk payload: a choice with `delta` (none: the usage-only chunk, `choices: []`)."""
    doc: dict = {"id": "c", "object": "chat.completion.chunk", "model": "m",
                 "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        doc["usage"] = usage
    return json.dumps(doc)


class SteppedClock:
    """A clock the scripted server moves (a test double of time.perf_counter): it reads the scripted time of
    the step last written. The server advances it, writes the step, and waits (at most STEP_WAIT_S) until the
    clock has been read once per client since: each chunk then arrives in a read of its own, stamped with its
    scripted time."""

    STEP_WAIT_S = 10.0

    def __init__(self, now: float = 0.0):
        self.now, self.reads = now, 0
        self.read = threading.Condition()

    def __call__(self) -> float:
        with self.read:
            self.reads += 1
            self.read.notify_all()
            return self.now

    def advance(self, wait: float) -> int:
        """Move the clock `wait` seconds on; the reads so far."""
        with self.read:
            self.now += wait
            return self.reads

    def await_reads(self, reads: int) -> None:
        with self.read:
            self.read.wait_for(lambda: self.reads >= reads, timeout=self.STEP_WAIT_S)


class ScriptedServer:
    """`with ScriptedServer([answer, ...]) as server:` serves them on server.base_url; server.requests counts.

    With `together=n`, a stream starts once n requests wait for it and is written to all of them at once,
    from one thread: every client reads the same bytes at the same instants, whatever the machine's load
    does to the server's sleeps. With `clock`, a SteppedClock, the answers' waits are stepped on it instead
    of slept."""

    HOLD_S = 10.0  # the longest a held answer waits for the requests it waits for

    def __init__(self, answers: list[Answer], together: int = 1, clock: SteppedClock | None = None):
        self.answers, self.requests, self.together, self.clock = answers, 0, together, clock
        self.lock, self.waiting = threading.Lock(), []
        self.arrived = threading.Condition(self.lock)
        self.closing = threading.Event()  # set on exit: a stream still waiting for its next step ends there
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
                    script.arrived.notify_all()
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
                    with script.lock:
                        script.arrived.wait_for(lambda: script.requests >= answer.after_requests, timeout=script.HOLD_S)
                    play(answer, [wfile for wfile, _ in group], script.closing, script.clock)
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
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def play(answer: Answer, writers: list, closing: threading.Event, clock: SteppedClock | None = None) -> None:
    """Write the answer's steps to every writer, each step at its time from the start: a late wake-up does
    not shift the rest; a step still due when the server closes is never written. On a SteppedClock each
    step is stepped, not slept."""

    def write(payload: str) -> None:
        for wfile in writers:
            wfile.write(f"data: {payload}\n\n".encode())
            wfile.flush()

    due = time.perf_counter()
    for wait, payload in [*answer.steps, *([(0.0, "[DONE]")] if answer.done else [])]:
        if clock is not None:
            reads = clock.advance(wait)
            write(payload)
            clock.await_reads(reads + len(writers))
            continue
        due += wait
        if closing.wait(max(0.0, due - time.perf_counter())):
            return
        write(payload)
