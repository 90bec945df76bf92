"""Analyses the seed posts did by hand, done on every row: decode roofline, KV-pool audit, spread and
bimodality, speculative value against context, and like-for-like comparison of two result sets.

Pure functions over the results table (pandas), so they run the same on measured and published rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .config import load_file
from .store import BASIS_COLUMNS

# Bits per weight of common quantizations (llama.cpp's own figures for GGUF types; group-wise INT4/AWQ
# with group 128 carries a 16-bit scale and zero per group).
BITS_PER_WEIGHT = {
    "q4_k_m": 4.85, "q4_1": 5.0, "q4_0": 4.5, "q5_k_m": 5.69, "q6_k": 6.56, "q8_0": 8.5,
    "awq": 4.25, "int4": 4.25, "w4a16": 4.25, "nvfp4": 4.5, "fp8": 8.0, "bf16": 16.0, "fp16": 16.0,
}
KV_DTYPE_BYTES = {"f16": 2, "fp16": 2, "bf16": 2, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
                  "float8_e4m3fn": 1, "float8_e5m2": 1, "q8_0": 1.0625, "q4_0": 0.5625}
AUDIT_TOLERANCE = 1.2  # implied/expected bytes per token outside [1/1.2, 1.2] is flagged


@dataclass(frozen=True)
class Geometry:
    name: str
    match: tuple[str, ...]
    params_b: float
    layers: int
    kv_layers: int
    kv_heads: int
    head_dim: int
    mtp_layers: int

    def kv_bytes_per_token(self, dtype_bytes: float) -> float:
        return self.kv_layers * self.kv_heads * self.head_dim * 2 * dtype_bytes


def load_geometries(root: Path = Path(".")) -> list[Geometry]:
    out = []
    for path in sorted((root / "configs/models").glob("*.yaml")):
        doc = load_file(path, "model", root)
        out.append(Geometry(path.stem, tuple(doc["match"]), doc["params_b"], doc["layers"], doc["kv_layers"],
                            doc["kv_heads"], doc["head_dim"], doc["mtp_layers"]))
    return out


def geometry_for(model: str, geometries: list[Geometry]) -> Geometry | None:
    name = (model or "").lower()
    return next((g for g in geometries if any(m in name for m in g.match)), None)


def bits_per_weight(quant: str) -> float | None:
    text = (quant or "").lower().replace("-", "_")
    for key in sorted(BITS_PER_WEIGHT, key=len, reverse=True):
        if key in text:
            return BITS_PER_WEIGHT[key]
    return None


def kv_dtype_bytes(kv_dtype: str) -> float | None:
    return KV_DTYPE_BYTES.get((kv_dtype or "").lower())


# -- decode roofline -----------------------------------------------------------------------------------
def roofline(results: pd.DataFrame, bandwidth_gbs: dict[str, float], geometries: list[Geometry]) -> pd.DataFrame:
    """Bandwidth-bound decode ceiling per single-stream decode row, and the share of it achieved.

    ceiling = bandwidth / (weight bytes + KV bytes read at that context) x acceptance length. Rows
    whose node has no bandwidth, or whose model or quantization is unknown, get no ceiling.
    """
    rows = results[(results["metric"] == "decode_tps") & (results["status"] == "ok") & (results["concurrency"] == 1)]
    accept = results[results["metric"] == "accept_len"]
    out = []
    for row in rows.to_dict("records"):
        geometry = geometry_for(row["model"], geometries)
        bpw = bits_per_weight(row["quant"])
        bandwidth = bandwidth_gbs.get(row["node"])
        if not (geometry and bpw and bandwidth):
            continue
        weight_bytes = geometry.params_b * 1e9 * bpw / 8
        context = (row["prompt_tokens"] if pd.notna(row["prompt_tokens"]) else 0) + (row["output_tokens"] / 2 if pd.notna(row["output_tokens"]) else 0)
        row = pd.Series(row)
        kv_bytes = geometry.kv_bytes_per_token(kv_dtype_bytes(row["kv_dtype"]) or 2) * context
        tp = row["tp"] if pd.notna(row["tp"]) and row["tp"] else 1
        acc = _acceptance_for(accept, row) if row["spec_method"] not in ("none", "unknown", None) else 1.0
        ceiling = bandwidth * 1e9 * tp / (weight_bytes + kv_bytes) * (acc or 1.0)
        out.append({"source": row["source"], "node": row["node"], "stack": row["stack"], "variant": row["variant"],
                    "workload": row["workload"], "decode_tps": row["value"],
                    "accept_len": acc if acc is not None else "not reported (x1 assumed)",
                    "ceiling_tps": ceiling, "percent_of_ceiling": 100 * row["value"] / ceiling,
                    "bytes_per_token_mb": (weight_bytes + kv_bytes) / 1e6})
    return pd.DataFrame(out)


def _acceptance_for(accept: pd.DataFrame, row: pd.Series) -> float | None:
    """The acceptance length behind a speculative rate: same run or post and variant, same workload if known."""
    same = accept[(accept["source"] == row["source"]) & (accept["node"] == row["node"]) & (accept["variant"] == row["variant"])
                  & (accept["ref"].str.split(" ").str[0] == row["ref"].split(" ")[0])]
    exact = same[same["workload"] == row["workload"]]
    pick = exact if len(exact) else same
    return float(pick["value"].median()) if len(pick) else None


# -- KV-pool audit ----------------------------------------------------------------------------------------
def kv_audit(results: pd.DataFrame, geometries: list[Geometry]) -> pd.DataFrame:
    """Bytes per token implied by the engine against what the model geometry predicts.

    If memory is left free after the pool is allocated and the pool is far smaller than the geometry
    allows, suspect a miscalculation rather than a shortage (seed 000: x5 from a misread draft depth).
    """
    implied = results[(results["metric"] == "kv_bytes_per_token") & results["value"].notna()]
    free = results[results["metric"].isin(["vram_free_mib", "mem_free_after_pool_gb"])]
    out = []
    for _, row in implied.iterrows():
        geometry = geometry_for(row["model"], geometries)
        dtype = kv_dtype_bytes(row["kv_dtype"])
        if not (geometry and dtype):
            continue
        expected = geometry.kv_bytes_per_token(dtype)
        factor = row["value"] / expected
        same = free[(free["ref"] == row["ref"]) & (free["variant"] == row["variant"]) & (free["node"] == row["node"])]
        free_text = "; ".join(f"{m}={v:g}" for m, v in zip(same["metric"], same["value"]))
        flagged = not (1 / AUDIT_TOLERANCE <= factor <= AUDIT_TOLERANCE)
        verdict = "ok" if not flagged else (
            f"x{factor:.3g} more bytes per token than the geometry predicts"
            + (" while memory was left free: suspect a miscalculation, not a shortage" if len(same) else ""))
        out.append({"source": row["source"], "ref": row["ref"], "node": row["node"], "stack": row["stack"],
                    "variant": row["variant"], "kv_dtype": row["kv_dtype"], "implied_bytes_per_token": row["value"],
                    "expected_bytes_per_token": expected, "factor": factor, "draft_share": geometry.mtp_layers / geometry.kv_layers
                    if row["spec_method"] == "mtp" else 0.0, "memory_left_free": free_text or "not reported",
                    "flag": verdict})
    return pd.DataFrame(out)


# -- spread -------------------------------------------------------------------------------------------------
def spread_flags(results: pd.DataFrame, ratio: float = 1.25) -> pd.DataFrame:
    """Rate figures whose repeats (or published range) span more than `ratio`, and peaks next to typical
    figures of the same cell family that are far above them (seed 004: 101 vs 408 tok/s)."""
    rates = results[results["metric"].isin(["decode_tps", "aggregate_tps", "e2e_tps"]) & results["value"].notna()]
    wide = rates[(rates["value_min"] > 0) & (rates["value_max"] / rates["value_min"] > ratio)].copy()
    wide["why"] = [f"spread {lo:.4g}-{hi:.4g} (x{hi / lo:.2f})" for lo, hi in zip(wide["value_min"], wide["value_max"])]
    peaks = rates[rates["stat"] == "peak"].copy()
    notes = []
    for _, peak in peaks.iterrows():
        family = rates[(rates["ref"].str.split(" ").str[0] == peak["ref"].split(" ")[0]) & (rates["variant"] == peak["variant"])
                       & (rates["metric"] == peak["metric"]) & (rates["stat"] != "peak")]
        if len(family):
            typical = family["value"].median()
            notes.append(f"peak {peak['value']:g} is x{peak['value'] / typical:.2f} the typical {typical:g} of its family")
        else:
            notes.append("a peak with no typical figure beside it")
    peaks["why"] = notes
    columns = ["source", "ref", "node", "stack", "variant", "workload", "concurrency", "metric", "value", "stat", "why"]
    return pd.concat([wide[columns], peaks[columns]], ignore_index=True)


def is_bimodal(values: list[float], gap_ratio: float = 1.5) -> bool:
    """Two clusters: sorted repeats with one jump larger than gap_ratio between neighbours, each side populated."""
    ordered = sorted(v for v in values if v and v > 0)
    if len(ordered) < 4:
        return False
    jumps = [(b / a, i) for i, (a, b) in enumerate(zip(ordered, ordered[1:]))]
    ratio, at = max(jumps)
    return ratio > gap_ratio and 2 <= at + 1 <= len(ordered) - 2


# -- speculative value against context ---------------------------------------------------------------------
def spec_value_by_context(results: pd.DataFrame) -> pd.DataFrame:
    """Speed-up of each speculative variant over the no-spec variant of the same node and stack, per
    workload (whose prompt length sets the context), with acceptance length beside it."""
    decode = results[(results["metric"] == "decode_tps") & (results["status"] == "ok") & (results["concurrency"] == 1)
                     & (results["source"] == "measured")]
    base = decode[decode["spec_method"] == "none"].set_index(["node", "stack", "workload"])["value"]
    accept = results[results["metric"] == "accept_len"].set_index(["node", "stack", "variant", "workload"])["value"]
    out = []
    for _, row in decode[decode["spec_method"] != "none"].iterrows():
        key = (row["node"], row["stack"], row["workload"])
        if key not in base.index:
            continue
        out.append({"node": row["node"], "stack": row["stack"], "variant": row["variant"], "workload": row["workload"],
                    "prompt_tokens": row["prompt_tokens"], "speedup": row["value"] / base[key],
                    "accept_len": accept.get((row["node"], row["stack"], row["variant"], row["workload"]))})
    return pd.DataFrame(out)


# -- run-to-run comparison (compare-llama-bench style) ------------------------------------------------------
KEY_COLUMNS = ["node", "stack", "variant", "workload", "concurrency", "power_cap_w", "metric"]


def compare(baseline: pd.DataFrame, candidate: pd.DataFrame, vary: str = "engine_version") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Join two result sets only on like rows: every key and basis column equal except `vary`.

    Returns (paired rows with their ratio, unpaired rows with the basis fields that kept them apart).
    """
    like = [c for c in KEY_COLUMNS + BASIS_COLUMNS if c != vary]

    def keyed(frame):
        frame = frame[frame["status"] == "ok"].copy()
        frame["_key"] = ["|".join(map(str, values)) for values in frame[like].itertuples(index=False)]
        return frame

    a, b = keyed(baseline), keyed(candidate)
    paired = a.merge(b, on="_key", suffixes=("_a", "_b"))
    table = pd.DataFrame({c: paired[f"{c}_a"] for c in ["node", "stack", "variant", "workload", "concurrency", "metric"]})
    table[f"{vary} A"] = paired[f"{vary}_a"].values
    table[f"{vary} B"] = paired[f"{vary}_b"].values
    table["A"], table["B"] = paired["value_a"].values, paired["value_b"].values
    table["B/A"] = table["B"] / table["A"]
    unpaired = []
    for side, frame, other in (("A", a, b), ("B", b, a)):
        for _, row in frame[~frame["_key"].isin(other["_key"])].iterrows():
            cell = [str(row[c]) for c in KEY_COLUMNS]
            same_cell = other[[[str(v) for v in values] == cell for values in other[KEY_COLUMNS].itertuples(index=False)]]
            differs = sorted({c for _, o in same_cell.iterrows() for c in BASIS_COLUMNS if c != vary and str(o[c]) != str(row[c])})
            unpaired.append({"side": side, **{c: row[c] for c in KEY_COLUMNS}, "value": row["value"],
                             "basis that differs": ", ".join(differs) or "no counterpart cell"})
    return table.reset_index(drop=True), pd.DataFrame(unpaired)


# -- power caps ----------------------------------------------------------------------------------------------
SWEET_SPOT_SHARE = 0.95


def power_sweet_spots(results: pd.DataFrame) -> pd.DataFrame:
    """Per sweep (same source, node, stack, variant, workload, concurrency, metric): the lowest cap whose
    throughput is within 5% of the best, and tokens per joule where energy was measured."""
    rates = results[results["power_cap_w"].notna() & results["metric"].isin(["decode_tps", "aggregate_tps", "e2e_tps"])
                    & (results["status"] == "ok")]
    energy = results[results["metric"] == "energy_j_per_token"]
    joules_by = {(e["ref"], e["node"], e["variant"], e["workload"], e["concurrency"], e["power_cap_w"]): e["value"]
                 for e in energy.to_dict("records")}
    keys = ["source", "node", "stack", "variant", "workload", "concurrency", "metric"]
    out = []
    for key, sweep in rates.groupby(keys, dropna=False):
        if sweep["power_cap_w"].nunique() < 2:
            continue
        best = sweep["value"].max()
        within = sweep[sweep["value"] >= SWEET_SPOT_SHARE * best].sort_values("power_cap_w")
        spot = within.iloc[0]
        for row in sweep.sort_values("power_cap_w").to_dict("records"):
            joules = joules_by.get((row["ref"], row["node"], row["variant"], row["workload"], row["concurrency"], row["power_cap_w"]))
            out.append({**dict(zip(keys, key)), "power_cap_w": row["power_cap_w"], "value": row["value"],
                        "share_of_best": row["value"] / best,
                        "tokens_per_joule": 1 / joules if joules else None,
                        "sweet_spot": "← sweet spot" if row["power_cap_w"] == spot["power_cap_w"] else ""})
    return pd.DataFrame(out)
