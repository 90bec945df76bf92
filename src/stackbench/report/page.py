"""The report's page and text forms: a table as Markdown, CSV or HTML, and the one offline HTML page
(plotly.js inlined once; these machines have no internet, so no CDN)."""

from __future__ import annotations

import csv
import html
import io
import json
from dataclasses import dataclass
from pathlib import Path

import plotly.offline

from stackbench.report import tables

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
    title_prefix: str = ""  # a rehearsal's "REHEARSAL ...: " (render.REHEARSAL_TITLE)

    @property
    def table_id(self) -> str:
        return f"cells-{self.node}"


def to_markdown(table: tables.Table) -> str:
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


def to_csv(table: tables.Table) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(table.columns)
    for cells, raw in zip(table.rows, table.raw_rows):
        writer.writerow([cell if number is None else number for cell, number in zip(cells, raw)])
    return buffer.getvalue()


def _notes_html(table: tables.Table) -> str:
    notes = ""
    if table.legend:
        notes += "<p class='legend'>" + "<br>".join(html.escape(x) for x in table.legend) + "</p>"
    if table.caveats:
        notes += "<div class='caveats'><b>Basis differs between rows:</b><ul>" + "".join(
            f"<li>{html.escape(c)}</li>" for c in table.caveats) + "</ul></div>"
    return notes


def to_html(table: tables.Table, css_class: str = "table") -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in table.rows)
    return (f"<section class='{css_class}' id='{html.escape(table.table_id)}'><h3>{html.escape(table.title)}</h3>"
            f"<p class='ref'>Source: {html.escape(table.ref)}</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{_notes_html(table)}</section>")


STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th:first-child,td:first-child{text-align:left}
.headline table{font-size:1em}.headline th{background:#f3f6fa}
.headline td:nth-child(-n+3),.headline th:nth-child(-n+3){text-align:left}
.caveats{background:#fff8e1;border-left:4px solid #f0b400;padding:.3em 1em;font-size:.88em}
.legend,.ref{font-size:.85em;color:#555}
.status{background:#eef5ff;border-left:4px solid #3b82f6;padding:.3em 1em}
.pager{font-size:.85em;margin:.3em 0}.pager input{width:18em}
"""


# A paginated, filterable view over rows embedded as JSON: a million-row table never becomes a million-row DOM.
PAGER_JS = """
function stackbenchPager(id){
  const box=document.getElementById(id), data=JSON.parse(box.querySelector('script').textContent);
  const body=box.querySelector('tbody'), info=box.querySelector('.info'), size=50; let page=0, shown=data.rows;
  function fmt(v){if(v===null)return '\\u2014'; if(typeof v!=='number')return v;
    if(Number.isInteger(v)||Math.abs(v)>=100)return String(Math.round(v)); return String(Number(v.toPrecision(3)));}
  function draw(){body.innerHTML=''; for(const r of shown.slice(page*size,(page+1)*size)){const tr=document.createElement('tr');
    for(const v of r){const td=document.createElement('td'); td.textContent=fmt(v); tr.appendChild(td);} body.appendChild(tr);}
    info.textContent=`rows ${shown.length?page*size+1:0}-${Math.min((page+1)*size,shown.length)} of ${shown.length}`;}
  box.querySelector('.filter').addEventListener('input',e=>{const q=e.target.value.toLowerCase();
    shown=data.rows.filter(r=>r.join(' ').toLowerCase().includes(q)); page=0; draw();});
  box.querySelector('.prev').addEventListener('click',()=>{if(page>0){page--;draw();}});
  box.querySelector('.next').addEventListener('click',()=>{if((page+1)*size<shown.length){page++;draw();}});
  draw();
}
"""


def full_markdown(full: FullTable) -> str:
    table = tables.Table(full.table_id, f"{full.title_prefix}All cells on {full.node}", f"{full.csv_path.name}, {full.parquet_path.name}",
                         full.columns, [[tables.format_number(v) if isinstance(v, (int, float)) else (tables.MISSING if v is None else str(v))
                                         for v in row] for row in full.rows[:MARKDOWN_ROWS_PER_NODE]], [], caveats=full.varying)
    text = to_markdown(table)
    if full.total > MARKDOWN_ROWS_PER_NODE:
        text += f"\nFirst {MARKDOWN_ROWS_PER_NODE} of {full.total} rows; all of them are in {full.csv_path.name} and {full.parquet_path.name}.\n"
    return text


def full_html(full: FullTable) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in full.columns)
    data = _json({"rows": full.rows})
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


def _json(value) -> str:
    # allow_nan=False: a NaN would make the page's JSON invalid; charts write gaps as null.
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")


def page_html(intro: str, headlines, correctness, fulls, derived, seed, status, figures, decided,
              heading: str = "Stack comparison report", opening=(), answers=()) -> str:
    figure_html = "".join(
        f"<div class='chart' id='chart-{i}'></div><script>Plotly.newPlot('chart-{i}', "
        f"{_json(fig['data'])}, {_json(fig['layout'])}, {{responsive: true}})</script>" for i, fig in enumerate(figures))
    status_html = ""
    if status:
        status_html = "<div class='status'><h2>Cells without a figure</h2><ul>" + "".join(
            f"<li>{html.escape(s)}</li>" for s in status) + "</ul></div>"
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Stack comparison report</title>"
        f"<style>{STYLE}</style><script type='text/javascript'>{plotly.offline.get_plotlyjs()}</script>"
        f"<script>{PAGER_JS}</script></head><body>"
        f"<h1>{html.escape(heading)}</h1>"
        + ("<h2>The answer: what to run on each node</h2>" + "".join(to_html(t) for t in answers) if answers else "")
        + ("<h2>Time budget of the real run</h2>" + "".join(to_html(t) for t in opening) if opening else "")
        + "<h2>Headline: one row per stack variant, per node</h2>"
        + "".join(to_html(t, "headline") for t in headlines) +
        f"<p>{html.escape(intro)} Every table lists, under it, the basis fields that differ between its rows; "
        "figures marked †, ‡ or § are single figures, peaks or ranges.</p>"
        + ("<h2>What to run</h2>" + "".join(to_html(t) for t in decided) if decided else "")
        + ("<h2>Correctness beside speed</h2>" + "".join(to_html(t) for t in correctness) if correctness else "") +
        f"{status_html}<h2>Full tables</h2>" + "".join(full_html(f) for f in fulls) +
        f"<h2>Charts</h2>{figure_html}"
        "<h2>Analysis</h2>" + "".join(to_html(t) for t in derived) +
        "<h2>The seeds' tables, regenerated from data in each post's own layout</h2>" + "".join(to_html(t) for t in seed) +
        "</body></html>"
    )
