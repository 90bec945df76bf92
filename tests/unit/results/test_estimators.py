"""The estimators (results/estimators.py): the median's order-statistic interval, Wilson's interval, the exact
McNemar test, Welch's gain over repeats, paired gains over rounds, the choice correction, the launches and
repeats that would decide, and the variance split between launches and repeats."""

import math
import statistics

import numpy as np
import pytest
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


def test_the_choice_correction_widens_with_the_candidates():
    assert estimators.corrected_level(1) == pytest.approx(0.95)
    assert estimators.corrected_level(2) == pytest.approx(0.975)
    assert estimators.corrected_level(4) == pytest.approx(0.9875)


def test_launches_to_decide_grows_with_the_spread_and_shrinks_with_the_gain():
    base = estimators.launches_to_decide(0.2, math.log(1.4))
    assert base == estimators.launches_to_decide(0.2, -math.log(1.4))
    assert estimators.launches_to_decide(0.4, math.log(1.4)) > base > estimators.launches_to_decide(0.2, math.log(2.0))
    assert estimators.launches_to_decide(0.2, 0.0) is None
    assert estimators.launches_to_decide(5.0, 0.001) is None  # past MOST_LAUNCHES_SAID


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


def test_launch_noise_is_zero_for_identical_launches_and_none_for_one():
    assert estimators.launch_noise({1: 80.0, 2: 80.0, 3: 80.0}) == pytest.approx(0.0)
    assert estimators.launch_noise({1: 80.0}) is None
    # Three launches: t(0.975, 2 df) x sqrt(2) x the standard deviation of their logs / sqrt(3), as a share.
    logs = np.log([70.0, 80.0, 90.0])
    half = scipy.stats.t.ppf(0.975, 2) * math.sqrt(2) * logs.std(ddof=1) / math.sqrt(3)
    assert estimators.launch_noise({1: 70.0, 2: 80.0, 3: 90.0}) == pytest.approx(math.expm1(half)) == pytest.approx(0.555, abs=1e-3)


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


def test_the_welch_gain_is_welchs_on_log_rates_and_covers_a_known_difference():
    """A known truth: rates drawn from lognormals 10% apart (sd 0.05 in log), fixed seed. Welch's interval on
    the log rates is exact for normal logs: over 400 draws of 5 repeats each it covers the true +10% in 95% of
    them (within sampling error), and clears zero in about 3 of 4 (its power at this spread: difference 0.095,
    half-width about 0.073); the point is the geometric-mean ratio."""
    rng = np.random.default_rng(35)
    covered = cleared = 0
    for _ in range(400):
        variant, reference = np.exp(rng.normal(np.log(110), 0.05, 5)), np.exp(rng.normal(np.log(100), 0.05, 5))
        gain, low, high = estimators.welch_gain(variant, reference)
        assert gain == pytest.approx(np.exp(np.log(variant).mean() - np.log(reference).mean()) - 1)
        covered += low <= 0.1 <= high
        cleared += low > 0
    assert 0.92 <= covered / 400 <= 0.98 and 0.65 < cleared / 400 < 0.9
    assert estimators.welch_gain([100.0], [90.0, 91.0]) is None  # one repeat: no interval
    # Repeats the same: no spread, the interval is the point and any difference decides at two repeats.
    assert estimators.welch_gain([110.0, 110.0], [100.0, 100.0]) == pytest.approx((0.1, 0.1, 0.1))
    assert estimators.repeats_to_decide([110.0, 110.0], [100.0, 100.0]) == 2
