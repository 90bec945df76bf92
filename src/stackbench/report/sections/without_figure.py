"""Cells that did not produce a figure, and why: failures are results, never silently dropped."""

from __future__ import annotations

from stackbench.report import queries
from stackbench.report.section import Bullets, Context, Section


def build(ctx: Context) -> list:
    lines = queries.status_lines(ctx.results)
    return [Bullets(lines)] if lines else []


SECTION = Section("without-figure", "Cells without a figure", build, boxed="status")
