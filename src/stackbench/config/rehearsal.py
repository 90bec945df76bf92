"""What makes a run a rehearsal, decided once at config load: `rehearsal.node` set (by `snakemake
rehearse`). Its results, parts, cell cache and reports move under data/rehearsal/<node>/ and
reports/rehearsal/<node>/, its GPU locks and simulated GPUs into a lock folder of its own, each cell runs
once without warm-up (the stand-ins' figures are a shape, not a measurement), and the stand-in's identity
enters every launch's fingerprint, so no rehearsal cell is ever taken for a measured one.

The plan asks the run the config selects (`selected`: a RealRun or a Rehearsal) what to plan, and never
tests the setting itself; the measure job runs a spec on the backend its `rehearsal` settings choose
(rehearsal/backend.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stackbench.config import ConfigError
from stackbench.config.model import Launch

STANDIN_NAME = "stackbench-standin"  # in /version, the model list and every log line: no one takes it for an engine
# In every rehearsal launch's fingerprint: 2: pace fitted to the posts (rehearsal/calibration.py).
STANDIN_VERSION = f"{STANDIN_NAME}-2 (TEST DOUBLE, not an engine)"
DATA = Path("data/rehearsal")
REPORTS = Path("reports/rehearsal")
ONCE = {"repeats": 1, "warmup_requests": 0}  # a rehearsal runs each cell once (its basis says so)
# A node file's `os: auto` is the measuring host's OS: a rehearsal's host is not the GPU node, so its rows say
# unknown rather than this machine's OS (the node file names the GPU host's OS where it is known).
AUTO_OS = "unknown"


# How the stand-in records its flag check (rehearsal/standin.py serve_rehearsal): "ok (<parser>, version <v>)",
# "skipped: <why>", or the engine's parser refusing the command.
REFUSED = "refused"


def flags_checked(check: str | None, pinned: str | None = None) -> str:
    """Whether the engine's own argument parser checked a launch's flags (the stand-in's record) and what it said,
    with the version the real run pins beside the one checked."""
    if not check:
        return "not recorded"
    if check.startswith("ok"):
        return "yes, " + check.removeprefix("ok").strip(" ()") + (f"; the run pins {pinned}" if pinned else "")
    if check.startswith(REFUSED):
        return "REFUSED: " + check.removeprefix(REFUSED).lstrip(": ")
    return "no: " + check.removeprefix("skipped: ")


def node_of(cfg: dict) -> str | None:
    return (cfg.get("rehearsal") or {}).get("node")


def paths(node: str) -> dict:
    """The paths a rehearsal of `node` writes; the inputs (published figures, models, environments) stay."""
    root = DATA / node
    return {"runs": str(root / "runs"), "parts": str(root / "parts"), "results": str(root / "results.parquet"),
            "reports": str(REPORTS / node)}


def lock_dir(node: str) -> Path:
    return DATA / node / "locks"


def budget_path(node: str) -> Path:
    """The real run's time budget from the rehearsal of `node` (rehearsal/budget.py), its report's opening."""
    return DATA / node / "budget.json"


def apply(cfg: dict) -> dict:
    """The config of a rehearsal (unchanged for a real run); applying it twice changes nothing more."""
    node = node_of(cfg)
    if node is None:
        return cfg
    if cfg["nodes"] != [node]:
        raise ConfigError(f"configs/config.yaml: rehearsal.node: a rehearsal runs one node: rehearsal.node is {node!r}, nodes are {cfg['nodes']}")
    return {**cfg, "paths": {**cfg["paths"], **paths(node)}, "measure": {**cfg["measure"], **ONCE}}


class RealRun:
    """A run of the node's own engines on its GPUs: planned as the config says."""

    settings = None  # a launch spec's `rehearsal`: none
    budget = None  # the real run's time budget is a rehearsal's to write (rehearsal/budget.py)
    starts_engines = True  # its launches need their engines' environments built (plan/launchspec.py inputs)
    checks_flags = False  # the engine itself parses its flags

    def rounds(self, first: int, most: int) -> int:
        """The rounds planned: up to the last What to run's sequence may reach (docs/what-to-run.md)."""
        return max(first, most)

    def node_os(self, written: str) -> str:
        return written  # `auto` is read on the measuring host, the GPU node, when its rows are made

    def engine(self, launch: Launch, real: dict) -> dict:
        """What a launch's spec says it runs: the engine's environment, binary, image or URL."""
        return real

    def own_repeats(self, launch: Launch) -> dict:
        """What a launch's own `repeats` sets in its spec's measure settings."""
        return {"repeats": launch.repeats} if launch.repeats else {}

    def fingerprinted(self, doc: dict) -> dict:
        return doc  # a real launch's fingerprints are what they were before rehearsals existed


@dataclass(frozen=True)
class Rehearsal:
    """A rehearsal of one node: stand-ins behind the real commands, its first rounds only."""

    settings: dict  # the config's `rehearsal` and the environments folder (the stand-in's flag check reads it)
    starts_engines = False  # stand-ins start, from this package: no engine environment is built
    # The stand-in parses its flags with the engine's own parser where that engine's CPU environment is built
    # (rehearsal/standin.py check_with_engine_parser): the parser is part of the launch (plan/launchspec.py).
    checks_flags = True

    @property
    def budget(self) -> str:
        """The real run's time budget this rehearsal writes, its report's opening."""
        return str(budget_path(self.settings["node"]))

    def rounds(self, first: int, most: int) -> int:
        return first  # the later rounds are priced by its time budget (rehearsal/budget.py), not rehearsed

    def node_os(self, written: str) -> str:
        return AUTO_OS if written == "auto" else written

    def engine(self, launch: Launch, real: dict) -> dict:
        """The stand-in, for the engine the real run would start."""
        return {"stand_in": STANDIN_VERSION, "engine": launch.engine, "stands_in_for": real}

    def own_repeats(self, launch: Launch) -> dict:
        return {}  # each cell once (ONCE); the time budget reads the launch's own repeats from its launch

    def fingerprinted(self, doc: dict) -> dict:
        return {**doc, "rehearsal": self.settings}


Run = RealRun | Rehearsal
REAL_RUN = RealRun()


def selected(cfg: dict) -> Run:
    """The run a config selects (after `apply`)."""
    return Rehearsal({**cfg["rehearsal"], "envs_dir": cfg["paths"]["envs"]}) if node_of(cfg) else REAL_RUN


def planned_for(settings: dict | None) -> Run:
    """The run a launch spec was planned for, from its `rehearsal` settings."""
    return Rehearsal(settings) if settings else REAL_RUN
