"""Run-to-run comparison, compare-llama-bench style: only like rows are paired (every basis column but the
one that is meant to vary)."""

from __future__ import annotations

import pandas as pd

from stackbench.results.store import BASIS_COLUMNS

KEY_COLUMNS = ["node", "stack", "variant", "workload", "concurrency", "request_rate", "power_cap_w", "metric"]
# What compare reads: a million-row frame's other columns would be copied by every filter.
COMPARED_COLUMNS = list(dict.fromkeys(KEY_COLUMNS + BASIS_COLUMNS + ["status", "value"]))


def compare(baseline: pd.DataFrame, candidate: pd.DataFrame, vary: str = "engine_version") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Join two result sets only on like rows: every key and basis column equal except `vary`.

    Returns (paired rows with their ratio, unpaired rows with the basis fields that kept them apart).
    Rows are joined on one integer id of their like columns (null equals null), not on 25 string keys.
    """
    like = [c for c in KEY_COLUMNS + BASIS_COLUMNS if c != vary]
    a, b = _with_ids(*(frame.loc[frame["status"] == "ok", COMPARED_COLUMNS] for frame in (baseline, candidate)), like)
    shown = [c for c in ("node", "stack", "variant", "workload", "concurrency", "metric") if c != vary]
    # Only the columns the table shows cross the merge: carrying all of them costs most of its time.
    paired = a[shown + ["_like", vary, "value"]].merge(b[["_like", vary, "value"]], on="_like", suffixes=("_a", "_b"))
    table = paired[shown].copy()
    table[f"{vary} A"], table[f"{vary} B"] = paired[f"{vary}_a"].to_numpy(), paired[f"{vary}_b"].to_numpy()
    table["A"], table["B"] = paired["value_a"].to_numpy(), paired["value_b"].to_numpy()
    table["B/A"] = table["B"] / table["A"]
    unpaired = [_unpaired(side, frame, other, vary) for side, frame, other in (("A", a, b), ("B", b, a))]
    return table.reset_index(drop=True), pd.concat(unpaired, ignore_index=True)


def _with_ids(a: pd.DataFrame, b: pd.DataFrame, like: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both sides with `_like` and `_cell`, ids of their like columns and of their cell (KEY_COLUMNS) numbered
    over both sides at once, so equal values get equal ids on either side; null equals null."""
    columns = list(dict.fromkeys(KEY_COLUMNS + like))
    keys = pd.concat([a[columns], b[columns]], ignore_index=True)
    like_id = keys.groupby(like, dropna=False, sort=False).ngroup().to_numpy()
    cell_id = keys.groupby(KEY_COLUMNS, dropna=False, sort=False).ngroup().to_numpy()
    return (a.assign(_like=like_id[:len(a)], _cell=cell_id[:len(a)]).reset_index(drop=True),
            b.assign(_like=like_id[len(a):], _cell=cell_id[len(a):]).reset_index(drop=True))


def _unpaired(side: str, frame: pd.DataFrame, other: pd.DataFrame, vary: str) -> pd.DataFrame:
    """Rows of `frame` with no like row in `other`, each with the basis fields in which the rows of
    `other` for the same cell differ from it."""
    lonely = frame[~frame["_like"].isin(other["_like"])].reset_index(drop=True)
    basis = [c for c in BASIS_COLUMNS if c != vary]
    counterparts = other.loc[other["_cell"].isin(lonely["_cell"]), ["_cell"] + basis].drop_duplicates()
    same_cell = lonely[["_cell"] + basis].reset_index(names="row").merge(counterparts, on="_cell", suffixes=("", "_other"))
    differs = pd.DataFrame({c: ~((same_cell[c] == same_cell[f"{c}_other"]) | (same_cell[c].isna() & same_cell[f"{c}_other"].isna()))
                            for c in basis}).groupby(same_cell["row"]).any()
    names = differs.dot(pd.Index(basis) + ", ").str.rstrip(", ").reindex(lonely.index)
    out = lonely[KEY_COLUMNS + ["value"]].copy()
    out.insert(0, "side", side)
    out["basis that differs"] = names.where(names.notna() & names.ne(""), "no counterpart cell")
    return out
