"""What makes a run a rehearsal, decided once at config load: `rehearsal.node` set (by `snakemake
rehearse`). Its results, parts, cell cache and reports move under data/rehearsal/<node>/ and
reports/rehearsal/<node>/, its GPU locks and simulated GPUs into a lock folder of its own, each cell runs
once without warm-up (the stand-ins' figures are a shape, not a measurement), and the stand-in's identity
enters every launch's fingerprint, so no rehearsal cell is ever taken for a measured one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from stackbench.config import ConfigError
from stackbench.rehearsal.standin import VERSION

DATA = Path("data/rehearsal")
REPORTS = Path("reports/rehearsal")
ONCE = {"repeats": 1, "warmup_requests": 0}  # a rehearsal runs each cell once (its basis says so)
# A node file's `os: auto` is the measuring host's OS: a rehearsal's host is not the GPU node, so its rows say
# unknown rather than this machine's OS (the node file names the GPU host's OS where it is known).
AUTO_OS = "unknown"


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


# How a figure's unit scales with time: a rehearsal's clock runs `time_scale` times fast, so its seconds are
# multiplied and its rates divided by it to read at the stand-in's modeled pace; energy is power (modeled,
# not scaled) over time. Any other unit (ratio, tokens, W, MiB) has no time in it.
PER_TIME = {"s": 1, "ms": 1, "tok/s": -1, "req/s": -1, "J/token": 1, "J/response": 1}


def at_model_pace(figure, time_scale: float):
    """A rehearsal's figure (measure.summary.Figure) at the modeled pace: its value, range, interval and
    deviation rescaled by its unit's power of time (PER_TIME)."""
    factor = time_scale ** PER_TIME.get(figure.unit, 0)
    if factor == 1:
        return figure
    scaled = {name: getattr(figure, name) * factor for name in ("value", "value_min", "value_max", "ci_low", "ci_high", "mad")
              if getattr(figure, name) is not None}
    return dataclasses.replace(figure, **scaled)
