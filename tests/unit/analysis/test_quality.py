"""analysis/quality.py beyond_limit: the variants whose divergence from the node's quality reference is beyond the
node's quality_limit, from the rows collect wrote or from limits given."""

from __future__ import annotations

import pandas as pd

from stackbench.analysis.quality import beyond_limit


def row(variant: str, metric: str, value: float, note: str = "") -> dict:
    return {"source": "measured", "status": "ok", "node": "n", "stack": "llamacpp", "variant": variant, "metric": metric,
            "value": value, "note": note, "row_label": "q4-1 (llama-perplexity)"}


ROWS = pd.DataFrame([
    row("q2k", "mean_kld", 0.4), row("q2k", "same_top_token", 0.7),
    row("q2k", "quality_beyond_limit", 1.0, "mean KLD 0.4 above the node's limit 0.1; text"),
    row("q4km", "mean_kld", 0.05), row("q4km", "same_top_token", 0.89),
    row("q4km", "quality_beyond_limit", 0.0, "within the node's quality_limit; text"),
])


def test_the_rows_verdict_flags_only_the_variant_beyond_the_limit_with_its_reason():
    found = beyond_limit(ROWS)
    assert list(found.columns) == ["node", "stack", "variant", "reason"]
    assert found["variant"].tolist() == ["q2k"]
    assert found["reason"].iloc[0] == "mean KLD 0.4 above the node's limit 0.1 from q4-1 (llama-perplexity)"


def test_limits_given_judge_the_rows_again():
    found = beyond_limit(ROWS, {"n": {"mean_kld": 0.01, "same_top_token": None}})
    assert found["variant"].tolist() == ["q2k", "q4km"]
    assert beyond_limit(ROWS, {"n": {"mean_kld": None, "same_top_token": 0.8}})["reason"].tolist() == [
        "same top token 0.7 under the node's limit 0.8 from q4-1 (llama-perplexity)"]
    assert beyond_limit(ROWS, {"other": {"mean_kld": 0.0}}).empty


def test_the_headline_quality_text_says_exact_or_bound_and_where_no_reference_gave_a_figure():
    from stackbench.analysis.correctness import divergence_text

    rows = pd.DataFrame([
        {**row("q4km", "perplexity", 5.7), "ci_low": None, "ci_high": None},
        {**row("q4km", "mean_kld", 0.0562, "KL(reference || launch), exact: full vocabulary; text"), "ci_low": 0.04, "ci_high": 0.07},
        {**row("bf16", "perplexity", 5.4), "ci_low": None, "ci_high": None},
    ])
    texts = divergence_text(rows)
    assert texts[("n", "llamacpp", "q4km")] == "KLD 0.0562 [0.04-0.07] exact from q4-1 (llama-perplexity)"
    assert texts[("n", "llamacpp", "bf16")].startswith("KLD: no figure from a quality reference")
