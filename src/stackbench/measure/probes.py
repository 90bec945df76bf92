"""Correctness probes (workload kind `probe`): a fast configuration that answers wrong must never top a table.

One probe cell per launch sends, one request at a time, greedy and unsalted with thinking off: the smoke
questions (graded by the rule in the workload file), the greedy prompt set, one request cold then hot, and
a needle. Its figures are smoke_score, cache_consistent and needle_pass (all our own); every greedy output
is kept (`outputs`) so that collect can compare a speculative launch with the no-spec launch of its stack
and model (output_agreement, first_divergence_token), and every no-spec launch with the others whose node
files state the same weights family, across stacks, nodes and quantizations (cross_stack_agreement,
cross_stack_divergence: the report's matrix per family).

The comparison runs at collect, from the stored outputs of both launches (results/agreement.py), not in
the speculative launch's measure job.
"""

from __future__ import annotations

from stackbench.config.model import Workload
from stackbench.engines.base import SERVER_PROMPT_CACHED, Adapter, stated_limit
from stackbench.measure import correctness, workloads
from stackbench.measure.client import RequestRecord, StreamClient
from stackbench.measure.summary import Figure, degeneration_figures

# Thinking off: a reasoning template would otherwise spend the answer's tokens thinking.
THINKING_OFF = workloads.thinking_fields(False)


def needle_sentence(passphrase: str) -> str:
    return f"The secret passphrase is {passphrase}."


def needle_prompt(needle: dict) -> str:
    haystack = correctness.needle_haystack(needle["filler"], needle["chars"], needle_sentence(needle["passphrase"]),
                                           needle["depth"])
    return f"{haystack}\n\n{needle['question']}"


def output_doc(record: RequestRecord) -> dict:
    """What is kept of one greedy output: its text and streamed pieces, one token each where the engine
    streams one token per chunk (`pieces_are_tokens`: as many pieces as the server counts tokens, or one
    fewer, the end-of-sequence token it counts and streams no text for)."""
    counted = record.completion_tokens
    return {"text": record.content, "pieces": list(record.parts), "completion_tokens": counted,
            "pieces_are_tokens": counted is not None and counted - record.content_chunks in (0, 1)}


async def run(client: StreamClient, workload: Workload, adapter: Adapter) -> tuple[list[Figure], dict[str, dict], list[RequestRecord]]:
    """Send every probe once; returns its figures, the greedy outputs by id and the request records."""
    probes = workload.probes
    records: list[RequestRecord] = []
    outputs: dict[str, dict] = {}

    async def ask(output_id: str | None, text: str, output_tokens: int) -> RequestRecord:
        record = await client.chat([{"role": "user", "content": text}], output_tokens, 0, len(records), adapter.server_timings)
        records.append(record)
        if output_id is not None and record.status == "ok":
            outputs[output_id] = output_doc(record)
        return record

    figures: list[Figure] = []
    smoke = probes["smoke"]
    graded = [(q["id"], correctness.grade((await ask(f"smoke-{q['id']}", q["question"], smoke["output_tokens"])).content, q["rule"]))
              for q in smoke["questions"]]
    passed = [name for name, ok in graded if ok]
    # smoke_score (our own): the share of smoke questions whose answer meets its rule; never fails the run.
    figures.append(Figure("smoke_score", len(passed) / len(graded), "ratio", "mean", len(graded),
                          note="passed: " + (", ".join(passed) or "none") + f" of {', '.join(n for n, _ in graded)}"))
    greedy = [await ask(f"prompt-{i + 1}", prompt, workload.output_tokens) for i, prompt in enumerate(workload.prompts)]
    figures += degeneration_figures(greedy)

    cache = probes["cache"]
    cold = await ask("cache-cold", cache["prompt"], cache["output_tokens"])
    hot = await ask(None, cache["prompt"], cache["output_tokens"])
    cached = hot.server.get(SERVER_PROMPT_CACHED, hot.cached_prompt_tokens)
    # cache_consistent (our own; seed 004's cold-then-hot regression): the hot answer equals the cold one.
    figures.append(Figure("cache_consistent", float(cold.content == hot.content), "ratio", "single", 1,
                          note=f"same request cold then hot; hot prompt tokens from cache: {cached if cached is not None else 'not reported'}"))

    needle = probes["needle"]
    found = await ask("needle", needle_prompt(needle), needle["output_tokens"])
    where = f"passphrase at depth {needle['depth']:g} of ~{needle['chars']} characters"
    if found.status == "rejected":
        # Longer than the server takes per request: a result about the server, not a reason to drop the other probes.
        records.remove(found)
        limit = stated_limit(adapter, found.error)
        figures.append(Figure("needle_pass", None, "ratio", "single", 0, note=f"not run: {where} rejected ({found.error}); "
                              "lower probes.needle.chars to fit the server's context"))
        if limit is not None:
            figures.append(Figure("max_input_tokens", limit, "tokens", "single", 1, note="limit stated in the engine's rejection"))
        return figures, outputs, records
    # needle_pass (our own): the passphrase, placed at `depth` of the haystack, is in the answer.
    figures.append(Figure("needle_pass", float(correctness.needle_found(found.content, needle["passphrase"])), "ratio",
                          "single", 1, prompt_tokens=found.prompt_tokens, note=where))
    return figures, outputs, records
