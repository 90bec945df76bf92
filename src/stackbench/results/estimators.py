"""The estimators behind the report's decisions across server launches: the paired gain of a variant over its
reference within rounds of launch replicates, its t interval over rounds, the correction for choosing among
several variants, the launches that would decide at 80% power, and the variance split between launches and
repeats inside one.

The unit of replication is the launch (a fresh server process), as JMH's forks and pyperf's worker processes
are: repeats inside one launch cannot see what changes from one process to the next, so an interval over them
alone understates a rerun's spread. The gain is taken on logs (rates are positive and their ratio is the
question) and paired within a round (the variant and its reference measured back to back on the same prompts,
so a drift of the host between rounds cancels). Kalibera & Jones (ISMM 2013) give the levels' variance
components and the allocation of repetitions between them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.stats

LEVEL = 0.95
POWER = 0.80
MOST_LAUNCHES_SAID = 100  # launches_to_decide looks no further


@dataclass(frozen=True)
class PairedGain:
    """A variant's gain over its reference from rounds of launches: expm1 of the mean paired log ratio."""

    gain: float
    low: float
    high: float
    rounds: int
    level: float
    mean_log: float
    sd_log: float  # the paired log ratios' sample standard deviation across rounds

    @property
    def clears_zero(self) -> bool:
        return self.low > 0


def paired_log_ratios(variant: dict[int, float], reference: dict[int, float]) -> np.ndarray:
    """log(variant / reference) for each round both measured with a positive figure (rounds keyed by replicate)."""
    rounds = sorted(k for k in variant.keys() & reference.keys()
                    if _positive(variant[k]) and _positive(reference[k]))
    return np.array([math.log(variant[k] / reference[k]) for k in rounds])


def _positive(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value)) and value > 0


def paired_gain(variant: dict[int, float], reference: dict[int, float], level: float = LEVEL) -> PairedGain | None:
    """The gain with its t interval over rounds (df = rounds - 1) at `level`; None below two paired rounds."""
    logs = paired_log_ratios(variant, reference)
    if len(logs) < 2:
        return None
    mean, sd = float(logs.mean()), float(logs.std(ddof=1))
    half = float(scipy.stats.t.ppf((1 + level) / 2, len(logs) - 1)) * sd / math.sqrt(len(logs))
    return PairedGain(math.expm1(mean), math.expm1(mean - half), math.expm1(mean + half), len(logs), level, mean, sd)


def corrected_level(candidates: int, level: float = LEVEL) -> float:
    """Bonferroni's level for choosing the best of `candidates` variants and then testing it: each interval at
    1 - (1 - level) / m, so more depths swept do not mean more false wins (family-wise error at most 1 - level)."""
    return 1 - (1 - level) / max(candidates, 1)


def launches_to_decide(sd_log: float, mean_log: float, level: float = LEVEL, power: float = POWER) -> int | None:
    """Rounds of launches at which the paired t interval at `level` excludes zero with probability `power`, were
    the true mean log ratio and its spread what was measured (the noncentral t's power); None where none up to
    MOST_LAUNCHES_SAID would, or the measured gain is zero."""
    if not mean_log or not math.isfinite(mean_log):
        return None
    if sd_log <= 0:
        return 2
    for n in range(2, MOST_LAUNCHES_SAID + 1):
        df = n - 1
        critical = scipy.stats.t.ppf((1 + level) / 2, df)
        shift = abs(mean_log) / (sd_log / math.sqrt(n))
        if scipy.stats.nct.sf(critical, df, shift) + scipy.stats.nct.cdf(-critical, df, shift) >= power:
            return n
    return None


@dataclass(frozen=True)
class VarianceComponents:
    """The variance of a figure's logs split by level: between launches, and between repeats inside one."""

    between_launches: float
    within_launch: float
    launches: int
    repeats: float  # mean repeats per launch

    @property
    def between_share(self) -> float:
        total = self.between_launches + self.within_launch
        return self.between_launches / total if total > 0 else 0.0

    def repeats_per_launch(self, launch_cost_s: float, repeat_cost_s: float) -> int:
        """Kalibera & Jones's allocation: the repeats per launch that give the narrowest interval for the time,
        sqrt(launch cost x within variance / (repeat cost x between variance)), at least 1."""
        if self.between_launches <= 0:
            return max(1, round(self.repeats))
        if repeat_cost_s <= 0:
            return 1
        return max(1, round(math.sqrt(launch_cost_s * self.within_launch / (repeat_cost_s * self.between_launches))))


def variance_components(per_launch: Sequence[Sequence[float]]) -> VarianceComponents | None:
    """One-way random-effects estimates (method of moments) from each launch's repeat values, on logs: the
    within-launch variance pooled over launches, the between-launch variance of the launch means less what the
    within variance explains of it (never below zero). None below two launches with two positive repeats each."""
    groups = [np.log([v for v in values if _positive(v)]) for values in per_launch]
    groups = [g for g in groups if len(g) >= 2]
    if len(groups) < 2:
        return None
    within = float(np.mean([g.var(ddof=1) for g in groups]))
    repeats = float(np.mean([len(g) for g in groups]))
    between = max(0.0, float(np.var([g.mean() for g in groups], ddof=1)) - within / repeats)
    return VarianceComponents(between, within, len(groups), repeats)


def launch_noise(reference: dict[int, float], level: float = LEVEL) -> float | None:
    """The launch-noise floor of a node: the half-width, as a share, of the paired interval that two series of
    its reference's launches would give for a gain whose truth is zero (sqrt(2) x their between-launch standard
    deviation of logs, over the rounds measured). None below two launches."""
    logs = np.log([v for v in reference.values() if _positive(v)])
    if len(logs) < 2:
        return None
    half = float(scipy.stats.t.ppf((1 + level) / 2, len(logs) - 1)) * math.sqrt(2) * float(logs.std(ddof=1)) / math.sqrt(len(logs))
    return math.expm1(half)
