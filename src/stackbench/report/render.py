"""Write the report: report.md, one offline HTML page, and every table as Markdown, CSV and Parquet.

Reads only the results table and the seed posts' table layouts (data/published); it never triggers a
measurement and never reads node configs (each node's memory bandwidth is a row in the results).
Selections and aggregates run in DuckDB over the Parquet file, so the headline, the analysis sections
and the charts read a few thousand rows however many the results hold. The full per-cell tables go out
as CSV and Parquet and, in the page, as a paginated, filterable table. plotly.js is inlined once (these
machines have no internet, so no CDN).

The queries are report/queries.py, the page and the text forms report/page.py; this module runs them in
one pass and writes the files.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa

from stackbench import analysis
from stackbench.analysis import hoststate, levels, quality
from stackbench.config import default_decision
from stackbench.config.model import Decision
from stackbench.report import budget, charts, decisions, pairing, tables, usecase
from stackbench.report.layouts import Layout, load_layouts
from stackbench.report.page import FullTable, full_markdown, page_html, to_csv, to_markdown
from stackbench.report.queries import (
    Results,
    caps_not_applied,
    correctness_input,
    cross_stack_input,
    decide_input,
    divergence_input,
    geometry_not_read,
    headline_input,
    kept_launches,
    ladder_input,
    method_input,
    pairing_input,
    pareto_input,
    power_not_measured,
    probes_off,
    quality_input,
    sql_in,
    sql_text,
    status_lines,
)
from stackbench.results import basis, metrics
from stackbench.results.judged import single_stream_sql
from stackbench.results.kept import kept_rule, kept_runs
from stackbench.results.metrics import HOST_BUSY_METRIC
from stackbench.results.store import MEASURED, MEASURED_SQL, read_results

# Rows of the full tables embedded in the page, shared among the nodes (at least 200 each) so the page stays
# under 10 MB however many nodes there are; all rows are in each node's CSV and Parquet files.
PAGE_ROWS_TOTAL = 4000
# Rows of a derived (analysis) table shown in the page and report.md; all of them are in its CSV and Parquet.
DERIVED_ROWS_SHOWN = 200
FULL_KEYS = ["source", "ref", "stack", "variant", "spec_tokens", "power_cap_w", "workload", "concurrency"]
# What the analysis functions read (the metric registry's `analysed`), besides the model's geometry_* figures.
ANALYSIS_METRICS = metrics.names(analysed=True)
# First-token times read better in ms: the full tables show them so (column renamed with its unit).
MILLISECONDS = {"ttft_s": ("ttft_ms", 1000), "ttfc_s": ("ttfc_ms", 1000)}
# Bookkeeping columns the analysis functions never read: left in DuckDB, not converted to pandas (a
# geometry row's note, which says where the geometry came from, is the one note they read).
NOT_ANALYSED = ("reason", "table_id", "table_title", "row_label", "col_label", "note", "unit", "repeat_values")
GEOMETRY_NOTE = "case when metric like 'geometry_%' then note end as note"
CHART_METRICS = metrics.names(charted=True)
CHART_COLUMNS = ("source", "ref", "node", "stack", "variant", "spec_tokens", "power_cap_w", "workload", "concurrency",
                 "metric", "value", "value_min", "value_max", "status")


# The correctness section's columns: (title, column of analysis.correctness_by_variant).
CORRECTNESS_COLUMNS = [("stack", "stack"), ("variant", "variant"), ("smoke score", "smoke_score"),
                       ("needle pass", "needle_pass"), ("needle prompt tokens", "needle_prompt_tokens"),
                       ("cache consistent", "cache_consistent"), ("regressions passed", "regression_score"),
                       ("output agreement", "output_agreement"),
                       ("first divergence", "first_divergence_token"), ("output length ok (lowest)", "output_len_ok"),
                       ("repetition ratio (highest)", "repetition_ratio"), ("loop share (highest cell)", "looping"),
                       ("cells with loops", "looping_in"), ("accuracy [95% CI]", "accuracy_text"),
                       ("answer agreement", "answer_agreement"), ("noise floor (no-spec at c2)", "noise_floor"),
                       ("outputs", "outputs")]


def correctness_tables(by_variant: pd.DataFrame, nodes: list[str]) -> list[tables.Table]:
    """Per node, the probes beside each variant: smoke, needle, cache consistency, agreement with no-spec."""
    out = []
    for node in nodes:
        mine = by_variant[by_variant["node"] == node]
        if mine.empty:
            continue
        frame = mine[[c for _, c in CORRECTNESS_COLUMNS]].set_axis([t for t, _ in CORRECTNESS_COLUMNS], axis=1)
        out.append(tables.frame_table(
            frame, f"correctness-{node}", f"Correctness beside speed on {node}", "probes workload and every measured cell",
            ["smoke score: share of the smoke questions answered by their rule; needle pass and cache consistent: 1 or 0;"
             " output agreement: mean common prefix with the no-spec launch's greedy output (1 = identical); blank: not measured.",
             "verdicts: loops are charged only on the probes' greedy outputs, prompt by prompt, where a variant's output loops "
             "and no-spec's on the same prompt does not (identical outputs never); a cell's loop share is reported for "
             f"every variant alike, never a verdict; {analysis.correctness.TOLERANCE}; {analysis.correctness.NOISE_RULE}."]))
    return out


def ceiling_percents(roofline: pd.DataFrame) -> dict[tuple, float]:
    """(node, stack, variant) -> median share of its decode ceiling over its measured workloads."""
    if roofline.empty:
        return {}
    measured = roofline[roofline["source"].isin(MEASURED)]
    return measured.groupby(["node", "stack", "variant"])["percent_of_ceiling"].median().to_dict()


class Background:
    """One worker thread for the report's DuckDB-bound jobs (the full per-cell tables, the analysis files)
    while the main thread runs the pandas analyses: DuckDB releases the GIL, so on a 2-core host the two
    overlap. Jobs run in the order given; `wait` raises the first one's error."""

    def __init__(self):
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="report")
        self.pending: list[Future] = []

    def submit(self, fn, *args) -> Future:
        future = self.pool.submit(fn, *args)
        self.pending.append(future)
        return future

    def wait(self) -> None:
        try:
            for future in self.pending:
                future.result()
        finally:
            self.pool.shutdown()


def _copy_out(table: pa.Table, paths: list[tuple[Path, str]]) -> None:
    con = duckdb.connect()
    con.register("derived", table)
    for path, options in paths:
        con.execute(f"copy derived to '{sql_text(str(path))}' ({options})")


def derived_table(frame: pd.DataFrame, table_id: str, title: str, ref: str, caveats: list[str], table_dir: Path,
                  background: Background) -> tables.Table:
    """An analysis table: written whole as CSV and Parquet by DuckDB (from Arrow, faster than from pandas)
    in the background, shown as its first rows."""
    background.submit(_copy_out, pa.Table.from_pandas(frame, preserve_index=False),
                      [(table_dir / f"{table_id}.csv", "header"), (table_dir / f"{table_id}.parquet", "format parquet")])
    table = tables.frame_table(frame.head(DERIVED_ROWS_SHOWN), table_id, title, ref, caveats)
    table.written_whole = True  # the main thread writing its CSV too would race the background's COPY to the same file
    if len(frame) > DERIVED_ROWS_SHOWN:
        table.legend.append(f"First {DERIVED_ROWS_SHOWN} of {len(frame)} rows; all of them are in {table_id}.csv and {table_id}.parquet.")
    return table


def analysis_tables(frame: pd.DataFrame, roofline: pd.DataFrame, spec_by_context: pd.DataFrame,
                    table_dir: Path, background: Background, caps_refused: list[str] = ()) -> list[tables.Table]:
    """The analysis section; `caps_refused` (one line per node whose GPU refused a cap) goes under the cap table."""
    # (frame, table id, title, how it is computed, caveats); an empty frame makes no table.
    sections = [
        (roofline, "analysis-roofline", "Decode against its bandwidth roofline",
         "memory bandwidth / bytes read per token (weights + KV at that context) x acceptance length",
         ["Each node's bandwidth comes from its results rows: measured on CPU nodes (numpy copy), the GPU's figure on GPU nodes."]),
        (analysis.kv_audit(frame), "analysis-kv-audit", "KV-pool audit: bytes per token, implied vs geometry",
         "engine-reported bytes per token against kv_layers x kv_heads x head_dim x 2 x dtype bytes", []),
        (decisions.power_sweet_spots(frame), "analysis-power-sweet-spot", "Throughput and tokens per joule against power cap",
         "power_cap_w is W per GPU, the stock limit (the uncapped cell, at the limit found at the launch's start) "
         "among them; sweet spot: the lowest within 5% of the best throughput of its sweep, over the caps the GPU "
         "enforced; a rehearsal names none (stand-in figures)",
         list(caps_refused)),
        (analysis.spread_flags(frame), "analysis-spread", "Wide spreads and peaks: read the range, not one number",
         "rate figures whose repeats or published range span more than x1.25, and peaks", []),
        (analysis.acceptance_by_workload(frame), "analysis-request-acceptance", "Acceptance per request, by content class",
         "per-request accepted / drafted (llama.cpp timings.draft_n*, SGLang spec_tokens_details): token-weighted = sum "
         "accepted / sum drafted; request-weighted = mean of each request's ratio; p10, median, p90 over requests; beside "
         "the cell's rate pooled from /metrics counters", []),
        (spec_by_context, "analysis-spec-by-context",
         "Speculative speed-up over no-spec, by workload and prompt length", "measured single-stream decode rate, same node and stack", []),
    ]
    out = [derived_table(section, table_id, title, ref, caveats, table_dir, background)
           for section, table_id, title, ref, caveats in sections if len(section)]
    return out + comparison_tables(frame, table_dir, background)


def comparison_tables(frame: pd.DataFrame, table_dir: Path, background: Background) -> list[tables.Table]:
    """Like-for-like comparison of every measured speculative variant against the no-spec variant of its
    node and stack: one analysis.compare call (node and stack are among the like columns, so pairs never
    cross them), one table."""
    measured = frame[frame["source"].isin(MEASURED) & frame["metric"].isin(["decode_tps", "aggregate_tps", "ttft_s"])]
    base, speculative = measured[measured["spec_method"] == "none"], measured[measured["spec_method"] != "none"]
    if base.empty or speculative.empty:
        return []
    title, how = "No-spec (A) vs each speculative variant (B), like rows only", \
        "analysis.compare: every key and basis field equal except the variant"
    paired, unpaired = analysis.compare(base, speculative, vary="variant")
    if paired.empty:
        return []
    caveats = [f"{len(unpaired)} rows had no like counterpart"] if len(unpaired) else []
    return [derived_table(paired, "compare-nospec-vs-speculative", title, how, caveats, table_dir, background)]


def cross_stack_tables(rows: pd.DataFrame, table_dir: Path, background: Background) -> list[tables.Table]:
    """Per weights family, the matrix of greedy agreement between its no-spec launches across stacks, nodes
    and quantizations (analysis.cross_stack_matrices), as an analysis table (Markdown, HTML, CSV)."""
    out = []
    for family, matrix in analysis.cross_stack_matrices(rows):
        slug = "".join(c if c.isalnum() or c in "-." else "-" for c in family).strip("-").lower()
        table = derived_table(
            matrix, f"agreement-across-stacks-{slug}", f"Greedy agreement across stacks: {family}",
            "probes workload, greedy, thinking off, the same prompts on every launch; no-spec launches measured here "
            "whose node files state this weights family (models.<key>.weights)", [], table_dir, background)
        table.legend.append("Cell: mean common prefix of the compared launch's greedy output with the reference's, over "
                            "the reference's length (1 = identical), and the earliest token (or word, where an engine "
                            "did not stream one token per chunk) where they differ; blank: not compared.")
        out.append(table)
    return out


def quality_tables(rows: pd.DataFrame, by_variant: pd.DataFrame, table_dir: Path, background: Background) -> list[tables.Table]:
    """Per weights family, its no-spec launches' accuracy with intervals and how often they answer alike
    (analysis.quality_tables), saying in words which differences lie inside the intervals."""
    out = []
    for family, frame, words in analysis.quality_tables(rows, by_variant):
        slug = "".join(c if c.isalnum() or c in "-." else "-" for c in family).strip("-").lower()
        table = derived_table(frame, f"quality-across-stacks-{slug}", f"Quality across stacks: {family}",
                              "accuracy workload, greedy, the same seeded questions on every launch; no-spec launches "
                              "whose node files state this weights family", [], table_dir, background)
        table.legend += ["Accuracy: share of the questions whose last number equals the reference, Wilson 95% interval; "
                         "same answers: share of the questions two launches answered with the same number.", *words]
        out.append(table)
    return out


def divergence_tables(rows: pd.DataFrame, table_dir: Path, background: Background) -> list[tables.Table]:
    """Per weights family, each launch's next-token divergence from the node's quality reference on one fixed
    text (analysis.divergence_tables), with what each figure is and what the top-k bound means."""
    out = []
    for family, frame, words in analysis.divergence_tables(rows):
        slug = "".join(c if c.isalnum() or c in "-." else "-" for c in family).strip("-").lower()
        table = derived_table(frame, f"divergence-from-reference-{slug}", f"Divergence from the quality reference: {family}",
                              "divergence workload: one fixed text scored once per launch, as llama-perplexity cuts it "
                              "(second half of each chunk); the reference and what scored it in each row", [], table_dir, background)
        table.legend += ["Mean KLD: KL(reference || launch) per position, exact over the full vocabulary where "
                         "llama-perplexity scored both sides, else a lower bound over the union of both top-k lists (the "
                         "KLD basis column says which, with k and the tail mass); 95% CI: t over the chunk means. Same "
                         "top token: share of positions whose most likely token is the reference's (the wider of t over "
                         "chunks and Wilson 95%). RMS Δp: "
                         "of the actual next token's probability. Perplexity: exp(mean NLL) of the actual tokens. "
                         "docs/quality.md says what each can and cannot see.", *words]
        out.append(table)
    return out


def write_comparison(baseline: Path, candidate: Path, vary: str, out: Path) -> Path:
    """Compare two result sets (two builds, two dates, two configs) on like rows only."""
    paired, unpaired = analysis.compare(read_results(baseline), read_results(candidate), vary=vary)
    text = to_markdown(tables.frame_table(paired, "compare", f"{baseline} (A) vs {candidate} (B)", f"like rows, varying {vary}"))
    if len(unpaired):
        text += "\n" + to_markdown(tables.frame_table(unpaired, "unpaired", "Rows without a like counterpart", "the basis fields that differ"))
    out.write_text(text, encoding="utf-8")
    return out


def pivot_cells(results: Results) -> None:
    """Every node's cells, one row per cell (source, run or post, stack, variant, depth, cap, workload,
    concurrency) and one column per metric (the median of its rows; seconds shown as ms), pivoted once by
    DuckDB into the table `cells`."""
    keys = ", ".join(["node"] + FULL_KEYS)
    renamed = " ".join(f"when '{sql_text(m)}' then '{sql_text(name)}'" for m, (name, _) in MILLISECONDS.items())
    scaled = " ".join(f"when '{sql_text(m)}' then {factor}" for m, (_, factor) in MILLISECONDS.items())
    results.con.execute(f"""create or replace temp table cells as pivot (
        select {keys}, case metric {renamed} else metric end as metric, value * case metric {scaled} else 1 end as value
        from results where status = 'ok' and value is not null and not isnan(value) and metric <> 'bundle_manifest')
        on metric using median(value) group by {keys}""")


def full_table(results: Results, node: str, table_dir: Path, page_rows: int, varying: list[str]) -> FullTable | None:
    """One node's cells from `cells`, only the metric columns it has; DuckDB writes the files, so the
    table's size never passes through Python rows."""
    columns = results.frame("select * from cells where node = ? limit 1", [node])
    if columns.empty:
        return None
    present = results.frame("select " + ", ".join(f"count(\"{c}\") as \"{c}\"" for c in columns.columns[len(FULL_KEYS) + 1:])
                            + " from cells where node = ?", [node]).iloc[0]
    metrics = [c for c, n in present.items() if n > 0]
    query = (f"select {', '.join(FULL_KEYS)}, {', '.join(chr(34) + m + chr(34) for m in metrics)} from cells "
             f"where node = '{sql_text(node)}' order by source, stack, variant, spec_tokens, power_cap_w, workload, concurrency, ref")
    csv_path, parquet_path = table_dir / f"cells-{node}.csv", table_dir / f"cells-{node}.parquet"
    results.con.execute(f"copy ({query}) to '{sql_text(str(parquet_path))}' (format parquet)")
    results.con.execute(f"copy (select * from read_parquet('{sql_text(str(parquet_path))}')) to '{sql_text(str(csv_path))}' (header)")
    total = results.frame(f"select count(*) as n from read_parquet('{sql_text(str(parquet_path))}')")["n"].iloc[0]
    head = results.con.sql(f"select * from read_parquet('{sql_text(str(parquet_path))}') limit {page_rows}")
    return FullTable(node, head.columns, [list(row) for row in head.fetchall()], int(total), csv_path, parquet_path,
                     varying)


def varying_basis(results: Results) -> dict[str, list[str]]:
    """Per node, the basis fields that differ between its rows, with their values: the full table's caveat.
    DuckDB reduces the rows to each node's distinct basis combinations (a handful however many rows), and
    basis.caveats, the one rule for what differs, reads those as one block per node."""
    present = set(results.frame("select * from results limit 0").columns)
    fields = [f for f in basis.WHY_IT_MATTERS if f not in FULL_KEYS + ["node", "metric"] and f in present]
    combos = results.frame(f"select distinct node, {', '.join(fields)} from results where metric <> 'bundle_manifest'")
    return {node: [c.text() for c in basis.caveats(group.assign(row_no=1), axes=FULL_KEYS + ["node", "metric"])]
            for node, group in combos.groupby("node", sort=False)}


def full_tables(source: Path | pd.DataFrame, nodes: list[str], table_dir: Path) -> list[FullTable]:
    """Every node's full per-cell table, on a connection of its own (this runs on the background thread)."""
    results = Results(source)
    pivot_cells(results)
    page_rows = max(200, PAGE_ROWS_TOTAL // max(1, len(nodes)))
    varying = varying_basis(results)
    return [f for f in (full_table(results, n, table_dir, page_rows, varying.get(n, [])) for n in nodes) if f is not None]


def seed_tables(published_rows: pd.DataFrame, layouts: dict[str, Layout],
                measured: pd.DataFrame | None = None) -> list[tables.Table]:
    """The seeds' tables in the order the posts and their layouts come (data/published), one per table id,
    each with the rows of any node measured with its post's method beside the post's."""
    present = set(published_rows["table_id"].dropna())
    return [tables.seed_table(published_rows, table_id, layout, measured)
            for table_id, layout in layouts.items() if table_id in present]


# A rehearsal's rows have source "rehearsal" (measure/rows.py); its report says so in every table's title too.
REHEARSAL_TITLE = ("REHEARSAL (stand-in engines at their modeled pace, time scale divided out; simulated GPUs; "
                   "not measurements): ")
# What a rehearsal's figures cannot carry, said where the verdict would stand.
CANNOT_DECIDE = {
    "decide": "a rehearsal runs each cell once, so there is no interval of a difference to decide on; the real "
              "run's repeats decide",
    "correctness": "a stand-in's text is not a model's, so correctness and quality are not checked; the real run checks them",
    "energy": "a stand-in's power is a simulated GPU's, min(cap, demand): no joules to choose on. The real run compares "
              "each stack and variant's J/token and J/response at each concurrency, every cap of its sweep beside the "
              "stock limit's cell (the limit found at the launch's start), W per GPU, and names the cap below which "
              "speed falls faster than power",
}


def undecided(table: tables.Table, why: str) -> tables.Table:
    """A verdict table of a rehearsal: its title, and instead of its rows what a rehearsal cannot decide."""
    return dataclasses.replace(table, title=REHEARSAL_TITLE + table.title, columns=["what a rehearsal cannot decide"],
                               rows=[[why]], raw_rows=[[None]], caveats=[], legend=[])


def own_rows(frame: pd.DataFrame, nodes: list[str]) -> pd.DataFrame:
    """A node's report (a rehearsal's): its own rows, and of the posts' those of its node or its GPU, so no other
    node's figures (a 2x3090 power sweep in an RTX 5090 report) enter its analyses."""
    gpus = {gpu_key(g) for g in frame.loc[frame["source"].isin(MEASURED) & frame["node"].isin(nodes), "gpu"].dropna()}
    posts = frame["source"].eq("published") & frame["gpu"].map(lambda g: isinstance(g, str) and gpu_key(g) in gpus)
    return frame[frame["node"].isin(nodes) | posts].reset_index(drop=True)


def gpu_key(name: str) -> str:
    """A GPU's model as NVML and a post both name it: 'NVIDIA GeForce RTX 5090' and 'RTX 5090 32GB' are 'rtx5090'."""
    words = [w for w in name.lower().replace("nvidia", "").replace("geforce", "").split()
             if not (w.endswith("gb") and w[:-2].isdigit())]
    return "".join(words)


def rehearsed_launches(rows: pd.DataFrame) -> dict[tuple, int]:
    """(stack, variant) -> the launch replicates a rehearsal ran of it (the real run's, node `launches`)."""
    if rows.empty or "replicate" not in rows.columns:
        return {}
    return {k: int(v) for k, v in rows.groupby(["stack", "variant"])["replicate"].nunique().items()}


def real_repeats(budget_path: Path | None) -> int | None:
    """The real run's repeats per cell, from a rehearsal's time budget (rehearsal/budget.py)."""
    return budget.real_repeats(budget_path) if budget_path else None


def bundle_tables(results: Results, table_dir: Path, background: Background) -> list[tables.Table]:
    """The Bundles section (docs/bundles.md): each result bundle brought in, with its provenance or why it was refused."""
    out = []
    found = results.frame("select table_title, source, node, value, status, reason, note from results "
                          "where metric = 'bundle_manifest' order by table_title")
    if len(found):
        cells = [[r.table_title, r.source, r.node, "" if pd.isna(r.value) else f"{r.value:.0f}",
                  "refused" if r.status != "ok" else "accepted", r.reason if r.status != "ok" else r.note]
                 for r in found.itertuples(index=False)]
        out.append(tables.Table("bundles", "Bundles: other owners' runs brought in beside ours", "results/bundle.py",
                                ["bundle", "source", "node", "rows", "state", "provenance, or why refused"], cells,
                                [[None] * 6 for _ in cells],
                                legend=["Their rows carry the source shown (never measured or published); the tables "
                                        "above set them beside ours where the basis allows, with every difference under them."]))
    return out


def implausible_tables(results: Results, table_dir: Path, background: Background) -> list[tables.Table]:
    """Every cell a plausibility check flagged (analysis/plausibility.py, set at collect), ours and theirs alike:
    its own section, not the Bundles'."""
    flagged = results.frame("select distinct source, node, stack, variant, workload, concurrency, implausible as why "
                            "from results where implausible is not null order by all")
    if not len(flagged):
        return []
    # every flagged cell in the table's CSV; the page shows the first (derived_table)
    return [derived_table(flagged, "implausible", "Implausible cells: left out of What to run",
                          "analysis/plausibility.py", [], table_dir, background)]


def figures_intro(results: Results, counts: dict, nodes: list[str]) -> str:
    """A rehearsal's count of figures: its stand-ins', and the posts' about its node or its GPU (own_rows), or
    that no post describes it; never the count of every post's rows."""
    posts = results.frame("select source, node, gpu from results where source = 'published' or node in "
                          f"{sql_in(nodes)}")
    mine = own_rows(posts, nodes)
    published = int(mine["source"].eq("published").sum())
    said = (f"{published} from the seed posts about this node or its GPU" if published
            else "no seed post describes this node or its GPU")
    return f"{counts.get('rehearsal', 0)} figures rehearsed here (stand-ins, not measurements); {said}."


def rehearsed(results: Results) -> bool:
    return bool(results.frame("select count(*) as n from results where source = 'rehearsal'")["n"].iloc[0])


def seed_tally(seed: list[tables.Table], layouts: dict) -> str:
    """How many of the seeds' tables took a measured row, how many could (they name a method), and how many
    say why none can."""
    took = sum(any(tables.SAME_METHOD in row[0] for row in t.rows) for t in seed)
    named = sum(bool(layouts[t.table_id].method) for t in seed if t.table_id in layouts)
    why = sum(bool(layouts[t.table_id].no_row) for t in seed if t.table_id in layouts)
    return (f"{took} of the {len(seed)} seed tables took a measured row; {named} name the workloads that reproduce "
            f"them, {why} say why no measured row can stand beside them.")


def write_report(results_path: Path, out_dir: Path, published_dir: Path = Path("data/published"),
                 budget_path: Path | None = None, kept_dir: Path | None = None, rules: dict | None = None) -> list[Path]:
    """Every table, the summary (report.md) and the page (index.html); a rehearsal's time budget of the real
    run (`budget_path`, report/budget.py) opens both; each node's runs kept in `kept_dir` (results/kept.py) are
    judged against this one's decisions; `rules` each node's What to run rule (config.model.Decision), the
    schema's defaults for a node not named."""
    results = Results(results_path)
    counts = results.frame("select source, count(*) as n from results group by source").set_index("source")["n"].to_dict()
    # Nodes measured here first, then the posts' nodes.
    nodes = results.frame(f"select node from results group by node order by min(case when source in {MEASURED_SQL} then 0 else 1 end), "
                          "node")["node"].tolist()
    rehearsal = rehearsed(results)
    if rehearsal:  # one node's report: its own tables, and of the seeds' only those its methods reproduce
        nodes = results.frame(f"select distinct node from results where source in {MEASURED_SQL}")["node"].tolist()
    table_dir = out_dir / "tables"
    table_dir.mkdir(parents=True, exist_ok=True)

    background = Background()
    try:
        fulls_job = background.submit(full_tables, results.source, nodes, table_dir)
        present = set(results.frame("select * from results limit 0").columns)  # a file from before a column was added lacks it
        frame = results.frame(f"select * exclude ({', '.join(c for c in NOT_ANALYSED if c in present)}), {GEOMETRY_NOTE} from results "
                              f"where metric in {sql_in(ANALYSIS_METRICS)} "
                              "or metric like 'accept_rate_pos%' or metric like 'geometry_%' "
                              "or metric in ('power_limit_found_w', 'power_limit_default_w')")  # a sweep's stock limit
        if rehearsal:
            frame = own_rows(frame, nodes)
        roofline = analysis.roofline(frame)
        percents = ceiling_percents(roofline)
        power_why = power_not_measured(results)
        candidates = headline_input(results)
        by_variant = analysis.correctness_by_variant(correctness_input(results))
        by_node = candidates.groupby("node", sort=False).indices  # each node's headline reads its own rows only
        slowed = analysis.slowed_cells(frame)
        # A rehearsal's outputs and quality are a stand-in's: no headline column shows them as measured.
        judged = None if rehearsal else by_variant
        # Published rows without a node sit under their post (the seed tables), not under a node named "unknown".
        headlines = [t for t in (tables.headline_table(candidates.take(by_node[n]), n, percents, power_why.get(n), judged,
                                                       slowed) for n in nodes if n in by_node and n != NO_NODE)
                     if t is not None]
        caps_refused, kept = caps_not_applied(results), kept_launches(results)
        for table in headlines:
            node = table.table_id.removeprefix("headline-")
            table.caveats += [f"power {caps_refused[node]}."] if node in caps_refused else []
            table.caveats += [f"kept from earlier runs, launches this run did not plan (another stacks= selection, or "
                              f"dropped from the node file; delete their data/runs/{node}/<launch> to drop them): "
                              f"{kept[node]}."] if node in kept else []
        for metric, said in (("smoke_score", "correctness: not checked"), ("accuracy", "accuracy: not measured")):
            for node, why in probes_off(results, metric).items():
                for table in (t for t in headlines if t.table_id == f"headline-{node}"):
                    table.legend.append(f"{said} on {why}.")
        for node, why in geometry_not_read(results).items():
            for table in (t for t in headlines if t.table_id == f"headline-{node}"):
                table.legend.append(f"{why}.")
        correctness = correctness_tables(by_variant, nodes)
        agreement = cross_stack_input(results)
        decide_rows = decide_input(results)
        choices = analysis.what_to_run(decide_rows, by_variant, rules)
        decided = decisions.what_to_run_tables(choices, nodes, agreement, analysis.launch_variance(decide_rows))
        decided += held_tables(kept_dir, nodes, choices, decide_rows, rules) if kept_dir and not rehearsal else []
        paired, gain_levels = pairing_input(results), levels.gain_levels(decide_rows)
        for node in nodes:
            decided += pairing.pairing_table(paired, node) + pairing.levels_table(gain_levels, node)
        notes = busy_notes(results)
        for row in quality.beyond_limit(decide_rows).itertuples(index=False):  # the served model, whatever the variant
            notes.setdefault(row.node, []).append(f"Quality: {row.stack} {row.variant} is beyond the node's quality limit "
                                                  f"(quality_limit): {row.reason}; its speed is not the answer it gives.")
        answers = [] if rehearsal else decisions.answer_tables(choices, nodes, notes)
        for table in ([] if rehearsal else headlines):  # the headline's differences say whether What to run decided them
            mine = choices[choices["node"] == table.table_id.removeprefix("headline-")]
            if len(mine):
                table.legend.append(f"A difference between two rows here is a decision only where What to run made it "
                                    f"({decisions.verdict_summary(mine)}); elsewhere it lies inside the launch-to-launch "
                                    "noise, and the rows read as the same speed.")
        refused = [f"power {why}: those cells are analysed as uncapped." for why in caps_refused.values()]
        decided += decisions.energy_tables(analysis.energy_cells(decide_rows, by_variant), refused)
        spec = analysis.spec_value_by_context(frame)
        derived = analysis_tables(frame, roofline, spec, table_dir, background, refused)
        derived += cross_stack_tables(agreement, table_dir, background)
        if not rehearsal:  # a stand-in's answers and logits are no model's: no quality figure (Correctness says why)
            derived += quality_tables(quality_input(results), by_variant, table_dir, background)
            derived += divergence_tables(divergence_input(results), table_dir, background)
        layouts = load_layouts(published_dir)
        seed = seed_tables(results.rows("source = 'published'"), layouts, method_input(results, layouts))
        if rehearsal:
            seed = [t for t in seed if any(tables.SAME_METHOD in row[0] or row[0] == tables.OTHER_LAUNCHES for row in t.rows)]
        figures = _figures(results, spec, nodes)
        bundled = bundle_tables(results, table_dir, background)  # the Bundles section: empty without bundles
        implausible = implausible_tables(results, table_dir, background)  # its own section: empty without flagged cells
        fulls = fulls_job.result()
        status = status_lines(results)
        heading = "Stack comparison report"
        if rehearsal:
            headlines, derived, seed, bundled, implausible = (
                [dataclasses.replace(t, title=REHEARSAL_TITLE + t.title) for t in group]
                for group in (headlines, derived, seed, bundled, implausible))
            # What the real run will decide and how (cells, launches, rule), never a choice from stand-in figures.
            decided = [dataclasses.replace(t, title=REHEARSAL_TITLE + t.title) for t in decisions.rehearsal_tables(
                decide_rows, nodes, rehearsed_launches(decide_rows), real_repeats(budget_path))] \
                + [undecided(t, CANNOT_DECIDE["energy"]) for t in decided if t.table_id.startswith("what-to-run-energy")]
            correctness = [undecided(t, CANNOT_DECIDE["correctness"]) for t in correctness]
            fulls = [dataclasses.replace(f, title_prefix=REHEARSAL_TITLE) for f in fulls]
            heading = REHEARSAL_TITLE + heading

        # Only a rehearsal has a budget: its tables are the rehearsal's too.
        opening = [dataclasses.replace(t, title=REHEARSAL_TITLE + t.title) for t in budget.budget_tables(budget_path)] \
            if budget_path else []
        if rehearsal:  # the stand-in's pace beside the posts' figures it was fitted to (rehearsal/calibration.py)
            fitted = budget.calibration_table(results.frame(
                "select engine, spec_method, spec_tokens, workload, concurrency, metric, value from results "
                "where source = 'rehearsal' and status = 'ok' and value is not null and metric in ('decode_tps', "
                "'accept_len', 'tpot_ms') and " + single_stream_sql()))
            opening += [dataclasses.replace(fitted, title=REHEARSAL_TITLE + fitted.title)] if fitted else []
        # The use-case answer leads What to run; a rehearsal's says what the real run will decide, never a pick.
        use_rows = results.frame(
            f"select node, ref, stack, variant, workload, prompt_tokens, output_tokens, metric, value, ci_low, ci_high, "
            f"{', '.join(usecase.SEPARATING)} from results where source in {MEASURED_SQL} and metric in "
            f"{sql_in([usecase.DECODE, usecase.TTFT])} and {single_stream_sql()} and workload is not null"
            + ("" if rehearsal else " and status = 'ok' and value is not null"))
        uses = usecase.rehearsal_use_case_tables(use_rows, nodes, rehearsed_launches(decide_rows), real_repeats(budget_path)) \
            if rehearsal else usecase.use_case_tables(use_rows, nodes, choices)
        decided = [dataclasses.replace(t, title=(REHEARSAL_TITLE if rehearsal else "") + t.title) for t in uses] + decided
        written = []
        for table in answers + opening + headlines + decided + correctness + derived + seed + bundled + implausible:
            outputs = [(".md", to_markdown(table))] + ([] if table.written_whole else [(".csv", to_csv(table))])
            for suffix, text in outputs:
                path = table_dir / f"{table.table_id}{suffix}"
                path.write_text(text, encoding="utf-8")
                written.append(path)
        written += [p for f in fulls for p in (f.csv_path, f.parquet_path)]
        intro = figures_intro(results, counts, nodes) if rehearsal else (
            f"{sum(counts.values())} figures: {counts.get('measured', 0)} measured here, "
            f"{counts.get('published', 0)} transcribed from the seed posts.")
        summary = [f"# {heading}", ""]
        if answers:
            summary += ["## The answer: what to run on each node", "", *[to_markdown(t) for t in answers]]
        if opening:
            summary += ["## Time budget of the real run", "", *[to_markdown(t) for t in opening]]
        summary += ["## Headline: one row per stack variant, per node", "",
                   *[to_markdown(t) for t in headlines], intro, ""]
        if decided:
            summary += ["## What to run", "", *[to_markdown(t) for t in decided]]
        if correctness:
            summary += ["## Correctness beside speed", "", *[to_markdown(t) for t in correctness]]
        if status:
            summary += ["## Cells without a figure", "", *[f"- {s}" for s in status], ""]
        if implausible:
            summary += ["## Implausible cells", "", *[to_markdown(t) for t in implausible]]
        if bundled:
            summary += ["## Bundles", "", *[to_markdown(t) for t in bundled]]
        summary += ["## Full tables", "", *[full_markdown(f) for f in fulls]]
        summary += ["## Analysis", "", *[to_markdown(t) for t in derived]]
        summary += ["## The seeds' tables, regenerated from data in each post's own layout", "", seed_tally(seed, layouts), "",
                    *[to_markdown(t) for t in seed]]
        summary_path = out_dir / "report.md"
        summary_path.write_text("\n".join(summary), encoding="utf-8")
        written.append(summary_path)

        html_path = out_dir / "index.html"
        html_path.write_text(page_html(intro, headlines, correctness, fulls, derived + implausible + bundled, seed, status, figures, decided, heading,
                                       opening, answers),
                             encoding="utf-8")
        written.append(html_path)
    finally:
        background.wait()  # every file is on disk (or the first error raised) before the report counts as written
    return written


NO_NODE = "unknown"  # the node of a published row whose post names none


def busy_notes(results: Results) -> dict[str, list[str]]:
    """Per node, the launches that ran (or were refused) on a busy host, said before its answer (analysis.hoststate)."""
    rows = results.frame(f"select * from results where source in {MEASURED_SQL} and (metric in "
                         f"{sql_in([HOST_BUSY_METRIC, 'host_outside_cpu_share_peak'])} or status = '{hoststate.REFUSED}')")
    return {node: ["A busy host: " + line + "." for line in hoststate.busy_lines(mine)]
            for node, mine in rows.groupby("node", sort=False) if hoststate.busy_lines(mine)}


def held_tables(kept_dir: Path, nodes: list[str], choices: pd.DataFrame, decide_rows: pd.DataFrame,
                rules: dict | None = None) -> list[tables.Table]:
    """Per node and run kept for it (results/kept.py), which of the kept run's decisions held in this one
    (analysis/held.py): the kept rows go through the same queries and the same rule as this run's."""
    kept = {node: kept_runs(kept_dir, node) for node in nodes}
    if not any(kept.values()):
        return []
    out, gains = [], analysis.variant_gains(decide_rows)
    for node, paths in kept.items():
        for path in paths:
            earlier = Results(path)
            earlier_rows = decide_input(earlier)
            # the kept run under the rule it ran under (results/kept.py), where it was kept with it
            own = kept_rule(path)
            earlier_choices = analysis.what_to_run(earlier_rows, analysis.correctness_by_variant(correctness_input(earlier)),
                                                   {**(rules or {}), node: Decision(**own)} if own else rules)
            held = analysis.decisions_held(earlier_choices, analysis.variant_gains(earlier_rows),
                                           choices[choices["node"] == node], gains[gains["node"] == node],
                                           min_gain=((rules or {}).get(node) or default_decision()).min_gain)
            out.append(decisions.held_table(held, node, path.stem))
    return out


def _figures(results: Results, spec: pd.DataFrame, nodes: list[str]) -> list:
    figures = []
    ladders, paretos = ladder_input(results), pareto_input(results)
    # One narrow query, split by node on integer positions: a scan per node, or filtering a wide frame of
    # arrow-backed strings in pandas, costs more.
    charted = results.frame(f"select {', '.join(CHART_COLUMNS)} from results where "
                            f"metric in {sql_in(CHART_METRICS)} or metric like 'accept_rate_pos%' "
                            f"or metric like '{charts.REQUEST_BINS}%'")
    positions = charted.groupby("node", sort=False).indices
    for node in nodes:
        mine = charted.take(positions.get(node, [])).reset_index(drop=True)
        figures += [charts.rate_by_workload(mine, node), charts.concurrency_scaling(mine, node),
                    charts.power_sweep(mine, node), charts.per_position_acceptance(mine, node),
                    charts.request_acceptance_histogram(mine, node), charts.accept_len_by_depth(mine, node), charts.spec_speedup(spec, node),
                    charts.context_ladder(ladders, node), charts.throughput_pareto(paretos, node)]
    return [f for f in figures if f is not None]


