"""The analysis: the roofline, the KV audit, power, spreads, acceptance, speculative speed-up by context, like-row
comparisons, and per weights family the greedy agreement, quality and divergence across stacks. A rehearsal's
stand-ins answer and score no model's text: it has no quality or divergence tables (Correctness says why)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from stackbench import analysis
from stackbench.config.speculative import NO_SPEC
from stackbench.report import decisions, queries
from stackbench.report.derived import Background, derived_table
from stackbench.report.section import Context, Section
from stackbench.report.table import Table
from stackbench.results.metrics import M
from stackbench.results.store import MEASURED


def analysis_tables(frame: pd.DataFrame, roofline: pd.DataFrame, spec_by_context: pd.DataFrame,
                    table_dir: Path, background: Background, caps_refused: list[str] = ()) -> list[Table]:
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


def comparison_tables(frame: pd.DataFrame, table_dir: Path, background: Background) -> list[Table]:
    """Like-for-like comparison of every measured speculative variant against the no-spec variant of its
    node and stack: one analysis.compare call (node and stack are among the like columns, so pairs never
    cross them), one table."""
    measured = frame[frame["source"].isin(MEASURED) & frame["metric"].isin([M.decode_tps, M.aggregate_tps, M.ttft_s])]
    base, speculative = measured[measured["spec_method"] == NO_SPEC], measured[measured["spec_method"] != NO_SPEC]
    if base.empty or speculative.empty:
        return []
    title, how = "No-spec (A) vs each speculative variant (B), like rows only", \
        "analysis.compare: every key and basis field equal except the variant"
    paired, unpaired = analysis.compare(base, speculative, vary="variant")
    if paired.empty:
        return []
    caveats = [f"{len(unpaired)} rows had no like counterpart"] if len(unpaired) else []
    return [derived_table(paired, "compare-nospec-vs-speculative", title, how, caveats, table_dir, background)]


def cross_stack_tables(rows: pd.DataFrame, table_dir: Path, background: Background) -> list[Table]:
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


def quality_tables(rows: pd.DataFrame, by_variant: pd.DataFrame, table_dir: Path, background: Background) -> list[Table]:
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


def divergence_tables(rows: pd.DataFrame, table_dir: Path, background: Background) -> list[Table]:
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


def shared(ctx: Context) -> list[Table]:
    return (analysis_tables(ctx.frame, ctx.roofline, ctx.spec, ctx.table_dir, ctx.background, ctx.caps_refused_lines)
            + cross_stack_tables(ctx.agreement, ctx.table_dir, ctx.background))


def build(ctx: Context) -> list[Table]:
    return (shared(ctx) + quality_tables(queries.quality_input(ctx.results), ctx.by_variant, ctx.table_dir, ctx.background)
            + divergence_tables(queries.divergence_input(ctx.results), ctx.table_dir, ctx.background))


SECTION = Section("analysis", "Analysis", build, rehearsal=shared, always=True)
