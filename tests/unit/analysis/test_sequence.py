"""The sequence of rounds (analysis/sequence.py): the horizon fixed at the first look from the budget, and a later
round launched for the open cells only, up to that horizon (TEST DATA: verdict tables built here)."""

import dataclasses

import pandas as pd

from stackbench.analysis import decide, sequence
from stackbench.config.model import Decision

RULE = Decision(first=3, most=6, min_gain=0.1, budget_minutes=13)


def _choices(verdicts: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame([{"stack": "llamacpp", "workload": w, "concurrency": 1, "power_cap_w": float("nan"), "verdict": v,
                          "candidates": 2, "contenders": "ngram-n16, ngram-n8", "ref_variant": "nospec"}
                         for w, v in verdicts.items()])


def test_the_horizon_is_what_the_budget_affords_and_never_past_most_launches():
    fixed, why = sequence.horizon(RULE, 3, spent_s=8.3 * 60, round_s=2.5 * 60)
    assert fixed.most == 4 and "affords 1 more round(s) at 2.5 min a full round" in why
    assert sequence.horizon(RULE, 3, spent_s=60, round_s=60)[0].most == 6  # most_launches caps it
    assert sequence.horizon(RULE, 3, spent_s=20 * 60, round_s=60)[0].most == 3  # spent: the first look is the last
    unbudgeted = Decision(first=3, most=6, min_gain=0.1, budget_minutes=None)
    assert sequence.horizon(unbudgeted, 3, 0, 60) == (unbudgeted, "horizon: round 6 (decide.most_launches)")


def test_a_round_the_horizon_promised_is_launched_for_the_open_cells_only():
    choices = _choices({"code": decide.UNDECIDED, "prose": decide.NOT_WORTH_IT})
    fixed = Decision(first=3, most=5, min_gain=0.1, budget_minutes=13)
    # 12.9 minutes spent: the budget's next round would pass 13, yet round 5 is the horizon fixed before the looks
    asked, why = sequence.next_round(choices, 4, fixed, spent_s=12.9 * 60, launch_s=50)
    assert asked == [("llamacpp", "ngram-n16"), ("llamacpp", "ngram-n8"), ("llamacpp", "nospec")]
    assert why.startswith("round 5: 3 launches")
    assert sequence.open_cells(choices) == [["llamacpp", "code", 1, None]]
    assert sequence.next_round(choices, 5, fixed, 0, 50) == ([], "the horizon's 5 rounds are spent; 3 variant(s) still open")
    assert sequence.next_round(_choices({"code": decide.RUN}), 4, fixed, 0, 50)[0] == []


def test_a_stacks_horizon_once_fixed_is_kept_when_another_stack_joins(tmp_path):
    fixed_file = tmp_path / "rounds" / sequence.HORIZONS_FILE
    llamacpp = _choices({"code": decide.UNDECIDED})
    rule, why = sequence.fix_horizons(RULE, llamacpp, 3, spent_s=6 * 60, launch_s=30, fixed_file=fixed_file)
    assert rule.horizons == {"llamacpp": 6} and rule.of_stack("llamacpp").most == 6
    # vLLM joins after llama.cpp's rounds and its own first three spent the budget: its horizon is its first look,
    # llama.cpp keeps the six rounds its looks spent their error over
    joined = pd.concat([llamacpp, _choices({"code": decide.UNDECIDED}).assign(stack="vllm")])
    rule, why = sequence.fix_horizons(RULE, joined, 3, spent_s=14 * 60, launch_s=60, fixed_file=fixed_file)
    assert rule.horizons == {"llamacpp": 6, "vllm": 3}
    assert why.startswith("horizon: round 3, fixed before the first look") and why.endswith("(vllm); llamacpp keeps round 6, fixed at its first look")
    asked, _ = sequence.next_round(joined, 3, rule, 14 * 60, 60)
    assert {stack for stack, _ in asked} == {"llamacpp"}
    assert sequence.next_round(joined, 6, rule, 20 * 60, 60)[0] == []
    # another budget is another rule: every stack's horizon is fixed afresh under it
    wider = dataclasses.replace(RULE, budget_minutes=60)
    assert sequence.fix_horizons(wider, joined, 3, 14 * 60, 60, fixed_file)[0].horizons == {"llamacpp": 6, "vllm": 6}
