"""Analyses the seed posts did by hand, done on every row: decode roofline, KV-pool audit, spread and
bimodality, speculative value against context, power sweet spots, and like-for-like comparison.

Pure, vectorized functions over the results table (pandas groupby/merge; no per-row Python), so they run
the same on measured and published rows and on a million rows. Every lookup joins on the whole cell
(CELL) or the whole launch (LAUNCH), so a power-cap or concurrency sweep never mixes its cells.
Measured rows carry their model's geometry as server rows read from the model's own files
(stackbench.results.geometry); published rows get it from configs/models, whose figures name their sources.

Longer than 250 lines: six analyses of one kind (each a vectorized frame -> frame function over the
results contract, joined on whole cells); each stands alone and is tested alone.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from stackbench.results import geometry
from stackbench.results.store import BASIS_COLUMNS

# A cell's full identity, and the identity of one server launch (its start-up facts are server rows).
CELL = ["source", "ref", "node", "stack", "variant", "spec_method", "spec_tokens", "power_cap_w", "workload", "concurrency", "request_rate"]
LAUNCH = ["source", "ref", "node", "stack", "variant"]
RATE_METRICS = ["decode_tps", "aggregate_tps", "e2e_tps"]

# Bytes per element of KV-cache dtypes as engines name them (llama.cpp block types: bytes per block / 32).
KV_DTYPE_BYTES = {"f32": 4, "float32": 4, "f16": 2, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2,
                  "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
                  "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32, "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}
# Bits per weight by exact weight-format name (the quant label before any parenthesised remark), used only
# when no row reports weight bytes: GGUF types from llama.cpp's quantize table, group-128 INT4/AWQ with a
# 16-bit scale and zero per group, NVFP4 with an FP8 scale per 16 values.
BITS_PER_WEIGHT = {"q4_k_m": 4.85, "q4_1": 5.0, "q4_0": 4.5, "q5_k_m": 5.69, "q6_k": 6.56, "q8_0": 8.5,
                   "awq": 4.25, "awq w4a16": 4.25, "int4": 4.25, "w4a16": 4.25, "nvfp4": 4.5, "fp8": 8.0,
                   "bf16": 16.0, "fp16": 16.0, "f16": 16.0}
AUDIT_TOLERANCE = 1.2  # implied/expected bytes per token outside [1/1.2, 1.2] is flagged
GEOMETRY_FIELDS = ["attention_layers", "swa_layers", "linear_layers", "mtp_layers", "kv_heads", "key_length",
                   "value_length", "sliding_window"]


# -- geometry --------------------------------------------------------------------------------------------
def _launch_values(results: pd.DataFrame, metrics: dict[str, str]) -> pd.DataFrame:
    """One row per launch (LAUNCH), one column per named metric (renamed), from its first row."""
    picked = results.loc[results["metric"].isin(list(metrics)) & results["value"].notna(), LAUNCH + ["metric", "value"]]
    wide = picked.groupby(LAUNCH + ["metric"], dropna=False, sort=False)["value"].first().unstack("metric")
    return wide.reindex(columns=list(metrics)).rename(columns=metrics).reset_index()


def _on_launch(rows: pd.DataFrame, values: pd.DataFrame) -> pd.DataFrame:
    """`values` (keyed by LAUNCH) aligned to `rows`."""
    joined = rows[LAUNCH].merge(values, on=LAUNCH, how="left")
    return joined.drop(columns=LAUNCH).set_axis(rows.index)


def _geometry_columns(rows: pd.DataFrame, results: pd.DataFrame) -> pd.DataFrame:
    """GEOMETRY_FIELDS, params_b, file_weight_mib and geometry_source for each row, from its launch's
    geometry_* rows: measured launches read them from the model's own files, published ones from the
    configs/models entry their model name matches (written beside the seeds' figures by the collect side)."""
    names = {f"geometry_{f}": f for f in GEOMETRY_FIELDS + ["params_b", "weight_mib"]}
    out = _on_launch(rows, _launch_values(results, names)).rename(columns={"weight_mib": "file_weight_mib"})
    notes = results.loc[results["metric"].eq("geometry_attention_layers"), LAUNCH + ["note"]].drop_duplicates(LAUNCH)
    source = _on_launch(rows, notes)["note"]
    out["geometry_source"] = source.where(out["attention_layers"].notna(), np.where(
        rows["source"].eq("published"), "no configs/models entry matches the model name", "no geometry rows for this launch"))
    for field in ("swa_layers", "mtp_layers"):
        out[field] = out[field].astype(float).fillna(0)
    return out


def kv_dtype_bytes(kv_dtype: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Bytes per K and per V element: "f16", "fp8_e4m3", "torch.bfloat16" or llama.cpp's "K q8_0 / V f16"."""
    pairs = {}
    for text in kv_dtype.dropna().unique():
        label = str(text).lower().replace("torch.", "")
        split = re.fullmatch(r"k (\S+) / v (\S+)", label)
        key, value = (split[1], split[2]) if split else (label, label)
        pairs[text] = (KV_DTYPE_BYTES.get(key, np.nan), KV_DTYPE_BYTES.get(value, np.nan))
    return (kv_dtype.map({t: p[0] for t, p in pairs.items()}).astype(float),
            kv_dtype.map({t: p[1] for t, p in pairs.items()}).astype(float))


def _text(values: pd.Series, spec: str) -> pd.Series:
    """Numbers formatted for a table cell; a string Series even when empty."""
    return values.map(spec.format).astype(str)


def engine_fact(rows: pd.DataFrame, column: str) -> pd.Series:
    """A fact about the engine behind each row (results/store.py ENGINE_FACTS); false where unknown."""
    return rows[column].astype("boolean").fillna(False).astype(bool)


def _tp(rows: pd.DataFrame) -> pd.Series:
    return pd.to_numeric(rows["tp"], errors="coerce").fillna(1).clip(lower=1)


# -- decode roofline -----------------------------------------------------------------------------------
def weight_format(quant: pd.Series) -> pd.Series:
    """The exact weight-format name: the quant label, lower case, before any parenthesised remark
    ("BF16 (dequantized from Q4_1 GGUF)" is BF16, never Q4_1)."""
    return quant.fillna("").str.lower().str.replace(r"\s*\(.*\)\s*$", "", regex=True).str.replace("-", "_").str.strip()


def roofline(results: pd.DataFrame) -> pd.DataFrame:
    """Bandwidth-bound decode ceiling per single-stream decode row, and the share of it achieved.

    ceiling = memory bandwidth per device / bytes one device reads per decoded token (its weights + its KV
    at the mean context, prompt + output / 2), x acceptance length for speculative rows. Bandwidth comes
    from the launch's rows (host_mem_bandwidth_gbs measured on CPU nodes, gpu_mem_bandwidth_gbs from the
    GPU node's config); weight bytes from the engine's own log (model_mib), else the model file's tensor
    bytes, else parameters x bits per weight of the exact weight format, and the row says which.
    The bound is research/snakemake_nvml.md section 3 (tokens/s <= BW / bytes read per token, KV added per
    sequence), against decode_tps (one stream, TTFT excluded: the results contract). Counted in full although
    not read in full: an untied input-embedding table (a gather), so the
    ceiling is slightly low for untied models; not counted: recurrent (linear-attention) state reads.
    Rows without bandwidth or weights are left out.
    """
    rows = results[(results["metric"] == "decode_tps") & (results["status"] == "ok") & (results["concurrency"] == 1)
                   & results["value"].notna()]
    if rows.empty:
        return pd.DataFrame()
    facts = _on_launch(rows, _launch_values(results, {"model_mib": "model_mib", "load_gib": "load_gib",
                                                       "host_mem_bandwidth_gbs": "host_bw", "gpu_mem_bandwidth_gbs": "gpu_bw"}))
    geo = _geometry_columns(rows, results)
    tp = _tp(rows)
    per_rank_log = engine_fact(rows, "logged_per_rank")

    logged_mib = facts["model_mib"].fillna(facts["load_gib"] * 1024)
    bits = weight_format(rows["quant"]).map(BITS_PER_WEIGHT).astype(float)
    table_mib = geo["params_b"] * 1e9 * bits / 8 / 2**20
    weight_mib = (logged_mib / np.where(per_rank_log, 1, tp)).fillna(geo["file_weight_mib"] / tp).fillna(table_mib / tp)
    logged_basis = pd.Series(np.where(per_rank_log, "engine log (one rank)", np.where(tp > 1, "engine log / TP", "engine log")),
                             index=rows.index)
    table_basis = ("parameters x " + _text(bits, "{:g}") + " bits (" + weight_format(rows["quant"])
                   + "): no weight bytes reported")
    weights_from = logged_basis.where(logged_mib.notna(), pd.Series(
        np.where(geo["file_weight_mib"].notna(), "model file tensor bytes: the engine log gave no weight figure", table_basis),
        index=rows.index))
    key_bytes, value_bytes = kv_dtype_bytes(rows["kv_dtype"])
    dtype_known = key_bytes.notna()
    key_bytes, value_bytes = key_bytes.fillna(2), value_bytes.fillna(2)
    context = rows["prompt_tokens"].fillna(0) + rows["output_tokens"].fillna(0) / 2

    def per_token(layers: pd.Series) -> pd.Series:
        return geometry.kv_bytes_per_token(layers, geo["kv_heads"], geo["key_length"], geo["value_length"],
                                           key_bytes, value_bytes, np.where(per_rank_log, tp, 1))

    window_tokens = np.minimum(context, geo["sliding_window"].fillna(context))
    kv_bytes = (per_token(geo["attention_layers"]) * context + per_token(geo["swa_layers"]) * window_tokens).fillna(0)

    bandwidth = facts["gpu_bw"].fillna(facts["host_bw"])
    accept = rows[CELL].merge(_cell_values(results, "accept_len"), on=CELL, how="left")["value"].set_axis(rows.index)
    speculative = ~rows["spec_method"].isin(["none", "unknown"]) & rows["spec_method"].notna()
    factor = np.where(speculative, accept.fillna(1.0), 1.0)
    bytes_per_token = weight_mib * 2**20 + kv_bytes
    ceiling = bandwidth * 1e9 / bytes_per_token * factor
    out = pd.DataFrame({
        **{c: rows[c] for c in ["source", "ref", "node", "stack", "variant", "power_cap_w", "workload"]},
        "decode_tps": rows["value"], "ceiling_tps": ceiling, "percent_of_ceiling": 100 * rows["value"] / ceiling,
        "weight_mib_per_device": weight_mib, "weights_from": weights_from,
        "kv_mib_at_context": kv_bytes / 2**20,
        "kv_basis": np.where(geo["attention_layers"].isna(), "KV reads not counted: " + geo["geometry_source"],
                             np.where(dtype_known, "", "KV dtype unknown: 2 bytes assumed")),
        "bandwidth_gbs": bandwidth,
        "accept_len": np.where(speculative, accept, np.nan),
        "speculative_basis": np.where(~speculative, "",
                                      np.where(accept.notna(), "x accept length; ignores the draft's own weight and KV reads "
                                               "and the verify pass, so an upper bound",
                                               "accept length not reported: x1 assumed")),
    })
    return out[bandwidth.notna() & weight_mib.notna()].reset_index(drop=True)


def _cell_values(results: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One value per cell (CELL) for `metric`; repeats of the very same cell are reduced by their median."""
    picked = results.loc[(results["metric"] == metric) & results["value"].notna(), CELL + ["value"]]
    return picked.groupby(CELL, dropna=False, sort=False)["value"].median().reset_index()


# -- KV-pool audit ----------------------------------------------------------------------------------------
def kv_audit(results: pd.DataFrame) -> pd.DataFrame:
    """Bytes per token implied by the engine's pool against what the model geometry predicts.

    Expected = (full-attention layers + MTP layers sharing the pool) x KV heads on one TP rank x
    (key + value length) x dtype bytes, because engines log one rank's KV bytes against the global token
    count. If memory is left free after the pool is allocated and the pool is far smaller than the geometry
    allows, suspect a miscalculation rather than a shortage (seed 000: x5 from a misread draft depth).
    Hybrid models: the recurrent state is a fixed per-sequence pool outside this figure on SGLang and
    llama.cpp (pool tokens and per-token bytes compare; state bytes do not), while vLLM's hybrid allocator
    shares one memory pool between KV and state, so its bytes per token cannot be compared at all.
    """
    implied = results[(results["metric"] == "kv_bytes_per_token") & results["value"].notna()]
    if implied.empty:
        return pd.DataFrame()
    geo = _geometry_columns(implied, results)
    tp = _tp(implied)
    # How the engine logs its pool travels in the rows (results/store.py ENGINE_FACTS, from its adapter).
    engine = {c: engine_fact(implied, c) for c in
              ("logged_per_rank", "kv_pool_holds_draft", "kv_pool_holds_state", "kv_log_mixes_window")}
    per_rank = engine["logged_per_rank"]
    rank_tp = pd.Series(np.where(per_rank, tp, 1), index=implied.index)
    draft = geo["mtp_layers"].where(implied["spec_method"].eq("mtp") & engine["kv_pool_holds_draft"], 0)
    key_bytes, value_bytes = kv_dtype_bytes(implied["kv_dtype"])
    expected = geometry.kv_bytes_per_token(geo["attention_layers"] + draft, geo["kv_heads"], geo["key_length"],
                                           geo["value_length"], key_bytes, value_bytes, rank_tp)
    factor = implied["value"] / expected
    state_shared = engine["kv_pool_holds_state"] & (geo["linear_layers"] > 0)
    window_mixed = engine["kv_log_mixes_window"] & (geo["swa_layers"] > 0)
    not_comparable = state_shared | window_mixed

    free = results[results["metric"].isin(["vram_free_mib", "mem_free_after_pool_gb"]) & results["value"].notna()]
    free_text = (free["metric"] + "=" + _text(free["value"], "{:g}")).groupby([free[c] for c in LAUNCH], dropna=False).agg("; ".join)
    memory_free = _on_launch(implied, free_text.rename("free").reset_index())["free"]

    flagged = ~factor.between(1 / AUDIT_TOLERANCE, AUDIT_TOLERANCE)
    verdict = np.select(
        [geo["attention_layers"].isna(), key_bytes.isna(), state_shared, window_mixed, ~flagged],
        ["not audited: " + geo["geometry_source"],
         "not audited: KV dtype " + implied["kv_dtype"].fillna("null").astype(str) + " has no known byte width",
         "not comparable: " + implied["engine"].fillna("the engine").astype(str)
         + "'s hybrid allocator pools KV with the recurrent state; compare pool tokens only",
         "not comparable: the logged KV bytes cover sliding-window and full layers over one token count",
         "ok"],
        "x" + _text(factor, "{:.3g}") + " the bytes per token the geometry predicts"
        + np.where(memory_free.notna(), " while memory was left free: suspect a miscalculation, not a shortage", ""))
    basis = ("one rank of TP" + tp.astype(int).astype(str) + " (" + geo["kv_heads"].fillna(0).astype(int).astype(str) + " KV heads split)"
             ).where(per_rank & (tp > 1), "whole model")
    basis = basis + np.where(draft > 0, " + " + draft.astype(int).astype(str) + " MTP layer(s) in the pool", "")
    basis = basis + np.where(geo["linear_layers"] > 0, "; " + geo["linear_layers"].fillna(0).astype(int).astype(str)
                             + " recurrent layers hold a fixed state outside it", "")
    return pd.DataFrame({
        **{c: implied[c] for c in ["source", "ref", "node", "stack", "variant", "kv_dtype", "tp"]},
        "implied_bytes_per_token": implied["value"], "expected_bytes_per_token": expected,
        "factor": factor.where(~not_comparable), "expected_basis": basis, "geometry_source": geo["geometry_source"],
        "memory_left_free": memory_free.fillna("not reported"), "flag": verdict,
    }).reset_index(drop=True)


# -- spread -------------------------------------------------------------------------------------------------
def _post(ref: pd.Series) -> pd.Series:
    """The post or run a ref belongs to (its first word: a seed file, or a run id)."""
    return ref.map({r: str(r).split(" ")[0] for r in ref.dropna().unique()})


def spread_flags(results: pd.DataFrame, ratio: float = 1.25) -> pd.DataFrame:
    """Rate figures whose repeats (or published range) span more than `ratio`, and peaks next to typical
    figures of the same family (same post, variant and metric) that are far below them (seed 004: 101 vs
    408 tok/s)."""
    rates = results[results["metric"].isin(RATE_METRICS) & results["value"].notna()]
    wide = rates[(rates["value_min"] > 0) & (rates["value_max"] / rates["value_min"] > ratio)].copy()
    wide["why"] = ("spread " + _text(wide["value_min"], "{:.4g}") + "-" + _text(wide["value_max"], "{:.4g}")
                   + " (x" + _text((wide["value_max"] / wide["value_min"]), "{:.2f}") + ")")
    family = ["post", "variant", "metric"]
    keyed = rates.assign(post=_post(rates["ref"]))
    typical = keyed[keyed["stat"] != "peak"].groupby(family, dropna=False)["value"].median().rename("typical").reset_index()
    peaks = keyed[keyed["stat"] == "peak"]
    peaks = peaks.merge(typical, on=family, how="left").set_axis(peaks.index)
    peaks["why"] = np.where(peaks["typical"].notna(),
                            "peak " + _text(peaks["value"], "{:g}") + " is x" + _text((peaks["value"] / peaks["typical"]), "{:.2f}")
                            + " the typical " + _text(peaks["typical"], "{:g}") + " of its family",
                            "a peak with no typical figure beside it")
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
# The no-spec cell a speculative cell is compared with: the same cell in every respect but the variant.
SPEC_PAIR = ["source", "ref", "node", "stack", "power_cap_w", "workload", "concurrency", "request_rate", "model", "quant",
             "prompt_tokens", "output_tokens"]


def spec_value_by_context(results: pd.DataFrame) -> pd.DataFrame:
    """Speed-up of each speculative cell's per-stream decode rate over the no-spec cell that matches it in
    everything but the variant (same run, node, stack, power cap, concurrency, workload, model, lengths),
    with the acceptance length of that very cell beside it."""
    decode = results[(results["metric"] == "decode_tps") & (results["status"] == "ok") & (results["source"] == "measured")
                     & results["value"].notna()]
    base = decode[decode["spec_method"] == "none"].drop_duplicates(SPEC_PAIR)[SPEC_PAIR + ["value"]]
    spec = decode[decode["spec_method"] != "none"]
    paired = spec.merge(base, on=SPEC_PAIR, suffixes=("", "_nospec"))
    if paired.empty:
        return pd.DataFrame()
    accept = paired[CELL].merge(_cell_values(results, "accept_len"), on=CELL, how="left")["value"]
    return pd.DataFrame({
        **{c: paired[c] for c in ["node", "stack", "variant", "power_cap_w", "concurrency", "workload", "prompt_tokens"]},
        "speedup": (paired["value"] / paired["value_nospec"]).to_numpy(), "accept_len": accept.to_numpy()})


# -- run-to-run comparison (compare-llama-bench style) ------------------------------------------------------
KEY_COLUMNS = ["node", "stack", "variant", "workload", "concurrency", "request_rate", "power_cap_w", "metric"]


def compare(baseline: pd.DataFrame, candidate: pd.DataFrame, vary: str = "engine_version") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Join two result sets only on like rows: every key and basis column equal except `vary`.

    Returns (paired rows with their ratio, unpaired rows with the basis fields that kept them apart).
    Rows are joined on one 64-bit hash of their like columns (null equals null), not on 25 string keys.
    """
    like = [c for c in KEY_COLUMNS + BASIS_COLUMNS if c != vary]
    a, b = (_with_hashes(frame[frame["status"] == "ok"], like) for frame in (baseline, candidate))
    shown = [c for c in ("node", "stack", "variant", "workload", "concurrency", "metric") if c != vary]
    # Only the columns the table shows cross the merge: carrying all of them costs most of its time.
    paired = a[shown + ["_like", vary, "value"]].merge(b[["_like", vary, "value"]], on="_like", suffixes=("_a", "_b"))
    table = paired[shown].copy()
    table[f"{vary} A"], table[f"{vary} B"] = paired[f"{vary}_a"].to_numpy(), paired[f"{vary}_b"].to_numpy()
    table["A"], table["B"] = paired["value_a"].to_numpy(), paired["value_b"].to_numpy()
    table["B/A"] = table["B"] / table["A"]
    unpaired = [_unpaired(side, frame, other, vary) for side, frame, other in (("A", a, b), ("B", b, a))]
    return table.reset_index(drop=True), pd.concat(unpaired, ignore_index=True)


def _with_hashes(frame: pd.DataFrame, like: list[str]) -> pd.DataFrame:
    return frame.assign(_like=pd.util.hash_pandas_object(frame[like], index=False).to_numpy(),
                        _cell=pd.util.hash_pandas_object(frame[KEY_COLUMNS], index=False).to_numpy()).reset_index(drop=True)


def _unpaired(side: str, frame: pd.DataFrame, other: pd.DataFrame, vary: str) -> pd.DataFrame:
    """Rows of `frame` with no like row in `other`, each with the basis fields in which the rows of
    `other` for the same cell differ from it."""
    lonely = frame[~frame["_like"].isin(other["_like"])].reset_index(drop=True)
    basis = [c for c in BASIS_COLUMNS if c != vary]
    counterparts = other[["_cell"] + basis].drop_duplicates()
    same_cell = lonely[["_cell"] + basis].reset_index(names="row").merge(counterparts, on="_cell", suffixes=("", "_other"))
    differs = pd.DataFrame({c: ~((same_cell[c] == same_cell[f"{c}_other"]) | (same_cell[c].isna() & same_cell[f"{c}_other"].isna()))
                            for c in basis}).groupby(same_cell["row"]).any()
    names = differs.dot(pd.Index(basis) + ", ").str.rstrip(", ").reindex(lonely.index)
    out = lonely[KEY_COLUMNS + ["value"]].copy()
    out.insert(0, "side", side)
    out["basis that differs"] = names.where(names.notna() & names.ne(""), "no counterpart cell")
    return out


# -- power caps ----------------------------------------------------------------------------------------------
SWEET_SPOT_SHARE = 0.95


def power_sweet_spots(results: pd.DataFrame) -> pd.DataFrame:
    """Per sweep (same source, ref, node, stack, variant, workload, concurrency, metric): the lowest cap
    whose throughput is within 5% of the best, and tokens per joule of that very cell where energy was
    measured."""
    keys = ["source", "ref", "node", "stack", "variant", "workload", "concurrency", "metric"]
    wanted = results["power_cap_w"].notna() & results["metric"].isin(RATE_METRICS) & (results["status"] == "ok") \
        & results["value"].notna()
    rates = results.loc[wanted, list(dict.fromkeys(CELL + keys + ["value"]))]
    # The sweep's keys are factorised once; every per-sweep figure then groups on that integer.
    sweep = rates.groupby(keys, dropna=False, sort=False).ngroup().to_numpy()
    grouped = rates.groupby(sweep)
    rates = rates.assign(best=grouped["value"].transform("max"), caps=grouped["power_cap_w"].transform("nunique"))
    several = (rates["caps"] >= 2).to_numpy()
    rates, sweep = rates[several], sweep[several]
    if rates.empty:
        return pd.DataFrame()
    spot = rates["power_cap_w"].where(rates["value"] >= SWEET_SPOT_SHARE * rates["best"])
    rates = rates.assign(spot=spot.groupby(sweep).transform("min"))
    joules = rates[CELL].merge(_cell_values(results, "energy_j_per_token"), on=CELL, how="left")["value"].set_axis(rates.index)
    out = pd.DataFrame({**{k: rates[k] for k in keys}, "power_cap_w": rates["power_cap_w"], "value": rates["value"],
                        "share_of_best": rates["value"] / rates["best"], "tokens_per_joule": 1 / joules,
                        "sweet_spot": np.where(rates["power_cap_w"] == rates["spot"], "← sweet spot", "")})
    return out.sort_values(keys + ["power_cap_w"], kind="stable").reset_index(drop=True)


# -- correctness beside speed ---------------------------------------------------------------------------------
CORRECTNESS_METRICS = ["smoke_score", "needle_pass", "cache_consistent", "output_agreement", "first_divergence_token",
                       "output_len_ok", "repetition_ratio", "looping"]
VARIANT = ["node", "stack", "variant"]


def _workloads_where(rows: pd.DataFrame, flagged: pd.Series) -> pd.Series:
    """Per variant, the workloads of its flagged rows, comma-joined ('' where none)."""
    hits = rows[flagged].drop_duplicates(VARIANT + ["workload"]).sort_values("workload")
    return hits.groupby(VARIANT)["workload"].agg(", ".join)


def correctness_by_variant(results: pd.DataFrame) -> pd.DataFrame:
    """One row per measured variant: its probe figures, its greedy agreement with the no-spec launch, and the
    workloads whose cells came out at other lengths than asked or looping; `outputs` says it in words for the
    headline ("= no-spec", "differs at token 17 (agreement 0.41)", "loops: prose") and `flagged` marks a
    variant whose speed figures are not of the reference's output (it differs, loops, or ran other lengths),
    `caveat` says why."""
    rows = results[(results["source"] == "measured") & (results["status"] == "ok")
                   & results["metric"].isin(CORRECTNESS_METRICS)]
    if rows.empty:
        return pd.DataFrame(columns=[*VARIANT, "outputs", "flagged", "caveat"])
    # Several probe cells (or launches) of one variant: the worst of them (the lowest share, the earliest
    # divergence, the highest repetition).
    worst = rows.groupby(VARIANT + ["metric"])["value"].agg(["min", "max"]).unstack("metric")
    table = pd.DataFrame(index=worst.index)
    for metric in ("smoke_score", "needle_pass", "cache_consistent", "output_agreement", "output_len_ok",
                   "first_divergence_token", "repetition_ratio"):
        side = worst["max" if metric == "repetition_ratio" else "min"]
        table[metric] = side[metric] if metric in side else np.nan
    needle = rows[rows["metric"] == "needle_pass"].groupby(VARIANT)["prompt_tokens"].max()
    table["needle_prompt_tokens"] = needle.reindex(table.index)
    units = rows[rows["metric"] == "first_divergence_token"].groupby(VARIANT)["unit"].first()
    table["divergence_unit"] = units.reindex(table.index)
    table["looping_in"] = _workloads_where(rows, (rows["metric"] == "looping") & (rows["value"] > 0)).reindex(table.index).fillna("")
    table["length_off_in"] = _workloads_where(rows, (rows["metric"] == "output_len_ok") & (rows["value"] < 1)).reindex(table.index).fillna("")
    differs = table["first_divergence_token"].notna()
    unit = table["divergence_unit"].fillna("tokens").str.removesuffix("s")
    where = ("at " + unit + " " + _text(table["first_divergence_token"], "{:.0f}")
             + " (agreement " + _text(table["output_agreement"], "{:.2f}") + ")")
    words = pd.Series(np.where(differs, "differs " + where, np.where(table["output_agreement"].notna(), "= no-spec", "")),
                      index=table.index)
    parts = [words, np.where(table["looping_in"] != "", "loops: " + table["looping_in"], ""),
             np.where(table["length_off_in"] != "", "lengths not as asked: " + table["length_off_in"], "")]
    table["outputs"] = ["; ".join(p for p in ps if p) for ps in zip(*parts)]
    table["flagged"] = differs | (table["looping_in"] != "") | (table["length_off_in"] != "")
    why = [np.where(differs, "greedy outputs differ from no-spec " + where + ": its speed is not of the same output", ""),
           np.where(table["looping_in"] != "", "outputs loop in " + table["looping_in"]
                    + ": speed of degenerate, predictable text", ""),
           np.where(table["length_off_in"] != "", "output lengths not as asked in " + table["length_off_in"]
                    + ": another workload than the one named", "")]
    table["caveat"] = ["; ".join(p for p in ps if p) for ps in zip(*why)]
    return table.reset_index()


# -- greedy agreement across stacks ---------------------------------------------------------------------------
CROSS_STACK_METRICS = ["cross_stack_agreement", "cross_stack_divergence"]
MATRIX_CORNER = "reference ↓ / compared →"


def cross_stack_matrices(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Per weights family (table_title of the cross_stack_* rows), a matrix of greedy agreement between its
    no-spec launches: rows the reference (the share is over its output length), columns the launch compared
    with it, both labelled node / stack / quant; a cell reads "1 (identical)" or "0.65, differs at token 20".
    Only the few agreement rows are read, never the whole results table."""
    rows = rows[rows["metric"].isin(CROSS_STACK_METRICS) & (rows["source"] == "measured")]
    out = []
    for family, mine in rows.groupby("table_title", sort=True):
        cells = mine.pivot_table(index=["row_label", "col_label"], columns="metric", values="value", aggfunc="first",
                                 dropna=False)
        units = mine[mine["metric"] == "cross_stack_divergence"].groupby(["row_label", "col_label"])["unit"].first()
        labels = sorted(set(mine["row_label"]) | set(mine["col_label"]))
        matrix = pd.DataFrame(index=labels, columns=labels, dtype=object).fillna("")
        for (reference, candidate), values in cells.iterrows():
            share = values.get("cross_stack_agreement")
            diverged = values.get("cross_stack_divergence")
            if pd.isna(share):
                continue
            unit = str(units.get((reference, candidate), "tokens")).removesuffix("s")
            matrix.loc[reference, candidate] = (f"{share:.2f}, differs at {unit} {diverged:.0f}" if pd.notna(diverged)
                                                else f"{share:.2f} (identical)")
        for label in labels:
            matrix.loc[label, label] = "—"
        out.append((family, matrix.rename_axis(MATRIX_CORNER).reset_index()))
    return out
