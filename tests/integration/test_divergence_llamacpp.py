"""Conformance of the divergence figures with llama.cpp's own `llama-perplexity` on the default's files: the
Q4_K_M requantized from the Q4_1 GGUF, scored against it on the divergence workload's text. Our perplexity read
from the tool's KLD base file matches the tool's printout; our top-k KLD is a lower bound of the tool's
full-vocabulary "Mean KLD"; our same-top-token share is its "Same top p"."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import build_in_root
from paths import ROOT

from stackbench.engines.llamacpp import LlamaCppAdapter
from stackbench.measure.divergence import text_of
from stackbench.results import divergence

pytestmark = pytest.mark.integration
REFERENCE, CANDIDATE = "data/models/smollm2-135m-q4-1.gguf", "data/models/smollm2-135m-q4km.gguf"


def test_our_figures_from_the_tools_file_match_the_tools_own_printout(tmp_path):
    build_in_root(".envs/llamacpp/ready.json", REFERENCE, CANDIDATE, "data/datasets/gsm8k.jsonl")
    engine = json.loads((ROOT / ".envs/llamacpp/ready.json").read_text())
    workload = yaml.safe_load((ROOT / "configs/workloads/divergence.yaml").read_text())
    scoring = workload["divergence"]
    text = tmp_path / "text.txt"
    text.write_text(text_of(ROOT / "data/datasets/gsm8k.jsonl", scoring["text_chars"], workload["prompts"][0]))
    adapter = LlamaCppAdapter()
    ref_tokens, ref_positions, _, (ref_ppl, _) = adapter.score_with_tool(engine, str(ROOT / REFERENCE), text, scoring, 2, tmp_path)
    tokens, positions, _, (ppl, _) = adapter.score_with_tool(engine, str(ROOT / CANDIDATE), text, scoring, 2, tmp_path)
    assert divergence.tokens_digest(tokens) == divergence.tokens_digest(ref_tokens)
    assert len(positions) == scoring["chunks"] * (scoring["chunk_tokens"] - 1 - scoring["chunk_tokens"] // 2)
    # The file keeps log-probabilities down to 16 nats under each position's top: an actual token deeper than that
    # reads at the floor, so ours can only be lower, and only by what the few such tokens carry.
    for ours, printed in ((divergence.perplexity(positions)[0], ppl), (divergence.perplexity(ref_positions)[0], ref_ppl)):
        assert printed * 0.99 <= ours <= printed * 1.0001

    # The tool's own KLD run of the candidate against the reference's base file.
    base = tmp_path / "reference.kld"
    subprocess.run([engine["perplexity"], "-m", str(ROOT / REFERENCE), "-f", str(text), "-c", str(scoring["chunk_tokens"]),
                    "--chunks", str(scoring["chunks"]), "--kl-divergence-base", str(base), "-t", "2"], check=True,
                   capture_output=True)
    printed = subprocess.run([engine["perplexity"], "-m", str(ROOT / CANDIDATE), "--kl-divergence-base", str(base),
                              "--kl-divergence", "-t", "2"], check=True, capture_output=True, text=True)
    out = printed.stdout + printed.stderr
    tool_kld = float(re.search(r"Mean\s+KLD:\s+([\d.]+)", out)[1])
    tool_same = float(re.search(r"Same top p:\s+([\d.]+)", out)[1]) / 100
    found = divergence.compare(ref_positions, positions)
    assert found.mean_kld <= tool_kld * 1.01  # a lower bound (plus the file's rounding)
    assert found.mean_kld >= tool_kld * 0.5, (found.mean_kld, tool_kld)  # the top 20 hold most of the mass
    assert found.same_top / found.n == pytest.approx(tool_same, abs=3 / found.n)
    print(f"Q4_K_M from Q4_1: ours mean KLD {found.mean_kld:.5f} (top-20 bound) vs the tool's {tool_kld:.5f}; "
          f"same top {found.same_top / found.n:.4f} vs {tool_same:.4f}; PPL {ppl} vs reference {ref_ppl}")
    Path(tmp_path / "summary.txt").write_text(out)
