"""Answers compared across launches at collect (results/agreement.py answer_rows): a speculative launch
against its no-spec launch, and no-spec launches of one weights family against each other, in words that
say whether the accuracies are distinguishable at the set's n."""

from __future__ import annotations

import pandas as pd
import pytest

from stackbench.results import agreement


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
    assert "below the reference's beyond both intervals" in found["accuracy_below_reference"]["note"]


def test_a_variant_within_the_intervals_is_said_not_distinguishable_and_not_below():
    reference, candidate = doc("a", "nospec", 30), doc("b", "ngram-n3", 27)
    found = by_metric(agreement.answer_rows([reference, candidate], basis(reference, candidate)))
    assert found["accuracy_below_reference"]["value"] == 0.0
    assert "not distinguishable at n = 50" in found["accuracy_below_reference"]["note"]


def test_no_spec_launches_of_one_family_fill_its_quality_table_and_others_do_not():
    a, b = doc("a", "nospec", 30, stack="llamacpp"), doc("b", "nospec", 29, stack="vllm")
    other = doc("c", "nospec", 10, stack="sglang", weights="qwen3")
    rows = agreement.answer_rows([a, b, other], basis(a, b, other))
    assert {(r["row_label"], r["col_label"]) for r in rows} == {("cpu / llamacpp / Q4_K_M", "cpu / vllm / Q4_K_M"),
                                                              ("cpu / vllm / Q4_K_M", "cpu / llamacpp / Q4_K_M")}
    assert all(r["table_id"] == agreement.QUALITY_TABLE and r["table_title"] == "smollm2" for r in rows)
    assert all("not distinguishable at n = 50" in r["note"] for r in rows)


def test_the_wilson_interval_matches_its_closed_form_values():
    low, high = agreement.wilson(30, 50)
    assert (low, high) == (pytest.approx(0.4618, abs=1e-4), pytest.approx(0.7239, abs=1e-4))
