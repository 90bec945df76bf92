"""The divergence figures (results/divergence.py) against distributions whose answers are known, and the
collect step's refusal of two tokenizations."""

from __future__ import annotations

import math

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
    assert found.mean_kld == pytest.approx(0, abs=1e-12) and found.same_top == 2 and found.rms_delta_p == 0


distributions = st.lists(st.floats(0.01, 1.0), min_size=6, max_size=6).map(lambda w: [x / sum(w) for x in w])


@settings(max_examples=200, deadline=None)
@given(p=distributions, q=distributions, k=st.integers(1, 6))
def test_the_top_k_figure_never_exceeds_the_full_vocabulary_kld(p, q, k):
    """Coarsening to the shared top-k plus one tail bucket is a lower bound (data-processing inequality)."""
    bound = divergence.kld_topk(position(0, p, k), position(0, q, k))
    assert 0 <= bound <= kl(p, q) + 1e-9


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
    launch = doc("run-a", "q4km", [[5, 1, 0]], cand_pos, reference=reference)
    other = doc("run-b", "hf", [[5, 1, 9]], cand_pos, quant="BF16")
    results = pd.DataFrame([basis("run-a"), basis("run-b")])
    rows = divergence.divergence_rows([launch, other], results)
    ours = {r["metric"]: r for r in rows if r["ref"].startswith("run-a")}
    expected = divergence.compare(ref_pos, cand_pos)
    assert ours["mean_kld"]["value"] == pytest.approx(expected.mean_kld)
    assert ours["same_top_token"]["value"] == 1.0 and ours["same_top_token"]["ci_low"] < 1.0
    refused = [r for r in rows if r["ref"].startswith("run-b")]
    assert len(refused) == 1 and refused[0]["status"] == "rejected"
    assert refused[0]["reason"].startswith("tokenizer mismatch") and "run-b" not in refused[0]["reason"]
