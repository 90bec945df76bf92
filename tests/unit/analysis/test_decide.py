"""What to run on rows of known figures (TEST DATA): three verdicts, the runner-up's paired gain, the price, and
every exclusion applied to each launch, the no-spec reference's included."""

import dataclasses

import pandas as pd
from test_analysis import frame, measured, server

from stackbench.analysis import decide
from stackbench.config.model import Decision
from stackbench.report import decisions
from stackbench.results import judged
from stackbench.results.store import NOT_SWEPT

# A horizon of three rounds: one look, at round 3 (under four, round 3 is no look: estimators.MAX_CRITICAL_T)
RULE = {"cpu": Decision(first=3, most=3, min_gain=0.1, budget_minutes=None)}
WOBBLE = (1.0, 0.99, 1.01, 1.0)  # each round's launch factor, shared by its variants: a paired gain cancels it
OWN = (1.0, 1.004, 0.996, 1.002)  # a speculative launch's own factor on top: the paired log ratios spread a little


def cell(variant, median, mad, spread, depth=None, concurrency=1, workload="code", rounds=3, **extra):
    """One cell's judged figure in each of `rounds` launches: its median (times the round's WOBBLE) and MAD over
    three repeats, median - spread, median, median + spread."""
    method = "none" if variant == "nospec" else "draft"
    metric = "decode_tps" if concurrency == 1 else "aggregate_tps"
    # Each launch's rows carry a ref of their own, as measured runs write them (<node>/<launch>/...).
    return [measured(ref=f"run1/{variant}--r{k}", replicate=k, variant=variant, spec_method=method, spec_tokens=depth,
                     concurrency=concurrency, workload=workload, metric=metric,
                     value=median * WOBBLE[k - 1] * (OWN[k - 1] if depth else 1.0), mad=mad,
                     repeat_values=[median - spread, median, median + spread], **extra) for k in range(1, rounds + 1)]


def pool(variant, tokens, depth=None):
    return server("kv_pool_tokens", tokens, ref=f"run1/{variant}--r1", replicate=1, variant=variant,
                  spec_method="none" if variant == "nospec" else "draft", spec_tokens=depth, context_len=4096)


def agreement(variant, diverges_at=None):
    """correctness_by_variant's columns the gate reads."""
    return {"node": "cpu", "stack": "llamacpp", "variant": variant, "first_divergence_token": diverges_at, "length_off_in": ""}


def choose(*rows, correctness=(), horizon=3):
    rule = dataclasses.replace(RULE["cpu"], most=horizon)
    return decide.what_to_run(frame(*rows), pd.DataFrame(list(correctness),
                                                         columns=["node", "stack", "variant", "first_divergence_token", "length_off_in"]),
                              {"cpu": rule, "cpu2": rule})


def test_runs_the_variant_with_the_largest_gain_and_names_the_runner_up_on_its_paired_gain():
    table = choose(cell("nospec", 60, 0.5, 1), cell("draft-n2", 80, 1, 2, 2), cell("draft-n4", 90, 1, 2, 4),
                   pool("nospec", 4096), pool("draft-n4", 3000, 4),
                   correctness=[agreement("draft-n2"), agreement("draft-n4")])
    row = table.iloc[0]
    assert (row["verdict"], row["run"], row["runner_up"]) == (decide.RUN, "draft-n4", "draft-n2")
    assert abs(row["gain"] - 0.5) < 3e-3 and 0 < row["gain_low"] < row["gain"] < row["gain_high"]
    assert abs(row["runner_up_gain"] - 80 / 60 + 1) < 3e-3  # paired within rounds, as the choice's own gain
    assert row["decided_at"] == 3 and "clears zero at round 3" in row["why"]
    # the bounds shown are the deciding look's: Benjamini & Yekutieli's R alpha / m (here 2 of 2), at that look's level
    assert row["alpha"] == 0.05 and 0 < row["level"] <= 0.05 + 1e-12 and f"one-sided bounds at {row['level']:.2%}" in row["why"]
    assert row["kv_pool_tokens"] == 3000 and row["kv_pool_tokens_nospec"] == 4096
    assert abs(row["contexts_held"] - 3000 / 4096) < 1e-9


def test_a_round_whose_repeats_spread_wide_is_kept_its_spread_is_the_texts():
    # each repeat sends other texts: a cell's spread over repeats is the texts', not a sign of a bad launch
    rows = cell("nospec", 60, 0.5, 1, rounds=4) + cell("draft-n2", 90, 1, 2, 2, rounds=4)
    rows[5]["mad"] = 12.0  # draft-n2's round 2: MAD 13% of its median
    row = choose(*rows, correctness=[agreement("draft-n2")]).iloc[0]
    assert (row["rounds"], row["decided_at"], row["verdict"]) == (3, 3, decide.RUN)
    assert "relative MAD" not in row["excluded"]


def test_a_variant_whose_outputs_differ_is_no_candidate():
    table = choose(cell("nospec", 60, 0.5, 1), cell("draft-n2", 80, 1, 2, 2), cell("draft-n4", 120, 1, 2, 4),
                   correctness=[agreement("draft-n2"), agreement("draft-n4", diverges_at=17)])
    row = table.iloc[0]
    assert row["run"] == "draft-n2"
    assert "draft-n4 (greedy outputs differ from no-spec)" in row["excluded"]


def test_a_variant_that_loops_more_than_no_spec_is_excluded_but_equal_looping_is_not():
    rows = [*cell("nospec", 60, 0.5, 1), *cell("draft-n2", 80, 1, 2, 2), *cell("draft-n4", 120, 1, 2, 4),
            measured(ref="run1/nospec--r1", metric="looping", value=0.25),
            measured(ref="run1/draft-n2--r1", variant="draft-n2", spec_method="draft", spec_tokens=2, metric="looping", value=0.25),
            measured(ref="run1/draft-n4--r1", variant="draft-n4", spec_method="draft", spec_tokens=4, metric="looping", value=0.5)]
    row = choose(*rows, correctness=[agreement("draft-n2"), agreement("draft-n4")]).iloc[0]
    assert row["run"] == "draft-n2"
    assert "draft-n4 (loops in 50% of requests, no-spec 25%)" in row["excluded"]


def test_no_gain_worth_switching_for_reads_not_worth_it():
    row = choose(cell("nospec", 60, 0.2, 1), cell("draft-n2", 60.3, 0.2, 1, 2), correctness=[agreement("draft-n2")]).iloc[0]
    assert (row["verdict"], row["run"]) == (decide.NOT_WORTH_IT, decide.RUN_NO_SPEC)
    assert "below +10% at round 3: draft-n2 at most" in row["why"]


def test_a_gain_the_rounds_cannot_resolve_is_undecided_and_says_what_would_settle_it():
    rows = cell("nospec", 60, 0.5, 1) + cell("draft-n2", 66, 0.5, 1, 2)
    for row, factor in zip(rows[3:], (1.0, 1.12, 0.9)):  # the variant's own launches scatter by +-10%
        row["value"] *= factor
    row = choose(*rows, correctness=[agreement("draft-n2")]).iloc[0]
    assert (row["verdict"], row["run"]) == (decide.UNDECIDED, decide.RUN_NO_SPEC)
    assert row["why"].startswith("draft-n2 +") and "after 3 rounds" in row["why"]
    # not within the three-round horizon: the row names the budget that would settle it instead
    assert pd.isna(row["settle_rounds"]) and row["settle_beyond"] > 4


def test_one_launch_is_never_decided():
    row = choose(cell("nospec", 60, 0.5, 1, rounds=1), cell("draft-n2", 90, 1, 2, 2, rounds=1),
                 correctness=[agreement("draft-n2")]).iloc[0]
    assert (row["verdict"], row["run"], row["decided"]) == (decide.UNDECIDED, decide.RUN_NO_SPEC, False)
    assert "the first look is at 3" in row["why"]


def test_each_concurrency_is_decided_on_its_own_figure():
    table = choose(cell("nospec", 60, 0.5, 1), cell("draft-n2", 80, 1, 2, 2),
                   cell("nospec", 100, 1, 2, concurrency=2), cell("draft-n2", 90, 1, 2, 2, concurrency=2),
                   correctness=[agreement("draft-n2")])
    by_c = table.set_index("concurrency")
    assert by_c.loc[1, "run"] == "draft-n2" and by_c.loc[1, "metric"] == "decode_tps"
    assert by_c.loc[2, "verdict"] == decide.NOT_WORTH_IT and by_c.loc[2, "metric"] == "aggregate_tps"
    assert judged.judged_metric(1) == "decode_tps" and judged.judged_metric(4) == "aggregate_tps"


def test_a_node_without_no_spec_decides_nothing_and_says_so():
    row = choose(cell("draft-n2", 80, 1, 2, 2), cell("draft-n4", 90, 1, 2, 4)).iloc[0]
    assert (row["verdict"], row["run"], row["candidates"]) == (decide.NOT_JUDGED, "none eligible", 0)
    assert row["why"] == "no no-spec launch: not judged" and pd.isna(row["gain"])


def test_a_failed_round_is_named_and_its_variant_judged_on_the_rounds_left():
    failed = measured(ref="run1/draft-n4--r2", replicate=2, variant="draft-n4", spec_method="draft", spec_tokens=4,
                      metric="cell_status", value=None, status="failed", reason="timeout after 60 s")
    rows = cell("nospec", 60, 0.5, 1) + cell("draft-n2", 80, 1, 2, 2) + [r for r in cell("draft-n4", 120, 1, 2, 4)
                                                                          if r["replicate"] != 2] + [failed]
    row = choose(*rows, correctness=[agreement("draft-n2"), agreement("draft-n4")]).iloc[0]
    assert "draft-n4 (round 2: failed: timeout after 60 s)" in row["excluded"]
    assert row["run"] == "draft-n2"  # draft-n4's two rounds are fewer than the first look's three


def test_across_stacks_each_choice_stands_side_by_side_with_agreement_shown_not_gating():
    from stackbench.report import decisions

    rows = [cell("nospec", 60, 0.5, 1), cell("draft-n2", 80, 1, 2, 2),
            cell("nospec", 30, 0.5, 1, node="cpu2", stack="vllm"), cell("draft-n2", 31, 1, 2, 2, node="cpu2", stack="vllm")]
    correctness = [agreement("draft-n2"), {**agreement("draft-n2"), "node": "cpu2", "stack": "vllm"}]
    choices = choose(*rows, correctness=correctness)
    assert choices.set_index("stack").loc["vllm", "verdict"] == decide.NOT_WORTH_IT
    pairs = pd.DataFrame([{"metric": "cross_stack_agreement", "row_label": "cpu / llamacpp / Q4_K_M",
                           "col_label": "cpu2 / vllm / BF16", "value": 0.62}])
    table = decisions.across_stacks(choices, pairs)[0]
    assert table.columns == ["workload", "concurrency", "prompt tokens", "power cap W", "cpu / llamacpp", "cpu2 / vllm", "same choice"]
    assert table.rows == [["code", "1", "60", "", "draft-n2", "no-spec", "no"]]
    assert "Greedy agreement, cpu / llamacpp / Q4_K_M (reference) against cpu2 / vllm / BF16: 0.62" in table.legend


def test_a_cell_on_a_thermally_slowed_gpu_is_excluded_by_name_and_a_capped_sw_cap_cell_is_not():
    slowed = dict(variant="draft-n4", spec_method="draft", spec_tokens=4)
    capped = dict(variant="draft-n2", spec_method="draft", spec_tokens=2)
    rows = [*cell("nospec", 60, 0.5, 1), *cell("draft-n2", 80, 1, 2, 2), *cell("draft-n4", 120, 1, 2, 4, rounds=4)]
    for k in (1, 2, 3, 4):  # every launch of draft-n4 but its fourth ran on a thermally slowed GPU
        rows += [measured(ref=f"run1/draft-n4--r{k}", replicate=k, **slowed, metric="clock_event_share_thermal",
                          value=1.0 if k < 4 else 0.0, unit="ratio", stat="single"),
                 measured(ref=f"run1/draft-n2--r{k}", replicate=k, **capped, metric="clock_event_share_sw_power_cap",
                          value=1.0, unit="ratio", stat="single")]
    row = choose(*rows, correctness=[agreement("draft-n2"), agreement("draft-n4")]).iloc[0]
    assert row["run"] == "draft-n2"
    assert "draft-n4 (round 1: GPU slowed: thermal 100%; round 2" in row["excluded"]
    assert "round 3: GPU slowed: thermal 100%" in row["excluded"] and "draft-n2 (" not in row["excluded"]


def test_a_ladder_gets_a_row_per_prompt_length_and_no_two_rows_share_a_visible_key():
    from stackbench.report import decisions

    rows = [cell(v, median, 0.5, 1, depth, workload="ladder-cpu", prompt_tokens=tokens)
            for tokens, gains in ((512, 80), (1024, 70), (2048, 61)) for v, median, depth in (("nospec", 60, None), ("ngram-n8", gains, 8))]
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


def test_a_round_on_a_busy_host_is_left_out_of_the_verdict_and_the_variance_and_names_the_process():
    busy = "HOST BUSY during the cell: busyloop (pid 4242) 98%"
    rows = cell("nospec", 60, 0.5, 1, rounds=4) + cell("draft-n2", 90, 1, 2, 2, rounds=4)
    for row in rows[:4] + rows[4:]:  # round 2's no-spec launch ran beside a busy loop
        row_busy = row["variant"] == "nospec" and row["replicate"] == 2
        rows.append(measured(ref=row["ref"], replicate=row["replicate"], variant=row["variant"], spec_method=row["spec_method"],
                             spec_tokens=row["spec_tokens"], metric="host_busy", value=1.0 if row_busy else 0.0,
                             unit="ratio", stat="single", note=busy if row_busy else "quiet"))
    table = choose(*rows, correctness=[agreement("draft-n2")], horizon=4)  # one look, at round 4
    row = table.iloc[0]
    assert (row["rounds"], row["decided_at"]) == (3, 4)  # rounds 1, 3 and 4 paired
    assert "nospec (round 2: host busy during the cell" in row["excluded"] and "busyloop (pid 4242)" in row["excluded"]
    variance = decide.launch_variance(frame(*rows)).set_index("variant")
    assert variance.loc["nospec", "launches"] == 3 and variance.loc["draft-n2", "launches"] == 4


def test_an_interval_past_what_a_node_can_mean_is_not_printed_as_a_figure():
    from stackbench.report import decisions

    assert decisions._interval(0.12, 0.03, 0.22) == "+12.0% (+3.0% to +22.0%)"
    assert decisions._interval(0.196, 0.001, 0.428, 0.0123) == "+19.6% (+0.1% to +42.8%, one-sided bounds at 1.23%)"
    assert decisions._interval(0.12, -0.95, 0.22).startswith("+12.0% (interval too noisy to state")
    assert "too noisy to state" in decisions._interval(0.5, 0.1, 12.0)


def test_a_capped_cell_without_a_no_spec_at_its_cap_is_not_judged_and_counts_in_no_step_up():
    # the speculative variant swept 400 W, its no-spec did not: no gain at 400 W can be paired (issue 60)
    rows = cell("nospec", 60, 0.5, 1) + cell("draft-n2", 80, 1, 2, 2) + cell("draft-n2", 70, 1, 2, 2, power_cap_w=400.0)
    table = choose(*rows, correctness=[agreement("draft-n2")])
    capped, uncapped = table[table["power_cap_w"] == 400].iloc[0], table[table["power_cap_w"].isna()].iloc[0]
    assert (capped["verdict"], capped["candidates"], capped["decided"]) == (decide.NOT_JUDGED, 0, False)
    assert capped["why"] == "no no-spec at 400 W: not judged"
    # the uncapped cell is the node's one hypothesis: its bounds at the whole 5%, not shared with the capped one
    assert uncapped["verdict"] == decide.RUN and uncapped["alpha"] == 0.05
    assert decisions.verdict_summary(table) == "1 judged cells: 1 run, 0 not worth it, 0 undecided; 1 not judged"


def test_a_no_spec_not_swept_at_a_cap_is_said_beside_the_cell_it_leaves_unpaired():
    why = "not swept: cap 400 W is at or above the stock cell's measured draw 380 W per GPU"
    skipped = [measured(ref=f"run1/nospec--r{k}", replicate=k, power_cap_w=400.0, metric="cell_status", value=None,
                        status=NOT_SWEPT, reason=why) for k in (1, 2, 3)]
    rows = cell("nospec", 60, 0.5, 1) + cell("draft-n2", 80, 1, 2, 2) + cell("draft-n2", 70, 1, 2, 2, power_cap_w=400.0)
    capped = choose(*rows, skipped, correctness=[agreement("draft-n2")]).query("power_cap_w == 400").iloc[0]
    assert capped["why"] == f"no no-spec at 400 W ({why}): not judged"


def test_a_cell_launched_in_one_round_of_three_is_a_one_off_not_judged():
    # a context ladder's shorter length runs on the first round only; the content class on all three
    rows = (cell("nospec", 60, 0.5, 1) + cell("draft-n2", 80, 1, 2, 2)
            + cell("nospec", 30, 0.5, 1, workload="context-ladder", rounds=1, prompt_tokens=8192)
            + cell("draft-n2", 40, 1, 2, 2, workload="context-ladder", rounds=1, prompt_tokens=8192))
    table = choose(*rows, correctness=[agreement("draft-n2")]).set_index("workload")
    assert (table.loc["context-ladder", "verdict"], table.loc["context-ladder", "why"]) == (
        decide.NOT_JUDGED, "one launch, of 3 rounds: not decided")
    assert table.loc["code", "verdict"] == decide.RUN


def test_a_rehearsals_plan_counts_only_the_cells_it_will_judge_and_names_the_others_with_why():
    rows = frame(cell("nospec", 60, 0.5, 1), cell("draft-n2", 80, 1, 2, 2), cell("draft-n2", 70, 1, 2, 2, power_cap_w=400.0),
                 cell("nospec", 30, 0.5, 1, workload="context-ladder", rounds=1, prompt_tokens=8192),
                 cell("draft-n2", 40, 1, 2, 2, workload="context-ladder", rounds=1, prompt_tokens=8192))
    (table,) = decisions.rehearsal_tables(rows, ["cpu"], {("llamacpp", "nospec"): 3, ("llamacpp", "draft-n2"): 3}, 5, RULE,
                                          ["power caps not swept on cpu: ..."])
    row = dict(zip(table.columns, table.rows[0]))
    assert row["cells judged"] == "2"  # code at c1, no-spec and draft-n2: before issue 60 all five counted
    assert row["not judged (why)"] == ("no no-spec at 400 W: not judged: code (1 cell); "
                                       "one launch, of 3 rounds: not decided: context-ladder (2 cells)")
    assert "power caps not swept on cpu: ..." in table.legend
