"""Correctness beside speed: per node, the probes beside each variant (smoke, needle, cache consistency,
agreement with no-spec, loops, accuracy). A stand-in's text is no model's: a rehearsal says what it cannot check."""

from __future__ import annotations

from stackbench import analysis
from stackbench.report.section import Context, Section, undecided
from stackbench.report.table import Table, frame_table

# The section's columns: (title, column of analysis.correctness_by_variant).
COLUMNS = [("stack", "stack"), ("variant", "variant"), ("smoke score", "smoke_score"),
           ("needle pass", "needle_pass"), ("needle prompt tokens", "needle_prompt_tokens"),
           ("cache consistent", "cache_consistent"), ("regressions passed", "regression_score"),
           ("output agreement", "output_agreement"),
           ("first divergence", "first_divergence_token"), ("output length ok (lowest)", "output_len_ok"),
           ("repetition ratio (highest)", "repetition_ratio"), ("loop share (highest cell)", "looping"),
           ("cells with loops", "looping_in"), ("accuracy [95% CI]", "accuracy_text"),
           ("answer agreement", "answer_agreement"), ("noise floor (no-spec at c2)", "noise_floor"),
           ("outputs", "outputs")]
CANNOT_CHECK = "a stand-in's text is not a model's, so correctness and quality are not checked; the real run checks them"


def build(ctx: Context) -> list[Table]:
    out = []
    for node in ctx.nodes:
        mine = ctx.by_variant[ctx.by_variant["node"] == node]
        if mine.empty:
            continue
        frame = mine[[c for _, c in COLUMNS]].set_axis([t for t, _ in COLUMNS], axis=1)
        out.append(frame_table(
            frame, f"correctness-{node}", f"Correctness beside speed on {node}", "probes workload and every measured cell",
            ["smoke score: share of the smoke questions answered by their rule; needle pass and cache consistent: 1 or 0;"
             " output agreement: mean common prefix with the no-spec launch's greedy output (1 = identical); blank: not measured.",
             "verdicts: loops are charged only on the probes' greedy outputs, prompt by prompt, where a variant's output loops "
             "and no-spec's on the same prompt does not (identical outputs never); a cell's loop share is reported for "
             f"every variant alike, never a verdict; {analysis.correctness.TOLERANCE}; {analysis.correctness.NOISE_RULE}."]))
    return out


def rehearsed(ctx: Context) -> list[Table]:
    return [undecided(t, CANNOT_CHECK) for t in build(ctx)]


SECTION = Section("correctness", "Correctness beside speed", build, rehearsal=rehearsed)
