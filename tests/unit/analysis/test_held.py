"""Did the decisions hold: a kept run's What to run against this run's, cell by cell (analysis/held.py), and the
kept run written by `stackbench keep` read back by the report."""

from pathlib import Path

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


def test_a_decision_whose_rerun_reads_inside_its_interval_held():
    row = verdict(run_of(STEADY_GAIN), run_of([(99, 119), (102, 122), (95, 114.5)]))
    assert (row["verdict"], row["why"]) == ("held", "")
    assert row["earlier"].startswith("ngram-n16 +20") and row["now"].startswith("ngram-n16 +20")


def test_a_decision_whose_rerun_reads_outside_its_interval_did_not_hold():
    row = verdict(run_of(STEADY_GAIN), run_of([(100, 101), (90, 92), (101, 100)]))
    assert row["verdict"] == "did not hold"
    assert "the earlier run decided ngram-n16" in row["why"] and "outside that interval" in row["why"]
    assert row["now"] == decide.NO_SPEC


def test_a_flip_inside_a_wide_interval_is_named_as_one():
    # decided on a wide interval (+4% to +40%-ish); the rerun reads +10% without clearing zero
    wide = [(100, 125), (100, 112), (100, 124), (100, 113)]
    row = verdict(run_of(wide), run_of([(100, 125), (100, 96), (100, 115), (100, 106)]))
    assert row["verdict"] == "flipped, inside the intervals"
    assert row["earlier"].startswith("ngram-n16") and row["now"] == decide.NO_SPEC


def test_no_spec_kept_in_both_runs_held():
    row = verdict(run_of([(100, 99), (90, 91), (101, 100)]), run_of([(100, 98), (95, 96), (99, 100)]))
    assert (row["earlier"], row["now"], row["verdict"]) == (decide.NO_SPEC, decide.NO_SPEC, "held")


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
    assert "did not hold" in table and "1 decisions in both runs: 1 did not hold" in table


@pytest.mark.parametrize("argv, said", [
    (["keep", "cpu", "--label", "../x"], "letters, digits"),
    (["keep", "gpu"], "no measured rows of node 'gpu'"),
])
def test_keep_refuses_bad_input_in_one_line(tmp_path, capsys, argv, said):
    results = tmp_path / "results.parquet"
    store.atomic_write_parquet(store.to_table(run_of(STEADY_GAIN).to_dict("records")), results)
    assert main([*argv, "--results", str(results), "--kept-dir", str(tmp_path / "kept")]) == 2
    assert said in capsys.readouterr().err and not (tmp_path / "kept").exists()
