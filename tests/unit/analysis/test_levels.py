"""The variance levels of a speculative gain (analysis/levels.py) on rates drawn here (TEST DATA: no engine ran)."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_analysis import frame, measured

from stackbench.analysis import levels


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 6), st.integers(2, 8), st.integers(0, 2**31))
def test_the_levels_are_never_negative_and_a_constant_gain_has_none(texts, rounds, seed):
    rng = np.random.default_rng(seed)
    found = levels.split(rng.normal(0, 0.1, (texts, rounds)))
    assert found is not None and min(found) >= 0
    assert levels.split(np.full((texts, rounds), 0.2)) == pytest.approx((0.0, 0.0, 0.0), abs=1e-12)


def test_a_gain_that_follows_its_text_reads_as_the_text_level_not_the_launch_level():
    rng = np.random.default_rng(1)
    by_text = rng.normal(0, 0.3, 16)  # each text its own gain (one loops, one does not)
    paired = by_text[:, None] + rng.normal(0, 0.03, (1, 12)) + rng.normal(0, 0.01, (16, 12))
    text, launch, within = levels.split(paired)
    assert math.sqrt(text) > 0.15 and math.sqrt(launch) < 0.06 and math.sqrt(within) < 0.02


def test_gain_levels_pairs_each_repeat_with_no_specs_same_text_in_the_same_round():
    rows = []
    for k in (1, 2, 3, 4):
        launch = {"nospec": 1 + 0.02 * (k % 2), "ngram-n8": 1 - 0.02 * (k % 2)}
        for variant, per_text in (("nospec", [30.0, 30.0]), ("ngram-n8", [60.0, 30.0])):  # text 0 loops: drafted free
            values = [v * launch[variant] for v in per_text]
            rows.append(measured(ref=f"n/{variant}--r{k}", node="n", variant=variant, replicate=k,
                                 spec_method="none" if variant == "nospec" else "ngram",
                                 spec_tokens=None if variant == "nospec" else 8, workload="code",
                                 value=float(np.median(values)), mad=0.0, repeat_values=values))
    table = levels.gain_levels(frame(rows))
    row = table.set_index("variant").loc["ngram-n8"]
    assert row["texts"] == 2 and row["rounds"] == 4
    assert row["text_sd"] > 0.3 and row["launch_sd"] > 0.02 and row["within_sd"] < 1e-9
    assert row["texts_needed"] > 2  # new texts each round would need more than two texts a cell
    assert isinstance(table, pd.DataFrame)


sds = st.floats(0.001, 0.3)
seconds = st.floats(0.1, 600)


@settings(max_examples=200, deadline=None)
@given(sds, sds, sds, seconds, seconds)
def test_the_allocation_minimizes_the_cost_of_an_error_and_moves_the_way_its_inputs_do(text, launch, within, launch_s, text_s):
    found = levels.allocate(levels.Components(text, launch, within), launch_s, text_s)
    assert 1 <= found.texts <= 64
    exact = math.sqrt(launch_s / text_s * (text ** 2 + within ** 2) / launch ** 2)
    # variance x cost of a round at n texts: least at the exact optimum, so no nearby n does better
    product = (lambda n: (launch ** 2 + (text ** 2 + within ** 2) / n) * (launch_s + n * text_s))
    assert product(exact) <= min(product(exact * 1.2), product(exact / 1.2)) * (1 + 1e-9)
    assert found.texts == min(max(math.ceil(exact - 1e-9), 1), 64)
    assert found.round_sd == pytest.approx(math.sqrt(launch ** 2 + (text ** 2 + within ** 2) / found.texts))
    dearer_launch = levels.allocate(levels.Components(text, launch, within), launch_s * 2, text_s)
    dearer_text = levels.allocate(levels.Components(text, launch, within), launch_s, text_s * 2)
    noisier_launch = levels.allocate(levels.Components(text, launch * 2, within), launch_s, text_s)
    kept = levels.allocate(levels.Components(text, launch, within), launch_s, text_s, "same")
    assert dearer_launch.texts >= found.texts >= dearer_text.texts
    assert noisier_launch.texts <= found.texts and kept.texts <= found.texts


@settings(max_examples=100, deadline=None)
@given(sds, sds, sds, seconds, seconds, st.floats(0, 36000))
def test_the_rounds_are_as_many_as_the_budget_affords_at_those_texts(text, launch, within, launch_s, text_s, budget_s):
    found = levels.allocate(levels.Components(text, launch, within), launch_s, text_s, budget_s=budget_s)
    round_s = launch_s + found.texts * text_s
    assert found.rounds * round_s <= budget_s * (1 + 1e-9) and (found.rounds + 1) * round_s > budget_s * (1 - 1e-9)


def test_the_default_machine_levels_ask_a_few_texts_a_round_and_say_why():
    found = levels.allocate(levels.MEASURED_HERE, launch_s=25, text_s=20, budget_s=13 * 60)
    assert 2 <= found.texts <= 4 and "Kalibera & Jones" in found.why and f"{found.rounds} round(s)" in found.why
    # the text level fixed (same): the within level alone is left to average over, so fewer texts pay
    assert levels.allocate(levels.MEASURED_HERE, launch_s=25, text_s=20, texts_across_rounds="same").texts == 1
    with pytest.raises(ValueError, match="text_s"):
        levels.allocate(levels.MEASURED_HERE, launch_s=25, text_s=0)


def test_the_plan_states_the_allocation_at_cost_ratios_and_the_rehearsal_at_its_costs():
    planned = levels.allocation_said(2, "same")
    ratios = [levels.allocate(levels.MEASURED_HERE, r, 1.0).texts for r in levels.COST_RATIOS]
    assert all(f"{n} at a launch {r}x a text's cost" in planned for n, r in zip(ratios, levels.COST_RATIOS))
    assert planned.endswith("Texts a cell a round at c1 now: 2, same across rounds.")
    priced = levels.allocation_said(2, None, 40.0, 30.0)
    assert levels.allocate(levels.MEASURED_HERE, 40.0, 30.0).why in priced and priced.endswith("at c1 now: 2.")
