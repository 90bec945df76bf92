"""Tables built from the results contract, each with caveats generated from its own rows.

A Table keeps, per display row, the result records behind it, so the caveat generator sees the real
basis of every cell and not a summary of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from .. import basis

# Headline metrics of the cross-stack table, in column order, with their display names.
FOUR_WAY_METRICS = {
    "decode_tps": "decode tok/s",
    "aggregate_tps": "aggregate tok/s",
    "e2e_tps": "end-to-end tok/s",
    "prefill_tps": "prefill tok/s",
    "ttft_s": "TTFT s",
    "tpot_ms": "TPOT ms",
    "accept_len": "accept len",
    "kv_pool_tokens": "KV pool tokens",
    "vram_mib": "VRAM MiB",
    "power_w": "power W",
    "energy_j_per_token": "J/token",
}
FOUR_WAY_KEYS = ["source", "stack", "variant", "spec_tokens", "power_cap_w", "workload", "concurrency"]


@dataclass
class Table:
    table_id: str
    title: str
    ref: str
    columns: list[str]
    rows: list[list[str]]
    raw_rows: list[list[float | None]]  # the numbers behind the cells, for CSV
    caveats: list[str] = field(default_factory=list)
    legend: list[str] = field(default_factory=list)


def format_number(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if float(value).is_integer() or abs(value) >= 10_000:
        return str(int(round(value)))
    return f"{float(value):.4g}"  # four significant digits: 171.8, 35.7, 2.811, 0.8182


def format_cell(record: pd.Series) -> str:
    """One figure as a table shows it: the value, its spread or range, a marker for its stat, or its status."""
    if record["status"] not in ("ok", None) and not _present(record["value"]):
        return record["status"]
    value, low, high = record["value"], record["value_min"], record["value_max"]
    if record["stat"] == "range" and _present(low):
        text = f"{format_number(low)}–{format_number(high)}"
    elif _present(low):
        text = f"{format_number(value)} ({format_number(low)}–{format_number(high)})"
    else:
        text = format_number(value)
    if record["status"] not in ("ok", None):
        text = f"{record['status']}: {text}"
    return text + basis.stat_marker(record["stat"]) + (basis.WIDE_MARKER if basis.is_wide(record) else "")


def _present(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _change(before: pd.Series | None, after: pd.Series | None) -> str:
    """The seeds' 'change' column: ÷5, ×4.71, +1%, 0."""
    if before is None or after is None or not (_present(before["value"]) and _present(after["value"])):
        return "—"
    ratio = after["value"] / before["value"]
    if ratio == 1:
        return "0"
    if ratio == 0:
        return "→ 0"
    if abs(ratio - 1) < 0.1:
        return f"{(ratio - 1) * 100:+.0f}%"
    return f"×{ratio:.3g}" if ratio > 1 else f"÷{1 / ratio:.3g}"


def _finish(table: Table, records: pd.DataFrame, axes: tuple[str, ...]) -> Table:
    table.caveats = [c.text() for c in basis.caveats(records, "row_no", axes)]
    wide = records["note"].fillna("").astype(str).str.startswith(basis.WIDE_NOTE).any()
    table.legend = basis.marker_legend(records["stat"].tolist(), wide=bool(wide))
    return table


def seed_table(results: pd.DataFrame, table_id: str) -> Table:
    """Regenerate one of the seeds' tables from the published rows, in the post's row and column order."""
    records = results[results["table_id"] == table_id].copy()
    if records.empty:
        raise KeyError(f"no published rows for table {table_id!r}")
    row_labels = list(dict.fromkeys(records["row_label"]))
    has_cols = records["col_label"].notna().any()
    col_labels = list(dict.fromkeys(records["col_label"].fillna("value"))) if has_cols else ["value"]
    records["col_key"] = records["col_label"].fillna("value") if has_cols else "value"
    records["row_no"] = records["row_label"].map({label: i + 1 for i, label in enumerate(row_labels)})
    with_change = col_labels == ["before", "after"]
    columns = ["", *col_labels] + (["change"] if with_change else [])
    rows, raw_rows = [], []
    for label in row_labels:
        mine = records[records["row_label"] == label]
        cells, raw = [label], [None]
        by_col = {}
        for col in col_labels:
            hit = mine[mine["col_key"] == col]
            by_col[col] = hit.iloc[0] if len(hit) else None
            cells.append(" / ".join(format_cell(r) for _, r in hit.iterrows()) if len(hit) else "")
            raw.append(hit.iloc[0]["value"] if len(hit) else None)
        if with_change:
            cells.append(_change(by_col["before"], by_col["after"]))
            raw.append(None)
        rows.append(cells)
        raw_rows.append(raw)
    first = records.iloc[0]
    table = Table(table_id, first["table_title"] or table_id, "; ".join(dict.fromkeys(records["ref"])), columns, rows, raw_rows)
    # The axes of a seed table are what its rows and columns were chosen to vary.
    axes = ("variant", "workload", "concurrency", "metric", "spec_tokens", "spec_method", "power_cap_w")
    if table_id.endswith("generations"):
        axes += ("model", "engine_version", "engine_image", "quant", "kv_dtype", "context_len")
    return _finish(table, records, axes)


def four_way_table(results: pd.DataFrame, node: str) -> Table | None:
    """The cross-stack summary for one node: one row per (source, stack, variant, cap, workload, concurrency)."""
    records = results[(results["node"] == node) & results["metric"].isin(FOUR_WAY_METRICS)].copy()
    if records.empty:
        return None
    metrics = [m for m in FOUR_WAY_METRICS if m in set(records["metric"])]
    keys = records[FOUR_WAY_KEYS].astype(object).where(records[FOUR_WAY_KEYS].notna(), None)
    records["row_key"] = [tuple(k) for k in keys.itertuples(index=False)]
    order = sorted(dict.fromkeys(records["row_key"]), key=lambda k: tuple("" if v is None else str(v) for v in k))
    records["row_no"] = records["row_key"].map({k: i + 1 for i, k in enumerate(order)})
    columns = ["source", "stack", "variant", "cap W", "workload", "conc."] + [FOUR_WAY_METRICS[m] for m in metrics]
    # One pass over the records (grouped), not one filter per display row: tables of 10^5 rows stay linear.
    by_cell: dict[tuple, list[dict]] = {}
    for record in records.to_dict("records"):
        by_cell.setdefault((record["row_key"], record["metric"]), []).append(record)
    rows, raw_rows = [], []
    for key in order:
        source, stack, variant, spec_tokens, cap, workload, conc = key
        cells = [source, stack, variant, format_number(cap) if cap is not None else "—", workload,
                 format_number(conc) if conc is not None else "—"]
        raw = [None] * len(cells)
        for metric in metrics:
            hits = by_cell.get((key, metric), [])
            cells.append(" / ".join(format_cell(pd.Series(r)) for r in hits))
            raw.append(hits[0]["value"] if hits else None)
        rows.append(cells)
        raw_rows.append(raw)
    refs = "; ".join(sorted(set(records["ref"])))
    table = Table(f"four-way-{node}", f"Cross-stack comparison on {node}", refs, columns, rows, raw_rows)
    return _finish(table, records, axes=("source", "stack", "variant", "workload", "concurrency", "metric", "power_cap_w", "spec_tokens", "spec_method"))


def frame_table(frame: pd.DataFrame, table_id: str, title: str, ref: str, caveats: list[str] | None = None) -> Table:
    """A derived table (analysis output) in the same shape as the others, for Markdown, CSV and HTML."""
    columns = [str(c) for c in frame.columns]
    rows, raw_rows = [], []
    for record in frame.itertuples(index=False):
        cells, raw = [], []
        for value in record:
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            cells.append(format_number(value) if number else ("" if value is None else str(value)))
            raw.append(value if number else None)
        rows.append(cells)
        raw_rows.append(raw)
    return Table(table_id, title, ref, columns, rows, raw_rows, caveats=list(caveats or []))
