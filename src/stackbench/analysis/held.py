"""Did the decisions hold: What to run of this run against an earlier run of the same node, kept on purpose
(`stackbench keep <node>`, docs/what-to-run.md), cell by cell.

Only cells where a speculative variant was a contender in both runs are compared (a cell of no-spec alone, a
ladder or a long prefill, decides nothing). A verdict the kept run decided is re-tested on this run's rounds
alone, with the rule's own one-sided tests (estimators.beyond_p): "run V" where V's gain is above zero, "not
worth it" where every candidate's gain is below the node's `decide.min_gain` (the largest of their p-values, an
intersection-union test); Benjamini & Hochberg's step-up at 5% over the decided cells' re-tests says which
"held". The runs are never pooled: pooled, the kept run's rounds would carry a gain that has vanished. A cell the
kept run left undecided has no verdict to re-test: it "held" where the two runs' gains are shown within +-d
(Schuirmann's two one-sided tests on the difference of their mean paired log ratios, estimators.rerun_check,
Welch's t; d = log1p of `decide.min_gain`, a smaller difference would change no choice), with its own step-up.
Either way a cell "differs" where Welch's two-sided test finds the gains of the variants either run decided on
(else each run's leading candidate) different, the step-up holding a false "differs" anywhere to 5% of reruns
where nothing changed (the cells share each launch's speed factor, the positive dependence it needs); else one
"cannot tell". Where a figure is missing from one run, the cell is "not compared".
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from stackbench.analysis import decide
from stackbench.analysis.speculative import SPEC_PAIR
from stackbench.config import default_decision
from stackbench.config.speculative import NO_SPEC
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
    reference = cells[cells["spec_method"] == NO_SPEC].drop_duplicates(SPEC_PAIR)[SPEC_PAIR + ["rounds"]]
    spec = cells[cells["spec_method"] != NO_SPEC].merge(reference.rename(columns={"rounds": "ref_rounds"}), on=SPEC_PAIR)
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
        checks = {v: estimators.rerun_check(logs_before.get(_key(old, DECISION) + (v,), []),
                                            logs_now.get(_key(choice, DECISION) + (v,), []), margin) for v in sorted(asked)}
        compared.append((old, choice, checks, _retest(old, logs_now.get, _key(choice, DECISION), margin)))
    tests = [t for _, _, checks, _ in compared for t in checks.values() if t is not None]
    differ = iter(estimators.benjamini_hochberg([t.differ for t in tests], estimators.ALPHA))
    kept = iter(estimators.benjamini_hochberg([p for *_, p in compared if p is not None], estimators.ALPHA))
    undecided = [all(t is not None for t in checks.values()) and p is None and checks for _, _, checks, p in compared]
    equivalent = iter(estimators.benjamini_hochberg(
        [max(t.equivalent for t in checks.values()) for (_, _, checks, _), open_ in zip(compared, undecided) if open_],
        estimators.ALPHA))
    rows = []
    for (old, choice, checks, retest), open_ in zip(compared, undecided):
        shown = {v: (t, next(differ)) for v, t in checks.items() if t is not None}
        missing = [v for v, t in checks.items() if t is None]
        said = "; ".join(f"{v} {t.difference:+.3f} in log (TOST p {t.equivalent:.3f}, Welch p {t.differ:.3f})"
                         for v, (t, _) in shown.items())
        same = next(kept) if retest is not None else next(equivalent) if open_ else False
        if missing or not checks or (old["verdict"] in (decide.RUN, decide.NOT_WORTH_IT) and retest is None):
            verdict, why = NOT_COMPARED, f"no gain of {', '.join(missing) or 'a contender'} in one of the runs"
        elif same:
            verdict = HELD
            why = "" if old["verdict"] == choice["verdict"] else (
                f"the verdicts differ; the kept verdict holds on this run's rounds alone (p {retest:.3f})"
                if retest is not None else f"the verdicts differ, the gains do not: {said}")
        elif any(apart for _, apart in shown.values()):
            verdict, why = DIFFERS, f"the gains differ between the runs: {said}"
        elif retest is not None:
            verdict, why = CANNOT_TELL, f"the kept verdict not shown on this run's rounds (p {retest:.3f}), nor the gains apart: {said}"
        else:
            verdict, why = CANNOT_TELL, f"neither shown within ±{math.expm1(margin):.0%} nor apart: {said}"
        rows.append([*(choice[c] for c in DECISION), _said(old), _said(choice), verdict, why])
    return pd.DataFrame(rows, columns=HELD_COLUMNS)


def _retest(old: dict, logs_of, key: tuple, margin: float) -> float | None:
    """The kept verdict's p-value on this run's rounds alone (estimators.beyond_p): "run V", V's gain above zero;
    "not worth it", the largest over the kept run's candidates of the p-value that each is below the margin.
    None where the kept run did not decide, or a variant it names has fewer than two rounds here."""
    if old["verdict"] == decide.RUN:
        variants, above, bound = [old["run"]], True, 0.0
    elif old["verdict"] == decide.NOT_WORTH_IT:
        variants, above, bound = str(old.get("contenders") or "").split(", "), False, margin
    else:
        return None
    logs = [logs_of(key + (v,), []) for v in variants if v]
    if not logs or any(len(mine) < 2 for mine in logs):
        return None
    return max(estimators.beyond_p(mine, bound, above) for mine in logs)


def _lookup(gains: pd.DataFrame) -> dict:
    return {_key(r, DECISION) + (r["variant"],): r["logs"] for r in gains.to_dict("records")}
