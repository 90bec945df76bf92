"""Each result bundle brought in (docs/bundles.md), with its provenance or why it was refused."""

from __future__ import annotations

import pandas as pd

from stackbench.report import queries
from stackbench.report.section import Context, Section
from stackbench.report.table import Table


def build(ctx: Context) -> list:
    found = queries.bundle_manifests(ctx.results)
    if not len(found):
        return []
    cells = [[r.table_title, r.source, r.node, "" if pd.isna(r.value) else f"{r.value:.0f}",
              "refused" if r.status != "ok" else "accepted", r.reason if r.status != "ok" else r.note]
             for r in found.itertuples(index=False)]
    return [Table("bundles", "Bundles: other owners' runs brought in beside ours", "results/bundle.py",
                  ["bundle", "source", "node", "rows", "state", "provenance, or why refused"], cells,
                  [[None] * 6 for _ in cells],
                  legend=["Their rows carry the source shown (never measured or published); the tables "
                          "above set them beside ours where the basis allows, with every difference under them."])]


SECTION = Section("bundles", "Bundles", build)
