"""Spread and peaks: repeats whose max/min exceeds a ratio, and bimodal repeats (seed 004: a greedy loop
makes one run several times faster)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from stackbench.analysis.common import RATE_METRICS, text_of
from stackbench.results import published


def post_of(ref: pd.Series) -> pd.Series:
    """The post a ref belongs to (published.post_of), or the run itself for a measured ref."""
    posts = published.posts_of(ref)
    return posts.where(posts != "", ref)


def spread_flags(results: pd.DataFrame, ratio: float = 1.25) -> pd.DataFrame:
    """Rate figures whose repeats (or published range) span more than `ratio`, and peaks next to typical
    figures of the same family (same post, variant and metric) that are far below them (seed 004: 101 vs
    408 tok/s)."""
    rates = results[results["metric"].isin(RATE_METRICS) & results["value"].notna()]
    # A measured range is a spread across repeats only where its row says so; a published range has no spread_over,
    # nor has a results file from before the column (its rate rows' ranges were all over repeats).
    over_repeats = rates["spread_over"].isna() | (rates["spread_over"] == "repeats") if "spread_over" in rates else True
    wide = rates[over_repeats & (rates["value_min"] > 0) & (rates["value_max"] / rates["value_min"] > ratio)].copy()
    wide["why"] = ("spread " + text_of(wide["value_min"], "{:.4g}") + "-" + text_of(wide["value_max"], "{:.4g}")
                   + " (x" + text_of((wide["value_max"] / wide["value_min"]), "{:.2f}") + ")")
    family = ["post", "variant", "metric"]
    keyed = rates.assign(post=post_of(rates["ref"]))
    typical = keyed[keyed["stat"] != "peak"].groupby(family, dropna=False)["value"].median().rename("typical").reset_index()
    peaks = keyed[keyed["stat"] == "peak"]
    peaks = peaks.merge(typical, on=family, how="left").set_axis(peaks.index)
    peaks["why"] = np.where(peaks["typical"].notna(),
                            "peak " + text_of(peaks["value"], "{:g}") + " is x" + text_of((peaks["value"] / peaks["typical"]), "{:.2f}")
                            + " the typical " + text_of(peaks["typical"], "{:g}") + " of its family",
                            "a peak with no typical figure beside it")
    columns = ["source", "ref", "node", "stack", "variant", "workload", "concurrency", "metric", "value", "stat", "why"]
    return pd.concat([wide[columns], peaks[columns]], ignore_index=True)


def is_bimodal(values: list[float], gap_ratio: float = 1.5) -> bool:
    """Two clusters: sorted repeats with one jump larger than gap_ratio between neighbours, each side populated."""
    ordered = sorted(v for v in values if v and v > 0)
    if len(ordered) < 4:
        return False
    jumps = [(b / a, i) for i, (a, b) in enumerate(zip(ordered, ordered[1:]))]
    ratio, at = max(jumps)
    return ratio > gap_ratio and 2 <= at + 1 <= len(ordered) - 2
