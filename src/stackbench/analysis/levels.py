"""Where a speculative gain's variance is (Kalibera & Jones 2013: find the levels, then put the repetitions where
the variance is): each cell's paired log ratios log(variant / no-spec), one per text (a repeat: the same prompt
and salt on both, measure/workloads.py Texts) and round of launches, split into three levels by a two-way
analysis of variance without replication (text x round, method of moments, each component never below zero):

- between texts: how much the gain depends on which text is asked (a reply that loops is drafted for free);
- between launches: how much it moves from one round of fresh servers to the next, the same texts asked;
- within: what neither explains (a text's own spread from round to round, and the noise inside one launch).

With the texts kept across rounds (measure.texts_across_rounds: same) the text level is a fixed effect of the
texts asked: it moves no round's gain, so What to run's interval sees only the other two levels, and its verdict
covers these texts. Were each round to draw new texts, a round's gain would carry the text level divided by the
texts per cell: `texts_needed` is the texts per cell at which that share falls under the launch level.

`allocate` puts the repetitions where the variance is, at their costs: a round's texts per cell from the components
and what a text and a launch cost (Kalibera & Jones 2013's optimal count per level, the two-stage optimum of
Cochran, Sampling Techniques, 3rd ed., section 10.6), and the rounds a budget then affords."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from stackbench.analysis import decide
from stackbench.analysis.common import one_length_over_rounds
from stackbench.analysis.speculative import SPEC_PAIR
from stackbench.config.speculative import NO_SPEC
from stackbench.results.judged import judged_metric
from stackbench.results.pairing import SALTED_PROMPT

LEVEL_COLUMNS = ["node", "stack", "variant", "metric", "cells", "rounds", "texts", "text_sd", "launch_sd", "within_sd",
                 "round_gain_sd", "texts_needed"]


def split(paired: np.ndarray) -> tuple[float, float, float] | None:
    """(between texts, between rounds, residual) variances of a texts x rounds matrix of paired log ratios (no
    missing cell); None below two texts and two rounds."""
    texts, rounds = paired.shape
    if texts < 2 or rounds < 2:
        return None
    grand = paired.mean()
    by_text, by_round = paired.mean(axis=1), paired.mean(axis=0)
    residual = paired - by_text[:, None] - by_round[None, :] + grand
    ms_residual = float((residual ** 2).sum()) / ((texts - 1) * (rounds - 1))
    ms_text = rounds * float(((by_text - grand) ** 2).sum()) / (texts - 1)
    ms_round = texts * float(((by_round - grand) ** 2).sum()) / (rounds - 1)
    return max(0.0, (ms_text - ms_residual) / rounds), max(0.0, (ms_round - ms_residual) / texts), ms_residual


def paired_matrix(variant: pd.DataFrame, reference: pd.DataFrame) -> np.ndarray | None:
    """texts x rounds of log(variant / no-spec) per repeat, over the rounds both measured every repeat of."""
    mine = {r: v for r, v in zip(variant["round"], variant["repeat_values"]) if v is not None}
    theirs = {r: v for r, v in zip(reference["round"], reference["repeat_values"]) if v is not None}
    rounds = sorted(mine.keys() & theirs.keys())
    texts = min((min(len(mine[r]), len(theirs[r])) for r in rounds), default=0)
    columns = [[math.log(mine[r][j] / theirs[r][j]) for j in range(texts)] for r in rounds
               if all(mine[r][j] > 0 and theirs[r][j] > 0 for j in range(texts))]
    return np.array(columns).T if columns and texts else None


def gain_levels(results: pd.DataFrame) -> pd.DataFrame:
    """Per node, stack, speculative variant and judged metric: the median over its cells of each level's SD (on
    logs, about a relative spread), the SD over rounds of a round's gain (the mean over its texts: what the rule
    sees), and the texts per cell a round would need if it drew new ones (module docstring)."""
    each = decide.judged(results)
    if each.empty:
        return pd.DataFrame(columns=LEVEL_COLUMNS)
    each = each[each["repeat_values"].notna() & (decide.invalid_rounds(each, results) == "")]
    each = each.assign(cell=each.groupby(SPEC_PAIR, dropna=False, sort=False).ngroup())  # as decide.launch_rounds keys cells
    reference = {cell: group for cell, group in each[each["spec_method"] == NO_SPEC].groupby("cell")}
    found: dict[tuple, list] = {}
    for (cell, variant), group in each[each["spec_method"] != NO_SPEC].groupby(["cell", "variant"]):
        ref = reference.get(cell)
        paired = paired_matrix(group, ref) if ref is not None else None
        levels = split(paired) if paired is not None else None
        if levels is None:
            continue
        first = group.iloc[0]
        found.setdefault((first["node"], first["stack"], variant, judged_metric(first["concurrency"])), []).append(
            (levels, paired.shape, float(paired.mean(axis=0).std(ddof=1))))
    rows = []
    for (node, stack, variant, metric), cells in found.items():
        text, launch, within = (float(np.median([math.sqrt(c[0][i]) for c in cells])) for i in range(3))
        shapes = [c[1] for c in cells]
        needed = [math.ceil(c[0][0] / c[0][1]) if c[0][1] > 0 else None for c in cells]
        needed = [n for n in needed if n is not None]
        rows.append([node, stack, variant, metric, len(cells), max(s[1] for s in shapes), min(s[0] for s in shapes),
                     text, launch, within, float(np.median([c[2] for c in cells])),
                     int(np.max(needed)) if needed else None])
    return pd.DataFrame(rows, columns=LEVEL_COLUMNS)


@dataclass(frozen=True)
class Components:
    """A paired gain's SDs (of log ratios) by level: between texts, between launches, within."""

    text: float
    launch: float
    within: float


# Measured on this machine (the default node, llama.cpp, SmolLM2-135M): the cold run at 602b215's "Where a
# speculative gain's variance is", decode's SD between texts 0.050-0.060, between launches 0.017-0.040, within 0.016
# (issue 66); each range's middle. What `allocate` prices a node at until its own run measures its levels.
MEASURED_HERE = Components(text=0.055, launch=0.0285, within=0.016)


@dataclass(frozen=True)
class Allocation:
    texts: int  # texts per cell per round (repeats at c1; a repeat at concurrency c sends c texts)
    rounds: int | None  # the rounds the budget affords at those texts; None: no budget given
    round_sd: float  # the SD of a round's gain at those texts: what the rule's interval over rounds sees
    why: str


def allocate(levels: Components, launch_s: float, text_s: float, texts_across_rounds: str = "new",
             budget_s: float | None = None, most_texts: int = 64) -> Allocation:
    """The texts per cell a round should send, and the rounds `budget_s` then affords. A round's gain is its
    launches' effect plus the mean of its texts': with new texts each round its variance is launch^2 + (text^2 +
    within^2) / n, with the texts kept (`same`) launch^2 + within^2 / n (the text level is fixed: it moves no
    round). A round costs `launch_s` (its launches' start-up and warm-up) plus n x `text_s` (one more text in every
    judged cell: its requests' time over the round's launches). The cost of a given error is least at
    n = sqrt(launch_s / text_s x lower variance / launch variance) (Kalibera & Jones, "Rigorous benchmarking in
    reasonable time", ISMM 2013, the optimal repetition count per level), rounded up, between 1 and `most_texts`."""
    if launch_s < 0 or text_s <= 0:
        raise ValueError(f"launch_s {launch_s} must be >= 0 and text_s {text_s} > 0")
    lower = levels.within ** 2 + (levels.text ** 2 if texts_across_rounds == "new" else 0.0)
    upper = levels.launch ** 2
    if lower == 0:
        exact, texts = 0.0, 1
    elif upper == 0 or launch_s == 0:
        exact = math.inf if upper == 0 else 0.0
        texts = most_texts if upper == 0 else 1
    else:
        exact = math.sqrt(launch_s / text_s * lower / upper)
        texts = min(max(math.ceil(exact - 1e-9), 1), most_texts)
    round_sd = math.sqrt(upper + lower / texts)
    rounds = None if budget_s is None else int(budget_s // (launch_s + texts * text_s))
    level = "text and within" if texts_across_rounds == "new" else "within (the texts kept: the text level is fixed)"
    why = (f"{texts} text(s) per cell a round: sqrt(launch {launch_s:.0f} s / text {text_s:.1f} s x "
           f"{level} variance {lower:.5f} / launch variance {upper:.5f}) = {exact:.2f}, rounded up (Kalibera & Jones "
           f"2013); a round's gain then has SD {round_sd:.3f}"
           + ("" if rounds is None else f"; {rounds} round(s) of {launch_s + texts * text_s:.0f} s fit {budget_s:.0f} s"))
    return Allocation(texts, rounds, round_sd, why)


# -- the text level shown: how a paired gain spreads over a class's texts (results/pairing.py text_gain rows) ----
CELL = ["node", "stack", "model", "power_cap_w", "workload", "concurrency", "prompt_tokens"]
TEXT = ["prompt_set", "prompt_row"]
# The reading of a text's gain (issue 66): worth it on a text from +10%, a loss below -5%.
PAYS, LOSES = 0.10, -0.05


def _text_keys(rows: pd.DataFrame) -> pd.DataFrame:
    """The text rows with their set and row named as such, an uncapped cell's cap and an unsized prompt as -1 (so
    they group), and a row collected before replicates existed in round 1 (as decide reads it)."""
    rows = rows.rename(columns={"table_title": "prompt_set", "row_label": "prompt_row"}).assign(
        replicate=pd.to_numeric(rows["replicate"], errors="coerce").fillna(1).astype(int))
    # texts drawn anew each round: one cell over its rounds, as What to run reads it (decide.judged)
    rows = one_length_over_rounds(rows, [c for c in CELL if c != "prompt_tokens"] + ["metric"], "replicate")
    return rows.assign(power_cap_w=rows["power_cap_w"].fillna(-1), prompt_tokens=rows["prompt_tokens"].fillna(-1))


def per_text(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per cell, variant and text from the text_gain and text_accept_rate rows: the text's gain (the
    geometric mean of its paired ratios over its rounds and turns), the rounds it was asked in, and its acceptance
    (accepted over drafted tokens, summed over its requests: token-weighted, as aiperf's)."""
    if rows.empty:
        return pd.DataFrame(columns=[*CELL, "variant", *TEXT, "gain", "rounds", "accept_rate"])
    rows = _text_keys(rows)
    keys = [*CELL, "variant", *TEXT]
    gains = rows[rows["metric"] == "text_gain"].assign(log=lambda f: np.log(f["value"]))
    out = gains.groupby(keys, sort=True, dropna=False).agg(log=("log", "mean"), rounds=("replicate", "nunique")).reset_index()
    out["gain"] = np.expm1(out.pop("log"))
    accepted = rows[rows["metric"] == "text_accept_rate"].assign(accepted=lambda f: f["value"] * f["n"])
    rates = accepted.groupby(keys, sort=True, dropna=False)[["accepted", "n"]].sum()
    out = out.merge((rates["accepted"] / rates["n"]).rename("accept_rate").reset_index(), on=keys, how="left")
    return out.assign(power_cap_w=out["power_cap_w"].where(out["power_cap_w"] >= 0),
                      prompt_tokens=out["prompt_tokens"].where(out["prompt_tokens"] >= 0))


def _sets(texts: pd.DataFrame) -> str:
    """'HumanEval 20 and arena-hard-coding 4' (each set's distinct texts, most first)."""
    counts = texts.drop_duplicates(TEXT)["prompt_set"].value_counts()
    named = [f"{name} ({count})" if len(counts) > 1 else name for name, count in counts.items()]
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]


def scope(rows: pd.DataFrame) -> pd.DataFrame:
    """Per cell, what its verdict covers (docs/what-to-run.md, "The scope"): the distinct texts its rounds asked,
    their sets, the texts a round and the rounds. Texts that are the same every round (measure.texts_across_rounds:
    same) cover those texts only, and the sentence says so; texts drawn anew each round cover the class."""
    gains = rows[rows["metric"] == "text_gain"]
    if gains.empty:
        return pd.DataFrame(columns=[*CELL, "texts", "scope"])
    gains = _text_keys(gains)
    out = []
    for key, cell in gains.groupby(CELL, sort=True, dropna=False):
        texts = cell.drop_duplicates(TEXT)
        per_round = cell.drop_duplicates(["replicate", *TEXT]).groupby("replicate").size()
        rounds, each = len(per_round), int(per_round.median())
        kept = rounds > 1 and len(texts) == each
        # files that name no set count salted prompts: one prompt under two salts is two of them
        noun = "salted prompts" if texts["prompt_row"].str.startswith(SALTED_PROMPT).all() else "texts"
        what = f"these {len(texts)} {noun}" if kept else f"{key[4]}: {len(texts)} {noun}"
        said = (f"covers {what} of {_sets(texts)}, " + ("the same " if kept else "")
                + f"{each} a round over {rounds} round{'s' * (rounds != 1)}")
        out.append([*key, len(texts), said])
    found = pd.DataFrame(out, columns=[*CELL, "texts", "scope"])
    return found.assign(power_cap_w=found["power_cap_w"].where(found["power_cap_w"] >= 0),
                        prompt_tokens=found["prompt_tokens"].where(found["prompt_tokens"] >= 0))


def text_spread(texts: pd.DataFrame) -> pd.DataFrame:
    """Per cell and variant (per_text's rows): how its gain spreads over the texts: their count, the median and
    the range of the per-text gains, how many pay at least PAYS and lose more than LOSES, the best and worst text,
    and the acceptance over texts (median, 10th and 90th percentile; none where the engine counts no drafts per
    request: its acceptance is the launch's only, analysis/acceptance.py)."""
    rows = []
    for key, mine in texts.groupby([*CELL, "variant"], sort=True, dropna=False):
        ordered = mine.sort_values("gain")
        rates = mine["accept_rate"].dropna()
        worst, best = ordered.iloc[0], ordered.iloc[-1]
        rows.append([*key, len(mine), int(mine["rounds"].max()), float(mine["gain"].median()),
                     int((mine["gain"] >= PAYS).sum()), int((mine["gain"] < LOSES).sum()),
                     f"{best['prompt_set']} {best['prompt_row']}", float(best["gain"]),
                     f"{worst['prompt_set']} {worst['prompt_row']}", float(worst["gain"]),
                     float(rates.median()) if len(rates) else None,
                     float(rates.quantile(0.1)) if len(rates) else None, float(rates.quantile(0.9)) if len(rates) else None])
    return pd.DataFrame(rows, columns=[*CELL, "variant", "texts", "rounds", "median_gain", "pays", "loses", "best",
                                       "best_gain", "worst", "worst_gain", "accept_median", "accept_p10", "accept_p90"])


# Launch cost over text cost the plan states the allocation at, before a rehearsal prices them: a launch's start-up
# and warm-up as dear as one more text in every judged cell (this machine's 135M llama-server: ready in a second, one
# warm-up request a cell), four and ten times that (a GPU server's load, compile and graph capture).
COST_RATIOS = (1, 4, 10)


def allocation_said(texts_now: int | str, texts_across_rounds: str | None, launch_s: float | None = None,
                    text_s: float | None = None, levels: Components = MEASURED_HERE) -> str:
    """The plan's and the rehearsal's line: the texts per cell a round should send at `levels` (this machine's
    measured ones until a node measures its own) and the costs where known (else at COST_RATIOS), beside the
    `texts_now` a round sends."""
    said = (f"SD between texts {levels.text:.3f}, launches {levels.launch:.3f}, within {levels.within:.3f} (measured on "
            "the default node, issue 66)")
    if launch_s is not None and text_s:
        best = allocate(levels, launch_s, text_s, "new")
        kept = allocate(levels, launch_s, text_s, "same")
        advice = f"with new texts each round, {best.why}; with the texts kept (same), {kept.texts}"
    else:
        advice = "with new texts each round " + ", ".join(
            f"{allocate(levels, ratio, 1.0).texts} at a launch {ratio}x a text's cost" for ratio in COST_RATIOS) + (
            f"; with the texts kept (same) {allocate(levels, COST_RATIOS[0], 1.0, 'same').texts}; "
            "a rehearsal prices both costs")
    return (f"# texts a round, where the variance is (Kalibera & Jones 2013, sqrt(cost ratio x variance ratio)) at {said}: "
            f"{advice}. Texts a cell a round at c1 now: {texts_now}"
            + (f", {texts_across_rounds} across rounds." if texts_across_rounds else "."))
