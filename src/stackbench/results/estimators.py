"""Every estimator the pipeline states, in one place: the figures' and the report's intervals, the tests
between launches, the power that says how many more runs would decide, and the variance components.

- median_interval: the distribution-free order-statistic interval of a median over repeats (measure/summary.py
  writes it as a row's ci_low / ci_high; measure/precision.py stops repeating on it).
- wilson: the Wilson score interval of a share (accuracy, the share of positions with the reference's top token).
- exact_mcnemar: the exact McNemar test on paired flips (answers one launch got right and the other wrong).
- mad, relative_spread, median_of_launches: a cell's spread over repeats, that spread as a share of its median,
  and a variant's figure over its launches.
- paired_gain (paired_log_ratios): the gain paired within rounds of launch replicates with its t interval over
  rounds (a two-sided interval at a given level, for display and the rerun check).
- What to run's sequential rule (analysis/decide.py): spent_alpha (the error spent at each look after a round,
  Kim & DeMets' power family), one_sided (a gain's one-sided bounds and p-value at a look's alpha),
  benjamini_hochberg (error control across a node's cells), rounds_to_settle (the rounds that would decide at the
  spread seen), and gains_differ (the rerun check: do two runs' gains differ).
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
MOST_ROUNDS_SAID = 100  # rounds_to_settle looks no further
Z95 = 1.959963984540054  # the standard normal's 97.5th percentile
ALPHA = 0.05  # What to run's error: a false "run" (across a node's cells) or a false "not worth it" (per cell)
SPENDING_RHO = 2  # Kim & DeMets (1987) power family alpha x t^rho: spends little at the early looks


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


def paired_logs_by_round(variant, reference) -> dict[int, float]:
    """{round: log(variant / reference)} for each round both measured with a positive figure (rounds keyed by
    replicate); empty where either has no rounds (a dict)."""
    if not isinstance(variant, dict) or not isinstance(reference, dict):
        return {}
    rounds = sorted(k for k in variant.keys() & reference.keys() if _positive(variant[k]) and _positive(reference[k]))
    return {k: math.log(variant[k] / reference[k]) for k in rounds}


def paired_log_ratios(variant: dict[int, float], reference: dict[int, float]) -> np.ndarray:
    """paired_logs_by_round's ratios in round order."""
    return np.array(list(paired_logs_by_round(variant, reference).values()))


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


def mad(values: Sequence[float]) -> float | None:
    """The median absolute deviation, median(|x - median|), unscaled; None below two values."""
    if len(values) < 2:
        return None
    centre = float(np.median(values))
    return float(np.median([abs(v - centre) for v in values]))


def relative_spread(mad_value, median) -> float:
    """A cell's MAD as a share of its median (NaN where either is missing or the median is not positive)."""
    known = mad_value is not None and not (isinstance(mad_value, float) and math.isnan(mad_value))
    return float(mad_value) / float(median) if known and _positive(median) else math.nan


def median_of_launches(per_launch: Sequence[float]) -> float:
    """A variant's figure over its launch replicates: the median of each launch's median."""
    return float(np.median(per_launch)) if len(per_launch) else math.nan


# -- What to run's sequential rule ---------------------------------------------------------------------------
def spent_alpha(look: int, first: int, most: int, alpha: float = ALPHA) -> float:
    """The error spent at the look after round `look`: Kim & DeMets' (1987) power family, alpha x (n / most)^rho
    spent by round n, so the first look (round `first`) spends alpha x (first / most)^rho and each later look the
    increment. Summed over the looks it is at most alpha whatever round the sequence stops at (a union bound over
    the looks, Lan & DeMets 1983: the rounds need not be planned ahead). 0 outside first..most."""
    if look < first or look > most:
        return 0.0
    before = 0 if look == first else look - 1
    return alpha * ((look / most) ** SPENDING_RHO - (before / most) ** SPENDING_RHO)


@dataclass(frozen=True)
class OneSided:
    """A gain's one-sided bounds at one look: low (the gain exceeds it, with error alpha) and high (it is below it,
    with error alpha), from the paired log ratios' t over rounds; p the one-sided p-value of "no gain"."""

    gain: float
    low: float
    high: float
    p: float
    rounds: int
    alpha: float
    mean_log: float
    sd_log: float


def one_sided(logs: Sequence[float], alpha: float) -> OneSided | None:
    """Student's t over rounds (df = rounds - 1) of the paired log ratios; None below two rounds."""
    logs = np.asarray(logs, dtype=float)
    if len(logs) < 2 or alpha <= 0:
        return None
    mean, sd = float(logs.mean()), float(logs.std(ddof=1))
    se = sd / math.sqrt(len(logs))
    t_crit = float(scipy.stats.t.ppf(1 - alpha, len(logs) - 1))
    p = float(scipy.stats.t.sf(mean / se, len(logs) - 1)) if se > 0 else (0.0 if mean > 0 else 1.0)
    return OneSided(math.expm1(mean), _expm1(mean - t_crit * se), _expm1(mean + t_crit * se), p, len(logs), alpha, mean, sd)


def _expm1(x: float) -> float:
    """expm1, infinite past what a float holds (a bound at a tiny alpha over two rounds can be)."""
    return math.expm1(x) if x < 700 else math.inf


def t_over_rounds(logs: np.ndarray, alpha: float, least: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """one_sided for many at once: per row of `logs` (rounds as columns, NaN where a round is missing) the mean,
    the upper one-sided bound at `alpha` and the p-value of "no gain" (NaN bound and p 1 below `least` rounds,
    at least two)."""
    n = np.sum(~np.isnan(logs), axis=1)
    enough = n >= max(2, least)
    safe = np.where(enough[:, None], logs, 0.0)
    counted = np.where(enough, n, 2)
    mean = np.where(enough, np.nansum(safe, axis=1) / counted, np.nan)
    squares = np.nansum((safe - np.where(enough, mean, 0.0)[:, None]) ** 2 * ~np.isnan(safe), axis=1)
    se = np.sqrt(squares / (counted - 1) / counted)
    df = counted - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        stat = np.where(se > 0, mean / se, np.where(mean > 0, np.inf, -np.inf))
    high = np.where(enough, mean + scipy.stats.t.ppf(1 - alpha, df) * se, np.nan)
    p = np.where(enough, scipy.stats.t.sf(stat, df), 1.0)
    return mean, high, p


def benjamini_hochberg(p_values: Sequence[float], level: float) -> list[bool]:
    """Which hypotheses Benjamini & Hochberg's (1995) step-up procedure rejects at false-discovery rate `level`:
    the k smallest p-values, k the largest with p_(k) <= k x level / m. Valid under positive dependence
    (Benjamini & Yekutieli 2001), as a launch's speed factor shared by all its cells makes them; under no true
    difference anywhere it is the family-wise error, so at most `level` of nodes see a false "run" at a look."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    passed = [k for k, i in enumerate(order, start=1) if p_values[i] <= k * level / m]
    cut = max(passed, default=0)
    rejected = [False] * m
    for i in order[:cut]:
        rejected[i] = True
    return rejected


def rounds_to_settle(mean_log: float, sd_log: float, rounds: int, margin: float, first: int, most: int) -> int | None:
    """The rounds at which a look would settle the gain, were its mean and spread what `rounds` rounds show: the
    smallest n past `rounds` whose last look's bound clears zero (a gain over half the margin) or falls below the
    margin (the rest), at the error the look at round n would spend with the budget stretched to n. None where
    none up to MOST_ROUNDS_SAID would, or the spread is not known."""
    if not math.isfinite(sd_log) or not math.isfinite(mean_log):
        return None
    n = np.arange(max(rounds + 1, first, 2), MOST_ROUNDS_SAID + 1)
    if not len(n):
        return None
    most_n = np.maximum(most, n)
    alpha = ALPHA * ((n / most_n) ** SPENDING_RHO - ((n - 1) / most_n) ** SPENDING_RHO)
    half = scipy.stats.t.ppf(1 - alpha, n - 1) * sd_log / np.sqrt(n)
    settles = mean_log - half > 0 if mean_log > math.log1p(margin) / 2 else mean_log + half < math.log1p(margin)
    return int(n[np.argmax(settles)]) if settles.any() else None


def paired_sd_of_launch_cv(cv: float) -> float:
    """The spread of a round's paired log ratio where each launch's speed varies by `cv` between launches, the
    two launches independent: sqrt(2) x log(1 + cv)."""
    return math.sqrt(2) * math.log1p(cv)


def resolvable_gain(sd_log: float, look: int, first: int, most: int) -> float:
    """The gain a look at round `look` resolves, were the paired log ratios' spread `sd_log`: the one-sided bound's
    distance from the mean, exp(t x sd / sqrt(n)) - 1, at the error that look spends (spent_alpha). A true gain
    this far above zero reads "run"; one this far under the margin reads "not worth it". Per cell, before the
    correction across a node's cells; inf where the look spends nothing."""
    alpha = spent_alpha(look, first, most)
    if alpha <= 0 or look < 2:
        return math.inf
    return math.expm1(float(scipy.stats.t.ppf(1 - alpha, look - 1)) * sd_log / math.sqrt(look))


def rounds_to_resolve(sd_log: float, margin: float) -> int | None:
    """The fewest rounds whose single look (all the error spent at once: the cheapest plan) resolves the margin at
    spread `sd_log`: resolvable_gain under `margin`. None where no plan up to MOST_ROUNDS_SAID does."""
    return next((n for n in range(2, MOST_ROUNDS_SAID + 1) if resolvable_gain(sd_log, n, n, n) < margin), None)


def gains_differ(logs_a: Sequence[float], logs_b: Sequence[float], level: float = LEVEL) -> tuple[float, bool] | None:
    """Do two runs' gains of one variant differ: Welch's t test of their paired log ratios' means (two-sided, at
    1 - level). (p-value, differ); None where either run has fewer than two rounds."""
    a, b = np.asarray(logs_a, dtype=float), np.asarray(logs_b, dtype=float)
    if len(a) < 2 or len(b) < 2:
        return None
    if a.std(ddof=1) == 0 and b.std(ddof=1) == 0:
        return (1.0, False) if a.mean() == b.mean() else (0.0, True)
    p = float(scipy.stats.ttest_ind(a, b, equal_var=False).pvalue)
    return p, p < 1 - level
