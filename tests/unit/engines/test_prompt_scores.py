"""The divergence pass's readers: llama-perplexity's KLD base file (engines/llamacpp.read_kld_base, a file written
here in the layout perplexity.cpp writes, `format-from-source`), and the prompt log-probabilities of vLLM and SGLang
on replies captured from the real servers on this machine (tests/fixtures/<engine>/prompt-logprobs.json)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from paths import FIXTURES

from stackbench.engines.llamacpp import read_kld_base
from stackbench.engines.sglang import SglangAdapter
from stackbench.engines.vllm import VllmAdapter


def write_kld_base(path, n_ctx: int, tokens: np.ndarray, logits: np.ndarray) -> None:
    """The file as perplexity.cpp's kl_divergence-base mode writes it (log_softmax with its uint16 packing),
    from `logits` (chunks x scored positions x vocabulary)."""
    n_chunk, n_vocab = tokens.shape[0], logits.shape[-1]
    nv = 2 * ((n_vocab + 1) // 2) + 4
    out = [b"_logits_", np.array([n_ctx, n_vocab, n_chunk], np.int32).tobytes(), tokens.astype(np.int32).tobytes()]
    for row in logits.reshape(-1, n_vocab):
        top, low = row.max(), max(row.min(), row.max() - 16)
        log_sum = math.log(np.exp(row - top).sum())
        scale = (top - low) / 65535
        block = np.zeros(nv, np.uint16)
        block[:4] = np.frombuffer(np.array([scale, low - top - log_sum], np.float32).tobytes(), np.uint16)
        block[4:4 + n_vocab] = np.where(row > low, np.rint((row - low) / scale), 0)
        out.append(block.tobytes())
    path.write_bytes(b"".join(out))


def test_the_kld_base_file_gives_each_scored_positions_top_k_and_the_next_tokens_logprob(tmp_path):
    rng = np.random.default_rng(0)
    n_ctx, n_chunk, vocab = 8, 2, 11
    tokens = rng.integers(0, vocab, (n_chunk, n_ctx))
    first = n_ctx // 2
    logits = rng.normal(0, 3, (n_chunk, n_ctx - 1 - first, vocab))
    write_kld_base(tmp_path / "base.bin", n_ctx, tokens, logits)
    read_tokens, positions = read_kld_base(tmp_path / "base.bin", top_k=3)
    assert read_tokens == tokens.tolist() and len(positions) == n_chunk * (n_ctx - 1 - first)
    for row, position in enumerate(positions):
        chunk, j = divmod(row, n_ctx - 1 - first)
        exact = logits[chunk, j] - np.log(np.exp(logits[chunk, j]).sum())
        assert position.token == tokens[chunk, first + j + 1]
        assert position.logprob == pytest.approx(exact[position.token], abs=2e-3)  # 16 nats in 65535 steps
        assert [t for t, _ in position.top] == list(np.argsort(-exact)[:3])


@pytest.mark.parametrize(("adapter", "fixture"), [(VllmAdapter(), "vllm"), (SglangAdapter(), "sglang")])
def test_a_real_prompt_logprobs_reply_gives_a_position_per_token_after_the_first(adapter, fixture):
    captured = json.loads((FIXTURES / fixture / "prompt-logprobs.json").read_text())
    ids = captured["request"].get("prompt") or captured["request"]["input_ids"]
    positions = adapter.prompt_positions(captured["reply"], ids, 5)
    assert len(positions) == len(ids) - 1
    assert [p.token for p in positions] == ids[1:]
    for p in positions:
        assert len(p.top) == 5 and [lp for _, lp in p.top] == sorted((lp for _, lp in p.top), reverse=True)
        assert p.logprob <= p.top[0][1] + 1e-6  # no token is likelier than the most likely
        if p.token in dict(p.top):
            assert dict(p.top)[p.token] == pytest.approx(p.logprob)


def test_perplexity_from_a_real_vllm_reply_equals_one_computed_from_the_json_alone():
    """Conformance: the reply's own numbers, read without our adapter (entry i's log-probability of prompt token
    i, vLLM's prompt_logprobs layout), give the perplexity ours gives through prompt_positions."""
    from stackbench.results import divergence

    captured = json.loads((FIXTURES / "vllm" / "prompt-logprobs.json").read_text())
    ids = captured["request"]["prompt"]
    entries = captured["reply"]["choices"][0]["prompt_logprobs"]
    nll = [-entries[i][str(ids[i])]["logprob"] for i in range(1, len(ids))]
    theirs = math.exp(sum(nll) / len(nll))
    ours, _ = divergence.perplexity(VllmAdapter().prompt_positions(captured["reply"], ids, 5))
    assert ours == pytest.approx(theirs, rel=1e-12)
