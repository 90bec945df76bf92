"""Every node's full per-cell table (report/full.py), started on the background thread before any section
builds, since it is the report's largest job."""

from __future__ import annotations

from stackbench.report.full import full_tables
from stackbench.report.section import Context, Section


def start(ctx: Context) -> None:
    ctx.started["fulls"] = ctx.background.submit(full_tables, ctx.results.source, ctx.nodes, ctx.table_dir)


def build(ctx: Context) -> list:
    return ctx.started["fulls"].result()


SECTION = Section("full-tables", "Full tables", build, always=True, start=start)
