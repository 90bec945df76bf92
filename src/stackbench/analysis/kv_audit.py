"""KV-pool audit: the bytes per token an engine's pool implies against what the model geometry predicts
(seed 000's lesson: memory left free after the pool was allocated means a miscalculation, not a shortage)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from stackbench.analysis.common import LAUNCH, engine_fact, geometry_columns, kv_dtype_bytes, on_launch, text_of, tp_of
from stackbench.models import geometry
from stackbench.results.metrics import M

AUDIT_TOLERANCE = 1.2  # implied/expected bytes per token outside [1/1.2, 1.2] is flagged


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
    implied = results[(results["metric"] == M.kv_bytes_per_token) & results["value"].notna()]
    if implied.empty:
        return pd.DataFrame()
    geo = geometry_columns(implied, results)
    tp = tp_of(implied)
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

    free = results[results["metric"].isin([M.vram_free_mib, M.mem_free_after_pool_gb]) & results["value"].notna()]
    free_text = (free["metric"] + "=" + text_of(free["value"], "{:g}")).groupby([free[c] for c in LAUNCH], dropna=False).agg("; ".join)
    memory_free = on_launch(implied, free_text.rename("free").reset_index())["free"]

    flagged = ~factor.between(1 / AUDIT_TOLERANCE, AUDIT_TOLERANCE)
    verdict = np.select(
        [geo["attention_layers"].isna(), key_bytes.isna(), state_shared, window_mixed, ~flagged],
        ["not audited: " + geo["geometry_source"],
         "not audited: KV dtype " + implied["kv_dtype"].fillna("null").astype(str) + " has no known byte width",
         "not comparable: " + implied["engine"].fillna("the engine").astype(str)
         + "'s hybrid allocator pools KV with the recurrent state; compare pool tokens only",
         "not comparable: the logged KV bytes cover sliding-window and full layers over one token count",
         "ok"],
        "x" + text_of(factor, "{:.3g}") + " the bytes per token the geometry predicts"
        + np.where(memory_free.notna(), " while memory was left free: suspect a miscalculation, not a shortage", ""))
    basis = ("one rank of TP" + tp.astype(int).astype(str) + " (" + _rank_heads_text(geo["kv_heads"], tp) + ")"
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


def _rank_heads_text(kv_heads: pd.Series, tp: pd.Series) -> pd.Series:
    """"1 of 4 KV heads" on TP4, "1 of 3 KV heads, replicated" where ranks outnumber heads; a launch without
    geometry rows says so rather than counting 0 heads."""
    known = kv_heads.notna()
    total = kv_heads.fillna(1).astype(int)
    held = geometry.kv_heads_per_rank(total, tp.astype(int))
    text = held.astype(str) + " of " + total.astype(str) + " KV heads" + np.where(total < tp, ", replicated", "")
    return text.where(known, "KV heads unknown")
