"""What to run for energy: fewest J/token and J/response per concurrency, the cap below which speed falls
faster than power, and the depth x cap table (rows built by hand: test data, not measurements)."""

import pandas as pd
from test_analysis import frame, measured

from stackbench.analysis import energy, power


def cap_cell(variant, cap, rate, watts, j_token, j_response=None, depth=None, concurrency=1, gpus=1):
    """`watts` per GPU; power_w is the node's `gpus` together, as the summary writes them."""
    method = "none" if variant == "nospec" else "draft"
    cell = dict(variant=variant, spec_method=method, spec_tokens=depth, power_cap_w=cap, concurrency=concurrency, gpu_count=gpus)
    rows = [measured(**cell, metric="decode_tps" if concurrency == 1 else "aggregate_tps", value=rate),
            *([measured(**cell, metric="power_w", value=gpus * watts, unit="W"),
               measured(**cell, metric="power_w_per_gpu", value=watts, unit="W")] if watts is not None else []),
            measured(**cell, metric="energy_j_per_token_steady", value=j_token, unit="J/token")]
    if j_response is not None:
        rows.append(measured(**cell, metric="energy_j_per_response_steady", value=j_response, unit="J/response"))
    return rows


NO_FLAGS = pd.DataFrame(columns=["node", "stack", "variant", "flagged"])


def test_the_cap_floor_is_where_speed_starts_falling_faster_than_power():
    # 400 -> 300 W: speed -5%, power -24%; 300 -> 200 W: speed -40%, power -31%: below 300 W it does not pay.
    cells = energy.energy_cells(frame(cap_cell("nospec", 400, 100, 395, 4.0), cap_cell("nospec", 300, 95, 300, 3.2),
                                      cap_cell("nospec", 200, 57, 207, 3.6)), NO_FLAGS)
    floor = energy.cap_floors(cells).iloc[0]
    assert floor["cap_floor_w"] == 300 and "from 300 W to 200 W speed falls 40.0%" in floor["why"]


def test_a_two_gpu_sweep_compares_power_per_gpu_with_the_per_gpu_cap():
    # The 300 W cell has no power reading, so its cap stands in: per GPU, 395 -> 300 W is -24% power against -5%
    # speed, and 300 -> 200 W -31% against -40%. The pair's 790 W against one GPU's 300 W cap read -62%.
    cells = energy.energy_cells(frame(cap_cell("nospec", 400, 100, 395, 4.0, gpus=2), cap_cell("nospec", 300, 95, None, 3.2, gpus=2),
                                      cap_cell("nospec", 200, 57, 207, 3.6, gpus=2)), NO_FLAGS)
    floor = energy.cap_floors(cells).iloc[0]
    assert floor["cap_floor_w"] == 300 and "from 300 W to 200 W speed falls 40.0%, power 31.0%" in floor["why"]


def test_a_sweep_that_never_pays_less_says_it_is_a_lower_bound():
    cells = energy.energy_cells(frame(cap_cell("nospec", 400, 100, 395, 4.0), cap_cell("nospec", 300, 95, 300, 3.2)), NO_FLAGS)
    floor = energy.cap_floors(cells).iloc[0]
    assert floor["cap_floor_w"] == 300 and floor["why"].startswith("lower bound")


def test_fewest_joules_per_token_and_per_response_are_named_per_concurrency_without_flagged_variants():
    rows = frame(cap_cell("nospec", 400, 100, 395, 4.0, 240), cap_cell("nospec", 300, 95, 300, 3.2, 200),
                 cap_cell("draft-n2", 300, 130, 310, 2.5, 150, depth=2), cap_cell("draft-n4", 300, 160, 320, 2.0, 120, depth=4))
    flags = pd.DataFrame([{"node": "cpu", "stack": "llamacpp", "variant": "draft-n4", "flagged": True}])
    best = energy.fewest_joules(energy.energy_cells(rows, flags)).iloc[0]
    assert best["fewest J/token"] == "llamacpp / draft-n2 @ 300 W" and best["J/token"] == 2.5
    assert best["fewest J/response"] == "llamacpp / draft-n2 @ 300 W" and best["J/response"] == 150


def test_depth_by_cap_renders_where_both_are_swept_and_not_otherwise():
    rows = frame(cap_cell("nospec", 400, 100, 395, 4.0), cap_cell("nospec", 300, 95, 300, 3.2),
                 cap_cell("draft-n2", 400, 140, 400, 2.9, depth=2), cap_cell("draft-n2", 300, 120, 305, 2.6, depth=2))
    table = energy.depth_by_cap(energy.energy_cells(rows, NO_FLAGS))
    assert list(table.columns) == ["node", "stack", "workload", "concurrency", "depth", "400 W", "300 W"]
    assert table.set_index("depth").loc[2, "300 W"] == "120 tok/s, 2.6 J/token"
    only_caps = frame(cap_cell("nospec", 400, 100, 395, 4.0), cap_cell("nospec", 300, 95, 300, 3.2))
    assert energy.depth_by_cap(energy.energy_cells(only_caps, NO_FLAGS)).empty


def test_a_slowed_cell_is_out_of_the_energy_choice_and_the_power_sweet_spot():
    from stackbench.analysis import power

    slow = measured(variant="nospec", spec_method="none", power_cap_w=200, metric="clock_event_share_hw_slowdown",
                    value=0.5, unit="ratio", stat="single")
    rows = frame(cap_cell("nospec", 400, 100, 395, 4.0), cap_cell("nospec", 300, 97, 300, 3.2),
                 cap_cell("nospec", 200, 99, 200, 2.0), slow)  # the throttled 200 W cell looks best on both
    cells = energy.energy_cells(rows, NO_FLAGS)
    assert sorted(cells["power_cap_w"]) == [300, 400]
    spots = power.power_sweet_spots(rows)
    assert 200 not in set(spots["power_cap_w"]) and spots.loc[spots["sweet_spot"] != "", "power_cap_w"].tolist() == [300]
def refused(rows: list[dict]) -> list[dict]:
    """The same cells where NVML refused the cap (no root): the request kept, nothing enforced, the note says why."""
    return [dict(r, power_cap_enforced_w=None, note="power cap not applied: NVML: Insufficient Permissions") for r in rows]


def test_caps_that_were_not_applied_name_no_sweet_spot_floor_or_depth_by_cap():
    """A user without root asks for 400/300/200 W; the GPU ran at stock power throughout. Analysed on the
    requests, the sweep would name a sweet spot and a floor; analysed on what was enforced, it has no caps."""
    rows = [cap_cell("nospec", cap, rate, 395, 4.0) for cap, rate in ((400, 100), (300, 95), (200, 57))]
    rows += [cap_cell("draft-n2", cap, rate, 395, 4.0, depth=2) for cap, rate in ((400, 120), (300, 110))]
    applied = frame(*rows)
    assert len(power.power_sweet_spots(applied)) and len(energy.cap_floors(energy.energy_cells(applied, NO_FLAGS)))
    assert len(energy.depth_by_cap(energy.energy_cells(applied, NO_FLAGS)))
    not_applied = frame(*[refused(r) for r in rows])
    assert power.power_sweet_spots(not_applied).empty
    cells = energy.energy_cells(not_applied, NO_FLAGS)
    assert cells["power_cap_w"].isna().all()  # analysed as uncapped
    assert energy.cap_floors(cells).empty and energy.depth_by_cap(cells).empty
    assert set(energy.fewest_joules(cells)["fewest J/token"].str.endswith("@ uncapped")) == {True}


def test_a_partly_refused_sweep_reads_only_the_caps_applied():
    """400 W was above the card's maximum (refused), 300 and 200 W applied: the sweep runs 300 -> 200 only."""
    rows = refused(cap_cell("nospec", 400, 100, 395, 4.0)) + cap_cell("nospec", 300, 95, 300, 3.2) + cap_cell("nospec", 200, 57, 205, 3.6)
    floor = energy.cap_floors(energy.energy_cells(frame(rows), NO_FLAGS)).iloc[0]
    assert floor["cap_floor_w"] == 300 and "from 300 W to 200 W" in floor["why"]


def test_the_run_states_the_energy_its_cells_used_from_the_energy_counters_joules():
    """Issue 67: each cell's energy_j_per_token x its n (the window's output tokens) is the NVML counter's delta over
    the window; summed over every cell, launch and round: 2 J x 900,000 + 1.5 J x 1,200,000 = 3.6 MJ = 1 kWh."""
    rows = frame(measured(metric="energy_j_per_token", value=2.0, n=900_000, unit="J/token"),
                 measured(ref="run2", replicate=2, metric="energy_j_per_token", value=1.5, n=1_200_000, unit="J/token"),
                 measured(workload="prose", metric="energy_j_per_token", value=None, n=None, status="failed", unit="J/token"),
                 measured(node="other", source="rehearsal", metric="energy_j_per_token", value=1.0, n=360_000, unit="J/token"))
    measured_line, rehearsal_line = energy.run_energy_lines(rows)
    assert measured_line.startswith("Energy the run used on cpu: 1 kWh over the measured windows of 2 cells")
    assert "nvmlDeviceGetTotalEnergyConsumption deltas in mJ" in measured_line
    assert rehearsal_line.startswith("Energy the run used on other: 0.1 kWh") and "not a measurement" in rehearsal_line
