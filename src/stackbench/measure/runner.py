"""The cell runner: one cell against a running server, returned as a CellResult.

A repeat is a closed loop (c streams sharing c x `requests_per_stream` requests, back to back) or an
open loop (requests sent at drawn arrival times, whatever is still in flight).

Order inside a cell: apply the power cap, warm up at the cell's own shape (never counted), open the measurement window (counter
scrape, energy counters read at that moment), send every repeat, close the window. Only the measured repeats are inside the window,
so energy per token and acceptance cover exactly the requests they are divided by. The client watches its own event loop over
the same window (measure/clientload.py), and a cell where it could not keep up is flagged.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from dataclasses import dataclass, field

from stackbench.config.kinds import KINDS
from stackbench.engines import prometheus
from stackbench.engines.base import SpecCounters, stated_limit, streams_token_per_chunk
from stackbench.host import powercap, telemetry
from stackbench.measure import acceptance, accuracy, calibrate, clientload, divergence, precision, probes, summary, toolcall, workloads
from stackbench.measure.client import RequestRecord, StreamClient, run_open_loop, run_streams
from stackbench.plan.launchspec import Cell
from stackbench.results.metrics import M

# The kinds whose cell runs once (KINDS[...].runs), by what they send: the function that runs the cell and
# the request fields of every request. The probes run with thinking off (a reasoning template would spend
# the answer's tokens thinking); the accuracy set with the workload's own setting (the basis says which).
# A no-spec launch's probes also measure its own noise floor (probes.noise_floor_figure).
# The probes go one at a time; the accuracy set on the cell's concurrency of streams.
# The divergence pass scores a text through the adapter's route (a server endpoint or the engine's tool).
ONCE = {"probes": lambda cell, spec: (functools.partial(probes.run, noise_floor=not spec.launch.speculates),
                                      probes.THINKING_OFF),
        "accuracy": lambda cell, spec: (functools.partial(accuracy.run, streams=cell.concurrency or 1),
                                        workloads.request_fields(cell.workload)),
        "divergence": lambda cell, spec: (functools.partial(divergence.run, spec=spec), {})}


class WarmupFailed(RuntimeError):
    """A warm-up request did not complete: the cell fails with its reason instead of measuring a cold server."""


@dataclass
class CellResult:
    cell: Cell
    status: str  # ok | rejected | failed | not_run
    reason: str | None = None
    figures: list[summary.Figure] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)
    prompt_tokens: int | None = None
    basis: dict = field(default_factory=dict)  # what the timings counted (summary.cell_basis)
    cap: powercap.CapResult | None = None
    seconds: float = 0.0
    outputs: dict | None = None  # a probe cell's greedy outputs by id, stored with the run
    sizing_note: str | None = None  # how its prompts were sized to a length in tokens (calibrate)
    precision_note: str | None = None  # under measure.target_rel_ci: how many repeats, and whether it was reached
    scrape_note: str | None = None  # a speculative launch's /metrics scrape that failed: what is missing and why
    host_note: str | None = None  # the host was busy outside the launch (sequencer, host/hostload.py): by what
    client_note: str | None = None  # the client could not keep up (measure/clientload.py): why

    def correctness_notes(self) -> list[str]:
        """Why this cell's speed figures do not mean what they say: it produced other lengths than asked (a
        different workload), or its outputs loop (degenerate output decodes fast)."""
        shares = {f.metric: f for f in self.figures if f.metric in (M.output_len_ok, M.looping)}
        notes = []
        if M.output_len_ok in shares and shares[M.output_len_ok].value < 1:
            notes.append(f"output length not as asked: {shares[M.output_len_ok].note}")
        if M.looping in shares and shares[M.looping].value > 0:
            notes.append(f"outputs loop: {shares[M.looping].note}")
        return notes

    def row_extra(self) -> dict:
        """Row fields beyond the launch basis: what was counted, the open-loop rate, the enforced cap; the note
        says how the load was driven and, when the cap was not applied, why (the requested cap stays the
        cell's identity)."""
        extra = {"counted_text": self.basis.get("counted_text"), "chunk_tokens_from": self.basis.get("tokens_per_chunk"),
                 "request_rate": self.cell.rate}
        notes = [load_note(self.cell), self.sizing_note, self.precision_note, self.scrape_note, *self.correctness_notes(),
                 summary.slowdown_note(self.figures, self.cell.power_cap_w is not None), self.host_note, self.client_note]
        if self.cap is not None:
            extra["power_cap_enforced_w"] = self.cap.enforced_w if self.cap.applied else None
            if not self.cap.applied:
                notes.append(f"power cap not applied: {self.cap.reason}")
        if any(notes):
            extra["note"] = "; ".join(n for n in notes if n)
        return extra


def load_note(cell: Cell) -> str | None:
    """How an open-loop cell or a multi-request closed loop was driven; None for today's one-request burst."""
    load = cell.load
    if cell.rate is not None:
        until = " or ".join(x for x in (load.requests and f"{load.requests} requests",
                                         load.duration_s and f"{load.duration_s:g} s") if x)
        shape = f" (burstiness {load.burstiness:g})" if load.arrival == "gamma" else ""
        return f"open loop: {load.arrival}{shape} arrivals at {cell.rate:g} req/s, {until} per repeat, seed {load.seed}"
    if load.requests_per_stream > 1:
        return (f"closed loop: {cell.concurrency * load.requests_per_stream} requests ({load.requests_per_stream} per stream) "
                "from one shared queue, each stream sending the next as its answer ends")
    return None


@dataclass(frozen=True)
class Scrape:
    """One /metrics read: the speculative counters (None: the server has none), the engine's generated-token
    counter (None: it exports none) and when it was read (perf_counter)."""

    counters: SpecCounters | None
    generated: float | None
    at: float


class CellRunner:
    """Runs cells against one live server; knows the adapter, the measure settings and the telemetry."""

    def __init__(self, base_url: str, adapter, spec, api_key: str | None, sampler=None, capper=None,
                 telemetry_why: str | None = None, alive=lambda: True, progress=None):
        self.base_url, self.adapter, self.spec, self.api_key = base_url, adapter, spec, api_key
        self.sampler, self.capper, self.telemetry_why = sampler, capper, telemetry_why
        self.alive, self.progress = alive, progress
        self.warmed: dict[tuple, clientload.ClientLoad | None] = {}  # each warmed shape: its warm-up's client load
        self.chars_per_token: dict[str, tuple[float, str | None]] = {}  # calibrated once per launch (calibrate)

    def texts_of(self, cell: Cell) -> workloads.Texts:
        """The cell's texts (workloads.Texts): its round's where each round draws new texts (the default), else round
        1's; a round's draw holds the cell's most repeats (Measure.most_repeats), so rounds take disjoint texts."""
        fresh = self.spec.measure.texts_across_rounds == "new"
        return workloads.Texts(self.spec.measure.text_seed, self.spec.launch.replicate if fresh else 1, cell.key,
                               self.spec.measure.most_repeats)

    def apply_cap(self, cell: Cell) -> powercap.CapResult | None:
        if cell.power_cap_w is None:
            if self.capper is not None:
                self.capper.restore()  # a sweep's uncapped cell: the limits found at the launch's start
            return None
        if self.capper is None:
            return powercap.CapResult(cell.power_cap_w, None, False, self.telemetry_why)
        try:
            return self.capper.apply(cell.power_cap_w)
        except (ValueError, telemetry.TelemetryUnavailable) as err:
            return powercap.CapResult(cell.power_cap_w, None, False, str(err))

    def scrape(self) -> tuple[Scrape | None, str | None]:
        """The server's counters now (None when the scrape failed), and why the scrape failed (None when it did
        not). A reply that is not the Prometheus text format raises MetricsFormatError, which fails the cell
        with its reason."""
        import httpx

        url = self.base_url + self.adapter.metrics_path
        try:
            reply = httpx.get(url, timeout=10)
        except httpx.HTTPError as err:
            return None, f"{url}: {type(err).__name__}: {err}"
        if reply.status_code != 200:  # metrics not enabled (e.g. an external llama-server without --metrics)
            return None, f"{url}: HTTP {reply.status_code}"
        generated = prometheus.value(prometheus.parse(reply.text), self.adapter.generated_tokens_counter)
        return Scrape(self.adapter.spec_counters(reply.text), generated, time.perf_counter()), None

    def run(self, cell: Cell) -> CellResult:
        cap = self.apply_cap(cell)
        t0 = time.monotonic()
        runs = KINDS[cell.workload.kind].runs
        if runs in ONCE:
            try:
                result = asyncio.run(self._once(cell, *ONCE[runs](cell, self.spec)))
            except ValueError as err:  # an accuracy set planned without its questions, a text no engine scored
                result = CellResult(cell, "failed", str(err))
            result.cap, result.seconds = cap, time.monotonic() - t0
            return result
        try:
            repeats, delta, reading, sizing, scrape_note, client, generated = asyncio.run(self._measure(cell))
        except prometheus.MetricsFormatError as err:
            result = CellResult(cell, "failed", f"/metrics unreadable: {err}")
        except (calibrate.CalibrationError, WarmupFailed) as err:
            result = CellResult(cell, "failed", str(err))
        else:
            result = self._judge(cell, repeats, delta, reading)
            self._judge_client(result, client, repeats, generated)
            result.sizing_note = self.sizing_note(cell, sizing)
            result.precision_note = precision.precision_note(repeats, cell.concurrency, self.spec.measure)
            result.scrape_note = scrape_note
        result.cap, result.seconds = cap, time.monotonic() - t0
        return result

    def sizing_note(self, cell: Cell, sizing: workloads.Sizing | None) -> str | None:
        """How the cell's prompts were sized and, for a length over what one request may hold as launched,
        that it was sent anyway so the server states its limit."""
        if sizing is None:
            return None
        limit = self.adapter.request_context(self.spec.launch)
        over = sizing.tokens + cell.workload.output_tokens > limit
        return f"prompt length ~{sizing.tokens} tokens: {sizing.how}" + (
            f"; prompt + output over the {limit} tokens one request may hold as launched" if over else "")

    async def _measure(self, cell: Cell):
        measure = self.spec.measure
        # A tool call ends where the model ends it: no fixed length (output_tokens only caps it); so do a class's
        # texts that carry their own tools (BFCL's).
        calls = cell.workload.tool is not None or any(t["tools"] for t in cell.workload.texts)
        fixed = None if calls else cell.workload.output_tokens
        # a salted conversation's first turn is served by no earlier request; its later turns reuse its own prefix
        reuse = not cell.workload.salt or cell.workload.turns > 1
        extras = {**self.adapter.request_extras(self.spec.launch, fixed, reuse_prefix=reuse),
                  **workloads.request_fields(cell.workload)}
        client = StreamClient(self.base_url, self.spec.launch.model.name, extras,
                              measure.stall_timeout_s, measure.request_timeout_s, api_key=self.api_key)
        try:
            sizing = None
            if cell.prompt_tokens_target is not None:
                sizing = await calibrate.sizing(client, self.adapter, cell.workload.prompts, cell.prompt_tokens_target,
                                                self.chars_per_token)
            await self._warm_up(client, cell, sizing)
            processes = self.client_processes(cell)
            pool = clientload.ClientPool(client, processes, self.adapter.server_timings) if processes > 1 else None
            with pool or contextlib.nullcontext():
                before, before_failed = self.scrape()
                window = self.sampler.open_window() if self.sampler is not None else None
                repeats: list[list[RequestRecord]] = []
                most = measure.most_repeats
                async with clientload.LoopWatch() as watch:
                    while len(repeats) < most:
                        if self.progress:
                            self.progress(f"{cell.key} repeat {len(repeats) + 1}/{most}")
                        records = await self._send(client, cell, len(repeats), sizing, pool)
                        repeats.append(records)
                        if any(r.status in ("failed", "timeout") for r in records) and not self.alive():
                            break
                        if precision.precise_enough(repeats, cell.concurrency, measure):
                            break
            reading = self.sampler.close_window(window) if window is not None else None
            after, after_failed = self.scrape()
        finally:
            await client.aclose()
        both = before is not None and after is not None
        delta = after.counters.minus(before.counters) if both and before.counters and after.counters else None
        # the engine's own tokens over the window between the scrapes, where it counts them
        generated = (after.generated - before.generated, after.at - before.at) \
            if both and before.generated is not None and after.generated is not None else None
        failed = before_failed or after_failed
        # Only a speculative launch loses a figure (accept_len) to a failed scrape; it says so where it would be.
        scrape_note = (f"/metrics scrape failed, acceptance not measured: {failed}"
                       if failed and self.spec.launch.speculates else None)
        return repeats, delta, reading, sizing, scrape_note, pool.load if pool else watch.load, generated

    async def _warm_up(self, client: StreamClient, cell: Cell, sizing: workloads.Sizing | None) -> None:
        """Before the first repeat of each (workload, concurrency, rate, prompt length, cap) on this server:
        `warmup_requests` rounds of one request per stream at the cell's concurrency (one stream for an open
        loop) and prompt length, so a concurrency's first batch and a ladder point's length pay their
        compilation and autotuning here, outside the window. A request that fails raises WarmupFailed; one the
        server rejects (a ladder point over the context) ends the warm-up, and the measured requests record that
        rejection as the cell's outcome with the engine's message."""
        shape = self.shape(cell)
        if shape in self.warmed:
            return
        streams = cell.concurrency or 1
        load = None
        for _ in range(self.spec.measure.warmup_requests):
            async with clientload.LoopWatch() as watch:  # one process's load at the cell's shape (client_processes)
                records = await run_streams(client, workloads.requests(cell.workload, cell.load, streams, workloads.WARM_UP,
                                                                       sizing, self.texts_of(cell)), streams)
            load = watch.load
            bad = next((r for r in records if r.status != "ok"), None)
            if bad is not None and bad.status == "rejected":
                return
            if bad is not None:
                raise WarmupFailed(f"warm-up at c{streams} failed ({bad.status}): {bad.error}")
        self.warmed[shape] = load

    @staticmethod
    def shape(cell: Cell) -> tuple:
        return cell.workload.name, cell.concurrency, cell.rate, cell.prompt_tokens_target, cell.power_cap_w

    def client_processes(self, cell: Cell) -> int:
        """How many processes read a closed-loop cell's streams: measure.client_processes, or under "auto" as
        many as keep each loop under half its core at the load one process had in the warm-up (clientload
        .processes_for_load); never more than its streams. An open loop is read by this process."""
        if cell.rate is not None:
            return 1
        asked = self.spec.measure.client_processes
        wanted = clientload.processes_for_load(self.warmed.get(self.shape(cell))) if asked == "auto" else asked
        return max(1, min(wanted, cell.concurrency))

    async def _once(self, cell: Cell, run, extras: dict) -> CellResult:
        """The correctness probes or the accuracy set (ONCE), once, without warm-up (the cache probe's first
        request must be cold) and without the engine's fixed-length fields: answers end where the model ends them."""
        measure = self.spec.measure
        client = StreamClient(self.base_url, self.spec.launch.model.name, extras,
                              measure.stall_timeout_s, measure.request_timeout_s, api_key=self.api_key)
        try:
            async with clientload.LoopWatch() as watch:
                figures, outputs, records = await run(client, cell.workload, self.adapter)
        finally:
            await client.aclose()
        result = self._judge(cell, [records], None, None, figures)
        self._judge_client(result, watch.load, [records], None)
        result.outputs = outputs if result.status == "ok" else None
        return result

    async def _send(self, client: StreamClient, cell: Cell, repeat: int, sizing: workloads.Sizing | None,
                    pool: clientload.ClientPool | None = None) -> list[RequestRecord]:
        """One repeat: open-loop arrivals at the cell's rate, or `concurrency` streams sharing
        concurrency x `requests_per_stream` requests (over the pool's processes where it has one)."""
        load, hook = cell.load, self.adapter.server_timings
        if cell.rate is not None:
            offsets = workloads.arrival_offsets(load, cell.rate, repeat)
            return await run_open_loop(client, workloads.requests(cell.workload, load, len(offsets), repeat, sizing,
                                                                  self.texts_of(cell)), offsets, hook)
        requests = workloads.requests(cell.workload, load, cell.concurrency * load.requests_per_stream, repeat, sizing,
                                      self.texts_of(cell))
        if pool is not None:
            return await pool.run_streams(requests, cell.concurrency)
        return await run_streams(client, requests, cell.concurrency, hook)

    def steady_spans(self, cell: Cell, repeats: list[list[RequestRecord]]) -> list[tuple[float, float, float, list[dict]]]:
        """Per repeat with a steady window: (start, end on the sampler's clock, output tokens inside, NVML
        samples around it). The client stamps with perf_counter and the sampler with monotonic; the offset
        between them is read now."""
        if self.sampler is None or cell.concurrency is None:
            return []
        offset = time.monotonic() - time.perf_counter()
        spans = []
        for records in repeats:
            window = summary.steady_window(records, cell.concurrency)
            if window:
                start, end = window
                # With the samples that bracket its edges: the energy counter is interpolated there.
                spans.append((start + offset, end + offset, summary.tokens_between(records, start, end),
                              self.sampler.window(start + offset - telemetry.MAX_SAMPLE_GAP_S,
                                                  end + offset + telemetry.MAX_SAMPLE_GAP_S)))
        return spans

    @staticmethod
    def _judge_client(result: CellResult, load: clientload.ClientLoad | None, repeats: list[list[RequestRecord]],
                      generated: tuple[float, float] | None) -> None:
        """A measured cell gets the client's own load over its window and, where the engine counts its
        tokens (generated: its tokens and the seconds between the scrapes), its rate beside the client's; a
        client that could not keep up flags the cell (client_note, in every row's note)."""
        if result.status != "ok" or load is None:
            return
        records = [r for rep in repeats for r in rep]
        figures, result.client_note = clientload.figures(load, records)
        result.figures += figures + (clientload.token_rate_figures(generated[0], records, generated[1]) if generated else [])

    def _judge(self, cell: Cell, repeats, delta, reading, probe_figures: list[summary.Figure] | None = None) -> CellResult:
        records = [r for rep in repeats for r in rep]
        requests = [{**r.to_row(), "repeat": i, "workload": cell.workload.name, "concurrency": cell.concurrency,
                     "request_rate": cell.rate} for i, rep in enumerate(repeats) for r in rep]
        prompt_tokens = sorted(r.prompt_tokens for r in records if r.prompt_tokens)
        result = CellResult(cell, "ok", requests=requests, basis=summary.cell_basis(repeats),
                            prompt_tokens=int(prompt_tokens[len(prompt_tokens) // 2]) if prompt_tokens else None)
        bad = [r for r in records if r.status != "ok"]
        if bad:
            worst = next((r for r in bad if r.status == "rejected"), bad[0])
            result.status = "rejected" if worst.status == "rejected" else "failed"
            result.reason = worst.error
            if not self.alive():
                result.status, result.reason = "failed", f"server exited mid-cell: {worst.error}"
            elif (limit := stated_limit(self.adapter, worst.error)) is not None:
                # A refusal is a result: keep the limit the engine states.
                result.figures = [summary.Figure(M.max_input_tokens, limit, "single", 1,
                                                 note="limit stated in the engine's rejection")]
            return result
        if probe_figures is not None:
            result.figures = probe_figures
            return result
        # Chunks count as tokens only where the launch streams one token per chunk (no speculation, stream
        # interval 1) and the engine streams no usage per chunk; else the server's count alone is trusted.
        chunks_are_tokens = (streams_token_per_chunk(self.adapter, self.spec.launch)
                             and not any(r.chunk_token_counts for r in records))
        result.figures = summary.cell_figures(repeats, delta) + summary.load_figures(repeats, cell.load, cell.concurrency)
        if cell.workload.tool is not None:  # no fixed length to check: the call's own check instead
            result.figures += toolcall.figures(records, cell.workload.tool)
        else:
            result.figures += summary.validity_figures(records, chunks_are_tokens) + summary.degeneration_figures(records)
        result.figures += acceptance.request_acceptance_figures(records)
        if reading is not None:
            result.figures += summary.telemetry_figures(reading, sum(r.tokens for r in records))
            ok = [r for r in records if r.status == "ok"]
            result.figures += summary.steady_telemetry_figures(self.steady_spans(cell, repeats),
                                                               sum(r.tokens for r in ok) / len(ok) if ok else None)
        return result
