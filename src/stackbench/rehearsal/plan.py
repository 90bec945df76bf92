"""What makes a run a rehearsal, decided once at config load: `rehearsal.node` set (by `snakemake
rehearse`). Its results, parts, cell cache and reports move under data/rehearsal/<node>/ and
reports/rehearsal/<node>/, its GPU locks and simulated GPUs into a lock folder of its own, each cell runs
once without warm-up (the stand-ins' figures are a shape, not a measurement), and the stand-in's identity
enters every launch's fingerprint, so no rehearsal cell is ever taken for a measured one."""

from __future__ import annotations

from pathlib import Path

from stackbench.config import ConfigError
from stackbench.rehearsal.standin import VERSION

DATA = Path("data/rehearsal")
REPORTS = Path("reports/rehearsal")
ONCE = {"repeats": 1, "warmup_requests": 0}  # a rehearsal runs each cell once (its basis says so)


def node_of(cfg: dict) -> str | None:
    return (cfg.get("rehearsal") or {}).get("node")


def paths(node: str) -> dict:
    """The paths a rehearsal of `node` writes; the inputs (published figures, models, environments) stay."""
    root = DATA / node
    return {"runs": str(root / "runs"), "parts": str(root / "parts"), "results": str(root / "results.parquet"),
            "reports": str(REPORTS / node)}


def lock_dir(node: str) -> Path:
    return DATA / node / "locks"


def apply(cfg: dict) -> dict:
    """The config of a rehearsal (unchanged for a real run); applying it twice changes nothing more."""
    node = node_of(cfg)
    if node is None:
        return cfg
    if cfg["nodes"] != [node]:
        raise ConfigError(f"configs/config.yaml: rehearsal.node: a rehearsal runs one node: rehearsal.node is {node!r}, nodes are {cfg['nodes']}")
    return {**cfg, "paths": {**cfg["paths"], **paths(node)}, "measure": {**cfg["measure"], **ONCE}}


def engine_identity(engine: str, real: dict) -> dict:
    """A rehearsal launch's engine: the stand-in, for the engine the real run would start."""
    return {"stand_in": VERSION, "engine": engine, "stands_in_for": real}
