"""The headline: one row per stack variant per node, each figure with its basis, and what the report counts."""

from __future__ import annotations

from stackbench import analysis
from stackbench.report import decisions, queries
from stackbench.report.headline import headline_table
from stackbench.report.section import Context, Paragraph, Section, own_rows
from stackbench.report.table import Table
from stackbench.results.metrics import M
from stackbench.results.store import MEASURED

NO_NODE = "unknown"  # the node of a published row whose post names none
MARKERS = (" Every table lists, under it, the basis fields that differ between its rows; figures marked †, ‡ or § are "
           "single figures, peaks or ranges.")


def ceiling_percents(ctx: Context) -> dict[tuple, float]:
    """(node, stack, variant) -> median share of its decode ceiling over its measured workloads."""
    if ctx.roofline.empty:
        return {}
    measured = ctx.roofline[ctx.roofline["source"].isin(MEASURED)]
    return measured.groupby(["node", "stack", "variant"])["percent_of_ceiling"].median().to_dict()


def headlines(ctx: Context, outputs_judged) -> list[Table]:
    """Each node's headline, with what stands under it (caps refused, launches kept, probes off, geometry not
    read); `outputs_judged`: the variants' correctness (analysis.correctness_by_variant), None where no headline
    column may show outputs as measured (a stand-in's)."""
    results = ctx.results
    candidates = queries.headline_input(results)
    by_node = candidates.groupby("node", sort=False).indices  # each node's headline reads its own rows only
    percents, power_why, slowed = ceiling_percents(ctx), queries.power_not_measured(results), analysis.slowed_cells(ctx.frame)
    saturated, unreported = analysis.saturated_cells(ctx.frame), queries.not_reported(results)
    # Published rows without a node sit under their post (the seed tables), not under a node named "unknown".
    tables = [t for t in (headline_table(candidates.take(by_node[n]), n, percents, power_why.get(n), outputs_judged, slowed,
                                         saturated, unreported)
                          for n in ctx.nodes if n in by_node and n != NO_NODE) if t is not None]
    kept = queries.kept_launches(results)
    legend = {}
    for metric, said in ((M.smoke_score, "correctness: not checked"), (M.accuracy, "accuracy: not measured")):
        for node, why in queries.probes_off(results, metric).items():
            legend.setdefault(node, []).append(f"{said} on {why}.")
    for node, why in queries.geometry_not_read(results).items():
        legend.setdefault(node, []).append(f"{why}.")
    for node, lines in queries.unpacked_fp4(results).items():
        legend.setdefault(node, []).extend(f"{line}." for line in lines)
    for table in tables:
        node = table.table_id.removeprefix("headline-")
        table.caveats += [f"power {ctx.caps_refused[node]}."] if node in ctx.caps_refused else []
        table.caveats += [f"kept from earlier runs, launches this run did not plan (another stacks= selection, or "
                          f"dropped from the node file; delete their data/runs/{node}/<launch> to drop them): "
                          f"{kept[node]}."] if node in kept else []
        table.legend += legend.get(node, [])
    return tables


def build(ctx: Context) -> list:
    tables = headlines(ctx, ctx.by_variant)
    for table in tables:  # the headline's differences say whether What to run decided them
        mine = ctx.choices[ctx.choices["node"] == table.table_id.removeprefix("headline-")]
        if len(mine):
            table.legend.append(f"A difference between two rows here is a decision only where What to run made it "
                                f"({decisions.verdict_summary(mine)}); elsewhere it lies inside the launch-to-launch "
                                "noise, and the rows read as the same speed.")
    counts = ctx.counts
    return tables + [Paragraph(f"{sum(counts.values())} figures: {counts.get('measured', 0)} measured here, "
                               f"{counts.get('published', 0)} transcribed from the seed posts." + MARKERS)]


def rehearsed(ctx: Context) -> list:
    """A stand-in's outputs and quality are no model's: no headline column shows them as measured. The figures
    counted: the stand-ins', and the posts' about its node or its GPU, or that no post describes it."""
    mine = own_rows(queries.posts_and_nodes(ctx.results, ctx.nodes), ctx.nodes)
    published = int(mine["source"].eq("published").sum())
    said = (f"{published} from the seed posts about this node or its GPU" if published
            else "no seed post describes this node or its GPU")
    intro = f"{ctx.counts.get('rehearsal', 0)} figures rehearsed here (stand-ins, not measurements); {said}."
    return headlines(ctx, None) + [Paragraph(intro + MARKERS)]


SECTION = Section("headline", "Headline: one row per stack variant, per node", build, rehearsal=rehearsed, always=True,
                  css="headline")
