"""The estimators (results/estimators.py): the median's order-statistic interval, Wilson's interval, the exact
McNemar test, paired gains over rounds, What to run's sequential rule (the error spent per look, one-sided bounds,
Benjamini & Hochberg, the rounds that would settle a gain, the rerun check), and the variance split between
launches and repeats."""

import json
import math
import statistics

import numpy as np
import pytest
import scipy.special
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from stackbench.results import estimators

numbers = st.floats(-1e6, 1e6, allow_nan=False)
rates = st.floats(min_value=1.0, max_value=1000.0, allow_nan=False)
rounds = st.lists(st.tuples(rates, rates), min_size=2, max_size=12)


@settings(max_examples=60, deadline=None)
@given(rounds)
def test_the_interval_holds_the_gain_and_swapping_the_pair_negates_its_log(pairs):
    variant = {k: v for k, (v, _) in enumerate(pairs, 1)}
    reference = {k: r for k, (_, r) in enumerate(pairs, 1)}
    ahead, behind = estimators.paired_gain(variant, reference), estimators.paired_gain(reference, variant)
    assert ahead.low <= ahead.gain <= ahead.high and ahead.rounds == len(pairs)
    assert ahead.mean_log == pytest.approx(-behind.mean_log, abs=1e-9) and ahead.sd_log == pytest.approx(behind.sd_log)


def test_pairs_are_taken_within_a_round_and_a_round_missing_either_is_left_out():
    variant = {1: 110.0, 2: 55.0, 3: 88.0}
    reference = {1: 100.0, 2: 50.0, 4: 70.0}
    gain = estimators.paired_gain(variant, reference)
    assert gain.rounds == 2 and gain.gain == pytest.approx(0.10) and gain.sd_log == pytest.approx(0.0, abs=1e-12)
    assert estimators.paired_gain({1: 110.0}, {1: 100.0}) is None  # one round: no interval


def test_the_paired_interval_matches_a_t_interval_computed_by_hand():
    variant, reference = {1: 120.0, 2: 98.0, 3: 131.0, 4: 104.0}, {1: 100.0, 2: 90.0, 3: 110.0, 4: 101.0}
    logs = np.log([1.2, 98 / 90, 131 / 110, 104 / 101])
    half = 3.182446305284263 * logs.std(ddof=1) / 2  # t(0.975, df 3)
    gain = estimators.paired_gain(variant, reference)
    assert gain.low == pytest.approx(math.expm1(logs.mean() - half)) and gain.high == pytest.approx(math.expm1(logs.mean() + half))


def test_variance_components_find_the_launch_level():
    rng = np.random.default_rng(7)
    launches = [list(np.exp(rng.normal(shift, 0.02, 5)) * 100) for shift in rng.normal(0, 0.15, 40)]
    split = estimators.variance_components(launches)
    assert split.launches == 40 and split.repeats == 5
    assert split.within_launch == pytest.approx(0.02 ** 2, rel=0.3)
    assert split.between_launches == pytest.approx(0.15 ** 2, rel=0.4)
    assert split.between_share > 0.9
    # Repeats are cheap beside a launch, but the variance is between launches: few repeats per launch.
    assert split.repeats_per_launch(launch_cost_s=10, repeat_cost_s=5) == 1
    assert estimators.variance_components([[100.0, 101.0]]) is None


def test_the_median_interval_is_the_medians_order_statistics():
    """Binomial coverage of (x_(k), x_(n+1-k)): n = 5 gives at most 1 - 2/32 = 93.8% (no 95% interval); n = 6
    gives (min, max) at 96.9%; n = 10 gives (x_(2), x_(9)) at 97.9% ((x_(3), x_(8)) covers only 89.1%)."""
    assert estimators.median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None
    assert estimators.median_interval([6.0, 1.0, 5.0, 2.0, 4.0, 3.0]) == (1.0, 6.0)
    assert estimators.median_interval([float(v) for v in range(1, 11)]) == (2.0, 9.0)


@settings(max_examples=50, deadline=None)
@given(st.lists(numbers, max_size=30))
def test_the_median_interval_holds_the_median_and_exists_from_six_values(values):
    interval = estimators.median_interval(values)
    if len(values) < 6:  # (min, max) covers 1 - 2 / 2^n < 95%
        assert interval is None
    else:
        low, high = interval
        assert low in values and high in values and low <= statistics.median(values) <= high


def test_the_wilson_interval_matches_its_closed_form_values():
    low, high = estimators.wilson(30, 50)
    assert (low, high) == (pytest.approx(0.4618, abs=1e-4), pytest.approx(0.7239, abs=1e-4))


@given(st.integers(2, 10), st.integers(0, 30))
def test_the_error_spent_over_every_look_never_passes_alpha(first, extra):
    most = first + extra
    spent = [estimators.spent_alpha(look, first, most) for look in range(1, most + 3)]
    assert all(a >= 0 for a in spent)
    assert sum(spent) == pytest.approx(estimators.ALPHA)
    assert spent[:first - 1] == [0.0] * (first - 1) and spent[most:] == [0.0, 0.0]
    taken = estimators.looks(first, most)  # a round that is no look spends nothing: its share moves to the next
    assert all((a > 0) == (n in taken) for n, a in enumerate(spent, start=1))


@settings(max_examples=50)
@given(st.lists(st.floats(-0.5, 0.5, allow_nan=False), min_size=2, max_size=12), st.floats(1e-4, 0.2))
def test_the_vectorised_t_is_one_sideds(logs, level):
    one = estimators.one_sided(logs, level)
    rounds, mean, se = estimators.t_over_rounds(np.array([logs + [np.nan]]))
    assert rounds[0] == len(logs) and mean[0] == pytest.approx(one.mean_log, abs=1e-12)
    if one.sd_log > 1e-9:
        assert se[0] == pytest.approx(one.sd_log / math.sqrt(len(logs)), rel=1e-9)
        assert estimators.t_sf(mean / se, rounds)[0] == pytest.approx(one.p, rel=1e-9, abs=1e-12)


def test_looks_start_where_a_look_can_decide_and_end_at_the_horizon():
    assert list(estimators.looks(3, 6)) == [4, 5, 6]  # round 3 would need t above 8 (df 2)
    assert list(estimators.looks(3, 4)) == [4]  # round 3 would need t 4.71 (df 2): a look that wastes error
    assert list(estimators.looks(3, 8)) == [5, 6, 7, 8]
    assert list(estimators.looks(3, 16))[0] == 7
    assert list(estimators.looks(2, 2)) == [2] and list(estimators.looks(3, 3)) == [3]  # a single look: all of it
    assert list(estimators.looks(2, 1)) == []


def _exact_two_look_crossing(n: int, c1: float, c2: float, points: int = 2000) -> float:
    """P(t over n rounds < c1, t over n + 1 >= c2) under no gain, derived apart from estimators': given the first n
    rounds' sum of squares q (chi-square, n - 1 df) and scaled mean u (a normal truncated where the first t is
    below c1), the second t is at least c2 on an interval of the last round x (a quadratic in x, with the mean
    non-negative), whose normal probability is closed; q and u on midpoint grids of their quantiles."""
    p = (np.arange(points) + 0.5) / points
    q = scipy.stats.chi2.ppf(p, n - 1)[:, None]
    below = scipy.special.ndtr(c1 * np.sqrt(q / (n - 1)))
    m = scipy.special.ndtri(p[None, :] * below) / math.sqrt(n)
    total, w = n * m, n / (n + 1)
    a, b = w * (1 - c2 * c2), 2 * w * (total + c2 * c2 * m)
    c = w * total * total - c2 * c2 * (q + w * m * m)
    root = np.sqrt(np.maximum(b * b - 4 * a * c, 0))
    low, high = (-b + root) / (2 * a), (-b - root) / (2 * a)
    inside = np.maximum(0, scipy.special.ndtr(high) - scipy.special.ndtr(np.maximum(low, -total)))
    return float((inside * below).mean())


@pytest.mark.parametrize("first,horizon", [(3, 5), (5, 6)])
def test_a_two_look_boundary_spends_its_share_on_the_exact_joint_law(first, horizon):
    """Two looks: the second boundary's error on the exact law of the two t statistics is its share to within
    0.002 points (the docs' tolerance is 0.05); at horizon 5 it is 2.3436 (Monte Carlo on 200,000 draws gave
    2.3237, which spent 5.077% in all)."""
    design = estimators.boundaries(first, horizon)
    assert len(design.looks) == 2
    crossing = _exact_two_look_crossing(design.looks[0], design.critical_t[0], design.critical_t[1])
    assert crossing == pytest.approx(design.spent[1], abs=2e-5)
    if horizon == 5 and first == 3:
        assert design.critical_t[1] == pytest.approx(2.3436, abs=5e-4)


def test_the_stored_boundaries_are_the_ones_the_code_solves():
    """estimators.BOUNDARY_FILE holds each design as _solve_design gives it (rewrite it with `python -m
    stackbench.results.estimators` after changing the rule's constants)."""
    stored = json.loads(estimators.BOUNDARY_FILE.read_text())
    for first, horizon in [(3, 5), (3, 6)]:
        key = estimators._design_key(first, horizon)
        assert key in stored
        assert np.allclose(stored[key], estimators._solve_design(first, horizon), rtol=1e-8, atol=0)


@pytest.mark.parametrize("horizon", [6, 8])
def test_the_exact_boundaries_spend_each_looks_share_on_fresh_sequences(horizon):
    """On 2,000,000 sequences drawn apart from the boundaries' own (another seed), under no gain: P(first crossing
    at each look) is its share of the 5% error to within Monte Carlo error (4 sd of sqrt(p / n)), the whole within
    0.09 points of 5% (the boundaries' 0.05 and this check's own 3 sd); a spread of 3 instead of 1 changes nothing
    (the t is pivotal)."""
    design = estimators.boundaries(3, horizon)
    z = 3 * np.random.default_rng(7).standard_normal((2_000_000, horizon)).astype(np.float32)
    running = np.ones(len(z), dtype=bool)
    for look, c, spent in zip(design.looks, design.critical_t, design.spent):
        rows = z[:, :look]
        t = rows.mean(axis=1) / (rows.std(axis=1, ddof=1) / math.sqrt(look))
        crossed = running & (t >= c)
        assert crossed.mean() == pytest.approx(spent, abs=4 * math.sqrt(spent / len(z)))
        running &= ~crossed
    assert 1 - running.mean() == pytest.approx(estimators.ALPHA, abs=0.0009)
    assert sum(design.spent) == pytest.approx(estimators.ALPHA)
    assert design.nominal[0] == pytest.approx(design.spent[0], rel=1e-3)  # the first look: Student's t itself
    assert all(v > s for v, s in zip(design.nominal[1:], design.spent[1:]))  # later: above its share (correlation)


def test_a_sequential_level_is_the_least_error_whose_boundary_its_p_crosses():
    six = np.array([6, 6, 6])
    nominal = estimators.nominal_level(six, estimators.ALPHA, 3, 6)[0]
    level = estimators.sequential_level(np.array([nominal * 0.999, nominal * 1.001, 1e-9]), six, 3, 6)
    assert level[0] == pytest.approx(estimators.ALPHA, rel=0.01) and level[1] == 1.0
    assert level[2] == pytest.approx(estimators.DESIGN_ERRORS[0])  # below the smallest error solved: that one
    assert estimators.sequential_level(np.array([1e-4]), np.array([3]), 3, 6)[0] == 1.0  # round 3 is no look
    assert np.isinf(estimators.critical_t(np.array([3]), estimators.ALPHA, 3, 6)[0])


def test_one_sided_bounds_match_a_t_computed_by_hand():
    logs = [0.10, 0.20, 0.15, 0.05]
    one = estimators.one_sided(logs, 0.025)
    se = statistics.stdev(logs) / 2
    t = scipy.stats.t.ppf(0.975, 3)
    assert one.low == pytest.approx(math.expm1(0.125 - t * se)) and one.high == pytest.approx(math.expm1(0.125 + t * se))
    assert one.p == pytest.approx(scipy.stats.t.sf(0.125 / se, 3))
    assert estimators.one_sided([0.1], 0.05) is None


def test_benjamini_hochberg_rejects_the_step_up_set():
    # m = 4 at 0.05: thresholds 0.0125, 0.025, 0.0375, 0.05; the third smallest passes, so the three smallest go
    assert estimators.benjamini_hochberg([0.03, 0.001, 0.2, 0.02], 0.05) == [True, True, False, True]
    assert estimators.benjamini_hochberg([0.04, 0.03], 0.05) == [True, True]
    assert estimators.benjamini_hochberg([0.9, 0.6], 0.05) == [False, False]


def test_the_rounds_to_settle_grow_with_the_spread_fall_with_the_gain_and_never_pass_the_horizon():
    base = estimators.rounds_to_settle(math.log(1.3), 0.2, 3, 0.1, 3, 16)
    assert 6 <= base <= 16
    assert estimators.rounds_to_settle(math.log(1.3), 0.3, 3, 0.1, 3, 16) > base
    assert estimators.rounds_to_settle(math.log(1.6), 0.2, 3, 0.1, 3, 16) < base
    # a gain near zero settles as "not worth it": the upper bound must fall under the margin
    assert estimators.rounds_to_settle(0.0, 0.05, 3, 0.1, 3, 16) > 3
    # past the horizon it is not within this budget; the budget that would settle it is named instead
    assert estimators.rounds_to_settle(math.log(1.3), 0.4, 3, 0.1, 3, 6) is None
    assert 6 < estimators.budget_to_settle(math.log(1.3), 0.4, 0.1, 3, 6) <= estimators.MOST_ROUNDS_SAID
    assert estimators.budget_to_settle(math.log(1.05), 5.0, 0.1, 3, 6) is None  # past MOST_ROUNDS_SAID


def test_a_rerun_holds_within_the_margin_differs_where_welch_says_so_or_cannot_tell():
    margin = math.log1p(0.1)
    same = estimators.rerun_check([0.18, 0.19, 0.17], [0.185, 0.175, 0.19], margin)
    assert same.equivalent < 0.05 and same.differ > 0.05
    apart = estimators.rerun_check([0.18, 0.19, 0.17], [0.01, 0.02, 0.0], margin)
    assert apart.differ < 0.05 and apart.equivalent > 0.05 and apart.difference == pytest.approx(-0.17)
    noisy = estimators.rerun_check([0.3, 0.0, 0.15], [0.1, 0.35, 0.2], margin)
    assert noisy.equivalent > 0.05 and noisy.differ > 0.05
    assert estimators.rerun_check([0.1], [0.1, 0.2], margin) is None


def test_the_mad():
    assert estimators.mad([1.0, 2.0, 4.0]) == 1.0 and estimators.mad([3.0]) is None
