"""Conformance of the divergence figures with llama.cpp's own `llama-perplexity` on the default's files: the
Q4_K_M requantized from the Q4_1 GGUF, scored against it on the divergence workload's text. Our exact mean KLD
from the two tools' files matches the tool's own "Mean KLD" within 1%, our same-top share its "Same top p"
within half a point; and a quantized KV cache, passed as the launch passes it, moves the figure up."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml
from helpers import build_in_root
from paths import ROOT

from stackbench.engines.llamacpp import LlamaCppAdapter
from stackbench.measure.divergence import text_of
from stackbench.results import divergence

pytestmark = pytest.mark.integration
REFERENCE, CANDIDATE = "data/models/smollm2-135m-q4-1.gguf", "data/models/smollm2-135m-q4km.gguf"


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    build_in_root(".envs/llamacpp/ready.json", REFERENCE, CANDIDATE, "data/datasets/gsm8k.jsonl")
    work = tmp_path_factory.mktemp("divergence")
    engine = json.loads((ROOT / ".envs/llamacpp/ready.json").read_text())
    workload = yaml.safe_load((ROOT / "configs/workloads/divergence.yaml").read_text())
    scoring = workload["divergence"]
    text = work / "text.txt"
    text.write_text(text_of(ROOT / "data/datasets/gsm8k.jsonl", scoring["text_chars"], workload["prompts"][0]))
    adapter = LlamaCppAdapter()

    done = {}

    def score(model: str, name: str, flags=()):
        """Each file and settings scored once per module (about 20 s a run here)."""
        if name not in done:
            tokens, positions, _, (ppl, _) = adapter.score_with_tool(engine, str(ROOT / model), text, scoring, 2,
                                                                     work / name, list(flags))
            done[name] = tokens, positions, ppl
        return done[name]

    return engine, scoring, text, work, adapter, score


def test_our_exact_figures_match_the_tools_own_printout(scored):
    engine, scoring, text, work, adapter, score = scored
    ref_tokens, ref_positions, ref_ppl = score(REFERENCE, "reference.kld")
    tokens, positions, ppl = score(CANDIDATE, "candidate.kld")
    assert divergence.tokens_digest(tokens) == divergence.tokens_digest(ref_tokens)
    assert len(positions) == scoring["chunks"] * (scoring["chunk_tokens"] - 1 - scoring["chunk_tokens"] // 2)
    # The file keeps log-probabilities down to 16 nats under each position's top: an actual token deeper than that
    # reads at the floor, so the perplexity from the file can only be lower; the ratio takes the printed ones.
    for ours, printed in ((divergence.perplexity(positions)[0], ppl), (divergence.perplexity(ref_positions)[0], ref_ppl)):
        assert printed * 0.99 <= ours <= printed * 1.0001

    # The tool's own KLD run of the candidate against the reference's base file.
    printed = subprocess.run([engine["perplexity"], "-m", str(ROOT / CANDIDATE), "--kl-divergence-base", str(work / "reference.kld"),
                              "--kl-divergence", "-t", "2"], check=True, capture_output=True, text=True)
    out = printed.stdout + printed.stderr
    tool_kld = float(re.search(r"Mean\s+KLD:\s+([\d.]+)", out)[1])
    tool_same = float(re.search(r"Same top p:\s+([\d.]+)", out)[1]) / 100
    exact = adapter.exact_kld(work / "reference.kld", work / "candidate.kld")
    found = divergence.compare(ref_positions, positions, scoring["chunks"], exact, (ref_ppl, ppl))
    bound = divergence.compare(ref_positions, positions, scoring["chunks"])
    assert found.exact and found.mean_kld == pytest.approx(tool_kld, rel=0.01), (found.mean_kld, tool_kld)
    assert abs(found.same_top / found.n - tool_same) <= 0.005
    assert bound.mean_kld <= found.mean_kld * 1.001  # the top-20 bound stays under the exact figure
    assert found.perplexity_ratio == pytest.approx(ppl / ref_ppl)
    print(f"Q4_K_M from Q4_1: exact mean KLD {found.mean_kld:.5f} {found.mean_kld_ci} vs the tool's {tool_kld:.5f}; "
          f"top-20 bound {bound.mean_kld:.5f}; same top {found.same_top / found.n:.4f} vs {tool_same:.4f}; PPL {ppl} vs {ref_ppl}")


@pytest.mark.parametrize("cache", ["q8_0", "q4_0"])
def test_a_quantized_kv_cache_moves_the_figure_up(scored, cache):
    """The reference's own file served with a quantized KV cache (scoring_flags renders the launch's server_args) is
    a launch measured against the reference: its exact mean KLD is above the f16 launch's (0: the same file, the
    same settings), with intervals that separate; the Q4_K_M's figure with that cache is printed beside."""
    engine, scoring, text, work, adapter, score = scored
    _, ref_positions, ref_ppl = score(REFERENCE, "reference.kld")
    launch = type("L", (), {"server_args": {"cache_type_k": cache, "cache_type_v": cache, "flash_attn": "on", "threads": 2}})()
    flags = adapter.scoring_flags(launch)
    assert flags == ["--cache-type-k", cache, "--cache-type-v", cache, "--flash-attn", "on"]
    figures = {}
    for name, model, chosen in (("f16", REFERENCE, ["--flash-attn", "on"]), (cache, REFERENCE, flags)):
        _, positions, ppl = score(model, f"{name}.kld", chosen)
        figures[name] = divergence.compare(ref_positions, positions, scoring["chunks"],
                                           adapter.exact_kld(work / "reference.kld", work / f"{name}.kld"), (ref_ppl, ppl))
    plain, quantized = figures["f16"], figures[cache]
    print(f"Q4_1 launch vs the Q4_1 reference, KV cache f16 (flash attention on): mean KLD {plain.mean_kld:.6f} "
          f"{plain.mean_kld_ci}; {cache}: {quantized.mean_kld:.6f} {quantized.mean_kld_ci}; same top "
          f"{plain.same_top / plain.n:.4f} vs {quantized.same_top / quantized.n:.4f}; PPL ratio {quantized.perplexity_ratio:.5f}")
    assert quantized.mean_kld > plain.mean_kld and quantized.mean_kld_ci[0] > plain.mean_kld_ci[1]
