"""The report's table type and its printers: every table (headline, the seeds', derived) is a Table, each cell
formatted by the one formatter (format_cell) with the caveats of its own rows (results/basis.py), and printed
as Markdown, CSV or HTML here.

A Table keeps, per display row, the numbers behind its cells, so its CSV carries figures, not their text.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
from dataclasses import dataclass, field

import pandas as pd

from stackbench.results import basis
from stackbench.results.store import row_tuples

MISSING = "—"
# What format_cell reads from a record.
CELL_FIELDS = ["source", "metric", "value", "value_min", "value_max", "stat", "status", "note", "concurrency"]


@dataclass
class Table:
    table_id: str
    title: str
    ref: str
    columns: list[str]
    rows: list[list[str]]
    raw_rows: list[list[float | None]]  # the numbers behind the cells, for CSV
    caveats: list[str] = field(default_factory=list)
    legend: list[str] = field(default_factory=list)
    written_whole: bool = False  # True: its CSV and Parquet come from the whole frame, written in the background


def present(value) -> bool:
    return value is not None and value is not pd.NA and not (isinstance(value, float) and math.isnan(value))


def format_number(value, exact: bool = False) -> str:
    """Three significant digits (171.83 -> 172, 0.39421 -> 0.394, 2.8113 -> 2.81); whole numbers of 100
    and more print whole. `exact` keeps a transcribed figure as its post wrote it (171.8 stays 171.8)."""
    if not present(value):
        return ""
    value = float(value)
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if exact:
        return f"{value:g}" if abs(value) < 1e6 else str(int(round(value)))
    if value.is_integer() or abs(value) >= 100:
        return str(int(round(value)))
    return f"{value:.3g}"


def format_cell(record, scale: float = 1.0, suffix: str = "", markers: bool = True) -> str:
    """One figure as a table shows it: the value, its spread or range, a marker for its stat, or its status."""
    status = record.get("status") or "ok"
    if status != "ok" and not present(record.get("value")):
        return status
    exact = record.get("source") == "published"

    def number(x):
        return format_number(x * scale if present(x) else x, exact) + suffix

    value, low, high = record.get("value"), record.get("value_min"), record.get("value_max")
    if record.get("stat") == "range" and present(low):
        text = f"{format_number(low * scale, exact)}–{number(high)}"
    elif present(low):
        text = f"{number(value)} ({format_number(low * scale, exact)}–{format_number(high * scale, exact)})"
    else:
        text = number(value)
    if status != "ok":
        text = f"{status}: {text}"
    if not markers:
        return text
    return text + basis.stat_marker(record.get("stat")) + (basis.WIDE_MARKER if basis.is_wide(record) else "")



def finish(table: Table, records: pd.DataFrame, axes: tuple[str, ...], extra_caveats: list[str] = ()) -> Table:
    table.caveats = [c.text() for c in basis.caveats(records, "row_no", axes)] + list(extra_caveats)
    wide = records["note"].fillna("").astype(str).str.startswith(basis.WIDE_NOTE).any()
    table.legend = [_peak_line(line, records) for line in basis.marker_legend(records["stat"].tolist(), wide=bool(wide))]
    return table


RATE_UNITS = ("tok/s", "req/s")


def _peak_line(line: str, records: pd.DataFrame) -> str:
    """The peak marker's line in the words of the metrics it marks: a peak of memory or power is the highest
    reading, not a throughput."""
    marker, words = basis.STAT_MARKERS["peak"]
    if not line.startswith(f"{marker} ") or "unit" not in records.columns:
        return line
    units = set(records.loc[records["stat"] == "peak", "unit"].dropna())
    if not units or units <= set(RATE_UNITS):
        return line
    named = ", ".join(sorted(units))
    return (f"{marker} peak: the highest reading ({named}), not a typical one" if not units & set(RATE_UNITS)
            else f"{marker} peak, not typical ({named})")



def frame_table(frame: pd.DataFrame, table_id: str, title: str, ref: str, caveats: list[str] | None = None) -> Table:
    """A derived table (analysis output) in the same shape as the others, for Markdown, CSV and HTML."""
    columns = [str(c) for c in frame.columns]
    rows, raw_rows = [], []
    for record in row_tuples(frame):
        cells, raw = [], []
        for value in record:
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            cells.append(format_number(value) if number else ("" if not present(value) else str(value)))
            raw.append(value if number and present(value) else None)
        rows.append(cells)
        raw_rows.append(raw)
    return Table(table_id, title, ref, columns, rows, raw_rows, caveats=list(caveats or []))


def to_markdown(table: Table) -> str:
    def line(cells):
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [f"### {table.title}", "", f"Source: {table.ref}", "", line(table.columns),
           line(["---"] * len(table.columns))]
    out += [line(row) for row in table.rows]
    if table.legend:
        out += ["", *[f"{item}  " for item in table.legend]]
    if table.caveats:
        out += ["", "**Basis differs between rows:**", "", *[f"- {c}" for c in table.caveats]]
    return "\n".join(out) + "\n"


def to_csv(table: Table) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(table.columns)
    for cells, raw in zip(table.rows, table.raw_rows):
        writer.writerow([cell if number is None else number for cell, number in zip(cells, raw)])
    return buffer.getvalue()


def _notes_html(table: Table) -> str:
    notes = ""
    if table.legend:
        notes += "<p class='legend'>" + "<br>".join(html.escape(x) for x in table.legend) + "</p>"
    if table.caveats:
        notes += "<div class='caveats'><b>Basis differs between rows:</b><ul>" + "".join(
            f"<li>{html.escape(c)}</li>" for c in table.caveats) + "</ul></div>"
    return notes


def to_html(table: Table, css_class: str = "table") -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in table.rows)
    return (f"<section class='{css_class}' id='{html.escape(table.table_id)}'><h3>{html.escape(table.title)}</h3>"
            f"<p class='ref'>Source: {html.escape(table.ref)}</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{_notes_html(table)}</section>")


def script_json(value) -> str:
    """A value as JSON inside the page's <script> elements."""
    # allow_nan=False: a NaN would make the page's JSON invalid; charts write gaps as null.
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")
