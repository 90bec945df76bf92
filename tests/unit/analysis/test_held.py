"""Did the decisions hold: a kept run's What to run against this run's, cell by cell (analysis/held.py), and the
kept run written by `stackbench keep` read back by the report."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_analysis import frame
from test_decide_rounds import NO_CORRECTNESS, launch_cell

from stackbench.analysis import decide, held
from stackbench.cli import main
from stackbench.report import render
from stackbench.results import store

PUBLISHED = Path(__file__).resolve().parents[3] / "data/published"


def run_of(gains: list[tuple[float, float]]) -> pd.DataFrame:
    """Rounds of no-spec and ngram-n16 at the given (no-spec, n16) rates, with drafts counted, TEST DATA."""
    rows = []
    for k, (nospec, spec) in enumerate(gains, start=1):
        rows += launch_cell("nospec", k, nospec) + launch_cell("ngram-n16", k, spec, drafts=40)
    return frame(*rows)


def verdict(earlier: pd.DataFrame, now: pd.DataFrame) -> pd.Series:
    table = held.decisions_held(decide.what_to_run(earlier, NO_CORRECTNESS), held.variant_gains(earlier),
                                decide.what_to_run(now, NO_CORRECTNESS), held.variant_gains(now))
    assert len(table) == 1  # one decision in common: code at c1 on a CPU node (no power cap: NaN keys match)
    return table.iloc[0]


STEADY_GAIN = [(100, 120), (90, 108.5), (101, 121)]  # +20% in every round


def test_a_decision_whose_rerun_reads_the_same_gain_held():
    row = verdict(run_of(STEADY_GAIN), run_of([(99, 119), (102, 122), (95, 114.5)]))
    assert (row["verdict"], row["why"]) == (held.HELD, "")
    assert row["earlier"].startswith("run ngram-n16 +20") and row["now"].startswith("run ngram-n16 +20")


def test_a_decision_whose_rerun_reads_another_gain_differs():
    row = verdict(run_of(STEADY_GAIN), run_of([(100, 101), (90, 92), (101, 100)]))
    assert row["verdict"] == held.DIFFERS
    assert row["why"].startswith("the gains differ between the runs: ngram-n16 -0.1")
    assert row["now"] != row["earlier"]


def test_a_rerun_too_noisy_to_show_either_says_it_cannot_tell():
    # decided on a steady +20%; the rerun's rounds scatter around +15% without deciding: its rounds alone do not
    # show a gain above zero, and no difference is found either ("no difference found" is not "held")
    row = verdict(run_of(STEADY_GAIN), run_of([(100, 125), (100, 104), (100, 118)]))
    assert row["verdict"] == held.CANNOT_TELL
    assert row["why"].startswith("the kept verdict not shown on this run's rounds (p 0.0")
    assert row["now"] == decide.UNDECIDED


def test_a_rerun_whose_verdict_flipped_but_whose_rounds_still_show_the_kept_verdict_held_with_the_verdicts_named():
    # +12% decided "run", +3% "not worth it": the rerun's rounds alone still show a gain above zero
    row = verdict(run_of([(100, 112), (100, 112.2), (100, 111.8)]), run_of([(100, 103), (100, 103.2), (100, 102.8)]))
    assert row["verdict"] == held.HELD
    assert row["why"].startswith("the verdicts differ; the kept verdict holds on this run's rounds alone (p 0.0")
    assert row["earlier"].startswith("run ngram-n16 +12.0%") and row["now"] == decide.NOT_WORTH_IT


def test_a_cell_missing_from_one_run_is_not_compared():
    earlier = run_of(STEADY_GAIN)
    now = run_of([(100, 120)])  # one round: a contender with no paired gain to test
    row = verdict(earlier, now)
    assert row["verdict"] == held.NOT_COMPARED


def test_cells_without_a_contender_are_not_counted():
    nospec_only = frame(*[launch_cell("nospec", k, 100 + k) for k in (1, 2, 3)])
    table = held.decisions_held(decide.what_to_run(nospec_only, NO_CORRECTNESS), held.variant_gains(nospec_only),
                                decide.what_to_run(nospec_only, NO_CORRECTNESS), held.variant_gains(nospec_only))
    assert table.empty


def test_with_a_true_gain_a_rerun_holds_in_most_decided_cells_and_differs_in_at_most_5_percent_of_reruns():
    """TEST DATA: two independent runs of a ten-cell node (launch CV 5%, a true +20% on every cell), each through
    the sequential rule at a 16-round budget; the rerun check over the cells either run decided. Holm holds a
    false "differs" under 5% of reruns; the equivalence test at +-10% finds most cells held (text level included)."""
    from test_decide_sequential import CELLS, node_rows

    from stackbench.config.model import Decision

    rule = {"node": Decision(first=3, most=16, min_gain=0.1, budget_minutes=None)}
    truth = {("ngram-n8", w): 0.20 for w in CELLS}
    verdicts, differs = [], 0
    for seed in range(20):
        runs = [frame(node_rows(np.random.default_rng(1000 * seed + k), "node", 16, truth, launch_cv=0.05)) for k in (0, 1)]
        tables = [decide.what_to_run(r, NO_CORRECTNESS, rule) for r in runs]
        checked = held.decisions_held(tables[0], held.variant_gains(runs[0]), tables[1], held.variant_gains(runs[1]))
        decided = tables[0]["decided"].to_numpy() | tables[1]["decided"].to_numpy()
        verdicts += list(checked["verdict"][decided])
        differs += (checked["verdict"] == held.DIFFERS).any()
    assert len(verdicts) >= 150
    assert differs <= 1 and verdicts.count(held.HELD) >= 0.7 * len(verdicts)  # measured: 0 and 77%


def test_keep_then_report_says_which_decisions_held(tmp_path, capsys):
    results = tmp_path / "results.parquet"
    store.atomic_write_parquet(store.to_table(run_of(STEADY_GAIN).to_dict("records")), results)
    assert main(["keep", "cpu", "--results", str(results), "--kept-dir", str(tmp_path / "kept"), "--label", "first"]) == 0
    kept = tmp_path / "kept" / "cpu" / "first.parquet"
    assert kept.is_file() and "rows of cpu" in capsys.readouterr().out
    # a second keep under the same label is refused in one line, and the kept file is untouched
    assert main(["keep", "cpu", "--results", str(results), "--kept-dir", str(tmp_path / "kept"), "--label", "first"]) == 2
    assert "exists; give another --label" in capsys.readouterr().err
    store.atomic_write_parquet(store.to_table(run_of([(100, 101), (90, 92), (101, 100)]).to_dict("records")), results)
    render.write_report(results, tmp_path / "reports", PUBLISHED, kept_dir=tmp_path / "kept")
    table = (tmp_path / "reports" / "tables" / "decisions-held-cpu-first.md").read_text()
    assert "differs" in table and "1 cells with a contender in both runs: 1 differs" in table


@pytest.mark.parametrize("argv, said", [
    (["keep", "cpu", "--label", "../x"], "letters, digits"),
    (["keep", "gpu"], "no measured rows of node 'gpu'"),
])
def test_keep_refuses_bad_input_in_one_line(tmp_path, capsys, argv, said):
    results = tmp_path / "results.parquet"
    store.atomic_write_parquet(store.to_table(run_of(STEADY_GAIN).to_dict("records")), results)
    assert main([*argv, "--results", str(results), "--kept-dir", str(tmp_path / "kept")]) == 2
    assert said in capsys.readouterr().err and not (tmp_path / "kept").exists()


def test_at_a_launch_cv_of_5_percent_a_true_gain_reads_held_and_a_vanished_one_does_not():
    """TEST DATA: the rule's double (test_decide_sequential), six-round horizon, launch CV 5%, a true +30% on three
    cells of ten. A rerun with the same truth re-tests the kept "run" on its own rounds and reads "held" on nearly
    every such cell (TOST within +-10% read it on about 6%); a rerun where the gain fell to 0 reads "held" on few."""
    from test_decide_sequential import CELLS, SHORT, node_rows, rule

    truth = {("ngram-n8", w): 0.30 for w in CELLS[:3]}
    # twelve nodes in one table: each its own family in What to run; the rerun check's step-up spans them all
    nodes = [f"n{seed:02d}" for seed in range(12)]
    runs = [frame([r for seed, node in enumerate(nodes)
                   for r in node_rows(np.random.default_rng(100 * seed + k), node, SHORT, t, launch_cv=0.05)])
            for k, t in enumerate((truth, truth, {}))]
    tables = [decide.what_to_run(r, NO_CORRECTNESS, dict.fromkeys(nodes, rule(SHORT))) for r in runs]
    gains = [held.variant_gains(r) for r in runs]
    ran = (tables[0]["verdict"] == decide.RUN).to_numpy() & tables[0]["workload"].isin(CELLS[:3]).to_numpy()
    kept, vanished = (list(held.decisions_held(tables[0], gains[0], tables[now], gains[now])["verdict"][ran]) for now in (1, 2))
    assert len(kept) >= 30
    assert kept.count(held.HELD) >= 0.9 * len(kept) and vanished.count(held.HELD) <= 0.1 * len(vanished)
