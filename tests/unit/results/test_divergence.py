"""The divergence figures (results/divergence.py) against distributions whose answers are known, and the
collect step's refusal of two tokenizations."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stackbench.results import divergence
from stackbench.results.divergence import Position


def position(token: int, probs: list[float], k: int | None = None) -> Position:
    """A position of a test double's distribution `probs` over a small vocabulary, its top-k kept."""
    ranked = sorted(enumerate(probs), key=lambda t: -t[1])[:k or len(probs)]
    return Position(token, math.log(probs[token]), tuple((i, math.log(p)) for i, p in ranked))


def kl(p: list[float], q: list[float]) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q) if a > 0)


def test_full_vocabulary_recovers_kld_same_top_and_perplexity_exactly():
    ref = [[0.7, 0.2, 0.1], [0.5, 0.3, 0.2], [0.1, 0.1, 0.8]]
    cand = [[0.6, 0.3, 0.1], [0.3, 0.5, 0.2], [0.2, 0.1, 0.7]]
    tokens = [0, 1, 2]
    r = [position(t, p) for t, p in zip(tokens, ref)]
    c = [position(t, p) for t, p in zip(tokens, cand)]
    found = divergence.compare(r, c)
    klds = [kl(p, q) for p, q in zip(ref, cand)]
    assert found.mean_kld == pytest.approx(sum(klds) / 3, abs=1e-12)
    assert found.same_top == 2  # the second position's top token moves from 0 to 1
    dp = [cand[i][t] - ref[i][t] for i, t in enumerate(tokens)]
    assert found.rms_delta_p == pytest.approx(math.sqrt(sum(d * d for d in dp) / 3))
    ppl, _ = divergence.perplexity(c)
    assert ppl == pytest.approx(math.exp(-(math.log(0.6) + math.log(0.5) + math.log(0.7)) / 3))
    ref_ppl, _ = divergence.perplexity(r)
    assert found.perplexity_ratio == pytest.approx(ppl / ref_ppl)


def test_a_launch_against_itself_diverges_by_nothing():
    r = [position(0, [0.5, 0.25, 0.25], k=2), position(2, [0.1, 0.3, 0.6], k=2)]
    found = divergence.compare(r, r)
    assert found.mean_kld == pytest.approx(0, abs=1e-9) and found.same_top == 2 and found.rms_delta_p == 0


distributions = st.lists(st.floats(0.01, 1.0), min_size=6, max_size=6).map(lambda w: [x / sum(w) for x in w])


@settings(max_examples=200, deadline=None)
@given(p=distributions, q=distributions, k=st.integers(1, 6), token=st.integers(0, 5))
def test_the_bound_never_exceeds_the_full_vocabulary_kld(p, q, k, token):
    bound = divergence.kld_bound(position(token, p, k), position(token, q, k))
    assert 0 <= bound <= kl(p, q) + 1e-9


VOCAB, K = 1000, 20


def vocabulary_distribution(seed: int, sigma: float) -> np.ndarray:
    z = np.random.default_rng(seed).normal(0, sigma, VOCAB)
    p = np.exp(z - z.max())
    return p / p.sum()


def top_position(probs: np.ndarray, token: int) -> Position:
    order = np.argsort(-probs, kind="stable")[:K]
    return Position(token, math.log(probs[token]), tuple((int(i), math.log(probs[i])) for i in order))


def kl_np(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.sum(p * np.log(p / q)))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), sigma=st.floats(1.5, 6.0), token=st.integers(0, VOCAB - 1))
def test_the_bound_at_vocabulary_1000_and_k_20_stays_under_the_full_kld(seed, sigma, token):
    p, q = vocabulary_distribution(seed, sigma), vocabulary_distribution(seed + 1, sigma)
    assert divergence.kld_bound(top_position(p, token), top_position(q, token)) <= kl_np(p, q) + 1e-9


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), sigma=st.floats(2.0, 6.0), steps=st.tuples(st.integers(0, 9), st.integers(1, 10)))
def test_mixing_the_candidate_further_towards_a_distant_distribution_never_lowers_the_reported_kld(seed, sigma, steps):
    """Twelve positions (vocabulary 1,000, top-20), the candidate mixed a share alpha of the way from the reference
    to a distant distribution: the reported mean KLD at a larger alpha is never lower. Logit scales from 2 (the top
    20 hold about 60% of the mass) to 6: flatter still, a step can fall (docs/quality.md: 1 of 6,000 steps at 1.55)."""
    low, high = sorted((steps[0], steps[0] + steps[1]))
    rng = np.random.default_rng(seed)
    cases = [(vocabulary_distribution(seed + 2 * i, sigma), vocabulary_distribution(seed + 2 * i + 1, sigma),
              int(rng.integers(VOCAB))) for i in range(12)]

    def reported(alpha: float) -> float:
        reference = [top_position(p, t) for p, _, t in cases]
        candidate = [top_position((1 - alpha) * p + alpha * d, t) for p, d, t in cases]
        return divergence.compare(reference, candidate).mean_kld

    assert reported(min(high, 10) / 10) >= reported(low / 10) - 1e-12


def geometric(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A distribution whose log-probabilities fall 0.25 nats a rank, on shuffled token ids, and its ranking."""
    ids = np.random.default_rng(seed).permutation(VOCAB)
    p = np.empty(VOCAB)
    p[ids] = np.exp(-0.25 * np.arange(VOCAB))
    return p / p.sum(), ids


def swapped(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    q = p.copy()
    q[a], q[b] = p[b], p[a]
    return q


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_disjoint_top_lists_and_ten_swapped_tokens_read_at_least_half_the_true_kld(seed):
    """The shared-top-k figure read 0 for both (the tokens both lists hold were equal, the tails too)."""
    p, rank = geometric(seed)
    for q in (swapped(p, rank[:20], rank[20:40]), swapped(p, rank[:10], rank[20:30])):
        true = kl_np(p, q)
        assert true > 2
        assert divergence.kld_bound(top_position(p, 0), top_position(q, 0)) >= true / 2


def test_chunk_intervals_widen_when_positions_within_a_chunk_move_together():
    """The same per-position values, once arranged so each chunk's positions move together and once spread
    evenly over the chunks: the chunk interval is wider for the first, and wider than the positions' own."""
    values = np.repeat([0.01, 0.05, 0.02, 0.09], 50)
    together = divergence.chunk_interval(values, 4)
    spread = divergence.chunk_interval(values.reshape(4, 50).T.reshape(-1), 4)
    naive = 1.96 * values.std(ddof=1) / math.sqrt(len(values))
    assert together[1] - together[0] > 10 * (spread[1] - spread[0])
    assert (together[1] - together[0]) / 2 > naive
    assert divergence.chunk_interval(values, 1) is None


def test_an_exact_figure_is_used_as_given_and_the_ratio_takes_the_printed_perplexities():
    r = [position(0, [0.5, 0.3, 0.2], k=1), position(1, [0.2, 0.7, 0.1], k=1)]
    c = [position(0, [0.4, 0.4, 0.2], k=1), position(1, [0.3, 0.6, 0.1], k=1)]
    found = divergence.compare(r, c, chunks=2, exact=[0.1, 0.3], printed=(5.0, 5.5))
    assert found.exact and found.mean_kld == pytest.approx(0.2) and found.tail_mass == (0.0, 0.0)
    assert found.perplexity_ratio == pytest.approx(1.1)
    bound = divergence.compare(r, c, chunks=2)
    assert not bound.exact and bound.top_k == (1, 1) and bound.tail_mass[0] > 0


def test_a_launch_beyond_the_nodes_quality_limit_says_why():
    r = [position(0, [0.9, 0.05, 0.05]), position(1, [0.1, 0.8, 0.1])]
    c = [position(0, [0.2, 0.7, 0.1]), position(1, [0.1, 0.8, 0.1])]
    found = divergence.compare(r, c)
    assert "mean KLD" in divergence.beyond(found, {"mean_kld": 0.1, "same_top_token": None})
    assert "same top token 0.500" in divergence.beyond(found, {"mean_kld": None, "same_top_token": 0.85})
    assert divergence.beyond(found, {"mean_kld": 10.0, "same_top_token": 0.1}) is None


def test_percentile_interpolates_as_llama_perplexity_does():
    assert divergence.percentile([0.0, 1.0, 2.0, 3.0, 4.0], 0.99) == pytest.approx(3.96)


def doc(ref: str, model: str, tokens: list[list[int]], positions: list[Position], **more) -> dict:
    return {"ref": ref, "node": "n", "stack": "llamacpp", "variant": "nospec", "spec_method": "none", "model": model,
            "workload": "divergence", "weights": "W", "quant": more.pop("quant", "Q4_K_M"), "text_id": "text",
            "scorer": "double", "tokens_id": divergence.tokens_digest(tokens),
            "positions": [{"t": p.token, "lp": p.logprob, "top": [list(t) for t in p.top]} for p in positions], **more}


def basis(ref: str) -> dict:
    return {"ref": ref, "workload": "divergence", "node": "n", "stack": "llamacpp", "variant": "nospec"}


def test_collect_compares_with_the_reference_the_launch_scored_and_refuses_another_tokenization():
    ref_pos = [position(1, [0.2, 0.8]), position(0, [0.6, 0.4])]
    cand_pos = [position(1, [0.3, 0.7]), position(0, [0.5, 0.5])]
    reference = {**doc("x", "q4-1", [[5, 1, 0]], ref_pos, quant="Q4_1"), "is_reference": True}
    launch = doc("run-a", "q4km", [[5, 1, 0]], cand_pos, reference=reference,
                 quality_limit={"mean_kld": 0.001, "same_top_token": None})
    other = doc("run-b", "hf", [[5, 1, 9]], cand_pos, quant="BF16")
    results = pd.DataFrame([basis("run-a"), basis("run-b")])
    rows = divergence.divergence_rows([launch, other], results)
    ours = {r["metric"]: r for r in rows if r["ref"].startswith("run-a")}
    expected = divergence.compare(ref_pos, cand_pos)
    assert ours["mean_kld"]["value"] == pytest.approx(expected.mean_kld)
    assert ours["same_top_token"]["value"] == 1.0 and ours["same_top_token"]["ci_low"] < 1.0
    assert ours["mean_kld"]["note"].startswith("KL(reference || launch), a lower bound over the union")
    assert ours["kld_tail_mass"]["value"] == pytest.approx(0, abs=1e-12)  # a two-token vocabulary: nothing unseen
    assert ours["quality_beyond_limit"]["value"] == 1.0 and "above the node's limit" in ours["quality_beyond_limit"]["note"]
    from stackbench.analysis.correctness import divergence_tables

    frame = pd.DataFrame([{**r, "source": "measured", "quant": "Q4_K_M"} for r in rows if r["ref"].startswith("run-a")])
    (_, table, _), = divergence_tables(frame)
    assert table["KLD basis"].tolist() == ["bound, unseen mass 0"]
    refused = [r for r in rows if r["ref"].startswith("run-b")]
    assert len(refused) == 1 and refused[0]["status"] == "rejected"
    assert refused[0]["reason"].startswith("tokenizer mismatch") and "run-b" not in refused[0]["reason"]


def test_collect_takes_the_exact_values_computed_against_this_reference_and_the_bound_against_another():
    ref_pos = [position(1, [0.2, 0.8], k=1), position(0, [0.6, 0.4], k=1), position(1, [0.5, 0.5], k=1),
               position(0, [0.7, 0.3], k=1)]
    cand_pos = [position(1, [0.3, 0.7], k=1), position(0, [0.5, 0.5], k=1), position(1, [0.4, 0.6], k=1),
                position(0, [0.6, 0.4], k=1)]
    reference = {**doc("x", "q4-1", [[5, 1, 0]], ref_pos, quant="Q4_1"), "is_reference": True, "chunks": 2}
    exact = [0.01, 0.02, 0.03, 0.04]
    launch = doc("run-a", "q4km", [[5, 1, 0]], cand_pos, reference=reference, chunks=2,
                 exact={"against": divergence.reference_key(reference), "kld": exact})
    stale = doc("run-b", "q4km", [[5, 1, 0]], cand_pos, reference=reference, chunks=2,
                exact={"against": "another reference / 0", "kld": exact})
    rows = divergence.divergence_rows([launch, stale], pd.DataFrame([basis("run-a"), basis("run-b")]))
    ours = {r["metric"]: r for r in rows if r["ref"].startswith("run-a")}
    other = {r["metric"]: r for r in rows if r["ref"].startswith("run-b")}
    assert ours["mean_kld"]["value"] == pytest.approx(0.025) and "exact" in ours["mean_kld"]["note"]
    assert ours["mean_kld"]["ci_low"] < 0.025 < ours["mean_kld"]["ci_high"] and ours["kld_tail_mass"]["value"] == 0
    assert "lower bound" in other["mean_kld"]["note"] and other["kld_tail_mass"]["value"] > 0


def test_a_tail_rounded_to_nothing_still_leaves_room_for_a_missing_token():
    """The launch's top 2 hold all but 1e-6 of the mass (rounding), and the reference's top token is missing from
    them: the bound takes the token's share as up to the rounding allowance, never as zero (which would read
    p log(p / 1e-12), far above any full KLD the returned figures allow), and it still reads far."""
    reference = Position(1, math.log(0.3), ((0, math.log(0.5)), (1, math.log(0.3))))
    candidate = Position(1, math.log(0.7), ((1, math.log(0.7)), (2, math.log(0.3 - 1e-6))))
    found = divergence.kld_bound(reference, candidate)
    # A full pair these lists allow within the rounding: token 0 holds the allowance on the launch, token 2 holds
    # 0.2 on the reference, the launch's 0.7 and 0.3 shrink by the allowance to make room.
    p, q = [0.5, 0.3, 0.2], [divergence.TAIL_ROUNDING, 0.7 - divergence.TAIL_ROUNDING / 2, 0.3 - divergence.TAIL_ROUNDING / 2]
    assert 3 < found <= kl(p, q) + 1e-3  # far (the reference's top token is nearly absent), never beyond that pair
