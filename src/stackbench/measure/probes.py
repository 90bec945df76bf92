"""Correctness probes (workload kind `probe`): a fast configuration that answers wrong must never top a table.

One probe cell per launch sends, one request at a time, greedy and unsalted with thinking off: the smoke
questions (graded by the rule in the workload file), the greedy prompt set, one request cold then hot, and
a needle. Its figures are smoke_score, cache_consistent and needle_pass (all our own); every greedy output
is kept (`outputs`) so that collect can compare a speculative launch with the no-spec launch of its stack
and model (output_agreement, first_divergence_token), and every no-spec launch with the others whose node
files state the same weights family, across stacks, nodes and quantizations (cross_stack_agreement,
cross_stack_divergence: the report's matrix per family).

The comparison runs at collect, from the stored outputs of both launches, not in the speculative launch's
measure job: that job would need the no-spec launch to have finished first, an ordering between measure
jobs that Snakemake does not have (and under SLURM they run in parallel).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from stackbench.engines.base import SERVER_PROMPT_CACHED, Adapter, stated_limit
from stackbench.measure import correctness, workloads
from stackbench.measure.client import RequestRecord, StreamClient
from stackbench.measure.summary import Figure, degeneration_figures
from stackbench.plan import Workload
from stackbench.results import store

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
    figures.append(Figure("smoke_score", len(passed) / len(graded), "ratio", "mean", len(graded),
                          note="passed: " + (", ".join(passed) or "none") + f" of {', '.join(n for n, _ in graded)}"))
    greedy = [await ask(f"prompt-{i + 1}", prompt, workload.output_tokens) for i, prompt in enumerate(workload.prompts)]
    figures += degeneration_figures(greedy)

    cache = probes["cache"]
    cold = await ask("cache-cold", cache["prompt"], cache["output_tokens"])
    hot = await ask(None, cache["prompt"], cache["output_tokens"])
    cached = hot.server.get(SERVER_PROMPT_CACHED, hot.cached_prompt_tokens)
    # cache_consistent (our own; seed 004's cold-then-hot regression): the hot answer equals the cold one,
    # and, where the probe set asks for a long generation (seed 004: 710 characters, no repetition), the
    # cold answer is at least that long and does not loop.
    long_enough = len(cold.content) >= cache["min_chars"]
    loops = correctness.is_looping(correctness.repetition_ratio(cold.content))
    figures.append(Figure("cache_consistent", float(cold.content == hot.content and long_enough and not loops), "ratio",
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
        figures.append(Figure("needle_pass", None, "ratio", "single", 0, note=f"not run: {where} rejected ({found.error}); "
                              "lower probes.needle.chars to fit the server's context"))
        if limit is not None:
            figures.append(Figure("max_input_tokens", limit, "tokens", "single", 1, note="limit stated in the engine's rejection"))
        figures.append(regression_figure(figures))
        return figures, outputs, records
    # needle_pass (our own): the passphrase, placed at `depth` of the haystack, is in the answer.
    figures.append(Figure("needle_pass", float(correctness.needle_found(found.content, needle["passphrase"])), "ratio",
                          "single", 1, prompt_tokens=found.prompt_tokens, note=where))
    if needle["hot_runs"]:
        hot_answers = [(await ask(None, needle_prompt(needle), needle["output_tokens"])).content for _ in range(needle["hot_runs"])]
        same = sum(answer == found.content for answer in hot_answers)
        # needle_hot_consistent (our own; seed 004's hot-cache regressions): each hot answer equals the cold one.
        figures.append(Figure("needle_hot_consistent", same / len(hot_answers), "ratio", "mean", len(hot_answers),
                              prompt_tokens=found.prompt_tokens, note=f"the needle request sent hot {len(hot_answers)} times; "
                              f"{same} answered as cold, word for word"))
    if needle["changed_tail"] is not None:
        tail = needle["changed_tail"]
        haystack = needle_prompt({**needle, "question": tail["question"]})
        answer = await ask("needle-tail", haystack, needle["output_tokens"])
        # needle_tail_pass (our own; seed 004's partial prefix hit): the cached haystack, a new question after it.
        figures.append(Figure("needle_tail_pass", float(correctness.grade(answer.content, tail["rule"])), "ratio", "single", 1,
                              prompt_tokens=answer.prompt_tokens, note="the needle's haystack (a prefix cache hit) with "
                              f"another question; prompt tokens from cache: {answer.cached_prompt_tokens or 'not reported'}"))
    figures.append(regression_figure(figures))
    return figures, outputs, records


# The probe figures that are each one pass/fail regression (regression_score counts them).
REGRESSIONS = ("needle_pass", "needle_hot_consistent", "needle_tail_pass", "cache_consistent", "recall_score")


def regression_figure(figures: list[Figure]) -> Figure:
    """regression_score (our own; seed 004's "regression 6/6"): the share of the regression checks run that
    passed, each hot run of the needle one check."""
    passed, total, names = 0.0, 0, []
    for f in figures:
        if f.metric in REGRESSIONS and f.value is not None:
            checks = f.n if f.metric == "needle_hot_consistent" else 1
            passed, total = passed + f.value * checks, total + checks
            names.append(f"{f.metric} {f.value:g}")
    return Figure("regression_score", passed / total if total else None, "ratio", "mean", total,
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
    return [Figure("recall_score", len(passed) / len(graded), "ratio", "mean", len(graded),
                   note=f"{len(recall['turns'])} turns of facts, then asked back; passed: {', '.join(passed) or 'none'}"),
            Figure("recall_consistent", float(again.content == last[1].content), "ratio", "single", 1,
                   note="the last recall request sent again, answered word for word the same")]


# -- greedy equivalence across launches (collect) ----------------------------------------------------------

def agreement(reference: dict, candidate: dict) -> tuple[correctness.Agreement, str, int]:
    """Mean agreement over the prompts both launches answered, the unit compared and how many prompts: token
    by token where both engines streamed one token per chunk for every prompt, else word by word."""
    common = sorted(set(reference["outputs"]) & set(candidate["outputs"]))
    if not common:
        raise ValueError(f"{candidate['ref']} and {reference['ref']} share no probe output to compare")
    pairs = [(reference["outputs"][k], candidate["outputs"][k]) for k in common]
    if all(r["pieces_are_tokens"] and c["pieces_are_tokens"] for r, c in pairs):
        return correctness.mean_agreement((r["pieces"], c["pieces"]) for r, c in pairs), "tokens", len(pairs)
    return correctness.mean_agreement((r["text"].split(), c["text"].split()) for r, c in pairs), "words", len(pairs)


def read_outputs(part_files) -> list[dict]:
    """The probe outputs stored beside each measured part (data/runs/<node>/<launch>/cells.parquet)."""
    docs = []
    for part in part_files:
        path = Path(part).parent / store.PROBE_OUTPUTS
        if path.exists():
            docs += json.loads(path.read_text())
    return docs


IDENTITY = ("node", "stack", "model", "workload")
# The table_id of the cross-stack agreement rows: one matrix per weights family (table_title).
CROSS_STACK_TABLE = "agreement-across-stacks"


def agreement_rows(docs: list[dict], results: pd.DataFrame) -> list[dict]:
    """output_agreement and first_divergence_token per speculative launch against the no-spec launch of the
    same node, stack, model and probe workload; the basis is the candidate's probe cell's, the ref names both
    runs. Speculative decoding is meant to be lossless at temperature 0 (correctness.greedy_agreement)."""
    rows = []
    for candidate in (d for d in docs if d["spec_method"] != "none"):
        references = [d for d in docs if d["spec_method"] == "none" and all(d[k] == candidate[k] for k in IDENTITY)]
        if len(references) != 1:
            continue  # no no-spec launch to compare with (or several, none of them the obvious one)
        reference = references[0]
        found, unit, prompts = agreement(reference, candidate)
        basis = results[(results["ref"] == candidate["ref"]) & (results["workload"] == candidate["workload"])]
        if basis.empty:
            continue
        base = {**basis.iloc[0].to_dict(), "ref": f"{candidate['ref']} vs {reference['ref']}", "value_min": None,
                "value_max": None, "ci_low": None, "ci_high": None, "status": "ok", "reason": None,
                "ttft_included": "no"}
        how = f"greedy outputs of {prompts} probe prompts compared {unit.removesuffix('s')} by {unit.removesuffix('s')} " \
              f"with {reference['variant']} ({reference['ref']})"
        diverged = found.first_divergence_token
        common = sorted(set(reference["outputs"]) & set(candidate["outputs"]))
        charged = correctness.charged_loops({k: (reference["outputs"][k]["text"], candidate["outputs"][k]["text"]) for k in common})
        rows += [{**base, "metric": "output_agreement", "value": found.output_agreement, "unit": "ratio", "stat": "mean",
                  "n": prompts, "note": f"mean common prefix / reference length; {how}"},
                 {**base, "metric": "first_divergence_token", "value": diverged, "unit": unit, "stat": "single",
                  "n": prompts, "note": (f"earliest divergence over the prompts; {how}" if diverged is not None
                                         else f"identical: no divergence; {how}")},
                 # loops_charged (our own): the share of probe prompts whose greedy output loops where the
                 # reference's on the same prompt does not (correctness.charged_loops): the one loop verdict.
                 {**base, "metric": "loops_charged", "value": len(charged) / len(common), "unit": "ratio", "stat": "mean",
                  "n": len(common), "note": (f"loops where {reference['variant']} does not on {', '.join(charged)}" if charged
                                             else f"no output loops where {reference['variant']}'s does not") + f"; {how}"}]
    return rows


def _label(doc: dict) -> str:
    return f"{doc['node']} / {doc['stack']} / {doc.get('quant') or store.UNKNOWN}"


def _comparable(a: dict, b: dict) -> bool:
    """Two no-spec launches of the same stated weights family on the same probe set (a doc stored before the
    probe-set digest existed pairs on the workload name alone)."""
    return (a["ref"] != b["ref"] and a.get("weights") is not None and a.get("weights") == b.get("weights")
            and a["workload"] == b["workload"]
            and (a.get("probe_set") is None or b.get("probe_set") is None or a["probe_set"] == b["probe_set"]))


def cross_stack_rows(docs: list[dict], results: pd.DataFrame) -> list[dict]:
    """cross_stack_agreement and cross_stack_divergence for every ordered pair of no-spec launches, across
    nodes and stacks, whose models state the same weights family (models.<key>.weights; never guessed from
    names). The candidate's probe cell gives the basis (node, stack, variant, quant); the matrix position is
    table_id/table_title (the family) and row_label (the reference, whose output length the share is over) /
    col_label (the candidate), so the report reads the matrix from these rows alone. Not the speculative
    metrics' names: those are read per variant as "differs from its no-spec launch"."""
    nospec = [d for d in docs if d["spec_method"] == "none" and d.get("weights") is not None]
    labels = {d["ref"]: _label(d) for d in nospec}
    taken = [labels[d["ref"]] for d in nospec]
    for d in nospec:  # two no-spec launches of one node, stack and quant (two stack files): the variant tells them apart
        if taken.count(labels[d["ref"]]) > 1:
            labels[d["ref"]] = f"{d['node']} / {d['stack']} / {d['variant']} / {d.get('quant') or store.UNKNOWN}"
    rows = []
    for reference in nospec:
        for candidate in (d for d in nospec if _comparable(reference, d)):
            basis = results[(results["ref"] == candidate["ref"]) & (results["workload"] == candidate["workload"])]
            if basis.empty:
                continue
            found, unit, prompts = agreement(reference, candidate)
            family = reference["weights"]
            base = {**basis.iloc[0].to_dict(), "ref": f"{candidate['ref']} vs {reference['ref']}", "value_min": None,
                    "value_max": None, "ci_low": None, "ci_high": None, "status": "ok", "reason": None,
                    "ttft_included": "no", "table_id": CROSS_STACK_TABLE, "table_title": family,
                    "row_label": labels[reference["ref"]], "col_label": labels[candidate["ref"]]}
            one = unit.removesuffix("s")
            how = (f"greedy outputs of {prompts} probe prompts of {family} compared {one} by {one} with "
                   f"{labels[reference['ref']]} ({reference['ref']})")
            diverged = found.first_divergence_token
            rows += [{**base, "metric": "cross_stack_agreement", "value": found.output_agreement, "unit": "ratio",
                      "stat": "mean", "n": prompts, "note": f"mean common prefix / reference length; {how}"},
                     {**base, "metric": "cross_stack_divergence", "value": diverged, "unit": unit, "stat": "single",
                      "n": prompts, "note": (f"earliest divergence over the prompts; {how}" if diverged is not None
                                             else f"identical: no divergence; {how}")}]
    return rows


def agreement_across(part_files, results: pa.Table) -> list[dict]:
    """The derived rows of the collect step: each speculative launch against its no-spec launch, and every
    pair of no-spec launches of the same weights family across stacks and nodes."""
    docs = read_outputs(part_files)
    if not docs:
        return []
    workloads = sorted({d["workload"] for d in docs})
    probe_rows = results.filter(pc.field("workload").isin(workloads)).to_pandas()
    return agreement_rows(docs, probe_rows) + cross_stack_rows(docs, probe_rows)
