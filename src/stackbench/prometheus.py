"""A small parser for the Prometheus text exposition format the three engines serve on /metrics."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)(?:\s+\d+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_LABELS = re.compile(r'\s*(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"\s*(?:,\s*|$))*')

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class MetricsFormatError(ValueError):
    """A /metrics line that is not in the exposition format; raised instead of recording a wrong number."""


def parse(text: str) -> Samples:
    """name + sorted labels -> value. Comment lines (# HELP, # TYPE) are skipped."""
    samples: Samples = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            raise MetricsFormatError(f"/metrics line {number} is not a Prometheus sample: {line[:120]!r}")
        if match["labels"] and not _LABELS.fullmatch(match["labels"]):
            raise MetricsFormatError(f"/metrics line {number}: labels are not name=\"value\" pairs: {line[:120]!r}")
        labels = tuple(sorted(_LABEL.findall(match["labels"] or "")))
        try:
            value = float(match["value"])
        except ValueError:
            raise MetricsFormatError(f"/metrics line {number}: value {match['value']!r} is not a number") from None
        samples[(match["name"], labels)] = value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sum over every series of `name` whose labels include `labels` (None when there is none)."""
    found = [v for (n, ls), v in samples.items() if n == name and all((k, val) in ls for k, val in labels.items())]
    return sum(found) if found else None


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    """Series of `name` keyed by one label's value, summed over the other labels."""
    out: dict[str, float] = {}
    for (n, ls), v in samples.items():
        if n == name:
            key = dict(ls).get(label)
            if key is not None:
                out[key] = out.get(key, 0.0) + v
    return out
