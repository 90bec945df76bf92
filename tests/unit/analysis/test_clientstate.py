"""Cells measured by a saturated load client (analysis/clientstate.py), on rows made by hand (TEST DATA): the reason
from the cell's own figures, What to run leaving those launches' rounds out by name, the headline marking the
figure. The starved client that writes such rows is tests/integration/test_client_saturation.py."""

from test_analysis import frame, measured
from test_decide import agreement, cell, choose

from stackbench.analysis import clientstate
from stackbench.report import queries
from stackbench.report.headline import SATURATED_CLIENT, headline_table
from stackbench.results import store


def client_rows(saturated: bool, **identity) -> list[dict]:
    """A cell's client figures: a loop busy 97% of a core lagging 31 ms at p99, or a calm one."""
    return [measured(metric="client_saturated", value=1.0 if saturated else 0.0, unit="ratio", stat="single", **identity),
            measured(metric="client_cpu_share", value=0.97 if saturated else 0.1, unit="ratio", stat="mean", **identity),
            measured(metric="client_loop_lag_p99_ms", value=31.0 if saturated else 0.4, unit="ms", stat="p99", **identity)]


def test_a_saturated_cell_is_named_with_its_clients_figures_and_no_other_cell_is():
    rows = frame(measured(), measured(concurrency=2), *client_rows(True), *client_rows(False, concurrency=2))
    cells = rows[rows["metric"] == "decode_tps"]
    why = dict(zip(cells["concurrency"], clientstate.saturated_of(cells, rows)))
    assert why == {1: "client saturated: its event loop busy 97% of a core, loop lag p99 31.0 ms", 2: ""}
    assert set(clientstate.saturated_of(cells, rows[rows["metric"] != "client_saturated"])) == {""}  # no flag, no reason


def test_what_to_run_leaves_out_the_rounds_a_saturated_client_measured():
    rows = [*cell("nospec", 60, 0.5, 1), *cell("draft-n2", 80, 1, 2, 2), *cell("draft-n4", 120, 1, 2, 4, rounds=4)]
    for k in (1, 2, 3):  # every launch of draft-n4 but its fourth was read by a client that could not keep up
        rows += client_rows(True, ref=f"run1/draft-n4--r{k}", replicate=k, variant="draft-n4", spec_method="draft",
                            spec_tokens=4)
    row = choose(*rows, correctness=[agreement("draft-n2"), agreement("draft-n4")]).iloc[0]
    assert row["run"] == "draft-n2"  # draft-n4's one valid round cannot decide: its fast figures were the client's
    assert "draft-n4 (round 1: client saturated: its event loop busy 97% of a core" in row["excluded"]


def test_the_headline_marks_a_figure_a_saturated_client_measured_and_says_why():
    rows = [measured(variant="nospec", value=100.0), measured(variant="draft-n2", spec_method="draft", value=150.0),
            *client_rows(True, variant="draft-n2", spec_method="draft"), *client_rows(False, variant="nospec")]
    results = store.to_table(rows).to_pandas()
    table = headline_table(queries.headline_input(queries.Results(results)), "cpu",
                           saturated=clientstate.saturated_cells(results))
    got = {row[table.columns.index("variant")]: row[table.columns.index("decode tok/s")] for row in table.rows}
    assert got == {"nospec": "100", "draft-n2": "150" + SATURATED_CLIENT}
    assert any(line.startswith(f"{SATURATED_CLIENT} llamacpp / draft-n2 decode tok/s: measured by a load client that could "
                               "not keep up (client saturated: its event loop busy 97% of a core") for line in table.caveats)
