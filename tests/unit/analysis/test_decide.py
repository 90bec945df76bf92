"""What to run: rows of known spread, correctness gate, depth margin, the no-spec fallback, no reference."""

import pandas as pd
from test_analysis import frame, measured, server

from stackbench.analysis import decide


def cell(variant, median, mad, spread, depth=None, concurrency=1, workload="code", **extra):
    """One cell's judged figure: its median and MAD over three repeats, median - spread, median, median + spread."""
    method = "none" if variant == "nospec" else "draft"
    metric = "decode_tps" if concurrency == 1 else "aggregate_tps"
    # Each launch's rows carry a ref of their own, as measured runs write them (<node>/<launch>/...).
    return measured(ref=f"run1/{variant}", variant=variant, spec_method=method, spec_tokens=depth, concurrency=concurrency,
                    workload=workload, metric=metric, value=median, mad=mad,
                    repeat_values=[median - spread, median, median + spread], **extra)


def pool(variant, tokens, depth=None):
    return server("kv_pool_tokens", tokens, ref=f"run1/{variant}", variant=variant, spec_method="none" if variant == "nospec" else "draft",
                  spec_tokens=depth, context_len=4096)


def agreement(variant, diverges_at=None):
    """correctness_by_variant's columns the gate reads."""
    return {"node": "cpu", "stack": "llamacpp", "variant": variant, "first_divergence_token": diverges_at, "length_off_in": ""}


def choose(*rows, correctness=()):
    return decide.what_to_run(frame(*rows), pd.DataFrame(list(correctness),
                                                         columns=["node", "stack", "variant", "first_divergence_token", "length_off_in"]))


def test_picks_the_variant_whose_robust_score_is_best_and_names_the_runner_up():
    table = choose(cell("nospec", 60, 0.5, 1), cell("draft-n2", 80, 1, 2, 2), cell("draft-n4", 90, 1, 2, 4),
                   pool("nospec", 4096), pool("draft-n4", 3000, 4),
                   correctness=[agreement("draft-n2"), agreement("draft-n4")])
    row = table.iloc[0]
    assert row["run"] == "draft-n4" and row["runner_up"] == "draft-n2"
    assert abs(row["gain"] - 0.5) < 1e-3 and 0 < row["gain_low"] < row["gain"] < row["gain_high"]
    assert row["kv_pool_tokens"] == 3000 and row["kv_pool_tokens_nospec"] == 4096
    assert abs(row["contexts_held"] - 3000 / 4096) < 1e-9


def test_a_wide_spread_loses_to_a_steady_cell_and_a_too_wide_one_is_excluded_by_name():
    # n4's median is higher, but 1.4826 x MAD 6 takes it below n2 (score 91.1 vs 88.5); n8's MAD is 12% of it.
    table = choose(cell("nospec", 60, 0.5, 1), cell("draft-n2", 90, 1, 2, 2), cell("draft-n4", 95, 6, 3, 4),
                   cell("draft-n8", 120, 14.4, 3, 8),
                   correctness=[agreement("draft-n2"), agreement("draft-n4"), agreement("draft-n8")])
    row = table.iloc[0]
    assert row["run"] == "draft-n2" and row["runner_up"] == "draft-n4"
    assert "draft-n8 (relative MAD 0.12 > 0.1)" in row["excluded"]


def test_a_variant_whose_outputs_differ_is_never_chosen():
    table = choose(cell("nospec", 60, 0.5, 1), cell("draft-n2", 80, 1, 2, 2), cell("draft-n4", 120, 1, 2, 4),
                   correctness=[agreement("draft-n2"), agreement("draft-n4", diverges_at=17)])
    row = table.iloc[0]
    assert row["run"] == "draft-n2"
    assert "draft-n4 (greedy outputs differ from no-spec)" in row["excluded"]


def test_a_variant_that_loops_more_than_no_spec_is_excluded_but_equal_looping_is_not():
    rows = [cell("nospec", 60, 0.5, 1), cell("draft-n2", 80, 1, 2, 2), cell("draft-n4", 120, 1, 2, 4),
            measured(ref="run1/nospec", metric="looping", value=0.25),
            measured(ref="run1/draft-n2", variant="draft-n2", spec_method="draft", spec_tokens=2, metric="looping", value=0.25),
            measured(ref="run1/draft-n4", variant="draft-n4", spec_method="draft", spec_tokens=4, metric="looping", value=0.5)]
    row = choose(*rows, correctness=[agreement("draft-n2"), agreement("draft-n4")]).iloc[0]
    assert row["run"] == "draft-n2"
    assert "draft-n4 (loops in 50% of requests, no-spec 25%)" in row["excluded"]


def test_the_smaller_depth_is_preferred_within_the_margin():
    table = choose(cell("nospec", 60, 0, 1), cell("draft-n2", 99.5, 0, 2, 2), cell("draft-n4", 100, 0, 2, 4),
                   correctness=[agreement("draft-n2"), agreement("draft-n4")])
    assert table.iloc[0]["run"] == "draft-n2" and table.iloc[0]["runner_up"] == "draft-n4"
    outside = choose(cell("nospec", 60, 0, 1), cell("draft-n2", 98, 0, 2, 2), cell("draft-n4", 100, 0, 2, 4),
                     correctness=[agreement("draft-n2"), agreement("draft-n4")])
    assert outside.iloc[0]["run"] == "draft-n4"


def test_no_spec_when_no_gain_clears_its_interval():
    # +5% on the median, with repeats 57-63 against 59-67: Welch's interval on 3 + 3 repeats spans zero.
    row = choose(cell("nospec", 60, 1, 3), cell("draft-n2", 63, 1, 4, 2), correctness=[agreement("draft-n2")]).iloc[0]
    assert row["run"] == "no-spec" and row["runner_up"] == "draft-n2"
    assert pd.isna(row["gain"]) and "does not clear zero" in row["why"] and "+4.9%" in row["why"]
    # At that spread (log sd 0.050 and 0.064, difference 0.0483): 12 each give a half-width of 0.0486, 13 give 0.0465.
    assert "about 13 repeats each would decide" in row["why"]


def test_each_concurrency_is_decided_on_its_own_figure():
    table = choose(cell("nospec", 60, 0.5, 1), cell("draft-n2", 80, 1, 2, 2),
                   cell("nospec", 100, 1, 2, concurrency=2), cell("draft-n2", 90, 1, 2, 2, concurrency=2),
                   correctness=[agreement("draft-n2")])
    by_c = table.set_index("concurrency")
    assert by_c.loc[1, "run"] == "draft-n2" and by_c.loc[1, "metric"] == "decode_tps"
    assert by_c.loc[2, "run"] == "no-spec" and by_c.loc[2, "metric"] == "aggregate_tps"


def test_a_node_without_no_spec_ranks_its_variants_and_says_so():
    row = choose(cell("draft-n2", 80, 1, 2, 2), cell("draft-n4", 90, 1, 2, 4)).iloc[0]
    assert row["run"] == "draft-n4" and row["runner_up"] == "draft-n2"
    assert "no no-spec launch" in row["why"] and pd.isna(row["gain"])


def test_a_failed_cell_is_named_among_the_excluded():
    failed = measured(ref="run1/draft-n4", variant="draft-n4", spec_method="draft", spec_tokens=4, metric="cell_status", value=None,
                      status="failed", reason="timeout after 60 s")
    row = choose(cell("nospec", 60, 0.5, 1), cell("draft-n2", 80, 1, 2, 2), failed,
                 correctness=[agreement("draft-n2")]).iloc[0]
    assert row["run"] == "draft-n2" and "draft-n4 (failed: timeout after 60 s)" in row["excluded"]


def test_across_stacks_each_choice_stands_side_by_side_with_agreement_shown_not_gating():
    from stackbench.report import decisions

    rows = [cell("nospec", 60, 0.5, 1), cell("draft-n2", 80, 1, 2, 2),
            cell("nospec", 30, 0.5, 1, node="cpu2", stack="vllm"), cell("draft-n2", 31, 1, 2, 2, node="cpu2", stack="vllm")]
    correctness = [agreement("draft-n2"), {**agreement("draft-n2"), "node": "cpu2", "stack": "vllm"}]
    choices = choose(*rows, correctness=correctness)
    # vLLM's draft scores 31 - 1.48 = 29.5 against no-spec's 29.3: within 1%, so the smaller depth (no-spec).
    assert choices.set_index("stack").loc["vllm", "run"] == "no-spec"
    pairs = pd.DataFrame([{"metric": "cross_stack_agreement", "row_label": "cpu / llamacpp / Q4_K_M",
                           "col_label": "cpu2 / vllm / BF16", "value": 0.62}])
    table = decisions.across_stacks(choices, pairs)[0]
    assert table.columns == ["workload", "concurrency", "prompt tokens", "power cap W", "cpu / llamacpp", "cpu2 / vllm", "same choice"]
    assert table.rows == [["code", "1", "60", "", "draft-n2", "no-spec", "no"]]
    assert "Greedy agreement, cpu / llamacpp / Q4_K_M (reference) against cpu2 / vllm / BF16: 0.62" in table.legend


def test_a_cell_on_a_thermally_slowed_gpu_is_excluded_by_name_and_a_capped_sw_cap_cell_is_not():
    slowed = dict(ref="run1/draft-n4", variant="draft-n4", spec_method="draft", spec_tokens=4)
    capped = dict(ref="run1/draft-n2", variant="draft-n2", spec_method="draft", spec_tokens=2)
    rows = [cell("nospec", 60, 0.5, 1), cell("draft-n2", 80, 1, 2, 2), cell("draft-n4", 120, 1, 2, 4),
            measured(**slowed, metric="clock_event_share_thermal", value=1.0, unit="ratio", stat="single"),
            measured(**capped, metric="clock_event_share_thermal", value=0.0, unit="ratio", stat="single"),
            measured(**capped, metric="clock_event_share_sw_power_cap", value=1.0, unit="ratio", stat="single")]
    row = choose(*rows, correctness=[agreement("draft-n2"), agreement("draft-n4")]).iloc[0]
    assert row["run"] == "draft-n2"
    assert "draft-n4 (GPU slowed: thermal 100%)" in row["excluded"] and "draft-n2 (" not in row["excluded"]
def test_a_ladder_gets_a_row_per_prompt_length_and_no_two_rows_share_a_visible_key():
    from stackbench.report import decisions

    rows = [cell(v, median, 0.5, 1, depth, workload="ladder-cpu", prompt_tokens=tokens)
            for tokens, gains in ((512, 80), (1024, 70), (2048, 50)) for v, median, depth in (("nospec", 60, None), ("ngram-n8", gains, 8))]
    choices = choose(*rows, correctness=[agreement("ngram-n8")])
    table = decisions.what_to_run_tables(choices, ["cpu"], pd.DataFrame())[0]
    key = [table.columns.index(c) for c in ("stack", "model", "power cap W", "workload", "concurrency", "prompt tokens")]
    visible = [tuple(row[i] for i in key) for row in table.rows]
    assert len(visible) == 3 and len(set(visible)) == 3
    assert [row[table.columns.index("prompt tokens")] for row in table.rows] == ["512", "1024", "2048"]
    assert [row[table.columns.index("run")] for row in table.rows] == ["ngram-n8", "ngram-n8", "no-spec"]


def test_the_section_says_in_one_sentence_where_the_choice_differs_by_content_class():
    from stackbench.report import decisions

    rows = [cell("nospec", 60, 0.5, 1, workload=w) for w in ("code", "extraction", "prose")]
    rows += [cell("ngram-n8", 90, 0.5, 1, 8, workload="code"), cell("ngram-n8", 95, 0.5, 1, 8, workload="extraction"),
             cell("ngram-n8", 55, 0.5, 1, 8, workload="prose")]
    rows += [cell("nospec", 100, 0.5, 1, concurrency=2, workload="code"), cell("ngram-n8", 99, 0.5, 1, 8, concurrency=2, workload="code")]
    choices = choose(*rows, correctness=[agreement("ngram-n8")])
    table = decisions.what_to_run_tables(choices, ["cpu"], pd.DataFrame())[0]
    assert table.legend[0] == ("The choice differs by content class (workload): "
                               "llamacpp: ngram-n8 on code c1, extraction; no-spec on code c2, prose.")
    alike = choose(*[cell("nospec", 60, 0.5, 1, workload=w) for w in ("code", "prose")])
    assert decisions.by_content_class(alike) == ""
