"""Benchmark and test fixture (not an engine): a paced SSE emitter speaking just enough of an OpenAI-compatible
chat endpoint for a load client to read it. Each request streams `max_tokens` content chunks, each carrying its
send time (perf_counter: CLOCK_MONOTONIC, one clock for every process of the machine) as its text, then a usage
chunk and [DONE]. The pace rides in the URL, so one emitter serves any load: `<base>/rate/<tokens/s per
stream>/burst/<chunks per step>`: the streams of one pace are stepped together, as an engine's decode steps
are (Stepper); a rate of 0 sends as fast as the reader takes them. GET <base>/metrics answers vLLM's generation-token counter: the tokens this
process has sent (one process only: with several, each counts its own).

`with Emitter(processes=2, cpus={1}) as url:` starts the processes on one port (SO_REUSEPORT: the kernel spreads
the connections over them), each pinned to `cpus` (os.sched_setaffinity), so a reader pinned elsewhere does not
compete with them for a core; `url` is http://127.0.0.1:<port>.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import time

DONE = b'data: {"choices":[],"usage":{"completion_tokens":%d,"prompt_tokens":1}}\n\ndata: [DONE]\n\n'
CHUNK = b'data: {"choices":[{"delta":{"content":"%.7f "}}]}\n\n'


def paced_url(base: str, rate: float, burst: int = 1) -> str:
    """The emitter's base URL at a pace: `rate` tokens/s per stream (0: as fast as read), `burst` chunks a write."""
    return f"{base}/rate/{rate:g}/burst/{burst}"


def _pace(path: str) -> tuple[float, int]:
    parts = path.split("/")
    rate = float(parts[parts.index("rate") + 1]) if "rate" in parts else 0.0
    burst = int(parts[parts.index("burst") + 1]) if "burst" in parts else 1
    return rate, burst


class Stepper:
    """The streams of one pace, stepped together as an engine's decode steps are: every 1 / rate seconds each
    running stream gets its next `burst` chunks in one write. One wake-up a step, however many streams: a timer
    per stream would cost the emitter more than the reader (asyncio wakes at a few microseconds each). Rate 0:
    each stream is written as fast as its reader takes it."""

    def __init__(self, rate: float, burst: int):
        self.rate, self.burst = rate, burst
        self.streams: dict = {}  # writer -> [chunks left, future done]
        self.task = None

    async def stream(self, writer, count: int) -> None:
        if not self.rate:
            for i in range(0, count, self.burst):
                now = time.perf_counter()
                writer.write(b"".join(CHUNK % now for _ in range(min(self.burst, count - i))))
                await writer.drain()
            return
        done = asyncio.get_running_loop().create_future()
        self.streams[writer] = [count, done]
        if self.task is None:
            self.task = asyncio.create_task(self._steps())
        await done

    async def _steps(self) -> None:
        step, due = 1 / self.rate, time.perf_counter()
        while self.streams:
            due += step
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.perf_counter()
            for writer, left in list(self.streams.items()):
                n = min(self.burst, left[0])
                writer.write(b"".join(CHUNK % now for _ in range(n)))
                left[0] -= n
                if not left[0]:
                    del self.streams[writer]
                    left[1].set_result(None)
        self.task = None


def _serve(port_queue, port: int, cpus: frozenset[int] | None) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    sent = [0]
    steppers: dict[tuple[float, int], Stepper] = {}

    async def handle(reader, writer):
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            method, path = head.split(" ", 2)[:2]
            length = next((int(line.split(":")[1]) for line in head.split("\r\n") if line.lower().startswith("content-length")), 0)
            body = await reader.readexactly(length)
            if method == "GET":
                text = b"# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total %d.0\n" % sent[0]
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                             % len(text) + text)
                await writer.drain()
                return
            count = max(1, int(json.loads(body).get("max_tokens") or 1))
            pace = _pace(path)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
            await steppers.setdefault(pace, Stepper(*pace)).stream(writer, count)
            sent[0] += count
            writer.write(DONE % count)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the reader went away: nothing to answer
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096, reuse_port=True)
        port_queue.put(server.sockets[0].getsockname()[1])
        async with server:
            await server.serve_forever()

    asyncio.run(main())


class Emitter:
    def __init__(self, processes: int = 1, cpus: set[int] | None = None):
        self.processes, self.cpus = processes, frozenset(cpus) if cpus else None
        self.started: list[multiprocessing.Process] = []

    def __enter__(self) -> str:
        queue = multiprocessing.get_context("spawn").Queue()
        port = 0
        for _ in range(self.processes):  # the first takes a free port, the others join it
            process = multiprocessing.get_context("spawn").Process(target=_serve, args=(queue, port, self.cpus), daemon=True)
            process.start()
            self.started.append(process)
            port = queue.get(timeout=30)
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc) -> None:
        for process in self.started:
            process.terminate()
        for process in self.started:
            process.join(timeout=10)
