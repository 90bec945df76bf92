"""Greedy agreement across launches, a step of collect (data/results.parquet): it needs the stored probe
outputs of two launches, so it runs over every part at once, never in one launch's measure job (that job
would need the other launch to have finished first, an ordering between measure jobs Snakemake does not
have; under SLURM they run in parallel).

- greedy_agreement / mean_agreement: greedy output with speculative decoding must equal the output without it. A
  borrowed MTP head collapses acceptance (speed); a broken verify path changes the output (this check).
- agreement_rows: each speculative launch against the no-spec launch of its node, stack, model and probe set.
- cross_stack_rows: every pair of no-spec launches whose models state the same weights family.
The probe outputs themselves are written by the probe cell (measure/probes.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from stackbench.config.speculative import NO_SPEC
from stackbench.results import metrics, store
from stackbench.results.estimators import exact_mcnemar, wilson
from stackbench.results.metrics import M


@dataclass(frozen=True)
class Agreement:
    output_agreement: float  # common prefix / len(reference), 0..1
    first_divergence_token: int | None  # None when identical


def greedy_agreement(reference: Sequence, candidate: Sequence) -> Agreement:
    """Compare greedy output with speculative decoding (candidate) against the same run without it (reference).

    Speculative decoding is meant to be lossless: vLLM's docs ("Lossless guarantees of Speculative Decoding")
    state that it preserves the target model's output distribution up to hardware numerics, and at temperature 0
    SGLang's verify step keeps a drafted token only where it equals the target's argmax. So agreement < 1 is a
    finding; numerics (batch shape, kernels) can flip a near-tie, and the divergence index says how late.
    """
    common = 0
    for a, b in zip(reference, candidate):
        if a != b:
            break
        common += 1
    identical = common == len(reference) == len(candidate)
    share = common / len(reference) if reference else float(not candidate)
    # When one is a prefix of the other, they diverge at the shorter length: common is that length.
    return Agreement(share, None if identical else common)


def mean_agreement(pairs: Iterable[tuple[Sequence, Sequence]]) -> Agreement:
    """Mean output_agreement over prompts; the earliest divergence over the prompts that diverged."""
    results = [greedy_agreement(ref, cand) for ref, cand in pairs]
    if not results:
        raise ValueError("mean_agreement needs at least one (reference, candidate) pair")
    divergences = [r.first_divergence_token for r in results if r.first_divergence_token is not None]
    return Agreement(sum(r.output_agreement for r in results) / len(results), min(divergences) if divergences else None)


def agreement(reference: dict, candidate: dict) -> tuple[Agreement, str, int]:
    """Mean agreement over the prompts both launches answered, the unit compared and how many prompts: token
    by token where both engines streamed one token per chunk for every prompt, else word by word."""
    common = sorted(set(reference["outputs"]) & set(candidate["outputs"]))
    if not common:
        raise ValueError(f"{candidate['ref']} and {reference['ref']} share no probe output to compare")
    pairs = [(reference["outputs"][k], candidate["outputs"][k]) for k in common]
    if all(r["pieces_are_tokens"] and c["pieces_are_tokens"] for r, c in pairs):
        return mean_agreement((r["pieces"], c["pieces"]) for r, c in pairs), "tokens", len(pairs)
    return mean_agreement((r["text"].split(), c["text"].split()) for r, c in pairs), "words", len(pairs)


def read_outputs(part_files, name: str = store.PROBE_OUTPUTS) -> list[dict]:
    """The probe (or accuracy) outputs stored beside each measured part (data/runs/<node>/<launch>/cells.parquet)."""
    docs = []
    for part in part_files:
        path = Path(part).parent / name
        if path.exists():
            docs += json.loads(path.read_text())
    return docs


IDENTITY = ("node", "stack", "model", "workload")
# The table_id of the cross-stack agreement rows: one matrix per weights family (table_title).
CROSS_STACK_TABLE = "agreement-across-stacks"


def agreement_rows(docs: list[dict], results: pd.DataFrame) -> list[dict]:
    """output_agreement and first_divergence_token per speculative launch against the no-spec launch of the
    same node, stack, model and probe workload; the basis is the candidate's probe cell's, the ref names both
    runs. Speculative decoding is meant to be lossless at temperature 0 (greedy_agreement)."""
    rows = []
    for candidate in (d for d in docs if d["spec_method"] != NO_SPEC):
        references = [d for d in docs if d["spec_method"] == NO_SPEC and all(d[k] == candidate[k] for k in IDENTITY)]
        if len(references) != 1:
            continue  # no no-spec launch to compare with (or several, none of them the obvious one)
        reference = references[0]
        found, unit, prompts = agreement(reference, candidate)
        basis = results[(results["ref"] == candidate["ref"]) & (results["workload"] == candidate["workload"])]
        if basis.empty:
            continue
        base = {**basis.iloc[0].to_dict(), "ref": f"{candidate['ref']} vs {reference['ref']}", "value_min": None,
                "value_max": None, "ci_low": None, "ci_high": None, "status": "ok", "reason": None,
                "ttft_included": "no"}
        how = f"greedy outputs of {prompts} probe prompts compared {unit.removesuffix('s')} by {unit.removesuffix('s')} " \
              f"with {reference['variant']} ({reference['ref']})"
        diverged = found.first_divergence_token
        common = sorted(set(reference["outputs"]) & set(candidate["outputs"]))
        charged = charged_loops({k: (reference["outputs"][k], candidate["outputs"][k]) for k in common})
        rows += [{**base, **metrics.row_fields(M.output_agreement), "value": found.output_agreement, "stat": "mean",
                  "n": prompts, "note": f"mean common prefix / reference length; {how}"},
                 {**base, "metric": M.first_divergence_token, "value": diverged, "unit": unit, "stat": "single",
                  "n": prompts, "note": (f"earliest divergence over the prompts; {how}" if diverged is not None
                                         else f"identical: no divergence; {how}")}]
        if charged is not None:
            # loops_charged (our own): the share of probe prompts whose greedy output loops where the
            # reference's on the same prompt does not (charged_loops): the one loop verdict.
            rows.append({**base, **metrics.row_fields(M.loops_charged), "value": len(charged) / len(common),
                         "stat": "mean", "n": len(common),
                         "note": (f"loops where {reference['variant']}'s does not on {', '.join(charged)}" if charged
                                  else f"no output loops where {reference['variant']}'s does not") + f"; {how}"})
    return rows


def charged_loops(pairs: dict[str, tuple[dict, dict]]) -> list[str] | None:
    """The prompts (ids of `pairs`: id -> (reference output, candidate output), greedy, same prompt) where
    the candidate's output loops and the reference's does not, by each output's `loops` (stored by the probe
    cell: its repetition_ratio over the loop threshold). An output identical to the reference's is never
    charged, whatever it repeats. None where outputs were stored before `loops` was."""
    if any("loops" not in r or "loops" not in c for r, c in pairs.values()):
        return None
    return [key for key, (r, c) in pairs.items() if c["text"] != r["text"] and c["loops"] and not r["loops"]]


def _label(doc: dict) -> str:
    return f"{doc['node']} / {doc['stack']} / {doc.get('quant') or store.UNKNOWN}"


def _comparable(a: dict, b: dict) -> bool:
    """Two no-spec launches of the same stated weights family on the same probe set (a doc stored before the
    probe-set digest existed pairs on the workload name alone)."""
    return (a["ref"] != b["ref"] and a.get("weights") is not None and a.get("weights") == b.get("weights")
            and a["workload"] == b["workload"]
            and (a.get("probe_set") is None or b.get("probe_set") is None or a["probe_set"] == b["probe_set"]))


def cross_stack_rows(docs: list[dict], results: pd.DataFrame) -> list[dict]:
    """cross_stack_agreement and cross_stack_divergence for every ordered pair of no-spec launches, across
    nodes and stacks, whose models state the same weights family (models.<key>.weights; never guessed from
    names). The candidate's probe cell gives the basis (node, stack, variant, quant); the matrix position is
    table_id/table_title (the family) and row_label (the reference, whose output length the share is over) /
    col_label (the candidate), so the report reads the matrix from these rows alone. Not the speculative
    metrics' names: those are read per variant as "differs from its no-spec launch"."""
    nospec = [d for d in docs if d["spec_method"] == NO_SPEC and d.get("weights") is not None]
    labels = {d["ref"]: _label(d) for d in nospec}
    taken = [labels[d["ref"]] for d in nospec]
    for d in nospec:  # two no-spec launches of one node, stack and quant (two stack files): the variant tells them apart
        if taken.count(labels[d["ref"]]) > 1:
            labels[d["ref"]] = f"{d['node']} / {d['stack']} / {d['variant']} / {d.get('quant') or store.UNKNOWN}"
    rows = []
    for reference in nospec:
        for candidate in (d for d in nospec if _comparable(reference, d)):
            basis = results[(results["ref"] == candidate["ref"]) & (results["workload"] == candidate["workload"])]
            if basis.empty:
                continue
            found, unit, prompts = agreement(reference, candidate)
            family = reference["weights"]
            base = {**basis.iloc[0].to_dict(), "ref": f"{candidate['ref']} vs {reference['ref']}", "value_min": None,
                    "value_max": None, "ci_low": None, "ci_high": None, "status": "ok", "reason": None,
                    "ttft_included": "no", "table_id": CROSS_STACK_TABLE, "table_title": family,
                    "row_label": labels[reference["ref"]], "col_label": labels[candidate["ref"]]}
            one = unit.removesuffix("s")
            how = (f"greedy outputs of {prompts} probe prompts of {family} compared {one} by {one} with "
                   f"{labels[reference['ref']]} ({reference['ref']})")
            diverged = found.first_divergence_token
            rows += [{**base, **metrics.row_fields(M.cross_stack_agreement), "value": found.output_agreement,
                      "stat": "mean", "n": prompts, "note": f"mean common prefix / reference length; {how}"},
                     {**base, "metric": M.cross_stack_divergence, "value": diverged, "unit": unit, "stat": "single",
                      "n": prompts, "note": (f"earliest divergence over the prompts; {how}" if diverged is not None
                                             else f"identical: no divergence; {how}")}]
    return rows


# The table_id of the quality rows across stacks: one table per weights family (table_title).
QUALITY_TABLE = "quality-across-stacks"


def accuracy_interval(doc: dict) -> tuple[float, float, float, int]:
    """An accuracy doc's share right, its Wilson interval and n, from the replies it kept."""
    n = len(doc["outputs"])
    correct = sum(o["correct"] for o in doc["outputs"].values())
    return (correct / n, *wilson(correct, n), n)


def answers_compared(reference: dict, candidate: dict) -> tuple[float, float, str, tuple[int, int, int]]:
    """answer_agreement (the share of the questions both launches answered with the same extracted answer,
    our own; two replies without an answer never agree), whether the candidate is worse (1.0) by the exact
    McNemar test on the questions one got right and the other wrong, in words with both accuracies, and the
    flips (worse, better, questions compared): paired, since both launches answered the same questions."""
    common = sorted(set(reference["outputs"]) & set(candidate["outputs"]))
    if not common:
        raise ValueError(f"{candidate['ref']} and {reference['ref']} share no accuracy question to compare")
    pairs = [(reference["outputs"][k], candidate["outputs"][k]) for k in common]
    same = sum(r["answer"] is not None and r["answer"] == c["answer"] for r, c in pairs) / len(common)
    worse = sum(r["correct"] and not c["correct"] for r, c in pairs)
    better = sum(c["correct"] and not r["correct"] for r, c in pairs)
    p = exact_mcnemar(worse, better)
    ref_share, ref_low, ref_high, _ = accuracy_interval(reference)
    share, low, high, _ = accuracy_interval(candidate)
    intervals = f"accuracy {share:.2f} [{low:.2f}-{high:.2f}] vs {ref_share:.2f} [{ref_low:.2f}-{ref_high:.2f}]"
    flips = f"flips: {worse + better} of {len(common)} questions, {worse} for the worse; exact McNemar p = {p:.3g}"
    below = float(p < 0.05 and worse > better)
    if p < 0.05:
        words = f"{'worse' if worse > better else 'better'} than the reference ({flips}; {intervals})"
    else:
        words = f"not distinguishable from the reference ({flips}; {intervals})"
    return same, below, words, (worse, better, len(common))


def answer_rows(docs: list[dict], results: pd.DataFrame) -> list[dict]:
    """answer_agreement and accuracy_below_reference per speculative launch against the no-spec launch of the
    same node, stack, model and accuracy set (as agreement_rows pairs probe outputs); and, per ordered pair
    of no-spec launches of one weights family on the same questions (as cross_stack_rows pairs them),
    cross_stack_answer_agreement placed in the family's quality table (table_id QUALITY_TABLE, row_label the
    reference, col_label the launch compared), its note saying whether the accuracies are distinguishable."""
    rows = []

    def row(candidate: dict, reference: dict, metric: str, **fields) -> dict | None:
        basis = results[(results["ref"] == candidate["ref"]) & (results["workload"] == candidate["workload"])]
        if basis.empty:
            return None
        return {**basis.iloc[0].to_dict(), "ref": f"{candidate['ref']} vs {reference['ref']}", "value_min": None,
                "value_max": None, "ci_low": None, "ci_high": None, "status": "ok", "reason": None,
                "ttft_included": "no", **metrics.row_fields(metric), "stat": "mean", **fields}

    for candidate in (d for d in docs if d["spec_method"] != NO_SPEC):
        references = [d for d in docs if d["spec_method"] == NO_SPEC and all(d[k] == candidate[k] for k in IDENTITY)]
        if len(references) != 1:
            continue
        reference = references[0]
        same, below, words, (worse, better, n) = answers_compared(reference, candidate)
        how = f"against {reference['variant']} ({reference['ref']}) on {n} questions"
        rows += [r for r in (
            row(candidate, reference, metric=M.answer_agreement, value=same, n=n,
                note=f"share of the questions answered with the same extracted answer {how}"),
            row(candidate, reference, metric=M.answer_flips, value=(worse + better) / n, n=n,
                note=f"share of the questions right on one launch and wrong on the other; {words}; {how}"),
            row(candidate, reference, metric=M.accuracy_below_reference, value=below, stat="single", n=n,
                note=f"{words}; {how}")) if r is not None]
    nospec = [d for d in docs if d["spec_method"] == NO_SPEC and d.get("weights") is not None]
    labels = {d["ref"]: _label(d) for d in nospec}
    for reference in nospec:
        for candidate in (d for d in nospec if _comparable(reference, d)):
            same, _, words, _ = answers_compared(reference, candidate)
            found = row(candidate, reference, metric=M.cross_stack_answer_agreement, value=same,
                        n=len(set(reference["outputs"]) & set(candidate["outputs"])),
                        table_id=QUALITY_TABLE, table_title=reference["weights"], row_label=labels[reference["ref"]],
                        col_label=labels[candidate["ref"]], note=f"{words}; same extracted answer on this share of the questions")
            if found is not None:
                rows.append(found)
    return rows


def agreement_across(part_files, results: pa.Table) -> list[dict]:
    """The derived rows of the collect step: each speculative launch against its no-spec launch, and every
    pair of no-spec launches of the same weights family across stacks and nodes, on the probes' greedy
    outputs and on the accuracy set's answers."""
    rows = []
    for name, derive in ((store.PROBE_OUTPUTS, lambda d, r: agreement_rows(d, r) + cross_stack_rows(d, r)),
                         (store.ACCURACY_OUTPUTS, answer_rows)):
        docs = read_outputs(part_files, name)
        if docs:
            workloads = sorted({d["workload"] for d in docs})
            rows += derive(docs, results.filter(pc.field("workload").isin(workloads)).to_pandas())
    return rows
