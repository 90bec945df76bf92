"""Repeats to a stated precision and the over-saturated sweep, measured through the run loop against the
synthetic engine (a TEST DOUBLE whose timing is known in advance): a noisy engine gets more repeats than a steady
one, both rows say how many; a saturating engine's concurrency sweep stops with the reason."""

import pytest
from helpers import PRECISE, external_spec, serving

from stackbench.measure import sequencer
from stackbench.rehearsal.standin import Timing
from stackbench.results import store

STEADY = Timing(ttft_s=0.1, interval_s=0.03, tokens_per_chunk=3, reasoning_tokens=0, content_tokens=30)
NOISY = Timing(ttft_s=0.1, interval_s=0.03, tokens_per_chunk=3, reasoning_tokens=0, content_tokens=30, jitter=0.5)


def decode_row(tmp_path, timing):
    with serving(timing) as url:
        spec = external_spec(tmp_path, url, {"prompts": ["Say hi."], "output_tokens": 31}, repeats=3, measure=PRECISE)
        results = store.read_results(sequencer.LaunchRun(spec, tmp_path / "run").run())
    return results[(results["workload"] == "code") & (results["metric"] == "decode_tps")].iloc[0]


@pytest.mark.integration
def test_a_noisy_engine_gets_more_repeats_than_a_steady_one_and_the_rows_say_how_many(tmp_path):
    steady, noisy = decode_row(tmp_path / "steady", STEADY), decode_row(tmp_path / "noisy", NOISY)
    # The median's order-statistic interval exists from 6 repeats, so even the steady engine runs 6.
    assert steady["n"] == 6 and "repeated 6 times: 95% interval of the median of decode_tps within +-5%" in steady["note"]
    assert noisy["n"] == 8 and "repeated 8 times (measure.max_repeats)" in noisy["note"] and "not reached" in noisy["note"]
    assert steady["ci_low"] is not None and steady["ci_high"] - steady["ci_low"] <= 0.1 * steady["value"]


@pytest.mark.integration
def test_a_saturating_engines_sweep_stops_with_the_reason(tmp_path):
    # One slot: a second stream only queues, so the aggregate stays flat while TTFT climbs.
    workload = {"prompts": ["Say hi."], "output_tokens": 31, "concurrency": [1, 2, 3, 4]}
    with serving(Timing(ttft_s=0.1, interval_s=0.03, tokens_per_chunk=3, reasoning_tokens=0, content_tokens=30, capacity=1)) as url:
        spec = external_spec(tmp_path, url, workload, repeats=1, measure={"stop_saturated": True})
        results = store.read_results(sequencer.LaunchRun(spec, tmp_path / "run").run())
    cells = results[results["workload"] == "code"]
    status = cells.groupby("concurrency")["status"].agg(lambda s: sorted(set(s)))
    assert status[1] == ["ok"] and status[2] == ["ok"] and status[3] == ["skipped"] and status[4] == ["skipped"]
    skipped = cells[(cells["concurrency"] == 4)].iloc[0]
    assert skipped["metric"] == "cell_status" and skipped["reason"].startswith("over-saturated at c=2: aggregate_tps")
    assert "ttft_s rose" in skipped["reason"] and "measure.stop_saturated" in skipped["reason"]
