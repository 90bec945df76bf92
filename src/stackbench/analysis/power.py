"""Power caps: throughput and tokens per joule against the cap the GPU enforced, the stock limit included (a
sweep's uncapped cell, at the limit found at the launch's start), the sweet spot named (the lowest limit within
5% of the best: seed 002's 260 W). A rehearsal's figures come from a stand-in, so it names no sweet spot: it
says what the real run will compare."""

from __future__ import annotations

import numpy as np
import pandas as pd

from stackbench.analysis.common import CELL, LAUNCH, RATE_METRICS, cell_values, launch_values, on_launch, with_applied_caps
from stackbench.analysis.gpustate import slowed_of
from stackbench.results.metrics import M
from stackbench.results.store import MEASURED

SWEET_SPOT_SHARE = 0.95
SPOT = "← sweet spot"
STOCK = "stock"
REHEARSAL_SPOT = "none named: stand-in figures; the real run compares each cap with this stock cell"


def stock_limits(results: pd.DataFrame) -> pd.DataFrame:
    """Per launch (LAUNCH), the limit its uncapped cells ran at (`stock`, W per GPU): the limit found at the
    launch's start (power_limit_found_w), else NVML's default (power_limit_default_w)."""
    found = launch_values(results, {M.power_limit_found_w: "found", M.power_limit_default_w: "default"})
    return found[LAUNCH].assign(stock=found["found"].fillna(found["default"]))


def power_sweet_spots(results: pd.DataFrame, limits: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per sweep (same source, ref, node, stack, variant, workload, concurrency, metric): each limit's throughput,
    its share of the best and tokens per joule of that very cell where energy was measured; the lowest limit
    within 5% of the best is the sweet spot. A measured sweep's uncapped cell stands at its stock limit
    (`limits`, stock_limits of the whole results where the caller passes a part of them), marked `stock`; one
    whose launch recorded no limit is left out. Cells on a slowed GPU (analysis.gpustate) are left out. Caps are the
    ones applied (common.applied_cap): a sweep whose caps the GPU refused names no sweet spot. A rehearsal's sweep
    names none either (its figures are a stand-in's) and says what the real run compares."""
    results = with_applied_caps(results)
    limits = stock_limits(results) if limits is None else limits
    keys = ["source", "ref", "node", "stack", "variant", "workload", "concurrency", "metric"]
    wanted = results["metric"].isin(RATE_METRICS) & (results["status"] == "ok") & results["value"].notna()
    columns = list(dict.fromkeys(CELL + keys + ["value"]))
    rates = results.loc[wanted, columns]
    stock = rates["power_cap_w"].isna() & rates["source"].isin(MEASURED)
    rates = rates[rates["power_cap_w"].notna() | stock]
    rates = rates[slowed_of(rates, results) == ""]  # a throttled cell would move the sweet spot: not the cap's doing
    stock = stock[rates.index]
    stock_w = on_launch(rates, limits)["stock"].astype(float)
    rates = rates.assign(limit_w=rates["power_cap_w"].astype(float).where(~stock, stock_w), stock=stock)
    rates = rates[rates["limit_w"].notna()]
    # The sweep's keys are factorised once; every per-sweep figure then groups on that integer.
    sweep = rates.groupby(keys, dropna=False, sort=False).ngroup().to_numpy()
    grouped = rates.groupby(sweep)
    rates = rates.assign(best=grouped["value"].transform("max"), caps=grouped["limit_w"].transform("nunique"),
                         capped=grouped["stock"].transform(lambda s: (~s).any()))
    several = ((rates["caps"] >= 2) & rates["capped"]).to_numpy()
    rates, sweep = rates[several], sweep[several]
    if rates.empty:
        return pd.DataFrame()
    spot = rates["limit_w"].where(rates["value"] >= SWEET_SPOT_SHARE * rates["best"])
    rates = rates.assign(spot=spot.groupby(sweep).transform("min"))
    joules = rates[CELL].merge(cell_values(results, M.energy_j_per_token), on=CELL, how="left")["value"].set_axis(rates.index)
    rehearsal = rates["source"].eq("rehearsal")
    named = np.where(rates["limit_w"] == rates["spot"], SPOT, "")
    marks = np.where(rehearsal, np.where(rates["stock"], REHEARSAL_SPOT, ""), named)
    out = pd.DataFrame({**{k: rates[k] for k in keys}, "power_cap_w": rates["limit_w"],
                        "limit": np.where(rates["stock"], STOCK, "cap"), "value": rates["value"],
                        "share_of_best": rates["value"] / rates["best"], "tokens_per_joule": 1 / joules,
                        "sweet_spot": marks})
    return out.sort_values(keys + ["power_cap_w", "limit"], kind="stable").reset_index(drop=True)
