"""Benchmark: how fast can our load client ingest a stream, and how much latency does it add?

A benchmark fixture (not an engine): a local SSE emitter in its own process sends OpenAI-style chunks
at a paced offered load, each chunk carrying its send time (perf_counter, CLOCK_MONOTONIC, shared
between processes). Our StreamClient (aiohttp, orjson, every chunk folded into its record) and a
minimal aiohttp reference reader read the same streams; printed side by side: achieved ingest
(tokens/s), added latency p50/p99 (receive - send), and the ratio to the reference. Each point runs
`--repeats` times; the median is printed.

    .venv/bin/python benchmarks/client_ceiling.py [--repeats 5] [--seconds 1]
    py-spy record -f raw -o profile.txt -- .venv/bin/python benchmarks/client_ceiling.py   (the `bench` extra)
Target: at 64 streams >= 0.95x the reference's ingest with < 5 ms more p99 than it; no loss at 1 and 8.
With httpx the client reached 0.77-0.82x at 64 streams: the profile put 30% of the time in httpcore's
anyio read path and 7% in json; aiohttp and orjson brought it to the reference's rate.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from stackbench.measure.client import StreamClient, run_conversations  # noqa: E402

LOADS = (1_000, 5_000, 10_000, 20_000)
STREAMS = (1, 8, 64)


def emitter(port_queue, seconds: float) -> None:
    """Benchmark fixture: paced SSE emitter. The request body's max_tokens and a `rate` query set the pace."""

    async def handle(reader, writer):
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        length = int(next(l.split(":")[1] for l in head.split("\r\n") if l.lower().startswith("content-length")))
        await reader.readexactly(length)
        rate = float(head.split("/rate/")[1].split("/")[0])  # tokens/s for this stream, from the path
        count = max(1, int(rate * seconds))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        start = time.perf_counter()
        for i in range(count):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            writer.write(b'data: {"choices":[{"delta":{"content":"%.7f "}}]}\n\n' % time.perf_counter())
            if i % 8 == 0:
                await writer.drain()
        writer.write(b'data: {"choices":[],"usage":{"completion_tokens":%d,"prompt_tokens":1}}\n\ndata: [DONE]\n\n' % count)
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=256)
        port_queue.put(server.sockets[0].getsockname()[1])
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def added_latency_ms(send_times: list[float], receive_times: list[float]) -> list[float]:
    return [(r - s) * 1000 for s, r in zip(send_times, receive_times)]


async def ours(url: str, streams: int) -> tuple[int, float, list[float]]:
    client = StreamClient(url, "m", {}, stall_timeout_s=30, request_timeout_s=120)
    t0 = time.perf_counter()
    records = await run_conversations(client, [["go"]] * streams, 10)
    wall = time.perf_counter() - t0
    await client.aclose()
    lat = []
    for r in records:
        lat += added_latency_ms([float(x) for x in r.content.split()], r.chunk_times)
    return sum(r.content_chunks for r in records), wall, lat


async def reference(url: str, streams: int) -> tuple[int, float, list[float]]:
    import aiohttp

    async def one(session):
        sends, receives = [], []
        async with session.post(url + "/v1/chat/completions", json={"max_tokens": 10}) as response:
            async for line in response.content:
                now = time.perf_counter()
                if line.startswith(b"data: {\"choices\":[{"):
                    sends.append(float(line.split(b'"content":"')[1].split(b" ")[0]))
                    receives.append(now)
        return sends, receives

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        t0 = time.perf_counter()
        results = await asyncio.gather(*(one(session) for _ in range(streams)))
        wall = time.perf_counter() - t0
    lat = [x for s, r in results for x in added_latency_ms(s, r)]
    return sum(len(s) for s, _ in results), wall, lat


def run_point(port: int, load: int, streams: int, client) -> dict:
    base = f"http://127.0.0.1:{port}/rate/{load / streams}"  # the pace rides in the path for both clients
    chunks, wall, lat = asyncio.run(client(base, streams))
    lat.sort()
    return {"ingest_tps": chunks / wall, "p50_ms": lat[len(lat) // 2], "p99_ms": lat[int(0.99 * (len(lat) - 1))]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    queue = multiprocessing.Queue()
    proc = multiprocessing.Process(target=emitter, args=(queue, args.seconds), daemon=True)
    proc.start()
    port = queue.get(timeout=10)
    print(f"{'offered tok/s':>13} {'streams':>7} | {'ours tok/s':>10} {'p50 ms':>7} {'p99 ms':>7} | "
          f"{'ref tok/s':>10} {'p50 ms':>7} {'p99 ms':>7} | {'ours/ref':>8}")
    try:
        for load in LOADS:
            for streams in STREAMS:
                rows = {}
                for name, client in (("ours", ours), ("ref", reference)):
                    points = [run_point(port, load, streams, client) for _ in range(args.repeats)]
                    rows[name] = {k: statistics.median(p[k] for p in points) for k in points[0]}
                o, r = rows["ours"], rows["ref"]
                print(f"{load:>13} {streams:>7} | {o['ingest_tps']:>10.0f} {o['p50_ms']:>7.3f} {o['p99_ms']:>7.3f} | "
                      f"{r['ingest_tps']:>10.0f} {r['p50_ms']:>7.3f} {r['p99_ms']:>7.3f} | {o['ingest_tps'] / r['ingest_tps']:>8.2f}",
                      flush=True)
    finally:
        proc.terminate()


if __name__ == "__main__":
    main()
