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
  gain's one-sided bounds at a look's level), benjamini_hochberg (error control across a stack's cells on a node),
  rounds_to_settle and budget_to_settle (the rounds that would decide at the spread seen, within the horizon
  or past it), beyond_p (a kept verdict re-tested on a rerun's rounds) and rerun_check (two runs' gains
  compared: Welch's test of a difference, an equivalence test).
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
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.special
import scipy.stats

LEVEL = 0.95
MOST_ROUNDS_SAID = 100  # budget_to_settle looks no further
Z95 = 1.959963984540054  # the standard normal's 97.5th percentile
ALPHA = 0.05  # What to run's error: the false-discovery rate of "run" (across a stack's cells) or a false "not worth it" (per cell)
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
# their joint law under "no gain" does not depend on the spread, so one computation serves every node:
# - the first look's boundary is Student's quantile itself;
# - with two looks (always consecutive rounds) the second is solved on the exact joint law, a two-dimensional
#   integral (_two_look_crossing), to 1e-6 in error spent;
# - with three looks or more the later ones are solved on BOUNDARY_DRAWS seeded sequences, to within
#   sqrt(alpha / draws): +-0.016 points in the error a design spends at 5%, the stated tolerance +-0.05 points
#   at three standard errors.
# Each design is computed once: BOUNDARY_FILE ships them (python -m stackbench.results.estimators writes it), a
# design not in it is computed at its first use in a process.
BOUNDARY_DRAWS = 2_000_000
BOUNDARY_SEED = 52
BOUNDARY_FILE = Path(__file__).with_name("boundaries.json")
INTEGRATION_POINTS = 512  # per axis of the two-look integral's midpoint grid (quantiles): 2e-6 in error spent
# Error levels (a fraction of ALPHA) at which every design is solved: a hypothesis's sequential level, the least
# error at which its design's boundary is crossed, is read off them (log-linear between two).
DESIGN_ERRORS = ALPHA * np.geomspace(1e-3, 1, 31)
# A look whose critical t at its share of the error exceeds this decides next to nothing and is skipped, its share
# moving to the next look. Chosen on the rule's Monte Carlo double (tests/unit/analysis/test_decide_sequential.py,
# docs/what-to-run.md): under a horizon of 4, round 3's look needs t 4.71 at df 2; kept (at 5) it wasted error, and
# at a launch CV of 5% with three true +30% cells of ten a node decided 39.5% of its cells, without it (at 4)
# 47.2%; horizons 5, 6 and 8 keep their looks (4,000 simulated nodes each).
MAX_CRITICAL_T = 4.0


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


def _two_look_crossing(n1: int, c1: np.ndarray, c2: np.ndarray, points: int = INTEGRATION_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Under no gain, P(t at n1 rounds < c1, t at n1 + 1 rounds >= c2) per pair (c1, c2), and its derivative in c2.
    Exact up to the quadrature: with S the first n1 rounds' sum of squares about their mean (chi-square, n1 - 1
    df), a = sqrt(n1 + 1) x the n1 + 1 rounds' mean and b = (the first n1's mean x sqrt(n1) - the last round's
    x sqrt(n1)) / sqrt(n1 + 1) (independent standard normals, independent of S; a rotation), the first t is below
    c1 where a < (sqrt(n1 + 1) c1 sqrt(S / (n1 - 1)) - b) / sqrt(n1) = A1, and the second is at least c2 where
    a >= c2 sqrt((S + b^2) / n1) = A2: Phi(A1) - Phi(A2) where positive, integrated over S and b on a midpoint
    grid of their quantiles."""
    p = (np.arange(points) + 0.5) / points
    s = scipy.stats.chi2.ppf(p, n1 - 1)[:, None]
    b = scipy.stats.norm.ppf(p)[None, :]
    scale = np.sqrt((s + b * b) / n1)
    c1, c2 = np.asarray(c1, dtype=float), np.asarray(c2, dtype=float)
    crossing, slope = np.zeros(c1.shape), np.zeros(c1.shape)
    for i, (one, two) in enumerate(zip(c1, c2)):
        a1 = (math.sqrt(n1 + 1) * one * np.sqrt(s / (n1 - 1)) - b) / math.sqrt(n1)
        a2 = two * scale
        inside = a1 > a2
        crossing[i] = np.where(inside, scipy.special.ndtr(a1) - scipy.special.ndtr(a2), 0.0).mean()
        slope[i] = -np.where(inside, np.exp(-a2 * a2 / 2) / math.sqrt(2 * math.pi) * scale, 0.0).mean()
    return crossing, slope


def _two_look_boundary(n1: int, c1: np.ndarray, spent: np.ndarray) -> np.ndarray:
    """The second look's boundaries c2 with P(t at n1 < c1, t at n1 + 1 >= c2) = spent, per pair: Newton's method
    kept inside a bracket, from 0 (where far more crosses) to Student's quantile at the share (where less does:
    the first look's survivors cross less), bisecting where a step would leave it."""
    low, high = np.zeros(len(spent)), scipy.stats.t.isf(spent, n1)
    c2 = high.copy()
    for _ in range(60):
        crossing, slope = _two_look_crossing(n1, c1, c2)
        if np.all(np.abs(crossing - spent) <= 1e-6 * spent):
            break
        low, high = np.where(crossing > spent, c2, low), np.where(crossing > spent, high, c2)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = c2 - (crossing - spent) / slope
        c2 = np.where(np.isfinite(step) & (step > low) & (step < high), step, (low + high) / 2)
    return c2


def _monte_carlo_boundaries(taken: range, horizon: int, spent: np.ndarray, draws: int) -> np.ndarray:
    """Per error level (rows of `spent`) and look (columns) the boundary, the first look's Student's quantile,
    the later ones solved on `draws` seeded sequences of iid normal rounds: the crossing-th largest t among the
    sequences still running (inf where too little error is left to cross), among the largest 2 ALPHA x draws, as
    at most ALPHA x draws stopped."""
    rng = np.random.default_rng(BOUNDARY_SEED)
    columns = np.array(taken) - 1
    t = np.empty((draws, len(taken)), dtype=np.float32)
    n = np.arange(1, horizon + 1)
    chunk = 250_000
    for start in range(0, draws, chunk):
        z = rng.standard_normal((min(chunk, draws - start), horizon))
        mean = np.cumsum(z, axis=1) / n
        with np.errstate(divide="ignore", invalid="ignore"):
            whole = mean / np.sqrt((np.cumsum(z * z, axis=1) - n * mean ** 2) / (n - 1) / n)
        t[start:start + len(z)] = whole[:, columns]
    alive = np.ones((len(spent), draws), dtype=bool)
    c = np.zeros(spent.shape)
    tail = int(2 * ALPHA * draws)
    for j, look in enumerate(taken):
        crossing = np.round(spent[:, j] * draws)
        if j == 0:  # Student's quantile itself, free of Monte Carlo error
            c[:, j] = scipy.stats.t.isf(spent[:, j], look - 1)
        else:
            top = np.argpartition(-t[:, j], tail)[:tail]
            order = top[np.argsort(-t[top, j])]
            ranked = t[order, j]
            alive_ranked = np.cumsum(alive[:, order], axis=1, dtype=np.int32)
            c[:, j] = [ranked[int(np.searchsorted(row, k))] if k >= 1 else np.inf for row, k in zip(alive_ranked, crossing)]
        alive &= t[None, :, j] < c[:, j, None]
    return c


def _solve_design(first: int, horizon: int, draws: int = BOUNDARY_DRAWS) -> np.ndarray:
    """Per DESIGN_ERRORS level (rows) and look (columns) the one-sided nominal level of the boundary,
    P(t_{n-1} > c), the boundaries c such that under no gain P(crossing first at look k) is the increment
    spent_alpha gives at that error."""
    taken = looks(first, horizon)
    spent = np.array([[spent_alpha(look, first, horizon, error) for look in taken] for error in DESIGN_ERRORS])
    if len(taken) <= 1:  # one look: Student's t itself
        return spent
    if len(taken) == 2:
        c1 = scipy.stats.t.isf(spent[:, 0], taken[0] - 1)
        c = np.column_stack([c1, _two_look_boundary(taken[0], c1, spent[:, 1])])
    else:
        c = _monte_carlo_boundaries(taken, horizon, spent, draws)
    return np.maximum.accumulate(scipy.stats.t.sf(c, np.array(taken) - 1), axis=0)


def _design_key(first: int, horizon: int) -> str:
    """A design's name in BOUNDARY_FILE: its looks (designs from different first rounds with the same looks are
    one) and everything else its boundaries depend on (a change of any makes the stored one stale)."""
    taken = looks(first, horizon)
    return (f"looks {taken[0]}-{horizon} alpha {ALPHA:g} rho {SPENDING_RHO:g} max_t {MAX_CRITICAL_T:g} "
            f"errors {len(DESIGN_ERRORS)} draws {BOUNDARY_DRAWS} seed {BOUNDARY_SEED}")


@functools.cache
def _stored() -> dict:
    return json.loads(BOUNDARY_FILE.read_text()) if BOUNDARY_FILE.exists() else {}


def _design(first: int, horizon: int) -> tuple[range, np.ndarray]:
    """(looks, nominal): _solve_design's levels, read from BOUNDARY_FILE where it holds the design."""
    taken = looks(first, horizon)
    return taken, _looks_design(taken[0], horizon) if taken else np.zeros((len(DESIGN_ERRORS), 0))


@functools.lru_cache(maxsize=64)
def _looks_design(first_look: int, horizon: int) -> np.ndarray:
    stored = _stored().get(_design_key(first_look, horizon))
    return np.array(stored) if stored is not None else _solve_design(first_look, horizon)


def write_boundaries(path: Path = BOUNDARY_FILE, most: int = 16) -> int:
    """Solve every design with two looks or more up to `most` rounds into `path`; the count."""
    designs = {_design_key(first, horizon): [[float(f"{v:.10g}") for v in row] for row in _solve_design(first, horizon)]
               for horizon in range(2, most + 1) for first in range(2, horizon + 1)
               if len(looks(first, horizon)) >= 2 and looks(first, horizon)[0] == first}
    path.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(designs.items())) + "\n}\n")
    return len(designs)


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


def critical_t(rounds, error: float, first: int, horizon: int, look=None) -> np.ndarray:
    """The exact boundary's critical t at `rounds` rounds (inf where that is no look): nominal_level's t. At `look`
    where given (a candidate with a round left out has fewer rounds than its look): that look's nominal level,
    Student's t at the rounds it has."""
    rounds = np.asarray(rounds)
    level = nominal_level(rounds if look is None else np.broadcast_to(look, rounds.shape), error, first, horizon)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((level > 0) & (rounds >= 2), scipy.stats.t.isf(level, np.maximum(rounds - 1, 1)), np.inf)


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


def _settles(mean_log: float, sd_log: float, n: np.ndarray, t_run: np.ndarray, t_not: np.ndarray, margin: float) -> np.ndarray:
    """Whether a look at n rounds settles a gain of mean and spread as seen: its lower bound at critical t `t_run`
    clears zero (a gain over half the margin) or its upper bound at `t_not` falls below the margin (the rest)."""
    if mean_log > math.log1p(margin) / 2:
        return mean_log - t_run * sd_log / np.sqrt(n) > 0
    return mean_log + t_not * sd_log / np.sqrt(n) < math.log1p(margin)


def rounds_to_settle(mean_log: float, sd_log: float, rounds: int, margin: float, first: int, most: int,
                     error: float = ALPHA) -> int | None:
    """The round of the sequence from `first` to the horizon `most` whose look would settle the gain, were its
    mean and spread what `rounds` rounds show: the first look past `rounds` whose exact boundary settles it, a
    "run" at `error` (the error the step-up across the node's cells would need of it: the cell's printed level),
    a "not worth it" at ALPHA (tested per cell). With the mean and spread as seen, the bound then lands exactly on
    its boundary: a look there settles it about half the time (50% power). None where no look up to the horizon
    would: a budget fixed in advance is never stretched (budget_to_settle says what would), or the spread is
    unknown."""
    if not math.isfinite(sd_log) or not math.isfinite(mean_log):
        return None
    n = np.array([k for k in looks(first, most) if k > rounds])
    if not len(n):
        return None
    settles = _settles(mean_log, sd_log, n, critical_t(n, error, first, most), critical_t(n, ALPHA, first, most), margin)
    return int(n[np.argmax(settles)]) if settles.any() else None


def budget_to_settle(mean_log: float, sd_log: float, margin: float, first: int, most: int,
                     error: float = ALPHA) -> int | None:
    """The horizon in rounds whose last look would settle a gain of mean and spread as seen, where the horizon
    `most` would not: the fewest rounds n past it whose Student's t at the nominal level of `most`'s last look
    (at `error` for a "run", ALPHA for a "not worth it", as rounds_to_settle; 50% power) settles it (a later
    horizon's last look spends about that level). None up to MOST_ROUNDS_SAID."""
    if not math.isfinite(sd_log) or not math.isfinite(mean_log) or not looks(first, most):
        return None
    run, whole = (float(nominal_level(np.array([most]), e, first, most)[0]) for e in (error, ALPHA))
    n = np.arange(most + 1, MOST_ROUNDS_SAID + 1)
    if not len(n) or run <= 0 or whole <= 0:
        return None
    settles = _settles(mean_log, sd_log, n, scipy.stats.t.isf(run, n - 1), scipy.stats.t.isf(whole, n - 1), margin)
    return int(n[np.argmax(settles)]) if settles.any() else None


def paired_sd_of_launch_cv(cv: float) -> float:
    """The spread of a round's paired log ratio where each launch's speed varies by `cv` between launches, the
    two launches independent: sqrt(2) x log(1 + cv)."""
    return math.sqrt(2) * math.log1p(cv)


def resolvable_gain(sd_log: float, look: int, first: int, most: int) -> float:
    """The gain a look at round `look` resolves, were the paired log ratios' spread `sd_log`: the one-sided bound's
    distance from the mean, exp(t x sd / sqrt(n)) - 1, at that look's exact boundary in the sequence from `first`
    to `most` (critical_t) at the whole 5%: a true gain this far above zero reads "run", one this far under the
    margin "not worth it", half the time (50% power), per cell before the correction across a node's cells (which
    asks more of a "run" where fewer cells gain); inf at a round that is no look."""
    if look < 2 or look not in looks(first, most):
        return math.inf
    return math.expm1(float(critical_t(np.array([look]), ALPHA, first, most)[0]) * sd_log / math.sqrt(look))


def rounds_to_resolve(sd_log: float, margin: float) -> int | None:
    """The fewest rounds whose single look (all the error spent at once: the cheapest plan) resolves the margin at
    spread `sd_log`: resolvable_gain under `margin`. None where no plan up to MOST_ROUNDS_SAID does."""
    return next((n for n in range(2, MOST_ROUNDS_SAID + 1) if resolvable_gain(sd_log, n, n, n) < margin), None)


def beyond_p(logs: Sequence[float], bound: float, above: bool = True) -> float:
    """Student's one-sided p-value over rounds that the mean paired log ratio lies above `bound` (below it where not
    `above`): the rule's own test of a verdict ("run": above 0; "not worth it": below log1p(min_gain)), on rounds
    taken as they come. 1 below two rounds; 0 or 1 where every round agrees."""
    logs = np.asarray(logs, dtype=float)
    if len(logs) < 2:
        return 1.0
    distance = (logs.mean() - bound) * (1 if above else -1)
    se = float(logs.std(ddof=1)) / math.sqrt(len(logs))
    if se == 0:
        return 0.0 if distance > 0 else 1.0
    return float(scipy.stats.t.sf(distance / se, len(logs) - 1))


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



if __name__ == "__main__":
    print(f"{write_boundaries()} designs -> {BOUNDARY_FILE}")
