"""Did the decisions hold: What to run of this run against an earlier run of the same node, kept on purpose
(`stackbench keep <node>`, docs/what-to-run.md), cell by cell.

Only cells where a speculative variant was a contender in both runs are compared (a cell of no-spec alone, a
ladder or a long prefill, decides nothing). A cell that either run decided holds when the two runs' gains of its
variants do not differ: Welch's t test of the two runs' paired log ratios over rounds, at 95%
(estimators.gains_differ), for each variant either run decided on. A point estimate against the other run's
interval would not do: at three rounds a decision is made mostly when the spread read small by chance, so a
correct interval misses the rerun's point in about a third of decided cells. Where a figure is missing from one
run, the cell is "not compared".
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from stackbench.analysis import decide
from stackbench.analysis.speculative import SPEC_PAIR
from stackbench.results import estimators

# What identifies a decision (analysis.decide's CHOICE_COLUMNS up to the choice)
DECISION = ["node", "stack", "model", "power_cap_w", "workload", "concurrency", "prompt_tokens"]
HELD_COLUMNS = [*DECISION, "earlier", "now", "verdict", "why"]
HELD, DID_NOT_HOLD, NOT_COMPARED = "held", "did not hold", "not compared"


def variant_gains(decide_rows: pd.DataFrame) -> pd.DataFrame:
    """Per cell and speculative variant, its paired log ratios by round over the cell's no-spec (DECISION,
    variant, logs) and their gain (the paired mean's expm1)."""
    cells = decide.launch_rounds(decide_rows)
    reference = cells[cells["spec_method"] == "none"].drop_duplicates(SPEC_PAIR)[SPEC_PAIR + ["rounds"]]
    spec = cells[cells["spec_method"] != "none"].merge(reference.rename(columns={"rounds": "ref_rounds"}), on=SPEC_PAIR)
    logs = [list(estimators.paired_logs_by_round(m, t).values()) for m, t in zip(spec["rounds"], spec["ref_rounds"])]
    # paired_gain's point estimate, from the logs already in hand
    return spec[DECISION + ["variant"]].assign(logs=logs, gain=[math.expm1(np.mean(v)) if len(v) >= 2 else math.nan
                                                                for v in logs])


def _key(record: dict, columns: list[str]) -> tuple:
    """A decision's identity, NaN as None (a CPU node's power cap): NaN never equals itself in a lookup."""
    return tuple(None if pd.isna(record[c]) else record[c] for c in columns)


def _said(choice: dict) -> str:
    if choice["verdict"] == decide.RUN:
        return f"run {choice['run']} {choice['gain']:+.1%} ({choice['gain_low']:+.1%} to {choice['gain_high']:+.1%})"
    return str(choice["verdict"])


def decisions_held(earlier: pd.DataFrame, earlier_gains: pd.DataFrame, now: pd.DataFrame,
                   now_gains: pd.DataFrame) -> pd.DataFrame:
    """One row per cell with a contender in both runs (HELD_COLUMNS): each run's verdict, whether it held, and
    why. `earlier` and `now` are analysis.what_to_run tables, the gains variant_gains of the same runs."""
    before = {_key(r, DECISION): r for r in earlier.to_dict("records")}
    logs_before, logs_now = _lookup(earlier_gains), _lookup(now_gains)
    rows = []
    for choice in now.to_dict("records"):
        old = before.get(_key(choice, DECISION))
        if old is None or not (old.get("candidates", 0) and choice.get("candidates", 0)):
            continue
        # the variants either run decided on, else each run's leading candidate
        asked = {c["run"] for c in (old, choice) if c["verdict"] == decide.RUN} or \
            {c.get("leading") for c in (old, choice) if isinstance(c.get("leading"), str)}
        tests = {v: estimators.gains_differ(logs_before.get(_key(old, DECISION) + (v,), []),
                                            logs_now.get(_key(choice, DECISION) + (v,), [])) for v in asked}
        missing = sorted(v for v, t in tests.items() if t is None)
        differ = sorted(v for v, t in tests.items() if t is not None and t[1])
        if missing or not tests:
            verdict, why = NOT_COMPARED, f"no gain of {', '.join(missing) or 'a contender'} in one of the runs"
        elif differ:
            verdict, why = DID_NOT_HOLD, "; ".join(f"{v}'s gains differ between the runs (Welch p {tests[v][0]:.3f})" for v in differ)
        else:
            verdict = HELD
            why = "" if old["verdict"] == choice["verdict"] else "the verdicts differ, the gains do not: " + "; ".join(
                f"{v} p {tests[v][0]:.2f}" for v in sorted(tests))
        rows.append([*(choice[c] for c in DECISION), _said(old), _said(choice), verdict, why])
    return pd.DataFrame(rows, columns=HELD_COLUMNS)


def _lookup(gains: pd.DataFrame) -> dict:
    return {_key(r, DECISION) + (r["variant"],): r["logs"] for r in gains.to_dict("records")}
