"""The load client's check of itself, in every cell: did it keep up? (issue 61)

A client that falls behind reads as a slow server: its chunks are stamped late, ITL and TTFT grow, and the
report would blame the stack, as it would for a throttled GPU or a busy host. Over the measured window (the
repeats; warm-up excluded) LoopWatch records, on the client's event loop:

- its lag: a task on the loop sleeps LAG_SAMPLE_S at a time, and how late each wake-up runs is one sample: the
  wait a chunk whose data arrived then has behind the loop's other work before it is read and stamped (the
  timer runs after the reads of the iteration it fell due in, as a chunk does). It includes asyncio's rounding
  of epoll timeouts up to the next whole millisecond: an idle loop reads up to 1 ms. A task, not a thread: a
  second Python thread waking at 100 Hz took the GIL from a busy loop often enough to cut its tokens read per
  CPU second by 17-27% at 512 streams (benchmarks/client_ceiling.py's emitter, this machine, shared); the task
  cut them by 3%, within the noise;
- its CPU share: the loop thread's CPU seconds (time.thread_time, read on that thread) / the window's wall
  seconds. The loop's thread, not the whole process: the pipeline's process also runs the NVML and host
  samplers' threads (and a test's in-process stand-in), and one event loop runs on one thread, so one core is
  all it can ever use.

`saturation` turns them into the cell's flag (client_saturated, with the reason in every row's note); the
server's own generated-token rate over the same window stands beside the client's where the engine exports
its counter (token_rate_figures).

Where one event loop cannot read a cell's streams, ClientPool spreads them over worker processes, each its own
interpreter, event loop, StreamClient and LoopWatch: every request runs the single-process client's own code
(client.run_streams), stamped on perf_counter, CLOCK_MONOTONIC on Linux and so one clock for every process of
the machine, and the records come back merged as run_streams returns them (by stream, each stream's requests in
order, `request` the index in the list given). How many: the warm-up's own load says (processes_for_load).
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import queue
import statistics
import time
from dataclasses import dataclass

import numpy

from stackbench.measure.client import RequestRecord, StreamClient, run_streams
from stackbench.measure.summary import Figure
from stackbench.measure.workloads import Request
from stackbench.results.metrics import M

LAG_SAMPLE_S = 0.01  # 100 samples a second: p99 from 1,000 in a 10 s cell, one loop wake-up each
# The loop's thread busy this share of the window is a saturated client: one thread has one core at most, and
# at 90% busy a queue's wait is already nine times its service (M/M/1: rho / (1 - rho)), so reads wait behind
# each other and their stamps drift late.
SATURATED_CPU_SHARE = 0.9
# Loop lag p99 above LAG_SHARE of the cell's median inter-chunk gap is a saturated client: one chunk in a
# hundred stamped at least half a gap late, so the ITL tail is the client's, not the server's. Never below
# LAG_FLOOR_MS: a host's scheduler delays a waking thread by a few ms when its cores are busy (CFS wake-up
# granularity 1-4 ms; on this shared 2-core machine the loop's lag p99 and both readers' added latency p99 sat at
# 4-5 ms at 1-8 streams while reading every token on time, benchmarks/client_ceiling.py), and on a CPU node the
# client shares the cores with the engine: that is the node's scheduling, not a client that cannot keep up.
LAG_SHARE = 0.5
LAG_FLOOR_MS = 10.0
# A client process is given streams for at most half its core: at 50% busy a read waits about one read's time
# (M/M/1: rho / (1 - rho) = 1), well inside the lag limits above.
BUSY_TARGET = 0.5
# Our client's ingest per CPU second, one token a chunk from 512 paced streams (benchmarks/client_ceiling.py, its
# tok/CPU-s column at 50,000 offered tokens/s on this 2-core machine, idle, 2026-12-05: 37,694, the reference reader
# 41,531; docs/benchmarks-log.md), rounded down: what a real run's client processes are sized by before it has a
# warm-up of its own (processes_for_rate).
TOKENS_PER_CPU_S = 37_000


@dataclass(frozen=True)
class ClientLoad:
    """The client's own load over a window: per client process its loop thread's CPU seconds, and every loop
    lag sample (s)."""

    seconds: float
    cpu_seconds: tuple[float, ...]
    lags_s: tuple[float, ...]

    @property
    def processes(self) -> int:
        return len(self.cpu_seconds)

    @property
    def cpu_share(self) -> float:
        """The busiest process's loop thread: CPU seconds / wall seconds (1.0: one core, all the time)."""
        return max(self.cpu_seconds) / self.seconds if self.seconds > 0 else 0.0

    def lag_ms(self, q: float) -> float | None:
        return float(numpy.percentile(self.lags_s, q)) * 1000 if self.lags_s else None


class LoopWatch:
    """`async with LoopWatch() as watch:` around the window, on the loop it watches; then `watch.load` (ClientLoad)."""

    def __init__(self, sample_s: float = LAG_SAMPLE_S, clock=time.perf_counter):
        self.sample_s, self.clock = sample_s, clock
        self.lags: list[float] = []
        self.load: ClientLoad | None = None

    async def __aenter__(self) -> LoopWatch:
        self.started, self.cpu = self.clock(), time.thread_time()  # the loop's own thread: this one
        self.task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc) -> None:
        cpu, now = time.thread_time() - self.cpu, self.clock() - self.started
        self.task.cancel()
        self.load = ClientLoad(now, (cpu,), tuple(self.lags))

    async def _sample(self) -> None:
        while True:
            due = self.clock() + self.sample_s
            await asyncio.sleep(self.sample_s)
            self.lags.append(max(0.0, self.clock() - due))


def median_gap_ms(records: list[RequestRecord]) -> float | None:
    """The cell's median inter-chunk gap (vLLM's ITL: chunks with choices), over every request."""
    gaps = [g for r in records for g in r.inter_chunk_ms()]
    return statistics.median(gaps) if gaps else None


def saturation(load: ClientLoad, records: list[RequestRecord]) -> str | None:
    """Why the client was the bottleneck of this window ('CLIENT SATURATED ...'), None where it kept up."""
    why = []
    busy = load.cpu_share >= SATURATED_CPU_SHARE
    if busy:
        why.append(f"its event loop busy {load.cpu_share:.0%} of a core (>= {SATURATED_CPU_SHARE:.0%})")
    p50, p99, gap = load.lag_ms(50), load.lag_ms(99), median_gap_ms(records)
    limit = max(LAG_FLOOR_MS, LAG_SHARE * gap) if gap is not None else LAG_FLOOR_MS
    against = f"half the median inter-chunk gap ({gap:.1f} ms)" if limit > LAG_FLOOR_MS else f"{LAG_FLOOR_MS:g} ms"
    # A loop late at its median has a backlog it cannot clear, whoever holds the core: the client is behind. A loop
    # late only in its tail with half its core to spare waited now and then for a CPU the host gave elsewhere (on
    # a CPU node, to the engine's own threads: the default's llama-server cells read p50 0.1-0.2 ms, p99 4-12 ms
    # at 1-2% of a core; a busy host is analysis/hoststate.py's flag): its lag stays a figure of the cell.
    if p50 is not None and p50 > limit:
        why.append(f"loop lag p50 {p50:.1f} ms above {against}: late at its median, a backlog")
    elif p99 is not None and p99 > limit and load.cpu_share >= BUSY_TARGET:
        why.append(f"loop lag p99 {p99:.1f} ms above {against}, its loop busy {load.cpu_share:.0%} of a core")
    if not why:
        return None
    return "CLIENT SATURATED, not the stack's speed: " + "; ".join(why)


def figures(load: ClientLoad, records: list[RequestRecord]) -> tuple[list[Figure], str | None]:
    """The client's load figures over the window and its flag (client_saturated, 1 with the reason as its note),
    and the reason (None where it kept up) for every row of the cell."""
    why = saturation(load, records)
    over = f"over {load.seconds:.1f} s, {load.processes} client process{'es' if load.processes > 1 else ''}"
    lag_note = f"{len(load.lags_s)} samples every {LAG_SAMPLE_S * 1000:g} ms {over}"
    found = [Figure(M.client_cpu_share, load.cpu_share, "mean", load.processes,
                    note=f"the busiest event loop's thread: {max(load.cpu_seconds):.2f} CPU s {over}"),
             Figure(M.client_saturated, 1.0 if why else 0.0, "single", 1, note=why or f"kept up {over}")]
    if load.lags_s:
        found[1:1] = [Figure(M.client_loop_lag_p50_ms, load.lag_ms(50), "median", len(load.lags_s), note=lag_note),
                      Figure(M.client_loop_lag_p99_ms, load.lag_ms(99), "p99", len(load.lags_s), note=lag_note)]
    return found, why


def token_rate_figures(server_tokens: float | None, records: list[RequestRecord], seconds: float) -> list[Figure]:
    """The engine's own generated-token rate over the window between two /metrics scrapes, beside the client's
    for the same window (the output tokens of the requests it received): where they part, the client counted
    other tokens than the server made, or someone else's requests shared the server. None without the counter."""
    if server_tokens is None or seconds <= 0:
        return []
    client_tokens = sum(r.tokens for r in records if r.status == "ok")
    note = f"over the {seconds:.1f} s between the cell's two /metrics scrapes"
    ratio = f"; the client's {client_tokens} tokens / the server's {server_tokens:.0f}" if server_tokens else ""
    return [Figure(M.server_generated_tps, server_tokens / seconds, "mean", 1, note=note + ratio),
            Figure(M.client_received_tps, client_tokens / seconds, "mean", len(records), note=note)]


def merged(loads: list[ClientLoad]) -> ClientLoad:
    """Several processes' loads over one window: the longest wall, every process's CPU time, every lag sample."""
    return ClientLoad(max(load.seconds for load in loads), tuple(c for load in loads for c in load.cpu_seconds),
                      tuple(lag for load in loads for lag in load.lags_s))


def processes_for_load(load: ClientLoad | None, cores: int | None = None) -> int:
    """The client processes a cell needs, from one process's load at its shape (its warm-up): enough that each
    loop stays under BUSY_TARGET of its core, at most the cores this process may run on."""
    if load is None:
        return 1
    cores = cores or len(os.sched_getaffinity(0))
    return max(1, min(cores, math.ceil(load.cpu_share / BUSY_TARGET)))


def processes_for_rate(tokens_per_s: float) -> int:
    """The client processes a cell streaming `tokens_per_s` output tokens (one a chunk) needs, each held to
    BUSY_TARGET of its core at TOKENS_PER_CPU_S: a rehearsal's budget says it for the real run."""
    return max(1, math.ceil(tokens_per_s / (TOKENS_PER_CPU_S * BUSY_TARGET)))


def split_streams(requests: list[Request], concurrency: int, processes: int) -> list[tuple[int, int, list[int]]]:
    """Per worker: its first stream, its streams (a contiguous block, the first ones one larger where they do not
    divide) and the indices of its requests: request j to the worker of stream j mod concurrency, as the single
    loop's streams take them (stream i its i-th, then whichever frees first), so each worker has its streams'
    share of the queue."""
    processes = min(processes, concurrency)
    sizes = [concurrency // processes + (w < concurrency % processes) for w in range(processes)]
    firsts = [sum(sizes[:w]) for w in range(processes)]
    return [(first, size, [j for j in range(len(requests)) if first <= j % concurrency < first + size])
            for first, size in zip(firsts, sizes)]


class ClientPool:
    """`with ClientPool(client, processes, final_hook) as pool:` the cell's worker processes, each with `client`'s
    settings; `await pool.run_streams(requests, concurrency)` as client.run_streams; after the block, `pool.load`:
    the workers' ClientLoad, merged, over the window from their first job to the pool's close."""

    START_MARGIN_S = 0.2  # a repeat's jobs reach every worker before the common start they carry
    READY_TIMEOUT_S = 120.0  # the first pool's fork server imports the package before its workers report ready

    def __init__(self, client: StreamClient, processes: int, final_hook=None):
        self.settings = {"base_url": client.base_url, "model": client.model, "extras": client.extras,
                         "stall_timeout_s": client.stall_timeout_s, "request_timeout_s": client.request_timeout_s,
                         "api_key": client.api_key}
        self.processes, self.final_hook = processes, final_hook
        self.load: ClientLoad | None = None

    def __enter__(self) -> ClientPool:
        # forkserver: a server process imports this module once (the package takes seconds), and each worker is a
        # fork of it, with none of this process's threads or sockets
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__])
        self.results = context.Queue()
        self.jobs = [context.Queue() for _ in range(self.processes)]
        self.workers = [context.Process(target=_worker, args=(self.settings, self.final_hook, jobs, self.results),
                                        name=f"client-{w}", daemon=True) for w, jobs in enumerate(self.jobs)]
        for worker in self.workers:
            worker.start()
        for _ in self.workers:
            self._next(self.READY_TIMEOUT_S)
        return self

    def __exit__(self, *exc) -> None:
        for jobs in self.jobs:
            jobs.put(None)
        try:
            loads = [self._next(self.READY_TIMEOUT_S) for _ in self.workers]
            self.load = merged([load for load in loads if load is not None]) if any(loads) else None
        finally:
            for worker in self.workers:
                worker.join(timeout=10)
                if worker.is_alive():
                    worker.kill()

    def _next(self, timeout_s: float):
        """The next worker message; RuntimeError where a worker exited without one."""
        waited = 0.0
        while True:
            try:
                return self.results.get(timeout=1.0)
            except queue.Empty:
                waited += 1.0
                dead = [w.name for w in self.workers if not w.is_alive() and w.exitcode not in (0, None)]
                if dead or waited >= timeout_s:
                    raise RuntimeError(f"client worker {', '.join(dead) or 'silent'}: no answer after {waited:.0f} s") from None

    async def run_streams(self, requests: list[Request], concurrency: int) -> list[RequestRecord]:
        blocks = split_streams(requests, concurrency, self.processes)
        start_at = time.perf_counter() + self.START_MARGIN_S
        for jobs, (first, size, indices) in zip(self.jobs, blocks):
            jobs.put((start_at, first, size, indices, [requests[j] for j in indices]))
        loop = asyncio.get_running_loop()
        # patient as the requests themselves: a worker answers when its streams' requests have ended
        patience = self.settings["request_timeout_s"] * (len(requests) // concurrency + 1) + 60
        answers = [await loop.run_in_executor(None, self._next, patience) for _ in blocks]
        by_first = dict(answers)
        return [r for first, _, _ in blocks for r in by_first[first]]


def _worker(settings: dict, final_hook, jobs, results) -> None:
    """One client process: its jobs (a start time, its streams, its requests with their indices) one after
    another, each answered with its records (stream and request renumbered to the cell's); at the end, its load."""

    async def serve() -> ClientLoad | None:
        client, watch, loop = StreamClient(**settings), None, asyncio.get_running_loop()
        try:
            while (job := await loop.run_in_executor(None, jobs.get)) is not None:
                if watch is None:
                    watch = LoopWatch()
                    await watch.__aenter__()
                start_at, first, size, indices, requests = job
                await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
                records = await run_streams(client, requests, size, final_hook)
                for record in records:
                    record.stream, record.request = record.stream + first, indices[record.request]
                results.put((first, records))
        finally:
            if watch is not None:
                await watch.__aexit__(None, None, None)
            await client.aclose()
        return watch.load if watch is not None else None

    results.put("ready")
    results.put(asyncio.run(serve()))
