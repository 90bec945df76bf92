"""A node's full per-cell table: every cell of the node, one row per cell and one column per metric, written
whole to CSV and Parquet by DuckDB (report/queries.py) and shown paginated in the page and by its first rows in
report.md."""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from stackbench.report import queries
from stackbench.report.queries import Results
from stackbench.report.table import MISSING, Table, format_number, script_json, to_markdown
from stackbench.results import basis

MARKDOWN_ROWS_PER_NODE = 200  # rows of a node's full table in report.md; all of them are in its CSV and Parquet


@dataclass
class FullTable:
    """One node's full per-cell table: written whole to CSV and Parquet, shown paginated in the page."""

    node: str
    columns: list[str]
    rows: list[list]  # the first rows, for the page and report.md
    total: int
    csv_path: Path
    parquet_path: Path
    varying: list[str]  # basis fields whose values differ between the table's rows
    title_prefix: str = ""  # a rehearsal's "REHEARSAL ...: " (section.REHEARSAL_TITLE)

    @property
    def table_id(self) -> str:
        return f"cells-{self.node}"


def full_markdown(full: FullTable) -> str:
    table = Table(full.table_id, f"{full.title_prefix}All cells on {full.node}", f"{full.csv_path.name}, {full.parquet_path.name}",
                         full.columns, [[format_number(v) if isinstance(v, (int, float)) else (MISSING if v is None else str(v))
                                         for v in row] for row in full.rows[:MARKDOWN_ROWS_PER_NODE]], [], caveats=full.varying)
    text = to_markdown(table)
    if full.total > MARKDOWN_ROWS_PER_NODE:
        text += f"\nFirst {MARKDOWN_ROWS_PER_NODE} of {full.total} rows; all of them are in {full.csv_path.name} and {full.parquet_path.name}.\n"
    return text


def full_html(full: FullTable) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in full.columns)
    data = script_json({"rows": full.rows})
    more = (f" The page holds the first {len(full.rows)} of {full.total} rows." if full.total > len(full.rows) else "")
    caveats = ("<div class='caveats'><b>Basis differs between rows:</b><ul>" + "".join(
        f"<li>{html.escape(c)}</li>" for c in full.varying) + "</ul></div>") if full.varying else ""
    return (f"<section class='full' id='{html.escape(full.table_id)}'><h3>{html.escape(full.title_prefix)}All cells on {html.escape(full.node)}</h3>"
            f"<p class='ref'>Every row: {html.escape(full.csv_path.name)}, {html.escape(full.parquet_path.name)}.{more}</p>"
            "<div class='pager'><input class='filter' placeholder='filter rows'> <button class='prev'>previous</button> "
            "<button class='next'>next</button> <span class='info'></span></div>"
            f"<table><thead><tr>{head}</tr></thead><tbody></tbody></table>{caveats}"
            f"<script type='application/json'>{data}</script></section>"
            f"<script>stackbenchPager('{html.escape(full.table_id)}')</script>")


# Rows of the full tables embedded in the page, shared among the nodes (at least 200 each) so the page stays
# under 10 MB however many nodes there are; all rows are in each node's CSV and Parquet files.
PAGE_ROWS_TOTAL = 4000


def varying_basis(results: Results) -> dict[str, list[str]]:
    """Per node, the basis fields that differ between its rows, with their values: the full table's caveat.
    DuckDB reduces the rows to each node's distinct basis combinations, and basis.caveats, the one rule for
    what differs, reads those as one block per node."""
    keys = queries.FULL_KEYS + ["node", "metric"]
    combos = queries.basis_combinations(results, [f for f in basis.WHY_IT_MATTERS if f not in keys])
    return {node: [c.text() for c in basis.caveats(group.assign(row_no=1), axes=keys)]
            for node, group in combos.groupby("node", sort=False)}


def full_tables(source: Path | pd.DataFrame, nodes: list[str], table_dir: Path) -> list[FullTable]:
    """Every node's full per-cell table, on a connection of its own (this runs on the report's background thread)."""
    results = Results(source)
    queries.pivot_cells(results)
    page_rows = max(200, PAGE_ROWS_TOTAL // max(1, len(nodes)))
    varying = varying_basis(results)
    out = []
    for node in nodes:
        csv_path, parquet_path = table_dir / f"cells-{node}.csv", table_dir / f"cells-{node}.parquet"
        written = queries.copy_cells(results, node, csv_path, parquet_path, page_rows)
        if written:
            columns, rows, total = written
            out.append(FullTable(node, columns, rows, total, csv_path, parquet_path, varying.get(node, [])))
    return out
