"""Speculative speed-up against prompt length (seed 000: +107% at short context, nothing at 128K): each
speculative cell against the no-spec cell that is the same in every respect but the variant."""

from __future__ import annotations

import pandas as pd

from stackbench.analysis.common import CELL, cell_values
from stackbench.config.speculative import NO_SPEC
from stackbench.results.metrics import M
from stackbench.results.store import MEASURED

# The no-spec cell a speculative cell is compared with: the same cell in every respect but the variant. Each
# measured launch's rows carry their own ref (its run id), so measured cells pair across refs.
SPEC_PAIR = ["node", "stack", "power_cap_w", "workload", "concurrency", "request_rate", "model", "quant",
             "prompt_tokens", "output_tokens"]


def spec_value_by_context(results: pd.DataFrame) -> pd.DataFrame:
    """Speed-up of each speculative cell's per-stream decode rate over the no-spec cell that matches it in
    everything but the variant (same node, stack, power cap, concurrency, workload, model, lengths),
    with the acceptance length of that very cell beside it."""
    decode = results[(results["metric"] == M.decode_tps) & (results["status"] == "ok") & results["source"].isin(MEASURED)
                     & results["value"].notna()]
    base = decode[decode["spec_method"] == NO_SPEC].drop_duplicates(SPEC_PAIR)[SPEC_PAIR + ["value"]]
    spec = decode[decode["spec_method"] != NO_SPEC]
    paired = spec.merge(base, on=SPEC_PAIR, suffixes=("", "_nospec"))
    if paired.empty:
        return pd.DataFrame()
    accept = paired[CELL].merge(cell_values(results, M.accept_len), on=CELL, how="left")["value"]
    return pd.DataFrame({
        **{c: paired[c] for c in ["node", "stack", "variant", "power_cap_w", "concurrency", "workload", "prompt_tokens"]},
        "speedup": (paired["value"] / paired["value_nospec"]).to_numpy(), "accept_len": accept.to_numpy()})
