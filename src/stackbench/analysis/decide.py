"""What to run: per node, stack, power cap, workload and concurrency, the variant to run, its gain over the
stack's no-spec with an interval, the runner-up, and the price of the choice in KV pool and contexts held.

The score follows vLLM benchmarks/sweep/tune_speculative_k.py: each cell's median penalised by its spread,
median - 1.4826 x MAD x MAD_PENALTY (1.4826 x MAD estimates a normal standard deviation); cells with failed
requests or a relative MAD above MAX_REL_MAD are excluded and named; a smaller depth (no-spec is depth 0) is
preferred when its score is within DEPTH_MARGIN of the best. Only variants whose greedy outputs agree with
no-spec (analysis.correctness: no divergence, lengths as asked, the headline's rule), that loop no more
than their reference cell and that drafted at all are candidates.

A variant is chosen over no-spec only when its gain's interval clears zero. With launch replicates (node
`launches`), the gain is paired within each round of launches and its interval spans rounds
(results/estimators.py), at Bonferroni's level for the number of candidate variants, since the best of them is
the one tested; where it does not clear, the choice says how many launches would decide at 80% power. With one
launch, the interval is Welch's over repeats inside it (estimators.welch_gain): the choice is shown, marked "one
launch", and never counted as decided, since no rerun's spread was measured.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from stackbench.analysis.common import LAUNCH
from stackbench.analysis.gpustate import slowed_of
from stackbench.analysis.speculative import SPEC_PAIR
from stackbench.results import estimators
from stackbench.results.metrics import SLOWDOWN_METRICS
from stackbench.results.store import MEASURED

SCALED_MAD = 1.4826
MAD_PENALTY = 1.0
MAX_REL_MAD = 0.1
DEPTH_MARGIN = 0.01
NO_SPEC = "no-spec"
# The figure a cell is judged on: the per-stream decode rate of a single stream, the aggregate of several.
SINGLE_STREAM_METRIC, CONCURRENT_METRIC = "decode_tps", "aggregate_tps"
DECIDE_METRICS = (SINGLE_STREAM_METRIC, CONCURRENT_METRIC, "looping", "kv_pool_tokens", "cell_status", "spec_drafts",
                  *SLOWDOWN_METRICS)
PAIRED_INTERVAL = ("the paired t interval over rounds of launches (df = rounds - 1) of the log ratio of each round's "
                   "medians, at 1 - 0.05/m for m candidate variants (Bonferroni: the best of them is the one tested)")
ONE_LAUNCH = "one launch: launch-to-launch noise not measured, not decided"
RULE = (f"score = median - {SCALED_MAD} x MAD x {MAD_PENALTY:g} over repeats (vLLM tune_speculative_k.py) of decode tok/s "
        f"at c1, aggregate tok/s above; excluded (named): cells with failed requests, relative MAD > {MAX_REL_MAD:g}, "
        "variants whose greedy outputs differ from no-spec or ran other lengths, variants that answer worse than "
        "no-spec (exact McNemar test on the flipped answers), cells that loop more than no-spec's, cells on a GPU slowed by thermal, HW slowdown or "
        "power brake; "
        "variants whose counters show no drafts (did not speculate); "
        f"a smaller depth (no-spec = 0) is preferred within {DEPTH_MARGIN:.0%} of the best score; a variant is run only "
        f"when its gain over no-spec clears zero on {PAIRED_INTERVAL}, else no-spec (with the launches that would "
        f"decide at {estimators.POWER:.0%} power); with one launch, on {estimators.WELCH_GAIN}, marked '{ONE_LAUNCH}'. "
        "Price: KV pool tokens and contexts held (pool / context length) beside no-spec's.")
CHOICE_COLUMNS = ["node", "stack", "model", "power_cap_w", "workload", "concurrency", "prompt_tokens", "metric", "run",
                  "decided", "rounds", "gain", "gain_low", "gain_high", "launch_noise", "runner_up", "runner_up_gain", "why",
                  "kv_pool_tokens", "kv_pool_tokens_nospec", "contexts_held", "contexts_held_nospec", "excluded"]
# A cell's peers: SPEC_PAIR, the same in everything but the launch (each launch's rows carry a ref of their own).


def _undecided(variant: str, gain: float, low: float, high: float, more) -> str:
    need = f"about {more} repeats each would decide at the spread seen" if more else \
        f"more than {estimators.MOST_REPEATS_SAID} repeats each would be needed at the spread seen"
    return f"{variant} {gain:+.1%} ({low:+.1%} to {high:+.1%}): its interval does not clear zero, no-spec kept; {need}"


def judged(results: pd.DataFrame) -> pd.DataFrame:
    """The row each measured closed-loop cell is judged on: decode rate at c1, aggregate above."""
    measured = results[results["source"].isin(MEASURED) & results["concurrency"].notna()]
    metric = np.where(measured["concurrency"] == 1, SINGLE_STREAM_METRIC, CONCURRENT_METRIC)
    cells = measured[(measured["metric"] == metric) & (measured["status"] == "ok") & measured["value"].notna()]
    return cells.assign(round=_replicates(cells)).drop_duplicates(SPEC_PAIR + ["variant", "round"]).reset_index(drop=True)


def _replicates(rows: pd.DataFrame) -> pd.Series:
    """Each row's launch replicate, its round (1 for rows collected before replicates existed)."""
    if "replicate" not in rows:
        return pd.Series(1, index=rows.index, dtype=int)
    return pd.to_numeric(rows["replicate"], errors="coerce").fillna(1).astype(int)


def cells_by_variant(results: pd.DataFrame) -> pd.DataFrame:
    """One row per measured closed-loop cell and variant over its launch replicates: the median of the
    replicates' figures (value), each replicate's figure by round (rounds), the first replicate's launch (ref)
    and repeats (repeat_values, for the one-launch interval), the median MAD, and depth."""
    each = judged(results)
    keys = SPEC_PAIR + ["variant"]
    each = each.sort_values("round", kind="stable")
    each["cell_id"] = each.groupby(keys, dropna=False, sort=False).ngroup()
    by_cell = each.groupby("cell_id", sort=False)
    cells = by_cell.head(1).set_index("cell_id")
    rounds: dict[int, dict] = {}  # from plain lists: a Python loop over groups costs seconds at a million rows
    for cell, round_no, value in zip(each["cell_id"].tolist(), each["round"].tolist(), each["value"].tolist()):
        rounds.setdefault(cell, {})[round_no] = value
    cells["rounds"] = pd.Series(rounds)
    cells["value"] = by_cell["value"].median()
    cells["mad"] = by_cell["mad"].median()
    cells = cells.reset_index(drop=True)
    cells["depth"] = np.where(cells["spec_method"] == "none", 0, cells["spec_tokens"].astype(float).fillna(0))
    cells["score"] = cells["value"] - SCALED_MAD * cells["mad"].astype(float).fillna(0) * MAD_PENALTY
    cells["rel_mad"] = cells["mad"].astype(float) / cells["value"]
    return cells.reset_index(drop=True)


def did_not_speculate(results: pd.DataFrame) -> pd.DataFrame:
    """The speculative cells whose counters show no drafts in any of their launches (SPEC_PAIR, variant,
    launches): a variant that never drafted ran its engine's no-spec path."""
    drafts = results[(results["metric"] == "spec_drafts") & results["source"].isin(MEASURED) & (results["spec_method"] != "none")]
    if drafts.empty:
        return pd.DataFrame(columns=SPEC_PAIR + ["variant", "launches"])
    by_cell = drafts.groupby(SPEC_PAIR + ["variant"], dropna=False).agg(total=("value", "sum"), launches=("ref", "nunique")).reset_index()
    return by_cell[by_cell["total"] == 0].drop(columns="total")


def _exclusions(cells: pd.DataFrame, results: pd.DataFrame, correctness: pd.DataFrame) -> pd.Series:
    """Why each cell may not be chosen ('' where it may)."""
    why = pd.Series("", index=cells.index, dtype=object)
    wide = cells["rel_mad"] > MAX_REL_MAD
    why[wide] = "relative MAD " + cells.loc[wide, "rel_mad"].map("{:.2f}".format).astype(str) + f" > {MAX_REL_MAD:g}"
    if not correctness.empty:
        verdict = cells[["node", "stack", "variant"]].merge(correctness, on=["node", "stack", "variant"], how="left")
        differs = verdict["first_divergence_token"].notna().to_numpy() & (cells["spec_method"] != "none").to_numpy()
        if "noise_floor" in verdict:  # judged against no-spec's own noise where it measured it (analysis.correctness)
            differs &= (verdict["charged"].fillna(False).astype(bool) | verdict["noise_floor"].isna()).to_numpy()
        lengths = verdict["length_off_in"].fillna("").ne("").to_numpy()
        why[differs] = "greedy outputs differ from no-spec"
        # A variant answering worse than its no-spec launch by the flips test (none ran: no column).
        if "accuracy_below_reference" in verdict:
            worse = (verdict["accuracy_below_reference"].fillna(0) > 0).to_numpy() & ~differs
            why[worse] = "answers worse than its no-spec launch (flips, exact McNemar; accuracy " + verdict.loc[worse, "accuracy_text"].set_axis(
                cells.index[worse]) + ")"
        why[lengths & ~differs] = "lengths not as asked in " + verdict.loc[lengths & ~differs, "length_off_in"].set_axis(
            cells.index[lengths & ~differs])
    looping = results[(results["metric"] == "looping") & results["value"].notna()].drop_duplicates(SPEC_PAIR + ["variant"])
    loops = cells[SPEC_PAIR + ["variant"]].merge(looping[SPEC_PAIR + ["variant", "value"]], on=SPEC_PAIR + ["variant"], how="left")["value"]
    reference = looping[looping["spec_method"] == "none"][SPEC_PAIR + ["value"]]
    ref_loops = cells[SPEC_PAIR].merge(reference, on=SPEC_PAIR, how="left")["value"].fillna(0)
    more = (loops.fillna(0) > ref_loops).to_numpy() & (why == "").to_numpy()
    why[more] = "loops in " + loops[more].map("{:.0%}".format).astype(str).to_numpy() + " of requests, no-spec " + ref_loops[more].map(
        "{:.0%}".format).astype(str).to_numpy()
    slowed = slowed_of(cells, results)
    why[slowed != ""] = "GPU slowed: " + slowed[slowed != ""]
    idle = cells[SPEC_PAIR + ["variant"]].merge(did_not_speculate(results), on=SPEC_PAIR + ["variant"], how="left")["launches"]
    never = idle.notna().to_numpy()
    why[never] = [f"did not speculate (no drafts in its {n:.0f} launch(es))" for n in idle[never]]
    # -- plausibility (analysis/plausibility.py, set at collect in the `implausible` column): a cell that failed a
    # check in any of its launches is never chosen. Kept apart from the rules above on purpose.
    implausible = implausible_of(cells, results)
    why[implausible != ""] = "implausible: " + implausible[implausible != ""]
    return why


def implausible_of(cells: pd.DataFrame, results: pd.DataFrame) -> pd.Series:
    """Per cell (SPEC_PAIR, variant), the plausibility reasons of its judged rows over every launch ('' where none)."""
    if "implausible" not in results.columns:
        return pd.Series("", index=cells.index, dtype=object)
    flagged = judged(results)
    flagged = flagged[flagged["implausible"].notna() & (flagged["implausible"] != "")]
    if flagged.empty:
        return pd.Series("", index=cells.index, dtype=object)
    reasons = flagged.groupby(SPEC_PAIR + ["variant"], dropna=False)["implausible"].agg(lambda r: "; ".join(dict.fromkeys(r)))
    merged = cells[SPEC_PAIR + ["variant"]].merge(reasons.rename("reasons").reset_index(), on=SPEC_PAIR + ["variant"], how="left")
    return pd.Series(merged["reasons"].fillna("").tolist(), index=cells.index, dtype=object)


def _failed_cells(results: pd.DataFrame) -> pd.DataFrame:
    """Cells that produced no figure (failed requests, rejections), named by group and variant."""
    bad = results[results["source"].isin(MEASURED) & (results["metric"] == "cell_status")
                  & results["status"].isin(["failed", "rejected", "not_run", "gpu_busy"]) & results["concurrency"].notna()]
    bad = bad.drop_duplicates(SPEC_PAIR + ["variant"])
    return bad.assign(why=bad["status"] + ": " + bad["reason"].fillna("no reason given"))[SPEC_PAIR + ["variant", "why"]]


def _launch_price(results: pd.DataFrame) -> pd.DataFrame:
    """Per launch, its KV pool tokens and how many full contexts that pool holds."""
    pools = results[(results["metric"] == "kv_pool_tokens") & results["value"].notna() & results["concurrency"].isna()]
    pools = pools.drop_duplicates(LAUNCH)
    context = pd.to_numeric(pools["context_len"], errors="coerce")
    return pd.DataFrame({**{c: pools[c] for c in LAUNCH}, "kv_pool_tokens": pools["value"],
                         "contexts_held": pools["value"] / context})


def _first(frame: pd.DataFrame, order: list[str], ascending: list[bool]) -> pd.DataFrame:
    return frame.sort_values(SPEC_PAIR + order, ascending=[True] * len(SPEC_PAIR) + ascending, kind="stable",
                             na_position="last").drop_duplicates(SPEC_PAIR)


LAUNCH_VARIANCE_COLUMNS = ["node", "stack", "variant", "metric", "launches", "cells", "between_launch_share",
                           "between_launch_cv", "within_launch_cv"]


def launch_variance(results: pd.DataFrame) -> pd.DataFrame:
    """Where each variant's judged rates vary, per node, stack, variant and metric: the between-launch and
    within-launch variance components of each cell's log rates over its launch replicates (the repeats inside
    each; results/estimators.variance_components), their medians over the cells. Variants with one launch
    have none."""
    each = judged(results)
    # Only a cell with repeats from two launches or more has components: the others are left out before the
    # per-cell loop, which would otherwise visit each cell of a million-row sweep to find none.
    each = each[each["repeat_values"].notna()]
    each = each[each.groupby(SPEC_PAIR + ["variant", "metric"], dropna=False)["value"].transform("size") >= 2]
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


def _paired_rounds(row) -> np.ndarray:
    mine, theirs = row.rounds, row.ref_rounds
    if not isinstance(mine, dict) or not isinstance(theirs, dict):
        return np.array([])
    return estimators.paired_log_ratios(mine, theirs)


def _judge(row) -> tuple[float, float, float, str] | None:
    """(gain, low, high, why) of a picked variant over its no-spec: paired over rounds where two or more rounds
    ran both (at the level corrected for the contenders), else Welch's over the one launch's repeats."""
    contenders = int(row.contenders) if pd.notna(row.contenders) else 1
    level = estimators.corrected_level(contenders)
    paired = estimators.paired_gain(row.rounds, row.ref_rounds, level) if len(_paired_rounds(row)) >= 2 else None
    if paired is not None:
        stated = (f"{row.variant} {paired.gain:+.1%} ({paired.low:+.1%} to {paired.high:+.1%}) paired over {paired.rounds} "
                  f"rounds of launches, {level:.1%} interval ({contenders} candidate variant(s))")
        if paired.clears_zero:
            return paired.gain, paired.low, paired.high, f"{stated}: clears zero"
        need = estimators.launches_to_decide(paired.sd_log, paired.mean_log, level)
        more = f"about {need} launches each would decide at {estimators.POWER:.0%} power" if need else \
            f"more than {estimators.MOST_LAUNCHES_SAID} launches each would be needed at the spread seen"
        return paired.gain, paired.low, paired.high, f"{stated}: does not clear zero, no-spec kept; {more}"
    within = estimators.welch_gain(row.repeat_values, row.ref_repeat_values)
    if within is None:
        return np.nan, np.nan, np.nan, ("no interval of the gain (fewer than 2 repeats of either, or no per-repeat "
                                        "values stored): no-spec kept")
    gain, low, high = within
    if low > 0:
        return gain, low, high, "within it, the gain's interval over repeats clears zero"
    return gain, low, high, _undecided(row.variant, gain, low, high, estimators.repeats_to_decide(row.repeat_values, row.ref_repeat_values))


def _aa_controls(cells: pd.DataFrame, reference: pd.DataFrame) -> pd.Series:
    """For each cell whose speculative variant never drafted (it ran the no-spec path: an A/A comparison), a
    note where its paired interval over rounds nonetheless excludes zero: the launch noise is then larger than
    the intervals hold. Indexed by SPEC_PAIR."""
    idle = cells[cells["excluded_why"].str.startswith("did not speculate")]
    notes = {}
    for row in idle.merge(reference[SPEC_PAIR + ["rounds"]].rename(columns={"rounds": "ref_rounds"}), on=SPEC_PAIR).itertuples(index=False):
        paired = estimators.paired_gain(row.rounds, row.ref_rounds)
        if paired is not None and (paired.low > 0 or paired.high < 0):
            key = tuple(getattr(row, c) for c in SPEC_PAIR)
            notes[key] = notes.get(key, "") + (
                f"; A/A control: {row.variant} never drafted, yet its {paired.gain:+.1%} ({paired.low:+.1%} to "
                f"{paired.high:+.1%}) over {paired.rounds} rounds excludes zero: the launch noise is larger than the "
                "intervals hold")
    return pd.Series(notes, dtype=object) if notes else pd.Series(dtype=object, index=pd.MultiIndex.from_tuples([], names=SPEC_PAIR))


def what_to_run(results: pd.DataFrame, correctness: pd.DataFrame) -> pd.DataFrame:
    """One row per (node, stack, model, cap, workload, concurrency, lengths): CHOICE_COLUMNS. `results` holds
    the DECIDE_METRICS rows (with mad, ci_low, ci_high), `correctness` is analysis.correctness_by_variant."""
    cells = cells_by_variant(results)
    if cells.empty:
        return pd.DataFrame(columns=CHOICE_COLUMNS)
    cells["excluded_why"] = _exclusions(cells, results, correctness)
    named = cells.loc[cells["excluded_why"] != "", SPEC_PAIR + ["variant", "excluded_why"]].rename(columns={"excluded_why": "why"})
    named = pd.concat([named, _failed_cells(results)], ignore_index=True)
    excluded = (named["variant"] + " (" + named["why"] + ")").groupby([named[c] for c in SPEC_PAIR], dropna=False).agg("; ".join)
    candidates = cells[cells["excluded_why"] == ""].copy()
    best = candidates.groupby(SPEC_PAIR, dropna=False)["score"].transform("max")
    candidates["within"] = candidates["score"] >= best * (1 - DEPTH_MARGIN)
    pick = _first(candidates, ["within", "depth", "score"], [False, True, False])
    rest = candidates.merge(pick[SPEC_PAIR + ["variant"]].assign(picked=True), on=SPEC_PAIR + ["variant"], how="left")
    runner = _first(rest[rest["picked"].isna()], ["score"], [False])
    reference = cells[cells["spec_method"] == "none"].drop_duplicates(SPEC_PAIR)
    # m: the candidate variants the best was chosen from (the correction's count)
    contenders = candidates[candidates["spec_method"] != "none"].groupby(SPEC_PAIR, dropna=False).size().rename("contenders")

    keys = cells[SPEC_PAIR].drop_duplicates()
    out = keys.merge(pick, on=SPEC_PAIR, how="left").merge(
        runner[SPEC_PAIR + ["variant", "value", "spec_method"]].rename(columns=lambda c: c if c in SPEC_PAIR else f"runner_{c}"),
        on=SPEC_PAIR, how="left").merge(
        reference[SPEC_PAIR + ["source", "ref", "variant", "value", "repeat_values", "rounds"]].rename(
            columns=lambda c: c if c in SPEC_PAIR else f"ref_{c}"),
        on=SPEC_PAIR, how="left").merge(contenders.reset_index(), on=SPEC_PAIR, how="left")
    has_ref = out["ref_value"].notna()
    picked_spec = out["variant"].notna() & (out["spec_method"] != "none")
    judgements = [_judge(row) if spec else None for row, spec in zip(out.itertuples(index=False), picked_spec & has_ref)]
    gain, low, high = (pd.Series([j[k] if j else np.nan for j in judgements], index=out.index, dtype=float) for k in range(3))
    clears = picked_spec & has_ref & (low > 0)
    falls_back = picked_spec & has_ref & ~clears
    run = np.select([out["variant"].isna(), ~has_ref | clears, falls_back], ["none eligible", out["variant"], NO_SPEC], NO_SPEC)
    # Who else: when a variant's gain did not clear, that variant; else the next score down.
    runner_up = np.where(falls_back, out["variant"], np.where(out["runner_spec_method"] == "none", NO_SPEC, out["runner_variant"]))
    runner_value = np.where(falls_back, out["value"], out["runner_value"])
    rounds = pd.Series([len(_paired_rounds(r)) for r in out.itertuples(index=False)], index=out.index)
    one_launch = rounds < 2
    said = pd.Series([j[3] if j else "" for j in judgements], index=out.index)
    why = np.select(
        [out["variant"].isna(), ~has_ref, picked_spec & has_ref, out["spec_method"] == "none"],
        ["every cell excluded", "no no-spec launch here: variants ranked without a reference", said,
         "no-spec scores best (or within the depth margin)"], "")
    why = np.where(one_launch & has_ref & out["variant"].notna(), ONE_LAUNCH + "; " + pd.Series(why, index=out.index), why)
    price = _launch_price(results)
    runs_reference = run == NO_SPEC
    chosen = pd.DataFrame({"source": np.where(runs_reference, out["ref_source"], out["source"]),
                           "ref": np.where(runs_reference, out["ref_ref"], out["ref"]), "node": out["node"],
                           "stack": out["stack"], "variant": np.where(runs_reference, out["ref_variant"], out["variant"])})
    chosen = chosen.merge(price, on=LAUNCH, how="left")
    nospec = pd.DataFrame({"source": out["ref_source"], "ref": out["ref_ref"], "node": out["node"], "stack": out["stack"],
                           "variant": out["ref_variant"]}).merge(price, on=LAUNCH, how="left")
    table = pd.DataFrame({
        **{c: out[c] for c in ["node", "stack", "model", "power_cap_w", "workload", "concurrency", "prompt_tokens"]},
        "metric": np.where(out["concurrency"] == 1, SINGLE_STREAM_METRIC, CONCURRENT_METRIC), "run": run,
        "decided": ~one_launch & has_ref, "rounds": rounds,
        "gain": gain.where(clears), "gain_low": low.where(clears), "gain_high": high.where(clears),
        "launch_noise": [estimators.launch_noise(r) if isinstance(r, dict) else np.nan for r in out["ref_rounds"]],
        "runner_up": runner_up, "runner_up_gain": (pd.Series(runner_value, index=out.index) / out["ref_value"] - 1),
        "why": why,
        "kv_pool_tokens": chosen["kv_pool_tokens"].to_numpy(), "kv_pool_tokens_nospec": nospec["kv_pool_tokens"].to_numpy(),
        "contexts_held": chosen["contexts_held"].to_numpy(), "contexts_held_nospec": nospec["contexts_held"].to_numpy(),
        "excluded": out[SPEC_PAIR].merge(excluded.rename("excluded").reset_index(), on=SPEC_PAIR, how="left")["excluded"].fillna("").to_numpy(),
    })
    table["excluded"] = table["excluded"] + _aa_controls(cells, reference).reindex(
        pd.MultiIndex.from_frame(out[SPEC_PAIR]), fill_value="").to_numpy()
    return table.sort_values(["node", "stack", "model", "power_cap_w", "workload", "concurrency"], kind="stable").reset_index(drop=True)
