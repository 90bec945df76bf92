"""One server launch: start it, wait until ready, and measure every client cell inside it.

Cells are (workload, concurrency, power cap); each has a warm-up that is not counted and several
repeats. A finished cell is written to its own Parquet file at once (temp file, then rename), so an
interrupted launch resumes with only the missing cells. A failed cell is recorded with its status and
reason; the server is restarted for the cells after it, and it is always torn down at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import platform
import re
import signal
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pandas as pd

from . import basis, plan, store, summary, telemetry, workloads
from .client import RequestRecord, StreamClient, run_conversations, stated_limit
from .server import ExternalServer, ServerError, ServerExited, ServerProcess, container_argv, free_port
from .stacks import adapter_for
from .stacks.base import ServerFacts, SpecCounters

log = logging.getLogger("stackbench.measure")
MAX_RESTARTS = 2


BIND_FAILURE = re.compile(r"couldn't bind|address already in use", re.IGNORECASE)
PORT_ATTEMPTS = 3


class NotRunnable(ServerError):
    """The launch cannot start on this node (model file or environment missing): its cells are not run."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM from a scheduler, handled like Ctrl-C so every finally block runs."""


@dataclass(frozen=True)
class Cell:
    workload: plan.Workload
    concurrency: int
    power_cap_w: float | None

    @property
    def key(self) -> str:
        cap = "nocap" if self.power_cap_w is None else f"{self.power_cap_w:g}W"
        return f"{self.workload.name}--c{self.concurrency}--{cap}"


def cells_of(node: plan.Node) -> list[Cell]:
    caps = list(node.power_caps_w) or [None]
    return [Cell(w, c, cap) for cap in caps for w in node.workloads for c in w.concurrency]


def cell_fingerprint(cfg: dict, launch: plan.Launch, cell: Cell) -> str:
    doc = {"launch": plan.launch_identity(launch), "workload": cell.workload.__dict__, "c": cell.concurrency,
           "cap": cell.power_cap_w, "repeats": cfg["measure"]["repeats"], "warmup": cfg["measure"]["warmup_requests"]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Progress:
    """Cell i of N, what runs now, elapsed and an estimate of what remains; silent off a terminal."""

    def __init__(self, total: int, label: str, stream=sys.stdout):
        self.total, self.label, self.stream = total, label, stream
        self.enabled = stream.isatty()
        self.started = time.monotonic()
        self.done = 0

    def show(self, index: int, text: str) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.started
        eta = f"~{_clock(elapsed / self.done * (self.total - self.done))} left" if self.done else "estimating"
        self.stream.write(f"\r[{index}/{self.total}] {self.label} {text}  {_clock(elapsed)} elapsed, {eta}\033[K")
        self.stream.flush()

    def finish_cell(self) -> None:
        self.done += 1

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")


def _clock(seconds: float) -> str:
    return f"{int(seconds) // 60:02d}:{int(seconds) % 60:02d}"


def host_os() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.platform()


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def host_memory_bandwidth_gbs(size_mib: int = 256, repeats: int = 5) -> float:
    """Host memory bandwidth measured here: a large array copy reads and writes every byte once."""
    import numpy as np

    src = np.ones(size_mib * 2**20 // 8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.nbytes / best / 1e9


class LaunchRun:
    def __init__(self, cfg: dict, node: plan.Node, launch: plan.Launch, out_dir: Path):
        self.cfg, self.node, self.launch, self.out_dir = cfg, node, launch, Path(out_dir)
        self.adapter = adapter_for(launch.engine)
        self.cell_dir = self.out_dir / "cells"
        self.cell_dir.mkdir(parents=True, exist_ok=True)
        self.nvml = None  # tests inject a test double of pynvml here
        self.sampler = self.capper = None
        self.telemetry_why: str | None = None
        self.start_error: ServerError | None = None  # a launch that never became ready is not retried per cell
        try:
            self.env_info = self._env_info()
        except NotRunnable as err:
            self.env_info, self.start_error = {}, err
        self.run_id = f"{node.name}/{launch.name}@{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
        self.server: ServerProcess | None = None
        self.facts = ServerFacts()
        self.restarts = 0
        self.launches = 0
        self.timeline: list[dict] = []

    # -- environment and server -------------------------------------------------------------------
    def _env_info(self) -> dict:
        mode, target = self.launch.launch_mode, self.launch.launch_target
        if mode == "image":
            return {"server": "python3", "image": target, "version": "unknown"}
        if mode == "external":
            return {"url": target, "version": "unknown"}
        if target:
            return {"server": target, "version": "unknown"}
        ready = Path(self.cfg["paths"]["envs"]) / self.launch.env_name / "ready.json"
        try:
            return json.loads(ready.read_text())
        except FileNotFoundError:
            raise NotRunnable(f"{ready}: engine environment not built; run `snakemake --cores 1 report`") from None

    def _start_server(self) -> None:
        """Start (or, for an external endpoint, just reach) the server and wait until it is ready.

        A port taken between choosing it and the server binding it is retried on a fresh port.
        """
        t0 = time.monotonic()
        argv: list[str] = []
        for attempt in range(1, PORT_ATTEMPTS + 1):
            argv = self._spawn()
            self.launches += 1
            try:
                ready_s = self.server.wait_ready(self.cfg["measure"]["ready_timeout_s"])
                break
            except ServerExited as err:
                self.server.stop()
                if attempt == PORT_ATTEMPTS or not BIND_FAILURE.search(err.log_tail):
                    raise
                log.warning("port taken (%s); retrying on another port", err)
            except BaseException:
                self.server.stop()
                raise
        self.timeline.append({"event": "ready", "seconds": time.monotonic() - t0, "launch": self.launches})
        self.facts = self.adapter.parse_log(self.server.log_text())
        self._ask_server()
        log.info("server ready in %.1f s: %s", ready_s, " ".join(argv))
        (self.out_dir / "server_command.json").write_text(json.dumps({"argv": argv, "env": sorted(self.launch.env)}, indent=1))

    def _spawn(self) -> list[str]:
        if self.launch.launch_mode == "external":
            self.server = ExternalServer(self.launch.launch_target, self.adapter.health_path)
            return []
        self._check_model_files()
        host = self.launch.bind_host
        port = free_port(host)
        argv = self.adapter.argv(self.launch, self.env_info["server"], host, port, self.node.cpu_threads)
        if self.launch.launch_mode == "image":
            mounts = sorted({str(Path(m.path).parent) for m in (self.launch.model, self.launch.draft_model) if m})
            argv = container_argv(self.launch.launch_target, argv, f"stackbench-{port}", port, mounts, self.launch.env)
        self.server = ServerProcess(argv, self.out_dir / "server.log", f"http://{host}:{port}",
                                    self.adapter.health_path, env=self.launch.env)
        self.server.start()
        (self.out_dir / "server.pid").write_text(str(self.server.pgid))
        return argv

    def _check_model_files(self) -> None:
        for model in (self.launch.model, self.launch.draft_model):
            if model is not None and not Path(model.path).exists():
                raise NotRunnable(f"model file missing: {model.path} (models.{model.name} in {self.node.file})")

    def _ask_server(self) -> None:
        """What the running server says about itself: its version, and a pool size its log may lack."""
        try:
            if getattr(self.adapter, "version_path", None) and self.env_info.get("version") == "unknown":
                reply = httpx.get(self.server.base_url + self.adapter.version_path, timeout=10).json()
                self.env_info["version"] = self.adapter.parse_version(reply)
            if hasattr(self.adapter, "facts_from_metrics") and self.facts.kv_pool_tokens is None:
                found = self.adapter.facts_from_metrics(httpx.get(self.server.base_url + "/metrics", timeout=10).text)
                self.facts.kv_pool_tokens = found.get("kv_pool_tokens")
        except (httpx.HTTPError, ValueError) as err:
            log.warning("could not query the server about itself: %s", err)

    def _stop_server(self) -> None:
        if self.server is not None:
            t0 = time.monotonic()
            self.server.stop()
            self.timeline.append({"event": "teardown", "seconds": time.monotonic() - t0})
            self.server = None

    def _scrape(self) -> SpecCounters | None:
        try:
            text = httpx.get(self.server.base_url + "/metrics", timeout=10).text
        except httpx.HTTPError:
            return None
        return self.adapter.spec_counters(text)

    # -- cells -------------------------------------------------------------------------------------
    def _cell_path(self, cell: Cell) -> Path:
        return self.cell_dir / f"{cell.key}--{cell_fingerprint(self.cfg, self.launch, cell)}.parquet"

    async def _measure_cell(self, cell: Cell, progress: Progress, index: int) -> tuple[list[list[RequestRecord]], SpecCounters | None]:
        measure_cfg = self.cfg["measure"]
        key_env = self.node.raw["api_key_env"]
        client = StreamClient(self.server.base_url, self.launch.model.name,
                              self.adapter.request_extras(self.launch, cell.workload.output_tokens),
                              measure_cfg["stall_timeout_s"], measure_cfg["request_timeout_s"],
                              api_key=os.environ.get(key_env) if key_env else None)
        try:
            # Warm up once per workload (its first concurrency level); the warm-up is never counted.
            if cell.concurrency == cell.workload.concurrency[0]:
                for _ in range(measure_cfg["warmup_requests"]):
                    await run_conversations(client, workloads.conversations(cell.workload, 1, 0), cell.workload.output_tokens)
            before = self._scrape()
            repeats = []
            for repeat in range(measure_cfg["repeats"]):
                progress.show(index, f"{cell.workload.name} c={cell.concurrency} repeat {repeat + 1}/{measure_cfg['repeats']}")
                convs = workloads.conversations(cell.workload, cell.concurrency, repeat)
                records = await run_conversations(client, convs, cell.workload.output_tokens, self.adapter.server_timings)
                repeats.append(records)
                if any(r.status in ("failed", "timeout") for r in records) and not self.server.alive():
                    break
            after = self._scrape()
        finally:
            await client.aclose()
        delta = after.minus(before) if before is not None and after is not None else None
        return repeats, delta

    def _rows(self, cell: Cell, figures: list[summary.Figure], status: str, reason: str | None,
              prompt_tokens: int | None) -> list[dict]:
        base = self._basis(cell, prompt_tokens)
        if not figures:
            return [{**base, "metric": "decode_tps", "unit": "tok/s", "stat": "single", "status": status, "reason": reason}]
        wide = self.cfg["measure"]["spread_flag_ratio"]
        rows = []
        for f in figures:
            note = f.note
            if f.stat == "median" and summary.spread_is_wide(f, wide):
                note = f"{basis.WIDE_NOTE} (max/min > {wide:g})"
            rows.append({**base, "metric": f.metric, "value": f.value, "value_min": f.value_min, "value_max": f.value_max,
                         "unit": f.unit, "stat": f.stat, "n": f.n, "ttft_included": f.ttft_included,
                         "status": status, "reason": reason, "note": note})
        return rows

    def _basis(self, cell: Cell | None, prompt_tokens: int | None) -> dict:
        node, launch = self.node, self.launch
        gpu = node.gpu_model if node.gpu_count else f"none (CPU: {cpu_name()})"
        return {
            "source": "measured", "ref": self.run_id, "node": node.name, "stack": launch.engine, "variant": launch.variant,
            "spec_method": launch.spec_method, "spec_tokens": launch.spec_tokens,
            "power_cap_w": cell.power_cap_w if cell else None,
            "workload": cell.workload.name if cell else "server", "concurrency": cell.concurrency if cell else None,
            "os": host_os() if node.os == "auto" else node.os, "engine": self.adapter.engine_label,
            "engine_version": self.env_info.get("version", "unknown"), "engine_image": self._image_label(),
            "model": launch.model.name, "quant": launch.model.quant, "kv_dtype": self.facts.kv_dtype or "unknown",
            "context_len": self.facts.n_ctx or launch.context_len, "prompt_tokens": prompt_tokens,
            "output_tokens": cell.workload.output_tokens if cell else None, "temperature": 0.0, "ttft_included": "no",
            "gpu": gpu, "gpu_count": node.gpu_count, "tp": launch.tp,
        }

    def _image_label(self) -> str:
        return {"image": self.launch.launch_target, "external": "external endpoint (launch not ours)"}.get(
            self.launch.launch_mode, "none (native build)")

    def _write_cell(self, cell: Cell, rows: list[dict], requests: list[dict]) -> None:
        store.atomic_write_parquet(store.to_table(rows), self._cell_path(cell))
        if requests:
            frame = pd.DataFrame(requests)
            store_path = self.cell_dir / f"{self._cell_path(cell).stem}.requests.parquet"
            tmp = store_path.with_suffix(".tmp")
            frame.to_parquet(tmp)
            tmp.replace(store_path)

    def _server_rows(self) -> list[dict]:
        base = self._basis(None, None)
        facts = {"kv_pool_tokens": (self.facts.kv_pool_tokens, "tokens"), "kv_cache_mib": (self.facts.kv_cache_mib, "MiB"),
                 "model_mib": (self.facts.model_mib, "MiB"), "server_slots": (self.facts.slots, "slots")}
        facts.update({k: (v, "tokens" if "tokens" in k else "MiB") for k, v in self.facts.extra.items() if k.startswith("draft_")})
        rows = [{**base, "metric": m, "value": v, "unit": u, "stat": "single", "n": 1, "status": "ok",
                 "note": "from the server's start-up log"} for m, (v, u) in facts.items() if v is not None]
        if self.facts.kv_pool_tokens and self.facts.kv_cache_mib:
            rows.append({**base, "metric": "kv_bytes_per_token", "value": self.facts.kv_cache_mib * 2**20 / self.facts.kv_pool_tokens,
                         "unit": "B", "stat": "single", "n": 1, "status": "ok", "note": "KV cache MiB / cells from the log"})
        if self.telemetry_why:
            rows.append({**base, "metric": "power_w", "unit": "W", "stat": "single", "status": "not_run",
                         "reason": f"GPU telemetry and power caps not applied: {self.telemetry_why}"})
        if not self.node.gpu_count:
            rows.append({**base, "metric": "host_mem_bandwidth_gbs", "value": host_memory_bandwidth_gbs(), "unit": "GB/s",
                         "stat": "peak", "n": 5, "status": "ok",
                         "note": "best of 5 numpy copies of 256 MiB (bytes read + written); the CPU decode roofline"})
        ready = [e["seconds"] for e in self.timeline if e["event"] == "ready"]
        if ready:
            rows.append({**base, "metric": "ready_s", "value": ready[0], "unit": "s", "stat": "single", "n": 1, "status": "ok",
                         "note": "launch to health 200, first launch"})
        return rows

    def run(self) -> Path:
        cells = cells_of(self.node)
        todo = [c for c in cells if not self._cell_path(c).exists()]
        log.info("%s: %d cells, %d already measured", self.launch.name, len(cells), len(cells) - len(todo))
        progress = Progress(len(cells), f"{self.node.name} {self.launch.name}")
        gpus, self.telemetry_why = telemetry.open_gpus(self.node.gpu_count, self.nvml)
        try:
            with self._telemetry(gpus) as (self.sampler, self.capper):
                for cell in todo:
                    self._run_cell(cell, progress, cells.index(cell) + 1)
                    progress.finish_cell()
        finally:
            self._stop_server()
            progress.close()
        return self._assemble(cells)

    @contextlib.contextmanager
    def _telemetry(self, gpus):
        """Sampler for the whole launch and a power capper that restores the limits on every exit path."""
        if gpus is None:
            yield None, None
            return
        with telemetry.Sampler(gpus) as sampler, telemetry.PowerCapper(gpus) as capper:
            yield sampler, capper

    def _apply_cap(self, cell: Cell) -> tuple[float | None, str | None]:
        """The cap in force for the cell and, when it could not be applied, why."""
        if cell.power_cap_w is None:
            return None, None
        if self.capper is None:
            return None, f"power cap not applied: {self.telemetry_why}"
        try:
            return self.capper.apply(cell.power_cap_w), None
        except (ValueError, telemetry.TelemetryUnavailable) as err:
            return None, f"power cap not applied: {err}"

    def _run_cell(self, cell: Cell, progress: Progress, index: int) -> None:
        if self.start_error is not None:
            status = "not_run" if isinstance(self.start_error, NotRunnable) else "failed"
            self._write_cell(cell, self._rows(cell, [], status, str(self.start_error), None), [])
            return
        if self.server is None or not self.server.alive():
            if self.server is not None:
                self.restarts += 1
                self._stop_server()
            if self.restarts > MAX_RESTARTS:
                self._write_cell(cell, self._rows(cell, [], "failed", f"not run: server restarted {MAX_RESTARTS} times already", None), [])
                return
            try:
                self._start_server()
            except ServerError as err:
                if not any(e["event"] == "ready" for e in self.timeline):
                    self.start_error = err
                self._write_cell(cell, self._rows(cell, [], "not_run" if isinstance(err, NotRunnable) else "failed", str(err), None), [])
                self.restarts += 1
                return
        cap_w, cap_note = self._apply_cap(cell)
        t0 = time.monotonic()
        repeats, delta = asyncio.run(self._measure_cell(cell, progress, index))
        t1 = time.monotonic()
        self.timeline.append({"event": "cell", "seconds": t1 - t0, "cell": cell.key})
        records = [r for rep in repeats for r in rep]
        bad = [r for r in records if r.status != "ok"]
        prompt_tokens = [r.prompt_tokens for r in records if r.prompt_tokens]
        prompt_median = int(sorted(prompt_tokens)[len(prompt_tokens) // 2]) if prompt_tokens else None
        if bad:
            worst = next((r for r in bad if r.status == "rejected"), bad[0])
            status = "rejected" if worst.status == "rejected" else "failed"
            reason = worst.error
            figures = []
            if not self.server.alive():
                status, reason = "failed", f"server exited mid-cell (code {self.server.process.poll()}): {reason}"
            elif stated_limit(reason) is not None:
                # A refusal is a result: keep the limit the engine states.
                figures = [summary.Figure("max_input_tokens", stated_limit(reason), "tokens", "single", 1,
                                          note="limit stated in the engine's rejection")]
        else:
            status, reason = "ok", None
            figures = summary.cell_figures(repeats, delta)
            if self.sampler is not None:
                tokens = sum(r.tokens for r in records if r.status == "ok")
                figures += summary.telemetry_figures(telemetry.summarise_window(self.sampler.window(t0, t1), tokens))
        requests = [{**r.to_row(), "repeat": i, "workload": cell.workload.name, "concurrency": cell.concurrency}
                    for i, rep in enumerate(repeats) for r in rep]
        rows = self._rows(cell, figures, status, reason, prompt_median)
        for row in rows:
            row["power_cap_w"] = cap_w
            if cap_note:
                row["note"] = "; ".join(n for n in (row.get("note"), cap_note) if n)
        self._write_cell(cell, rows, requests)

    def _assemble(self, cells: list[Cell]) -> Path:
        frames = [store.read_results(self._cell_path(c)) for c in cells if self._cell_path(c).exists()]
        server = self._server_rows() if self.launches else []
        table = store.to_table(pd.concat(frames + ([pd.DataFrame(server)] if server else []), ignore_index=True))
        (self.out_dir / "run.json").write_text(json.dumps({
            "run_id": self.run_id, "node": self.node.name, "launch": self.launch.name, "env": self.env_info,
            "launches": self.launches, "restarts": self.restarts, "timeline": self.timeline,
            "facts": self.facts.__dict__}, indent=1, default=str))
        if self.sampler is not None and self.sampler.rows:
            pd.DataFrame(self.sampler.rows).to_parquet(self.out_dir / "telemetry.parquet")
        out = self.out_dir / "cells.parquet"
        store.atomic_write_parquet(table, out)
        return out


def _raise_interrupted(signum, frame):
    raise Interrupted(f"signal {signum}")


def main(node: str, launch: str, out_dir: Path, given: dict | None = None) -> Path:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    signal.signal(signal.SIGTERM, _raise_interrupted)
    cfg, nodes = plan.load_plan(Path("."), given)
    node_obj, launch_obj = plan.find_launch(nodes, node, launch)
    return LaunchRun(cfg, node_obj, launch_obj, out_dir).run()
