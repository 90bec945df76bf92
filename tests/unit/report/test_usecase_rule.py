"""The use-case rule of a real run (report/usecase.py, issue 47) on hand-built rows (test data, not
measurements): long context weighs TTFT, stacks are compared on like workload sets, a stack left out is said,
and each stack stands with what What to run decided for it."""

import pandas as pd

from stackbench.report.usecase import rehearsal_use_case_tables, use_case_tables


def cell(stack, workload, metric, value, prompt=40, ci=(None, None), context=131072):
    return {"node": "box", "stack": stack, "variant": "nospec", "workload": workload, "prompt_tokens": prompt,
            "output_tokens": 512, "metric": metric, "value": value, "ci_low": ci[0], "ci_high": ci[1], "engine": stack,
            "quant": "Q4_K_M", "model": "m", "kv_dtype": "f16", "context_len": context, "spec_method": "none",
            "spec_tokens": None, "engine_version": "1", "ref": f"{stack}-run"}


def picks(rows: list[dict]) -> tuple[dict, list[str]]:
    (table,) = use_case_tables(pd.DataFrame(rows), ["box"])
    return {row[0]: dict(zip(table.columns, row)) for row in table.rows}, table.legend


def test_long_context_weighs_ttft_a_slow_prefill_loses_to_a_slower_decode():
    rows = [cell("fastdecode", "seed-000-128k", "decode_tps", 60.0, prompt=127544),
            cell("fastdecode", "seed-000-128k", "ttft_s", 100.0, prompt=127544),
            cell("fastprefill", "seed-000-128k", "decode_tps", 50.0, prompt=127544),
            cell("fastprefill", "seed-000-128k", "ttft_s", 20.0, prompt=127544)]
    table, _ = picks(rows)
    long = table["long context"]
    assert long["pick (stack / variant)"] == "fastprefill / nospec"
    assert long["decode"] == f"50 tok/s; request {20 + 512 / 50:.1f} s"
    assert long["runner-up"].startswith("fastdecode / nospec (request 109 s")


def test_stacks_are_compared_on_the_workloads_both_ran_and_a_stack_left_out_is_said():
    rows = [cell("a", "code", "decode_tps", 100.0), cell("a", "json", "decode_tps", 10.0),
            cell("b", "code", "decode_tps", 90.0),
            cell("a", "seed-000-128k", "decode_tps", 40.0, prompt=127544), cell("a", "seed-000-128k", "ttft_s", 30.0, prompt=127544),
            cell("b", "seed-004-long", "decode_tps", 45.0, prompt=30000, context=65536)]
    table, legend = picks(rows)
    # a's median over code and json (55) would lose to b's code (90); on the common set, code, a leads.
    assert table["coding"]["pick (stack / variant)"] == "a / nospec" and table["coding"]["workloads"] == "code"
    assert any(line.startswith("long context on box: b left out: its longest prompt is 30000 tokens (context 65536)")
               for line in legend)


def test_each_stack_stands_with_what_to_run_decided_and_its_verdicts_are_said():
    rows = [cell("a", "code", "decode_tps", 100.0), cell("a", "prose", "decode_tps", 70.0),
            {**cell("a", "code", "decode_tps", 130.0), "variant": "ngram-n8", "spec_method": "ngram"},
            {**cell("a", "prose", "decode_tps", 90.0), "variant": "ngram-n8", "spec_method": "ngram"}]
    choices = pd.DataFrame([
        {"node": "box", "stack": "a", "workload": "code", "concurrency": 1, "verdict": "run", "run": "ngram-n8"},
        {"node": "box", "stack": "a", "workload": "prose", "concurrency": 1, "verdict": "undecided", "run": "no-spec"}])
    (table,) = use_case_tables(pd.DataFrame(rows), ["box"], choices)
    by_use = {row[0]: dict(zip(table.columns, row)) for row in table.rows}
    # coding: What to run decided ngram-n8 on code; chat: undecided on prose, so the stack stands with no-spec
    assert by_use["coding"]["pick (stack / variant)"] == "a / ngram-n8"
    assert by_use["coding"]["What to run within the stack"] == "run ngram-n8 on code"
    assert by_use["chat"]["pick (stack / variant)"] == "a / nospec"
    assert by_use["chat"]["What to run within the stack"] == "undecided on prose"


def test_long_context_on_fewer_launches_than_the_rounds_says_so_instead_of_its_launches():
    # issue 60: the ladder's top ran on round 1 only (a results file from before, or long_context_rounds: first)
    rows = [{**cell("a", workload, "decode_tps", value, prompt=prompt), "variant": variant, "replicate": k}
            for variant, value in (("nospec", 50.0), ("ngram-n8", 60.0))
            for workload, prompt, rounds in (("code", 40, 3), ("context-ladder", 126976, 1), ("context-ladder", 1024, 1))
            for k in range(1, rounds + 1)]
    (table,) = rehearsal_use_case_tables(pd.DataFrame(rows), ["box"], {("a", "nospec"): 3, ("a", "ngram-n8"): 3}, 5)
    compared = {row[0]: row[3] for row in table.rows}
    assert compared == {"coding": "a: ngram-n8 / nospec, 3 launches each",
                        "long context": "a: ngram-n8 / nospec, one launch, of 3 rounds: not decided"}
    # a real run's table says what What to run made of the longest prompt's cell, not of the ladder's shorter ones
    choices = pd.DataFrame([
        {"node": "box", "stack": "a", "workload": "context-ladder", "prompt_tokens": 126976, "concurrency": 1,
         "verdict": "not judged", "run": "no-spec", "why": "one launch, of 3 rounds: not decided"},
        {"node": "box", "stack": "a", "workload": "context-ladder", "prompt_tokens": 1024, "concurrency": 1,
         "verdict": "undecided", "run": "no-spec", "why": ""}])
    (table,) = use_case_tables(pd.DataFrame([r for r in rows if r["replicate"] == 1]), ["box"], choices)
    long = next(dict(zip(table.columns, row)) for row in table.rows if row[0] == "long context")
    assert long["What to run within the stack"] == "one launch, of 3 rounds: not decided on context-ladder"


def test_the_gpu_sized_workloads_init_node_writes_stand_for_chat_and_coding():
    rows = [cell("a", "gpu-code", "decode_tps", 100.0), cell("a", "gpu-chat", "decode_tps", 90.0)]
    table, _ = picks(rows)
    assert (table["coding"]["workloads"], table["chat"]["workloads"]) == ("gpu-code", "gpu-chat")
