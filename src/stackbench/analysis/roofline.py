"""Decode against its bandwidth roofline: memory bandwidth / bytes read per token (weights at the
quantization's bits per weight, plus KV at that context, x the acceptance length for speculative rows)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from stackbench.analysis.common import (
    BITS_PER_WEIGHT,
    CELL,
    cell_values,
    engine_fact,
    geometry_columns,
    kv_dtype_bytes,
    launch_values,
    on_launch,
    text_of,
    tp_of,
)
from stackbench.config.speculative import NO_SPEC
from stackbench.models import geometry
from stackbench.results.judged import single_stream
from stackbench.results.metrics import M


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
    rows = results[(results["metric"] == M.decode_tps) & (results["status"] == "ok") & single_stream(results)
                   & results["value"].notna()]
    if rows.empty:
        return pd.DataFrame()
    facts = on_launch(rows, launch_values(results, {M.model_mib: "model_mib", M.load_gib: "load_gib",
                                                       M.host_mem_bandwidth_gbs: "host_bw", M.gpu_mem_bandwidth_gbs: "gpu_bw"}))
    geo = geometry_columns(rows, results)
    tp = tp_of(rows)
    per_rank_log = engine_fact(rows, "logged_per_rank")

    logged_mib = facts["model_mib"].fillna(facts["load_gib"] * 1024)
    bits = weight_format(rows["quant"]).map(BITS_PER_WEIGHT).astype(float)
    table_mib = geo["params_b"] * 1e9 * bits / 8 / 2**20
    weight_mib = (logged_mib / np.where(per_rank_log, 1, tp)).fillna(geo["file_weight_mib"] / tp).fillna(table_mib / tp)
    logged_basis = pd.Series(np.where(per_rank_log, "engine log (one rank)", np.where(tp > 1, "engine log / TP", "engine log")),
                             index=rows.index)
    table_basis = ("parameters x " + text_of(bits, "{:g}") + " bits (" + weight_format(rows["quant"])
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
    accept = rows[CELL].merge(cell_values(results, M.accept_len), on=CELL, how="left")["value"].set_axis(rows.index)
    speculative = ~rows["spec_method"].isin([NO_SPEC, "unknown"]) & rows["spec_method"].notna()
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
