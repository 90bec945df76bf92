"""Repeats to a stated precision and the over-saturated sweep, the fingerprint and the rules on given
figures; measured against the synthetic engine in tests/integration/test_precision_served.py."""

from helpers import PRECISE, external_spec

from stackbench.measure import precision


def test_without_a_target_the_fingerprint_ignores_the_precision_settings(tmp_path):
    plain = external_spec(tmp_path / "a", "http://127.0.0.1:9", repeats=3)
    capped = external_spec(tmp_path / "b", "http://127.0.0.1:9", repeats=3, measure={"max_repeats": 7, "stop_saturated": True})
    targeted = external_spec(tmp_path / "c", "http://127.0.0.1:9", repeats=3, measure=PRECISE)
    cell = plain.cells[0]
    assert plain.cell_fingerprint(cell) == capped.cell_fingerprint(capped.cells[0]) != targeted.cell_fingerprint(targeted.cells[0])


def test_saturation_needs_flat_throughput_and_climbing_ttft():
    rising = {1: {"aggregate_tps": 100, "ttft_s": 0.2}, 2: {"aggregate_tps": 190, "ttft_s": 0.4}}
    flat_fast = {1: {"aggregate_tps": 100, "ttft_s": 0.2}, 2: {"aggregate_tps": 104, "ttft_s": 0.21}}
    queued = {1: {"aggregate_tps": 100, "ttft_s": 0.2}, 2: {"aggregate_tps": 98, "ttft_s": 0.45}}
    assert precision.saturated(rising, 0.1) is None and precision.saturated(flat_fast, 0.1) is None
    assert precision.saturated(queued, 0.1).startswith("over-saturated at c=2: aggregate_tps -2%")
