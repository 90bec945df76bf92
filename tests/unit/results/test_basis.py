"""Caveats appear exactly where the basis differs between a table's rows, with the values per row."""

import pandas as pd

from stackbench.results import basis


def frame(*rows):
    base = {"os": "Ubuntu", "context_len": 32768, "temperature": 0.0, "concurrency": 1, "stat": "median"}
    return pd.DataFrame([{**base, **row, "row_no": i + 1} for i, row in enumerate(rows)])


def test_identical_basis_gives_no_caveat():
    assert basis.caveats(frame({}, {}, {})) == []


def test_one_differing_field_gives_one_caveat_with_values_per_row():
    found = basis.caveats(frame({"context_len": 262144}, {"context_len": 262144}, {}, {}))
    assert [c.field for c in found] == ["context_len"]
    assert found[0].text().startswith("context: rows 1-2 at 262144, rows 3-4 at 32768. Why it matters:")


def test_unknown_values_are_named_unknown():
    found = basis.caveats(frame({"os": None}, {}))
    assert found[0].text().startswith("OS: row 1 unknown, row 2 at Ubuntu.")


def test_axes_are_not_caveats():
    rows = frame({"concurrency": 1}, {"concurrency": 2})
    assert [c.field for c in basis.caveats(rows)] == ["concurrency"]
    assert basis.caveats(rows, axes=("concurrency",)) == []


def test_rows_with_several_records_list_all_their_values():
    rows = frame({"temperature": 0.7}, {})
    rows = pd.concat([rows, frame({})], ignore_index=True)  # a second record for display row 1
    found = basis.caveats(rows)
    assert found[0].values_by_row == {1: ("0", "0.7"), 2: ("0",)}


def test_non_central_stats_get_markers_and_a_legend():
    assert basis.stat_marker("peak") == "‡" and basis.stat_marker("median") == ""
    assert basis.marker_legend(["median", "peak", "single", "peak"]) == [
        "† a single figure: one run, or repeats not stated", "‡ peak, not typical throughput"]


def test_row_spans_compress():
    assert basis._rows_phrase([1, 2, 3, 5, 7, 8]) == "rows 1-3, 5, 7-8"
    assert basis._rows_phrase([4]) == "row 4"


def test_rows_alike_in_stating_and_not_stating_a_field_get_no_caveat():
    # Each display row holds a cell figure at temperature 0 and a launch figure that states no temperature.
    rows = pd.concat([frame({}, {}), frame({"temperature": None}, {"temperature": None})], ignore_index=True)
    assert basis.caveats(rows) == []


def test_one_row_mixing_two_stated_values_is_a_caveat():
    rows = pd.concat([frame({"temperature": 0.7}), frame({})], ignore_index=True)  # display row 1 twice
    assert [c.field for c in basis.caveats(rows)] == ["temperature"]


def test_two_spellings_of_one_gpu_are_no_caveat_two_gpus_are():
    assert basis.caveats(frame({"gpu": "RTX 5090 32GB"}, {"gpu": "NVIDIA GeForce RTX 5090"})) == []
    found = basis.caveats(frame({"gpu": "RTX 3090 24GB"}, {"gpu": "NVIDIA GeForce RTX 5090"}))
    assert [c.field for c in found] == ["gpu"] and "RTX 3090 24GB" in found[0].text()  # shown as each source spells it


def test_a_large_table_gets_the_caveats_of_its_distinct_rows():
    """Above basis.DISTINCT_FIRST records a table is reduced to its distinct combinations first: the same caveats."""
    rows = frame({"temperature": 0.7}, {"temperature": None}, {"os": "Debian"})
    many = pd.concat([rows] * (basis.DISTINCT_FIRST // len(rows) + 1), ignore_index=True)
    assert [c.text() for c in basis.caveats(many)] == [c.text() for c in basis.caveats(rows)] != []
