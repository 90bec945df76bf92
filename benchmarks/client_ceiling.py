"""Benchmark: how fast can our load client ingest streams, how much latency does it add, and does its self-check
say so when it cannot keep up?

The emitter (tests/support/sse_emitter.py, a fixture, not an engine) streams OpenAI-style chunks at a paced
offered load from processes of its own, pinned to cores of their own (`--emitter-cpus`, the last core by
default), each chunk carrying its send time (perf_counter: CLOCK_MONOTONIC, one clock across processes). This
process, pinned to the other cores, reads the same streams two ways, one after the other: our StreamClient
(aiohttp, orjson, every chunk folded into its record) inside its self-check (measure/clientload.py LoopWatch,
as the cell runner runs it), and a minimal aiohttp reference reader. Printed side by side: achieved ingest
(tokens/s), added latency p50/p99 (receive - send), the reader's CPU per token (tokens per CPU second: the
per-core ceiling), our self-check's loop lag p99, CPU share and flag, and ours / reference. Each point runs
`--repeats` times; the median is printed.

    .venv/bin/python benchmarks/client_ceiling.py [--repeats 5] [--seconds 1] [--streams 1 8 64 256 512]
        [--loads 1000 5000 10000 20000 50000] [--emitters 1] [--emitter-cpus 1] [--client-processes 1]
    (--loads 0: unpaced, as fast as each reader takes them: its ceiling, and its tokens per CPU second)
    py-spy record -f raw -o profile.txt -- .venv/bin/python benchmarks/client_ceiling.py   (the `bench` extra)
Target: >= 0.95x the reference's ingest with < 5 ms more p99 than it, at every point both can reach; at 512
streams and 50,000 offered tokens/s on a machine with the cores for it. With httpx the client reached 0.77-0.82x
at 64 streams: the profile put 30% of the time in httpcore's anyio read path and 7% in json; aiohttp and orjson
brought it to the reference's rate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests/support")]
from sse_emitter import Emitter, paced_url  # noqa: E402

from stackbench.measure import clientload  # noqa: E402
from stackbench.measure.client import StreamClient, run_streams  # noqa: E402
from stackbench.measure.clientload import ClientPool  # noqa: E402
from stackbench.measure.workloads import Request  # noqa: E402

# Today's workstation grid (1-64 streams up to 20,000 tok/s), and a datacenter GPU's: 256 and 512 streams at
# 20,000 and 50,000 offered tok/s (a 27B model on one H200 or B200). --loads / --streams ask for a grid of their own.
POINTS = [(load, streams) for load in (1_000, 5_000, 10_000, 20_000) for streams in (1, 8, 64)] + \
         [(load, streams) for load in (20_000, 50_000) for streams in (64, 256, 512)]
FLOOD_TPS, FLOOD_BURST = 50_000, 16  # --loads 0: this many tokens a second of the run, 16 chunks a write, unpaced


def added_latency_ms(send_times: list[float], receive_times: list[float]) -> list[float]:
    return [(r - s) * 1000 for s, r in zip(send_times, receive_times)]


async def ours(url: str, streams: int, tokens: int, processes: int = 1) -> tuple[int, float, list[float], dict]:
    """Our client as the cell runner runs it: one process inside its LoopWatch, or a ClientPool of `processes`
    (its start outside the timing, as the runner starts it before the window)."""
    client = StreamClient(url, "m", {}, stall_timeout_s=30, request_timeout_s=120)
    requests = [Request(("go",), tokens)] * streams
    if processes > 1:
        with ClientPool(client, processes) as pool:
            t0 = time.perf_counter()
            records = await pool.run_streams(requests, streams)
            wall = time.perf_counter() - t0
        load = pool.load
    else:
        async with clientload.LoopWatch() as watch:
            t0 = time.perf_counter()
            records = await run_streams(client, requests, streams)
            wall = time.perf_counter() - t0
        load = watch.load
    await client.aclose()
    lat = []
    for r in records:
        lat += added_latency_ms([float(x) for x in r.content.split()], r.chunk_times)
    check = {"lag_p99_ms": load.lag_ms(99) or 0.0, "flagged": float(clientload.saturation(load, records) is not None),
             "workers_cpu_s": sum(load.cpu_seconds) if processes > 1 else 0.0}
    return sum(r.content_chunks for r in records), wall, lat, check


async def reference(url: str, streams: int, tokens: int, processes: int = 1) -> tuple[int, float, list[float], dict]:
    import aiohttp

    async def one(session):
        sends, receives = [], []
        async with session.post(url + "/v1/chat/completions", json={"max_tokens": tokens}) as response:
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
    return sum(len(s) for s, _ in results), wall, lat, {}


def run_point(base: str, load: int, streams: int, seconds: float, client, processes: int) -> dict:
    """One run at `load` offered tokens/s over `streams`; load 0 floods: FLOOD_TPS x seconds tokens in all, sent as
    fast as they are read (the reader's ceiling). CPU: this process's, or a pool's workers' event loops."""
    rate = load / streams
    tokens = max(1, int((load or FLOOD_TPS) / streams * seconds))
    cpu = time.process_time()
    chunks, wall, lat, check = asyncio.run(client(paced_url(base, rate, 1 if rate else FLOOD_BURST), streams, tokens,
                                                  processes))
    cpu = check.pop("workers_cpu_s", 0.0) or time.process_time() - cpu
    lat.sort()
    return {"ingest_tps": chunks / wall, "p50_ms": lat[len(lat) // 2], "p99_ms": lat[int(0.99 * (len(lat) - 1))],
            "tok_per_cpu_s": chunks / cpu if cpu > 0 else 0.0, "cpu_share": cpu / wall, **check}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--streams", type=int, nargs="+", help="a grid of these stream counts (default: POINTS)")
    parser.add_argument("--loads", type=int, nargs="+", help="... at these offered tokens/s (0: unpaced)")
    parser.add_argument("--emitters", type=int, default=1, help="emitter processes (on --emitter-cpus)")
    parser.add_argument("--client-processes", type=int, default=1, help="ours over this many worker processes (ClientPool)")
    parser.add_argument("--emitter-cpus", type=int, nargs="+", help="the emitter's cores (default: the last one)")
    args = parser.parse_args()
    points = [(load, streams) for load in args.loads or (1_000, 5_000, 10_000, 20_000, 50_000)
              for streams in args.streams or (1, 8, 64, 256, 512)] if args.loads or args.streams else POINTS
    cores = sorted(os.sched_getaffinity(0))
    emitter_cpus = set(args.emitter_cpus or cores[-1:])
    client_cpus = set(cores) - emitter_cpus or set(cores)
    os.sched_setaffinity(0, client_cpus)
    print(f"emitter: {args.emitters} process(es) on cores {sorted(emitter_cpus)}; readers on cores {sorted(client_cpus)} "
          f"(ours in {args.client_processes} process(es)); {args.repeats} repeats of {args.seconds:g} s, medians; "
          f"load average {os.getloadavg()[0]:.1f} at the start")
    print(f"{'offered':>7} {'streams':>7} | {'ours tok/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'tok/CPU-s':>9} | "
          f"{'lag p99':>7} {'CPU':>5} {'flag':>4} | {'ref tok/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'tok/CPU-s':>9} | "
          f"{'ours/ref':>8} {'+p99 ms':>7}")
    with Emitter(args.emitters, emitter_cpus) as base:
        for load, streams in points:
            rows = {}
            for name, client in (("ours", ours), ("ref", reference)):
                runs = [run_point(base, load, streams, args.seconds, client, args.client_processes)
                        for _ in range(args.repeats)]
                rows[name] = {k: statistics.median(p[k] for p in runs) for k in runs[0]}
            o, r = rows["ours"], rows["ref"]
            print(f"{load or 'flood':>7} {streams:>7} | {o['ingest_tps']:>10.0f} {o['p50_ms']:>7.3f} {o['p99_ms']:>7.3f} "
                  f"{o['tok_per_cpu_s']:>9.0f} | {o['lag_p99_ms']:>7.2f} {o['cpu_share']:>5.2f} {o['flagged']:>4.1f} | "
                  f"{r['ingest_tps']:>10.0f} {r['p50_ms']:>7.3f} {r['p99_ms']:>7.3f} {r['tok_per_cpu_s']:>9.0f} | "
                  f"{o['ingest_tps'] / r['ingest_tps']:>8.2f} {o['p99_ms'] - r['p99_ms']:>+7.2f}", flush=True)


if __name__ == "__main__":
    main()
