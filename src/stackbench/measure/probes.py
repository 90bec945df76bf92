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

import asyncio

from stackbench.config.model import Workload
from stackbench.engines.base import Adapter, stated_limit
from stackbench.measure import correctness, workloads
from stackbench.measure.client import RequestRecord, StreamClient
from stackbench.measure.summary import Figure, degeneration_figures
from stackbench.results import agreement
from stackbench.results.metrics import SERVER_PROMPT_CACHED, M

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
    fewer, the end-of-sequence token it counts and streams no text for), and whether it loops."""
    counted = record.completion_tokens
    return {"text": record.content, "pieces": list(record.parts), "completion_tokens": counted,
            "pieces_are_tokens": counted is not None and counted - record.content_chunks in (0, 1),
            # whether it loops (correctness.is_looping): collect charges a loop only against the reference's
            "loops": correctness.is_looping(correctness.repetition_ratio(record.content))}


async def run(client: StreamClient, workload: Workload, adapter: Adapter,
              noise_floor: bool = False) -> tuple[list[Figure], dict[str, dict], list[RequestRecord]]:
    """Send every probe once; returns its figures, the greedy outputs by id and the request records. With
    `noise_floor` (a no-spec launch) the greedy prompts go again two at a time (noise_floor_figure)."""
    probes = workload.probes
    records: list[RequestRecord] = []
    outputs: dict[str, dict] = {}

    async def ask(output_id: str | None, text: str | list[dict], output_tokens: int) -> RequestRecord:
        messages = [{"role": "user", "content": text}] if isinstance(text, str) else text
        record = await client.chat(messages, output_tokens, 0, len(records), adapter.server_timings)
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
    figures.append(Figure(M.smoke_score, len(passed) / len(graded), "mean", len(graded),
                          note="passed: " + (", ".join(passed) or "none") + f" of {', '.join(n for n, _ in graded)}"))
    greedy = [await ask(f"prompt-{i + 1}", prompt, workload.output_tokens) for i, prompt in enumerate(workload.prompts)]
    figures += degeneration_figures(greedy)
    if noise_floor:
        beside = [await asyncio.gather(*(ask(None, prompt, workload.output_tokens) for _ in range(2)))
                  for prompt in workload.prompts]
        figures.append(noise_floor_figure(greedy, beside))

    cache = probes["cache"]
    cold = await ask("cache-cold", cache["prompt"], cache["output_tokens"])
    hot = await ask(None, cache["prompt"], cache["output_tokens"])
    cached = hot.server.get(SERVER_PROMPT_CACHED, hot.cached_prompt_tokens)
    # cache_consistent (our own; seed 004's cold-then-hot regression): the hot answer equals the cold one,
    # and, where the probe set asks for a long generation (seed 004: 710 characters, no repetition), the
    # cold answer is at least that long and does not loop.
    long_enough = len(cold.content) >= cache["min_chars"]
    loops = correctness.is_looping(correctness.repetition_ratio(cold.content))
    figures.append(Figure(M.cache_consistent, float(cold.content == hot.content and long_enough and not loops),
                          "single", 1, note=f"same request cold then hot ({len(cold.content)} characters cold, at least "
                          f"{cache['min_chars']} asked{', looping' if loops else ''}); hot prompt tokens from cache: "
                          f"{cached if cached is not None else 'not reported'}"))
    if "recall" in probes:
        figures += await recall_figures(ask, probes["recall"])

    needle = probes["needle"]
    found = await ask("needle", needle_prompt(needle), needle["output_tokens"])
    where = f"passphrase at depth {needle['depth']:g} of ~{needle['chars']} characters"
    if found.status == "rejected":
        # Longer than the server takes per request: a result about the server, not a reason to drop the other probes.
        records.remove(found)
        limit = stated_limit(adapter, found.error)
        figures.append(Figure(M.needle_pass, None, "single", 0, note=f"not run: {where} rejected ({found.error}); "
                              "lower probes.needle.chars to fit the server's context"))
        if limit is not None:
            figures.append(Figure(M.max_input_tokens, limit, "single", 1, note="limit stated in the engine's rejection"))
        figures.append(regression_figure(figures))
        return figures, outputs, records
    # needle_pass (our own): the passphrase, placed at `depth` of the haystack, is in the answer.
    figures.append(Figure(M.needle_pass, float(correctness.needle_found(found.content, needle["passphrase"])),
                          "single", 1, prompt_tokens=found.prompt_tokens, note=where))
    if needle["hot_runs"]:
        hot_answers = [(await ask(None, needle_prompt(needle), needle["output_tokens"])).content for _ in range(needle["hot_runs"])]
        same = sum(answer == found.content for answer in hot_answers)
        # needle_hot_consistent (our own; seed 004's hot-cache regressions): each hot answer equals the cold one.
        figures.append(Figure(M.needle_hot_consistent, same / len(hot_answers), "mean", len(hot_answers),
                              prompt_tokens=found.prompt_tokens, note=f"the needle request sent hot {len(hot_answers)} times; "
                              f"{same} answered as cold, word for word"))
    if needle["changed_tail"] is not None:
        tail = needle["changed_tail"]
        haystack = needle_prompt({**needle, "question": tail["question"]})
        answer = await ask("needle-tail", haystack, needle["output_tokens"])
        # needle_tail_pass (our own; seed 004's partial prefix hit): the cached haystack, a new question after it.
        figures.append(Figure(M.needle_tail_pass, float(correctness.grade(answer.content, tail["rule"])), "single", 1,
                              prompt_tokens=answer.prompt_tokens, note="the needle's haystack (a prefix cache hit) with "
                              f"another question; prompt tokens from cache: {answer.cached_prompt_tokens or 'not reported'}"))
    figures.append(regression_figure(figures))
    return figures, outputs, records


def noise_floor_figure(alone: list[RequestRecord], beside: list[list[RequestRecord]]) -> Figure:
    """agreement_noise_floor (our own; issue 37): the launch's own greedy outputs of the probe prompts sent
    two at a time (concurrency 2, another batch shape) against the same prompts sent alone, compared as
    results/agreement.py compares two launches: the agreement a launch shows with itself, which a
    speculative variant's disagreement must exceed (by analysis.correctness's margin) to be charged."""
    pairs = [(output_doc(one), output_doc(other)) for one, two in zip(alone, beside) for other in two
             if one.status == "ok" and other.status == "ok"]
    if not pairs:
        return Figure(M.agreement_noise_floor, None, "mean", 0, note="no probe prompt answered both alone and two at a time")
    outputs = {"ref": "alone", "outputs": {str(i): a for i, (a, _) in enumerate(pairs)}}
    found, unit, n = agreement.agreement(outputs, {"ref": "two at a time", "outputs": {str(i): b for i, (_, b) in enumerate(pairs)}})
    diverged = found.first_divergence_token
    return Figure(M.agreement_noise_floor, found.output_agreement, "mean", n,
                  note=f"greedy probe outputs sent two at a time vs alone, {n} pairs compared {unit.removesuffix('s')} by "
                       f"{unit.removesuffix('s')}: " + (f"earliest divergence at {diverged}" if diverged is not None else "identical"))


# The probe figures that are each one pass/fail regression (regression_score counts them).
REGRESSIONS = (M.needle_pass, M.needle_hot_consistent, M.needle_tail_pass, M.cache_consistent, M.recall_score)


def regression_figure(figures: list[Figure]) -> Figure:
    """regression_score (our own; seed 004's "regression 6/6"): the share of the regression checks run that
    passed, each hot run of the needle one check."""
    passed, total, names = 0.0, 0, []
    for f in figures:
        if f.metric in REGRESSIONS and f.value is not None:
            checks = f.n if f.metric == M.needle_hot_consistent else 1
            passed, total = passed + f.value * checks, total + checks
            names.append(f"{f.metric} {f.value:g}")
    return Figure(M.regression_score, passed / total if total else None, "mean", total,
                  note=f"{round(passed)} of {total} regression checks passed: " + ", ".join(names))


async def recall_figures(ask, recall: dict) -> list[Figure]:
    """recall_score (our own; seed 004's multi-turn regression): facts stated over several turns of one
    growing conversation, then asked back, each question graded by its rule; recall_consistent: the last
    request sent again answers word for word the same."""
    messages: list[dict] = []
    for turn in recall["turns"]:
        messages.append({"role": "user", "content": turn})
        reply = await ask(None, list(messages), recall["output_tokens"])
        messages.append({"role": "assistant", "content": reply.content})
    graded, last = [], None
    for q in recall["questions"]:
        asked = [*messages, {"role": "user", "content": q["question"]}]
        last = (asked, await ask(f"recall-{q['id']}", asked, recall["output_tokens"]))
        graded.append((q["id"], correctness.grade(last[1].content, q["rule"])))
    again = await ask(None, last[0], recall["output_tokens"])
    passed = [name for name, ok in graded if ok]
    return [Figure(M.recall_score, len(passed) / len(graded), "mean", len(graded),
                   note=f"{len(recall['turns'])} turns of facts, then asked back; passed: {', '.join(passed) or 'none'}"),
            Figure(M.recall_consistent, float(again.content == last[1].content), "single", 1,
                   note="the last recall request sent again, answered word for word the same")]
