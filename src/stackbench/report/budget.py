"""A rehearsal's time budget of the real run (budget.json, written by stackbench.rehearsal.budget) as the
tables its report opens with: GPU-node hours per launch and per workload as low-high ranges, the most
expensive cells, and what the per-run cap lists save against sweeping every cap on every launch."""

from __future__ import annotations

import json
from pathlib import Path

from stackbench.report.tables import Table, format_number

BASIS = ("the rehearsal's seconds x its time scale (the stand-in's modeled pace), each cell x the real run's repeats "
         "plus its warm-up requests; each start's ready time (start-up and model load) and an image's pull counted. "
         "Low: the stand-in's pace; high: engines at 40% of the bandwidth roofline instead of 70%, a slow disk and pull "
         "(rehearsal/budget.py).")


def hours(pair: list[float]) -> str:
    return f"{format_number(pair[0])}–{format_number(pair[1])} h"


def budget_tables(path: Path) -> list[Table]:
    doc = json.loads(path.read_text())
    launches = [[x["launch"], x["mode"], str(x["repeats"]), str(x["cells"]), "/".join(f"{c:g}" for c in x["caps"]) or "none",
                 hours(x["start_h"]), hours(x["total_h"])] for x in doc["launches"]]
    launches.append(["all launches", "", "", str(sum(x["cells"] for x in doc["launches"])), "", "", hours(doc["total_h"])])
    legend = [BASIS]
    extra = doc["caps_everywhere"]
    if extra["caps"]:
        share = extra["extra_h"][0] / doc["total_h"][0] if doc["total_h"][0] else 0.0
        legend.append(f"Sweeping the caps {'/'.join(f'{c:g}' for c in extra['caps'])} W on every launch would add "
                       f"{hours(extra['extra_h'])} (+{share:.0%}); the per-run cap lists save that.")
    return [
        Table("budget-launches", "Time budget of the real run: GPU-node hours per launch", "rehearsal/budget.py",
              ["launch", "mode", "repeats", "cells", "caps W", "start-up + load", "total"], launches,
              [[None] * 7 for _ in launches], legend=legend),
        Table("budget-workloads", "Time budget of the real run: GPU-node hours per workload, all launches",
              "rehearsal/budget.py", ["workload", "hours"], [[w["workload"], hours(w["total_h"])] for w in doc["workloads"]],
              [[None, None] for _ in doc["workloads"]]),
        Table("budget-top-cells", "Time budget of the real run: the most expensive cells", "rehearsal/budget.py",
              ["launch", "cell", "hours"], [[c["launch"], c["cell"], hours(c["total_h"])] for c in doc["top_cells"]],
              [[None] * 3 for _ in doc["top_cells"]]),
    ]
