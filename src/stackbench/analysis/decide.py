"""What to run: per node, stack, power cap, workload and concurrency, one of three verdicts on the stack's
speculative variants against its no-spec, with the gain's interval, the runner-up and the price in KV pool.

- **run V**: V's gain over no-spec clears zero, with error controlled across the stack's cells and across the
  looks the sequence took;
- **not worth it**: every candidate's upper bound lies below the node's `decide.min_gain`, the smallest gain
  worth switching for (an equivalence test, Schuirmann 1987: "no gain" is a decision, not a failure to decide);
- **undecided**: neither; the verdict says how many more rounds of launches would settle it at the spread seen.

A cell the rule cannot judge reads **not judged**, with why (not_judged): no no-spec ran it at its power cap, or it
ran on fewer rounds than the first look (a one-off); it is counted apart and is no hypothesis of the step-up.

The unit is the launch: each variant's figure in a round is one fresh server's median over its repeats, paired
with its no-spec launched in the same round, and the gain's interval is Student's t over rounds of the paired
log ratios (results/estimators.py). The rule is sequential (docs/what-to-run.md): a round adds launches only
while a cell is undecided, up to the horizon, `decide.most_launches` rounds, fixed before the first look to
the rounds the budget affords, per stack (each stack's sequence is a family of its own, its horizon kept once
fixed: a stack joining the node later moves no verdict of another). The looks are the rounds from the first that can decide (estimators.looks: from
the node's `launches` rounds on, skipping any whose critical t would pass estimators.MAX_CRITICAL_T) to the
horizon; each spends a share of the 5% error, Kim & DeMets' power family (estimators.spent_alpha), through
exact group-sequential boundaries for Student's t (estimators.critical_t: P(first crossing at a look) is its
share, from the looks' joint law), so stopping when decided keeps the error at 5% over all looks. At each look
Benjamini & Hochberg's step-up (estimators.benjamini_hochberg) runs over every (cell, variant) of the stack on
the node on each one's sequential level (estimators.sequential_level), since one launch's speed factor is
shared by all its cells: among a stack's "run" verdicts at most 5% are false on average (the false-discovery
rate; not the chance of any false "run" where some cells gain). A decided cell keeps its verdict at later
looks. The rule is a pure function of the rows: the report replays the same looks the run took.

A round's figure of a cell is left out, and named, where that launch's cell is not its stack's speed: failed
requests, a GPU slowed by thermal, HW slowdown or power brake, an implausible figure, a busy host or a load
client that could not keep up. The spread
over a cell's repeats is not one: each repeat sends other texts, so it is the texts' spread, not the launch's.
That applies to the no-spec reference's launches too (its round then pairs with nothing). A variant whose
greedy outputs differ from no-spec, that answers worse, loops more or never drafted is no candidate at all. A
candidate with fewer valid rounds than the first look (three at the schema's first look of round 3 or later)
is not tested; one with a round left out is tested at its look's nominal level over the rounds it has (Student's t at
those rounds' degrees of freedom); a cell with no tested candidate is undecided.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from stackbench.analysis.clientstate import CLIENT_METRICS, saturated_of
from stackbench.analysis.common import LAUNCH, one_length_over_rounds
from stackbench.analysis.gpustate import slowed_of
from stackbench.analysis.hoststate import busy_of
from stackbench.analysis.quality import beyond_limit
from stackbench.analysis.speculative import SPEC_PAIR
from stackbench.config import default_decision
from stackbench.config.model import ONCE_SUFFIX, Decision
from stackbench.config.speculative import NO_SPEC
from stackbench.results import estimators
from stackbench.results.judged import CONCURRENT_METRIC, SINGLE_STREAM_METRIC, judged_metric, judged_rows
from stackbench.results.metrics import SLOWDOWN_METRICS, M
from stackbench.results.store import MEASURED, NOT_SWEPT

RUN_NO_SPEC = "no-spec"  # a verdict's `run` where the baseline (config/speculative.py NO_SPEC) stays
RUN, NOT_WORTH_IT, UNDECIDED = "run", "not worth it", "undecided"
VERDICTS = (RUN, NOT_WORTH_IT, UNDECIDED)
# A cell a speculative variant ran that the rule cannot judge (not_judged says why): shown with its reason, never
# counted among the judged cells, never a hypothesis of the node's step-up.
NOT_JUDGED = "not judged"
# The figure a cell is judged on: the per-stream decode rate of a single stream, the aggregate of several.
DECIDE_METRICS = (SINGLE_STREAM_METRIC, CONCURRENT_METRIC, M.looping, M.kv_pool_tokens, M.cell_status, M.spec_drafts,
                  *SLOWDOWN_METRICS, M.host_busy, M.host_outside_cpu_share_peak, M.quality_beyond_limit, *CLIENT_METRICS)
RULE = ("Rule (docs/what-to-run.md): each round launches every variant and its no-spec afresh; a variant's gain is "
        "paired within a round (every variant of a round answers the same texts, drawn anew each round from the class, so "
        "the verdict covers the class, its scope said beside it; with `same` kept, and it covers those texts) and its interval "
        "is Student's t over rounds of the log ratios. Looks at the rounds "
        "that can decide, from the node's first look (`launches` rounds) to the horizon (`decide.most_launches`, "
        "fixed before the first look), spending a 5% error in all over exact group-sequential boundaries for t "
        "(Kim & DeMets' power family, rho 3), with Benjamini & Hochberg's step-up over every cell and variant of the "
        "stack (each stack its own horizon and family; at most 5% of 'run' verdicts false on average): 'run V' "
        "where V's lower bound clears zero; 'not worth it' where every candidate's upper bound lies "
        "below `decide.min_gain`; else 'undecided', with the rounds that would settle it at the spread seen, or the "
        "budget that would where this one cannot. Each interval is printed at the one-sided level its look spent. "
        "Judged on decode tok/s at c1, aggregate tok/s above. A round's figure is left out where its launch's cell "
        "failed, ran on a slowed GPU, a busy host or a saturated client, or was implausible; a variant whose greedy outputs differ, that "
        "answers worse, loops more than no-spec or never drafted is no candidate. Price: KV pool tokens and contexts "
        "held (pool / context length) beside no-spec's.")
CHOICE_COLUMNS = ["node", "stack", "model", "power_cap_w", "workload", "concurrency", "prompt_tokens", "metric",
                  "verdict", "run", "decided", "rounds", "decided_at", "gain", "gain_low", "gain_high", "alpha",
                  "level", "settle_rounds", "settle_beyond", "runner_up", "runner_up_gain", "why", "kv_pool_tokens", "kv_pool_tokens_nospec",
                  "contexts_held", "contexts_held_nospec", "excluded"]
# A cell's peers: SPEC_PAIR, the same in everything but the launch (each launch's rows carry a ref of their own).
VARIANT_KEY = SPEC_PAIR + ["variant"]


def judged(results: pd.DataFrame) -> pd.DataFrame:
    """The row each measured closed-loop cell is judged on in each launch: decode rate at c1, aggregate above."""
    measured = results[results["source"].isin(MEASURED) & results["concurrency"].notna()
                       & ~results["ref"].fillna("").str.contains(ONCE_SUFFIX + "@", regex=False)]  # no look saw them
    cells = measured[judged_rows(measured) & (measured["status"] == "ok") & measured["value"].notna()]
    cells = cells.assign(round=_replicates(cells))
    cells = one_length_over_rounds(cells, [c for c in SPEC_PAIR if c != "prompt_tokens"] + ["metric"], "round")
    return cells.drop_duplicates(VARIANT_KEY + ["round"]).reset_index(drop=True)


def _replicates(rows: pd.DataFrame) -> pd.Series:
    """Each row's launch replicate, its round (1 for rows collected before replicates existed)."""
    if "replicate" not in rows:
        return pd.Series(1, index=rows.index, dtype=int)
    return pd.to_numeric(rows["replicate"], errors="coerce").fillna(1).astype(int)


def invalid_rounds(each: pd.DataFrame, results: pd.DataFrame) -> pd.Series:
    """Why each launch's cell (a row of judged) is not its stack's speed ('' where it is): a slowed GPU, an
    implausible figure, a busy host (analysis.hoststate) or a saturated client (analysis.clientstate). Not its
    spread over repeats: each repeat sends other texts, so that spread is the texts', not the launch's."""
    why = pd.Series("", index=each.index, dtype=object)
    if "implausible" in each.columns:
        flagged = each["implausible"].fillna("") != ""
        why[flagged] = "implausible: " + each.loc[flagged, "implausible"]
    slowed = slowed_of(each, results)
    why[slowed != ""] = "GPU slowed: " + slowed[slowed != ""]
    loaded = busy_of(each, results, every_replicate=False)
    why[loaded != ""] = loaded[loaded != ""]
    saturated = saturated_of(each, results)
    why[saturated != ""] = saturated[saturated != ""]
    return why


def launch_rounds(results: pd.DataFrame) -> pd.DataFrame:
    """One row per measured closed-loop cell and variant over its launch replicates: its valid figure by round
    (rounds: {round: value}), the rounds left out with why (left_out), the median of the launches' figures
    (value), the first replicate's launch (ref) and depth."""
    each = judged(results)
    each["invalid"] = invalid_rounds(each, results)
    each = each.sort_values("round", kind="stable")
    each["cell_id"] = each.groupby(VARIANT_KEY, dropna=False, sort=False).ngroup()
    by_cell = each.groupby("cell_id", sort=False)
    cells = by_cell.head(1).set_index("cell_id")
    rounds: dict[int, dict] = {}  # from plain lists: a Python loop over groups costs seconds at a million rows
    left_out: dict[int, list] = {}
    for cell, round_no, value, invalid in zip(each["cell_id"].tolist(), each["round"].tolist(), each["value"].tolist(),
                                              each["invalid"].tolist()):
        if invalid:
            left_out.setdefault(cell, []).append(f"round {round_no}: {invalid}")
        else:
            rounds.setdefault(cell, {})[round_no] = value
    cells["rounds"] = pd.Series(rounds, dtype=object).reindex(cells.index)
    cells["left_out"] = pd.Series({k: "; ".join(v) for k, v in left_out.items()}, dtype=object).reindex(cells.index).fillna("")
    cells["value"] = by_cell["value"].agg(lambda v: estimators.median_of_launches(list(v)))
    cells = cells.reset_index(drop=True)
    cells["depth"] = np.where(cells["spec_method"] == NO_SPEC, 0, cells["spec_tokens"].astype(float).fillna(0))
    return cells


def did_not_speculate(results: pd.DataFrame) -> pd.DataFrame:
    """The speculative cells whose counters show no drafts in any of their launches (SPEC_PAIR, variant,
    launches): a variant that never drafted ran its engine's no-spec path."""
    drafts = results[(results["metric"] == M.spec_drafts) & results["source"].isin(MEASURED) & (results["spec_method"] != NO_SPEC)]
    if drafts.empty:
        return pd.DataFrame(columns=VARIANT_KEY + ["launches"])
    by_cell = drafts.groupby(VARIANT_KEY, dropna=False).agg(total=("value", "sum"), launches=("ref", "nunique")).reset_index()
    return by_cell[by_cell["total"] == 0].drop(columns="total")


def _no_candidate(cells: pd.DataFrame, results: pd.DataFrame, correctness: pd.DataFrame) -> pd.Series:
    """Why each speculative variant is no candidate in its cell ('' where it is one): what it answers or does,
    not how fast one launch ran."""
    why = pd.Series("", index=cells.index, dtype=object)
    spec = (cells["spec_method"] != NO_SPEC).to_numpy()
    if not correctness.empty:
        verdict = cells[["node", "stack", "variant"]].merge(correctness, on=["node", "stack", "variant"], how="left")
        differs = verdict[M.first_divergence_token].notna().to_numpy() & spec
        if "noise_floor" in verdict:  # judged against no-spec's own noise where it measured it (analysis.correctness)
            differs &= (verdict["charged"].fillna(False).astype(bool) | verdict["noise_floor"].isna()).to_numpy()
        lengths = verdict["length_off_in"].fillna("").ne("").to_numpy() & spec
        why[differs] = "greedy outputs differ from no-spec"
        if M.accuracy_below_reference in verdict:  # answers worse than its no-spec launch by the flips test
            worse = (verdict[M.accuracy_below_reference].fillna(0) > 0).to_numpy() & ~differs & spec
            why[worse] = "answers worse than its no-spec launch (flips, exact McNemar; accuracy " + verdict.loc[
                worse, "accuracy_text"].set_axis(cells.index[worse]) + ")"
        why[lengths & ~differs] = "lengths not as asked in " + verdict.loc[lengths & ~differs, "length_off_in"].set_axis(
            cells.index[lengths & ~differs])
    # the share of looping requests over every launch of the cell (not one launch's: their order is arbitrary)
    looping = results[(results["metric"] == M.looping) & results["value"].notna()].groupby(
        VARIANT_KEY + ["spec_method"], dropna=False, as_index=False)["value"].mean()
    loops = cells[VARIANT_KEY].merge(looping[VARIANT_KEY + ["value"]], on=VARIANT_KEY, how="left")["value"]
    reference = looping[looping["spec_method"] == NO_SPEC][SPEC_PAIR + ["value"]]
    ref_loops = cells[SPEC_PAIR].merge(reference, on=SPEC_PAIR, how="left")["value"].fillna(0)
    more = (loops.fillna(0) > ref_loops).to_numpy() & (why == "").to_numpy() & spec
    why[more] = "loops in " + loops[more].map("{:.0%}".format).astype(str).to_numpy() + " of requests, no-spec " + ref_loops[more].map(
        "{:.0%}".format).astype(str).to_numpy()
    if "note" in results.columns:  # the served model beyond the node's quality limit (analysis/quality.py)
        beyond = cells[["node", "stack", "variant"]].merge(beyond_limit(results), on=["node", "stack", "variant"], how="left")
        far = beyond["reason"].notna().to_numpy() & spec & (why == "").to_numpy()
        why[far] = "beyond the node's quality limit: " + beyond.loc[far, "reason"].set_axis(cells.index[far])
    idle = cells[VARIANT_KEY].merge(did_not_speculate(results), on=VARIANT_KEY, how="left")["launches"]
    never = idle.notna().to_numpy() & spec
    why[never] = [f"did not speculate (no drafts in its {n:.0f} launch(es))" for n in idle[never]]
    return why


def not_judged(results: pd.DataFrame, decisions: dict[str, Decision] | None = None) -> pd.DataFrame:
    """Why each closed-loop cell a speculative variant ran is not judged (SPEC_PAIR + why; cells judged have no
    row), from the rows of every status, so a rehearsal's plan reads as its run will:
    - it ran on fewer rounds of launches than the node's first look (`decisions`, each node's rule; else the
      schema's), where the node's cells ran that many: a one-off of the first round (a ladder's shorter lengths,
      multi-turn, long context under `long_context_rounds: first`, a results file from before issue 60) is a
      launch's figure with no launch noise beside it ("one launch, of 3 rounds: not decided");
    - else no no-spec launch ran it at its power cap: a gain is paired at one cap ("no no-spec at 400 W: not
      judged", with why where the no-spec's cell was not swept there)."""
    rows = results[results["source"].isin(MEASURED) & results["concurrency"].notna() & results["workload"].notna()
                   & ~results["ref"].fillna("").str.contains(ONCE_SUFFIX + "@", regex=False)
                   & (judged_rows(results) | (results["metric"] == M.cell_status))]
    nospec, tried = rows["spec_method"] == NO_SPEC, rows["status"] != NOT_SWEPT
    rows = rows.assign(round=_replicates(rows), raced=~nospec & tried, paired=nospec & tried,
                       nospec_why=rows["reason"].where(nospec & ~tried))
    if rows.empty:
        return pd.DataFrame(columns=SPEC_PAIR + ["why"])
    cells = rows.groupby(SPEC_PAIR, dropna=False, sort=False).agg(
        rounds=("round", "nunique"), raced=("raced", "any"), paired=("paired", "any"),
        nospec_why=("nospec_why", "first")).reset_index()
    default = default_decision()
    first = cells["node"].map(lambda n: ((decisions or {}).get(n) or default).first)
    ran = cells.groupby(["node", "stack"])["rounds"].transform("max")  # the rounds the stack's cells ran, the most of any
    needed = np.minimum(first, ran)
    out = []
    for cell, need, most in zip(cells[cells["raced"]].itertuples(index=False), needed[cells["raced"]], ran[cells["raced"]]):
        if cell.rounds < need:  # the plan's shape first: a one-off stays one whatever it is paired with
            why = f"{'one launch' if cell.rounds == 1 else f'{cell.rounds} launches'}, of {most} rounds: not decided"
        elif not cell.paired:
            at = f"at {cell.power_cap_w:g} W" if pd.notna(cell.power_cap_w) else "launch"
            why = f"no no-spec {at}" + (f" ({cell.nospec_why})" if pd.notna(cell.nospec_why) else "") + ": not judged"
        else:
            continue
        out.append({**{c: getattr(cell, c) for c in SPEC_PAIR}, "why": why})
    return pd.DataFrame(out, columns=SPEC_PAIR + ["why"])


def why_not_judged(cells: pd.DataFrame, results: pd.DataFrame, decisions: dict[str, Decision] | None = None) -> np.ndarray:
    """Per row of `cells` (SPEC_PAIR columns), why What to run does not judge its cell (not_judged over `results`),
    '' where it does."""
    skipped = not_judged(results, decisions)
    if skipped.empty:
        return np.full(len(cells), "", dtype=object)
    return cells[SPEC_PAIR].merge(skipped, on=SPEC_PAIR, how="left")["why"].fillna("").to_numpy()


def _failed_cells(results: pd.DataFrame) -> pd.DataFrame:
    """Launches' cells that produced no figure (failed requests, rejections), by cell, variant and round."""
    bad = results[results["source"].isin(MEASURED) & (results["metric"] == M.cell_status)
                  & results["status"].isin(["failed", "rejected", "not_run", "gpu_busy", "host_busy"])
                  & results["concurrency"].notna()]
    bad = bad.assign(round=_replicates(bad)).drop_duplicates(VARIANT_KEY + ["round"])
    return bad.assign(why="round " + bad["round"].astype(str) + ": " + bad["status"] + ": "
                      + bad["reason"].fillna("no reason given"))[VARIANT_KEY + ["why"]]


def _launch_price(results: pd.DataFrame) -> pd.DataFrame:
    """Per launch, its KV pool tokens and how many full contexts that pool holds."""
    pools = results[(results["metric"] == M.kv_pool_tokens) & results["value"].notna() & results["concurrency"].isna()]
    pools = pools.drop_duplicates(LAUNCH)
    context = pd.to_numeric(pools["context_len"], errors="coerce")
    return pd.DataFrame({**{c: pools[c] for c in LAUNCH}, "kv_pool_tokens": pools["value"],
                         "contexts_held": pools["value"] / context})


LAUNCH_VARIANCE_COLUMNS = ["node", "stack", "variant", "metric", "launches", "cells", "between_launch_share",
                           "between_launch_cv", "within_launch_cv"]


def launch_variance(results: pd.DataFrame) -> pd.DataFrame:
    """Where each variant's judged rates vary, per node, stack, variant and metric: the between-launch and
    within-launch variance components of each cell's log rates over its launch replicates (the repeats inside
    each; results/estimators.variance_components), their medians over the cells. Variants with one launch
    have none; launches' cells that What to run leaves out (invalid_rounds) are left out here too."""
    each = judged(results)
    each = each[each["repeat_values"].notna()]
    each = each[invalid_rounds(each, results) == ""] if len(each) else each
    # Only a cell with repeats from two launches or more has components: the others are left out before the
    # per-cell loop, which would otherwise visit each cell of a million-row sweep to find none.
    each = each[each.groupby(VARIANT_KEY + ["metric"], dropna=False)["value"].transform("size") >= 2]
    rows = []
    for (node, stack, variant, metric), mine in each.groupby(["node", "stack", "variant", "metric"], sort=False):
        splits = [estimators.variance_components([list(v) for v in cell["repeat_values"] if v is not None])
                  for _, cell in mine.groupby([c for c in SPEC_PAIR if c not in ("node", "stack")], dropna=False, sort=False)]
        splits = [split for split in splits if split is not None]
        if not splits:
            continue
        rows.append([node, stack, variant, metric, max(split.launches for split in splits), len(splits),
                     float(np.median([split.between_share for split in splits])),
                     float(np.median([math.sqrt(split.between_launches) for split in splits])),
                     float(np.median([math.sqrt(split.within_launch) for split in splits]))])
    return pd.DataFrame(rows, columns=LAUNCH_VARIANCE_COLUMNS)


@dataclass
class _Hypothesis:
    """One candidate variant of one cell: its paired log ratios by round, and what the looks made of it."""

    cell: int
    variant: str
    logs: dict[int, float]
    judged: estimators.OneSided | None = None  # at the look that decided its cell, else at the last look
    run: bool = False


def _looks(hypotheses: list[_Hypothesis], decision: Decision) -> dict[int, tuple[str, int]]:
    """Replay the node's looks (_design): at each, the not-worth-it test per cell, each candidate's upper bound
    against the look's exact boundary at the whole error, then Benjamini & Hochberg over every hypothesis of the
    node on its sequential level (estimators.sequential_level, its running minimum: a valid p-value of the whole
    sequence, so every "run" the looks declare lies in the step-up set of the last look's levels and the error
    holds over all looks). {cell: (verdict, round)} of the cells decided; each hypothesis keeps its figures at its
    cell's deciding look, else at the last one, at the level that decided or would have (_Hypothesis.judged)."""
    last = max((max(h.logs) for h in hypotheses if h.logs), default=0)
    logs = np.full((len(hypotheses), last), np.nan)
    for i, h in enumerate(hypotheses):
        for k, v in h.logs.items():
            logs[i, k - 1] = v
    cell = np.array([h.cell for h in hypotheses])
    cells, cell_index = np.unique(cell, return_inverse=True)
    margin = math.log1p(decision.min_gain)
    first, horizon = _design(decision, last)
    alpha, m = estimators.ALPHA, len(hypotheses)
    decided: dict[int, tuple[str, int]] = {}
    level = np.ones(m)  # each hypothesis's sequential level so far, and the look that gave it
    best = np.zeros(m, dtype=int)
    fixed: list[tuple[int, float] | None] = [None] * m  # (look, error) each one's figures come from
    for look in (k for k in estimators.looks(first, horizon) if k <= last):
        was_open = np.array([c not in decided for c in cell])
        rounds, mean, se = estimators.t_over_rounds(logs[:, :look])
        with np.errstate(invalid="ignore"):
            # each candidate at the look's boundary, over the rounds it has (a round left out: fewer than the look);
            # one with fewer than the node's first look's rounds is not tested
            tested_at = np.where(rounds >= min(first, look), look, 0)
            high = mean + estimators.critical_t(rounds, alpha, first, horizon, tested_at) * se
            # Not worth it first: a gain surely below the margin is no reason to switch, even where it surely exists.
            above = np.bincount(cell_index, weights=~(high < margin), minlength=len(cells))
            for c in cells[above == 0]:
                decided.setdefault(c, (NOT_WORTH_IT, look))
            stat = np.where(se > 0, mean / se, np.where(mean > 0, np.inf, -np.inf))
        now = estimators.sequential_level(estimators.t_sf(stat, rounds), tested_at, first, horizon)
        best = np.where(now < level, look, best)
        level = np.minimum(level, now)
        out = np.array([decided.get(c, (RUN,))[0] == NOT_WORTH_IT for c in cell])
        rejected = np.array(estimators.benjamini_hochberg(list(np.where(out, 1.0, level)), alpha))
        runs = rejected & np.array([c not in decided for c in cell])
        for i in np.flatnonzero(runs):
            hypotheses[i].run = True
            # a selected gain's bounds at Benjamini & Yekutieli's (2005) false-coverage error, R alpha / m, at the
            # look whose level decided it (there its lower bound clears zero)
            fixed[i] = (int(best[i]), alpha * rejected.sum() / m)
            decided[cell[i]] = (RUN, look)
        for i in np.flatnonzero(was_open & ~runs):
            # not chosen: at the whole error where its cell was found not worth it, else at the error one more
            # rejection would need, (R + 1) alpha / m, where its lower bound cannot clear zero
            fixed[i] = (look, alpha if out[i] else alpha * min(1.0, (rejected.sum() + 1) / m))
    taken = estimators.looks(first, horizon)
    for h, at in zip(hypotheses, fixed):
        if at is not None:
            mine = [v for k, v in h.logs.items() if k <= at[0]]
            nominal = estimators.nominal_level(np.array([at[0]]), at[1], first, horizon)[0]
            h.judged = estimators.one_sided(mine, nominal, at[1])
        elif taken and len(h.logs) >= 2:
            # before the first look (a provisional report): the interval at the level the first look will use for
            # an undecided cell, alpha / m, so it reads as that look would, were the rounds so far all it had
            error = alpha / m
            h.judged = estimators.one_sided(list(h.logs.values()), estimators.nominal_level(
                np.array([taken[0]]), error, first, horizon)[0], error)
    return decided


def _design(decision: Decision, last: int) -> tuple[int, int]:
    """(first, horizon) of the node's sequence: the rule's first look and `decision.most`, the horizon fixed before
    the first look. A node without its rule (most below first: its file not at hand, or `decide.most_launches`
    null with one launch) is replayed as a sequence from its first look to the last round it measured: never as
    one look at the whole error, which a sequence that stopped when decided would make anti-conservative."""
    return (decision.first, decision.most) if decision.most >= decision.first else (decision.first, max(last, decision.first))


def _settle(h: _Hypothesis | None, decision: Decision, last: int) -> tuple[int | None, int | None]:
    """(more rounds within the horizon, the horizon in rounds) that would settle an undecided cell's leading
    candidate at the spread seen: the first where a look up to the horizon would, else the second where a longer
    budget would (None: not up to estimators.MOST_ROUNDS_SAID, or no spread yet)."""
    if h is None or h.judged is None:
        return None, None
    first, horizon = _design(decision, last)
    j = h.judged
    # at the error its printed interval uses: what one more "run" of the step-up would need of it
    error = j.error if math.isfinite(j.error) else estimators.ALPHA
    need = estimators.rounds_to_settle(j.mean_log, j.sd_log, j.rounds, decision.min_gain, first, horizon, error)
    if need:
        return need - j.rounds, None
    return None, estimators.budget_to_settle(j.mean_log, j.sd_log, decision.min_gain, first, horizon, error)


def _said(h: _Hypothesis) -> str:
    j = h.judged
    return f"{h.variant} {j.gain:+.1%} ({j.low:+.1%} to {j.high:+.1%}, one-sided bounds at {j.level:.2%})"


def what_to_run(results: pd.DataFrame, correctness: pd.DataFrame, decisions: dict[str, Decision] | None = None) -> pd.DataFrame:
    """One row per (node, stack, model, cap, workload, concurrency, lengths): CHOICE_COLUMNS. `results` holds
    the DECIDE_METRICS rows (with implausible), `correctness` is analysis.correctness_by_variant,
    `decisions` each node's rule (config.model.Decision; a node not named: the schema's defaults)."""
    cells = launch_rounds(results)
    if cells.empty:
        return pd.DataFrame(columns=CHOICE_COLUMNS)
    cells["no_candidate"] = _no_candidate(cells, results, correctness)
    # Judged: the cells where a speculative variant ran (a sweep or ladder of no-spec alone decides nothing).
    failed = _failed_cells(results)
    raced = pd.concat([cells.loc[cells["spec_method"] != NO_SPEC, SPEC_PAIR],
                       failed.loc[failed["variant"].isin(set(cells.loc[cells["spec_method"] != NO_SPEC, "variant"])), SPEC_PAIR]])
    keys = cells[SPEC_PAIR].drop_duplicates().merge(raced.drop_duplicates(), on=SPEC_PAIR).reset_index(drop=True)
    if keys.empty:
        return pd.DataFrame(columns=CHOICE_COLUMNS)
    keys["cell"] = range(len(keys))
    keys["not_judged"] = why_not_judged(keys, results, decisions)
    cells = cells.merge(keys, on=SPEC_PAIR, how="left")
    reference = cells[cells["spec_method"] == NO_SPEC].drop_duplicates("cell").set_index("cell")
    spec = cells[cells["spec_method"] != NO_SPEC]
    named = pd.concat([cells.loc[cells["left_out"] != "", VARIANT_KEY + ["left_out"]].rename(columns={"left_out": "why"}),
                       spec.loc[spec["no_candidate"] != "", VARIANT_KEY + ["no_candidate"]].rename(columns={"no_candidate": "why"}),
                       failed], ignore_index=True)
    excluded = (named["variant"] + " (" + named["why"] + ")").groupby([named[c] for c in SPEC_PAIR], dropna=False).agg(
        "; ".join) if len(named) else pd.Series(dtype=object, index=pd.MultiIndex.from_tuples([], names=SPEC_PAIR))

    default = default_decision()  # read from the schema once, not per node or cell
    # Each stack's sequence is a family of its own, with its own horizon and error: a stack joining the node
    # later neither moves the horizon nor the step-up of a stack already decided.
    rule = {(node, stack): ((decisions or {}).get(node) or default).of_stack(stack)
            for node, stack in keys[["node", "stack"]].drop_duplicates().itertuples(index=False)}
    hypotheses: dict[tuple[str, str], list[_Hypothesis]] = {}
    for row in spec[(spec["no_candidate"] == "") & (spec["not_judged"] == "")].itertuples(index=False):
        logs = estimators.paired_logs_by_round(row.rounds, reference["rounds"].get(row.cell))
        hypotheses.setdefault((row.node, row.stack), []).append(_Hypothesis(row.cell, row.variant, logs))
    verdicts: dict[int, tuple[str, int]] = {}
    last = {family: max((max(h.logs) for h in mine if h.logs), default=0) for family, mine in hypotheses.items()}
    for family, mine in hypotheses.items():
        verdicts |= _looks(mine, rule[family])
    by_cell: dict[int, list[_Hypothesis]] = {}
    for mine in hypotheses.values():
        for h in mine:
            by_cell.setdefault(h.cell, []).append(h)

    price = _launch_price(results)
    out = []
    for key in keys.itertuples(index=False):
        mine = sorted((h for h in by_cell.get(key.cell, []) if h.judged is not None), key=lambda h: -h.judged.gain)
        verdict, at = (NOT_JUDGED, None) if key.not_judged else verdicts.get(key.cell, (UNDECIDED, None))
        decision, family = rule[(key.node, key.stack)], (key.node, key.stack)
        has_ref = key.cell in reference.index
        chosen = next((h for h in mine if h.run), None) if verdict == RUN else None
        lead = chosen or (mine[0] if mine else None)
        rest = [h for h in mine if h is not lead]
        rounds = max((h.judged.rounds for h in mine), default=0)
        settle, beyond = _settle(lead, decision, last.get(family, 0)) if verdict == UNDECIDED else (None, None)
        taken = estimators.looks(*_design(decision, last.get(family, 0)))
        if verdict == NOT_JUDGED:
            why = key.not_judged
        elif verdict == RUN:
            why = f"{_said(chosen)} clears zero at round {at}"
        elif verdict == NOT_WORTH_IT:
            why = f"below +{decision.min_gain:.0%} at round {at}: " + ", ".join(
                f"{h.variant} at most {h.judged.high:+.1%}" for h in mine)
        elif not has_ref:
            why = "no no-spec figure here (its launches are under excluded): no gain can be measured"
        elif not by_cell.get(key.cell):
            why = "no candidate variant (each is named under excluded)"
        elif lead is None or not taken or rounds < taken[0]:
            valid = max((len(h.logs) for h in by_cell[key.cell]), default=0)
            why = f"{valid} valid round(s), " + (f"the first look is at {taken[0]}: not decided" if taken
                                                 else "no look can decide under the node's rule")
        else:
            why = f"{_said(lead)} after {rounds} rounds"
        spec_mine = by_cell.get(key.cell, [])
        run = chosen.variant if chosen else RUN_NO_SPEC if has_ref else "none eligible"
        out.append({
            **{c: getattr(key, c) for c in SPEC_PAIR}, "cell": key.cell,
            "metric": judged_metric(key.concurrency), "verdict": verdict, "run": run, "decided": verdict in (RUN, NOT_WORTH_IT),
            "rounds": rounds, "decided_at": at,
            "gain": lead.judged.gain if lead else np.nan, "gain_low": lead.judged.low if lead else np.nan,
            "gain_high": lead.judged.high if lead else np.nan, "alpha": lead.judged.error if lead else np.nan,
            "level": lead.judged.level if lead else np.nan, "settle_rounds": settle, "settle_beyond": beyond,
            "leading": lead.variant if lead else None,
            "runner_up": rest[0].variant if rest else (RUN_NO_SPEC if chosen else None),
            "runner_up_gain": rest[0].judged.gain if rest else (0.0 if chosen else np.nan),
            "why": why, "candidates": 0 if key.not_judged else len(spec_mine),
            "contenders": ", ".join(sorted(h.variant for h in spec_mine))})
    table = pd.DataFrame(out)
    table = table.merge(reference[["ref", "source", "variant"]].rename(columns=lambda c: f"ref_{c}"),
                        left_on="cell", right_index=True, how="left")
    chosen_launch = cells.drop_duplicates(["cell", "variant"]).set_index(["cell", "variant"])[["ref", "source"]]
    picked = [chosen_launch.loc[(c, v)] if v not in (RUN_NO_SPEC, "none eligible") else None
              for c, v in zip(table["cell"], table["run"])]
    price = price.astype({c: object for c in LAUNCH})
    nospec = pd.DataFrame({"source": table["ref_source"], "ref": table["ref_ref"], "node": table["node"],
                           "stack": table["stack"], "variant": table["ref_variant"]}, dtype=object).merge(price, on=LAUNCH, how="left")
    runs = pd.DataFrame({"source": [p["source"] if p is not None else s for p, s in zip(picked, table["ref_source"])],
                         "ref": [p["ref"] if p is not None else r for p, r in zip(picked, table["ref_ref"])],
                         "node": table["node"], "stack": table["stack"],
                         "variant": [v if p is not None else rv for p, v, rv in zip(picked, table["run"], table["ref_variant"])]},
                        dtype=object).merge(price, on=LAUNCH, how="left")
    table["kv_pool_tokens"], table["kv_pool_tokens_nospec"] = runs["kv_pool_tokens"].to_numpy(), nospec["kv_pool_tokens"].to_numpy()
    table["contexts_held"], table["contexts_held_nospec"] = runs["contexts_held"].to_numpy(), nospec["contexts_held"].to_numpy()
    table["excluded"] = table[SPEC_PAIR].merge(excluded.rename("excluded").reset_index(), on=SPEC_PAIR, how="left")[
        "excluded"].fillna("").to_numpy()
    table["excluded"] = table["excluded"] + _aa_controls(cells, reference).reindex(table["cell"], fill_value="").to_numpy()
    return table[CHOICE_COLUMNS + ["leading", "candidates", "contenders", "ref_variant"]].sort_values(
        ["node", "stack", "model", "power_cap_w", "workload", "concurrency"], kind="stable").reset_index(drop=True)


def _aa_controls(cells: pd.DataFrame, reference: pd.DataFrame) -> pd.Series:
    """For each cell whose speculative variant never drafted (it ran the no-spec path: an A/A comparison), a
    note where its paired 95% interval over rounds nonetheless excludes zero: the launch noise is then larger
    than the intervals hold. Indexed by cell."""
    idle = cells[cells["no_candidate"].str.startswith("did not speculate")]
    notes: dict[int, str] = {}
    for row in idle.itertuples(index=False):
        paired = estimators.paired_gain(row.rounds, reference["rounds"].get(row.cell)) \
            if isinstance(row.rounds, dict) and isinstance(reference["rounds"].get(row.cell), dict) else None
        if paired is not None and (paired.low > 0 or paired.high < 0):
            notes[row.cell] = notes.get(row.cell, "") + (
                f"; A/A control: {row.variant} never drafted, yet its {paired.gain:+.1%} ({paired.low:+.1%} to "
                f"{paired.high:+.1%}) over {paired.rounds} rounds excludes zero: the launch noise is larger than the "
                "intervals hold")
    return pd.Series(notes, dtype=object)
