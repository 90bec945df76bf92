"""Quality that can see a quantization: how far a launch's next-token distributions are from the node's
quality reference on one fixed text, as llama.cpp's `llama-perplexity --kl-divergence` defines the figures
(tools/perplexity/perplexity.cpp, kl_divergence: mean KLD with its uncertainty, KLD percentiles, "Same top p"
with a binomial interval, RMS Δp, the perplexity ratio).

A scored position is the distribution at one token position of the text and the token that follows there:
its log-probability (`logprob`, exact from every route) and the top-k alternatives (`top`, (token id,
log-probability) by descending probability). Engines return only a top-k (vLLM `prompt_logprobs`, SGLang
`input_top_logprobs`; llama.cpp's full vocabulary is cut to the same k when stored), so the KLD here is over a
coarsened vocabulary: every token in both top-k lists on its own, the rest as one bucket. Coarsening never
raises a KL divergence (data-processing inequality), so `kld_topk` is a lower bound of the full-vocabulary
figure, and the rows say so. same_top_token, Δp and perplexity are exact: they need only the top-1 and the
actual token's log-probability.

collect (divergence_rows) pairs each launch's scores with its node's reference scores for the same weights
family and text, and refuses a pair whose token sequences differ (a different tokenizer scores other
positions: no per-position figure means anything).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from stackbench.results import store
from stackbench.results.agreement import read_outputs
from stackbench.results.estimators import Z95, wilson

# The metrics divergence_rows writes (and the report's divergence table reads), in that order; the launch's own
# perplexity is a figure of its divergence cell.
DIVERGENCE_METRICS = ["mean_kld", "kld_p99", "same_top_token", "rms_delta_p", "perplexity_ratio"]
# The table_id of the divergence rows: one table per weights family (table_title).
DIVERGENCE_TABLE = "divergence-from-reference"
TAIL_MASS_FLOOR = 1e-12  # a tail bucket whose mass rounds to zero or below on both sides: no KLD term


@dataclass(frozen=True)
class Position:
    token: int  # the token that follows at this position
    logprob: float  # its log-probability (natural log)
    top: tuple[tuple[int, float], ...]  # the k most likely tokens, (id, log-probability), most likely first


def tokens_digest(tokens: Sequence[Sequence[int]]) -> str:
    """A short digest of the scored text's token ids, chunk by chunk: equal digests, same positions."""
    return hashlib.sha256(repr([list(c) for c in tokens]).encode()).hexdigest()[:16]


def kld_topk(reference: Position, candidate: Position) -> float:
    """KL(reference || candidate) over the coarsened vocabulary: the tokens in both top-k lists one by one,
    every other token in one tail bucket whose mass is 1 minus theirs on each side. A lower bound of the
    full-vocabulary KLD; exact when both top-k lists hold all the mass."""
    q = dict(candidate.top)
    shared = [(p_lp, q[t]) for t, p_lp in reference.top if t in q]
    total = sum(math.exp(p) * (p - c) for p, c in shared)
    p_tail = 1.0 - sum(math.exp(p) for p, _ in shared)
    q_tail = 1.0 - sum(math.exp(c) for _, c in shared)
    if p_tail > TAIL_MASS_FLOOR:
        total += p_tail * math.log(p_tail / max(q_tail, TAIL_MASS_FLOOR))
    return max(total, 0.0)  # rounding of log-probabilities near 0 can give -1e-9


def nll(positions: Sequence[Position]) -> list[float]:
    return [-p.logprob for p in positions]


def perplexity(positions: Sequence[Position]) -> tuple[float, float]:
    """exp(mean negative log-likelihood) of the actual tokens, and its uncertainty as llama-perplexity prints it
    (perplexity.cpp: ppl * sqrt(var(nll) / (n - 1)), the delta method)."""
    values = nll(positions)
    n = len(values)
    mean = sum(values) / n
    ppl = math.exp(mean)
    var = sum((v - mean) ** 2 for v in values) / n
    return ppl, ppl * math.sqrt(var / (n - 1)) if n > 1 else math.nan


def percentile(sorted_values: Sequence[float], share: float) -> float:
    """perplexity.cpp's percentile: linear between the two order statistics around share * (n - 1)."""
    position = share * (len(sorted_values) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (position - low) * (sorted_values[high] - sorted_values[low])


@dataclass(frozen=True)
class Divergence:
    n: int
    mean_kld: float
    mean_kld_ci: tuple[float, float]  # mean +- 1.96 standard errors
    kld_p99: float
    same_top: int  # positions whose most likely token is the reference's
    rms_delta_p: float  # sqrt(mean((p_candidate(actual) - p_reference(actual))^2)), a probability
    perplexity_ratio: float


def compare(reference: Sequence[Position], candidate: Sequence[Position]) -> Divergence:
    """The divergence of `candidate` from `reference`, position by position (same text, same tokens)."""
    if len(reference) != len(candidate) or not reference:
        raise ValueError(f"divergence needs the same positions on both sides ({len(reference)} vs {len(candidate)})")
    klds = [kld_topk(r, c) for r, c in zip(reference, candidate)]
    n = len(klds)
    mean = sum(klds) / n
    var = sum((k - mean) ** 2 for k in klds) / (n - 1) if n > 1 else 0.0
    half = Z95 * math.sqrt(var / n)
    same = sum(r.top[0][0] == c.top[0][0] for r, c in zip(reference, candidate))
    dp2 = sum((math.exp(c.logprob) - math.exp(r.logprob)) ** 2 for r, c in zip(reference, candidate)) / n
    ratio = math.exp((sum(nll(candidate)) - sum(nll(reference))) / n)
    return Divergence(n, mean, (max(0.0, mean - half), mean + half), percentile(sorted(klds), 0.99), same,
                      math.sqrt(dp2), ratio)


def positions_of(doc: dict) -> list[Position]:
    return [Position(p["t"], p["lp"], tuple((int(i), float(lp)) for i, lp in p["top"])) for p in doc["positions"]]


def in_words(label: str, reference: str, found: Divergence) -> str:
    """One sentence on what the figures say ("Q4_K_M: mean KLD 0.031 from Q4_1, the top token differing at 8% of
    positions"), without semicolons: it is one part of a row's note."""
    differs = 1 - found.same_top / found.n
    return (f"{label}: mean KLD {found.mean_kld:.3g} from {reference} (a lower bound over the shared top-k), the top "
            f"token differing from the reference's at {differs:.1%} of {found.n} positions, perplexity "
            f"{found.perplexity_ratio:.3f}x the reference's on the same positions")


def _label(doc: dict) -> str:
    """A launch as the divergence table names it (analysis.correctness divergence_tables reads its perplexity row
    by the same words)."""
    return f"{doc['node']} / {doc['stack']} / {doc['variant']} / {doc.get('quant') or store.UNKNOWN}"


def references_by_family(docs: list[dict]) -> dict[tuple[str, str, str], dict]:
    """The reference scores per (node, weights family, text): the scores of the node's reference model, whether
    a launch served it or a launch's tool scored its file (the doc's `reference`)."""
    found = {}
    for doc in docs:
        for scored in (doc, doc.get("reference")):
            if scored is not None and scored.get("is_reference"):
                found.setdefault((doc["node"], doc.get("weights"), doc["text_id"]), {**doc, **scored})
    return found


def divergence_across(part_files, results: pa.Table) -> list[dict]:
    """The divergence rows of the collect step, from the scores stored beside each part (DIVERGENCE_OUTPUTS):
    each stored doc's launch identity with its scores (the `outputs` the divergence cell kept)."""
    docs = [{**{k: v for k, v in d.items() if k != "outputs"}, **d["outputs"]}
            for d in read_outputs(part_files, store.DIVERGENCE_OUTPUTS)]
    if not docs:
        return []
    workloads = sorted({d["workload"] for d in docs})
    return divergence_rows(docs, results.filter(pc.field("workload").isin(workloads)).to_pandas())


def divergence_rows(docs: list[dict], results: pd.DataFrame) -> list[dict]:
    """Per launch that scored the text: its divergence from its node's reference (same weights family, same
    text), in the family's divergence table (table_id QUALITY_TABLE, row_label the reference, col_label the
    launch). A pair whose token ids differ is a refused row naming both tokenizations."""
    references = references_by_family(docs)
    rows = []
    for doc in docs:
        reference = references.get((doc["node"], doc.get("weights"), doc["text_id"]))
        if reference is None or doc.get("is_reference"):
            continue
        basis = results[(results["ref"] == doc["ref"]) & (results["workload"] == doc["workload"])]
        if basis.empty:
            continue
        ref_label = f"{reference['model']} ({reference['scorer']})"
        base = {**basis.iloc[0].to_dict(), "ref": f"{doc['ref']} vs {reference['model']}", "value_min": None,
                "value_max": None, "ci_low": None, "ci_high": None, "status": "ok", "reason": None, "ttft_included": "no",
                "table_id": DIVERGENCE_TABLE, "table_title": doc.get("weights"), "row_label": ref_label,
                "col_label": _label(doc), "spread_over": "tokens"}
        if reference["tokens_id"] != doc["tokens_id"]:
            rows.append({**base, "metric": "mean_kld", "value": None, "status": "rejected", "unit": "nats",
                         "stat": "mean", "reason": f"tokenizer mismatch: {doc['scorer']} tokenized {doc['text_id']} as "
                                                   f"{doc['tokens_id']}, the reference ({reference['scorer']}) as {reference['tokens_id']}"})
            continue
        found = compare(positions_of(reference), positions_of(doc))
        k = min(len(p["top"]) for p in doc["positions"] + reference["positions"])
        how = (f"{doc['text_id']}, {found.n} positions; candidate {doc['scorer']}, reference {reference['model']} "
               f"({reference.get('quant')}) by {reference['scorer']}")
        low, high = wilson(found.same_top, found.n)
        rows += [
            {**base, "metric": "mean_kld", "value": found.mean_kld, "ci_low": found.mean_kld_ci[0],
             "ci_high": found.mean_kld_ci[1], "unit": "nats", "stat": "mean", "n": found.n,
             "note": f"KL(reference || launch) over the top-{k} shared tokens with the rest as one bucket: a lower bound "
                     f"of the full-vocabulary KLD; 95% CI mean +- 1.96 SE; {how}"},
            {**base, "metric": "kld_p99", "value": found.kld_p99, "unit": "nats", "stat": "p99", "n": found.n,
             "note": f"99th percentile of the per-position KLD (same bound); {how}"},
            {**base, "metric": "same_top_token", "value": found.same_top / found.n, "ci_low": low, "ci_high": high,
             "unit": "ratio", "stat": "mean", "n": found.n,
             "note": f"share of positions whose most likely token is the reference's, Wilson 95% CI; {how}"},
            {**base, "metric": "rms_delta_p", "value": found.rms_delta_p, "unit": "probability", "stat": "single",
             "n": found.n, "note": f"RMS of p(launch) - p(reference) of the actual next token; {how}"},
            {**base, "metric": "perplexity_ratio", "value": found.perplexity_ratio, "unit": "ratio", "stat": "single",
             "n": found.n, "note": f"exp(mean NLL(launch) - mean NLL(reference)): PPL(Q)/PPL(base); "
                                   f"{in_words(_label(doc), reference['model'], found)}; {how}"},
        ]
    return rows
