"""Every cell a plausibility check flagged at collect (analysis/plausibility.py), ours and theirs alike: left out
of What to run, and listed here with what was true of its host during it. A rehearsal's list says, beside its cells,
why a stand-in's figure can cross a bound its pace never does."""

from __future__ import annotations

from stackbench.report import queries
from stackbench.report.derived import derived_table
from stackbench.report.section import Context, Section

# Why a rehearsal's cell can be flagged: the stand-in paces decode under its roofline and draws under every limit
# (rehearsal/standin.py, simgpu.py), so what crosses a bound is this host's timing (docs/rehearsal-planning.md).
STANDIN_WHY = ("A stand-in's figure is this host's timing x the cell's time scale, not an engine's: the stand-in paces "
               "each decode under its roofline (0.7 of it, or a seed post's fit) and draws under every power limit, so a "
               "flagged cell is its client's timestamps on this host, late where the host was busy (the column says "
               "which) or where a reply decoded in a few ms here (short replies x the time scale; such a cell runs on a "
               "slower clock, rehearsal/standin.py cell_time_scale), or its mean power from the few 0.5 s samples a cell "
               "of a fraction of a second here takes, against an energy counter that holds its whole window. The real "
               "run measures these cells afresh.")


def flagged_table(ctx: Context, caveats: list[str]) -> list:
    flagged = queries.implausible_cells(ctx.results)
    if not len(flagged):
        return []
    # every flagged cell in the table's CSV; the page shows the first (derived_table)
    table = derived_table(flagged, "implausible", "Implausible cells: left out of What to run", "analysis/plausibility.py",
                          [], ctx.table_dir, ctx.background)
    table.legend += caveats
    return [table]


def build(ctx: Context) -> list:
    return flagged_table(ctx, [])


def rehearsed(ctx: Context) -> list:
    return flagged_table(ctx, [STANDIN_WHY])


SECTION = Section("implausible", "Implausible cells", build, rehearsal=rehearsed)
