"""What every analysis shares: the keys of a cell and of a launch, per-launch facts aligned to rows, the
model geometry of each row's launch, and the byte widths of weight and KV formats."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from stackbench.models.formats import BITS_PER_WEIGHT, KV_DTYPE_BYTES  # noqa: F401  (re-exported to the analyses)
from stackbench.results import metrics
from stackbench.results.metrics import M
from stackbench.results.store import IDENTITY_COLUMNS, LAUNCH_COLUMNS, MEASURED

# A cell's full identity, and the identity of one server launch (its start-up facts are server rows).
CELL = IDENTITY_COLUMNS
LAUNCH = LAUNCH_COLUMNS
RATE_METRICS = list(metrics.names(rate=True))

# A measured cell whose cap was refused says so in its note (measure/runner.py row_extra): "power cap not applied: <why>".
CAP_NOT_APPLIED = "power cap not applied: "


def one_length_over_rounds(rows: pd.DataFrame, cell: list[str], round_column: str) -> pd.DataFrame:
    """`rows` with each cell's prompt length made one over its rounds where its texts are drawn anew each round
    (measure.texts_across_rounds: new): such a cell reads another median prompt length in each round, the same on
    every variant of the round (they answer the same texts), so its rounds are one cell, at the median of the rounds'
    lengths. A length is the cell's own where one round holds several (a ladder's points) or every round reads the
    same. `cell` is the cell's key without prompt_tokens."""
    per_round = rows.groupby([*cell, round_column], dropna=False)["prompt_tokens"].transform("nunique")
    over_rounds = rows.groupby(cell, dropna=False)["prompt_tokens"].transform("nunique")
    drawn = (per_round <= 1) & (over_rounds > 1)
    if not drawn.any():
        return rows
    rounds = rows[drawn].drop_duplicates([*cell, round_column])  # a round counts once, whatever its rows
    median = rounds.groupby(cell, dropna=False)["prompt_tokens"].median().round().rename("_median").reset_index()
    joined = rows[cell].merge(median, on=cell, how="left")["_median"].to_numpy()
    lengths = np.where(drawn.to_numpy(), joined, rows["prompt_tokens"].to_numpy(dtype=float))
    return rows.assign(prompt_tokens=pd.array(np.round(lengths), dtype="Int64"))


def applied_cap(rows: pd.DataFrame) -> pd.Series:
    """The power cap a row's cell ran under: for a measured cell the limit the GPU enforced, read back
    (power_cap_enforced_w), null where the requested cap was not applied (the GPU ran at its stock limit);
    for a published row the cap its post states. Every cap analysis reads this, never the request."""
    return rows["power_cap_enforced_w"].where(rows["source"].isin(MEASURED), rows["power_cap_w"])


def with_applied_caps(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` with power_cap_w replaced by applied_cap: a cell whose cap was refused is analysed as uncapped."""
    return rows.assign(power_cap_w=applied_cap(rows)) if len(rows) else rows


GEOMETRY_FIELDS = ["attention_layers", "swa_layers", "linear_layers", "mtp_layers", "kv_heads", "key_length",
                   "value_length", "sliding_window"]


# -- geometry --------------------------------------------------------------------------------------------
def launch_values(results: pd.DataFrame, metrics: dict[str, str]) -> pd.DataFrame:
    """One row per launch (LAUNCH), one column per named metric (renamed), from its first row."""
    picked = results.loc[results["metric"].isin(list(metrics)) & results["value"].notna(), LAUNCH + ["metric", "value"]]
    wide = picked.groupby(LAUNCH + ["metric"], dropna=False, sort=False)["value"].first().unstack("metric")
    return wide.reindex(columns=list(metrics)).rename(columns=metrics).reset_index()


def on_launch(rows: pd.DataFrame, values: pd.DataFrame) -> pd.DataFrame:
    """`values` (keyed by LAUNCH) aligned to `rows`."""
    joined = rows[LAUNCH].merge(values, on=LAUNCH, how="left")
    return joined.drop(columns=LAUNCH).set_axis(rows.index)


def geometry_columns(rows: pd.DataFrame, results: pd.DataFrame) -> pd.DataFrame:
    """GEOMETRY_FIELDS, params_b, file_weight_mib and geometry_source for each row, from its launch's
    geometry_* rows: measured launches read them from the model's own files, published ones from the
    configs/models entry their model name matches (written beside the seeds' figures by the collect side)."""
    names = {f"geometry_{f}": f for f in GEOMETRY_FIELDS + ["params_b", "weight_mib"]}
    out = on_launch(rows, launch_values(results, names)).rename(columns={"weight_mib": "file_weight_mib"})
    notes = results.loc[results["metric"].eq(M.geometry_attention_layers), LAUNCH + ["note"]].drop_duplicates(LAUNCH)
    source = on_launch(rows, notes)["note"]
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


def text_of(values: pd.Series, spec: str) -> pd.Series:
    """Numbers formatted for a table cell; a string Series even when empty."""
    return values.map(spec.format).astype(str)


def engine_fact(rows: pd.DataFrame, column: str) -> pd.Series:
    """A fact about the engine behind each row (results/store.py ENGINE_FACTS); false where unknown."""
    return rows[column].astype("boolean").fillna(False).astype(bool)


def tp_of(rows: pd.DataFrame) -> pd.Series:
    return pd.to_numeric(rows["tp"], errors="coerce").fillna(1).clip(lower=1)


def cell_values(results: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One value per cell (CELL) for `metric`; repeats of the very same cell are reduced by their median."""
    picked = results.loc[(results["metric"] == metric) & results["value"].notna(), CELL + ["value"]]
    return picked.groupby(CELL, dropna=False, sort=False)["value"].median().reset_index()
