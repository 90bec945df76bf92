"""Write the report: Markdown and CSV per table, and one offline HTML page with plotly charts.

Reads only the results table; it never triggers a measurement. plotly's JavaScript is embedded in the
page (these machines have no internet, so no CDN).
"""

from __future__ import annotations

import csv
import html
import io
from pathlib import Path

import pandas as pd
import plotly.offline

from .. import analysis
from ..config import load_yaml
from ..store import read_results
from . import charts, tables

# The seeds' own comparison tables, regenerated from the published rows, in the order a reader wants them.
SEED_TABLES = [
    "s000-fix-ab", "s000-fourway", "s000-spec-on-off-pool", "s000-short-accept", "s000-127k",
    "s000-accept-by-context", "s000-nospec-prefill", "s000-vocab-fix", "s000-sizing-debug",
    "s001-stages", "s001-sizes", "s001-long-prefill",
    "s002-op", "s002-concurrent", "s002-power-sweep", "s002-per-content", "s002-dflash2-main",
    "s002-dflash2-dev507", "s002-hicache",
    "s003-calculator",
    "s004-mtp-ab", "s004-per-position", "s004-long-profile", "s004-generations", "s004-vram",
]


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


def to_html(table: tables.Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in table.rows)
    notes = ""
    if table.legend:
        notes += "<p class='legend'>" + "<br>".join(html.escape(x) for x in table.legend) + "</p>"
    if table.caveats:
        notes += "<div class='caveats'><b>Basis differs between rows:</b><ul>" + "".join(
            f"<li>{html.escape(c)}</li>" for c in table.caveats) + "</ul></div>"
    return (f"<section class='table' id='{html.escape(table.table_id)}'><h3>{html.escape(table.title)}</h3>"
            f"<p class='ref'>Source: {html.escape(table.ref)}</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{notes}</section>")


STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th:first-child,td:first-child{text-align:left}
.caveats{background:#fff8e1;border-left:4px solid #f0b400;padding:.3em 1em;font-size:.88em}
.legend,.ref{font-size:.85em;color:#555}
.status{background:#eef5ff;border-left:4px solid #3b82f6;padding:.3em 1em}
"""


def build_tables(results: pd.DataFrame) -> tuple[list[tables.Table], list[tables.Table]]:
    nodes = sorted(set(results["node"]))
    four_way = [t for t in (tables.four_way_table(results, n) for n in nodes) if t is not None]
    published_ids = set(results.loc[results["source"] == "published", "table_id"].dropna())
    seed = [tables.seed_table(results, t) for t in SEED_TABLES if t in published_ids]
    return four_way, seed


def node_bandwidths(results: pd.DataFrame, root: Path = Path(".")) -> dict[str, float]:
    """Memory bandwidth per node: the node config's GPU figure x GPU count is not used (TP splits the
    weights); per-GPU bandwidth, or for CPU nodes the host bandwidth measured during the run."""
    configs = {p.stem: load_yaml(p) for p in (root / "configs/nodes").glob("*.yaml")}
    out = {}
    for node in set(results["node"]):
        doc = configs.get(node) or next((d for n, d in sorted(configs.items()) if n.startswith(f"{node}-")), None)
        gpu = (doc or {}).get("hardware", {}).get("gpu", {})
        if gpu.get("bandwidth_gbs"):
            out[node] = gpu["bandwidth_gbs"]
    measured = results[results["metric"] == "host_mem_bandwidth_gbs"].groupby("node")["value"].median()
    for node, value in measured.items():
        out.setdefault(node, value)
    return out


def analysis_tables(results: pd.DataFrame, root: Path = Path(".")) -> list[tables.Table]:
    geometries = analysis.load_geometries(root)
    # (frame, table id, title, how it is computed, caveats); an empty frame makes no table.
    sections = [
        (analysis.roofline(results, node_bandwidths(results, root), geometries), "analysis-roofline",
         "Decode against its bandwidth roofline",
         "memory bandwidth / bytes read per token (weights + KV at that context) x acceptance length",
         ["A CPU node's bandwidth is measured during the run (numpy copy); a GPU node's comes from its config."]),
        (analysis.kv_audit(results, geometries), "analysis-kv-audit", "KV-pool audit: bytes per token, implied vs geometry",
         "engine-reported bytes per token against kv_layers x kv_heads x head_dim x 2 x dtype bytes (configs/models)", []),
        (analysis.power_sweet_spots(results), "analysis-power-sweet-spot", "Throughput and tokens per joule against power cap",
         "sweet spot: the lowest cap within 5% of the best throughput of its sweep", []),
        (analysis.spread_flags(results), "analysis-spread", "Wide spreads and peaks: read the range, not one number",
         "rate figures whose repeats or published range span more than x1.25, and peaks", []),
        (analysis.spec_value_by_context(results), "analysis-spec-by-context",
         "Speculative speed-up over no-spec, by workload and prompt length", "measured single-stream decode rate, same node and stack", []),
    ]
    out = [tables.frame_table(frame.round(4), table_id, title, ref, caveats)
           for frame, table_id, title, ref, caveats in sections if len(frame)]
    return out + comparison_tables(results)


def comparison_tables(results: pd.DataFrame) -> list[tables.Table]:
    """Like-for-like comparison of each measured variant against its stack's no-spec variant."""
    measured = results[(results["source"] == "measured") & results["metric"].isin(["decode_tps", "aggregate_tps", "ttft_s"])]
    out = []
    for (node, stack), group in measured.groupby(["node", "stack"]):
        base = group[group["spec_method"] == "none"]
        for variant in sorted(set(group.loc[group["spec_method"] != "none", "variant"])):
            paired, unpaired = analysis.compare(base, group[group["variant"] == variant], vary="variant")
            if len(paired):
                caveats = [f"{len(unpaired)} rows had no like counterpart"] if len(unpaired) else []
                out.append(tables.frame_table(paired.round(4), f"compare-{node}-{stack}-nospec-vs-{variant}",
                                              f"{node} / {stack}: nospec (A) vs {variant} (B), like rows only",
                                              "analysis.compare: every key and basis field equal except the variant", caveats))
    return out


def write_comparison(baseline: Path, candidate: Path, vary: str, out: Path) -> Path:
    """Compare two result sets (two builds, two dates, two configs) on like rows only."""
    paired, unpaired = analysis.compare(read_results(baseline), read_results(candidate), vary=vary)
    text = to_markdown(tables.frame_table(paired.round(4), "compare", f"{baseline} (A) vs {candidate} (B)", f"like rows, varying {vary}"))
    if len(unpaired):
        text += "\n" + to_markdown(tables.frame_table(unpaired, "unpaired", "Rows without a like counterpart", "the basis fields that differ"))
    out.write_text(text, encoding="utf-8")
    return out


def status_lines(results: pd.DataFrame) -> list[str]:
    """Cells that did not produce a figure, and why: failures are results, never silently dropped."""
    bad = results[(results["source"] == "measured") & (results["status"] != "ok")]
    lines = []
    for _, row in bad.drop_duplicates(["node", "stack", "variant", "workload", "concurrency", "status", "reason"]).iterrows():
        lines.append(f"{row['node']} / {row['stack']} / {row['variant']} / {row['workload']} / c{row['concurrency']}: "
                     f"{row['status']}: {row['reason']}")
    return lines


def write_report(results_path: Path, out_dir: Path) -> list[Path]:
    results = read_results(results_path)
    four_way, seed = build_tables(results)
    derived = analysis_tables(results)
    table_dir = out_dir / "tables"
    table_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for table in four_way + derived + seed:
        for suffix, text in ((".md", to_markdown(table)), (".csv", to_csv(table))):
            path = table_dir / f"{table.table_id}{suffix}"
            path.write_text(text, encoding="utf-8")
            written.append(path)
    status = status_lines(results)
    summary = ["# Stack comparison report", "",
               f"{len(results)} figures: {int((results['source'] == 'measured').sum())} measured here, "
               f"{int((results['source'] == 'published').sum())} transcribed from the seed posts.", ""]
    if status:
        summary += ["## Cells without a figure", "", *[f"- {s}" for s in status], ""]
    summary += ["## Cross-stack tables", ""] + [to_markdown(t) for t in four_way]
    summary += ["## Analysis", ""] + [to_markdown(t) for t in derived]
    summary += ["## The seeds' tables, regenerated from data", ""] + [to_markdown(t) for t in seed]
    summary_path = out_dir / "report.md"
    summary_path.write_text("\n".join(summary), encoding="utf-8")
    written.append(summary_path)
    html_path = out_dir / "index.html"
    html_path.write_text(_page(results, four_way, derived, seed, status), encoding="utf-8")
    written.append(html_path)
    return written


def _page(results: pd.DataFrame, four_way, derived, seed, status) -> str:
    figures = [charts.power_sweep(results), charts.concurrency_scaling(results),
               charts.per_position_acceptance(results), charts.accept_len_by_depth(results),
               charts.spec_speedup(analysis.spec_value_by_context(results))]
    figures += [charts.rate_by_workload(results, node) for node in sorted(set(results["node"]))]
    figure_html = "".join(
        f"<div class='chart'>{fig.to_html(full_html=False, include_plotlyjs=False)}</div>" for fig in figures if fig is not None)
    status_html = ""
    if status:
        status_html = "<div class='status'><h2>Cells without a figure</h2><ul>" + "".join(
            f"<li>{html.escape(s)}</li>" for s in status) + "</ul></div>"
    counts = (f"{len(results)} figures: {int((results['source'] == 'measured').sum())} measured here, "
              f"{int((results['source'] == 'published').sum())} transcribed from the seed posts.")
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Stack comparison report</title>"
        f"<style>{STYLE}</style><script type='text/javascript'>{plotly.offline.get_plotlyjs()}</script></head><body>"
        f"<h1>Stack comparison report</h1><p>{html.escape(counts)} Every table lists, under it, the basis fields that "
        "differ between its rows; figures marked †, ‡ or § are single figures, peaks or ranges.</p>"
        f"{status_html}<h2>Charts</h2>{figure_html}"
        "<h2>Cross-stack tables</h2>" + "".join(to_html(t) for t in four_way) +
        "<h2>Analysis</h2>" + "".join(to_html(t) for t in derived) +
        "<h2>The seeds' tables, regenerated from data</h2>" + "".join(to_html(t) for t in seed) +
        "</body></html>"
    )
