"""Analyses: the KV-pool audit finds seed 000's x5 on its own and is TP-aware, roofline arithmetic from the
engine's own weight figure, spread and bimodality, speculative value, lookups on the whole cell under a
power-cap sweep, and like-for-like comparison."""

import tempfile
from pathlib import Path

import pandas as pd
import pytest
from helpers import smollm2_metadata_gguf
from paths import ROOT

from stackbench import analysis
from stackbench.analysis import power
from stackbench.engines import ADAPTERS, engine_facts
from stackbench.models import geometry
from stackbench.results import store

with tempfile.TemporaryDirectory() as _tmp:
    SMOLLM2 = geometry.read_geometry(smollm2_metadata_gguf(Path(_tmp)))


@pytest.fixture(scope="module")
def geometries():
    return analysis.load_geometries(ROOT)


def measured(**extra):
    base = {"source": "measured", "ref": "run1", "node": "cpu", "stack": "llamacpp", "engine": None, "variant": "nospec", "spec_method": "none",
            "workload": "code", "concurrency": 1, "metric": "decode_tps", "value": 60.0, "unit": "tok/s", "stat": "median",
            "n": 3, "status": "ok", "model": "smollm2-135m-q4km", "quant": "Q4_K_M", "kv_dtype": "f16", "prompt_tokens": 60,
            "output_tokens": 48, "tp": 1, "engine_version": "b11434"}
    row = {**base, **extra}
    row.setdefault("power_cap_enforced_w", row.get("power_cap_w"))  # a cap applied as asked unless a test says not
    row["engine"] = row["engine"] or ADAPTERS[row["stack"]].engine_label
    return {**engine_facts(row["stack"]), **row}  # what the stack's adapter says about its engine, as RowMaker writes


def server(metric, value, **extra):
    """A launch's start-up fact, as measure.py writes it (workload "server", no concurrency or cap)."""
    return measured(workload="server", concurrency=None, metric=metric, value=value, stat="single", n=1,
                    prompt_tokens=None, output_tokens=None, **extra)


def geometry_rows(geo=SMOLLM2, **extra):
    return [server(r["metric"], r["value"], unit=r["unit"], note=r["note"], **extra) for r in geo.fact_rows()]


def frame(*rows):
    flat = [r for row in rows for r in (row if isinstance(row, list) else [row])]
    return store.to_table(flat).to_pandas()


# -- KV-pool audit ---------------------------------------------------------------------------------------------
def test_kv_audit_flags_seed_000s_misread_draft_depth(published_frame):
    audit = analysis.kv_audit(published_frame)
    before = audit[audit["variant"] == "nextn-3-1-4-unpatched"]
    # SGLang's correct cell size for this pool: 16 KV layers + 1 MTP layer, 4 heads x (256 + 256) x 1 byte (fp8).
    assert len(before) == 2 and set(before["expected_bytes_per_token"]) == {17 * 4 * 512}
    # 163840 / 34816 is the pool's own ratio after the fix, 211357 / 44913: the audit and the post agree.
    assert before["factor"].tolist() == pytest.approx([211357 / 44913] * 2, rel=1e-4)
    assert before["flag"].str.contains("suspect a miscalculation, not a shortage").any()
    assert "mem_free_after_pool_gb=7.9" in set(before["memory_left_free"])
    assert before["expected_basis"].str.contains("1 MTP layer").all()
    assert before["expected_basis"].str.contains("48 recurrent layers").all()
    assert before["geometry_source"].str.contains("only checkable against the seed itself").all()
    after = audit[audit["variant"] == "nextn-3-1-4"]
    assert after["flag"].tolist() == ["ok"]


def test_kv_audit_passes_a_correct_pool_with_geometry_from_the_model_file():
    rows = frame(server("kv_bytes_per_token", 90 * 2**20 / 4096), geometry_rows())  # the real log: 90 MiB for 4096 cells
    audit = analysis.kv_audit(rows)
    assert audit["flag"].tolist() == ["ok"] and audit["expected_bytes_per_token"].tolist() == [30 * 3 * 128 * 2]
    assert audit["geometry_source"].str.match(r"model geometry read from .*\.gguf \(llama\)$").all()


def test_kv_audit_without_geometry_rows_says_so_rather_than_guessing():
    audit = analysis.kv_audit(frame(server("kv_bytes_per_token", 23040.0)))
    assert audit["flag"].tolist() == ["not audited: no geometry rows for this launch"]


@pytest.mark.parametrize("stack,tp,logged", [("sglang", 2, 15360.0), ("vllm", 4, 7680.0), ("llamacpp", 1, 30720.0)])
def test_kv_audit_compares_per_rank_bytes_under_tensor_parallelism(stack, tp, logged):
    """SGLang and vLLM log one rank's KV bytes against the global token count: 1/TP of the model's
    (here 30 layers x 4 KV heads x 128 x 2 bytes = 30720 for the whole model)."""
    four_heads = geometry.Geometry(**{**SMOLLM2.__dict__, "kv_heads": 4})
    rows = frame(server("kv_bytes_per_token", logged, stack=stack, tp=tp), geometry_rows(four_heads, stack=stack, tp=tp))
    audit = analysis.kv_audit(rows)
    assert audit["flag"].tolist() == ["ok"] and audit["factor"].tolist() == pytest.approx([1.0])


def test_kv_audit_replicates_kv_heads_when_tp_exceeds_them():
    """3 KV heads on TP4: each rank keeps one head (max(1, 3 // 4)), not three quarters of one."""
    rows = frame(server("kv_bytes_per_token", 30 * 1 * 128 * 2.0, stack="vllm", tp=4), geometry_rows(stack="vllm", tp=4))
    assert analysis.kv_audit(rows)["factor"].tolist() == pytest.approx([1.0])


def test_kv_audit_basis_counts_the_kv_heads_one_rank_holds():
    """Issue 60: a 4x H100 rehearsal said "one rank of TP4 (0 KV heads split)" for a model with 4 KV heads;
    4 heads over TP4 is 1 per rank, 3 heads over TP4 are replicated (1 each), no geometry is not 0 heads."""
    four_heads = geometry.Geometry(**{**SMOLLM2.__dict__, "kv_heads": 4})
    rows = frame(server("kv_bytes_per_token", 7680.0, stack="vllm", tp=4), geometry_rows(four_heads, stack="vllm", tp=4),
                 server("kv_bytes_per_token", 7680.0, stack="sglang", tp=4), geometry_rows(stack="sglang", tp=4),
                 server("kv_bytes_per_token", 7680.0, stack="sglang", tp=4, ref="run2"))
    basis = analysis.kv_audit(rows).set_index(["stack", "ref"])["expected_basis"]
    assert basis[("vllm", "run1")] == "one rank of TP4 (1 of 4 KV heads)"
    assert basis[("sglang", "run1")] == "one rank of TP4 (1 of 3 KV heads, replicated)"
    assert basis[("sglang", "run2")] == "one rank of TP4 (KV heads unknown)"


def test_measured_rows_never_take_geometry_from_configs_even_when_the_model_name_matches():
    rows = frame(server("kv_bytes_per_token", 34816.0, model="Qwen3.8-27B-INT4", stack="sglang", kv_dtype="fp8"))
    assert analysis.kv_audit(rows)["flag"].tolist() == ["not audited: no geometry rows for this launch"]


def test_kv_audit_reads_llamacpp_mixed_k_and_v_types():
    rows = frame(server("kv_bytes_per_token", 30 * 3 * 64 * (34 / 32 + 2), kv_dtype="K q8_0 / V f16"), geometry_rows())
    assert analysis.kv_audit(rows)["factor"].tolist() == pytest.approx([1.0])


def test_kv_audit_says_what_a_hybrid_model_cannot_compare():
    hybrid = geometry.Geometry(source="config.json", architecture="qwen3_5", layers=64, attention_layers=16, swa_layers=0,
                               linear_layers=48, kv_heads=4, key_length=256, value_length=256, mtp_layers=1)
    rows = frame(server("kv_bytes_per_token", 40000.0, stack="vllm", kv_dtype="fp8", spec_method="mtp"),
                 geometry_rows(hybrid, stack="vllm", kv_dtype="fp8", spec_method="mtp"),
                 server("kv_bytes_per_token", 32768.0, stack="sglang", kv_dtype="fp8"),
                 geometry_rows(hybrid, stack="sglang", kv_dtype="fp8"))
    audit = analysis.kv_audit(rows).set_index("stack")
    assert audit.loc["vllm", "flag"].startswith("not comparable: vLLM's hybrid allocator")
    assert pd.isna(audit.loc["vllm", "factor"])
    assert audit.loc["sglang", "flag"] == "ok" and "48 recurrent layers" in audit.loc["sglang", "expected_basis"]


def test_kv_audit_does_not_compare_a_pool_mixing_window_and_full_layers():
    gemma_like = geometry.Geometry(**{**SMOLLM2.__dict__, "attention_layers": 5, "swa_layers": 25, "sliding_window": 512})
    rows = frame(server("kv_bytes_per_token", 5000.0, stack="sglang"), geometry_rows(gemma_like, stack="sglang"),
                 server("kv_bytes_per_token", 5 * 3 * 128 * 2.0), geometry_rows(gemma_like))
    audit = analysis.kv_audit(rows).set_index("stack")["flag"]
    assert audit["sglang"].startswith("not comparable: the logged KV bytes cover sliding-window")
    assert audit["llamacpp"] == "ok"  # llama.cpp's first KV line is the full-attention pool alone


def test_kv_audit_names_a_dtype_it_cannot_size():
    rows = frame(server("kv_bytes_per_token", 23040.0, stack="vllm", kv_dtype="auto"), geometry_rows(stack="vllm", kv_dtype="auto"))
    assert analysis.kv_audit(rows)["flag"].tolist() == ["not audited: KV dtype auto has no known byte width"]


# -- roofline ----------------------------------------------------------------------------------------------------
def test_roofline_reads_weights_from_the_engine_log_and_bandwidth_from_rows():
    rows = frame(measured(), server("model_mib", 98.87), server("host_mem_bandwidth_gbs", 10.0), geometry_rows())
    roof = analysis.roofline(rows)
    weights, kv = 98.87 * 2**20, 23040 * (60 + 24)
    assert roof["ceiling_tps"].iloc[0] == pytest.approx(10e9 / (weights + kv))
    assert roof["percent_of_ceiling"].iloc[0] == pytest.approx(100 * 60 / (10e9 / (weights + kv)))
    assert roof["weights_from"].iloc[0] == "engine log"


def test_roofline_falls_back_to_the_model_files_tensor_bytes_and_says_so():
    file_geometry = geometry.Geometry(**{**SMOLLM2.__dict__, "weight_bytes": 96576768})
    rows = frame(measured(), server("host_mem_bandwidth_gbs", 10.0), geometry_rows(file_geometry))
    roof = analysis.roofline(rows)
    assert roof["weight_mib_per_device"].iloc[0] == pytest.approx(96576768 / 2**20)
    assert roof["weights_from"].iloc[0].startswith("model file tensor bytes")


def test_roofline_divides_a_per_rank_log_figure_by_nothing_and_a_whole_model_figure_by_tp():
    gpu = dict(node="2gpu", tp=2, kv_dtype="fp8")
    rows = frame(measured(stack="vllm", **gpu), server("model_mib", 9000.0, stack="vllm", **gpu),
                 server("gpu_mem_bandwidth_gbs", 936.0, stack="vllm", **gpu), geometry_rows(stack="vllm", **gpu),
                 measured(stack="llamacpp", **gpu), server("model_mib", 18000.0, stack="llamacpp", **gpu),
                 server("gpu_mem_bandwidth_gbs", 936.0, stack="llamacpp", **gpu), geometry_rows(stack="llamacpp", **gpu))
    roof = analysis.roofline(rows).set_index("stack")
    assert roof.loc["vllm", "weight_mib_per_device"] == roof.loc["llamacpp", "weight_mib_per_device"] == 9000.0


def test_roofline_quant_names_match_exactly_never_by_substring():
    published = [measured(source="published", model="Qwen3.8-27B", quant="BF16 (dequantized from Q4_1 GGUF)", kv_dtype="fp8"),
                 server("gpu_mem_bandwidth_gbs", 936.0, source="published", model="Qwen3.8-27B")]
    # The model's geometry as the collect side writes it for published rows (configs/models)
    rows = frame(published, geometry.published_geometry_rows(published, geometry.load_published_geometries(ROOT)))
    roof = analysis.roofline(rows)
    assert roof["weight_mib_per_device"].iloc[0] == pytest.approx(27e9 * 2 / 2**20)  # 16 bits, not Q4_1's 5
    assert roof["weights_from"].iloc[0] == "parameters x 16 bits (bf16): no weight bytes reported"
    assert analysis.weight_format(pd.Series(["Q4_1", "AWQ W4A16", "q4_k_m-imatrix"])).map(analysis.BITS_PER_WEIGHT).tolist()[:2] == [5.0, 4.25]


def test_roofline_scales_by_the_cells_own_acceptance_and_says_it_ignores_draft_cost():
    launch = [server("model_mib", 98.87, variant="draft-n2", spec_method="draft"),
              server("host_mem_bandwidth_gbs", 10.0, variant="draft-n2", spec_method="draft")]
    rows = frame(measured(variant="draft-n2", spec_method="draft", value=30.0),
                 measured(variant="draft-n2", spec_method="draft", metric="accept_len", value=2.5, unit="ratio"),
                 measured(variant="draft-n2", spec_method="draft", metric="accept_len", value=1.5, unit="ratio", workload="json"),
                 *launch, geometry_rows(variant="draft-n2", spec_method="draft"),
                 measured(), server("model_mib", 98.87), server("host_mem_bandwidth_gbs", 10.0), geometry_rows())
    roof = analysis.roofline(rows).set_index("variant")
    assert roof.loc["draft-n2", "ceiling_tps"] == pytest.approx(roof.loc["nospec", "ceiling_tps"] * 2.5)
    assert "ignores the draft" in roof.loc["draft-n2", "speculative_basis"]


def test_no_bandwidth_row_no_ceiling():
    assert analysis.roofline(frame(measured(), server("model_mib", 98.87), geometry_rows())).empty


# -- whole-cell lookups under a power-cap sweep (issue 12 point 9) ---------------------------------------------------
def cap_sweep():
    """Two caps x two concurrencies, nospec and MTP, with a different acceptance in every cell."""
    rows = []
    for cap, conc, nospec, mtp, accept in [(200.0, 1, 50.0, 80.0, 3.0), (300.0, 1, 60.0, 120.0, 2.0),
                                           (200.0, 2, 45.0, 60.0, 2.5), (300.0, 2, 55.0, 66.0, 1.5)]:
        cell = dict(power_cap_w=cap, concurrency=conc, node="gpu", stack="vllm")
        rows += [measured(value=nospec, **cell), measured(variant="mtp-n2", spec_method="mtp", spec_tokens=2, value=mtp, **cell),
                 measured(variant="mtp-n2", spec_method="mtp", spec_tokens=2, metric="accept_len", value=accept, unit="ratio", **cell)]
    return frame(*rows)


def test_spec_value_by_context_pairs_each_cap_and_concurrency_with_its_own_cells():
    spec = analysis.spec_value_by_context(cap_sweep()).sort_values(["concurrency", "power_cap_w"])
    assert spec[["power_cap_w", "concurrency", "speedup", "accept_len"]].values.tolist() == [
        [200.0, 1, 1.6, 3.0], [300.0, 1, 2.0, 2.0], [200.0, 2, 60 / 45, 2.5], [300.0, 2, 1.2, 1.5]]
    assert all(isinstance(v, float) for v in spec["accept_len"])  # a number per cell, never a Series


def test_spec_value_by_context_pairs_launches_whose_rows_carry_their_own_run_ids():
    # A real run: each launch's rows carry the launch's own ref, so the pair must not be keyed on it.
    rows = cap_sweep()
    rows["ref"] = ["run-" + variant for variant in rows["variant"]]
    assert len(analysis.spec_value_by_context(rows)) == 4


def test_roofline_acceptance_is_the_cells_own_not_a_median_across_caps():
    rows = pd.concat([cap_sweep(), frame(*[server(m, v, node="gpu", stack="vllm", variant=variant, spec_method=method)
                                           for variant, method in (("nospec", "none"), ("mtp-n2", "mtp"))
                                           for m, v in (("model_mib", 98.87), ("gpu_mem_bandwidth_gbs", 936.0))])])
    roof = analysis.roofline(rows)
    spec = roof[roof["variant"] == "mtp-n2"].set_index("power_cap_w")
    assert spec["accept_len"].to_dict() == {200.0: 3.0, 300.0: 2.0}


def test_power_sweet_spot_names_seed_002s_260_watts(published_frame):
    sweet = analysis.power_sweet_spots(published_frame)
    sweep = sweet[sweet["node"] == "2x3090-nvlink"]
    assert sweep["power_cap_w"].tolist() == [180, 220, 260, 300]
    assert sweep.loc[sweep["sweet_spot"] != "", "power_cap_w"].tolist() == [260]
    assert sweep["share_of_best"].round(3).tolist() == [0.365, 0.682, 0.953, 1.0]


def stock_sweep(source="measured", found=450.0):
    """A 2x4090 launch's cells: uncapped (at the limit found at its start) and capped at 250-400 W."""
    cell = dict(source=source, node="2x4090", stack="vllm", gpu_count=2)
    rows = [server("power_limit_found_w", found, unit="W", **cell), server("power_limit_default_w", 450.0, unit="W", **cell)]
    for cap, rate in [(None, 100.0), (250.0, 80.0), (300.0, 90.0), (350.0, 96.0), (400.0, 99.0)]:
        rows.append(measured(power_cap_w=cap, value=rate, **cell))
    return frame(*rows)


def test_the_stock_limit_is_a_cell_of_the_cap_sweep_and_can_be_its_sweet_spot():
    sweet = analysis.power_sweet_spots(stock_sweep())
    assert sweet[["power_cap_w", "limit"]].values.tolist() == [[250.0, "cap"], [300.0, "cap"], [350.0, "cap"],
                                                               [400.0, "cap"], [450.0, "stock"]]
    assert sweet.loc[sweet["sweet_spot"] != "", "power_cap_w"].tolist() == [350.0]  # 96 of the stock 100: within 5%
    no_limit = stock_sweep()
    no_limit = no_limit[~no_limit["metric"].str.startswith("power_limit")]
    assert 450.0 not in analysis.power_sweet_spots(no_limit)["power_cap_w"].tolist()  # no limit recorded: left out


def test_a_part_of_the_results_reads_the_stock_limit_from_the_whole():
    results = stock_sweep()
    cells = results[results["workload"] != "server"]
    sweet = analysis.power_sweet_spots(cells, limits=power.stock_limits(results))
    assert sweet.loc[sweet["limit"] == "stock", "power_cap_w"].tolist() == [450.0]


def test_a_rehearsal_names_no_sweet_spot_and_says_what_the_real_run_compares():
    sweet = analysis.power_sweet_spots(stock_sweep(source="rehearsal"))
    assert "← sweet spot" not in sweet["sweet_spot"].tolist()
    assert sweet.loc[sweet["limit"] == "stock", "sweet_spot"].item() == power.REHEARSAL_SPOT


def test_power_sweet_spot_joins_energy_on_the_whole_cell():
    rows = cap_sweep()
    energy = frame(*[measured(power_cap_w=cap, concurrency=conc, node="gpu", stack="vllm", metric="energy_j_per_token",
                              value=joules, unit="J/token") for cap, conc, joules in [(200.0, 1, 2.0), (300.0, 1, 4.0),
                                                                                    (200.0, 2, 1.0), (300.0, 2, 5.0)]])
    sweet = analysis.power_sweet_spots(pd.concat([rows, energy]))
    nospec = sweet[sweet["variant"] == "nospec"].set_index(["concurrency", "power_cap_w"])["tokens_per_joule"]
    assert nospec.to_dict() == {(1, 200.0): 0.5, (1, 300.0): 0.25, (2, 200.0): 1.0, (2, 300.0): 0.2}


# -- spread, bimodality, comparison ----------------------------------------------------------------------------------
def test_spread_flags_seed_004s_long_profile_peak(published_frame):
    flags = analysis.spread_flags(published_frame)
    peak = flags[(flags["ref"].str.startswith("004_")) & (flags["value"] == 408)]
    assert len(peak) == 1 and peak["why"].iloc[0].startswith("peak 408 is x")
    wide = flags[flags["why"].str.startswith("spread")]
    assert (wide["why"] == "spread 100-135 (x1.35)").any()  # seed 004's 192K profile, single stream
    assert not (wide["value"] == 366).any()  # 358-377 is tight
    assert not (wide["workload"] == "prose-zh").any()  # 77-85 is x1.10


def test_bimodality():
    assert analysis.is_bimodal([101, 99, 103, 280, 287, 300])
    assert not analysis.is_bimodal([101, 99, 103, 105, 98])
    assert not analysis.is_bimodal([100, 101, 408])  # too few repeats to call it


def test_compare_pairs_only_like_rows():
    a = frame(measured(engine_version="b11000", value=50.0), measured(engine_version="b11000", workload="json", value=40.0))
    b = frame(measured(engine_version="b11434", value=60.0), measured(engine_version="b11434", workload="json", value=44.0, kv_dtype="q8_0"),
              measured(engine_version="b11434", workload="prose", value=30.0))
    paired, unpaired = analysis.compare(a, b)
    assert paired[["workload", "B/A"]].values.tolist() == [["code", 1.2]]
    assert sorted(unpaired[["side", "workload", "basis that differs"]].values.tolist()) == [
        ["A", "json", "kv_dtype"], ["B", "json", "kv_dtype"], ["B", "prose", "no counterpart cell"]]


def test_every_analysis_returns_an_empty_frame_when_it_has_nothing_to_say():
    tight = frame(measured(value_min=59.0, value_max=61.0))
    assert analysis.spread_flags(tight).empty and analysis.kv_audit(tight).empty
    assert analysis.power_sweet_spots(tight).empty and analysis.spec_value_by_context(tight).empty
    assert analysis.roofline(tight).empty
