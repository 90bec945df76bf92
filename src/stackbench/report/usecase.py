"""What to run for chat, for coding, for long context: per node, one pick across its stacks, from the
single-stream decode rate on the workloads of that use (the median of its cells per launch; for long
context, each launch's longest prompt, among the launches that reach the node's longest). Within a stack
the variant is the one What to run (analysis.decide) chose on most of the use's cells, so the two tables
never name different variants of one stack for a cell they share; the stacks are then ranked. The
runner-up stands beside the pick with what still separates them (the basis fields that differ), and the
pick's interval where its cells have one."""

from __future__ import annotations

import pandas as pd

from stackbench.analysis.decide import NO_SPEC
from stackbench.report.tables import Table, format_number
from stackbench.results import basis

# The node's workloads that stand for each use: content classes for chat and coding, the longest prompts
# for long context. A use none of whose workloads the node measured has no row.
USES = {
    "chat": ("prose", "seed-002-chat", "seed-002-prose-2048", "seed-000-short-prose", "seed-002-class-chinese"),
    "coding": ("code", "json", "seed-000-short-code", "seed-002-class-python", "seed-002-class-json"),
    "long context": ("seed-000-128k", "context-ladder", "long-prefill", "seed-004-long"),
}
LAUNCH = ["stack", "variant"]
# Long context compares only the launches whose longest prompt comes within this share of the node's longest
# (a 64K launch's figure is no answer for 128K).
LONG_SHARE = 0.75
LONG_MIN_TOKENS = 8192  # a shorter prompt is no long-context answer (long-prefill's 362 tokens)
SEPARATING = ("engine", "quant", "model", "kv_dtype", "context_len", "spec_method", "spec_tokens", "engine_version")


def _use_rows(rows: pd.DataFrame, use: str) -> pd.DataFrame:
    picked = rows[rows["workload"].isin(USES[use])]
    if use == "long context":  # each launch's longest prompt, if it is long and reaches the node's longest
        picked = picked[picked["prompt_tokens"] >= LONG_MIN_TOKENS]
        if picked.empty:
            return picked
        longest = picked.groupby(LAUNCH)["prompt_tokens"].transform("max")
        picked = picked[(picked["prompt_tokens"] == longest) & (longest >= LONG_SHARE * picked["prompt_tokens"].max())]
    return picked


def _interval(cells: pd.DataFrame) -> str:
    if cells[["ci_low", "ci_high"]].notna().all(axis=None):
        return f"{format_number(cells['ci_low'].mean())}–{format_number(cells['ci_high'].mean())}"
    return "none (one repeat per cell)"


def _decided_variants(cells: pd.DataFrame, choices: pd.DataFrame) -> pd.DataFrame:
    """The use's cells of each stack's variant that What to run chose on most of them (no-spec on a tie or
    where it decided nothing); a stack What to run did not judge keeps every variant."""
    if choices is None or choices.empty or cells.empty:
        return cells
    kept = []
    for stack, mine in cells.groupby("stack", sort=False):
        runs = choices[(choices["stack"] == stack) & (choices["concurrency"] == 1) & choices["workload"].isin(mine["workload"])]
        if runs.empty:
            kept.append(mine)
            continue
        nospec = mine.loc[mine["spec_method"] == "none", "variant"]
        named = runs["run"].replace({NO_SPEC: nospec.iloc[0] if len(nospec) else NO_SPEC})
        counts = named.value_counts()
        top = counts[counts == counts.max()].index
        variant = nospec.iloc[0] if len(nospec) and (len(top) > 1 or top[0] not in set(mine["variant"])) else top[0]
        kept.append(mine[mine["variant"] == variant])
    return pd.concat(kept)


def use_case_table(rows: pd.DataFrame, node: str, choices: pd.DataFrame | None = None) -> Table | None:
    """`rows`: the node's measured decode_tps cells at concurrency 1 (status ok); `choices`: What to run's rows
    of the node (analysis.what_to_run), whose variant each stack stands with."""
    body, raw, caveats = [], [], []
    for use in USES:
        cells = _decided_variants(_use_rows(rows, use), choices)
        if cells.empty:
            continue
        # The median over the use's cells: one odd cell (a short output's rate) does not make the pick.
        speed = cells.groupby(LAUNCH)["value"].median().sort_values(ascending=False)
        (stack, variant), best = speed.index[0], speed.iloc[0]
        pick = cells[(cells["stack"] == stack) & (cells["variant"] == variant)]
        runner = "none"
        if len(speed) > 1:
            (r_stack, r_variant), second = speed.index[1], speed.iloc[1]
            runner = f"{r_stack} / {r_variant} ({format_number(second)} tok/s)"
            pair = pd.concat([pick.head(1).assign(row_no=1),
                              cells[(cells["stack"] == r_stack) & (cells["variant"] == r_variant)].head(1).assign(row_no=2)])
            fields = [c.field for c in basis.caveats(pair[[c for c in pair.columns if c in (*SEPARATING, "row_no")]])]
            caveats.append(f"{use}: {stack} / {variant} and {runner} differ in " + (", ".join(fields) or "nothing stated"))
        workloads = ", ".join(sorted(set(pick["workload"])))
        body.append([use, f"{stack} / {variant}", f"{format_number(best)} tok/s", _interval(pick), runner, workloads])
        raw.append([None, None, best, None, None, None])
    if not body:
        return None
    return Table(f"use-case-{node}", f"What to run on {node} for chat / coding / long context",
                 "report/usecase.py: single-stream decode rate, median of the use's cells per launch; each stack's variant as What to run chose it",
                 ["use", "pick (stack / variant)", "decode", "interval", "runner-up", "workloads"], body, raw,
                 legend=[*caveats, "correctness and quality are not part of the pick: see Correctness beside speed."])


def use_case_tables(rows: pd.DataFrame, nodes: list[str], choices: pd.DataFrame | None = None) -> list[Table]:
    by_node = rows.groupby("node", sort=False)
    mine = (lambda n: choices[choices["node"] == n]) if choices is not None else (lambda n: None)
    return [t for t in (use_case_table(by_node.get_group(n), n, mine(n)) for n in nodes if n in by_node.groups) if t is not None]
