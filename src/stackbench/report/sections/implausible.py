"""Every cell a plausibility check flagged at collect (analysis/plausibility.py), ours and theirs alike: left out
of What to run, and listed here."""

from __future__ import annotations

from stackbench.report import queries
from stackbench.report.derived import derived_table
from stackbench.report.section import Context, Section


def build(ctx: Context) -> list:
    flagged = queries.implausible_cells(ctx.results)
    if not len(flagged):
        return []
    # every flagged cell in the table's CSV; the page shows the first (derived_table)
    return [derived_table(flagged, "implausible", "Implausible cells: left out of What to run",
                          "analysis/plausibility.py", [], ctx.table_dir, ctx.background)]


SECTION = Section("implausible", "Implausible cells", build)
