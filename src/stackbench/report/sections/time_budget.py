"""A rehearsal's time budget of the real run (rehearsal/budget.py's budget.json), and the stand-in's pace beside
the posts' figures it was fitted to (rehearsal/calibration.py). A measured report has no budget."""

from __future__ import annotations

from stackbench.report import budget, queries
from stackbench.report.section import Context, Section


def build(ctx: Context) -> list:
    return []


def rehearsed(ctx: Context) -> list:
    tables = budget.budget_tables(ctx.budget_path) if ctx.budget_path else []
    fitted = budget.calibration_table(queries.calibration_rows(ctx.results))
    return tables + ([fitted] if fitted else [])


SECTION = Section("time-budget", "Time budget of the real run", build, rehearsal=rehearsed)
