"""What to run: the use-case answer first, then per node the verdicts (analysis/decide.py), whether a kept run's
decisions held (analysis/held.py), the pairing of the texts, where a gain's variance is, and what to run for
energy. A rehearsal's says what the real run will decide and how (cells, launches, rule), never a choice."""

from __future__ import annotations

from pathlib import Path

from stackbench import analysis
from stackbench.analysis import levels
from stackbench.analysis.energy import run_energy_lines
from stackbench.config import default_decision
from stackbench.config.model import Decision
from stackbench.report import budget, decisions, pairing, queries, usecase
from stackbench.report.queries import Results
from stackbench.report.section import Context, Section, undecided
from stackbench.report.table import Table
from stackbench.results.kept import kept_rule, kept_runs

CANNOT_DECIDE_ENERGY = (
    "a stand-in's power is a simulated GPU's, min(cap, demand): no joules to choose on. The real run compares "
    "each stack and variant's J/token and J/response at each concurrency, every cap of its sweep beside the "
    "stock limit's cell (the limit found at the launch's start), W per GPU, and names the cap below which "
    "speed falls faster than power")


def energy(ctx: Context) -> list[Table]:
    return decisions.energy_tables(analysis.energy_cells(ctx.decide_rows, ctx.by_variant),
                                   [*run_energy_lines(ctx.decide_rows), *ctx.caps_refused_lines])


def held_tables(ctx: Context) -> list[Table]:
    """Per node and run kept for it (results/kept.py), which of the kept run's decisions held in this one
    (analysis/held.py): the kept rows go through the same queries and the same rule as this run's."""
    kept = {node: kept_runs(ctx.kept_dir, node) for node in ctx.nodes} if ctx.kept_dir else {}
    if not any(kept.values()):
        return []
    out, gains, rules = [], analysis.variant_gains(ctx.decide_rows), ctx.rules or {}
    for node, paths in kept.items():
        for path in paths:
            earlier = Results(path)
            earlier_rows = queries.decide_input(earlier)
            own = kept_rule(path)  # the kept run under the rule it ran under, where it was kept with it
            earlier_choices = analysis.what_to_run(earlier_rows, analysis.correctness_by_variant(queries.correctness_input(earlier)),
                                                   {**rules, node: Decision(**own)} if own else ctx.rules)
            held = analysis.decisions_held(earlier_choices, analysis.variant_gains(earlier_rows),
                                           ctx.choices[ctx.choices["node"] == node], gains[gains["node"] == node],
                                           min_gain=(rules.get(node) or default_decision()).min_gain)
            out.append(decisions.held_table(held, node, path.stem))
    return out


def build(ctx: Context) -> list:
    uses = usecase.use_case_tables(queries.use_case_rows(ctx.results), ctx.nodes, ctx.choices)
    scope = levels.scope(queries.texts_input(ctx.results))  # what each verdict covers: the texts its rounds asked
    decided = decisions.what_to_run_tables(ctx.choices, ctx.nodes, ctx.agreement, analysis.launch_variance(ctx.decide_rows),
                                           scope)
    decided += held_tables(ctx)
    paired, gain_levels = queries.pairing_input(ctx.results), levels.gain_levels(ctx.decide_rows)
    for node in ctx.nodes:
        decided += pairing.pairing_table(paired, node) + pairing.levels_table(gain_levels, node)
    return uses + decided + energy(ctx)


def rehearsed_launches(ctx: Context) -> dict[tuple, int]:
    """(stack, variant) -> the launch replicates a rehearsal ran of it (the real run's, node `launches`)."""
    rows = ctx.decide_rows
    if rows.empty or "replicate" not in rows.columns:
        return {}
    return {k: int(v) for k, v in rows.groupby(["stack", "variant"])["replicate"].nunique().items()}


def real_repeats(budget_path: Path | None) -> int | None:
    """The real run's repeats per cell, from a rehearsal's time budget (rehearsal/budget.py)."""
    return budget.real_repeats(budget_path) if budget_path else None


def rehearsed(ctx: Context) -> list:
    launches, repeats = rehearsed_launches(ctx), real_repeats(ctx.budget_path)
    uses = usecase.rehearsal_use_case_tables(queries.use_case_rows(ctx.results, any_status=True), ctx.nodes, launches, repeats)
    plan = decisions.rehearsal_tables(ctx.decide_rows, ctx.nodes, launches, repeats, ctx.rules, ctx.caps_refused_lines)
    return uses + plan + [undecided(t, CANNOT_DECIDE_ENERGY) for t in energy(ctx) if t.table_id.startswith("what-to-run-energy")]


SECTION = Section("what-to-run", "What to run", build, rehearsal=rehearsed)
