"""Write the report: report.md, one offline HTML page, and every table as Markdown, CSV and Parquet.

Reads only the results table and the seed posts' table layouts (data/published); it never triggers a
measurement and never reads node configs (each node's memory bandwidth is a row in the results).
Selections and aggregates run in DuckDB over the Parquet file (report/queries.py), so the headline, the
analysis sections and the charts read a few thousand rows however many the results hold. The report is its
sections (report/sections/), each built once into parts that both documents print (report/page.py).
"""

from __future__ import annotations

from pathlib import Path

from stackbench import analysis
from stackbench.report.derived import Background
from stackbench.report.full import FullTable
from stackbench.report.page import html_document, markdown_document
from stackbench.report.queries import Results
from stackbench.report.section import HEADING, Context, mode_of
from stackbench.report.sections import SECTIONS
from stackbench.report.table import Table, frame_table, to_csv, to_markdown
from stackbench.results.store import read_results


def write_report(results_path: Path, out_dir: Path, published_dir: Path = Path("data/published"),
                 budget_path: Path | None = None, kept_dir: Path | None = None, rules: dict | None = None) -> list[Path]:
    """Every table, the summary (report.md) and the page (index.html); a rehearsal's time budget of the real
    run (`budget_path`, report/budget.py) opens both; each node's runs kept in `kept_dir` (results/kept.py) are
    judged against this one's decisions; `rules` each node's What to run rule (config.model.Decision), the
    schema's defaults for a node not named."""
    results = Results(results_path)
    ctx = Context(results, mode_of(results), out_dir, published_dir, budget_path, kept_dir, rules, Background())
    ctx.table_dir.mkdir(parents=True, exist_ok=True)
    written = []
    try:
        for section in SECTIONS:
            if section.start and ctx.mode.build(section):
                section.start(ctx)
        built = [(section, [ctx.mode.marked(part) for part in build(ctx)])
                 for section in SECTIONS if (build := ctx.mode.build(section))]
        for part in (part for _, parts in built for part in parts):
            written += write_files(part, ctx.table_dir)
        heading = ctx.mode.title + HEADING
        for path, text in ((out_dir / "report.md", markdown_document(heading, built)),
                           (out_dir / "index.html", html_document(heading, built))):
            path.write_text(text, encoding="utf-8")
            written.append(path)
    finally:
        ctx.background.wait()  # every file is on disk (or the first error raised) before the report counts as written
    return written


def write_files(part, table_dir: Path) -> list[Path]:
    """A table's Markdown and CSV (a derived table's CSV is the background's), a full table's CSV and Parquet."""
    if isinstance(part, FullTable):
        return [part.csv_path, part.parquet_path]
    if not isinstance(part, Table):
        return []  # a paragraph, bullets or a chart: in the documents only
    outputs = [(".md", to_markdown(part))] + ([] if part.written_whole else [(".csv", to_csv(part))])
    for suffix, text in outputs:
        (table_dir / f"{part.table_id}{suffix}").write_text(text, encoding="utf-8")
    return [table_dir / f"{part.table_id}{suffix}" for suffix, _ in outputs]


def write_comparison(baseline: Path, candidate: Path, vary: str, out: Path) -> Path:
    """Compare two result sets (two builds, two dates, two configs) on like rows only."""
    paired, unpaired = analysis.compare(read_results(baseline), read_results(candidate), vary=vary)
    text = to_markdown(frame_table(paired, "compare", f"{baseline} (A) vs {candidate} (B)", f"like rows, varying {vary}"))
    if len(unpaired):
        text += "\n" + to_markdown(frame_table(unpaired, "unpaired", "Rows without a like counterpart", "the basis fields that differ"))
    out.write_text(text, encoding="utf-8")
    return out
