"""Every estimator the pipeline states, in one place: the figures' and the report's intervals, the tests
between launches, the power that says how many more runs would decide, and the variance components.

- median_interval: the distribution-free order-statistic interval of a median over repeats (measure/summary.py
  writes it as a row's ci_low / ci_high; measure/precision.py stops repeating on it).
- wilson: the Wilson score interval of a share (accuracy, the share of positions with the reference's top token).
- exact_mcnemar: the exact McNemar test on paired flips (answers one launch got right and the other wrong).
- welch_gain, repeats_to_decide: a variant's gain over its reference with Welch's t interval over repeats inside
  one launch (WELCH_GAIN), and the repeats that would make it exclude zero.
- paired_gain (paired_log_ratios), corrected_level, launches_to_decide, launch_noise: the gain paired within
  rounds of launch replicates with its t interval over rounds, Bonferroni's level for choosing among variants,
  the launches that would decide at 80% power, and the launch-noise floor of a node.
- variance_components: the variance split between launches and repeats inside one.

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
MOST_REPEATS_SAID = 1000  # repeats_to_decide looks no further
Z95 = 1.959963984540054  # the standard normal's 97.5th percentile
WELCH_GAIN = ("Welch's t interval (95%) of the difference of the mean log rates over repeats, read as the ratio "
              "of the geometric means - 1")


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """The median's distribution-free interval: the order statistics (x_(k), x_(n+1-k)) with the largest k
    whose coverage, 1 - 2 P(Binomial(n, 1/2) < k), is at least `level`. None where even (min, max) covers
    less (fewer than 6 values at 95%: 1 - 2 / 2^n)."""
    ordered = sorted(values)
    n = len(ordered)
    ks = [k for k in range(1, n // 2 + 1) if 1 - 2 * scipy.stats.binom.cdf(k - 1, n, 0.5) >= level]
    return (ordered[max(ks) - 1], ordered[n - max(ks)]) if ks else None


def wilson(correct: int, n: int) -> tuple[float, float]:
    """Wilson score 95% interval of a share (Wilson 1927; Brown, Cai & DasGupta 2001 recommend it over the
    normal approximation for small n and shares near 0 or 1): it stays inside [0, 1] and is not empty at 0."""
    p = correct / n
    centre = (p + Z95 ** 2 / (2 * n)) / (1 + Z95 ** 2 / n)
    half = Z95 * (p * (1 - p) / n + Z95 ** 2 / (4 * n * n)) ** 0.5 / (1 + Z95 ** 2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def exact_mcnemar(worse: int, better: int) -> float:
    """Two-sided exact McNemar p-value on the discordant pairs (questions one launch got right and the other
    wrong): under no difference each flip is a fair coin, so p = P(Binomial(b + c, 1/2) at least as far from
    (b + c) / 2 as observed) (McNemar 1947; the exact form for small counts, Fagerland et al. 2013)."""
    flips = worse + better
    if flips == 0:
        return 1.0
    tail = sum(math.comb(flips, i) for i in range(min(worse, better) + 1)) / 2 ** flips
    return min(1.0, 2 * tail)


def _log_moments(values) -> tuple[float, float, int] | None:
    """Mean and sample variance of the log rates, and their count; None below two positive repeats."""
    logs = np.log([v for v in (values if values is not None else ()) if v and v > 0])
    return (float(logs.mean()), float(logs.var(ddof=1)), len(logs)) if len(logs) >= 2 else None


def _welch_t(variance_a: float, variance_b: float, n_a: int, n_b: int) -> tuple[float, float]:
    """The standard error of a difference of means and Welch-Satterthwaite's t quantile at LEVEL."""
    a, b = variance_a / n_a, variance_b / n_b
    se = math.sqrt(a + b)
    df = (a + b) ** 2 / (a ** 2 / (n_a - 1) + b ** 2 / (n_b - 1)) if se > 0 else float("inf")
    return se, float(scipy.stats.t.ppf((1 + LEVEL) / 2, df))


def welch_gain(variant, reference) -> tuple[float, float, float] | None:
    """(gain, low, high) of `variant`'s rate over `reference`'s, from their per-repeat rates inside one launch:
    WELCH_GAIN (rates are positive and their ratio is the question, so the difference is taken on logs). None
    where either has fewer than two repeats."""
    a, b = _log_moments(variant), _log_moments(reference)
    if a is None or b is None:
        return None
    diff = a[0] - b[0]
    se, t = _welch_t(a[1], b[1], a[2], b[2])
    return math.expm1(diff), math.expm1(diff - t * se), math.expm1(diff + t * se)


def repeats_to_decide(variant, reference) -> int | None:
    """How many repeats of each would make welch_gain's interval exclude zero, were the log rates' difference and
    variances what these repeats show; None where none up to MOST_REPEATS_SAID would (or either has < 2)."""
    a, b = _log_moments(variant), _log_moments(reference)
    if a is None or b is None or a[0] == b[0]:
        return None
    for n in range(2, MOST_REPEATS_SAID + 1):
        se, t = _welch_t(a[1], b[1], n, n)
        if t * se < abs(a[0] - b[0]):
            return n
    return None


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
