"""Issue 67 item 3: whether a cap is swept is decided once per launch configuration and cell, and every round keeps it."""

import dataclasses
from types import SimpleNamespace

import pytest
from paths import ROOT

from stackbench.measure import sequencer
from stackbench.measure.cellstore import CellStore
from stackbench.plan import expand, launchspec


@pytest.fixture(scope="module")
def plan():
    cfg, (node,) = expand.load_plan(ROOT, {"nodes": ["2x3090-nvlink"]})
    (launch,) = [l for l in node.launches if l.power_caps_w]  # 180/220/260/300 W
    return cfg, node, launch


def round_of(plan, replicate: int, runs):
    """Round `replicate` of the capped launch: its own run folder and cell store under the node's runs folder."""
    cfg, node, launch = plan
    launch = dataclasses.replace(launch, replicate=replicate)
    spec = launchspec.build(cfg, node, launch)
    run = SimpleNamespace(spec=spec, launch=launch, out_dir=runs / launch.name, store=CellStore(spec, runs / launch.name))
    run._cap_above_draw = lambda cell: sequencer.LaunchRun._cap_above_draw(run, cell)
    return run


def caps_of(run):
    stock = next(c for c in run.spec.cells if c.power_cap_w is None and c.concurrency == 1 and c.workload.kind == "single")
    return stock, {c.power_cap_w: c for c in run.spec.cells if c.power_cap_w and (c.workload, c.concurrency) == (stock.workload, 1)}


def measure_stock(run, draw_w: float):
    stock, _ = caps_of(run)
    run.store.write(stock, [{"metric": "power_w_per_gpu", "value": draw_w, "status": "ok"}], [])


def swept(run) -> dict[float, bool]:
    _, capped = caps_of(run)
    return {cap: sequencer.LaunchRun._not_swept(run, cell) is None for cap, cell in capped.items()}


def test_a_cap_is_decided_by_the_first_round_and_kept_in_every_later_round(plan, tmp_path):
    """Round 1's stock cell drew 240 W: caps up to 15% above it are swept, 300 W is not. Round 2's stock cell drew
    290 W and round 3's 200 W (a draw near a cap moves between rounds): each keeps round 1's verdict, so every capped
    cell is measured in every round or in none, and pairs in each (the old code decided afresh: 300 W swept in round 2,
    220/260 W not in round 3)."""
    first = round_of(plan, 1, tmp_path)
    measure_stock(first, 240.0)
    assert swept(first) == {180: True, 220: True, 260: True, 300: False}
    for replicate, draw in ((2, 290.0), (3, 200.0)):
        later = round_of(plan, replicate, tmp_path)
        measure_stock(later, draw)
        assert swept(later) == swept(first)
    kept = sequencer.caps_decided(first.out_dir, first.launch)
    assert kept.parent == first.out_dir and kept.exists()
    why = sequencer.LaunchRun._not_swept(round_of(plan, 3, tmp_path), caps_of(first)[1][300])
    assert "240 W" in why and f"decided in {first.launch.name}, kept in every round" in why


def test_a_cap_within_the_margin_above_the_draw_is_still_swept(plan, tmp_path):
    """A transient above the mean can bind a cap just over it: 260 W over a 240 W mean draw (8% above) is swept; a
    cap CAP_BIND_MARGIN or more above the draw is not."""
    run = round_of(plan, 1, tmp_path)
    measure_stock(run, 240.0)
    _, capped = caps_of(run)
    assert sequencer.LaunchRun._cap_above_draw(run, capped[260]) is None
    assert 300 >= 240 * (1 + sequencer.CAP_BIND_MARGIN) and sequencer.LaunchRun._cap_above_draw(run, capped[300])


def test_no_stock_draw_in_the_first_round_sweeps_the_cap_in_every_round(plan, tmp_path):
    """Round 1 had no draw to compare (no telemetry, a failed stock cell): the caps are swept, and stay swept in a
    round whose stock cell did draw below them."""
    first = round_of(plan, 1, tmp_path)
    assert all(swept(first).values())
    later = round_of(plan, 2, tmp_path)
    measure_stock(later, 100.0)
    assert all(swept(later).values())
