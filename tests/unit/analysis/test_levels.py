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
