"""The accuracy set (workload kind `accuracy`): quality beside speed, once per launch.

One cell sends the workload's questions (models/datasets.subset: a fixed, seeded subset, carried in the
launch spec as `accuracy.items`) through the chat endpoint on the cell's concurrency of streams (a closed
loop, measure/client.run_streams; the rows' `concurrency` says how many, since a batch shape can flip a
greedy near-tie), greedy (the client's temperature 0),
unsalted, with the workload's thinking setting and EOS honoured (max_tokens = output_tokens caps a reply).
The answer is the last number in the reply; the reference is GSM8K's `#### N`; they match as numbers. A reply cut
off at max_tokens (finish_reason "length") has no answer: its last number is an intermediate step, not a result.
Every reply is kept (`outputs`, stored as accuracy_outputs.json beside the launch's cells) with its extracted
answer, so a score can be re-derived and collect can compare two launches' answers (answer_agreement).
"""

from __future__ import annotations

import re

from stackbench.config.model import Workload
from stackbench.engines.base import Adapter
from stackbench.measure.client import RequestRecord, StreamClient, run_streams
from stackbench.measure.summary import Figure
from stackbench.measure.workloads import Request
from stackbench.results.estimators import wilson
from stackbench.results.metrics import M

# A number as GSM8K writes one: optional sign, thousands separators, decimals ("1,234.50", "-3", ".5").
NUMBER = re.compile(r"-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)")


def extract(reply: str) -> str | None:
    """The answer: the last number in the reply, separators and a trailing ".0…" dropped; None when it has none."""
    found = NUMBER.findall(reply)
    return None if not found else canonical(found[-1])


def canonical(number: str) -> str | None:
    """A number written as GSM8K's references are (no separators, integral values without decimals)."""
    cleaned = number.replace(",", "").rstrip(".")
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return str(int(value)) if value.is_integer() else repr(value)


def prompt(workload: Workload, item: dict) -> str:
    return workload.prompts[0].format(question=item["question"])


def figures(outputs: dict[str, dict], dataset: str) -> list[Figure]:
    """accuracy (share of the questions answered right, with its Wilson 95% interval) and accuracy_invalid
    (share of replies with no answer: no number in them, or cut off at max_tokens), over the replies kept."""
    n = len(outputs)
    correct = sum(o["correct"] for o in outputs.values())
    invalid = sum(o["answer"] is None for o in outputs.values())
    truncated = sum(o.get("finish_reason") == "length" for o in outputs.values())
    low, high = wilson(correct, n)
    return [Figure(M.accuracy, correct / n, "mean", n, ci_low=low, ci_high=high,
                   note=f"{correct} of {n} {dataset} questions right (last number in the reply vs the reference); "
                        f"Wilson 95% interval {low:.2f}-{high:.2f}"),
            Figure(M.accuracy_invalid, invalid / n, "mean", n,
                   note=f"{invalid} of {n} replies hold no answer ({truncated} cut off at max_tokens, "
                        f"{invalid - truncated} without a number)")]


async def run(client: StreamClient, workload: Workload, adapter: Adapter,
              streams: int = 1) -> tuple[list[Figure], dict[str, dict], list[RequestRecord]]:
    """Ask every question once on `streams` streams; returns the figures, every reply by question id (in
    the set's order) and the request records."""
    items = workload.accuracy.get("items")
    if not items:
        raise ValueError(f"{workload.accuracy['dataset']}: no questions in the launch spec (the task set was not "
                         "fetched when it was planned: run the workflow's dataset rule, then plan again)")
    asked = [Request((prompt(workload, item),), workload.output_tokens) for item in items]
    records = sorted(await run_streams(client, asked, streams, adapter.server_timings), key=lambda r: r.request)
    outputs = {}
    for record in records:
        if record.status == "ok":
            item = items[record.request]
            truncated = record.finish_reason == "length"
            answer = None if truncated else extract(record.content)
            outputs[item["id"]] = {"text": record.content, "answer": answer, "reference": item["reference"],
                                   "correct": answer is not None and answer == canonical(item["reference"]),
                                   "completion_tokens": record.completion_tokens, "finish_reason": record.finish_reason}
    if len(outputs) < len(items):
        return [], outputs, records  # the runner names the failed request where the figure would have been
    return figures(outputs, workload.accuracy["dataset"]), outputs, records
