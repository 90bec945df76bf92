"""The report's "What to run" tables (analysis.decide): per node one row per stack, cap, workload,
concurrency and prompt length with the choice, its gain, the runner-up and the price; across stacks the choices side by side
with the greedy agreement between the stacks' no-spec launches beside them (shown, not gating: different
quantizations answer differently by design). The score's rule is written under every table."""

from __future__ import annotations

import pandas as pd

from stackbench import analysis
from stackbench.analysis import decide, levels
from stackbench.analysis import held as held_verdicts
from stackbench.config.speculative import NO_SPEC
from stackbench.report.table import Table, frame_table
from stackbench.results import estimators
from stackbench.results.judged import judged_rows
from stackbench.results.metrics import M

# What a verdict's "covers" says (analysis/levels.py scope), under every table that prints it.
SCOPE = ("Covers: the texts the verdict is about, read from the request files (each request's prompt set and row): "
         "drawn anew each round (measure.texts_across_rounds: new), it covers the class those sets stand for; kept "
         "across rounds (same), it covers those texts only, as it says.")
# Past these bounds an interval says only that the launches disagree: it is not printed as a figure.
TOO_NOISY = (-0.9, 9.0)


def _percent(value) -> str:
    return f"{value:+.1%}" if pd.notna(value) else ""


def _against(value, reference, spec: str) -> str:
    """'3000 (no-spec 4096)'; the reference alone is not repeated where the choice is no-spec's own launch."""
    if pd.isna(value):
        return ""
    text = spec.format(value)
    return text if pd.isna(reference) or reference == value else f"{text} (no-spec {spec.format(reference)})"


def _rounds(rounds, decided_at) -> str:
    """The valid rounds of launches behind the verdict, and the look that decided it."""
    if pd.isna(rounds) or rounds < 2:
        return "1 (launch noise not measured)" if rounds == 1 else "none"
    return f"{rounds:.0f} (decided at {decided_at:.0f})" if pd.notna(decided_at) else f"{rounds:.0f}"


def _settle(choice) -> str:
    """What would settle an undecided cell: the rounds within the budget at the spread seen, else the budget
    that would, or why not."""
    if choice["verdict"] != decide.UNDECIDED:
        return ""
    if pd.notna(choice["settle_rounds"]):
        return f"about {choice['settle_rounds']:.0f} more round(s) at the spread seen (half the time, at its level)"
    if pd.notna(choice.get("settle_beyond")):
        return f"not within this budget (about {choice['settle_beyond']:.0f} rounds would settle it)"
    if choice["rounds"] >= 2 and pd.notna(choice["gain"]):
        return f"not within this budget, nor {estimators.MOST_ROUNDS_SAID} rounds at the spread seen"
    return ""


def _interval(gain, low, high, level=None) -> str:
    """A gain with its interval and the one-sided level its bounds stand at (the error the look spent); 'too
    noisy to state' past what a node can mean (a bound beyond -90% / +900%)."""
    if pd.isna(gain):
        return ""
    if pd.isna(low) or pd.isna(high) or low < TOO_NOISY[0] or high > TOO_NOISY[1]:
        return f"{_percent(gain)} (interval too noisy to state: beyond {TOO_NOISY[0]:+.0%} / {TOO_NOISY[1]:+.0%})"
    at = f", one-sided bounds at {level:.2%}" if level is not None and pd.notna(level) else ""
    return f"{_percent(gain)} ({_percent(low)} to {_percent(high)}{at})"


def _tokens(value) -> str:
    return f"{value:.0f}" if pd.notna(value) else ""


def by_content_class(choices: pd.DataFrame) -> str:
    """One sentence naming what each stack runs on which content class (a workload is one), where the choice
    differs between them: 'llamacpp: ngram-n8 on code, extraction; no-spec on prose'. A workload whose
    rows chose differently is named per concurrency / prompt length. '' where every row chose alike."""
    parts = []
    for stack, mine in choices.groupby("stack", sort=False):
        if mine["run"].nunique() < 2:
            continue
        labels = []
        for workload, rows in mine.groupby("workload", sort=False):
            if rows["run"].nunique() == 1:
                labels.append((rows["run"].iloc[0], workload))
                continue
            varies = [c for c in ("concurrency", "prompt_tokens") if rows[c].nunique() > 1]
            labels += [(row["run"], " ".join([workload, *(_qualifier(c, row[c]) for c in varies)])) for _, row in rows.iterrows()]
        runs = dict.fromkeys(run for run, _ in labels)
        parts.append(f"{stack}: " + "; ".join(f"{run} on " + ", ".join(w for r, w in labels if r == run) for run in runs))
    return ("The choice differs by content class (workload): " + " | ".join(parts) + ".") if parts else ""


def _qualifier(column: str, value) -> str:
    return f"c{value:.0f}" if column == "concurrency" else f"{_tokens(value)} prompt tokens"


def covers(choices: pd.DataFrame, scope: pd.DataFrame | None) -> list[str]:
    """Each verdict's scope (analysis/levels.py scope: the texts its rounds asked, their sets, a round's and the
    rounds), aligned with `choices`; '' where the request files named no text (rows collected before them)."""
    if scope is None or scope.empty:
        return [""] * len(choices)
    keys = [c for c in levels.CELL if c in choices.columns]
    found = {tuple(None if pd.isna(v) else v for v in k): said
             for k, said in zip(scope[keys].itertuples(index=False), scope["scope"])}
    return [found.get(tuple(None if pd.isna(v) else v for v in k), "") for k in choices[keys].itertuples(index=False)]


def _display(choices: pd.DataFrame, scope: pd.DataFrame | None = None) -> pd.DataFrame:
    gain = [(f"{lead}: " if isinstance(lead, str) else "") + _interval(g, lo, hi, level) if pd.notna(g) else ""
            for lead, g, lo, hi, level in zip(choices["leading"], choices["gain"], choices["gain_low"], choices["gain_high"],
                                              choices["level"])]
    runner = [f"{r} ({_percent(g)})" if isinstance(r, str) and pd.notna(g) else (r if isinstance(r, str) else "")
              for r, g in zip(choices["runner_up"], choices["runner_up_gain"])]
    return pd.DataFrame({
        "stack": choices["stack"], "model": choices["model"], "power cap W": choices["power_cap_w"],
        "workload": choices["workload"], "concurrency": choices["concurrency"],
        "prompt tokens": choices["prompt_tokens"], "judged on": choices["metric"],
        "verdict": choices["verdict"], "covers": covers(choices, scope), "run": choices["run"],
        "gain over no-spec (interval)": gain,
        "rounds (decided at)": [_rounds(n, at) for n, at in zip(choices["rounds"], choices["decided_at"])],
        "what would settle it": [_settle(c) for _, c in choices.iterrows()],
        "runner-up (paired gain)": runner, "why": choices["why"],
        "KV pool tokens": [_against(v, r, "{:.0f}") for v, r in zip(choices["kv_pool_tokens"], choices["kv_pool_tokens_nospec"])],
        "contexts held": [_against(v, r, "{:.2f}x") for v, r in zip(choices["contexts_held"], choices["contexts_held_nospec"])],
        "excluded": choices["excluded"]})


def verdict_summary(mine: pd.DataFrame) -> str:
    """'10 judged cells: 4 run, 3 not worth it, 3 undecided; 2 not judged' (the last where there are)."""
    counts = mine["verdict"].value_counts()
    skipped = counts.get(decide.NOT_JUDGED, 0)
    return (f"{len(mine) - skipped} judged cells: " + ", ".join(f"{counts.get(v, 0)} {v}" for v in decide.VERDICTS)
            + (f"; {skipped} {decide.NOT_JUDGED}" if skipped else ""))


def answer_tables(choices: pd.DataFrame, nodes: list[str], notes: dict[str, list[str]] | None = None,
                  scope: pd.DataFrame | None = None) -> list[Table]:
    """The answer first, per node: each judged cell's verdict with what it covers (`scope`: analysis/levels.py
    scope), the gain with its interval, the price in KV pool, and what would settle the rest; `notes` the node's
    own lines to say before anything (a busy host)."""
    out = []
    for node in nodes:
        mine = choices[choices["node"] == node]
        if mine.empty:
            continue
        shown = pd.DataFrame({
            "stack": mine["stack"], "workload": mine["workload"], "concurrency": mine["concurrency"],
            "power cap W": mine["power_cap_w"], "verdict": mine["verdict"], "covers": covers(mine, scope), "run": mine["run"],
            "gain over no-spec (interval)": _display(mine)["gain over no-spec (interval)"],
            "KV pool tokens": [_against(v, r, "{:.0f}") for v, r in zip(mine["kv_pool_tokens"], mine["kv_pool_tokens_nospec"])],
            "what would settle it": [_settle(c) for _, c in mine.iterrows()]})
        if shown["power cap W"].isna().all():
            shown = shown.drop(columns="power cap W")
        if not any(shown["covers"]):  # rows collected before the request files named their texts
            shown = shown.drop(columns="covers")
        table = frame_table(shown, f"answer-{node}", f"The answer on {node}: {verdict_summary(mine)}",
                                   "analysis.decide: the sequential rule over rounds of launches")
        table.legend = [*(notes or {}).get(node, []), "run V: V's gain clears zero; not worth it: every candidate's upper "
                        "bound is below the node's smallest gain worth switching for; undecided: neither, with the rounds "
                        "that would settle it. " + (SCOPE + " " if "covers" in shown else "") + "The rule and each cell's "
                        "detail are under What to run."]
        out.append(table)
    return out


def what_to_run_tables(choices: pd.DataFrame, nodes: list[str], agreement: pd.DataFrame,
                       variance: pd.DataFrame | None = None, scope: pd.DataFrame | None = None) -> list[Table]:
    """Per node its choices, each with what it covers (`scope`: analysis/levels.py scope) and, with launch
    replicates, where its rates vary (`variance`: analysis.launch_variance); then, where two or more stacks were
    decided, the choices side by side. `agreement` holds the cross_stack_agreement rows
    (report.queries.cross_stack_input)."""
    out = []
    for node in nodes:
        out += variance_table(variance, node) if variance is not None else []
        mine = choices[choices["node"] == node]
        if mine.empty:
            continue
        shown = _display(mine, scope)
        table = frame_table(shown if any(shown["covers"]) else shown.drop(columns="covers"), f"what-to-run-{node}",
                            f"What to run on {node}", "analysis.decide over every measured closed-loop cell")
        sentence = by_content_class(mine)
        if sentence:
            table.legend.insert(0, sentence)
        table.legend += ([SCOPE] if any(shown["covers"]) else []) + [decide.RULE]
        out.append(table)
    return out + across_stacks(choices, agreement)


def held_table(held: pd.DataFrame, node: str, label: str) -> Table:
    """Which decisions of the run kept as `label` held in this one (analysis.decisions_held), with a count."""
    shown = pd.DataFrame({"stack": held["stack"], "model": held["model"], "power cap W": held["power_cap_w"],
                          "workload": held["workload"], "concurrency": held["concurrency"],
                          "prompt tokens": held["prompt_tokens"], f"kept run {label}": held["earlier"],
                          "this run": held["now"], "verdict": held["verdict"], "why": held["why"]})
    table = frame_table(shown, f"decisions-held-{node}-{label}", f"Did the decisions hold on {node}? "
                               f"This run against the run kept as {label}", "analysis.held over both runs' What to run")
    counts = held["verdict"].value_counts()
    said = ", ".join(f"{counts[v]} {v}" for v in held_verdicts.VERDICTS if v in counts)
    table.legend.append(f"{len(held)} cells with a contender in both runs: {said or 'none'}. A cell held where the two "
                        "runs' gains of the variant either run decided on (else each run's leading candidate) are shown "
                        "equal within the node's smallest gain worth switching for (two one-sided Welch t tests on "
                        "their paired log ratios over rounds); it differs where Welch's two-sided test finds a "
                        "difference; else one cannot tell. Benjamini & Hochberg hold each at 5% across the cells compared. "
                        f"The kept run's rows go through the same rule as this run's. Keep a run with `stackbench keep {node}` "
                        "before measuring again (docs/what-to-run.md).")
    return table


def variance_table(variance: pd.DataFrame, node: str) -> list[Table]:
    """Per variant and judged metric, the share of its rates' variance that lies between server launches rather
    than between repeats inside one, and each level's coefficient of variation (medians over its cells)."""
    mine = variance[variance["node"] == node]
    if mine.empty:
        return []
    shown = pd.DataFrame({"stack": mine["stack"], "variant": mine["variant"], "judged on": mine["metric"],
                          "launches": mine["launches"], "cells": mine["cells"],
                          "between launches (share of variance)": mine["between_launch_share"].map("{:.0%}".format),
                          "CV between launches": mine["between_launch_cv"].map("{:.1%}".format),
                          "CV within a launch": mine["within_launch_cv"].map("{:.1%}".format)})
    table = frame_table(shown, f"launch-variance-{node}", f"Where the variance is on {node}: between launches or inside one",
                               "analysis.decide.launch_variance: one-way variance components of each cell's log rates over its "
                               "launch replicates and their repeats (results/estimators.py), medians over the cells")
    table.legend.append("A large share between launches is what repeats inside one launch cannot see: it is why What to "
                        "run pairs its gains within rounds of launches and takes the interval over rounds (Kalibera & Jones, "
                        "ISMM 2013: put the repetitions where the variance is).")
    return [table]


def across_stacks(choices: pd.DataFrame, agreement: pd.DataFrame) -> list[Table]:
    """Each node / stack's choice per workload, concurrency and cap, side by side, where two or more ran;
    under it the greedy agreement of every pair of the stacks' no-spec launches."""
    labelled = choices.assign(launch=choices["node"] + " / " + choices["stack"])
    if labelled["launch"].nunique() < 2:
        return []
    keys = ["workload", "concurrency", "prompt_tokens", "power_cap_w"]
    wide = labelled.pivot_table(index=keys, columns="launch", values="run", aggfunc="first", dropna=False).reset_index()
    picks = wide.drop(columns=keys)
    wide["same choice"] = picks.nunique(axis=1, dropna=True).map({1: "yes"}).fillna("no").where(picks.notna().sum(axis=1) > 1, "")
    table = frame_table(wide.rename(columns={"power_cap_w": "power cap W", "prompt_tokens": "prompt tokens"}), "what-to-run-across-stacks",
                               "What to run, each stack's choice side by side", "analysis.decide per node and stack")
    table.legend.append("Not gating: each stack is judged against its own no-spec; stacks with other quantizations "
                        "answer differently by design (their greedy agreement is in the agreement-across-stacks tables).")
    pairs = agreement[agreement["metric"] == M.cross_stack_agreement] if len(agreement) else agreement
    for row in pairs.itertuples(index=False):
        table.legend.append(f"Greedy agreement, {row.row_label} (reference) against {row.col_label}: {row.value:.2f}")
    table.legend.append(decide.RULE)
    return [table]


def energy_tables(cells: pd.DataFrame, caps_refused: list[str] = ()) -> list[Table]:
    """Fewest joules per concurrency, the cap floor of every cap sweep, and depth x cap where both are swept;
    `cells` is analysis.energy_cells (caps as applied), `caps_refused` the lines naming where a cap was not
    applied and why, said under each. A table with nothing to say is left out."""
    sections = [
        (analysis.fewest_joules(cells), "what-to-run-energy", "What to run for energy: fewest joules per token and per response",
         "J/token over the steady window where measured, else the whole window; J/response over the steady window "
         "(energy_j_per_response_steady); variants the correctness rule flags left out"),
        (analysis.cap_floors(cells), "what-to-run-cap-floor", "The power cap below which speed falls faster than power",
         "per cap sweep, walking down from the highest cap: the first step down that loses a larger share of the "
         "judged rate than of measured power (power_w, else the cap)"),
        (analysis.depth_by_cap(cells), "what-to-run-depth-by-cap", "Speculative depth x power cap (depth 0 = no-spec)",
         "judged rate (decode at c1, aggregate above) and J/token of each cell, where one stack swept both"),
    ]
    return [frame_table(frame, table_id, title, ref, list(caps_refused))
            for frame, table_id, title, ref in sections if len(frame)]


# -- a rehearsal: what the real run will decide and how, never a choice -----------------------------------------
NO_CHOICE = ("A rehearsal chooses nothing: it runs each cell once on stand-in engines at their modeled pace, so "
             "there is no interval of a difference to decide on. This is what the real run's repeats and launches "
             "will decide, and how.")


def _levels(values) -> str:
    return ", ".join(f"c{v:.0f}" for v in sorted({v for v in values if pd.notna(v)}))


def rehearsal_tables(cells: pd.DataFrame, nodes: list[str], launches: dict[tuple, int] | None = None,
                     repeats: int | None = None, rules: dict | None = None, caps_lines: list[str] = ()) -> list[Table]:
    """Per node, one row per stack: the variants What to run will judge against no-spec, the cells it will
    judge (workloads, concurrencies, caps) and those it will not with why (analysis.decide.not_judged), the
    metric, the launches and repeats behind each figure; the rule under it, and the caps not swept or refused
    (`caps_lines`). `cells`: the rehearsal's judged rows (decide_input), any status: its plan, not its pace;
    `launches`: (stack, variant) -> launch replicates; `repeats`: the real run's repeats per cell; `rules`: each
    node's Decision."""
    out = []
    judged = cells[judged_rows(cells) & cells["workload"].notna()]
    if "request_rate" in judged.columns:
        judged = judged[judged["request_rate"].isna()]  # closed loop only, as analysis.decide judges
    judged = judged.assign(why=decide.why_not_judged(judged, cells, rules))
    for node in nodes:
        mine = judged[judged["node"] == node]
        if mine.empty:
            continue
        body = []
        for stack, rows in mine.groupby("stack", sort=True):
            variants = sorted(set(rows["variant"]))
            base = sorted(set(rows.loc[rows["spec_method"] == NO_SPEC, "variant"]))
            candidates = [v for v in variants if v not in base]
            caps = sorted({c for c in rows["power_cap_w"] if pd.notna(c)})
            each = rows.drop_duplicates(["variant", "workload", "concurrency", "prompt_tokens", "power_cap_w"])
            count = int((each["why"] == "").sum())
            apart = "; ".join(f"{why}: {', '.join(sorted(set(group['workload'])))} ({len(group)} cell{'s' * (len(group) > 1)})"
                              for why, group in each[each["why"] != ""].groupby("why", sort=True))
            per = {launches.get((stack, v)) for v in variants} if launches else set()
            body.append([stack, ", ".join(candidates) or "none (no-spec only: nothing to choose)",
                         ", ".join(base) or "none (no gain can be measured)",
                         ", ".join(sorted(set(rows["workload"]))), _levels(rows["concurrency"]),
                         "/".join(f"{c:g}" for c in caps) + " W" if caps else "uncapped", str(count), apart,
                         str(per.pop()) if len(per) == 1 and None not in per else "the node's launches",
                         str(repeats) if repeats else "the node's repeats"])
        columns = ["stack", "candidates", "against (no-spec)", "workloads", "concurrency", "caps", "cells judged",
                   "not judged (why)", "launches per variant", "repeats per cell"]
        table = Table(f"what-to-run-{node}", f"What the real run on {node} will decide: What to run",
                             "the rehearsal's plan (its cells, any status); analysis.decide's rule", columns, body,
                             [[None] * len(columns) for _ in body])
        table.legend += [NO_CHOICE, "Judged on: decode tok/s at c1, aggregate tok/s above (closed loop); with one launch "
                         "per variant a cell is never decided: the rule needs two rounds or more. A cell is not judged "
                         "where it runs on fewer rounds than the first look (a one-off) or has no no-spec at its cap "
                         "to pair with.", decide.RULE, *caps_lines]
        out.append(table)
    return out


def power_sweet_spots(frame: pd.DataFrame) -> pd.DataFrame:
    """analysis.power_sweet_spots along the cap axis only, like with like: one sweep per prompt length too (a
    context ladder's lengths at several caps are several sweeps, never one), with the prompt length shown."""
    limits = analysis.stock_limits(frame)  # the launches' own rows: a per-length slice of the frame drops them
    if "prompt_tokens" not in frame.columns or frame.empty:
        return analysis.power_sweet_spots(frame, limits)
    parts = []
    for tokens, rows in frame.groupby(frame["prompt_tokens"].astype("Float64"), dropna=False, sort=True):
        found = analysis.power_sweet_spots(rows, limits)
        if len(found):
            parts.append(found.assign(prompt_tokens=tokens))
    if not parts:
        return pd.DataFrame()
    out = pd.concat(parts, ignore_index=True)
    order = [c for c in out.columns if c != "prompt_tokens"]
    at = order.index("power_cap_w")
    return out[order[:at] + ["prompt_tokens"] + order[at:]]
