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
texts per cell: `texts_needed` is the texts per cell at which that share falls under the launch level."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from stackbench.analysis import decide
from stackbench.analysis.speculative import SPEC_PAIR
from stackbench.results.judged import judged_metric

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
    reference = {cell: group for cell, group in each[each["spec_method"] == "none"].groupby("cell")}
    found: dict[tuple, list] = {}
    for (cell, variant), group in each[each["spec_method"] != "none"].groupby(["cell", "variant"]):
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
