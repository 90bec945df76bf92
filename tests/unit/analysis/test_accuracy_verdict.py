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
    assert row.loc["draft-n2", "flagged"] and "accuracy below no-spec's interval" in row.loc["draft-n2", "outputs"]
    assert not row.loc["draft-n4", "flagged"]
    choice = decide.what_to_run(frame(cell("nospec", 60, 0.5, 1), cell("draft-n2", 120, 1, 2, 2), cell("draft-n4", 80, 1, 2, 4)),
                                by_variant).iloc[0]
    assert choice["run"] == "draft-n4"  # the faster draft-n2 answers worse
    assert "draft-n2 (accuracy interval wholly below its no-spec launch's (0.10 [0.04-0.21] n=50))" in choice["excluded"]
