"""The answer: what to run on each node, said first, with what a reader must know before it (a busy host, a
model beyond the node's quality limit). A rehearsal names no answer: its figures are a stand-in's."""

from __future__ import annotations

from stackbench.analysis import hoststate, levels, quality
from stackbench.report import decisions, queries
from stackbench.report.section import DROP, Context, Section


def node_notes(ctx: Context) -> dict[str, list[str]]:
    """Per node, what stands before its answer: launches on a busy host (analysis/hoststate.py), and the served
    models beyond the node's quality limit, whatever the variant."""
    busy = queries.busy_rows(ctx.results)
    notes = {node: ["A busy host: " + line + "." for line in hoststate.busy_lines(mine)]
             for node, mine in busy.groupby("node", sort=False) if hoststate.busy_lines(mine)}
    for row in quality.beyond_limit(ctx.decide_rows).itertuples(index=False):
        notes.setdefault(row.node, []).append(f"Quality: {row.stack} {row.variant} is beyond the node's quality limit "
                                              f"(quality_limit): {row.reason}; its speed is not the answer it gives.")
    return notes


def build(ctx: Context) -> list:
    return decisions.answer_tables(ctx.choices, ctx.nodes, node_notes(ctx), levels.scope(queries.texts_input(ctx.results)))


SECTION = Section("answer", "The answer: what to run on each node", build, rehearsal=DROP)
