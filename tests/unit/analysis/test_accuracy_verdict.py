"""The accuracy verdict (issue 37): a variant whose accuracy interval lies wholly below its no-spec launch's
is flagged in the headline and left out of What to run, saying so; one within the intervals is not."""

import pandas as pd
from test_analysis import frame, measured
from test_decide import cell

from stackbench import analysis
from stackbench.analysis import decide


def accuracy_rows(variant: str, share: float, low: float, high: float, below: float | None) -> list[dict]:
    method = "none" if variant == "nospec" else "draft"
    rows = [measured(ref=f"run1/{variant}", variant=variant, spec_method=method, workload="accuracy", metric="accuracy",
                     value=share, unit="ratio", stat="mean", n=50, ci_low=low, ci_high=high)]
    if below is not None:
        rows.append(measured(ref=f"run1/{variant}", variant=variant, spec_method=method, workload="accuracy",
                             metric="accuracy_below_reference", value=below, unit="ratio", stat="single", n=50))
    return rows


def verdicts(*rows) -> pd.DataFrame:
    return analysis.correctness_by_variant(frame(*rows))


def test_a_variant_answering_worse_beyond_the_intervals_is_flagged_and_left_out_of_what_to_run():
    by_variant = verdicts(accuracy_rows("nospec", 0.6, 0.46, 0.72, None), accuracy_rows("draft-n2", 0.1, 0.04, 0.21, 1.0),
                          accuracy_rows("draft-n4", 0.56, 0.42, 0.69, 0.0))
    row = by_variant.set_index("variant")
    assert row.loc["nospec", "accuracy_text"] == "0.60 [0.46-0.72] n=50"
    assert row.loc["draft-n2", "flagged"] and "answers worse than no-spec (flips test)" in row.loc["draft-n2", "outputs"]
    assert not row.loc["draft-n4", "flagged"]
    choice = decide.what_to_run(frame(cell("nospec", 60, 0.5, 1), cell("draft-n2", 120, 1, 2, 2), cell("draft-n4", 80, 1, 2, 4)),
                                by_variant).iloc[0]
    assert choice["run"] == "draft-n4"  # the faster draft-n2 answers worse
    assert "draft-n2 (answers worse than its no-spec launch (flips, exact McNemar; accuracy 0.10 [0.04-0.21] n=50))" in choice["excluded"]


def probe_rows(variant: str, agreement: float | None = None, diverges_at: int | None = None,
               floor: float | None = None) -> list[dict]:
    method = "none" if variant == "nospec" else "draft"
    base = {"ref": f"run1/{variant}", "variant": variant, "spec_method": method, "workload": "probes", "unit": "ratio",
            "stat": "mean", "n": 3}
    rows = []
    if agreement is not None:
        rows += [measured(**base, metric="output_agreement", value=agreement),
                 measured(**{**base, "unit": "tokens"}, metric="first_divergence_token", value=diverges_at)]
    if floor is not None:
        rows.append(measured(**base, metric="agreement_noise_floor", value=floor))
    return rows


def test_a_disagreement_within_no_specs_own_noise_is_ranked_and_one_beyond_it_or_answering_worse_is_not():
    by_variant = verdicts(probe_rows("nospec", floor=0.9), accuracy_rows("nospec", 0.6, 0.46, 0.72, None),
                          probe_rows("draft-n2", 0.85, 3), accuracy_rows("draft-n2", 0.58, 0.44, 0.70, 0.0),
                          probe_rows("draft-n4", 0.5, 1), accuracy_rows("draft-n4", 0.6, 0.46, 0.72, 0.0),
                          probe_rows("draft-n8", 0.95, 20), accuracy_rows("draft-n8", 0.1, 0.04, 0.21, 1.0))
    row = by_variant.set_index("variant")
    assert not row.loc["draft-n2", "flagged"] and "within no-spec's own noise floor (agreement 0.90 at c2)" in row.loc["draft-n2", "outputs"]
    assert row.loc["draft-n4", "flagged"] and "beyond 0.1 more than no-spec's own noise floor" in row.loc["draft-n4", "caveat"]
    assert row.loc["draft-n8", "flagged"]  # same speed, within the noise, but it answers wrong
    choice = decide.what_to_run(frame(cell("nospec", 60, 0.5, 1), cell("draft-n2", 80, 1, 2, 2), cell("draft-n4", 120, 1, 2, 4),
                                      cell("draft-n8", 120, 1, 2, 8)), by_variant).iloc[0]
    assert choice["run"] == "draft-n2"
    assert "draft-n4 (greedy outputs differ from no-spec)" in choice["excluded"]
    assert "draft-n8 (answers worse than its no-spec launch" in choice["excluded"]


def test_without_a_noise_floor_the_fixed_tolerance_still_judges():
    by_variant = verdicts(probe_rows("nospec"), probe_rows("draft-n2", 0.85, 3))
    assert by_variant.set_index("variant").loc["draft-n2", "flagged"]  # divergence before token 16


def test_the_quality_table_puts_each_launch_of_a_family_beside_its_accuracy_and_says_which_differences_are_noise():
    def pair(reference, candidate, stack, value, words):
        return {"source": "measured", "table_title": "smollm2", "row_label": reference, "col_label": candidate,
                "node": "cpu", "stack": stack, "variant": "nospec", "metric": "cross_stack_answer_agreement",
                "value": value, "note": f"{words}; same extracted answer on this share of the questions"}

    rows = pd.DataFrame([pair("cpu / llamacpp / Q4_K_M", "cpu / vllm / BF16", "vllm", 0.8, "accuracy not distinguishable at n = 50"),
                         pair("cpu / vllm / BF16", "cpu / llamacpp / Q4_K_M", "llamacpp", 0.8, "accuracy not distinguishable at n = 50")])
    by_variant = pd.DataFrame([{"node": "cpu", "stack": "llamacpp", "variant": "nospec", "accuracy_text": "0.04 [0.01-0.14] n=50"},
                               {"node": "cpu", "stack": "vllm", "variant": "nospec", "accuracy_text": "0.06 [0.02-0.16] n=50"}])
    ((family, table, words),) = analysis.quality_tables(rows, by_variant)
    assert family == "smollm2"
    assert table.to_dict("records") == [
        {"launch": "cpu / llamacpp / Q4_K_M", "accuracy [95% CI]": "0.04 [0.01-0.14] n=50",
         "same answers as cpu / llamacpp / Q4_K_M": "—", "same answers as cpu / vllm / BF16": "0.80"},
        {"launch": "cpu / vllm / BF16", "accuracy [95% CI]": "0.06 [0.02-0.16] n=50",
         "same answers as cpu / llamacpp / Q4_K_M": "0.80", "same answers as cpu / vllm / BF16": "—"}]
    assert words == ["cpu / llamacpp / Q4_K_M vs cpu / vllm / BF16: accuracy not distinguishable at n = 50"]
    # results/agreement.py's words hold "; " inside their parenthesis: the sentence stays whole.
    said = "not distinguishable from the reference (flips: 0 of 50 questions, 0 for the worse; exact McNemar p = 1; " \
           "accuracy 0.60 [0.46-0.72] vs 0.60 [0.46-0.72])"
    ((_, _, words),) = analysis.quality_tables(rows.assign(note=f"{said}; same extracted answer on this share of the questions"),
                                               by_variant)
    assert words == [f"cpu / llamacpp / Q4_K_M vs cpu / vllm / BF16: {said}"]
