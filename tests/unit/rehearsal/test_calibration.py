"""The stand-in's pace fitted to the seed posts (rehearsal/calibration.py, issue 47): on the rtx5090 node's own
rooflines, the fitted step share and acceptance give back the posts' single-stream rates; the post-vs-model
table shows each post figure beside the stand-in's (hand-built rows, test data)."""

import pandas as pd
import pytest

from stackbench.rehearsal import budget, calibration, standin
from stackbench.report.budget import calibration_table

# The rtx5090 node's rooflines, as launcher.engine_facts computes them (1792 GB/s over each checkpoint's bytes).
ROOFLINE = {"SGLang": 124.93, "vLLM": 117.99}


def accept_len(p: float, drafts: int) -> float:
    return sum(p ** k for k in range(drafts + 1))


@pytest.mark.parametrize(("engine", "drafts", "post"), [("SGLang", 3, 86.1), ("vLLM", 2, 102.0), ("vLLM", 3, 100.0)])
def test_the_fitted_pace_gives_back_the_posts_rate_within_their_spread(engine, drafts, post):
    share, p = calibration.fitted(engine, "mtp")
    pace = standin.Pace({"roofline_decode_tps": ROOFLINE[engine], "time_scale": 1, "step_share": share})
    modeled = accept_len(p, drafts) / pace.interval_s()
    assert modeled == pytest.approx(post, rel=0.1)


def test_an_unfitted_launch_keeps_the_stated_shape_and_the_budgets_high_end_stays_slower():
    assert calibration.fitted("llama.cpp", "mtp") is None and calibration.fitted("vLLM", "none") is None
    pace = standin.Pace({"roofline_decode_tps": 100.0, "time_scale": 1})
    assert pace.decode_tps == pytest.approx(standin.ROOFLINE_SHARE * 100.0)
    assert budget.FITTED_MARGIN > 1 and standin.ROOFLINE_SHARE / budget.HIGH_SHARE > 1


def test_the_post_vs_model_table_says_how_far_off_each_cell_is():
    rows = pd.DataFrame([
        {"engine": "vLLM", "spec_method": "mtp", "spec_tokens": 2, "workload": "seed-004-short", "concurrency": 1,
         "metric": "decode_tps", "value": 112.2},
        {"engine": "vLLM", "spec_method": "mtp", "spec_tokens": 2, "workload": "seed-004-short", "concurrency": 1,
         "metric": "tpot_ms", "value": 9.9}])
    table = calibration_table(rows)
    shown = {row[3]: row for row in table.rows}
    assert shown["decode_tps"][4:] == ["102 tok/s", "112 tok/s", "+10%"]
    assert shown["tpot_ms"][4:] == ["9.9 ms", "9.9 ms", "+0%"]
    assert calibration_table(rows.iloc[0:0]) is None
