"""Correctness probes in every launch: the probe set a launch runs (a workload of kind probe), whatever its
workload list names, unless the node or the run turns probes off (`probes: null`), which the launch records
so the report says so. A launch whose list names a probe workload itself runs that one."""

from __future__ import annotations

from stackbench.config import ConfigError


def probe_set(doc: dict, run: dict) -> str | None:
    """The run's probe set where it names one (null: off), else the node's."""
    return run["probes"] if "probes" in run else doc["probes"]


def named(doc: dict, where: str) -> dict[str, str]:
    """The probe sets the node and its runs name, each with where it is named (for a missing file's error)."""
    found = {doc["probes"]: f"{where}: probes"} if doc["probes"] else {}
    for i, run in enumerate(doc["runs"]):
        if run.get("probes"):
            found.setdefault(run["probes"], f"{where}: runs[{i}].probes")
    return found


def launch_workloads(listed: tuple[str, ...], probes: str | None, kinds: dict[str, str],
                     where: str) -> tuple[tuple[str, ...], str | None]:
    """The launch's workloads with its probe set last (a cold prefix cache is the probes' own business:
    their prompts are unsalted and differ from every other workload's), and why probes are off, if they are."""
    if probes is not None and kinds[probes] != "probe":
        raise ConfigError(f"{where}: probes: {probes!r} is a workload of kind {kinds[probes]!r}, not a probe set (kind probe)")
    if any(kinds[w] == "probe" for w in listed):
        return listed, None
    if probes is None:
        return listed, f"correctness probes off ({where}: probes: null): no smoke, needle, cache or greedy-agreement check"
    return (*listed, probes), None
