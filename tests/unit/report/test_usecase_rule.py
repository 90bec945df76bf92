"""The use-case rule of a real run (report/usecase.py, issue 47) on hand-built rows (test data, not
measurements): long context weighs TTFT, stacks are compared on like workload sets, a stack left out is said,
and a pick whose interval overlaps the runner-up's is not called separated."""

import pandas as pd

from stackbench.report.usecase import use_case_tables


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


def test_a_pick_within_the_runner_ups_interval_is_not_separated():
    rows = [cell("a", "prose", "decode_tps", 100.0, ci=(90.0, 110.0)), cell("b", "prose", "decode_tps", 95.0, ci=(85.0, 105.0)),
            cell("a", "code", "decode_tps", 100.0, ci=(98.0, 102.0)), cell("b", "code", "decode_tps", 80.0, ci=(78.0, 82.0))]
    table, _ = picks(rows)
    assert table["chat"]["separated"] == "no: the intervals overlap"
    assert table["coding"]["separated"] == "yes"
