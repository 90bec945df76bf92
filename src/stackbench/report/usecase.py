"""What to run for chat, for coding, for long context: per node, one pick across its stacks.

The rule, one for every use:
- within a stack, the variant is the one What to run (analysis.decide, the one decision rule) chose on most of
  the use's cells (no-spec on a tie or where it decided nothing), so the two tables never name different
  variants of one stack for a cell they share;
- the stacks are compared on like workload sets: only the use's workloads (and, for long context, prompt
  lengths) that every compared stack ran; a stack that ran none of them is left out, with a sentence saying so;
- chat and coding are judged on the single-stream decode rate (the median of the common cells); long context
  on a request's time, TTFT + output tokens / decode rate, since a 128K prompt's prefill weighs as much as its
  decode: each launch's longest prompt, among the launches that reach LONG_SHARE of the node's longest (a
  stack that does not is left out, with its longest prompt and context said);
- the runner-up stands beside the pick with what still separates them (the basis fields that differ), and
  the pick is called separated only where its interval clears the runner-up's.

A rehearsal names no pick: its figures are the stand-in's modeled pace, one run per cell. Its table says what
the real run will decide for each use and how: the cells, the launches, the rule (rehearsal_use_case_table).
"""

from __future__ import annotations

import pandas as pd

from stackbench.analysis.decide import NOT_JUDGED, RUN
from stackbench.config.speculative import NO_SPEC
from stackbench.report.table import Table, format_number
from stackbench.results import basis
from stackbench.results.judged import single_stream
from stackbench.results.metrics import M

# The node's workloads that stand for each use: content classes for chat and coding, the longest prompts
# for long context. A use none of whose workloads the node measured has no row.
USES = {
    "chat": ("prose", "gpu-chat", "seed-002-chat", "seed-002-prose-2048", "seed-000-short-prose", "seed-002-class-chinese"),
    "coding": ("code", "json", "gpu-code", "seed-000-short-code", "seed-002-class-python", "seed-002-class-json"),
    "long context": ("seed-000-128k", "context-ladder", "long-prefill", "seed-004-long"),
}
LONG = "long context"
LAUNCH = ["stack", "variant"]
# Long context compares only the launches whose longest prompt comes within this share of the node's longest
# (a 64K launch's figure is no answer for 128K).
LONG_SHARE = 0.75
LONG_MIN_TOKENS = 8192  # a shorter prompt is no long-context answer (long-prefill's 362 tokens)
OUTPUT_TOKENS = 512  # a long-context request's output where its cell does not state one
SEPARATING = ("engine", "quant", "model", "kv_dtype", "context_len", "spec_method", "spec_tokens", "engine_version")
DECODE, TTFT = M.decode_tps, M.ttft_s
RULE = ("Rule: each stack stands with the variant What to run decided to run on the use's cells (no-spec where it "
        "decided no run there, or runs differing variants; its rule is under What to run), and its verdicts are "
        "said beside it; stacks are compared on the use's workloads every compared stack ran; chat and coding on the "
        "single-stream decode rate (median of those cells over their launches), long context on a request's time, "
        f"TTFT + output tokens / decode rate, at each launch's longest prompt among those reaching {LONG_SHARE:.0%} "
        f"of the node's longest (at least {LONG_MIN_TOKENS} tokens). Stacks are not tested against each other: "
        "their quantizations answer differently by design, and What to run judges each against its own no-spec.")


def _metric(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Rows of one metric (rows without a metric column are decode rates: the table's first callers)."""
    return rows[rows["metric"] == metric] if "metric" in rows.columns else (rows if metric == DECODE else rows.iloc[0:0])


def _long_rows(picked: pd.DataFrame, node: str) -> tuple[pd.DataFrame, list[str]]:
    """Each launch's longest prompt, if it is long and reaches LONG_SHARE of the node's longest; the stacks left
    out, each with why."""
    long = picked[picked["prompt_tokens"] >= LONG_MIN_TOKENS]
    if long.empty:
        return long, []
    longest = long.groupby(LAUNCH)["prompt_tokens"].transform("max")
    node_longest = long["prompt_tokens"].max()
    kept = long[(long["prompt_tokens"] == longest) & (longest >= LONG_SHARE * node_longest)]
    out = []
    for stack, mine in picked.groupby("stack", sort=True):
        if stack in set(kept["stack"]):
            continue
        reach = mine["prompt_tokens"].max()
        context = mine["context_len"].max() if "context_len" in mine.columns else None
        out.append(f"{LONG} on {node}: {stack} left out: its longest prompt is {format_number(reach)} tokens"
                   + (f" (context {format_number(context)})" if pd.notna(context) else "")
                   + f", under {LONG_SHARE:.0%} of the node's longest, {format_number(node_longest)}")
    return kept, out


def _common(cells: pd.DataFrame, use: str, node: str) -> tuple[pd.DataFrame, list[str]]:
    """The cells of the workloads (and prompt lengths) every stack ran; where none is common to all, those the
    most stacks ran. The stacks left out, each with why."""
    keys = ["workload", "prompt_tokens"] if use == LONG else ["workload"]
    sets = {stack: set(map(tuple, mine[keys].drop_duplicates().to_numpy())) for stack, mine in cells.groupby("stack", sort=True)}
    common = set.intersection(*sets.values())
    if not common:
        counts = pd.Series([k for s in sets.values() for k in s]).value_counts()
        common = {k for k, n in counts.items() if n == counts.max()}
    mask = pd.Series([tuple(k) in common for k in cells[keys].to_numpy()], index=cells.index)
    left = [f"{use} on {node}: {stack} left out: it ran none of the workloads the others are compared on "
            f"({', '.join(sorted({k[0] for k in common}))}); its own: {', '.join(sorted({k[0] for k in mine}))}"
            for stack, mine in sets.items() if not mine & common]
    return cells[mask], left


def _use_rows(rows: pd.DataFrame, use: str, node: str = "") -> tuple[pd.DataFrame, list[str]]:
    """The use's cells, and a sentence for each of the node's stacks that ran none of the use's workloads."""
    picked = rows[rows["workload"].isin(USES[use])]
    left = [f"{use} on {node}: {stack} left out: it ran none of the use's workloads ({', '.join(USES[use])})"
            for stack in sorted(set(rows["stack"]) - set(picked["stack"]))] if len(picked) else []
    if use == LONG:
        picked, too_short = _long_rows(picked, node)
        return picked, left + too_short
    return picked, left


def _stack_verdict(stack: str, workloads, choices: pd.DataFrame | None, prompt_tokens=None) -> tuple[str | None, str]:
    """What to run's verdicts (the one decision object) on the use's c1 cells of one stack (of those workloads, at
    those prompt lengths where given: long context's): the variant it decided to run where every cell it decided
    "run" names the same one (else None: the stack stands with no-spec), and the verdicts said per workload, a cell
    not judged with why ("one launch, of 3 rounds: not decided")."""
    if choices is None or choices.empty:
        return None, "not judged"
    mine = choices[(choices["stack"] == stack) & single_stream(choices) & choices["workload"].isin(set(workloads))]
    if prompt_tokens is not None:
        mine = mine[mine["prompt_tokens"].isin(set(prompt_tokens))]
    if mine.empty:
        return None, "not judged"
    runs = set(mine.loc[mine["verdict"] == RUN, "run"])
    skipped = mine["verdict"] == NOT_JUDGED
    said = [f"{verdict}{' ' + ', '.join(sorted(set(rows['run']))) if verdict == RUN else ''} on "
            + ", ".join(sorted(set(rows["workload"]))) for verdict, rows in mine[~skipped].groupby("verdict", sort=True)]
    if skipped.any():
        said += [f"{why} on " + ", ".join(sorted(set(rows["workload"]))) for why, rows in mine[skipped].groupby("why", sort=True)]
    return (runs.pop() if len(runs) == 1 else None), "; ".join(said)


def _decided_variants(cells: pd.DataFrame, choices: pd.DataFrame) -> pd.DataFrame:
    """The use's cells of each stack's variant that What to run decided to run on the use's cells (no-spec where it
    decided no run, or runs differing variants); a stack What to run did not judge keeps every variant."""
    if choices is None or choices.empty or cells.empty:
        return cells
    kept = []
    for stack, mine in cells.groupby("stack", sort=False):
        judged = choices[(choices["stack"] == stack) & single_stream(choices) & choices["workload"].isin(mine["workload"])]
        if judged.empty:
            kept.append(mine)
            continue
        variant, _ = _stack_verdict(stack, mine["workload"], choices)
        nospec = mine.loc[mine["spec_method"] == NO_SPEC, "variant"]
        variant = variant if variant in set(mine["variant"]) else (nospec.iloc[0] if len(nospec) else None)
        kept.append(mine[mine["variant"] == variant] if variant else mine)
    return pd.concat(kept)


def _request_seconds(decode: pd.DataFrame, rows: pd.DataFrame) -> pd.Series:
    """Per decode cell, a request's time: its TTFT (same cell) + its output tokens / its decode rate; NaN where
    the cell has no TTFT."""
    ttft = _metric(rows, TTFT)
    keys = [k for k in ("stack", "variant", "workload", "prompt_tokens", "ref") if k in decode.columns and k in ttft.columns]
    first = ttft.groupby(keys, dropna=False)["value"].median().rename("ttft").reset_index()
    joined = decode.reset_index().merge(first, on=keys, how="left").set_index("index")
    output = joined["output_tokens"].fillna(OUTPUT_TOKENS) if "output_tokens" in joined.columns else OUTPUT_TOKENS
    return (joined["ttft"] + output / joined["value"]).reindex(decode.index)


def _score(cells: pd.DataFrame, rows: pd.DataFrame, use: str) -> tuple[pd.Series, bool]:
    """Per launch the use's figure and whether higher is better: the median decode rate, or for long context the
    median request time (lower is better) where every launch has a TTFT."""
    if use == LONG:
        seconds = _request_seconds(cells, rows)
        if seconds.notna().all():
            return cells.assign(seconds=seconds).groupby(LAUNCH)["seconds"].median().sort_values(), False
    return cells.groupby(LAUNCH)["value"].median().sort_values(ascending=False), True


def use_case_table(rows: pd.DataFrame, node: str, choices: pd.DataFrame | None = None) -> Table | None:
    """`rows`: the node's measured cells at concurrency 1 (status ok): decode_tps and, for long context, ttft_s
    (a `metric` column; without one every row is a decode rate); `choices`: What to run's rows of the node
    (analysis.what_to_run), whose variant each stack stands with."""
    body, raw, caveats, left_out = [], [], [], []
    decode = _metric(rows, DECODE)
    for use in USES:
        picked, left = _use_rows(decode, use, node)
        cells = _decided_variants(picked, choices)
        if cells.empty:
            continue
        cells, unlike = _common(cells, use, node)
        left_out += left + unlike
        score, higher = _score(cells, rows, use)
        (stack, variant), best = score.index[0], score.iloc[0]
        pick = cells[(cells["stack"] == stack) & (cells["variant"] == variant)]
        rate = pick["value"].median()
        figure = f"{format_number(rate)} tok/s" + ("" if higher else f"; request {format_number(best)} s")
        runner = "none"
        if len(score) > 1:
            (r_stack, r_variant), second = score.index[1], score.iloc[1]
            other = cells[(cells["stack"] == r_stack) & (cells["variant"] == r_variant)]
            runner = f"{r_stack} / {r_variant} (" + (f"{format_number(second)} tok/s" if higher else
                                                    f"request {format_number(second)} s") + ")"
            pair = pd.concat([pick.head(1).assign(row_no=1), other.head(1).assign(row_no=2)])
            fields = [c.field for c in basis.caveats(pair[[c for c in pair.columns if c in (*SEPARATING, "row_no")]])]
            caveats.append(f"{use}: {stack} / {variant} and {runner} differ in " + (", ".join(fields) or "nothing stated"))
        workloads = ", ".join(sorted(set(pick["workload"])))
        lengths = pick["prompt_tokens"] if use == LONG else None  # long context: its longest prompts only
        body.append([use, f"{stack} / {variant}", figure, _stack_verdict(stack, pick["workload"], choices, lengths)[1],
                     runner, workloads])
        raw.append([None, None, rate, None, None, None])
    if not body:
        return None
    return Table(f"use-case-{node}", f"What to run on {node} for chat / coding / long context",
                 "report/usecase.py: single-stream decode rate (long context: TTFT + output / decode) over the use's "
                 "workloads every compared stack ran; each stack's variant as What to run chose it",
                 ["use", "pick (stack / variant)", "decode", "What to run within the stack", "runner-up", "workloads"], body, raw,
                 legend=[*left_out, *caveats, RULE, "correctness and quality are not part of the pick: see Correctness beside speed."])


def use_case_tables(rows: pd.DataFrame, nodes: list[str], choices: pd.DataFrame | None = None) -> list[Table]:
    by_node = rows.groupby("node", sort=False)
    mine = (lambda n: choices[choices["node"] == n]) if choices is not None else (lambda n: None)
    return [t for t in (use_case_table(by_node.get_group(n), n, mine(n)) for n in nodes if n in by_node.groups) if t is not None]


# -- a rehearsal: what the real run will decide, never a pick -------------------------------------------------
NO_PICK = ("A rehearsal names no pick: its figures are the stand-in engines' modeled pace, one run per cell, on "
           "simulated GPUs. The real run's repeats and launches decide, by the rule below.")


def _launches(ran: int | None, planned: int | None) -> str:
    """', 3 launches each' where the use's cells ran on the stack's every round; ', one launch, of 3 rounds: not
    decided' where they ran on fewer (a one-off: What to run does not judge them, analysis.decide.not_judged);
    '' where the rounds are not known."""
    if planned is None:
        return ""
    if ran is not None and ran < planned:
        return f", {'one launch' if ran == 1 else f'{ran} launches'}, of {planned} rounds: not decided"
    return f", {planned} launch{'es' if planned > 1 else ''} each"


def rehearsal_use_case_table(rows: pd.DataFrame, node: str, launches: dict[tuple, int] | None = None,
                             repeats: int | None = None) -> Table | None:
    """What the real run will decide for each use: the cells (workloads, prompt lengths, concurrency 1), the
    launches compared (each stack's variants, its launch replicates), the stacks left out and why, and the
    rule; no figure. `rows`: the node's rehearsed cells at concurrency 1, any status (the plan, not the pace);
    `launches`: (stack, variant) -> launch replicates; `repeats`: the real run's repeats per cell."""
    body, left_out = [], []
    decode = _metric(rows, DECODE)
    for use in USES:
        cells, left = _use_rows(decode, use, node)
        if cells.empty:
            continue
        cells, unlike = _common(cells, use, node)
        left_out += left + unlike
        compared = []
        for stack, mine in cells.groupby("stack", sort=True):
            variants = sorted(set(mine["variant"]))
            counts = {launches.get((stack, v)) for v in variants} if launches else set()
            # the rounds the use's own cells ran on (the longest prompts, for long context), the most of any variant
            ran = int(mine["replicate"].fillna(1).groupby(mine["variant"]).nunique().max()) if "replicate" in mine else None
            times = _launches(ran, counts.pop()) if len(counts) == 1 else ""
            compared.append(f"{stack}: {' / '.join(variants)}{times}")
        lengths = sorted({int(p) for p in cells["prompt_tokens"].dropna()})
        shown = ", ".join(format_number(p) for p in lengths) if len(lengths) <= 6 else \
            f"{len(lengths)} lengths, {format_number(lengths[0])} to {format_number(lengths[-1])}"
        judged = ("request time: TTFT + output tokens / decode rate" if use == LONG
                  else "single-stream decode rate (median of the cells)")
        body.append([use, ", ".join(sorted(set(cells["workload"]))) + " at c1", shown, "; ".join(compared), judged,
                     f"{repeats} repeats a cell" if repeats else "the node's repeats"])
    if not body:
        return None
    return Table(f"use-case-{node}", f"What the real run on {node} will decide for chat / coding / long context",
                 "report/usecase.py: the rehearsal's cells (its plan), no figure",
                 ["use", "cells", "prompt tokens", "launches compared (stack: variants)", "judged on", "repeats"],
                 body, [[None] * 6 for _ in body], legend=[NO_PICK, *left_out, RULE])


def rehearsal_use_case_tables(rows: pd.DataFrame, nodes: list[str], launches: dict[tuple, int] | None = None,
                              repeats: int | None = None) -> list[Table]:
    by_node = rows.groupby("node", sort=False)
    return [t for t in (rehearsal_use_case_table(by_node.get_group(n), n, launches, repeats) for n in nodes
                        if n in by_node.groups) if t is not None]
