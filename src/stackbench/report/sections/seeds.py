"""The seeds' tables, regenerated in each post's own layout (report/seeds.py), with the rows of any node measured
with the post's method beside the post's. A rehearsal's report keeps only those its methods reproduce."""

from __future__ import annotations

from stackbench.report import queries
from stackbench.report.section import Context, Paragraph, Section
from stackbench.report.seeds import OTHER_LAUNCHES, SAME_METHOD, seed_table
from stackbench.report.table import Table


def seed_tables(ctx: Context) -> list[Table]:
    """The seeds' tables in the order the posts and their layouts come (data/published), one per table id."""
    published_rows = queries.published_rows(ctx.results)
    measured = queries.method_input(ctx.results, ctx.layouts)
    present = set(published_rows["table_id"].dropna())
    return [seed_table(published_rows, table_id, layout, measured)
            for table_id, layout in ctx.layouts.items() if table_id in present]


def tally(ctx: Context, seed: list[Table]) -> Paragraph:
    """How many of the seeds' tables took a measured row, how many could (they name a method), and how many
    say why none can."""
    layouts = ctx.layouts
    took = sum(any(SAME_METHOD in row[0] for row in t.rows) for t in seed)
    named = sum(bool(layouts[t.table_id].method) for t in seed if t.table_id in layouts)
    why = sum(bool(layouts[t.table_id].no_row) for t in seed if t.table_id in layouts)
    return Paragraph(f"{took} of the {len(seed)} seed tables took a measured row; {named} name the workloads that "
                     f"reproduce them, {why} say why no measured row can stand beside them.")


def build(ctx: Context) -> list:
    seed = seed_tables(ctx)
    return [tally(ctx, seed), *seed]


def rehearsed(ctx: Context) -> list:
    seed = [t for t in seed_tables(ctx) if any(SAME_METHOD in row[0] or row[0] == OTHER_LAUNCHES for row in t.rows)]
    return [tally(ctx, seed), *seed]


SECTION = Section("seeds", "The seeds' tables, regenerated from data in each post's own layout", build,
                  rehearsal=rehearsed, always=True)
