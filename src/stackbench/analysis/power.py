"""Power caps: throughput and tokens per joule against the cap the GPU enforced, the sweet spot named (the
lowest cap within 5% of the best: seed 002's 260 W)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from stackbench.analysis.common import CELL, RATE_METRICS, cell_values, with_applied_caps
from stackbench.analysis.gpustate import slowed_of

SWEET_SPOT_SHARE = 0.95


def power_sweet_spots(results: pd.DataFrame) -> pd.DataFrame:
    """Per sweep (same source, ref, node, stack, variant, workload, concurrency, metric): the lowest cap
    whose throughput is within 5% of the best, and tokens per joule of that very cell where energy was
    measured. Cells on a slowed GPU (analysis.gpustate) are left out. Caps are the ones applied
    (common.applied_cap): a sweep whose caps the GPU refused names no sweet spot."""
    results = with_applied_caps(results)
    keys = ["source", "ref", "node", "stack", "variant", "workload", "concurrency", "metric"]
    wanted = results["power_cap_w"].notna() & results["metric"].isin(RATE_METRICS) & (results["status"] == "ok") \
        & results["value"].notna()
    rates = results.loc[wanted, list(dict.fromkeys(CELL + keys + ["value"]))]
    rates = rates[slowed_of(rates, results) == ""]  # a throttled cell would move the sweet spot: not the cap's doing
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
    joules = rates[CELL].merge(cell_values(results, "energy_j_per_token"), on=CELL, how="left")["value"].set_axis(rates.index)
    out = pd.DataFrame({**{k: rates[k] for k in keys}, "power_cap_w": rates["power_cap_w"], "value": rates["value"],
                        "share_of_best": rates["value"] / rates["best"], "tokens_per_joule": 1 / joules,
                        "sweet_spot": np.where(rates["power_cap_w"] == rates["spot"], "← sweet spot", "")})
    return out.sort_values(keys + ["power_cap_w"], kind="stable").reset_index(drop=True)
