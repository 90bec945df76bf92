"""The cell store of one launch's run folder: finished cells, their requests, and the server's facts.

Layout under data/runs/<node>/<launch>/:
  launch.json                         the launch spec (written by the plan step)
  cells/<cell key>--<fingerprint>.parquet           contract rows of one cell (atomic write)
  cells/<cell key>--<fingerprint>.requests.parquet  the raw request records behind them
  cells/<cell key>--<fingerprint>.outputs.json      a probe cell's greedy outputs, with the launch's identity
  probe_outputs.json                  the current probe cells' outputs, a list (collect compares launches on them)
  accuracy_outputs.json               the accuracy cell's replies, each with its extracted answer and reference
  server.parquet                      rows about the server itself (KV pool, weights, ready time, ...)
  cells.parquet                       everything above for this launch: the measure job's output

A cell is reused only when its file carries the cell's current fingerprint (see launchspec). Failed and
not-run cells are retried on the next run unless `keep_failed` is set; ok, rejected and not-swept cells are results.
The server rows are stored with the server fingerprint they were measured under and re-emitted when a
rerun finds every cell cached and starts no server. The store keeps every cell it wrote or read once in
memory, so status, todo, the knee and assemble never re-read its own files.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from stackbench.config.kinds import KINDS
from stackbench.plan.launchspec import Cell, LaunchSpec
from stackbench.results import store

# A rejection is a result (the engine's stated limit), not a fault; so is a cap not swept (store.NOT_SWEPT: the
# stock cell's draw is below it, a measured fact).
DONE = {"ok", "rejected", store.NOT_SWEPT}


class CellStore:
    def __init__(self, spec: LaunchSpec, out_dir: Path, keep_failed: bool = False):
        self.spec, self.out_dir, self.keep_failed = spec, Path(out_dir), keep_failed
        self.cell_dir = self.out_dir / "cells"
        self.cell_dir.mkdir(parents=True, exist_ok=True)
        self._tables: dict[Path, pa.Table] = {}  # each cell's rows, as written or as read once

    def path(self, cell: Cell) -> Path:
        return self.cell_dir / f"{cell.key}--{self.spec.cell_fingerprint(cell)}.parquet"

    def table(self, cell: Cell) -> pa.Table | None:
        """The cell's stored rows under its current fingerprint, or None when it has none."""
        path = self.path(cell)
        if path not in self._tables and path.exists():
            self._tables[path] = store.conform(pq.read_table(path))  # a cell an earlier run measured: read once
        return self._tables.get(path)

    def status(self, cell: Cell) -> str | None:
        """The stored cell's status (the worst of its rows), or None when it has no valid file."""
        table = self.table(cell)
        if table is None:
            return None
        statuses = set(table.column("status").to_pylist())
        return next((s for s in ("failed", "gpu_busy", "host_busy", "not_run", "skipped", store.NOT_SWEPT, "rejected")
                     if s in statuses), "ok")

    def is_done(self, cell: Cell) -> bool:
        status = self.status(cell)
        return status is not None and (status in DONE or self.keep_failed)

    def todo(self) -> list[Cell]:
        return [c for c in self.spec.cells if not self.is_done(c)]

    def outputs_path(self, cell: Cell) -> Path:
        return self.path(cell).with_suffix(".outputs.json")

    def write(self, cell: Cell, rows: list[dict], requests: list[dict], outputs: dict | None = None) -> None:
        # A re-measured cell never keeps outputs of an earlier attempt.
        self.outputs_path(cell).unlink(missing_ok=True)
        if outputs is not None:
            self.outputs_path(cell).write_text(json.dumps(outputs, ensure_ascii=False))
        if requests:
            store.atomic_write_parquet(pa.Table.from_pandas(pd.DataFrame(requests)), self.path(cell).with_suffix(".requests.parquet"))
        table = store.to_table(rows)
        store.atomic_write_parquet(table, self.path(cell))
        self._tables[self.path(cell)] = table

    def unfinished(self) -> list[Cell]:
        """Cells whose stored result is a failure (or missing): what the next run retries."""
        return [c for c in self.spec.cells if self.status(c) not in DONE]

    # -- server facts ------------------------------------------------------------------------------
    @property
    def _server_path(self) -> Path:
        return self.out_dir / "server.parquet"

    def save_server_rows(self, rows: list[dict]) -> None:
        store.atomic_write_parquet(store.to_table(rows), self._server_path)
        (self.out_dir / "server.json").write_text(json.dumps({"server_fingerprint": self.spec.server_fingerprint}))

    def server_rows(self) -> pa.Table | None:
        """The stored server rows, if they were measured under the current server configuration."""
        marker = self.out_dir / "server.json"
        if not (self._server_path.exists() and marker.exists()):
            return None
        if json.loads(marker.read_text()).get("server_fingerprint") != self.spec.server_fingerprint:
            return None
        return store.conform(pq.read_table(self._server_path))

    def _stamped(self, cell: Cell) -> dict:
        """A probe cell's outputs with what collect pairs launches across stacks on: the weights family the
        node states now (it moves no fingerprint, so a cell measured before it was stated is stamped too),
        the quantization as the cell's rows say it, and a digest of the probe set (same prompts and lengths)."""
        doc = json.loads(self.outputs_path(cell).read_text())
        quant = store.read_results(self.path(cell))["quant"].dropna() if self.path(cell).exists() else []
        probe_set = hashlib.sha256(json.dumps(cell.workload.identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
        return {**doc, "weights": self.spec.launch.model.weights, "quant": quant.iloc[0] if len(quant) else store.UNKNOWN,
                "probe_set": probe_set}

    def assemble(self) -> Path:
        """cells.parquet: every current cell's rows plus the server rows, written atomically."""
        tables = [t for t in (self.table(c) for c in self.spec.cells) if t is not None]
        server = self.server_rows()
        if server is not None:
            tables.append(server)
        for name, runs in ((store.PROBE_OUTPUTS, "probes"), (store.ACCURACY_OUTPUTS, "accuracy"),
                           (store.DIVERGENCE_OUTPUTS, "divergence")):
            outputs = [self._stamped(c) for c in self.spec.cells
                       if KINDS[c.workload.kind].runs == runs and self.outputs_path(c).exists()]
            if outputs:
                (self.out_dir / name).write_text(json.dumps(outputs, ensure_ascii=False, indent=1))
            else:
                (self.out_dir / name).unlink(missing_ok=True)
        out = self.out_dir / "cells.parquet"
        store.atomic_write_parquet(pa.concat_tables(tables) if tables else store.to_table([]), out)
        return out
