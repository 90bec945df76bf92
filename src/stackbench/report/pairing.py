"""The report's view of What to run's pairing (docs/what-to-run.md, "The same texts"): whether each round's variants
sent the same texts as their no-spec (results/pairing.py), where a speculative gain's variance lies, by text,
launch and within (analysis/levels.py), and how it spreads over the class's texts, with each text's acceptance
(results/pairing.py text_gain and text_accept_rate rows; analysis/levels.py text_spread)."""

from __future__ import annotations

import pandas as pd

from stackbench.analysis import levels
from stackbench.report.table import Table, frame_table
from stackbench.results.pairing import PROMPTS, REPLIES


def pairing_table(rows: pd.DataFrame, node: str) -> list[Table]:
    """Per stack, variant, workload and concurrency over its rounds: the share of paired requests with identical
    prompts (it must be 100%) and, of those, with identical replies; where they diverged."""
    mine = rows[rows["node"] == node]
    if mine.empty:
        return []
    keys = ["stack", "model", "power_cap_w", "variant", "workload", "concurrency"]
    mine = mine.assign(power_cap_w=mine["power_cap_w"].fillna(-1))  # uncapped (NaN) groups with itself
    wide = mine.pivot_table(index=keys + ["replicate"], columns="metric", values=["value", "n"], aggfunc="first")
    counts = wide.reset_index()
    counts.columns = [a if not b else f"{a}_{b}" for a, b in counts.columns]
    counts["prompts_same"] = (counts[f"value_{PROMPTS}"] * counts[f"n_{PROMPTS}"]).round()
    counts["replies_same"] = (counts[f"value_{REPLIES}"].fillna(0) * counts[f"n_{REPLIES}"].fillna(0)).round()
    by_cell = counts.groupby(keys, sort=True).agg(rounds=("replicate", "nunique"), pairs=(f"n_{PROMPTS}", "sum"),
                                                  prompts_same=("prompts_same", "sum"),
                                                  compared=(f"n_{REPLIES}", "sum"), replies_same=("replies_same", "sum"))
    by_cell = by_cell.reset_index()
    diverged = mine[(mine["metric"] == REPLIES) & (mine["value"] < 1)].groupby(keys)["note"].first()
    shown = pd.DataFrame({
        "stack": by_cell["stack"], "model": by_cell["model"],
        "power cap W": by_cell["power_cap_w"].where(by_cell["power_cap_w"] >= 0), "variant": by_cell["variant"],
        "workload": by_cell["workload"],
        "concurrency": by_cell["concurrency"], "rounds": by_cell["rounds"], "paired requests": by_cell["pairs"],
        "same prompt": (by_cell["prompts_same"] / by_cell["pairs"]).map("{:.0%}".format),
        "same reply": [f"{s / c:.0%}" if c else "" for s, c in zip(by_cell["replies_same"], by_cell["compared"])],
        "where replies diverged (one round)": [diverged.get(tuple(k), "") for k in by_cell[keys].itertuples(index=False)]})
    table = frame_table(shown, f"pairing-{node}", f"The same texts on {node}: each variant against its no-spec "
                               "of the same round, request by request", "results.pairing over the cells' request files")
    total, same = by_cell["compared"].sum(), by_cell["replies_same"].sum()
    table.legend.append(
        f"Every variant of a round sends the same texts as its no-spec (measure/workloads.py Texts: the salt is drawn "
        f"from the text seed, the cell, the conversation, the repeat and the text round), so a round's gain is paired "
        f"request by request. Same prompt must read 100%; below it the round compared different texts. Same reply: "
        f"{same:.0f} of {total:.0f} identical prompts ({same / total:.0%}) were answered identically at temperature 0; "
        "a reply that differs on an identical prompt is the variant's own doing (numerics, batch shape), not the "
        "pairing's." if total else "No identical prompt was compared.")
    return [table]


def levels_table(levels: pd.DataFrame, node: str) -> list[Table]:
    """Per speculative variant and judged metric, a paired gain's SD by level (analysis.levels), medians over cells."""
    mine = levels[levels["node"] == node]
    if mine.empty:
        return []
    shown = pd.DataFrame({
        "stack": mine["stack"], "variant": mine["variant"], "judged on": mine["metric"], "cells": mine["cells"],
        "rounds": mine["rounds"], "texts a cell": mine["texts"],
        "SD between texts": mine["text_sd"].map("{:.3f}".format),
        "SD between launches": mine["launch_sd"].map("{:.3f}".format),
        "SD within": mine["within_sd"].map("{:.3f}".format),
        "SD of a round's gain": mine["round_gain_sd"].map("{:.3f}".format),
        "texts a cell for new texts each round": mine["texts_needed"]})
    table = frame_table(shown, f"gain-levels-{node}", f"Where a speculative gain's variance is on {node}: "
                               "between texts, between launches, within", "analysis.levels: texts x rounds of each cell's "
                               "paired log ratios, two-way components, medians over the cells")
    covered = ("Where the texts are kept across rounds (measure.texts_across_rounds: same) the text level "
               "moves no round's gain: What to run's interval sees the launch level and the rest, and its verdict covers "
               "these texts. Where each round draws new texts (new, the default), a round's gain carries the text level over the texts "
               "a cell, and the verdict covers the workload's kind of text; a text is then another one each round, so this "
               "split counts the text level in its within level, and its launch level stays the launches'.")
    table.legend.append("SDs are of log ratios (about a relative spread). " + covered + " The last column is how many "
                        "texts a cell would need, were each round to draw new ones, for the text level to weigh no more "
                        "than the launch level in a round's gain (Kalibera & Jones, ISMM 2013); the texts a round should send at "
                        "these levels and their costs are the plan's and the rehearsal's allocation line (analysis/levels.py "
                        "allocate).")
    return [table]


def _share(value) -> str:
    return f"{value:.2f}" if pd.notna(value) else ""


def spread_sentence(row) -> str:
    """'at least +10% on 7 of 24 texts, below -5% on 3' (analysis/levels.py PAYS and LOSES)."""
    return (f"at least {levels.PAYS:+.0%} on {row['pays']} of {row['texts']} texts, below {levels.LOSES:+.0%} on "
            f"{row['loses']}")


def spread_table(spread: pd.DataFrame, node: str) -> list[Table]:
    """Per cell and speculative variant on `node`: how its paired gain spreads over the texts, and their acceptance."""
    mine = spread[spread["node"] == node]
    if mine.empty:
        return []
    accept = [f"{_share(m)} ({_share(lo)}-{_share(hi)})" if pd.notna(m) else "per launch only (no per-request draft counts)"
              for m, lo, hi in zip(mine["accept_median"], mine["accept_p10"], mine["accept_p90"])]
    shown = pd.DataFrame({
        "stack": mine["stack"], "model": mine["model"], "power cap W": mine["power_cap_w"], "workload": mine["workload"],
        "concurrency": mine["concurrency"], "prompt tokens": mine["prompt_tokens"], "variant": mine["variant"],
        "texts": mine["texts"], "rounds": mine["rounds"],
        "gain over the texts": [spread_sentence(r) for _, r in mine.iterrows()],
        "median text's gain": mine["median_gain"].map("{:+.1%}".format),
        "best text (gain)": [f"{t} ({g:+.1%})" for t, g in zip(mine["best"], mine["best_gain"])],
        "worst text (gain)": [f"{t} ({g:+.1%})" for t, g in zip(mine["worst"], mine["worst_gain"])],
        "acceptance per text: median (p10-p90)": accept})
    shown = shown.drop(columns=[c for c in ("power cap W", "prompt tokens") if shown[c].isna().all()])
    table = frame_table(shown, f"text-spread-{node}", f"How each gain spreads over the texts on {node}",
                        "results/pairing.py text_gain and text_accept_rate over the cells' request files; "
                        "analysis/levels.py text_spread")
    table.legend.append(
        "Each text's gain is its decode rate on the variant over no-spec's on the same prompt in the same round "
        "(decode_tps: tokens after the first over first text to the last chunk, the inverse of vLLM's TPOT), the "
        "geometric mean over the rounds and turns that asked it: like with like, the same text, round and load. "
        "Acceptance per text is accepted over drafted tokens of its requests (llama.cpp timings.draft_n_accepted / "
        "draft_n, SGLang spec_num_correct_drafts / spec_num_proposed_drafts; vLLM counts none per request, so its "
        "acceptance is the launch's, under Speculative decoding). At c2 and above a text shares its batch; the verdict "
        "is judged on the aggregate rate, and this spread is of each stream's own rate. A verdict is about the mean "
        "over the texts; this says whether a drafter pays on some of them and not the rest.")
    return [table]


def spread_chart(texts: pd.DataFrame, node: str) -> dict | None:
    """Per cell and variant on `node`, its texts' gains sorted: where a drafter pays and where it does not."""
    mine = texts[texts["node"] == node]
    if mine.empty:
        return None
    traces = []
    for (stack, workload, concurrency, variant), rows in mine.groupby(["stack", "workload", "concurrency", "variant"], sort=True):
        ordered = rows.sort_values("gain")
        traces.append({"type": "scatter", "mode": "lines+markers", "name": f"{stack} / {variant} / {workload} c{concurrency:.0f}",
                       "x": list(range(1, len(ordered) + 1)), "y": [float(g) for g in ordered["gain"]],
                       "text": [f"{s} {r}" for s, r in zip(ordered["prompt_set"], ordered["prompt_row"])]})
    return {"data": traces, "layout": {
        "title": {"text": f"Gain over no-spec per text, sorted, on {node} (measured; each text paired in its round)"},
        "xaxis": {"title": {"text": "text, from the least gain to the most"}},
        "yaxis": {"title": {"text": "paired gain on the text"}, "tickformat": "+.0%"}, "height": 400,
        "margin": {"l": 60, "r": 20, "t": 80, "b": 50}, "paper_bgcolor": "white", "plot_bgcolor": "white"}}
