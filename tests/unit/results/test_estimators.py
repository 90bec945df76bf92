"""The launch-level estimators (results/estimators.py): paired gains over rounds, the choice correction, the
launches that would decide, and the variance split between launches and repeats."""

import math

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from stackbench.results import estimators

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
