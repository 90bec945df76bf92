"""What to run for chat / coding / long context (report/usecase.py) on hand-built rows (test data, not
measurements): one pick per use across stacks, the runner-up with what separates them, the interval."""

import pandas as pd

from stackbench.report.usecase import use_case_tables


def cell(stack, variant, workload, value, prompt=40, ci=(None, None), quant="Q4_K_M", engine="llama.cpp"):
    return {"node": "box", "stack": stack, "variant": variant, "workload": workload, "prompt_tokens": prompt, "value": value,
            "ci_low": ci[0], "ci_high": ci[1], "engine": engine, "quant": quant, "model": "m", "kv_dtype": "f16",
            "context_len": 131072, "spec_method": "none", "spec_tokens": None, "engine_version": "1"}


def test_one_pick_per_use_across_stacks_with_its_runner_up_and_interval():
    rows = pd.DataFrame([
        cell("llamacpp", "mtp-n2", "code", 120.0, ci=(110.0, 130.0)), cell("llamacpp", "mtp-n2", "json", 100.0, ci=(90.0, 110.0)),
        cell("sglang", "nospec", "code", 80.0, quant="INT4", engine="SGLang"),
        cell("llamacpp", "mtp-n2", "prose", 60.0), cell("sglang", "nospec", "prose", 75.0, quant="INT4", engine="SGLang"),
        # long context: each launch's longest prompt only (sglang's 1K cell is fast but not long)
        cell("llamacpp", "mtp-n2", "context-ladder", 40.0, prompt=126976),
        cell("sglang", "nospec", "context-ladder", 200.0, prompt=1024, quant="INT4", engine="SGLang"),
        cell("sglang", "nospec", "context-ladder", 55.0, prompt=126976, quant="INT4", engine="SGLang"),
        cell("vllm", "nospec", "seed-004-long", 90.0, prompt=30000, engine="vLLM"),  # never reaches 128K: not compared
    ])
    (table,) = use_case_tables(rows, ["box"])
    picks = {row[0]: row for row in table.rows}
    # Like workload sets: sglang ran code only, so llamacpp is judged on its code cell too, not on code and json.
    assert picks["coding"][1:4] == ["llamacpp / mtp-n2", "120 tok/s", "not judged"]  # no What to run given here
    assert picks["chat"][1] == "sglang / nospec"
    assert picks["long context"][1:3] == ["sglang / nospec", "55 tok/s"]
    assert picks["coding"][4] == "sglang / nospec (80 tok/s)"
    assert any(line.startswith("coding:") and "quant" in line and "engine" in line for line in table.legend)
    # vLLM's longest prompt never reaches the node's longest: left out of long context, with a sentence saying why.
    assert any(line.startswith("long context on box: vllm left out") and "30000 tokens" in line for line in table.legend)
