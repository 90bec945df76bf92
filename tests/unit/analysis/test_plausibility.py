"""Plausibility checks (analysis/plausibility.py): each flags a physically impossible figure with its reason on
every row of the cell, leaves honest rows alone, and a flagged cell is never chosen in What to run."""

import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_analysis import frame, geometry_rows, measured, server
from test_decide import agreement, cell

from stackbench.analysis import decide, plausibility

CEILING = 10e9 / (98.87 * 2**20 + 23040 * (60 + 24))  # test_analysis: 10 GB/s over the engine log's weights + KV


def launch(variant="nospec", depth=None, **extra):
    """A launch's facts the roofline reads: weights from the log, host bandwidth, the model file's geometry."""
    spec = {"variant": variant, "spec_method": "none" if variant == "nospec" else "draft", "spec_tokens": depth,
            "ref": f"run1/{variant}", **extra}
    return [server("model_mib", 98.87, **spec), server("host_mem_bandwidth_gbs", 10.0, **spec), *geometry_rows(**spec)]


def flagged(rows):
    results = frame(*rows)
    return results.assign(implausible=plausibility.flag(results))


def test_decode_5x_over_its_roofline_is_flagged_on_every_row_of_the_cell():
    results = flagged([launch(), measured(ref="run1/nospec", value=5 * CEILING),
                       measured(ref="run1/nospec", metric="ttft_s", value=0.1, unit="s")])
    cell_rows = results[results["workload"] == "code"]
    assert cell_rows["implausible"].str.contains("5.0x its weight-read roofline").all()
    assert results.loc[results["workload"] == "server", "implausible"].isna().all()


def test_decode_under_its_roofline_is_not_flagged():
    results = flagged([launch(), measured(ref="run1/nospec", value=0.9 * CEILING)])
    assert results["implausible"].isna().all()


def test_a_speculative_row_without_acceptance_may_reach_depth_plus_one_times_the_ceiling():
    ok = flagged([launch("draft-n4", 4), measured(ref="run1/draft-n4", variant="draft-n4", spec_method="draft",
                                                  spec_tokens=4, value=4 * CEILING)])
    assert ok["implausible"].isna().all()
    over = flagged([launch("draft-n4", 4), measured(ref="run1/draft-n4", variant="draft-n4", spec_method="draft",
                                                    spec_tokens=4, value=7 * CEILING)])
    assert over["implausible"].notna().any()


def test_acceptance_above_depth_plus_one():
    results = flagged([measured(variant="draft-n2", spec_method="draft", spec_tokens=2, metric="accept_len", value=3.4,
                                unit="tokens"),
                       measured(variant="draft-n4", spec_method="draft", spec_tokens=4, metric="accept_len", value=3.4,
                                unit="tokens")])
    by_variant = results.set_index("variant")["implausible"]
    assert by_variant["draft-n2"] == "acceptance length 3.4 above speculative depth 2 + 1"
    assert by_variant["draft-n4"] is None


def test_power_above_the_limit_the_gpu_ran_under():
    gpu = {"gpu": "RTX 5090", "gpu_count": 1}
    results = flagged([server("power_limit_found_w", 575.0, **gpu),
                       measured(metric="power_w", value=700.0, unit="W", stat="mean", **gpu),
                       measured(workload="prose", metric="power_w", value=500.0, unit="W", stat="mean", **gpu),
                       measured(workload="json", power_cap_w=260.0, metric="power_w", value=320.0, unit="W", stat="mean", **gpu)])
    why = results.set_index("workload")["implausible"]
    assert why["code"] == "power 700 W per GPU above the GPU's limit 575 W"
    assert why["prose"] is None
    assert why["json"] == "power 320 W per GPU above the GPU's limit 260 W"


# A cell as the 2x3090-nvlink and 4xa6000-tp2 rehearsals write it: two GPUs, the per-GPU cap enforced on each,
# power_w the pair's sum (about twice the cap), power_w_per_gpu the busiest GPU's own mean.
@pytest.mark.parametrize("gpu,limit", [("NVIDIA GeForce RTX 3090", 350.0), ("NVIDIA RTX A6000", 300.0)])
@pytest.mark.parametrize("cap", [None, 250.0])
def test_a_two_gpu_cell_under_its_per_gpu_cap_is_judged(gpu, limit, cap):
    facts = {"gpu": gpu, "gpu_count": 2, "tp": 2, "power_cap_w": cap}
    each = 0.9 * (cap or limit)
    results = flagged([server("power_limit_found_w", limit, gpu=gpu, gpu_count=2, tp=2),
                       measured(metric="power_w", value=2 * each, unit="W", stat="mean", **facts),
                       measured(metric="power_w_per_gpu", value=each, unit="W", stat="mean", **facts),
                       measured(**facts)])
    assert results["implausible"].isna().all()


def test_a_two_gpu_sum_without_a_per_gpu_row_is_divided_by_the_gpu_count():
    facts = {"gpu": "NVIDIA GeForce RTX 3090", "gpu_count": 2}
    under = flagged([server("power_limit_found_w", 350.0, **facts),
                     measured(metric="power_w", value=640.0, unit="W", stat="mean", **facts)])
    assert under["implausible"].isna().all()
    over = flagged([server("power_limit_found_w", 350.0, **facts),
                    measured(metric="power_w", value=900.0, unit="W", stat="mean", **facts)])
    assert over.loc[over["metric"] == "power_w", "implausible"].item() == \
        "power 450 W per GPU (900 W over 2 GPUs) above the GPU's limit 350 W"


def test_one_gpu_over_its_cap_is_flagged_though_the_pair_averages_under_it():
    facts = {"gpu": "NVIDIA RTX A6000", "gpu_count": 2, "power_cap_w": 200.0}
    results = flagged([server("power_limit_found_w", 300.0, gpu="NVIDIA RTX A6000", gpu_count=2),
                       measured(metric="power_w", value=400.0, unit="W", stat="mean", **facts),
                       measured(metric="power_w_per_gpu", value=260.0, unit="W", stat="mean", **facts)])
    assert results["implausible"].dropna().unique().tolist() == ["power 260 W per GPU above the GPU's limit 200 W"]


def test_energy_per_token_below_what_power_and_rate_allow():
    rows = [measured(metric="power_w", value=300.0, unit="W", stat="mean"), measured(value=100.0),
            measured(metric="aggregate_tps", value=95.0),
            measured(metric="energy_j_per_token", value=0.5, unit="J/token")]  # 300 W / 100 tok/s = 3 J/token at best
    why = flagged(rows)["implausible"]
    assert why.str.contains("energy 0.5 J/token below what 300 W at 100 tok/s allows").all()
    honest = flagged([*rows[:3], measured(metric="energy_j_per_token", value=3.2, unit="J/token")])
    assert honest["implausible"].isna().all()


def test_aggregate_below_one_streams_decode_at_the_same_cell():
    results = flagged([measured(concurrency=2, value=40.0), measured(concurrency=2, metric="aggregate_tps", value=30.0),
                       measured(concurrency=4, value=40.0), measured(concurrency=4, metric="aggregate_tps", value=150.0)])
    why = results.groupby("concurrency")["implausible"].first()
    assert "aggregate 30 tok/s over 2 streams below one stream's decode 40 tok/s" == why[2]
    assert why[4] is None


def test_an_aggregate_whose_window_is_mostly_prefill_is_judged_against_a_streams_whole_request():
    """Issue 66: the default's public-set prompts (250-600 tokens) take 1-2 s of prefill on one core before 48 tokens
    at 40 tok/s, so two streams' aggregate (28 tok/s, TTFT inside its window) fell below one stream's decode rate and
    every c2 cell was implausible. Against one stream's whole request (48 / (1.5 + 48 / 40) = 17.8 tok/s) it is not;
    an aggregate below even that still is."""
    cell = {"concurrency": 2, "output_tokens": 48}
    rows = [measured(value=40.0, **cell), measured(metric="ttft_s", value=1.5, unit="s", **cell)]
    plausible = flagged([*rows, measured(metric="aggregate_tps", value=28.0, **cell)])
    assert plausible["implausible"].isna().all()
    low = flagged([*rows, measured(metric="aggregate_tps", value=12.0, **cell)])
    assert low["implausible"].iloc[0] == ("aggregate 12 tok/s over 2 streams below one stream's 17.78 tok/s over a whole "
                                          "request (decode 40 tok/s, TTFT 1.5 s)")


def test_a_doctored_row_5x_over_its_roofline_is_kept_out_of_what_to_run():
    facts = [fact for k in (1, 2, 3) for fact in [*launch(ref=f"run1/nospec--r{k}", replicate=k),
                                                  *launch("draft-n2", 2, ref=f"run1/draft-n2--r{k}", replicate=k)]]
    rows = [cell("nospec", 60, 0.5, 1), cell("draft-n2", 5 * CEILING, 1, 2, 2), *facts]
    results = flagged(rows)
    correctness = pd.DataFrame([agreement("draft-n2")], columns=["node", "stack", "variant", "first_divergence_token", "length_off_in"])
    table = decide.what_to_run(results, correctness)
    row = table.iloc[0]
    assert row["run"] == "no-spec"
    assert "draft-n2 (round 1: implausible: decode" in row["excluded"]
    # Without the check the doctored variant wins: the exclusion is the plausibility flag's doing.
    assert decide.what_to_run(results.assign(implausible=None), correctness).iloc[0]["run"] == "draft-n2"


@pytest.mark.parametrize("check", plausibility.CHECKS)
def test_each_check_passes_an_empty_or_unrelated_table(check):
    assert check(frame(measured(metric="ttft_s", value=0.2, unit="s"))).empty


def test_a_doctored_bundle_row_is_flagged_when_it_comes_in(tmp_path):
    from helpers import collect_results

    from stackbench.plan.definitions import DEFINITIONS
    from stackbench.results import bundle, store

    theirs = frame(*launch(), measured(ref="run1/nospec", value=5 * CEILING))
    out = bundle.write(tmp_path / "eve.stackbench.tar", theirs, {}, {"owner": "eve", "node": "cpu", "definitions": DEFINITIONS})
    ours = tmp_path / "ours.parquet"
    store.atomic_write_parquet(store.to_table([measured(node="mine", ref="mine/nospec")]), ours)
    results = tmp_path / "results.parquet"
    collect_results([str(ours)], results, bundles=[str(out)])
    got = store.read_results(results)
    doctored = got[(got["source"] == "bundle:eve") & (got["metric"] == "decode_tps")]
    assert doctored["implausible"].str.contains("5.0x its weight-read roofline").all()
    assert got.loc[got["source"] == "measured", "implausible"].isna().all()


def test_flag_table_is_flag_over_the_whole_table_in_row_order():
    """store.collect's check (flag_table, Arrow in and out, the checks' rows and columns alone) gives what the checks
    over the whole frame give, joined back on every row of each cell, nulls in the cell's keys matching."""
    from stackbench.analysis.common import CELL
    from stackbench.results import store

    gpu = {"gpu": "RTX 5090", "gpu_count": 1}
    rows = [*launch(), measured(ref="run1/nospec", value=5 * CEILING),
            measured(ref="run1/nospec", metric="ttft_s", value=0.1, unit="s"),
            measured(variant="draft-n2", spec_method="draft", spec_tokens=2, metric="accept_len", value=3.4, unit="tokens"),
            measured(variant="draft-n2", spec_method="draft", spec_tokens=2, metric="e2e_s", value=3.0, unit="s"),
            server("power_limit_found_w", 575.0, **gpu), measured(metric="power_w", value=700.0, unit="W", stat="mean", **gpu),
            measured(workload="json", power_cap_w=260.0, metric="power_w", value=320.0, unit="W", stat="mean", **gpu),
            measured(workload="json", power_cap_w=260.0, metric="vram_mib", value=3.0, unit="MiB", **gpu),
            measured(workload="prose", metric="power_w", value=300.0, unit="W", stat="mean"),
            measured(workload="prose", value=100.0), measured(workload="prose", metric="aggregate_tps", value=95.0),
            measured(workload="prose", metric="energy_j_per_token", value=0.5, unit="J/token"),
            measured(workload="chat", concurrency=2, value=40.0), measured(workload="chat", concurrency=2, metric="aggregate_tps", value=30.0),
            measured(workload="chat", concurrency=2, metric="ttft_s", value=0.3, unit="s"),
            measured(workload="chat", concurrency=4, value=40.0), measured(workload="chat", concurrency=4, metric="aggregate_tps", value=150.0)]
    rows = rows[1::2] + rows[::2]  # the cells' rows interleaved
    results = frame(*rows)
    whole = results[CELL].merge(plausibility.findings(results), on=CELL, how="left")["reason"]
    expected = [r if isinstance(r, str) else None for r in whole]
    assert sum(r is not None for r in expected) >= 10
    assert plausibility.flag(results).tolist() == expected
    assert plausibility.flag_table(store.to_table(results)).to_pylist() == expected


@pytest.mark.parametrize("node_gpu,cap", [("NVIDIA GeForce RTX 3090", 180.0), ("NVIDIA GeForce RTX 3090", None),
                                          ("NVIDIA RTX A6000", None)])
def test_a_rehearsals_two_gpu_window_is_judged_not_excluded(tmp_path, node_gpu, cap):
    """The 2x3090-nvlink and 4xa6000-tp2 rehearsals' telemetry, end to end: two simulated GPUs each drawing
    min(cap, 90% of board power) under a stand-in's full load, sampled, summed and per GPU (measure/summary.py),
    then checked: judged."""
    from stackbench.host import powercap, telemetry
    from stackbench.measure import summary
    from stackbench.rehearsal import simgpu

    now = [0.0]
    host = simgpu.simulated_host(node_gpu, 2, 24, tmp_path / "gpus.json")
    host.clock = lambda: now[0]
    host.report_load([0, 1], host.demand_mw)  # a stand-in's prefill on both: each at its full demand
    gpus, _ = telemetry.open_gpus(2, host)
    with powercap.PowerCapper(gpus, state_dir=tmp_path, settle_s=0, sleep=lambda s: None) as capper:
        if cap:
            capper.apply(cap)
        sampler = telemetry.Sampler(gpus, clock=lambda: now[0])
        window = sampler.open_window()
        for step in range(1, 21):
            now[0] = step * 0.5
            sampler.take()
        reading = sampler.close_window(window)
    figures = {f.metric: f for f in summary.telemetry_figures(reading, output_tokens=600)}  # 10 s at 60 tok/s
    limit = cap or simgpu.board_power_w(node_gpu)
    assert figures["power_w"].value > 1.5 * limit  # the pair's sum: what every cell was excluded on before
    facts = {"gpu": node_gpu, "gpu_count": 2, "tp": 2, "power_cap_w": cap}
    rows = [server("power_limit_found_w", simgpu.board_power_w(node_gpu), gpu=node_gpu, gpu_count=2, tp=2),
            measured(**facts)] + [measured(metric=f.metric, value=f.value, unit=f.unit, stat=f.stat, **facts)
                                  for f in figures.values() if f.value is not None]
    assert flagged(rows)["implausible"].isna().all()


def test_a_ladder_point_is_judged_against_its_own_power_and_rate():
    """A context ladder's points share one cell identity. Issue 60: once the simulated draw followed the load, each
    short point's energy was compared with the median power of the long points (their prefill): "energy 9.5 J/token
    below what 2480 W at 129 tok/s allows" for a 1,024-token point that drew 280 W."""
    points = [(1024, 280.0, 135.0, 9.5), (32609, 2480.0, 129.0, 89.9), (126345, 2480.0, 94.0, 454.0)]
    rows = [measured(workload="context-ladder", prompt_tokens=prompt, metric=metric, value=value, unit=unit, stat=stat)
            for prompt, power, decode, energy in points
            for metric, value, unit, stat in (("power_w", power, "W", "mean"), ("decode_tps", decode, "tok/s", "median"),
                                              ("energy_j_per_token", energy, "J/token", "mean"))]
    assert flagged(rows)["implausible"].isna().all()
    doctored = [dict(r, value=0.5) if r["metric"] == "energy_j_per_token" and r["prompt_tokens"] == 1024 else r for r in rows]
    assert flagged(doctored)["implausible"].dropna().str.startswith("energy 0.5 J/token below what 280 W").all()


# -- issue 67: a speed-up its acceptance cannot explain, and per-stream decode flat with concurrency -------------------
def says(flags, text: str) -> bool:
    """Every row of the cell flagged, each reason holding `text` (pandas' str.contains skips a None)."""
    return len(flags) > 0 and all(isinstance(f, str) and text in f for f in flags)


def spec_pair(spec_decode, accept=None, metric="decode_tps", nospec=76.2, concurrency=1, source="measured"):
    """llama.cpp no-spec and MTP n=3 at one load, the speculative cell with its acceptance length where given."""
    spec = {"variant": "mtp-n3", "spec_method": "mtp", "spec_tokens": 3, "ref": "run1/mtp-n3"}
    rows = [measured(source=source, ref="run1/nospec", metric=metric, value=nospec, concurrency=concurrency),
            measured(source=source, metric=metric, value=spec_decode, concurrency=concurrency, **spec)]
    if accept is not None:
        rows.append(measured(source=source, metric="accept_len", value=accept, unit="tokens", concurrency=concurrency, **spec))
    return flagged(rows)


def test_a_speculative_speed_up_above_its_acceptance_length_is_flagged():
    """The issue's llama.cpp MTP n=3: 181 against no-spec's 76.2 tok/s (2.4x). At an acceptance length of 1.5 a
    verification step emits 1.5 tokens on average and costs at least a decode step: 2.4x cannot be explained."""
    results = spec_pair(181.0, accept=1.5)
    said = results.loc[results["variant"] == "mtp-n3", "implausible"]
    assert says(said, "2.38x the no-spec cell's 76.2, above what acceptance length 1.5 explains")
    assert results.loc[results["variant"] == "nospec", "implausible"].isna().all()


def test_a_speed_up_its_acceptance_explains_is_not_flagged_and_without_one_depth_plus_one_bounds_it():
    assert spec_pair(181.0, accept=2.6)["implausible"].isna().all()  # 2.38x <= 1.25 x 2.6
    assert spec_pair(181.0)["implausible"].isna().all()  # no acceptance: at most 4 tokens a step
    over = spec_pair(400.0)  # 5.2x: more than depth + 1 tokens a step
    assert says(over.loc[over["variant"] == "mtp-n3", "implausible"], "depth + 1 (no acceptance reported)")


def test_an_aggregate_speed_up_at_many_streams_is_bounded_the_same_way():
    results = spec_pair(5332.0, accept=1.5, metric="aggregate_tps", nospec=2373.0, concurrency=32)
    assert says(results.loc[results["variant"] == "mtp-n3", "implausible"], "aggregate_tps 5332 is 2.25x")


def per_stream(values, source="rehearsal"):
    return flagged([measured(source=source, concurrency=c, value=v) for c, v in values.items()])


def test_per_stream_decode_flat_with_concurrency_is_flagged_in_a_rehearsal_only():
    """The issue's stand-in: 76.5 / 76.0 / 76.3 tok/s per stream at c1 / c8 / c32."""
    flat = per_stream({1: 76.5, 8: 76.0, 32: 76.3})
    by_streams = flat.set_index("concurrency")["implausible"]
    assert by_streams[1] is None and "does not fall with concurrency" in by_streams[8]
    assert "per-stream decode 76.3 tok/s at 32 streams is 100% of one stream's 76.5 tok/s" in by_streams[32]
    assert per_stream({1: 76.5, 8: 76.0, 32: 76.3}, source="measured")["implausible"].isna().all()
    assert per_stream({1: 76.5, 8: 60.0, 32: 41.0})["implausible"].isna().all()  # falling as batching does


@settings(max_examples=25, deadline=None)
@given(nospec=st.floats(5, 500), accept=st.floats(1, 4), speedup=st.floats(0.5, 6))
def test_a_speed_up_is_flagged_exactly_where_it_passes_the_margin_over_its_acceptance(nospec, accept, speedup):
    assume(abs(speedup - plausibility.SPEEDUP_MARGIN * accept) > 1e-6)
    results = spec_pair(nospec * speedup, accept=accept, nospec=nospec)
    flags = results.loc[results["variant"] == "mtp-n3", "implausible"]
    assert says(flags, "explains") == (speedup > plausibility.SPEEDUP_MARGIN * accept)
