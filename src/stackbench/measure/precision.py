"""Repeats to a stated precision and the over-saturated concurrency sweep, as guidellm stops a benchmark once
a figure is known to a margin and detects over-saturation from the slopes of concurrency and TTFT.

With `measure.target_rel_ci` set, a cell is repeated until the 95% interval of the median that its row will
carry (estimators.median_interval, order statistics, which exists from 6 repeats) of its headline figure, the
per-request decode rate of a single stream or the aggregate output throughput of a concurrent (or open-loop)
cell, is within that share of the median on either side, never fewer than `repeats` nor more than
`max_repeats` repeats; its rows' `n` says how many ran. The stop rule and the row's interval are one interval.
"""

from __future__ import annotations

import statistics

from stackbench.config.model import Measure
from stackbench.measure import summary
from stackbench.measure.client import RequestRecord
from stackbench.results.estimators import median_interval
from stackbench.results.judged import judged_metric
from stackbench.results.metrics import M


def precise_enough(repeats: list[list[RequestRecord]], concurrency: int | None, measure: Measure) -> bool:
    """True once `repeats` holds the minimum and, under a target, the headline's interval is within it."""
    if len(repeats) < measure.repeats:
        return False
    target = measure.target_rel_ci
    if target is None:
        return True
    metric = judged_metric(concurrency)
    values = [v for v in (summary.repeat_figures(records).get(metric) for records in repeats) if v is not None]
    interval = median_interval(values)
    if interval is None:
        return False
    median = statistics.median(values)
    return max(median - interval[0], interval[1] - median) <= target * abs(median)


def precision_note(repeats: list[list[RequestRecord]], concurrency: int | None, measure: Measure) -> str | None:
    """What the repeat count says about the target: reached, or not within the most repeats allowed."""
    target = measure.target_rel_ci
    if target is None:
        return None
    what = f"95% interval of the median of {judged_metric(concurrency)} within +-{target:.0%} of its median"
    if precise_enough(repeats, concurrency, measure):
        return f"repeated {len(repeats)} times: {what}"
    return f"repeated {len(repeats)} times (measure.max_repeats): {what} not reached"


def saturated(levels: dict[int, dict[str, float]], knee_fraction: float) -> str | None:
    """Why a concurrency sweep is over-saturated at its highest level so far, or None: the aggregate rose by
    no more than `knee_fraction` (flat or falling) over the level below while TTFT rose by more than that
    (requests queue instead of being served). `levels` maps concurrency to its cell's median figures."""
    order = sorted(c for c, figures in levels.items() if M.aggregate_tps in figures and M.ttft_s in figures)
    if len(order) < 2:
        return None
    lower, higher = levels[order[-2]], levels[order[-1]]
    if not (lower[M.aggregate_tps] > 0 and lower[M.ttft_s] > 0):  # no rate or TTFT below: no rise to measure
        return None
    rise = higher[M.aggregate_tps] / lower[M.aggregate_tps] - 1
    climb = higher[M.ttft_s] / lower[M.ttft_s] - 1
    if rise <= knee_fraction and climb > knee_fraction:
        return (f"over-saturated at c={order[-1]}: aggregate_tps {rise:+.0%} over c={order[-2]} (no more than "
                f"{knee_fraction:.0%}) while ttft_s rose {climb:+.0%}")
    return None
