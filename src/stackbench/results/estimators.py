"""Every estimator the pipeline states, in one place: the figures' and the report's intervals, the tests
between launches, the power that says how many more runs would decide, and the variance components.

- median_interval: the distribution-free order-statistic interval of a median over repeats (measure/summary.py
  writes it as a row's ci_low / ci_high; measure/precision.py stops repeating on it).
- wilson: the Wilson score interval of a share (accuracy, the share of positions with the reference's top token).
- exact_mcnemar: the exact McNemar test on paired flips (answers one launch got right and the other wrong).
- mad, median_of_launches: a cell's spread over repeats and a variant's figure over its launches.
- paired_gain (paired_log_ratios): the gain paired within rounds of launch replicates with its t interval over
  rounds (a two-sided interval at a given level, for display and the rerun check).
- What to run's sequential rule (analysis/decide.py): looks (the rounds whose look can decide), spent_alpha (the
  error spent at each, Kim & DeMets' power family), the exact group-sequential boundaries for Student's t at
  those looks (critical_t, nominal_level; sequential_level, a candidate's p-value over the looks), one_sided (a
  gain's one-sided bounds at a look's level), benjamini_hochberg (error control across a node's cells),
  rounds_to_settle and budget_to_settle (the rounds that would decide at the spread seen, within the horizon
  or past it), and rerun_check (did a gain hold on a rerun: an equivalence test).
- variance_components: the variance split between launches and repeats inside one.

The unit of replication is the launch (a fresh server process), as JMH's forks and pyperf's worker processes
are: repeats inside one launch cannot see what changes from one process to the next, so an interval over them
alone understates a rerun's spread. The gain is taken on logs (rates are positive and their ratio is the
question) and paired within a round (the variant and its reference measured back to back on the same prompts,
so a drift of the host between rounds cancels). Kalibera & Jones (ISMM 2013) give the levels' variance
components and the allocation of repetitions between them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.stats

LEVEL = 0.95
MOST_ROUNDS_SAID = 100  # budget_to_settle looks no further
Z95 = 1.959963984540054  # the standard normal's 97.5th percentile
ALPHA = 0.05  # What to run's error: a false "run" (across a node's cells) or a false "not worth it" (per cell)
SPENDING_RHO = 3  # Kim & DeMets (1987) power family alpha x t^rho: spends little at the early looks


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


def median_of_launches(per_launch: Sequence[float]) -> float:
    """A variant's figure over its launch replicates: the median of each launch's median."""
    return float(np.median(per_launch)) if len(per_launch) else math.nan


# -- What to run's sequential rule ---------------------------------------------------------------------------
# Why a boundary of our own: gsDesign's Python port (gsdesign), spotify-confidence's sequential bounds and the
# rest compute group-sequential boundaries for a normal statistic; at three to six rounds the t statistic's
# heavy tails and the looks' shared spread estimate make those boundaries wrong by far (t at df 2 and 5% is
# 2.92, z 1.64). The t statistics at successive looks of one sequence of iid normal paired logs are pivotal:
# their joint law under "no gain" does not depend on the spread, so one seeded Monte Carlo of it serves every
# node. With BOUNDARY_DRAWS draws the error a design spends is exact to sqrt(alpha / draws): +-0.05 points at 5%.
BOUNDARY_DRAWS = 200_000
BOUNDARY_SEED = 52
# Error levels (a fraction of ALPHA) at which every design is solved: a hypothesis's sequential level, the least
# error at which its design's boundary is crossed, is read off them (log-linear between two).
DESIGN_ERRORS = ALPHA * np.geomspace(1e-3, 1, 31)
# A look whose critical t at its share of the error exceeds this decides next to nothing (at df 2 a bound five
# standard errors out is crossed, at a gain the horizon resolves half the time, only where three rounds agree
# several times closer than launches do): its share moves to the next look.
MAX_CRITICAL_T = 5.0


def looks(first: int, horizon: int, alpha: float = ALPHA) -> range:
    """The rounds whose look can decide: from the earliest round from `first` on (two at least: a t needs two)
    whose error spent so far, alpha x (n / horizon)^rho, puts Student's critical t (df n - 1) at most
    MAX_CRITICAL_T, or the horizon itself, to the horizon. Fixed by (first, horizon) before any round is seen."""
    for n in range(max(first, 2), horizon + 1):
        share = alpha * (n / horizon) ** SPENDING_RHO
        if n == horizon or scipy.stats.t.isf(share, n - 1) <= MAX_CRITICAL_T:
            return range(n, horizon + 1)
    return range(0)


def spent_alpha(look: int, first: int, most: int, alpha: float = ALPHA) -> float:
    """The error spent at the look after round `look` of the sequence from `first` to the horizon `most`: Kim &
    DeMets' (1987) power family, alpha x (n / most)^rho spent by round n, rho 3 (close to O'Brien & Fleming's
    boundary: at df 2 or 3 an early look decides little, so it is spent late). The first look (looks) spends
    what the rounds before it would have; summed over the looks it is alpha. 0 at a round that is no look."""
    taken = looks(first, most)
    if look not in taken:
        return 0.0
    before = 0 if look == taken[0] else look - 1
    return alpha * ((look / most) ** SPENDING_RHO - (before / most) ** SPENDING_RHO)


@functools.lru_cache(maxsize=64)
def _design(first: int, horizon: int) -> tuple[range, np.ndarray]:
    """(looks, nominal): per DESIGN_ERRORS level (rows) and look (columns) the one-sided nominal level of the
    exact boundary, P(t_{n-1} > c): boundaries c such that under no gain P(crossing first at look k) is the
    increment spent_alpha gives at that error, solved on BOUNDARY_DRAWS seeded sequences of iid normal rounds."""
    taken = looks(first, horizon)
    if len(taken) <= 1:  # one look: Student's t itself
        return taken, np.tile(DESIGN_ERRORS[:, None], (1, len(taken)))
    z = np.random.default_rng(BOUNDARY_SEED).standard_normal((BOUNDARY_DRAWS, horizon)).astype(np.float32)
    n = np.arange(1, horizon + 1, dtype=np.float32)
    mean = np.cumsum(z, axis=1) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        t = mean / np.sqrt((np.cumsum(z * z, axis=1) - n * mean ** 2) / (n - 1) / n)
    alive = np.ones((len(DESIGN_ERRORS), BOUNDARY_DRAWS), dtype=bool)
    nominal = np.zeros((len(DESIGN_ERRORS), len(taken)))
    tail = int(2 * ALPHA * BOUNDARY_DRAWS)
    for j, look in enumerate(taken):
        # The boundary is the crossing-th largest t among the sequences still running (inf where too little
        # error is left to cross): it lies among the largest 2 ALPHA x draws, as at most ALPHA x draws stopped.
        top = np.argpartition(-t[:, look - 1], tail)[:tail]
        order = top[np.argsort(-t[top, look - 1])]
        ranked = t[order, look - 1]
        alive_ranked = np.cumsum(alive[:, order], axis=1, dtype=np.int32)
        crossing = np.round([spent_alpha(look, first, horizon, error) * BOUNDARY_DRAWS for error in DESIGN_ERRORS])
        c = np.array([ranked[int(np.searchsorted(row, k))] if k >= 1 else np.inf for row, k in zip(alive_ranked, crossing)])
        if j == 0:  # the first look's boundary is Student's quantile itself, free of Monte Carlo error
            c = scipy.stats.t.isf(crossing / BOUNDARY_DRAWS, look - 1)
        alive &= t[None, :, look - 1] < c[:, None]
        nominal[:, j] = scipy.stats.t.sf(c, look - 1)
    return taken, np.maximum.accumulate(nominal, axis=0)


def nominal_level(rounds, error: float, first: int, horizon: int) -> np.ndarray:
    """The one-sided nominal level of the exact boundary a candidate with `rounds` rounds meets in the design
    from `first` to `horizon` spending `error` in all (0 where `rounds` is no look: its bound is infinite)."""
    taken, nominal = _design(first, horizon)
    rounds = np.asarray(rounds)
    out = np.zeros(rounds.shape)
    for j, look in enumerate(taken):
        at = rounds == look
        if at.any():
            level = np.exp(np.interp(math.log(error), np.log(DESIGN_ERRORS), np.log(np.maximum(nominal[:, j], 1e-300))))
            out[at] = level if nominal[-1, j] > 0 else 0.0
    return out


def critical_t(rounds, error: float, first: int, horizon: int) -> np.ndarray:
    """The exact boundary's critical t at `rounds` rounds (inf where that is no look): nominal_level's t."""
    rounds = np.asarray(rounds)
    level = nominal_level(rounds, error, first, horizon)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(level > 0, scipy.stats.t.isf(level, np.maximum(rounds - 1, 1)), np.inf)


def sequential_level(p: np.ndarray, rounds: np.ndarray, first: int, horizon: int) -> np.ndarray:
    """Per candidate, the least error whose design boundary its nominal one-sided p-value (at `rounds` rounds)
    crosses: 1 past ALPHA's boundary, DESIGN_ERRORS[0] below the smallest solved. Its running minimum over the
    looks is a valid p-value of the whole sequence, the only one Benjamini & Hochberg may step up on."""
    taken, nominal = _design(first, horizon)
    p, rounds = np.asarray(p, dtype=float), np.asarray(rounds)
    out = np.ones(p.shape)
    for j, look in enumerate(taken):
        at = (rounds == look) & (p <= nominal[-1, j])
        if at.any():
            out[at] = np.exp(np.interp(np.log(np.maximum(p[at], 1e-300)), np.log(np.maximum(nominal[:, j], 1e-300)),
                                       np.log(DESIGN_ERRORS)))
    return out


@dataclass(frozen=True)
class Boundaries:
    """A design's looks with, at each, the critical t, the error it spends and its one-sided nominal level."""

    looks: tuple[int, ...]
    critical_t: tuple[float, ...]
    spent: tuple[float, ...]
    nominal: tuple[float, ...]


def boundaries(first: int, horizon: int, alpha: float = ALPHA) -> Boundaries:
    """The exact boundaries of the sequence from `first` to `horizon` spending `alpha` (for the docs and tests)."""
    taken = tuple(looks(first, horizon))
    return Boundaries(taken, tuple(float(c) for c in critical_t(np.array(taken), alpha, first, horizon)),
                      tuple(spent_alpha(n, first, horizon, alpha) for n in taken),
                      tuple(float(v) for v in nominal_level(np.array(taken), alpha, first, horizon)))


@dataclass(frozen=True)
class OneSided:
    """A gain's one-sided bounds at one look: low (the gain exceeds it) and high (it is below it), each at the
    nominal one-sided `level` of the look's exact boundary for the design's `error`, from the paired log ratios'
    t over rounds; p the nominal one-sided p-value of "no gain"."""

    gain: float
    low: float
    high: float
    p: float
    rounds: int
    level: float
    mean_log: float
    sd_log: float
    error: float = math.nan  # the design's error behind `level` (ALPHA, or R x ALPHA / m for a chosen gain)


def one_sided(logs: Sequence[float], level: float, error: float = math.nan) -> OneSided | None:
    """Student's t over rounds (df = rounds - 1) of the paired log ratios at nominal one-sided `level`; None below
    two rounds or at level 0 (a look that is none)."""
    logs = np.asarray(logs, dtype=float)
    if len(logs) < 2 or level <= 0:
        return None
    mean, sd = float(logs.mean()), float(logs.std(ddof=1))
    se = sd / math.sqrt(len(logs))
    t_crit = float(scipy.stats.t.isf(level, len(logs) - 1))
    p = float(scipy.stats.t.sf(mean / se, len(logs) - 1)) if se > 0 else (0.0 if mean > 0 else 1.0)
    return OneSided(math.expm1(mean), _expm1(mean - t_crit * se), _expm1(mean + t_crit * se), p, len(logs), level,
                    mean, sd, error)


def _expm1(x: float) -> float:
    """expm1, infinite past what a float holds (a bound at a tiny level over two rounds can be)."""
    return math.expm1(x) if x < 700 else math.inf


def t_over_rounds(logs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of `logs` (rounds as columns, NaN where a round is missing): the rounds, the mean and its
    standard error (NaN mean and se below two rounds; se 0 where every round agrees)."""
    n = np.sum(~np.isnan(logs), axis=1)
    enough = n >= 2
    safe = np.where(enough[:, None], logs, 0.0)
    counted = np.where(enough, n, 2)
    mean = np.nansum(safe, axis=1) / counted
    squares = np.nansum((safe - mean[:, None]) ** 2 * ~np.isnan(safe), axis=1)
    se = np.sqrt(squares / (counted - 1) / counted)
    return n, np.where(enough, mean, np.nan), np.where(enough, se, np.nan)


def t_sf(stat: np.ndarray, rounds: np.ndarray) -> np.ndarray:
    """The one-sided nominal p-value of t statistics over `rounds` rounds (1 below two rounds)."""
    with np.errstate(invalid="ignore"):
        return np.where(rounds >= 2, scipy.stats.t.sf(stat, np.maximum(rounds - 1, 1)), 1.0)


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


def _settles(mean_log: float, sd_log: float, n: np.ndarray, t_crit: np.ndarray, margin: float) -> np.ndarray:
    """Whether a look at n rounds with critical t `t_crit` settles a gain of mean and spread as seen: its lower
    bound clears zero (a gain over half the margin) or its upper bound falls below the margin (the rest)."""
    half = t_crit * sd_log / np.sqrt(n)
    return mean_log - half > 0 if mean_log > math.log1p(margin) / 2 else mean_log + half < math.log1p(margin)


def rounds_to_settle(mean_log: float, sd_log: float, rounds: int, margin: float, first: int, most: int) -> int | None:
    """The round of the sequence from `first` to the horizon `most` whose look would settle the gain, were its
    mean and spread what `rounds` rounds show: the first look past `rounds` whose exact boundary at ALPHA (per
    cell, before the correction across a node's cells) settles it. None where no look up to the horizon would:
    a budget fixed in advance is never stretched (budget_to_settle says what would), or the spread is unknown."""
    if not math.isfinite(sd_log) or not math.isfinite(mean_log):
        return None
    n = np.array([k for k in looks(first, most) if k > rounds])
    if not len(n):
        return None
    settles = _settles(mean_log, sd_log, n, critical_t(n, ALPHA, first, most), margin)
    return int(n[np.argmax(settles)]) if settles.any() else None


def budget_to_settle(mean_log: float, sd_log: float, margin: float, first: int, most: int) -> int | None:
    """The horizon in rounds whose last look would settle a gain of mean and spread as seen, where the horizon
    `most` would not: the fewest rounds n past it whose Student's t at the nominal level of `most`'s last look
    settles it (a later horizon's last look spends about that level). None up to MOST_ROUNDS_SAID."""
    if not math.isfinite(sd_log) or not math.isfinite(mean_log) or not looks(first, most):
        return None
    level = float(nominal_level(np.array([most]), ALPHA, first, most)[0])
    n = np.arange(most + 1, MOST_ROUNDS_SAID + 1)
    if not len(n) or level <= 0:
        return None
    settles = _settles(mean_log, sd_log, n, scipy.stats.t.isf(level, n - 1), margin)
    return int(n[np.argmax(settles)]) if settles.any() else None


def paired_sd_of_launch_cv(cv: float) -> float:
    """The spread of a round's paired log ratio where each launch's speed varies by `cv` between launches, the
    two launches independent: sqrt(2) x log(1 + cv)."""
    return math.sqrt(2) * math.log1p(cv)


def resolvable_gain(sd_log: float, look: int, first: int, most: int) -> float:
    """The gain a look at round `look` resolves, were the paired log ratios' spread `sd_log`: the one-sided bound's
    distance from the mean, exp(t x sd / sqrt(n)) - 1, at that look's exact boundary in the sequence from `first`
    to `most` (critical_t). A true gain this far above zero reads "run"; one this far under the margin reads "not
    worth it". Per cell, before the correction across a node's cells; inf at a round that is no look."""
    if look < 2 or look not in looks(first, most):
        return math.inf
    return math.expm1(float(critical_t(np.array([look]), ALPHA, first, most)[0]) * sd_log / math.sqrt(look))


def rounds_to_resolve(sd_log: float, margin: float) -> int | None:
    """The fewest rounds whose single look (all the error spent at once: the cheapest plan) resolves the margin at
    spread `sd_log`: resolvable_gain under `margin`. None where no plan up to MOST_ROUNDS_SAID does."""
    return next((n for n in range(2, MOST_ROUNDS_SAID + 1) if resolvable_gain(sd_log, n, n, n) < margin), None)


@dataclass(frozen=True)
class RerunCheck:
    """Two runs' gains of one variant compared: the difference of their mean paired log ratios (`difference`,
    the second run's less the first's), the p-value that it lies within +-margin (equivalent, the larger of
    Schuirmann's two one-sided tests) and the two-sided p-value that it is not zero (differ), both Welch's t."""

    difference: float
    equivalent: float
    differ: float


def rerun_check(logs_a: Sequence[float], logs_b: Sequence[float], margin: float) -> RerunCheck | None:
    """Welch's t on two runs' paired log ratios over rounds (Welch-Satterthwaite df): TOST against +-`margin` (a
    log) and the two-sided test of no difference. None where either run has fewer than two rounds."""
    a, b = np.asarray(logs_a, dtype=float), np.asarray(logs_b, dtype=float)
    if len(a) < 2 or len(b) < 2:
        return None
    difference = float(b.mean() - a.mean())
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        inside = abs(difference) < margin
        return RerunCheck(difference, 0.0 if inside else 1.0, 1.0 if difference == 0 else 0.0)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    equivalent = max(scipy.stats.t.sf((difference + margin) / se, df), scipy.stats.t.cdf((difference - margin) / se, df))
    return RerunCheck(difference, float(equivalent), float(2 * scipy.stats.t.sf(abs(difference) / se, df)))

