"""Answers compared across launches at collect (results/agreement.py answer_rows): a speculative launch
against its no-spec launch, and no-spec launches of one weights family against each other, in words that
say whether the accuracies are distinguishable at the set's n."""

from __future__ import annotations

import pandas as pd
import pytest

from stackbench.results import agreement, estimators


def doc(ref: str, variant: str, right: int, n: int = 50, stack: str = "vllm", weights: str | None = "smollm2",
        same_as_right: bool = True) -> dict:
    """A launch's accuracy outputs: its first `right` questions right (answer = reference), the rest answered 0."""
    outputs = {f"q{i}": {"text": "", "answer": str(i + 1) if i < right else "0", "reference": str(i + 1),
                         "correct": i < right} for i in range(n)}
    return {"ref": ref, "node": "cpu", "stack": stack, "variant": variant, "model": "m", "workload": "accuracy",
            "spec_method": "none" if variant == "nospec" else "ngram", "weights": weights, "quant": "Q4_K_M",
            "probe_set": "abc", "outputs": outputs}


def basis(*docs) -> pd.DataFrame:
    return pd.DataFrame([{"ref": d["ref"], "workload": "accuracy", "node": d["node"], "stack": d["stack"],
                          "variant": d["variant"], "metric": "accuracy"} for d in docs])


def by_metric(rows: list[dict]) -> dict[str, dict]:
    return {r["metric"]: r for r in rows}


def test_a_wrong_answering_variant_is_below_its_reference_and_agrees_on_few_answers():
    reference, candidate = doc("a", "nospec", 30), doc("b", "ngram-n3", 5)
    found = by_metric(agreement.answer_rows([reference, candidate], basis(reference, candidate)))
    assert found["answer_agreement"]["value"] == pytest.approx(25 / 50)  # the 20 both got wrong as 0 count too
    assert found["accuracy_below_reference"]["value"] == 1.0
    assert "worse than the reference (flips: 25 of 50 questions, 25 for the worse" in found["accuracy_below_reference"]["note"]
    assert found["answer_flips"]["value"] == pytest.approx(25 / 50)


def test_a_variant_within_the_intervals_is_said_not_distinguishable_and_not_below():
    reference, candidate = doc("a", "nospec", 30), doc("b", "ngram-n3", 27)
    found = by_metric(agreement.answer_rows([reference, candidate], basis(reference, candidate)))
    assert found["accuracy_below_reference"]["value"] == 0.0
    assert "not distinguishable from the reference (flips: 3 of 50 questions, 3 for the worse; exact McNemar p = 0.25" \
        in found["accuracy_below_reference"]["note"]


def test_no_spec_launches_of_one_family_fill_its_quality_table_and_others_do_not():
    a, b = doc("a", "nospec", 30, stack="llamacpp"), doc("b", "nospec", 29, stack="vllm")
    other = doc("c", "nospec", 10, stack="sglang", weights="qwen3")
    rows = agreement.answer_rows([a, b, other], basis(a, b, other))
    assert {(r["row_label"], r["col_label"]) for r in rows} == {("cpu / llamacpp / Q4_K_M", "cpu / vllm / Q4_K_M"),
                                                              ("cpu / vllm / Q4_K_M", "cpu / llamacpp / Q4_K_M")}
    assert all(r["table_id"] == agreement.QUALITY_TABLE and r["table_title"] == "smollm2" for r in rows)
    assert all("not distinguishable from the reference (flips: 1 of 50 questions" in r["note"] for r in rows)


def test_flips_are_tested_as_pairs_where_overlapping_intervals_would_hide_them():
    """The same accuracy (30 of 50) on both launches, yet 12 questions flip each way: not distinguishable; and
    a double that flips 10 right answers to wrong and none back is worse at p = 2 / 2**10 while its Wilson
    interval still overlaps the reference's."""
    reference = doc("a", "nospec", 30)
    swapped = doc("b", "ngram-n3", 30)
    for i in range(12):  # 12 right answers become wrong, 12 wrong ones right
        swapped["outputs"][f"q{i}"].update(answer="0", correct=False)
        swapped["outputs"][f"q{30 + i}"].update(answer=str(31 + i), correct=True)
    found = by_metric(agreement.answer_rows([reference, swapped], basis(reference, swapped)))
    assert found["answer_flips"]["value"] == pytest.approx(24 / 50)
    assert found["accuracy_below_reference"]["value"] == 0.0
    worse = doc("c", "ngram-n3", 20)
    found = by_metric(agreement.answer_rows([reference, worse], basis(reference, worse)))
    assert estimators.exact_mcnemar(10, 0) == pytest.approx(2 / 2 ** 10)
    assert found["accuracy_below_reference"]["value"] == 1.0
    assert estimators.wilson(20, 50)[1] > estimators.wilson(30, 50)[0]  # the intervals overlap


def test_two_replies_without_an_answer_do_not_agree():
    reference, candidate = doc("a", "nospec", 0), doc("b", "ngram-n3", 0)
    for d in (reference, candidate):
        for o in d["outputs"].values():
            o["answer"] = None
    found = by_metric(agreement.answer_rows([reference, candidate], basis(reference, candidate)))
    assert found["answer_agreement"]["value"] == 0.0
