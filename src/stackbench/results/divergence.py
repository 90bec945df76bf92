"""Quality that can see a quantization: how far a launch's next-token distributions are from the node's
quality reference on one fixed text, as llama.cpp's `llama-perplexity --kl-divergence` defines the figures
(tools/perplexity/perplexity.cpp, kl_divergence: mean KLD, KLD percentiles, "Same top p", RMS Δp, the
perplexity ratio).

A scored position is the distribution at one token position of the text and the token that follows there:
its log-probability (`logprob`) and the top-k alternatives (`top`, (token id, log-probability) by descending
probability). The KLD per position is one of two things, and every row says which:
- exact: llama.cpp's route reads llama-perplexity's full-vocabulary file for the launch and for the reference
  and computes KL(reference || launch) over the whole vocabulary as the tool does (`kld_full`), at scoring time
  (engines/llamacpp.py), so the stored doc carries the per-position values (`exact`);
- a bound (`kld_bound`): from two top-k lists, the largest figure every pair of full distributions that agrees
  with what both returned reaches at least. Each side knows its top-k and the actual token, so also its tail
  mass (1 minus those) and that every token outside its list is at most its k-th probability. The bound is
  KL over the union of both lists with the rest as one bucket (coarsening never raises a KL divergence), each
  token's unknown side set to its most favourable value within those limits (jointly, by alternating exact
  minimisations of a convex function). It never collapses when the lists differ: a token the reference ranks
  high and the launch leaves out of its list costs p log(p / the launch's k-th probability) at the least.

Intervals treat the text's chunks as the independent units (positions within a chunk are autocorrelated): a t
interval over the chunk means (`chunk_interval`). The perplexity ratio uses each side's exact mean NLL where
its route has it (llama-perplexity's printed PPL, computed from float logits; the file keeps log-probabilities
only down to 16 nats under the top), else the returned log-probabilities.

collect (divergence_rows) pairs each launch's scores with its node's reference scores for the same weights
family and text, and refuses a pair whose token sequences differ (a different tokenizer scores other
positions: no per-position figure means anything).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import scipy.stats

from stackbench.results import metrics, store
from stackbench.results.agreement import read_outputs
from stackbench.results.estimators import wilson
from stackbench.results.metrics import M

# The table_id of the divergence rows: one table per weights family (table_title).
DIVERGENCE_TABLE = "divergence-from-reference"
MASS_FLOOR = 1e-12  # a mass at or below this is zero (the rounding of log-probabilities near 0)
# The most a returned top-k's summed mass can be off by rounding: llama-perplexity's file keeps log-probabilities to
# 16/65535 nats (a relative 1.2e-4 on each probability), a server its float32 log-softmax. A launch's tail computed
# under this may still hold this much, so the bound never takes it as smaller: it would read a token the launch
# does not list as far rarer than it may be, and overstate the KLD. (More mass on the launch's side only lowers
# sum p log(p / q), so the allowance keeps the bound sound.)
TAIL_ROUNDING = 2.5e-4
TOOL_FLOOR = -16.0  # llama-perplexity's kl_divergence leaves out reference tokens at or below log p = -16


@dataclass(frozen=True)
class Position:
    token: int  # the token that follows at this position
    logprob: float  # its log-probability (natural log)
    top: tuple[tuple[int, float], ...]  # the k most likely tokens, (id, log-probability), most likely first


def tokens_digest(tokens: Sequence[Sequence[int]]) -> str:
    """A short digest of the scored text's token ids, chunk by chunk: equal digests, same positions."""
    return hashlib.sha256(repr([list(c) for c in tokens]).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Known:
    """What one side returned at a position: the probabilities of its listed tokens (the top-k and the actual
    token), the mass left for every other token (tail) and the most any one of them can hold (cap: its k-th
    probability, and never more than the tail)."""
    probs: dict[int, float]
    tail: float
    cap: float


def known(position: Position, floor: float = 0.0) -> Known:
    probs = {t: math.exp(lp) for t, lp in position.top}
    probs.setdefault(position.token, math.exp(position.logprob))
    tail = max(floor, 1.0 - sum(probs.values()))
    kth = math.exp(position.top[-1][1]) if position.top else 1.0
    return Known(probs, tail, min(kth, tail))


def _spread(total: float, weights: np.ndarray, cap: float, rest: float) -> np.ndarray:
    """min(cap, lam * w) with lam solving lam * rest + sum(min(cap, lam * w)) = total: the minimiser over
    0 <= v <= cap of sum(w log(w / v)) + rest log(rest / (total - sum(v))) (KKT: v = w (total - sum v) / rest
    where uncapped); with rest = 0, the v of sum(v) = total (or every v at the cap) in proportion to w, which also
    minimises sum(v log(v / w)) at that sum."""
    if not len(weights) or total <= 0:
        return np.zeros(len(weights))
    order = np.sort(weights)[::-1]
    j = np.arange(len(order) + 1)  # the j largest capped: lam (rest + sum(w[j:])) + j cap = total
    slope = rest + np.concatenate([np.cumsum(order[::-1])[::-1], [0.0]])
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.where(slope > 0, (total - j * cap) / slope, np.inf)
        breaks = np.concatenate([cap / order, [np.inf]])
    first = int(np.argmax(lam <= breaks))
    if not lam[first] <= breaks[first] or np.isinf(lam[first]):
        return np.full(len(weights), cap)
    return np.minimum(cap, lam[first] * weights)


def _xlogy(a: float, b: float) -> float:
    return 0.0 if a <= MASS_FLOOR else a * math.log(a / max(b, MASS_FLOOR))


def _xlogy_sum(a: np.ndarray, b: np.ndarray) -> float:
    kept = a > MASS_FLOOR
    return float(np.sum(a[kept] * np.log(a[kept] / np.maximum(b[kept], MASS_FLOOR))))


GOLDEN = (math.sqrt(5) - 1) / 2
SEARCH_STEPS = 60  # golden-section steps: the bracket shrinks to 0.618^60 = 3e-13 of the reference's tail


def kld_bound(reference: Position, candidate: Position) -> float:
    """A lower bound of KL(reference || candidate) from the two top-k lists (the module's docstring): the union
    of the known tokens one by one, the rest one bucket, the unknown probabilities at their most favourable.
    The minimum is over a = the reference's mass in the rest bucket (convex in a): for each a, the reference's
    unknown probabilities hold its tail less a in proportion to the launch's, within the caps, and the launch's
    unknown probabilities are the exact minimiser given a (_spread)."""
    p, q = known(reference), known(candidate, TAIL_ROUNDING)
    both = [t for t in p.probs if t in q.probs]
    only_p = np.array([v for t, v in p.probs.items() if t not in q.probs])  # q of these: at most q.cap each
    only_q = np.array([v for t, v in q.probs.items() if t not in p.probs])  # p of these: at most p.cap each
    fixed = sum(_xlogy(p.probs[t], q.probs[t]) for t in both)

    def value(rest_p: float) -> float:
        y = _spread(p.tail - rest_p, only_q, p.cap, 0.0)
        x = _spread(q.tail, only_p, q.cap, rest_p)
        return fixed + _xlogy_sum(only_p, x) + _xlogy_sum(y, only_q) + _xlogy(rest_p, q.tail - float(x.sum()))

    low, high = max(0.0, p.tail - len(only_q) * p.cap), p.tail
    if not only_q.size or high <= low:
        return max(value(high), 0.0)
    inner = [high - GOLDEN * (high - low), low + GOLDEN * (high - low)]
    values = [value(inner[0]), value(inner[1])]
    for _ in range(SEARCH_STEPS):
        if values[0] <= values[1]:  # the minimum is in [low, inner[1]]
            high, inner[1], values[1] = inner[1], inner[0], values[0]
            inner[0] = high - GOLDEN * (high - low)
            values[0] = value(inner[0])
        else:  # in [inner[0], high]
            low, inner[0], values[0] = inner[0], inner[1], values[1]
            inner[1] = low + GOLDEN * (high - low)
            values[1] = value(inner[1])
    best = min(value(low), value(high), *values)
    return max(best, 0.0)  # rounding of log-probabilities near 0 can give -1e-9


def kld_full(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Per row, KL(reference || candidate) over the whole vocabulary from two arrays of log-probabilities
    (positions x vocabulary), as llama-perplexity's kl_divergence sums it: over the reference tokens above
    log p = -16."""
    counted = reference > TOOL_FLOOR
    p = np.where(counted, np.exp(reference), 0.0)
    return np.sum(p * np.where(counted, reference - candidate, 0.0), axis=1)


def tail_mass(position: Position) -> float:
    return known(position).tail


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


def chunk_interval(values: Sequence[float], chunks: int, level: float = 0.95) -> tuple[float, float] | None:
    """The t interval of the mean over the text's chunks as independent units (positions in one chunk are
    autocorrelated: a position-level interval would be too narrow): df = chunks - 1; None under 2 chunks."""
    if chunks < 2 or len(values) % chunks:
        return None
    means = np.asarray(values, dtype=float).reshape(chunks, -1).mean(axis=1)
    half = float(scipy.stats.t.ppf((1 + level) / 2, chunks - 1)) * float(means.std(ddof=1)) / math.sqrt(chunks)
    return float(means.mean()) - half, float(means.mean()) + half


@dataclass(frozen=True)
class Divergence:
    n: int
    chunks: int
    mean_kld: float
    mean_kld_ci: tuple[float, float] | None  # t over chunk means; None under 2 chunks
    kld_p99: float
    same_top: int  # positions whose most likely token is the reference's
    same_top_ci: tuple[float, float]  # the wider of the t over chunk shares and Wilson over positions
    rms_delta_p: float  # sqrt(mean((p_candidate(actual) - p_reference(actual))^2)), a probability
    perplexity_ratio: float
    exact: bool  # full vocabulary (kld_full) rather than kld_bound
    tail_mass: tuple[float, float]  # mean mass outside each side's known tokens (reference, launch)
    top_k: tuple[int, int]  # the list lengths returned (reference, launch)
    ratio_from: str  # where each side's mean NLL came from


def compare(reference: Sequence[Position], candidate: Sequence[Position], chunks: int = 1,
            exact: Sequence[float] | None = None, printed: tuple[float | None, float | None] = (None, None)) -> Divergence:
    """The divergence of `candidate` from `reference`, position by position (same text, same tokens, cut into
    `chunks` equal chunks in order). `exact`: the per-position full-vocabulary KLD where the route computed it,
    else the top-k bound; `printed`: each side's perplexity as its scoring tool printed it (exact NLL)."""
    if len(reference) != len(candidate) or not reference:
        raise ValueError(f"divergence needs the same positions on both sides ({len(reference)} vs {len(candidate)})")
    n = len(reference)
    if exact is not None and len(exact) != n:
        raise ValueError(f"divergence: {len(exact)} exact KLD values for {n} positions")
    klds = [max(float(v), 0.0) for v in exact] if exact is not None else [kld_bound(r, c) for r, c in zip(reference, candidate)]
    mean = sum(klds) / n
    ci = chunk_interval(klds, chunks)
    same = [float(r.top[0][0] == c.top[0][0]) for r, c in zip(reference, candidate)]
    chunked = chunk_interval(same, chunks) or (1.0, 0.0)
    low, high = wilson(int(sum(same)), n)
    dp2 = sum((math.exp(c.logprob) - math.exp(r.logprob)) ** 2 for r, c in zip(reference, candidate)) / n
    sides = [(math.log(ppl), "its tool's printed PPL") if ppl else (sum(nll(side)) / n, "its returned log-probabilities")
             for ppl, side in zip(printed, (reference, candidate))]
    tails = tuple(sum(tail_mass(p) for p in side) / n for side in (reference, candidate))
    return Divergence(n, chunks, mean, None if ci is None else (max(0.0, ci[0]), ci[1]), percentile(sorted(klds), 0.99),
                      int(sum(same)), (max(0.0, min(low, chunked[0])), min(1.0, max(high, chunked[1]))),
                      math.sqrt(dp2), math.exp(sides[1][0] - sides[0][0]), exact is not None,
                      (0.0, 0.0) if exact is not None else tails,
                      (min(len(p.top) for p in reference), min(len(p.top) for p in candidate)),
                      f"the reference's mean NLL from {sides[0][1]}, the launch's from {sides[1][1]}")


def basis_words(found: Divergence) -> str:
    """Which figure the KLD is, for every row's note."""
    if found.exact:
        return ("exact: full vocabulary, from llama-perplexity's files for both sides (log-probabilities kept to "
                "16 bits over the 16 nats under each position's top), summed as the tool sums it")
    return (f"a lower bound over the union of both top-k lists (k = {found.top_k[0]} reference, {found.top_k[1]} "
            f"launch), each unknown probability at its most favourable within the k-th probability and the tail; "
            f"mean tail mass {found.tail_mass[0]:.3g} reference, {found.tail_mass[1]:.3g} launch")


def beyond(found: Divergence, limit: dict | None) -> str | None:
    """Why the launch is beyond the node's quality_limit (the largest accepted mean KLD, the smallest accepted
    same-top share), or None. A bound above the limit is beyond it for certain; one below cannot clear it."""
    limit = limit or {}
    reasons = []
    if limit.get("mean_kld") is not None and found.mean_kld > limit["mean_kld"]:
        reasons.append(f"mean KLD {found.mean_kld:.3g} above the node's limit {limit['mean_kld']:g}"
                       + ("" if found.exact else " (a lower bound: the full figure is higher still)"))
    share = found.same_top / found.n
    if limit.get("same_top_token") is not None and share < limit["same_top_token"]:
        reasons.append(f"same top token {share:.3f} under the node's limit {limit['same_top_token']:g}")
    return " and ".join(reasons) or None


def positions_of(doc: dict) -> list[Position]:
    return [Position(p["t"], p["lp"], tuple((int(i), float(lp)) for i, lp in p["top"])) for p in doc["positions"]]


def in_words(label: str, reference: str, found: Divergence) -> str:
    """One sentence on what the figures say ("Q4_K_M: mean KLD 0.031 from Q4_1, the top token differing at 8% of
    positions"), without semicolons: it is one part of a row's note."""
    differs = 1 - found.same_top / found.n
    kind = "exact, full vocabulary" if found.exact else "a lower bound from both top-k lists"
    return (f"{label}: mean KLD {found.mean_kld:.3g} from {reference} ({kind}), the top "
            f"token differing from the reference's at {differs:.1%} of {found.n} positions, perplexity "
            f"{found.perplexity_ratio:.3f}x the reference's on the same positions")


# A doc's scores, as opposed to the launch's identity (references_by_family).
SCORES = ("positions", "printed_perplexity", "exact", "scorer", "tokens_id", "chunks", "is_reference", "reference")


def _label(doc: dict) -> str:
    """A launch as the divergence table names it (analysis.correctness divergence_tables reads its perplexity row
    by the same words)."""
    return f"{doc['node']} / {doc['stack']} / {doc['variant']} / {doc.get('quant') or store.UNKNOWN}"


def references_by_family(docs: list[dict]) -> dict[tuple[str, str, str], dict]:
    """The reference scores per (node, weights family, text): the scores of the node's reference model, whether
    a launch served it or a launch's tool scored its file (the doc's `reference`)."""
    found = {}
    for doc in docs:
        launch = {k: v for k, v in doc.items() if k not in SCORES}  # the identity, never the launch's own scores
        for scored in (doc, doc.get("reference")):
            if scored is not None and scored.get("is_reference"):
                found.setdefault((doc["node"], doc.get("weights"), doc["text_id"]), {**launch, **scored})
    return found


def reference_key(reference: dict) -> str:
    """What a launch's exact per-position KLD was computed against: the reference's scorer and tokens."""
    return f"{reference['scorer']} / {reference['tokens_id']}"


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
            rows.append({**base, **metrics.row_fields(M.mean_kld), "value": None, "status": "rejected", "stat": "mean",
                         "reason": f"tokenizer mismatch: {doc['scorer']} tokenized {doc['text_id']} as {doc['tokens_id']}, "
                                   f"the reference ({reference['scorer']}) as {reference['tokens_id']}"})
            continue
        exact = doc.get("exact") or {}
        found = compare(positions_of(reference), positions_of(doc), doc.get("chunks") or 1,
                        exact.get("kld") if exact.get("against") == reference_key(reference) else None,
                        ((reference.get("printed_perplexity") or [None])[0], (doc.get("printed_perplexity") or [None])[0]))
        how = (f"{doc['text_id']}, {found.n} positions in {found.chunks} chunks; candidate {doc['scorer']}, reference "
               f"{reference['model']} ({reference.get('quant')}) by {reference['scorer']}")
        kind = basis_words(found)
        interval = (f"95% CI: t over the {found.chunks} chunk means (positions in a chunk are not independent)"
                    if found.mean_kld_ci else "no interval: one chunk (the chunks are the independent units)")
        kld_ci = found.mean_kld_ci or (None, None)
        rows += [
            {**base, **metrics.row_fields(M.mean_kld), "value": found.mean_kld, "ci_low": kld_ci[0], "ci_high": kld_ci[1],
             "stat": "mean", "n": found.n, "spread_over": "chunks",
             "note": f"KL(reference || launch), {kind}; {interval}; {how}"},
            {**base, **metrics.row_fields(M.kld_p99), "value": found.kld_p99, "stat": "p99", "n": found.n,
             "note": f"99th percentile of the per-position KLD, {kind}; {how}"},
            {**base, **metrics.row_fields(M.same_top_token), "value": found.same_top / found.n, "ci_low": found.same_top_ci[0],
             "ci_high": found.same_top_ci[1], "stat": "mean", "n": found.n, "spread_over": "chunks",
             "note": f"share of positions whose most likely token is the reference's (exact), 95% CI the wider of the t "
                     f"over the {found.chunks} chunk shares and Wilson over the positions; {how}"},
            {**base, **metrics.row_fields(M.rms_delta_p), "value": found.rms_delta_p, "stat": "single",
             "n": found.n, "note": f"RMS of p(launch) - p(reference) of the actual next token; {how}"},
            {**base, **metrics.row_fields(M.perplexity_ratio), "value": found.perplexity_ratio, "stat": "single",
             "n": found.n, "note": f"exp(mean NLL(launch) - mean NLL(reference)): PPL(Q)/PPL(base), {found.ratio_from}; "
                                   f"{in_words(_label(doc), reference['model'], found)}; {how}"},
            {**base, **metrics.row_fields(M.kld_tail_mass), "value": max(found.tail_mass), "stat": "mean",
             "n": found.n, "note": f"{kind}; {how}"},
        ]
        if doc.get("quality_limit"):
            why = beyond(found, doc["quality_limit"])
            rows.append({**base, **metrics.row_fields(M.quality_beyond_limit), "value": float(why is not None),
                         "stat": "single", "n": found.n,
                         "note": (why or f"within the node's quality_limit {doc['quality_limit']}") + f"; {how}"})
    return rows
