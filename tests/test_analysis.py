"""Analyses: the KV-pool audit finds seed 000's x5 on its own, roofline arithmetic, spread and bimodality,
speculative value, and like-for-like comparison."""

from pathlib import Path

import pytest

from stackbench import analysis, store

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def geometries():
    return analysis.load_geometries(ROOT)


def measured(**extra):
    base = {"source": "measured", "ref": "run1", "node": "cpu", "stack": "llamacpp", "variant": "nospec", "spec_method": "none",
            "workload": "code", "concurrency": 1, "metric": "decode_tps", "value": 60.0, "unit": "tok/s", "stat": "median",
            "n": 3, "status": "ok", "model": "smollm2-135m-q4km", "quant": "Q4_K_M", "kv_dtype": "f16", "prompt_tokens": 60,
            "output_tokens": 48, "tp": 1, "engine_version": "b11434"}
    return {**base, **extra}


def frame(*rows):
    return store.to_table(list(rows)).to_pandas()


def test_kv_audit_flags_seed_000s_misread_draft_depth(published_frame, geometries):
    audit = analysis.kv_audit(published_frame, geometries)
    before = audit[audit["variant"] == "nextn-3-1-4-unpatched"]
    assert len(before) == 2 and (before["factor"] == 5).all()
    assert set(before["expected_bytes_per_token"]) == {32768}
    assert before["flag"].str.contains("suspect a miscalculation, not a shortage").all()
    assert "mem_free_after_pool_gb=7.9" in set(before["memory_left_free"])
    after = audit[audit["variant"] == "nextn-3-1-4"]
    assert after["flag"].tolist() == ["ok"]


def test_kv_audit_passes_a_correct_pool(geometries):
    rows = frame(measured(metric="kv_bytes_per_token", value=23040.0, unit="B", workload="server"))
    assert analysis.kv_audit(rows, geometries)["flag"].tolist() == ["ok"]  # 30 x 3 x 64 x 2 x 2 bytes


def test_roofline_arithmetic(geometries):
    rows = frame(measured())
    roof = analysis.roofline(rows, {"cpu": 10.0}, geometries)
    weights = 0.13452e9 * 4.85 / 8
    kv = 23040 * (60 + 24)
    assert roof["ceiling_tps"].iloc[0] == pytest.approx(10e9 / (weights + kv))
    assert roof["percent_of_ceiling"].iloc[0] == pytest.approx(100 * 60 / (10e9 / (weights + kv)))


def test_roofline_scales_by_acceptance_for_speculative_rows(geometries):
    rows = frame(measured(variant="draft-n2", spec_method="draft", value=30.0),
                 measured(variant="draft-n2", spec_method="draft", metric="accept_len", value=2.5, unit="ratio"))
    nospec = analysis.roofline(frame(measured()), {"cpu": 10.0}, geometries)["ceiling_tps"].iloc[0]
    assert analysis.roofline(rows, {"cpu": 10.0}, geometries)["ceiling_tps"].iloc[0] == pytest.approx(nospec * 2.5)


def test_no_bandwidth_no_ceiling(geometries):
    assert analysis.roofline(frame(measured()), {}, geometries).empty


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


def test_spec_value_by_context():
    rows = frame(measured(value=60.0), measured(variant="draft-n2", spec_method="draft", value=30.0),
                 measured(variant="draft-n2", spec_method="draft", metric="accept_len", value=2.6, unit="ratio"))
    spec = analysis.spec_value_by_context(rows)
    assert spec[["variant", "speedup", "accept_len"]].values.tolist() == [["draft-n2", 0.5, 2.6]]


def test_compare_pairs_only_like_rows():
    a = frame(measured(engine_version="b11000", value=50.0), measured(engine_version="b11000", workload="json", value=40.0))
    b = frame(measured(engine_version="b11434", value=60.0), measured(engine_version="b11434", workload="json", value=44.0, kv_dtype="q8_0"))
    paired, unpaired = analysis.compare(a, b)
    assert paired[["workload", "B/A"]].values.tolist() == [["code", 1.2]]
    assert set(unpaired["side"]) == {"A", "B"} and set(unpaired["basis that differs"]) == {"kv_dtype"}


def test_power_sweet_spot_names_seed_002s_260_watts(published_frame):
    sweet = analysis.power_sweet_spots(published_frame)
    sweep = sweet[sweet["node"] == "2x3090-nvlink"]
    assert sweep["power_cap_w"].tolist() == [180, 220, 260, 300]
    assert sweep.loc[sweep["sweet_spot"] != "", "power_cap_w"].tolist() == [260]
    assert sweep["share_of_best"].round(3).tolist() == [0.365, 0.682, 0.953, 1.0]
