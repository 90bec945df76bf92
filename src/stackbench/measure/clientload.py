"""The load client's check of itself, in every cell: did it keep up? (issue 61)

A client that falls behind reads as a slow server: its chunks are stamped late, ITL and TTFT grow, and the
report would blame the stack, as it would for a throttled GPU or a busy host. Over the measured window (the
repeats; warm-up excluded) LoopWatch records, on the client's event loop:

- its lag: every LAG_SAMPLE_S a thread of its own hands the loop a callback (call_soon_threadsafe, the same
  wake-up a socket's data is) and the time until the loop runs it is one sample: the wait a chunk arriving at
  that moment has before it is read and stamped. A thread, not a timer on the loop: asyncio's epoll timeouts
  are whole milliseconds rounded up, so a timer's overshoot reads up to 1 ms on an idle loop; and a thread
  samples at moments independent of what the loop is doing;
- its CPU share: the loop thread's CPU seconds (time.thread_time, read on that thread) / the window's wall
  seconds. The loop's thread, not the whole process: the pipeline's process also runs the NVML and host
  samplers' threads (and a test's in-process stand-in), and one event loop runs on one thread, so one core is
  all it can ever use.

`saturation` turns them into the cell's flag (client_saturated, with the reason in every row's note); the
server's own generated-token rate over the same window stands beside the client's where the engine exports
its counter (token_rate_figures).
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from dataclasses import dataclass

import numpy

from stackbench.measure.client import RequestRecord
from stackbench.measure.summary import Figure
from stackbench.results.metrics import M

LAG_SAMPLE_S = 0.01  # 100 samples a second: p99 from 1,000 in a 10 s cell, at a few microseconds each
# The loop's thread busy this share of the window is a saturated client: one thread has one core at most, and
# at 90% busy a queue's wait is already nine times its service (M/M/1: rho / (1 - rho)), so reads wait behind
# each other and their stamps drift late (benchmarks/client_ceiling.py: a client pinned to one core under more
# streams than it reads sits at 0.95-1.0).
SATURATED_CPU_SHARE = 0.9
# Loop lag p99 above LAG_SHARE of the cell's median inter-chunk gap is a saturated client: one chunk in a
# hundred stamped at least half a gap late, so the ITL tail is the client's, not the server's. Never below
# LAG_FLOOR_MS: the client's added p99 latency the issue holds it to against a minimal reader (5 ms,
# docs/benchmarks.md); on a CPU node the client shares the cores with the engine, and wake-up delays of a few
# ms there are the node's scheduling, not a client that cannot keep up.
LAG_SHARE = 0.5
LAG_FLOOR_MS = 5.0


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
    """`async with LoopWatch() as watch:` around the window; then `watch.load` (ClientLoad)."""

    def __init__(self, sample_s: float = LAG_SAMPLE_S, clock=time.perf_counter):
        self.sample_s, self.clock = sample_s, clock
        self.lags: list[float] = []
        self.stop = threading.Event()
        self.load: ClientLoad | None = None

    async def __aenter__(self) -> LoopWatch:
        self.loop = asyncio.get_running_loop()
        self.thread = threading.Thread(target=self._sample, name="client-loop-lag", daemon=True)
        self.started, self.cpu = self.clock(), time.thread_time()
        self.thread.start()
        return self

    async def __aexit__(self, *exc) -> None:
        cpu, now = time.thread_time() - self.cpu, self.clock() - self.started
        self.stop.set()
        self.thread.join()  # wakes at once from its wait: no sample is handed to a loop that is gone
        self.load = ClientLoad(now, (cpu,), tuple(self.lags))

    def _sample(self) -> None:
        while not self.stop.wait(self.sample_s):
            self.loop.call_soon_threadsafe(self._ran, self.clock())

    def _ran(self, sent: float) -> None:
        self.lags.append(self.clock() - sent)


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
    p99, gap = load.lag_ms(99), median_gap_ms(records)
    limit = max(LAG_FLOOR_MS, LAG_SHARE * gap) if gap is not None else LAG_FLOOR_MS
    if p99 is not None and p99 > limit:
        against = f"half the median inter-chunk gap ({gap:.1f} ms)" if limit > LAG_FLOOR_MS else f"{LAG_FLOOR_MS:g} ms"
        # a lagging loop with time to spare waited for a CPU: the host's cores were busy elsewhere
        waited = "" if busy else f", its loop busy only {load.cpu_share:.0%} of a core: it waited for a CPU"
        why.append(f"loop lag p99 {p99:.1f} ms above {against}{waited}")
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
