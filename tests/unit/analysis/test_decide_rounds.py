"""What to run over rounds of launch replicates: the paired gain's interval spans rounds, a variant that never
drafted is never chosen (and serves as an A/A control), one launch is never decided, and the rule's error rates
hold on a double whose launches each draw a speed factor (CV 15%)."""

import math

import numpy as np
import pandas as pd
from test_analysis import frame, measured

from stackbench.analysis import decide

NO_CORRECTNESS = pd.DataFrame(columns=["node", "stack", "variant", "first_divergence_token", "length_off_in"])
LAUNCH_CV = 0.15  # each launch's speed factor: lognormal, its log's sd ~ the coefficient of variation
VARIANTS = {"nospec": None, "ngram-n8": 8, "ngram-n16": 16}


def launch_cell(variant: str, replicate: int, rate: float, drafts: float | None = None, node: str = "cpu") -> list[dict]:
    """One launch replicate's judged cell (code at c1, three steady repeats around `rate`), TEST DATA."""
    depth = VARIANTS[variant]
    common = dict(ref=f"{node}/llamacpp--{variant}--r{replicate}", node=node, variant=variant, replicate=replicate,
                  spec_method="none" if depth is None else "ngram", spec_tokens=depth)
    rows = [measured(**common, value=rate, mad=rate * 0.01, repeat_values=[rate * 0.99, rate, rate * 1.01])]
    if drafts is not None:
        rows.append(measured(**common, metric="spec_drafts", value=drafts, unit="tokens", stat="single"))
    return rows


def round_rows(rng: np.random.Generator, launches: int, truth: dict[str, float], node: str = "cpu") -> list[list[dict]]:
    """`launches` rounds of every variant, each launch at 100 tok/s x its true gain x its own speed factor."""
    return [launch_cell(variant, k, 100 * (1 + truth.get(variant, 0)) * math.exp(rng.normal(0, LAUNCH_CV)), node=node)
            for k in range(1, launches + 1) for variant in VARIANTS]


def rounds_of(rng: np.random.Generator, launches: int, truth: dict[str, float]) -> pd.DataFrame:
    return frame(*round_rows(rng, launches, truth))


def chosen(results: pd.DataFrame) -> pd.Series:
    return decide.what_to_run(results, NO_CORRECTNESS).iloc[0]


def chosen_per_seed(seeds: range, launches: int, truth: dict[str, float], rule=None) -> list[pd.Series]:
    """chosen(rounds_of(default_rng(seed), ...)) for every seed, in one what_to_run call: each seed's launches
    on a node of their own, which what_to_run decides apart from the others (its groups include the node).
    Forty runs in one pass take a fortieth of the time of forty calls."""
    nodes = {seed: f"cpu-{seed:04d}" for seed in seeds}
    rows = [row for seed in seeds for row in round_rows(np.random.default_rng(seed), launches, truth, node=nodes[seed])]
    table = decide.what_to_run(frame(*rows), NO_CORRECTNESS, {n: rule for n in nodes.values()} if rule else None).set_index("node")
    assert len(table) == len(nodes)  # one choice per seed's node
    return [table.loc[nodes[seed]] for seed in seeds]


def test_no_true_difference_is_declared_a_gain_in_at_most_2_of_40_runs_at_the_default_launch_count(repo_copy):
    from stackbench.plan import expand

    _, (node,) = expand.load_plan(repo_copy, {"nodes": ["local-cpu"]})
    launches = max(l.replicate for l in node.launches)
    assert launches >= 2  # the default measures launch-to-launch noise
    declared = sum(row["run"] != decide.RUN_NO_SPEC for row in chosen_per_seed(range(40), launches, {}, node.decision))
    assert declared <= 2


def test_the_gain_is_paired_within_rounds_and_its_interval_spans_them():
    # round 2 ran 30% slower for both variants (a drift of the host): paired, the gain is steady at +20%
    rows = [launch_cell("nospec", 1, 100), launch_cell("ngram-n16", 1, 120),
            launch_cell("nospec", 2, 70), launch_cell("ngram-n16", 2, 84.5),
            launch_cell("nospec", 3, 101), launch_cell("ngram-n16", 3, 121)]
    row = chosen(frame(*rows))
    assert row["run"] == "ngram-n16" and row["decided"] and row["rounds"] == 3
    assert 0.10 < row["gain_low"] < row["gain"] < row["gain_high"] < 0.30 and abs(row["gain"] - 0.20) < 0.005
    assert "clears zero at round 3" in row["why"]


def test_one_launch_is_never_decided():
    row = chosen(frame(launch_cell("nospec", 1, 100), launch_cell("ngram-n16", 1, 150)))
    assert (row["verdict"], row["run"], row["decided"]) == (decide.UNDECIDED, decide.RUN_NO_SPEC, False)
    assert "the first look is at" in row["why"]


def test_a_variant_that_never_drafted_is_never_chosen_and_reads_as_an_aa_control():
    rows = []
    for k, (base, idle) in enumerate([(100, 131), (101, 129), (99, 132)], 1):  # ngram-n8 "wins" by 30% with no drafts
        rows += [launch_cell("nospec", k, base), launch_cell("ngram-n8", k, idle, drafts=0),
                 launch_cell("ngram-n16", k, base * 1.01, drafts=40)]
    row = chosen(frame(*rows))
    assert row["run"] != "ngram-n8"
    assert "ngram-n8 (did not speculate (no drafts in its 3 launch(es)))" in row["excluded"]
    assert "A/A control: ngram-n8 never drafted" in row["excluded"]


def test_what_to_run_and_the_use_case_table_name_the_same_variant_on_every_cell_they_share():
    from stackbench.report.usecase import use_case_tables

    rng = np.random.default_rng(5)
    rows = []
    for workload, truth in (("code", {"ngram-n16": 0.5}), ("json", {"ngram-n16": 0.5}), ("prose", {})):
        for k in range(1, 9):
            for variant in VARIANTS:
                rate = 100 * (1 + truth.get(variant, 0)) * math.exp(rng.normal(0, 0.02))
                rows += [{**r, "workload": workload} for r in launch_cell(variant, k, rate)]
    results = frame(*rows)
    choices = decide.what_to_run(results, NO_CORRECTNESS)
    run = dict(zip(choices["workload"], choices["run"]))
    assert run == {"code": "ngram-n16", "json": "ngram-n16", "prose": decide.RUN_NO_SPEC}
    judged = results[results["metric"] == "decode_tps"]
    (table,) = use_case_tables(judged, ["cpu"], choices)
    picks = {row[0]: row[1] for row in table.rows}
    assert picks == {"coding": "llamacpp / ngram-n16", "chat": "llamacpp / nospec"}


def test_the_variance_between_launches_is_told_apart_from_the_repeats_inside_one():
    frame_ = rounds_of(np.random.default_rng(3), 6, {})  # launch factors CV 15%, repeats +-1% inside each
    split = decide.launch_variance(frame_).set_index("variant")
    assert set(split.index) == set(VARIANTS) and (split["launches"] == 6).all() and (split["cells"] == 1).all()
    assert (split["between_launch_share"] > 0.95).all()
    assert (split["within_launch_cv"] < 0.02).all() and (split["between_launch_cv"] > 0.05).all()
    assert decide.launch_variance(frame(launch_cell("nospec", 1, 100))).empty  # one launch: nothing to split
