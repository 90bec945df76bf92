"""The spread over texts: per node, how each speculative variant's paired gain spreads over the texts its cells
asked, with each text's acceptance, a table and a chart (report/pairing.py). A verdict is about the mean over a
class's texts; this shows whether a drafter pays on some of a user's work and not the rest. A rehearsal's
stand-in drafts by a modeled acceptance, so it shows the shape of the table, never a finding."""

from __future__ import annotations

from stackbench.analysis import levels
from stackbench.report import pairing, queries
from stackbench.report.section import Chart, Context, Section

# The page's chart ids: the Charts section numbers its own from 0, these come after any it can have.
FIRST_CHART = 1000


def build(ctx: Context) -> list:
    texts = levels.per_text(queries.texts_input(ctx.results))
    if texts.empty:
        return []
    spread = levels.text_spread(texts)
    out: list = []
    for node in ctx.nodes:
        out += pairing.spread_table(spread, node)
        figure = pairing.spread_chart(texts, node)
        if figure is not None:
            out.append(Chart(figure, FIRST_CHART + len([p for p in out if isinstance(p, Chart)])))
    return out


SECTION = Section("text-spread", "How each gain spreads over the texts", build)
