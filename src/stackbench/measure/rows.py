"""Contract rows of one launch: the basis is built once per launch, then every cell result and every
server fact becomes rows of data/results.parquet with that basis attached.

The basis starts from the launch spec (what the pipeline set) and is completed by what the running
server reports (its log's context length and KV dtype; for containers and external servers their own
version, and for external servers the context, TP and quantization they report, or "unknown").
"""

from __future__ import annotations

from pathlib import Path

from stackbench.engines.base import Adapter, ServerFacts, kv_accounting_columns
from stackbench.host.facts import cpu_name, host_memory_bandwidth_gbs, host_os, stackbench_version
from stackbench.measure import summary
from stackbench.measure.backend import REAL
from stackbench.measure.workloads import thinking_basis
from stackbench.models import geometry, provenance
from stackbench.plan.launchspec import Cell, LaunchSpec
from stackbench.results import basis as caveats
from stackbench.results import metrics
from stackbench.results.metrics import M

UNKNOWN = "unknown"


def engine_setup(facts: ServerFacts, setup_facts: tuple[str, ...], setup_env: dict[str, str] | None = None) -> str:
    """What a server's log says it runs on: its backend and offload, the facts its adapter names, and the
    setup variables its adapter set (e.g. vLLM's VLLM_CPU_OMP_THREADS_BIND)."""
    parts = [f"backend {facts.backend}"] if facts.backend else []
    if facts.offloaded_layers is not None:
        parts.append(f"{facts.offloaded_layers}/{facts.model_layers if facts.model_layers is not None else '?'} layers offloaded")
    parts += [f"{key.replace('_', ' ')} {facts.extra[key]}" for key in setup_facts if facts.extra.get(key)]
    parts += [f"{key}={value}" for key, value in (setup_env or {}).items()]
    return "; ".join(parts) or UNKNOWN


NO_FIGURES = M.cell_status  # the row of a cell that produced no figure (failed, not run)
# The launch row saying its correctness probes were turned off (plan.probeset): the smoke score not run.
PROBES_OFF_METRIC = M.smoke_score
# The launch row saying its accuracy set was turned off (accuracy: null): the accuracy not run.
ACCURACY_OFF_METRIC = M.accuracy


class RowMaker:
    not_reported: tuple[str, ...] = ()  # launch figures the server says it cannot give (learn)

    def __init__(self, spec: LaunchSpec, run_id: str, adapter: Adapter, spread_flag_ratio: float, source: str = REAL.source):
        self.spec, self.run_id, self.spread_flag_ratio = spec, run_id, spread_flag_ratio
        self.adapter = adapter
        self.accept_len_basis = adapter.accept_len_basis
        node, launch = spec.node, spec.launch
        external = launch.launch_mode == "external"
        self.launch_basis = {
            # What the launch ran on says (measure/backend.py): a rehearsal's stand-ins measure nothing real.
            "source": source, "ref": run_id, "node": node.name,
            "stack": launch.stack, "variant": launch.variant, "replicate": launch.replicate,
            "spec_method": launch.spec_method, "spec_tokens": launch.spec_tokens,
            "os": host_os() if node.os == "auto" else node.os, "engine": adapter.engine_label,
            "engine_version": spec.engine.get("version", UNKNOWN),
            "engine_image": {"native": "none (native build)", "external": "external endpoint (launch not ours)"}.get(
                launch.launch_mode, launch.launch_target),
            "model": launch.model.label, "quant": UNKNOWN if external else launch.model.quant, "kv_dtype": UNKNOWN,
            # The weights' bytes (models/provenance.py: hashed once, cached beside them by size and mtime).
            "weights_id": UNKNOWN if external else provenance.weights_id(launch.model.path),
            "context_len": None if external else launch.context_len, "temperature": 0.0, "ttft_included": "no",
            "gpu": node.gpu_model if node.gpu_count else f"none (CPU: {cpu_name()})", "gpu_count": node.gpu_count,
            "tp": None if external else launch.tp, "launch_mode": launch.launch_mode,
            "stackbench_version": stackbench_version(), **kv_accounting_columns(adapter),
        }

    def learn(self, facts: ServerFacts, identity: dict) -> None:
        """Complete the basis from the running server: its log's facts and the launcher's identity. An external
        server's version and KV dtype that neither its reports nor its log gave read NOT_REPORTED, and the
        figures its engine says it cannot give (identity `not_reported`) get a row saying so (server_rows)."""
        if facts.kv_dtype:
            self.launch_basis["kv_dtype"] = facts.kv_dtype
        if facts.n_ctx:
            self.launch_basis["context_len"] = facts.n_ctx
        setup = engine_setup(facts, self.adapter.setup_facts, self.spec.engine.get("setup_env"))
        said = identity.get("engine_setup")  # what an endpoint's own routes say of how it is read
        self.launch_basis["engine_setup"] = "; ".join(s for s in (setup if setup != UNKNOWN else "", said) if s) or UNKNOWN
        for key in ("engine_version", "engine_image", "context_len", "tp", "quant"):
            if identity.get(key) not in (None, ""):
                self.launch_basis[key] = identity[key]
        if self.spec.launch.launch_mode == "external":
            for key in ("engine_version", "kv_dtype"):
                if self.launch_basis[key] == UNKNOWN:
                    self.launch_basis[key] = caveats.NOT_REPORTED
            self.not_reported = tuple(identity.get("not_reported", ()))

    def basis(self, cell: Cell | None, prompt_tokens: int | None = None) -> dict:
        return {**self.launch_basis,
                "power_cap_w": cell.power_cap_w if cell else None,
                "workload": cell.workload.name if cell else "server",
                "concurrency": cell.concurrency if cell else None,
                "prompt_tokens": prompt_tokens, "output_tokens": cell.workload.output_tokens if cell else None,
                "thinking": thinking_basis(cell.workload.thinking) if cell else None,
                "reasoning_effort": cell.workload.reasoning_effort if cell else None,
                "method_scale": cell.workload.method_scale if cell else None,
                "not_for_ranking": cell.workload.not_for_ranking if cell else None}

    def cell_rows(self, cell: Cell, figures: list[summary.Figure], status: str, reason: str | None,
                  prompt_tokens: int | None = None, extra: dict | None = None) -> list[dict]:
        """One row per figure; a cell without figures still gets one row that says why, under the metric
        NO_FIGURES (its status and reason; no value), never under a speed metric it did not measure."""
        base = {**self.basis(cell, prompt_tokens), **(extra or {}), "status": status, "reason": reason}
        if not figures:
            return [{**base, **metrics.row_fields(NO_FIGURES), "stat": "single"}]
        rows = []
        for f in figures:
            note = f.note
            # Only repeats spread across repeats; a percentile's min/max over requests or tokens is its
            # distribution, and its note (the sample count) stays.
            if f.spread_over == summary.REPEATS and summary.spread_is_wide(f, self.spread_flag_ratio):
                note = "; ".join(n for n in (f"{caveats.WIDE_NOTE} (max/min > {self.spread_flag_ratio:g})", note) if n)
            if f.metric == M.accept_len and self.accept_len_basis:
                note = "; ".join(n for n in (note, self.accept_len_basis) if n)
            if extra and extra.get("note"):
                note = "; ".join(n for n in (note, extra["note"]) if n)
            rows.append({**base, "metric": f.metric, "value": f.value, "value_min": f.value_min, "value_max": f.value_max,
                         "unit": f.unit, "stat": f.stat, "n": f.n, "ci_low": f.ci_low, "ci_high": f.ci_high, "mad": f.mad,
                         "ttft_included": f.ttft_included, "note": note, "spread_over": f.spread_over,
                         "repeat_values": list(f.repeat_values) if f.repeat_values else None,
                         **({"prompt_tokens": f.prompt_tokens} if f.prompt_tokens is not None else {})})
        return rows

    def sweep_row(self, workload: str, cap: float | None, figure: summary.Figure) -> dict:
        """A figure about a workload's whole concurrency sweep (the knee): no single concurrency."""
        return {**self.basis(None), "workload": workload, "power_cap_w": cap, "metric": figure.metric,
                "value": figure.value, "unit": figure.unit, "stat": figure.stat, "n": figure.n,
                "ttft_included": "yes", "status": "ok", "note": figure.note}

    def fact_row(self, metric: str, value: float, note: str, stat: str = "single", n: int = 1) -> dict:
        return {**self.basis(None), **metrics.row_fields(metric), "value": value, "stat": stat, "n": n,
                "status": "ok", "note": note}

    def geometry_rows(self) -> list[dict]:
        """The served model's geometry from its own files (GGUF metadata or config.json), for the KV audit
        and the roofline; none for an external server, whose files are not ours to read."""
        launch = self.spec.launch
        if launch.launch_mode == "external":
            return []
        try:
            facts = geometry.read_geometry(Path(launch.model.path)).fact_rows()
        except geometry.GeometryError as err:
            return [{**self.basis(None), **metrics.row_fields(M.geometry_layers), "stat": "single",
                     "status": "not_run", "reason": f"model geometry not read: {err}"}]
        return [{**self.basis(None), **fact} for fact in facts]

    def server_rows(self, facts: ServerFacts, ready_s: float | None, telemetry_why: str | None) -> list[dict]:
        """Rows about the server itself, from its start-up log, the model's files and this host."""
        from_log = "from the server's start-up log"
        # Every number the adapter parsed becomes a row, so the analysis (KV audit: the memory left free
        # after the pool) works on measured rows as on published ones.
        known = {M.kv_pool_tokens: facts.kv_pool_tokens, M.kv_cache_mib: facts.kv_cache_mib, M.model_mib: facts.model_mib,
                 M.server_slots: facts.slots, M.weights_file_mib: facts.weights_file_mib, M.weights_bpw: facts.weights_bpw,
                 M.offloaded_layers: facts.offloaded_layers, M.model_layers: facts.model_layers,
                 M.server_context_tokens: facts.n_ctx}
        # The adapter's extra numbers are named by it: each must be registered, with its unit.
        known.update({k: v for k, v in facts.extra.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
        rows = [self.fact_row(m, v, from_log) for m, v in known.items() if v is not None]
        rows += self.geometry_rows()
        if facts.kv_pool_tokens and facts.kv_cache_mib:
            rows.append(self.fact_row(M.kv_bytes_per_token, facts.kv_cache_mib * 2**20 / facts.kv_pool_tokens,
                                      "KV cache MiB / pool tokens, both from the log"))
        # An external server without a log: its pool and acceptance say why they are missing, never a blank.
        unreported = ({M.kv_pool_tokens} if self.spec.launch.launch_mode == "external" else set()) | set(self.not_reported)
        rows += [{**self.basis(None), **metrics.row_fields(m), "stat": "single", "status": "not_run",
                  "reason": caveats.not_reported(m)} for m in sorted(unreported) if m not in known or known[m] is None]
        if ready_s is not None:
            rows.append(self.fact_row(M.ready_s, ready_s, "launch to health 200, first launch"))
        node = self.spec.node
        if not node.gpu_count:
            rows.append(self.fact_row(M.host_mem_bandwidth_gbs, host_memory_bandwidth_gbs(),
                                      "best of 5 numpy copies of 256 MiB (bytes read + written); the CPU decode roofline",
                                      stat="peak", n=5))
        elif node.bandwidth_gbs:
            rows.append(self.fact_row(M.gpu_mem_bandwidth_gbs, node.bandwidth_gbs,
                                      f"from the node config ({node.file}: hardware.gpu.bandwidth_gbs)"))
        if self.spec.launch.probes_off:
            rows.append({**self.basis(None), **metrics.row_fields(PROBES_OFF_METRIC), "stat": "single",
                         "status": "not_run", "reason": self.spec.launch.probes_off})
        if self.spec.launch.accuracy_off:
            rows.append({**self.basis(None), **metrics.row_fields(ACCURACY_OFF_METRIC), "stat": "mean",
                         "status": "not_run", "reason": self.spec.launch.accuracy_off})
        if telemetry_why:
            rows.append({**self.basis(None), **metrics.row_fields(M.power_w), "stat": "single", "status": "not_run",
                         "reason": f"GPU telemetry and power caps not applied: {telemetry_why}"})
        return rows
