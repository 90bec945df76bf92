"""A Monte Carlo test of What to run's whole rule, stopping included (docs/what-to-run.md): a double of a node
with ten content classes, each launch drawing one speed factor shared by all its cells (CV 15%) plus noise
inside the launch, run through the sequential design at the default budget, 200 seeded runs per case.

TEST DATA throughout: the rates are drawn here, no engine runs. What to run replays the looks on whatever rounds
the rows hold, so a run that measured every round of the budget decides as one that stopped when decided: a cell
decided at a look keeps its verdict, and later rounds only reach cells still undecided."""

import math

import numpy as np
import pandas as pd
import pytest
from test_analysis import frame, measured

from stackbench.analysis import decide
from stackbench.config import default_decision
from stackbench.config.model import Decision

NO_CORRECTNESS = pd.DataFrame(columns=["node", "stack", "variant", "first_divergence_token", "length_off_in"])
LAUNCH_CV = 0.15
WITHIN_CV = 0.03  # a launch's cell median over its repeats
CELLS = [f"class-{i}" for i in range(10)]
VARIANTS = {"nospec": None, "ngram-n8": 8, "ngram-n16": 16}
RUNS = 200


def node_rows(rng: np.random.Generator, node: str, rounds: int, truth: dict[tuple[str, str], float],
              launch_cv: float = LAUNCH_CV) -> list[dict]:
    """`rounds` rounds of every variant on `node`: each launch one shared speed factor, each cell its own noise."""
    rows = []
    for k in range(1, rounds + 1):
        for variant, depth in VARIANTS.items():
            launch = math.exp(rng.normal(0, launch_cv))
            for workload in CELLS:
                rate = 100 * (1 + truth.get((variant, workload), 0.0)) * launch * math.exp(rng.normal(0, WITHIN_CV))
                rows.append(measured(ref=f"{node}/llamacpp--{variant}--r{k}", node=node, variant=variant, replicate=k,
                                     spec_method="none" if depth is None else "ngram", spec_tokens=depth,
                                     workload=workload, value=rate, mad=rate * 0.01))
    return rows


def verdicts(truth: dict, decision: Decision, launch_cv: float = LAUNCH_CV, runs: int = RUNS) -> pd.DataFrame:
    """What to run over `runs` seeded nodes, each measured to the budget's last round."""
    rows = [r for seed in range(runs) for r in node_rows(np.random.default_rng(seed), f"n{seed:03d}", decision.most,
                                                          truth, launch_cv)]
    nodes = {f"n{seed:03d}": decision for seed in range(runs)}
    return decide.what_to_run(frame(rows), NO_CORRECTNESS, nodes)


BUDGET = 16  # rounds: what a node states as decide.most_launches to decide a +30% at a launch CV of 15%


@pytest.fixture(scope="module")
def default() -> Decision:
    """The rule at a 16-round budget, the first look after three rounds, the schema's margin."""
    return Decision(first=3, most=BUDGET, min_gain=default_decision().min_gain, budget_minutes=None)


def test_no_true_difference_chooses_a_variant_somewhere_in_at_most_5_percent_of_runs(default):
    table = verdicts({}, default)
    wrong = table.groupby("node")["verdict"].agg(lambda v: (v == decide.RUN).any())
    assert wrong.mean() <= 0.05


def test_a_true_30_percent_on_three_cells_is_run_on_all_three_in_80_percent_of_runs(default):
    gaining = CELLS[:3]
    table = verdicts({("ngram-n8", w): 0.30 for w in gaining}, default)
    found = table[table["workload"].isin(gaining)].groupby("node").apply(
        lambda t: ((t["verdict"] == decide.RUN) & (t["run"] == "ngram-n8")).all(), include_groups=False)
    assert found.mean() >= 0.80
    # and the rest of the cells stay clean far more often than not
    others = table[~table["workload"].isin(gaining)]
    assert (others["verdict"] == decide.RUN).mean() <= 0.05


def test_a_true_zero_reads_not_worth_it_where_the_budget_allows(default):
    # At a launch CV of 15% no budget of 16 rounds can bound a gain under +10%; at 3% (the default's own launches
    # after pinning, docs/benchmarks.md) it can, and the rule must then say so.
    table = verdicts({}, default, launch_cv=0.03)
    assert (table["verdict"] == decide.NOT_WORTH_IT).mean() >= 0.70


def test_a_one_launch_cell_is_never_run():
    rows = node_rows(np.random.default_rng(1), "one", 1, {("ngram-n8", w): 1.0 for w in CELLS})
    table = decide.what_to_run(frame(rows), NO_CORRECTNESS)
    assert set(table["verdict"]) == {decide.UNDECIDED}
    assert table["why"].str.contains("the first look is at").all()


def test_an_undecided_cell_names_the_rounds_that_would_settle_it():
    decision = Decision(first=3, most=16, min_gain=0.1, budget_minutes=None)
    rows = node_rows(np.random.default_rng(7), "few", 3, {("ngram-n8", w): 0.15 for w in CELLS})
    table = decide.what_to_run(frame(rows), NO_CORRECTNESS, {"few": decision})
    undecided = table[table["verdict"] == decide.UNDECIDED]
    assert len(undecided) and (undecided["settle_rounds"].dropna() > 0).all()


def test_a_round_whose_reference_launch_is_invalid_pairs_with_nothing():
    decision = Decision(first=3, most=16, min_gain=0.1, budget_minutes=None)
    rows = node_rows(np.random.default_rng(3), "bad", 4, {})
    for row in rows:  # round 2's no-spec launch was throttled: every cell of it implausible
        if row["variant"] == "nospec" and row["replicate"] == 2:
            row["implausible"] = "decode over its roofline"
    table = decide.what_to_run(frame(rows), NO_CORRECTNESS, {"bad": decision})
    assert (table["rounds"] == 3).all()
    assert table["excluded"].str.contains("nospec \\(round 2: implausible").all()
