"""Publishing a run as a result bundle (`stackbench bundle NODE`) and turning someone else's bundle into a node
file for this machine (`stackbench regenerate BUNDLE`). The format and its checks are results/bundle.py; this
module gathers what goes in: the node's rows from data/results.parquet, each launch's resolved spec, exact server
command and run record from data/runs/<node>/<launch>/, the node, stack and workload files as written, and the
provenance (engines and images, weights ids, host facts, stackbench and definitions versions). Docs: docs/bundles.md.
"""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import yaml

from stackbench.host.facts import cpu_name, host_os, stackbench_version
from stackbench.plan.definitions import DEFINITIONS, sources_sha256
from stackbench.results import bundle, store

LAUNCH_FILES = ("launch.json", "server_command.json", "run.json")
UNKNOWN = "unknown"


def _distinct(rows: pd.DataFrame, column: str) -> list[str]:
    return sorted({str(v) for v in rows[column].dropna().tolist()}) if column in rows else []


def _find_key(doc, key: str):
    """The first value under `key` anywhere in a JSON document (a run record's GPU driver, wherever it sits)."""
    if isinstance(doc, dict):
        if doc.get(key) not in (None, ""):
            return doc[key]
        doc = list(doc.values())
    if isinstance(doc, list):
        for item in doc:
            found = _find_key(item, key)
            if found is not None:
                return found
    return None


def gather(node: str, results: Path, runs: Path, root: Path = Path(".")) -> tuple[pd.DataFrame, dict[str, bytes], dict]:
    """The node's measured (or rehearsal) rows, the bundle's other members, and the provenance for its manifest."""
    frame = store.read_results(results)
    rows = frame[(frame["node"] == node) & frame["source"].isin(store.MEASURED)].reset_index(drop=True)
    if rows.empty:
        raise ValueError(f"{results}: no measured rows of node {node!r}; run `snakemake --cores 1 report` for it first")
    members: dict[str, bytes] = {}
    commands: dict[str, str] = {}
    engines: list[dict] = []
    specs = sorted(Path(runs, node).glob("*/launch.json"))
    stacks, workloads, node_file, driver = set(), set(), None, None
    for spec_path in specs:
        launch_dir = spec_path.parent
        for name in LAUNCH_FILES:
            if (launch_dir / name).exists():
                members[f"launches/{launch_dir.name}/{name}"] = (launch_dir / name).read_bytes()
        spec = json.loads(spec_path.read_text())
        launch = spec.get("launch", {})
        stacks.add(launch.get("stack_config"))
        workloads.update(launch.get("workloads") or [])
        node_file = node_file or spec.get("node", {}).get("file")
        command = launch_dir / "server_command.json"
        if command.exists():
            commands[launch_dir.name] = shlex.join(str(a) for a in json.loads(command.read_text())["argv"])
        run = launch_dir / "run.json"
        if run.exists():
            driver = driver or _find_key(json.loads(run.read_text()), "driver")
    for (ref, stack, variant), launch_rows in rows.groupby(["ref", "stack", "variant"], dropna=False, sort=True):
        engines.append({"launch": f"{stack}/{variant}", "ref": ref, "engine": ", ".join(_distinct(launch_rows, "engine")) or UNKNOWN,
                        "version": ", ".join(_distinct(launch_rows, "engine_version")) or UNKNOWN,
                        "image": ", ".join(_distinct(launch_rows, "engine_image")) or UNKNOWN})
    node_path = Path(root, node_file) if node_file else Path(root, "configs/nodes", f"{node}.yaml")
    config = [("config/node.yaml", node_path)]
    config += [(f"config/stacks/{s}.yaml", Path(root, "configs/stacks", f"{s}.yaml")) for s in sorted(filter(None, stacks))]
    config += [(f"config/workloads/{w}.yaml", Path(root, "configs/workloads", f"{w}.yaml")) for w in sorted(workloads)]
    members.update({name: path.read_bytes() for name, path in config if path.exists()})
    weights = {}
    for model, ids in rows.groupby("model", dropna=True)["weights_id"]:
        weights[model] = ", ".join(sorted({str(i) for i in ids.dropna()})) or UNKNOWN
    provenance = {
        "node": node, "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "rehearsal": bool(rows["source"].eq("rehearsal").all()),
        "stackbench_version": ", ".join(_distinct(rows, "stackbench_version")) or UNKNOWN,
        "bundled_by": stackbench_version(), "definitions": DEFINITIONS, "definitions_sources": sources_sha256(),
        "engines": engines, "commands": commands, "weights": weights,
        "host": {"gpu": ", ".join(_distinct(rows, "gpu")) or UNKNOWN, "gpu_count": ", ".join(_distinct(rows, "gpu_count")),
                 "driver": str(driver) if driver else UNKNOWN, "os": ", ".join(_distinct(rows, "os")) or UNKNOWN,
                 "cpu": cpu_name() if rows["gpu"].fillna("").str.startswith("none").any() else UNKNOWN,
                 "bundled_on": host_os()},
    }
    return rows, members, provenance


def make_bundle(node: str, results: Path, runs: Path, out_dir: Path, owner: str | None = None,
                root: Path = Path(".")) -> Path:
    """Write <out_dir>/<node>.stackbench.tar; returns its path."""
    rows, members, provenance = gather(node, results, runs, root)
    return bundle.write(Path(out_dir) / f"{node}{bundle.SUFFIX}", rows, members, {"owner": owner or node, **provenance})


def regenerate(path: Path, root: Path = Path("."), name: str | None = None, machine: dict | None = None) -> tuple[Path, list[str]]:
    """A node file for this machine from a bundle: the bundle's stacks, variants, workloads, caps and repeats, this
    machine's hardware, and placeholders for model paths the pipeline does not make. Stack and workload files the
    checkout lacks are written from the bundle. Returns the node file and the commands to run."""
    found = bundle.read(path, DEFINITIONS)
    if "config/node.yaml" not in found.members:
        raise ValueError(f"{Path(path).name}: the bundle holds no node file (config/node.yaml)")
    doc = yaml.safe_load(found.members["config/node.yaml"])
    node = found.manifest["node"]
    same = Path(root, "configs/nodes", f"{node}.yaml")
    if name is None and same.exists() and same.read_bytes() == found.members["config/node.yaml"]:
        # This checkout has the very node file (the embedded default's bundle): run it as it is, under the same
        # node name, so both runs share every table.
        return same, [f"mkdir -p {Path(root, 'data/bundles')} && cp {shlex.quote(str(path))} {Path(root, 'data/bundles')}/",
                      f".venv/bin/snakemake --cores 1 report --config 'nodes=[{node}]'"]
    if name is None:
        name = f"{node}-from-{found.owner}" if found.owner != node else f"{node}-regen"
    if machine is None:
        from stackbench.provision import nodeinit

        machine = nodeinit.describe_machine()
    hardware = machine["hardware"]
    doc["hardware"] = {**doc.get("hardware", {}), **hardware}
    doc["description"] = f"regenerated from bundle {Path(path).name} ({found.owner}'s {node}) for this machine"
    weights = found.manifest.get("weights", {})
    for key, model in (doc.get("models") or {}).items():
        if isinstance(model, dict) and not model.get("prepare"):
            wid = weights.get(model.get("checkpoint") or key, UNKNOWN)
            field = "hf_dir" if "hf_dir" in model else "gguf"  # an <angle-bracket> path stops the plan until filled in
            model[field] = f"<path to {key} on this machine: the bundle's weights id {wid}>"
    written = []
    for member, data in sorted(found.members.items()):
        for kind in ("stacks", "workloads"):
            if member.startswith(f"config/{kind}/"):
                target = Path(root, "configs", kind, Path(member).name)
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
                    written.append(str(target))
    out = Path(root, "configs/nodes", f"{name}.yaml")
    if out.exists():
        raise FileExistsError(f"{out} exists; pass another --name or delete it")
    out.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# Written by `stackbench regenerate {Path(path).name}`: {found.owner}'s node {node}, same runs, this machine's\n"
              "# hardware. Fill in any <path ...> placeholders (same weights id: same bytes) before running.\n")
    out.write_text(header + yaml.safe_dump(doc, sort_keys=False))
    bundles_dir = Path(root, "data/bundles")
    commands = [f"mkdir -p {bundles_dir} && cp {shlex.quote(str(path))} {bundles_dir}/",
                f".venv/bin/stackbench commands --node {name}",
                f".venv/bin/snakemake --cores 1 report --config 'nodes=[{name}]' stacks=all"]
    if written:
        commands.insert(0, f"# written from the bundle: {', '.join(written)}")
    return out, commands
