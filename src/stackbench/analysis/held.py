"""Did the decisions hold: What to run of this run against an earlier run of the same node, kept on purpose
(`stackbench keep <node>`, docs/what-to-run.md), cell by cell.

Only cells where a speculative variant was a contender in both runs are compared (a cell of no-spec alone, a
ladder or a long prefill, decides nothing). For each variant either run decided on (else each run's leading
candidate), the difference of the two runs' mean paired log ratios goes through an equivalence test
(estimators.rerun_check, Welch's t): the cell "held" where every such difference is shown within +-d (both of
Schuirmann's one-sided tests reject), d = log1p of the node's `decide.min_gain` (the smallest gain worth
switching for: a smaller difference would change no choice); it "differs" where Welch's two-sided test finds
one; else one "cannot tell". Benjamini & Hochberg's step-up holds each family at 5% across the compared cells'
tests (a false "differs" anywhere in at most 5% of reruns where nothing changed; the cells share each launch's
speed factor, the positive dependence it needs): "no difference found" over ten or twenty uncorrected tests
would call about one cell per rerun falsely. A point
estimate against the other run's interval would not do either: at three rounds a decision is made mostly when
the spread read small by chance. Where a figure is missing from one run, the cell is "not compared".
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from stackbench.analysis import decide
from stackbench.analysis.speculative import SPEC_PAIR
from stackbench.config import default_decision
from stackbench.results import estimators

# What identifies a decision (analysis.decide's CHOICE_COLUMNS up to the choice)
DECISION = ["node", "stack", "model", "power_cap_w", "workload", "concurrency", "prompt_tokens"]
HELD_COLUMNS = [*DECISION, "earlier", "now", "verdict", "why"]
HELD, DIFFERS, CANNOT_TELL, NOT_COMPARED = "held", "differs", "cannot tell", "not compared"
VERDICTS = (HELD, DIFFERS, CANNOT_TELL, NOT_COMPARED)


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
        return (f"run {choice['run']} {choice['gain']:+.1%} ({choice['gain_low']:+.1%} to {choice['gain_high']:+.1%}, "
                f"one-sided bounds at {choice['level']:.2%})")
    return str(choice["verdict"])


def decisions_held(earlier: pd.DataFrame, earlier_gains: pd.DataFrame, now: pd.DataFrame,
                   now_gains: pd.DataFrame, min_gain: float | None = None) -> pd.DataFrame:
    """One row per cell with a contender in both runs (HELD_COLUMNS): each run's verdict, whether it held, and
    why. `earlier` and `now` are analysis.what_to_run tables, the gains variant_gains of the same runs;
    `min_gain` the node's `decide.min_gain` (None: the schema's)."""
    margin = math.log1p(min_gain if min_gain is not None else default_decision().min_gain)
    before = {_key(r, DECISION): r for r in earlier.to_dict("records")}
    logs_before, logs_now = _lookup(earlier_gains), _lookup(now_gains)
    compared = []
    for choice in now.to_dict("records"):
        old = before.get(_key(choice, DECISION))
        if old is None or not (old.get("candidates", 0) and choice.get("candidates", 0)):
            continue
        # the variants either run decided on, else each run's leading candidate
        asked = {c["run"] for c in (old, choice) if c["verdict"] == decide.RUN} or \
            {c.get("leading") for c in (old, choice) if isinstance(c.get("leading"), str)}
        compared.append((old, choice, {v: estimators.rerun_check(logs_before.get(_key(old, DECISION) + (v,), []),
                                                                 logs_now.get(_key(choice, DECISION) + (v,), []), margin)
                                       for v in sorted(asked)}))
    tests = [t for _, _, checks in compared for t in checks.values() if t is not None]
    equivalent = iter(estimators.benjamini_hochberg([t.equivalent for t in tests], estimators.ALPHA))
    differ = iter(estimators.benjamini_hochberg([t.differ for t in tests], estimators.ALPHA))
    rows = []
    for old, choice, checks in compared:
        shown = {v: (t, next(equivalent), next(differ)) for v, t in checks.items() if t is not None}
        missing = [v for v, t in checks.items() if t is None]
        said = "; ".join(f"{v} {t.difference:+.3f} in log (TOST p {t.equivalent:.3f}, Welch p {t.differ:.3f})"
                         for v, (t, _, _) in shown.items())
        if missing or not checks:
            verdict, why = NOT_COMPARED, f"no gain of {', '.join(missing) or 'a contender'} in one of the runs"
        elif all(same for _, same, _ in shown.values()):
            verdict = HELD
            why = "" if old["verdict"] == choice["verdict"] else f"the verdicts differ, the gains do not: {said}"
        elif any(apart for _, _, apart in shown.values()):
            verdict, why = DIFFERS, f"the gains differ between the runs: {said}"
        else:
            verdict, why = CANNOT_TELL, f"neither shown within ±{math.expm1(margin):.0%} nor apart: {said}"
        rows.append([*(choice[c] for c in DECISION), _said(old), _said(choice), verdict, why])
    return pd.DataFrame(rows, columns=HELD_COLUMNS)


def _lookup(gains: pd.DataFrame) -> dict:
    return {_key(r, DECISION) + (r["variant"],): r["logs"] for r in gains.to_dict("records")}
