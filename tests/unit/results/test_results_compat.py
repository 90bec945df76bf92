"""Every result the default produced before the stage packages (issue 23) is still produced: the contract's
columns, and the default's cells as its plan expands them. The fixture was captured from a real run of the
default (tests/fixtures/results/local-cpu-default-before-packages.json); `missing_from` also checks a
results.parquet measured now, cell by cell and metric by metric (docs/architecture.md)."""

import json

import pandas as pd
from paths import ROOT

from stackbench.plan import expand, launchspec
from stackbench.results import store

BEFORE = json.loads((ROOT / "tests/fixtures/results/local-cpu-default-before-packages.json").read_text())


def cell_key(variant: str, workload: str, concurrency, rate) -> str:
    load = f"c{int(concurrency)}" if pd.notna(concurrency) else (f"r{rate:g}" if pd.notna(rate) else "launch")
    return f"{variant}/{workload}/{load}"


def missing_from(results: pd.DataFrame) -> dict[str, list[str]]:
    """Cells and metrics of the fixture that a measured results table lacks."""
    measured = results[results["source"] == "measured"]
    now: dict[str, set[str]] = {}
    for row in measured[["variant", "workload", "concurrency", "request_rate", "metric"]].itertuples(index=False):
        now.setdefault(cell_key(row.variant, row.workload, row.concurrency, row.request_rate), set()).add(row.metric)
    return {cell: sorted(set(metrics) - now.get(cell, set())) for cell, metrics in BEFORE["cells"].items()
            if set(metrics) - now.get(cell, set())}


def test_the_contract_keeps_every_column_it_had():
    assert set(BEFORE["columns"]) <= set(store.COLUMNS)


# The workloads the default now measures on its no-spec launch alone (issue 38: a six-minute budget).
NOSPEC_ONLY = {"long-prefill", "multi-turn"}
# The default's structured-output class, renamed where its texts changed (issue 66): json's public set (evals' JSON
# Patch, about 2,150 tokens a prompt) overflows the default's 4,096-token pool at c2, so sql (evals' Spider) measures
# structured output in its place, at the same loads.
RENAMED = {"json": "sql"}


def as_spec(cell: str) -> str:
    """A cell with its speculative variant read as 'spec': the default's draft-model variants gave way to the
    n-gram drafter (issue 38), and every cell a speculative variant measured is still measured by one, or
    by no-spec where the workload moved there."""
    variant, rest = cell.split("/", 1)
    workload, load = rest.split("/", 1)
    rest = f"{RENAMED.get(workload, workload)}/{load}"
    if variant == "nospec" or rest.split("/")[0] in NOSPEC_ONLY:
        return f"nospec/{rest}"
    return f"spec/{rest}"


def test_the_default_plan_still_has_every_cell_it_measured():
    cfg, nodes = expand.load_plan(ROOT)
    planned = {as_spec(cell_key(launch.variant, c.workload.name, c.concurrency, c.rate))
               for launch in nodes[0].launches for c in launchspec.cells_of(nodes[0], launch)}
    measured_cells = {as_spec(cell) for cell in BEFORE["cells"] if not cell.endswith("/launch")}
    assert measured_cells <= planned


def test_the_comparison_names_what_a_results_table_lacks():
    row = {"source": "measured", "variant": "nospec", "workload": "code", "concurrency": 1, "request_rate": None,
           "metric": "decode_tps"}
    missing = missing_from(pd.DataFrame([row]))
    assert "ttft_s" in missing["nospec/code/c1"] and "decode_tps" not in missing["nospec/code/c1"]
    assert "draft-n2/server/launch" in missing
