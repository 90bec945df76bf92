"""Did the decisions hold: What to run of this run against an earlier run of the same node, kept on purpose
(`stackbench keep <node>`, docs/what-to-run.md), cell by cell.

A decision is a variant run over no-spec because its gain's interval cleared zero. It holds across a rerun when
the other run's point estimate of the same variant's gain lies inside that interval: the interval said where
the gain is, and a rerun reading it elsewhere means the launch noise is larger than the interval holds. A cell
where both runs kept no-spec, or chose the same variant, held; one whose choice flipped is named with whether
the flip lies inside the intervals (the decision was near its edge: what a rerun may do) or outside (it did not
survive its rerun). The point estimate is the one What to run judges: the paired gain over rounds of launches
where two or more rounds ran, else the ratio of the medians.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stackbench.analysis import decide
from stackbench.analysis.speculative import SPEC_PAIR
from stackbench.results import estimators

# What identifies a decision (analysis.decide's CHOICE_COLUMNS up to the choice)
DECISION = ["node", "stack", "model", "power_cap_w", "workload", "concurrency", "prompt_tokens"]
HELD_COLUMNS = [*DECISION, "earlier", "now", "verdict", "why"]


def variant_gains(decide_rows: pd.DataFrame) -> pd.DataFrame:
    """Per cell and speculative variant, its point gain over the cell's no-spec (DECISION, variant, gain)."""
    cells = decide.cells_by_variant(decide_rows)
    reference = cells[cells["spec_method"] == "none"].drop_duplicates(SPEC_PAIR)[SPEC_PAIR + ["rounds", "value"]]
    spec = cells[cells["spec_method"] != "none"].merge(
        reference.rename(columns={"rounds": "ref_rounds", "value": "ref_value"}), on=SPEC_PAIR)
    gains = []
    for mine, theirs, value, ref in zip(spec["rounds"], spec["ref_rounds"], spec["value"], spec["ref_value"]):
        paired = estimators.paired_gain(mine, theirs) if isinstance(mine, dict) and isinstance(theirs, dict) else None
        gains.append(paired.gain if paired is not None else value / ref - 1 if ref else np.nan)
    return spec[DECISION + ["variant"]].assign(gain=gains)


def _key(record: dict, columns: list[str]) -> tuple:
    """A decision's identity, NaN as None (a CPU node's power cap): NaN never equals itself in a lookup."""
    return tuple(None if pd.isna(record[c]) else record[c] for c in columns)


def _decided(choice: dict) -> bool:
    """The row chose a speculative variant with an interval clear of zero over rounds of launches."""
    return bool(choice["decided"]) and choice["run"] != decide.NO_SPEC and pd.notna(choice["gain_low"]) and choice["gain_low"] > 0


def _said(choice: dict) -> str:
    if _decided(choice):
        return f"{choice['run']} {choice['gain']:+.1%} ({choice['gain_low']:+.1%} to {choice['gain_high']:+.1%})"
    return str(choice["run"]) if choice["decided"] or choice["run"] == decide.NO_SPEC else f"{choice['run']} (not decided)"


def _outside(decider: dict, other_gains: dict, which: str) -> str | None:
    """Where `decider` decided a variant, '' when the other run's point gain of it lies inside the interval,
    the sentence saying where it fell otherwise; None when the row decided nothing."""
    if not _decided(decider):
        return None
    point = other_gains.get(_key(decider, DECISION) + (decider["run"],))
    if point is None or pd.isna(point):
        return f"{which} run decided {decider['run']}, the other has no figure of it"
    if decider["gain_low"] <= point <= decider["gain_high"]:
        return ""
    return (f"{which} run decided {decider['run']} ({decider['gain_low']:+.1%} to {decider['gain_high']:+.1%}); "
            f"the other reads {point:+.1%}, outside that interval")


def decisions_held(earlier: pd.DataFrame, earlier_gains: pd.DataFrame, now: pd.DataFrame,
                   now_gains: pd.DataFrame) -> pd.DataFrame:
    """One row per decision both runs made (HELD_COLUMNS): each run's choice, the verdict (held; flipped, inside
    the intervals; did not hold) and why. `earlier` and `now` are analysis.what_to_run tables, the gains
    variant_gains of the same runs."""
    before = {_key(r, DECISION): r for r in earlier.to_dict("records")}
    gains_before, gains_now = _gain_lookup(earlier_gains), _gain_lookup(now_gains)
    rows = []
    for choice in now.to_dict("records"):
        old = before.get(_key(choice, DECISION))
        if old is None:
            continue
        # Each run's decision judged on the other run's point estimate of the same variant.
        misses = [m for m in (_outside(old, gains_now, "the earlier"), _outside(choice, gains_before, "this")) if m]
        if misses:
            verdict, why = "did not hold", "; ".join(misses)
        elif old["run"] != choice["run"] and (_decided(old) or _decided(choice)):
            verdict, why = "flipped, inside the intervals", ("the decision's interval holds the other run's point "
                                                             "estimate: a choice near its interval's edge, as a rerun may read it")
        elif old["run"] != choice["run"]:
            verdict, why = "flipped, neither decided", "no interval cleared zero in either run"
        else:
            verdict, why = "held", ""
        rows.append([*(choice[c] for c in DECISION), _said(old), _said(choice), verdict, why])
    return pd.DataFrame(rows, columns=HELD_COLUMNS)


def _gain_lookup(gains: pd.DataFrame) -> dict:
    return {_key(r, DECISION) + (r["variant"],): r["gain"] for r in gains.to_dict("records")}
