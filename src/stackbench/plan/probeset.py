"""What every launch runs once, whatever its workload list names: the correctness probes (a workload of kind
probe, the node's `probes`), the accuracy set (kind accuracy, the node's `accuracy`) and the divergence pass
(kind divergence, the node's `divergence`). The node or a run
turns either off with null, which the launch records so the report says so. A launch whose list names a
workload of that kind itself runs that one."""

from __future__ import annotations

from stackbench.config import ConfigError

# The node field, the kind it names, and what turning it off leaves unchecked (the launch's record says so).
ONCE_PER_LAUNCH = {
    "probes": ("probe", "correctness probes off", "no smoke, needle, cache or greedy-agreement check"),
    "accuracy": ("accuracy", "accuracy set off", "no accuracy figure or answer agreement"),
    "divergence": ("divergence", "divergence off", "no perplexity or divergence from the quality reference"),
}


def probe_set(doc: dict, run: dict, field: str = "probes") -> str | None:
    """The run's set for `field` where it names one (null: off), else the node's."""
    return run[field] if field in run else doc[field]


def named(doc: dict, where: str) -> dict[str, str]:
    """The sets the node and its runs name, each with where it is named (for a missing file's error)."""
    found = {doc[f]: f"{where}: {f}" for f in ONCE_PER_LAUNCH if doc[f]}
    for i, run in enumerate(doc["runs"]):
        for field in ONCE_PER_LAUNCH:
            if run.get(field):
                found.setdefault(run[field], f"{where}: runs[{i}].{field}")
    return found


def launch_workloads(listed: tuple[str, ...], chosen: str | None, kinds: dict[str, str],
                     where: str, field: str = "probes") -> tuple[tuple[str, ...], str | None]:
    """The launch's workloads with the set `field` names last (a cold prefix cache is the probes' own
    business: their prompts are unsalted and differ from every other workload's), and why it is off, if it is."""
    kind, off, unchecked = ONCE_PER_LAUNCH[field]
    if chosen is not None and kinds[chosen] != kind:
        raise ConfigError(f"{where}: {field}: {chosen!r} is a workload of kind {kinds[chosen]!r}, not of kind {kind}")
    if any(kinds[w] == kind for w in listed):
        return listed, None
    if chosen is None:
        return listed, f"{off} ({where}: {field}: null): {unchecked}"
    return (*listed, chosen), None
