"""The /metrics text the three engines serve, read through prometheus_client's own parsers.

Prometheus text format 0.0.4 by default; OpenMetrics (the text ends with "# EOF", and may carry
exemplars) when a server answers in it. Samples are keyed by name and sorted labels, so a counter's
series can be summed or split by one label.
"""

from __future__ import annotations

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families as text_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class MetricsFormatError(ValueError):
    """/metrics text that is not in the exposition format; raised instead of recording a wrong number."""


def families(text: str) -> list:
    """Every metric family in `text` (prometheus_client Metric objects); MetricsFormatError when the
    parser refuses it."""
    parser = openmetrics_families if text.rstrip().endswith("# EOF") else text_families
    try:
        return list(parser(text))
    except ValueError as err:
        raise MetricsFormatError(f"/metrics is not in the Prometheus exposition format: {err}") from None


def parse(text: str) -> Samples:
    """name + sorted labels -> value, over every sample of every family."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): float(sample.value)
            for family in families(text) for sample in family.samples}


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
