"""The charts, per node (report/charts.py): the page draws them; report.md has none."""

from __future__ import annotations

from stackbench.report import charts, queries
from stackbench.report.section import Chart, Context, Section


def build(ctx: Context) -> list:
    ladders, paretos = queries.ladder_input(ctx.results), queries.pareto_input(ctx.results)
    charted = queries.charted(ctx.results)
    positions = charted.groupby("node", sort=False).indices  # split by node on integer positions
    figures = []
    for node in ctx.nodes:
        mine = charted.take(positions.get(node, [])).reset_index(drop=True)
        figures += [charts.rate_by_workload(mine, node), charts.concurrency_scaling(mine, node),
                    charts.power_sweep(mine, node), charts.per_position_acceptance(mine, node),
                    charts.request_acceptance_histogram(mine, node), charts.accept_len_by_depth(mine, node),
                    charts.spec_speedup(ctx.spec, node), charts.context_ladder(ladders, node),
                    charts.throughput_pareto(paretos, node)]
    return [Chart(figure, number) for number, figure in enumerate(f for f in figures if f is not None)]


SECTION = Section("charts", "Charts", build, always=True, markdown=False)
