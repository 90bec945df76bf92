"""One server launch, run from its launch spec: start the server, measure every cell that is not already
stored, tear the server down on every exit path, and assemble the launch's rows.

The pieces live in their own modules: the spec (launchspec), what the launch runs on (backend: the
launcher, the GPUs' NVML, the lock folder, the pace its rows report, their source), the cell runner
(runner), rows and basis (rows), the cell store (cellstore), GPU telemetry (telemetry). This module only
sequences them: restarts after a crash, a launch that never became ready is not retried per cell, and
failed cells are left for the next run to retry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

from stackbench.config import ConfigError
from stackbench.engines import adapter_for, prometheus
from stackbench.engines.base import ServerFacts
from stackbench.host import affinity, gpustate, hostload, locks, telemetry
from stackbench.measure import precision, summary
from stackbench.measure.backend import REAL, RunBackend
from stackbench.measure.cellstore import CellStore
from stackbench.measure.progress import CellProgress, console_and_log
from stackbench.measure.rows import RowMaker
from stackbench.measure.runner import CellResult, CellRunner
from stackbench.plan import launchspec
from stackbench.results.metrics import M
from stackbench.results.store import NOT_SWEPT
from stackbench.serve.process import NotRunnable, ServerError

log = logging.getLogger("stackbench.measure")
MAX_RESTARTS = 2
# A cap this far above the stock cell's mean draw per GPU is still swept: the mean is of NVML readings that are
# themselves 1 s averages on Ampere and newer (nvmlDeviceGetPowerUsage: "On Ampere (except GA100) or newer GPUs, the
# API returns power averaged over 1 sec interval"), while the board's power limit acts on the draw within it, so a
# prefill burst or a boost-clock step above the mean meets a cap the mean sits under. 15%: above the 10% by which
# the plausibility check lets a central draw exceed its limit (analysis/plausibility.py POWER_MARGIN), so a cap the
# mean comes within that of is swept, not assumed idle.
CAP_BIND_MARGIN = 0.15
CAPS_DECIDED = "caps_decided.json"  # in the configuration's first-round run folder: which caps it sweeps, per cell


class GpuBusy(ServerError):
    """A launch's GPU held by a process this run did not start, or its memory not free, after gpu_idle.wait_s:
    its cells get status gpu_busy with this one line, and nothing is measured on it."""


class HostBusy(ServerError):
    """The host's CPUs busy outside the launch after host_idle.wait_s, under host_idle.on_busy: refuse: its cells
    get status host_busy with this one line naming the processes, and nothing is measured."""


def status_of(err: ServerError) -> str:
    """The cell status of a launch that could not start: gpu_busy, host_busy, not_run (nothing to start), failed."""
    if isinstance(err, GpuBusy | HostBusy):
        return "gpu_busy" if isinstance(err, GpuBusy) else "host_busy"
    return "not_run" if isinstance(err, NotRunnable) else "failed"


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM: raised where the run is, so every finally block (server teardown) runs."""


def engine_environment(spec: launchspec.LaunchSpec) -> dict:
    """The engine environment the launch runs in; a missing one makes every cell not-run, with why."""
    if spec.engine.get("missing"):
        raise NotRunnable(f"{spec.engine['missing']}: engine environment not built; run `snakemake --cores 1 report`")
    return spec.engine


def api_key(node) -> str | None:
    """The server's API key, read from the variable the node names at run time (never stored)."""
    if not node.api_key_env:
        return None
    if node.api_key_env not in os.environ:
        raise ConfigError(f"{node.file}: api_key_env: {node.api_key_env} is not set in the environment")
    return os.environ[node.api_key_env]


class LaunchRun:
    def __init__(self, spec: launchspec.LaunchSpec, out_dir: Path, keep_failed: bool = False, console: TextIO | None = None,
                 backend: RunBackend = REAL):
        self.spec, self.out_dir, self.backend = spec, Path(out_dir), backend
        self.node, self.launch = spec.node, spec.launch
        self.adapter = adapter_for(self.launch.engine)
        self.store = CellStore(spec, self.out_dir, keep_failed)
        self.started = datetime.now(UTC)
        self.run_id = f"{self.node.name}/{self.launch.name}@{self.started.strftime('%Y%m%dT%H%M%SZ')}"
        self.rows = RowMaker(spec, self.run_id, self.adapter, spec.measure.spread_flag_ratio, backend.source)
        self.nvml = backend.gpu_host(self.node)  # tests inject a test double of pynvml here
        self.server = None
        self.facts = ServerFacts()
        self.start_error: ServerError | None = None
        self.restarts = self.launches = 0
        self.ready_s: float | None = None
        self.timeline: list[dict] = []
        self.telemetry_why: str | None = None
        self.sampler = self.capper = None
        self.gpus: telemetry.NvmlGpus | None = None
        self.released: list[tuple[float, list[str]]] = []  # per server stop: seconds until its GPUs were idle, still busy
        self.gpu_ids: list[str] | None = None
        self.host: hostload.HostSampler | None = None  # the host's CPUs outside the launch, for its whole run
        self.host_checks: list[hostload.Verdict] = []  # one per server start
        self.host_flag: str | None = None  # the last start found the host busy (host_idle.on_busy: flag): why
        self.server_pids: list[int] = []  # what listens on the server's port: inside the launch
        self.server_cores: set[int] = set()  # where the node pins the client (hardware.client_cpus): the cores left to the server
        self.host_busy_cells: dict[str, tuple[str, ...]] = {}  # cell key -> the busiest outside processes of a busy cell
        self.lock_dir = backend.lock_dir(self.node)
        self.leftovers: list[str] = []  # servers and caps a launch that died hard left behind, put right here
        self.console = console  # where the cell progress lines go besides the log (stackbench.measure.progress)
        self.progress: CellProgress | None = None

    # -- server ------------------------------------------------------------------------------------
    def _start_server(self) -> CellRunner:
        env_info = engine_environment(self.spec)
        self.server = self.backend.open_server(self.launch, self.node, self.adapter, env_info, self.out_dir, self.gpu_ids)
        self.server.record_paths += self._gpu_records()
        self._check_idle()
        self._check_host()
        try:
            seconds = self.server.start(self.spec.measure.ready_timeout_s)
        except NotRunnable:
            raise  # nothing was started: a missing model file or image is not a launch
        except BaseException:
            self.launches += 1
            raise
        self.launches += 1
        port = urlsplit(self.server.base_url).port
        self.server_pids = hostload.listening_pids(port) if port else []
        if self.node.client_cpus and self.server.pgid:  # the server's threads off the client's cores (host/affinity.py)
            pinned = affinity.pin_tree(self.server.pgid, self.server_cores)
            log.info("server pinned: %d threads on cores %s, the client on %s", pinned, sorted(self.server_cores),
                     list(self.node.client_cpus))
        self.ready_s = self.ready_s if self.ready_s is not None else seconds
        self.timeline.append({"event": "ready", "seconds": seconds, "launch": self.launches})
        self.facts = self.adapter.parse_log(self.server.log_text())
        self.rows.learn(self.facts, self._ask_server(self.server.identity()))
        log.info("server ready in %.1f s: %s", seconds, " ".join(self.server.argv))
        (self.out_dir / "server_command.json").write_text(json.dumps({"argv": self.server.argv, "env": sorted(self.launch.env)}, indent=1))
        return CellRunner(self.server.base_url, self.adapter, self.spec, api_key(self.node),
                          self.sampler, self.capper, self.telemetry_why, alive=self.server.alive, progress=self._show)

    def _ask_server(self, identity: dict) -> dict:
        """What the running server says about itself: its version where neither the environment nor the
        launcher knows it (added to the identity returned), and from /metrics a fact its log lacks or
        only prints rounded (filled into self.facts)."""
        import httpx

        try:
            if self.adapter.version_path and self.rows.launch_basis["engine_version"] == "unknown" \
                    and not identity.get("engine_version"):
                reply = httpx.get(self.server.base_url + self.adapter.version_path, timeout=10).json()
                identity = {**identity, "engine_version": self.adapter.parse_version(reply)}
            if self.facts.kv_pool_tokens is None or self.facts.kv_dtype is None or self.facts.rounded:
                self.facts.fill_from(self.adapter.facts_from_metrics(httpx.get(self.server.base_url + self.adapter.metrics_path, timeout=10).text))
        except (httpx.HTTPError, ValueError, prometheus.MetricsFormatError) as err:
            log.warning("could not query the server about itself: %s", err)
        return identity

    def _stop_server(self) -> None:
        """Stop the server (SIGTERM to its group, SIGKILL after the grace period), then wait, up to
        gpu_idle.release_wait_s, until its GPUs' memory is released, so the next launch there sizes its pool
        from free memory; the wait is recorded."""
        if self.server is not None:
            t0 = time.monotonic()
            self.server.stop()
            self.timeline.append({"event": "teardown", "seconds": time.monotonic() - t0})
            if self.server.owns_gpus and self.gpus is not None:
                idle = self.node.gpu_idle
                seconds, still = gpustate.wait_idle(self.gpus, idle.max_used_mib, idle.release_wait_s, self._waiting)
                self.released.append((seconds, still))
                self.timeline.append({"event": "gpu_memory_released" if not still else "gpu_memory_not_released",
                                      "seconds": seconds, "busy": still})
            self.server, self.server_pids = None, []

    def _check_idle(self) -> None:
        """Before a server starts on its GPUs: none runs a compute process and each one's memory is under
        gpu_idle.max_used_mib, waiting up to gpu_idle.wait_s; else GpuBusy."""
        if not self.server.owns_gpus or self.gpus is None:
            return
        idle = self.node.gpu_idle
        seconds, still = gpustate.wait_idle(self.gpus, idle.max_used_mib, idle.wait_s, self._waiting)
        if seconds > 0:
            self.timeline.append({"event": "gpu_idle_wait", "seconds": seconds, "busy": still})
        if still:
            raise GpuBusy(f"GPU busy after waiting {seconds:.0f} s (gpu_idle.wait_s): {'; '.join(still)}")

    def _check_host(self) -> None:
        """Before a server starts: the host's CPUs outside the launch under host_idle.busy_share over the last
        window_s, waiting up to host_idle.wait_s; else HostBusy (on_busy: refuse) or every cell of this start
        flagged (on_busy: flag)."""
        if self.host is None:
            return
        idle = self.node.host_idle
        verdict = hostload.wait_quiet(lambda: self.host.recent(idle.window_s), idle.busy_share, idle.wait_s, self._waiting)
        self.host_checks.append(verdict)
        self.host_flag = None
        if verdict.waited_s > 0:
            self.timeline.append({"event": "host_busy_wait", "seconds": verdict.waited_s})
        if not verdict.busy:
            return
        line = f"host busy after waiting {verdict.waited_s:.0f} s (host_idle.wait_s): {verdict.load.describe(idle.busy_share)}"
        self.timeline.append({"event": "host_busy", "on_busy": idle.on_busy, "reason": line})
        if idle.on_busy == "refuse":
            raise HostBusy(line)
        log.warning("%s; measured anyway, every cell flagged (host_idle.on_busy: flag)", line)
        self.host_flag = f"HOST BUSY before the launch, not the stack's speed (host_idle.on_busy: flag): {line}"

    def _host_roots(self) -> list[int]:
        return self.server_pids

    def _host_summary(self) -> str | None:
        """For the launch's last console line: the cells measured on a busy host, and by what."""
        if not self.host_busy_cells:
            return None
        named = ", ".join(dict.fromkeys(name for names in self.host_busy_cells.values() for name in names))
        return (f"HOST BUSY in {len(self.host_busy_cells)} cell{'s' if len(self.host_busy_cells) != 1 else ''}, "
                f"flagged and left out of What to run (docs/host-state.md): {named}")

    def _launch_cpus(self) -> frozenset[int] | None:
        """The cores the launch may use, where this process is pinned to the client's (host/affinity.py): the
        client's and the server's; None: those this process may use."""
        return frozenset(self.node.client_cpus) | frozenset(self.server_cores) if self.node.client_cpus else None

    def _judge_host(self, result: CellResult, start: float) -> None:
        """The host over the cell (warm-up included): its rows, and the flag where it was busy outside the launch
        during the cell or at the launch's start. A cell without figures (failed, not run) gets no rows."""
        if self.host is None or not result.figures:
            return
        idle = self.node.host_idle
        self.host.take()  # the interval up to the cell's end, however short the cell
        load = self.host.load(start, time.monotonic(), idle.window_s)
        if load is None:
            result.host_note = self.host_flag
            if self.host_flag:
                self.host_busy_cells[result.cell.key] = tuple(name for name, _ in self.host_checks[-1].load.busiest)
            return
        during = (f"HOST BUSY during the cell, not the stack's speed: {load.describe(idle.busy_share)}"
                  if load.busy(idle.busy_share) else None)
        result.host_note = "; ".join(n for n in (self.host_flag, during) if n) or None
        result.figures += summary.host_figures(load, result.host_note is not None)
        if result.host_note:
            self.host_busy_cells[result.cell.key] = tuple(name for name, _ in load.busiest)

    # -- cells -------------------------------------------------------------------------------------
    def _show(self, text: str) -> None:
        log.info("%s", text)  # a cell's repeats: the log's detail, not the console's

    def _run_cell(self, cell: launchspec.Cell, runner: CellRunner | None) -> CellRunner | None:
        """Measure one cell, (re)starting the server first when needed; returns the runner to reuse."""
        if self.start_error is None and (self.server is None or not self.server.alive()):
            if self.server is not None:
                self.restarts += 1
                self._stop_server()
            if self.restarts > MAX_RESTARTS:
                self._record(CellResult(cell, "failed", f"not run: server restarted {MAX_RESTARTS} times already"))
                return None
            try:
                runner = self._start_server()
            except ServerError as err:
                self._stop_server()
                if self.ready_s is None:
                    self.start_error = err  # it never became ready: the other cells are not retried one by one
                else:
                    self.restarts += 1
                self._record(CellResult(cell, status_of(err), str(err)))
                return None
        if self.start_error is not None:
            self._record(CellResult(cell, status_of(self.start_error), str(self.start_error)))
            return None
        self.backend.start_cell(cell, self.server)
        started = time.monotonic()
        result = runner.run(cell)
        self._judge_host(result, started)
        self.timeline.append({"event": "cell", "seconds": result.seconds, "cell": cell.key})
        self._record(result)
        return runner

    def _record(self, result: CellResult) -> None:
        rows = self.rows.cell_rows(result.cell, self.backend.figures_at_pace(result.figures, result.cell), result.status, result.reason,
                                   result.prompt_tokens, result.row_extra())
        outputs = None
        if result.outputs is not None:
            launch = self.launch
            outputs = {"ref": self.run_id, "node": self.node.name, "stack": launch.stack, "variant": launch.variant,
                       "spec_method": launch.spec_method, "model": launch.model.label, "workload": result.cell.workload.name,
                       "outputs": result.outputs}
        self.store.write(result.cell, rows, result.requests, outputs)

    def _saturated_below(self, cell: launchspec.Cell) -> str | None:
        """Under measure.stop_saturated, why a closed-loop cell is not measured: its sweep (same workload and
        cap) is over-saturated at a lower concurrency (precision.saturated on the stored cells' medians), or
        a lower level was skipped already."""
        if not self.spec.measure.stop_saturated or cell.rate is not None:
            return None
        below = [c for c in self.spec.cells if c.rate is None and c.workload.name == cell.workload.name
                 and c.power_cap_w == cell.power_cap_w and c.concurrency < cell.concurrency]
        levels = {}
        for lower in sorted(below, key=lambda c: c.concurrency):
            status = self.store.status(lower)
            if status == "skipped":
                return self.store.table(lower).column("reason")[0].as_py()
            if status == "ok":
                medians = self.store.table(lower).to_pandas().query("stat == 'median'")
                levels[lower.concurrency] = dict(zip(medians["metric"], medians["value"]))
            why = precision.saturated(levels, cell.load.knee_fraction)
            if why:
                return f"{why}: the sweep stops there (measure.stop_saturated)"
        return None

    def _not_swept(self, cell: launchspec.Cell) -> str | None:
        """Why a capped cell is not swept, decided once per launch configuration and cell and kept in every round
        (caps_decided): so a capped cell is measured in every round or in none, and pairs in each. The first round
        to ask decides from its stock cell (cap_above_draw) and writes the verdict where every later round of the
        configuration reads it. None: swept; a cell measured already is never asked (CellStore.todo)."""
        if cell.power_cap_w is None:
            return None
        path = caps_decided(self.out_dir, self.launch)
        path.parent.mkdir(parents=True, exist_ok=True)
        key = f"{cell.key}--{self.spec.cell_fingerprint(cell)}"
        # locked: two rounds of one configuration measuring at once (on other GPUs) take one verdict, the first's
        with path.with_name(f"{path.name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            decided = json.loads(path.read_text()) if path.exists() else {}
            if key not in decided:
                why = self._cap_above_draw(cell)
                decided[key] = None if why is None else f"{why}; decided in {self.launch.name}, kept in every round ({path.name})"
                tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps(decided, indent=1, sort_keys=True))
                tmp.replace(path)
        return decided[key]

    def _cap_above_draw(self, cell: launchspec.Cell) -> str | None:
        """Why a cap could not bind: it is at or above CAP_BIND_MARGIN over what the launch's stock cell of the same
        load (the uncapped one, measured before any cap: launchspec.cells_of) drew per GPU, its power_w_per_gpu (the
        busiest GPU's mean), so the cell would measure the stock state again. None where it may bind, or where there
        is no stock draw to compare (no telemetry, a stock cell that failed)."""
        stock = dataclasses.replace(cell, power_cap_w=None)
        if stock not in self.spec.cells or self.store.table(stock) is None:
            return None
        rows = self.store.table(stock).to_pandas()
        draw = rows.loc[(rows["metric"] == M.power_w_per_gpu) & rows["value"].notna(), "value"]
        if draw.empty or cell.power_cap_w < draw.max() * (1 + CAP_BIND_MARGIN):
            return None
        return (f"not swept: cap {cell.power_cap_w:g} W is at or above the stock cell's measured draw {draw.max():.0f} W "
                f"per GPU ({stock.key}) + {CAP_BIND_MARGIN:.0%}, where it could not bind")

    def limit_rows(self) -> list[dict]:
        """The power limit found at the launch's start (a sweep's uncapped cells run at it), with NVML's
        default limit beside it: the stock state a post measured without a cap."""
        if self.capper is None or not self.capper.found:
            return []
        defaults = {info.uuid: info.default_limit_w for info in self.capper.gpus.info}
        each = ", ".join(f"{uuid} {watts:g} W (default {defaults[uuid]:g} W)" for uuid, watts in self.capper.found.items())
        return [self.rows.fact_row(M.power_limit_found_w, max(self.capper.found.values()),
                                   f"nvmlDeviceGetPowerManagementLimit at the launch's start, the uncapped cells' limit; per GPU: {each}"),
                self.rows.fact_row(M.power_limit_default_w, max(defaults.values()),
                                   f"nvmlDeviceGetPowerManagementDefaultLimit; per GPU: {each}")]

    def release_rows(self) -> list[dict]:
        """memory_release_s: the longest wait, after a server stopped, for its GPUs to be idle again."""
        if not self.released:
            return []
        each = ", ".join(f"{seconds:.1f} s" + (f" (still busy: {'; '.join(still)})" if still else "")
                         for seconds, still in self.released)
        return [self.rows.fact_row(M.memory_release_s, max(seconds for seconds, _ in self.released),
                                   f"after each server stop, until its GPUs ran no compute process and held <= "
                                   f"{self.node.gpu_idle.max_used_mib:g} MiB (NVML): {each}")]

    def host_rows(self) -> list[dict]:
        """The host's CPUs outside the launch over the window_s before its last server start: the launch's own rows."""
        verdict = self.host_checks[-1] if self.host_checks else None
        if verdict is None or verdict.load is None:
            return []
        return [self.rows.fact_row(f.metric, f.value, f"before the launch: {f.note}", f.stat, f.n)
                for f in summary.host_figures(verdict.load, verdict.busy, self.host_flag)]

    def knee_rows(self) -> list[dict]:
        """knee_concurrency per workload and cap swept over two or more concurrencies, from the stored
        cells' medians (cached cells included): a launch-level row with concurrency null."""
        sweeps: dict[tuple, dict[int, launchspec.Cell]] = {}
        for cell in self.spec.cells:
            if cell.rate is None and self.store.status(cell) == "ok":
                sweeps.setdefault((cell.workload.name, cell.power_cap_w), {})[cell.concurrency] = cell
        rows = []
        for (workload, cap), cells in sweeps.items():
            levels = {}
            for concurrency, cell in cells.items():
                medians = self.store.table(cell).to_pandas().query("stat == 'median'")
                levels[concurrency] = dict(zip(medians["metric"], medians["value"]))
            knee = summary.knee_figure(levels, next(iter(cells.values())).load)
            if knee is not None:
                rows.append(self.rows.sweep_row(workload, cap, knee))
        return rows

    # -- the host: GPUs held, leftovers put right ---------------------------------------------------
    def _gpu_records(self) -> list[Path]:
        return [locks.gpu_record(self.lock_dir, g) for g in self.gpu_ids or ()]

    def _waiting(self, text: str) -> None:
        if self.progress is not None:
            self.progress.note(text)

    def _stop_leftovers(self) -> None:
        """A server of this launch, or of any launch on these GPUs, still running after its measure job
        died hard holds memory (and the GPUs' VRAM): stopped before anything is measured."""
        for path in [locks.run_record(self.out_dir), *self._gpu_records()]:
            stopped = locks.stop_leftover(path)
            if stopped:
                self.leftovers.append(stopped)

    # -- the launch --------------------------------------------------------------------------------
    def run(self) -> Path:
        api_key(self.node)  # a missing key stops the launch here, before any server starts
        if not self.node.client_cpus:
            return self._run()
        try:  # this process and its threads on the client's cores, the server on the rest
            self.server_cores = affinity.split(self.node.client_cpus)
        except ValueError as err:
            raise ConfigError(f"{self.node.file}: hardware.client_cpus: {err}") from None
        with affinity.pinned_self(set(self.node.client_cpus)):
            return self._run()

    def _run(self) -> Path:
        todo = self.store.todo()
        cells = self.spec.cells
        log.info("%s: %d cells, %d already measured", self.launch.name, len(cells), len(cells) - len(todo))
        try:
            self.gpus, self.telemetry_why = telemetry.open_gpus(self.node.gpu_count, self.nvml, list(self.node.gpu_devices) or None)
        except ValueError as err:  # the node names GPUs this host does not have
            self.gpus, self.telemetry_why = None, f"{self.node.file}: hardware.gpu.devices: {err}"
        gpus = self.gpus
        # The server gets exactly the GPUs telemetry and caps touch (by UUID where NVML named them).
        self.gpu_ids = ([info.uuid for info in gpus.info] if gpus is not None
                        else list(self.node.gpu_devices) or [str(i) for i in range(self.node.gpu_count)] or None)
        self.progress = CellProgress(f"{self.node.name}/{self.launch.name}", len(cells), len(cells) - len(todo), self.console)
        holder = locks.Holder(self.node.name, self.launch.name, os.getpid())
        try:
            with locks.GpuLocks(self.gpu_ids if self.node.gpu_count else (), self.lock_dir, holder, self._waiting):
                self._stop_leftovers()
                try:
                    with hostload.HostSampler(self._host_roots, cpus=self._launch_cpus()) as self.host, \
                            self._telemetry(gpus) as (self.sampler, self.capper):
                        runner = None
                        for cell in todo:
                            self.progress.start(cell.key)
                            why = self._saturated_below(cell)
                            above = self._not_swept(cell)
                            if why:
                                self._record(CellResult(cell, "skipped", why))
                            elif above:
                                self._record(CellResult(cell, NOT_SWEPT, above))
                            else:
                                runner = self._run_cell(cell, runner)
                            self.progress.finish()
                finally:
                    self._stop_server()  # inside the locks: the next launch on these GPUs starts after the release
        finally:
            self.progress.close(self._host_summary())
        if self.launches:
            ready = self.backend.ready_at_pace(self.ready_s)
            self.store.save_server_rows(self.rows.server_rows(self.facts, ready, self.telemetry_why) + self.knee_rows()
                                        + self.limit_rows() + self.release_rows() + self.host_rows())
        return self._finish()

    @contextlib.contextmanager
    def _telemetry(self, gpus):
        """Sampler for the whole launch and a power capper that restores the limits on every exit path."""
        if gpus is None:
            yield None, None
            return
        with telemetry.Sampler(gpus) as sampler, self.backend.power_capper(gpus, self.lock_dir) as capper:
            self.leftovers += [f"restored GPU {uuid}'s power limit to {watts:g} W, left capped by a launch that died"
                               for uuid, watts in capper.leftovers_restored.items()]
            yield sampler, capper

    def _finish(self) -> Path:
        out = self.store.assemble()
        unfinished = self.store.unfinished()
        (self.out_dir / "run.json").write_text(json.dumps({
            "run_id": self.run_id, "started": self.started.isoformat(),
            "finished": datetime.now(UTC).isoformat(), "node": self.node.name, "launch": self.launch.name, "fingerprint": self.spec.fingerprint,
            "engine": self.spec.engine, "launches": self.launches, "restarts": self.restarts, "timeline": self.timeline,
            "facts": self.facts.__dict__, "leftovers": self.leftovers, "unfinished_cells": [c.key for c in unfinished]}, indent=1, default=str))
        if self.sampler is not None and self.sampler.rows:
            import pandas as pd

            pd.DataFrame(self.sampler.rows).to_parquet(self.out_dir / "telemetry.parquet")
        if unfinished and not self.store.keep_failed:
            log.warning("%d cells failed or were not run (%s); the next run retries them "
                        "(--config measure='{keep_failed: true}' keeps them)", len(unfinished),
                        ", ".join(c.key for c in unfinished))
        return out


def caps_decided(out_dir: Path, launch) -> Path:
    """Where a launch configuration keeps which of its caps are swept (LaunchRun._not_swept): its first round's run
    folder (Launch.name: the configuration's own name), beside every later round's (<configuration>--r<k>) under the
    node's runs folder, so each round and the one-off sets' launch read the one verdict."""
    return Path(out_dir).parent / launch.configuration / CAPS_DECIDED


def mark_for_retry(spec_path: Path, out: Path) -> None:
    """Make Snakemake rerun this launch next time: its spec (an input) becomes newer than its output."""
    later = out.stat().st_mtime_ns + 1_000_000
    os.utime(spec_path, ns=(later, later))


def _raise_interrupted(signum, frame):
    raise Interrupted(f"signal {signum}")


def main(spec_path: Path, out_dir: Path, backend_for: Callable[[launchspec.LaunchSpec], RunBackend],
         log_path: Path | None = None) -> Path:
    """Measure one launch on the backend `backend_for` chooses for its spec. With `log_path`, the detail goes
    there and stderr keeps the cell progress only."""
    console = console_and_log(log_path) if log_path is not None else None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    # Ctrl-C and a scheduler's SIGTERM both raise Interrupted at once, wherever the run is. asyncio.run
    # would otherwise take SIGINT over and only cancel the cell's task, and a cancellation that races a
    # finishing request inside asyncio.wait_for is lost on Python 3.11: the launch then ran on.
    signal.signal(signal.SIGTERM, _raise_interrupted)
    signal.signal(signal.SIGINT, _raise_interrupted)
    spec = launchspec.read(spec_path)
    run = LaunchRun(spec, out_dir, keep_failed=spec.measure.keep_failed, console=console, backend=backend_for(spec))
    out = run.run()
    if not spec.measure.keep_failed and run.store.unfinished():
        mark_for_retry(spec_path, out)
    return out
