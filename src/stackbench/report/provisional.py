"""The verdict so far, after each look of a node's sequence of rounds (docs/what-to-run.md): the checkpoint
between rounds writes it as JSON (which variants the next round launches, and why), prints it on the console,
and leaves a provisional report on disk, titled as provisional, so a newcomer reads an answer within minutes and
each round sharpens it. The final report replays the same looks from data/results.parquet."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from stackbench import analysis
from stackbench.analysis import decide, sequence
from stackbench.config.model import Decision
from stackbench.report import decisions
from stackbench.report.queries import Results, correctness_input, decide_input
from stackbench.report.table import to_markdown
from stackbench.results.store import atomic_write_text


def choices_of(results_path: Path, node: str, rule: Decision) -> pd.DataFrame:
    """What to run on `node` from a results file, under the node's rule."""
    results = Results(results_path)
    rows = decide_input(results)
    by_variant = analysis.correctness_by_variant(correctness_input(results))
    choices = decide.what_to_run(rows[rows["node"] == node], by_variant, {node: rule})
    return choices[choices["node"] == node]


def write(choices: pd.DataFrame, node: str, look: int, rule: Decision, spent_s: float, launch_s: float,
          out: Path, provisional: Path, horizon: str | None = None) -> tuple[dict, list[str]]:
    """The look's verdict as JSON (`out`: the rule it judged under, its horizon `rule.most`; next, the open cells the
    next round measures, why, counts, spent_s, launch_s) and the provisional report (`provisional`, markdown);
    returns the JSON and the console's lines, the first look's with the horizon it fixed (`horizon`)."""
    asked, why = sequence.next_round(choices, look, rule, spent_s, launch_s)
    verdict = {"node": node, "round": look, "rule": rule.__dict__, "next": [list(pair) for pair in asked], "why": why,
               "open_cells": sequence.open_cells(choices) if asked else [],
               "counts": {v: int((choices["verdict"] == v).sum()) for v in decide.VERDICTS},
               "spent_s": spent_s, "launch_s": launch_s}
    atomic_write_text(out, json.dumps(verdict, indent=1))
    tables = decisions.answer_tables(choices, [node])
    title = (f"PROVISIONAL: the answer on {node} after round {look} (the run goes on: {why})" if asked else
             f"PROVISIONAL: the answer on {node} after round {look}, the last look ({why}); the report follows")
    body = [f"# {title}", "", "Each later round sharpens it; the final report (reports/index.html) replaces it.", "",
            *[to_markdown(t) for t in tables]]
    provisional.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(provisional, "\n".join(body))
    lines = [f"What to run on {node}: {horizon}"] if horizon else []
    lines += [f"What to run on {node} after round {look} (provisional): {decisions.verdict_summary(choices)}; {why}"]
    lines += [f"  {row.workload} c{row.concurrency:.0f}: {row.verdict}"
              + (f" {row.run}" if row.verdict == decide.RUN else "")
              + (f", {row.leading} {row.gain:+.1%} ({row.gain_low:+.1%} to {row.gain_high:+.1%}, one-sided bounds at "
                 f"{row.level:.2%})" if pd.notna(row.gain) else "")
              for row in choices.itertuples(index=False)]
    lines.append(f"  provisional report: {provisional}")
    return verdict, lines
