"""The divergence pass (measure/divergence.py) on TEST DOUBLES: an adapter whose tool or server returns known
log-probabilities. The pass keeps the positions a route gives for the second half of each chunk, scores a GGUF
reference once per node (cached beside it), and takes the tool's own printed perplexity where a tool scored."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from stackbench.config.model import Workload
from stackbench.measure import divergence as divergence_pass
from stackbench.results import divergence
from stackbench.results.divergence import Position

ROWS = [{"prompt": f"How many is {i} plus {i}?", "upstream_answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(40)]


def workload(tmp_path: Path, reference: dict | None) -> Workload:
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    scoring = {"dataset": "gsm8k", "text_chars": 1000, "chunk_tokens": 8, "chunks": 2, "top_k": 2,
               "dataset_file": str(data), "text_id": "double text", **({"reference": reference} if reference else {})}
    return Workload(name="divergence", kind="divergence", prompts=("Q: {question}\nA: {answer}\n",), output_tokens=1,
                    prompt_tokens=None, turns=1, salt=False, concurrency=(1,), divergence=scoring)


def spec(model: str, path: str, server_args: dict | None = None) -> SimpleNamespace:
    return SimpleNamespace(launch=SimpleNamespace(model=SimpleNamespace(name=model, path=path), server_args=server_args or {}),
                           engine={"version": "double", "perplexity": "/double/llama-perplexity"},
                           node=SimpleNamespace(cpu_threads=2, quality_limit={"mean_kld": 0.1, "same_top_token": None}))


class ToolDouble:
    """A TEST DOUBLE of a tool-route adapter: every position's next token has probability 1/2 on the launch's
    model and 1/4 on the reference's, the tool 'prints' a perplexity of its own and writes a file whose exact
    KLD is the file's size; its scoring flags are the launch's cache_type_k (none for the reference)."""

    engine_label = "tool double"
    scores_prompts = "tool"

    def __init__(self):
        self.scored: list[tuple[str, list[str]]] = []

    def scoring_flags(self, launch, reference=False):
        return [] if reference or "cache_type_k" not in launch.server_args else ["--cache-type-k", launch.server_args["cache_type_k"]]

    def score_with_tool(self, engine, model_path, text_file, scoring, threads, base, flags=()):
        self.scored.append((model_path, list(flags)))
        base.write_bytes(b"x" * (len(self.scored) + 1))
        p = 0.25 if Path(model_path).name == "ref.gguf" else 0.5
        positions = [Position(1, math.log(p), ((1, math.log(p)), (2, math.log(1 - p)))) for _ in range(6)]
        return [[0, 1, 2], [3, 1, 2]], positions, f"double on {Path(model_path).name}", (1 / p, 0.0)

    def exact_kld(self, reference_base, candidate_base):
        assert reference_base.exists() and candidate_base.exists()
        return [0.1] * 6


def test_a_gguf_reference_is_scored_once_per_node_and_the_tools_printed_perplexity_is_the_figure(tmp_path):
    reference = {"model": "ref", "path": str(tmp_path / "ref.gguf"), "quant": "Q4_1", "scorable_by_tool": True}
    Path(reference["path"]).write_bytes(b"GGUF double")
    adapter = ToolDouble()
    w = workload(tmp_path, reference)
    for _ in range(2):  # two launches of the node
        figures, outputs, _ = asyncio.run(divergence_pass.run(None, w, adapter, spec("q4km", str(tmp_path / "q4km.gguf"))))
    assert [path for path, _ in adapter.scored].count(reference["path"]) == 1
    assert figures[0].metric == "perplexity" and figures[0].value == 2.0 and "as the tool printed it" in figures[0].note
    assert outputs["reference"]["is_reference"] and not outputs["is_reference"]
    assert outputs["exact"] == {"against": divergence.reference_key(outputs["reference"]), "kld": [0.1] * 6}
    assert outputs["quality_limit"]["mean_kld"] == 0.1 and outputs["chunks"] == 2
    found = divergence.compare(divergence.positions_of(outputs["reference"]), divergence.positions_of(outputs))
    assert found.rms_delta_p == pytest.approx(0.25)


def test_the_tool_scores_a_launch_with_its_kv_cache_and_the_reference_with_the_references(tmp_path):
    """The reference model served with a q8_0 KV cache is not the reference: it is measured against it."""
    reference = {"model": "ref", "path": str(tmp_path / "ref.gguf"), "quant": "Q4_1", "scorable_by_tool": True}
    Path(reference["path"]).write_bytes(b"GGUF double")
    adapter = ToolDouble()
    w = workload(tmp_path, reference)
    _, plain, _ = asyncio.run(divergence_pass.run(None, w, adapter, spec("ref", reference["path"])))
    _, cached, _ = asyncio.run(divergence_pass.run(None, w, adapter, spec("ref", reference["path"], {"cache_type_k": "q8_0"})))
    assert plain["is_reference"] and "exact" not in plain
    assert not cached["is_reference"] and cached["reference"]["is_reference"] and "exact" in cached
    assert adapter.scored[1] == (reference["path"], ["--cache-type-k", "q8_0"]) and adapter.scored[2] == (reference["path"], [])


class ServerDouble:
    """A TEST DOUBLE of a server-route adapter and its client: /tokenize gives 20 ids, and each chunk's reply gives
    position j the log-probability -(j + 1) / 10 for the prompt's token j + 1."""

    engine_label = "server double"
    scores_prompts = "server"
    tokenize_path = "/tokenize"
    prompt_logprobs_path = "/scores"
    model = "m"

    def tokenize_body(self, model, text):
        return {"prompt": text}

    def token_ids(self, reply):
        return reply["tokens"]

    def prompt_logprobs_body(self, model, token_ids, top_k):
        return {"ids": token_ids}

    def prompt_positions(self, reply, token_ids, top_k):
        return [Position(t, -(j + 1) / 10, ((t, -(j + 1) / 10),)) for j, t in enumerate(token_ids[1:])]

    def prompt_scorer(self, spec, top_k):
        return "server double"

    async def post_json(self, path, body):
        return (200, {"tokens": list(range(20))}) if path == "/tokenize" else (200, {})


def test_the_server_route_keeps_the_second_half_of_each_chunk_as_llama_perplexity_scores_it(tmp_path):
    double = ServerDouble()
    _, outputs, _ = asyncio.run(divergence_pass.run(double, workload(tmp_path, None), double, spec("m", "m")))
    # chunks of 8: positions 4..6 of each (predicting tokens 5..7), so 3 per chunk
    assert [p["t"] for p in outputs["positions"]] == [5, 6, 7, 13, 14, 15]
    assert [p["lp"] for p in outputs["positions"]] == pytest.approx([-0.5, -0.6, -0.7] * 2)


def test_a_text_shorter_than_its_chunks_fails_the_cell_saying_how_many_tokens_it_needs(tmp_path):
    double = ServerDouble()
    w = workload(tmp_path, None)
    w = Workload(**{**w.__dict__, "divergence": {**w.divergence, "chunks": 4}})
    with pytest.raises(ValueError, match="32 are needed"):
        asyncio.run(divergence_pass.run(double, w, double, spec("m", "m")))
