"""What to run for energy: the configuration with the fewest joules per token and per response at each
concurrency (ML.ENERGY compares at each model's minimum-energy configuration), the power cap below which
speed falls faster than power, and a depth x cap table where both are swept (a public RTX 5090 sweep found
the cap's penalty growing with the draft depth, so the two are read together)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from stackbench.analysis.common import with_applied_caps
from stackbench.analysis.decide import judged
from stackbench.analysis.gpustate import slowed_of
from stackbench.config.speculative import NO_SPEC
from stackbench.results.metrics import KWH_J, M
from stackbench.results.store import MEASURED

# Steady-window figures where the cell has them (ramp and tail excluded), else the whole window's.
PER_TOKEN = (M.energy_j_per_token_steady, M.energy_j_per_token)
PER_RESPONSE = M.energy_j_per_response_steady
POWER = M.power_w_per_gpu  # compared with a cap, which is per GPU
ENERGY_METRICS = (*PER_TOKEN, PER_RESPONSE, POWER)
CELL_KEYS = ["node", "stack", "variant", "spec_method", "spec_tokens", "power_cap_w", "workload", "concurrency"]
SWEEP = ["node", "stack", "variant", "workload", "concurrency"]


def _per_cell(results: pd.DataFrame, metric: str) -> pd.DataFrame:
    rows = results[results["source"].isin(MEASURED) & (results["metric"] == metric) & (results["status"] == "ok")
                   & results["value"].notna()]
    return rows.drop_duplicates(CELL_KEYS)[CELL_KEYS + ["value"]].rename(columns={"value": metric})


def energy_cells(results: pd.DataFrame, correctness: pd.DataFrame) -> pd.DataFrame:
    """Per measured cell: its judged rate, power, J/token (steady where measured) and J/response, variants
    flagged by the correctness rule left out (a looping answer is cheap per token and useless), and cells on a
    slowed GPU (analysis.gpustate). The cap is the one applied (common.applied_cap): a cell whose cap was refused
    is uncapped here, so the cap floor and depth x cap see only caps the GPU enforced."""
    results = with_applied_caps(results)
    cells = judged(results)
    cells = cells[slowed_of(cells, results) == ""][CELL_KEYS + ["metric", "value"]]  # a throttled GPU's joules are not the stack's
    for metric in ENERGY_METRICS:
        cells = cells.merge(_per_cell(results, metric), on=CELL_KEYS, how="left")
    cells["j_per_token"] = cells[PER_TOKEN[0]].fillna(cells[PER_TOKEN[1]])
    cells["j_per_token_basis"] = np.where(cells[PER_TOKEN[0]].notna(), "steady window", "whole window")
    if not correctness.empty:
        flagged = correctness.loc[correctness["flagged"].astype(bool), ["node", "stack", "variant"]].assign(out=True)
        cells = cells.merge(flagged, on=["node", "stack", "variant"], how="left")
        cells = cells[cells["out"].isna()].drop(columns="out")
    return cells[cells["j_per_token"].notna() | cells[PER_RESPONSE].notna()].reset_index(drop=True)


def fewest_joules(cells: pd.DataFrame) -> pd.DataFrame:
    """Per node, workload and concurrency: the stack / variant / cap with the fewest J/token and the one with
    the fewest J/response, each with its figure."""
    keys = ["node", "workload", "concurrency"]
    if cells.empty:
        return pd.DataFrame()
    label = cells["stack"] + " / " + cells["variant"] + " @ " + cells["power_cap_w"].map(
        lambda w: f"{w:g} W" if pd.notna(w) else "uncapped").astype(str)
    cells = cells.assign(config=label)
    out = cells[keys].drop_duplicates()
    for column, title in (("j_per_token", "J/token"), (PER_RESPONSE, "J/response")):
        best = cells[cells[column].notna()].sort_values(column, kind="stable").drop_duplicates(keys)
        out = out.merge(best[keys + ["config", column]].rename(columns={"config": f"fewest {title}", column: title}),
                        on=keys, how="left")
    return out.sort_values(keys, kind="stable").reset_index(drop=True)


def cap_floors(cells: pd.DataFrame) -> pd.DataFrame:
    """Per cap sweep (node, stack, variant, workload, concurrency at two or more caps): walking down from the
    highest cap, the first cap where the next one down loses a larger share of speed than of power; below it
    speed falls faster than power. Power is the cell's measured mean per GPU (power_w_per_gpu), else its cap
    (per GPU too: a two-GPU node's sum against one GPU's cap would halve every step's power loss)."""
    swept = cells[cells["power_cap_w"].notna()].copy()
    if swept.empty:
        return pd.DataFrame()
    swept["watts"] = swept[POWER].fillna(swept["power_cap_w"])
    swept = swept.sort_values(SWEEP + ["power_cap_w"], ascending=[True] * len(SWEEP) + [False], kind="stable")
    grouped = swept.groupby(SWEEP, dropna=False, sort=False)
    swept["speed_loss"] = 1 - grouped["value"].shift(-1) / swept["value"]
    swept["power_loss"] = 1 - grouped["watts"].shift(-1) / swept["watts"]
    swept["next_cap"] = grouped["power_cap_w"].shift(-1)
    swept["caps"] = grouped["power_cap_w"].transform("nunique")
    swept = swept[swept["caps"] >= 2]
    if swept.empty:
        return pd.DataFrame()
    faster = swept[swept["speed_loss"] > swept["power_loss"]].drop_duplicates(SWEEP)
    lowest = swept.drop_duplicates(SWEEP, keep="last")
    out = lowest[SWEEP + ["metric"]].merge(faster[SWEEP + ["power_cap_w", "next_cap", "speed_loss", "power_loss"]],
                                           on=SWEEP, how="left")
    found = out["power_cap_w"].notna()
    out["cap_floor_w"] = out["power_cap_w"].fillna(pd.Series(lowest["power_cap_w"].to_numpy(), index=out.index))
    out["why"] = np.where(
        found, "from " + out["power_cap_w"].map("{:g}".format).astype(str) + " W to " + out["next_cap"].map("{:g}".format).astype(str)
        + " W speed falls " + out["speed_loss"].map("{:.1%}".format).astype(str) + ", power "
        + out["power_loss"].map("{:.1%}".format).astype(str),
        "lower bound: speed never fell faster than power down to the lowest cap swept")
    return out[SWEEP + ["metric", "cap_floor_w", "why"]].reset_index(drop=True)


def depth_by_cap(cells: pd.DataFrame) -> pd.DataFrame:
    """Where one stack swept both speculative depth (no-spec = 0) and power cap on a workload and concurrency:
    one row per depth, one column per cap, each cell its judged rate and J/token."""
    swept = cells[cells["power_cap_w"].notna()].copy()
    if swept.empty:
        return pd.DataFrame()
    swept["depth"] = np.where(swept["spec_method"] == NO_SPEC, 0, swept["spec_tokens"].astype(float).fillna(0)).astype(int)
    keys = ["node", "stack", "workload", "concurrency"]
    grouped = swept.groupby(keys, dropna=False)
    swept = swept[(grouped["depth"].transform("nunique") >= 2) & (grouped["power_cap_w"].transform("nunique") >= 2)]
    if swept.empty:
        return pd.DataFrame()
    swept["text"] = swept["value"].map("{:.3g} tok/s".format).astype(str) + np.where(
        swept["j_per_token"].notna(), ", " + swept["j_per_token"].map("{:.3g} J/token".format).astype(str), "")
    swept["cap"] = swept["power_cap_w"].map("{:g} W".format)
    table = swept.pivot_table(index=keys + ["depth"], columns="cap", values="text", aggfunc="first", dropna=False)
    caps = sorted(table.columns, key=lambda c: float(c.split()[0]), reverse=True)
    return table[caps].reset_index().rename_axis(columns=None)


def run_energy_lines(results: pd.DataFrame) -> list[str]:
    """Per node and source, the energy its measured cells used, in kWh: each cell's energy_j_per_token (its whole
    measured window) x its n, the window's output tokens, is the energy over that window: the delta of NVML's
    nvmlDeviceGetTotalEnergyConsumption counter (mJ) on the launch's GPUs, or where a GPU has no counter the sampled
    power's integral over the window (measure/summary.py energy_per_token_figure; the row's note says which). Summed
    over every cell and launch of every round. Warm-ups, start-ups, the idle time between cells and the host are not
    in it, so the box drew more."""
    rows = results[results["source"].isin(MEASURED) & (results["metric"] == PER_TOKEN[1]) & (results["status"] == "ok")]
    rows = rows.drop_duplicates([*CELL_KEYS, "source", "ref", "replicate", "request_rate", "prompt_tokens"])
    lines = []
    for (node, source), mine in rows.groupby(["node", "source"], sort=True):
        joules = (mine["value"] * pd.to_numeric(mine["n"], errors="coerce")).dropna()
        if joules.empty:
            continue
        basis = ("the simulated GPUs' modeled draw, not a measurement" if source == "rehearsal" else
                 "NVML's total energy counter, nvmlDeviceGetTotalEnergyConsumption deltas in mJ, on each launch's GPUs "
                 "(the sampled power's integral where a GPU had no counter: the row's note says)")
        lines.append(f"Energy the run used on {node}: {joules.sum() / KWH_J:.3g} kWh over the measured windows of "
                     f"{len(joules)} cells, every launch and round ({basis}); warm-ups, start-ups, the idle time between "
                     "cells and the host are not in it.")
    return lines
