"""The accuracy set (measure/accuracy.py) against known-truth engines: the stand-in (a TEST DOUBLE) answering
a stated share of the questions right (rehearsal/standin.py accuracy_answer: exactly 30 of 50 at 0.6) is
reported at that share with a Wilson interval covering it; one answering every question wrong at the same
speed is reported at 0.
The questions are made up here (not GSM8K's): what is i + 1, reference i + 1."""

from __future__ import annotations

import asyncio
import json

import pytest

from stackbench.config.model import Workload
from stackbench.engines import adapter_for
from stackbench.measure import accuracy, probes
from stackbench.measure.client import RequestRecord, StreamClient
from stackbench.models import datasets
from stackbench.rehearsal.standin import StandinEngine, Timing

FAST = Timing(ttft_s=0.001, interval_s=0.001, tokens_per_chunk=1, reasoning_tokens=0, content_tokens=4, prompt_tokens=0)
SHARE = 0.6


def questions(n: int) -> list[dict]:
    return [{"id": f"q{i}", "question": f"What is {i} + 1?", "reference": str(i + 1)} for i in range(n)]


def workload(items: list[dict]) -> Workload:
    return Workload(name="accuracy", kind="accuracy", prompts=("{question}\nEnd with the number.",), output_tokens=8,
                    prompt_tokens=None, turns=1, salt=False, concurrency=(1,),
                    accuracy={"dataset": "gsm8k", "n": len(items), "seed": 0, "items": items})


def measured(items: list[dict], share: float, streams: int = 1):
    async def scenario(url):
        client = StreamClient(url, "synthetic", {}, stall_timeout_s=10, request_timeout_s=30)
        try:
            return await accuracy.run(client, workload(items), adapter_for("vllm"), streams=streams)
        finally:
            await client.aclose()

    answers = {item["question"]: item["reference"] for item in items}
    with StandinEngine(FAST, facts={"answers": answers, "right_share": share}) as engine:
        return asyncio.run(scenario(engine.base_url))


def test_an_engine_answering_60_percent_right_is_reported_at_0_6_with_an_interval_covering_it():
    figures, outputs, records = measured(questions(50), SHARE)
    found = {f.metric: f for f in figures}
    assert (found["accuracy"].value, found["accuracy"].n) == (0.6, 50)
    assert found["accuracy"].ci_low < SHARE < found["accuracy"].ci_high
    assert found["accuracy"].ci_high - found["accuracy"].ci_low == pytest.approx(0.26, abs=0.01)  # at n = 50
    assert found["accuracy_invalid"].value == 0.0
    assert len(outputs) == len(records) == 50 and all(o["text"] and o["answer"] for o in outputs.values())


def test_four_streams_ask_every_question_once_and_keep_the_sets_order():
    alone = measured(questions(50), SHARE)
    figures, outputs, records = measured(questions(50), SHARE, streams=4)
    assert {f.metric: f.value for f in figures} == {f.metric: f.value for f in alone[0]}
    assert list(outputs) == [f"q{i}" for i in range(50)] and outputs == alone[1]
    assert [r.request for r in records] == list(range(50)) and {r.stream for r in records} == {0, 1, 2, 3}


def test_an_engine_answering_wrong_at_the_same_speed_is_reported_at_0():
    figures, outputs, _ = measured(questions(50), 0.0)
    found = {f.metric: f for f in figures}
    assert found["accuracy"].value == 0.0 and found["accuracy"].ci_low == pytest.approx(0.0, abs=1e-12)
    assert found["accuracy"].ci_high == pytest.approx(0.0713, abs=1e-3)
    assert not any(o["correct"] for o in outputs.values())


@pytest.mark.parametrize(("reply", "answer"), [
    ("She has 5 + 13 = 18 apples.\nThe answer is 18.", "18"), ("Total: $1,234.", "1234"), ("It is 3.0", "3"),
    ("t0 t1 t2\nThe answer is 7.", "7"), ("-4 degrees", "-4"), ("0.5 of them", "0.5"), ("no number here", None)])
def test_the_answer_is_the_last_number_in_the_reply(reply, answer):
    assert accuracy.extract(reply) == answer


def test_a_reply_without_a_number_is_invalid_and_wrong():
    outputs = {"a": {"answer": None, "correct": False}, "b": {"answer": "2", "correct": True}}
    found = {f.metric: f.value for f in accuracy.figures(outputs, "gsm8k")}
    assert found == {"accuracy": 0.5, "accuracy_invalid": 0.5}


def test_the_subset_is_fixed_by_its_seed_and_the_reference_is_the_number_after_hashes(tmp_path):
    rows = [{"id": f"r{i}", "prompt": f"q{i}", "upstream_answer": f"steps\n#### {i},000"} for i in range(10)]
    file = tmp_path / "set.jsonl"
    file.write_text("\n".join(json.dumps(r) for r in rows))
    first = datasets.subset(file, 4, seed=0)
    assert first == datasets.subset(file, 4, seed=0) != datasets.subset(file, 4, seed=1)
    assert {r["reference"] for r in first} == {f"{r['id'][1:]}000" for r in first}
    with pytest.raises(ValueError, match="above the 10 rows"):
        datasets.subset(file, 11, seed=0)


def test_the_noise_floor_compares_the_prompts_sent_two_at_a_time_with_them_sent_alone():
    def record(words: str) -> RequestRecord:
        parts = [w + " " for w in words.split()]
        return RequestRecord(stream=0, turn=0, t_submit=0.0, parts=parts, content_chunks=len(parts), completion_tokens=len(parts))

    alone = [record("a b c d"), record("e f g h")]
    beside = [[record("a b c d"), record("a b x y")], [record("e f g h"), record("e f g h")]]
    figure = probes.noise_floor_figure(alone, beside)
    assert (figure.metric, figure.n) == ("agreement_noise_floor", 4)
    assert figure.value == pytest.approx((1 + 0.5 + 1 + 1) / 4) and "earliest divergence at 2" in figure.note


def test_a_reply_cut_off_at_max_tokens_is_invalid_not_scored_on_its_last_intermediate_number(monkeypatch):
    """The stream's finish_reason "length": the number it ends on is a step of the working, not an answer."""
    items = questions(2)

    async def two_replies(client, requests, streams, hook=None):
        cut = RequestRecord(stream=0, turn=0, t_submit=0.0, request=0, parts=["0 + 1 = 1, so far"], finish_reason="length")
        done = RequestRecord(stream=0, turn=0, t_submit=0.0, request=1, parts=["1 + 1 = 2"], finish_reason="stop")
        return [cut, done]

    monkeypatch.setattr(accuracy, "run_streams", two_replies)
    figures, outputs, _ = asyncio.run(accuracy.run(None, workload(items), adapter_for("vllm")))
    assert outputs["q0"]["answer"] is None and not outputs["q0"]["correct"] and outputs["q0"]["finish_reason"] == "length"
    assert outputs["q1"]["correct"]
    by = {f.metric: f for f in figures}
    assert by["accuracy"].value == 0.5 and by["accuracy_invalid"].value == 0.5
    assert "1 cut off at max_tokens" in by["accuracy_invalid"].note


def test_the_client_keeps_the_streams_finish_reason():
    record = RequestRecord(stream=0, turn=0, t_submit=0.0)
    StreamClient._take(record, {"choices": [{"delta": {"content": "a"}, "finish_reason": None}]}, b"", 0.1, None)
    StreamClient._take(record, {"choices": [{"delta": {}, "finish_reason": "length"}]}, b"", 0.2, None)
    StreamClient._take(record, {"choices": [], "usage": {"completion_tokens": 1}}, b"", 0.3, None)
    assert record.finish_reason == "length" and record.to_row()["finish_reason"] == "length"
