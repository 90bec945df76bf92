"""Tables built from the results contract, each with caveats generated from its own rows.

A Table keeps, per display row, the result records behind it, so the caveat generator sees the real
basis of every cell and not a summary of it. Three kinds: the per-node headline (one row per stack
variant at the node's canonical cells), the seeds' tables in each post's own layout, and derived
(analysis) tables.
Every kind goes through the one formatter (format_cell) and the one caveat path (results/basis.py).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from stackbench.report import layouts
from stackbench.report.layouts import Layout
from stackbench.results import basis, metrics, published
from stackbench.results.judged import single_stream
from stackbench.results.store import IDENTITY_COLUMNS, MEASURED, records_of, row_tuples

MISSING = "—"


@dataclass(frozen=True)
class HeadlineColumn:
    title: str
    metric: str
    cell: str  # "single": concurrency 1; "single-or-unset": 1 or not stated; "highest": the variant's highest; "any"
    scale: float = 1.0  # display unit: TTFT is stored in s, read in ms


# The figures a seed post puts in its own comparison table, in the metric registry's order.
HEADLINE = [HeadlineColumn(m.headline.title, m.name, m.headline.cell, m.headline.scale) for m in metrics.HEADLINE]
HEADLINE_METRICS = [c.metric for c in HEADLINE]
CEILING_COLUMN = "% of decode ceiling"
OUTPUTS_COLUMN = "outputs"
# The quality column: the accuracy set's share right (Wilson interval, n) and the mean KLD from the node's quality
# reference with its interval, where each was measured (analysis.correctness accuracy_text).
ACCURACY_COLUMN = "quality [95% CI]"
NOT_SAME_OUTPUT = "≠"  # on the speed figures of a variant whose outputs differ from no-spec, loop, or ran other lengths
SLOWED_GPU = "🌡"  # on a figure measured on a GPU slowed by thermal, HW slowdown or power brake (analysis.slowed_cells)
HEADLINE_KEYS = ["source", "post", "stack", "variant"]
# What format_cell reads from a record.
CELL_FIELDS = ["source", "metric", "value", "value_min", "value_max", "stat", "status", "note", "concurrency"]
# What the headline reads of a record: its cell, figure and basis. The other columns are left behind before the
# first filter, which would copy each of them.
HEADLINE_READS = list(dict.fromkeys([*IDENTITY_COLUMNS, *CELL_FIELDS, "ref", "not_for_ranking", "gpu_count",
                                     *basis.WHY_IT_MATTERS]))


def node_gpus(records: pd.DataFrame) -> int | None:
    """The node's GPU count as its rows state it: the measured rows', else the posts'; None where none says."""
    if "gpu_count" not in records:
        return None
    counts = pd.to_numeric(records["gpu_count"], errors="coerce")
    mine = counts[records["source"].isin(MEASURED)].dropna()
    counts = mine if len(mine) else counts.dropna()
    return int(counts.max()) if len(counts) else None


def column_title(column: HeadlineColumn, gpus: int | None) -> str:
    """A headline column's title; the node's summed power says over how many GPUs ("power W, 2 GPUs"), beside
    "power W per GPU", so a two-GPU sum is never read as one GPU's draw."""
    if column.metric == "power_w" and gpus:
        return f"power W, {gpus} GPU{'s' if gpus > 1 else ''}"
    return column.title


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
    written_whole: bool = False  # True: its CSV and Parquet come from the whole frame, written in the background


def _present(value) -> bool:
    return value is not None and value is not pd.NA and not (isinstance(value, float) and math.isnan(value))


def format_number(value, exact: bool = False) -> str:
    """Three significant digits (171.83 -> 172, 0.39421 -> 0.394, 2.8113 -> 2.81); whole numbers of 100
    and more print whole. `exact` keeps a transcribed figure as its post wrote it (171.8 stays 171.8)."""
    if not _present(value):
        return ""
    value = float(value)
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if exact:
        return f"{value:g}" if abs(value) < 1e6 else str(int(round(value)))
    if value.is_integer() or abs(value) >= 100:
        return str(int(round(value)))
    return f"{value:.3g}"


def format_cell(record, scale: float = 1.0, suffix: str = "", markers: bool = True) -> str:
    """One figure as a table shows it: the value, its spread or range, a marker for its stat, or its status."""
    status = record.get("status") or "ok"
    if status != "ok" and not _present(record.get("value")):
        return status
    exact = record.get("source") == "published"

    def number(x):
        return format_number(x * scale if _present(x) else x, exact) + suffix

    value, low, high = record.get("value"), record.get("value_min"), record.get("value_max")
    if record.get("stat") == "range" and _present(low):
        text = f"{format_number(low * scale, exact)}–{number(high)}"
    elif _present(low):
        text = f"{number(value)} ({format_number(low * scale, exact)}–{format_number(high * scale, exact)})"
    else:
        text = number(value)
    if status != "ok":
        text = f"{status}: {text}"
    if not markers:
        return text
    return text + basis.stat_marker(record.get("stat")) + (basis.WIDE_MARKER if basis.is_wide(record) else "")


def _change(before: dict | None, after: dict | None) -> str:
    """The seeds' 'change' column: ÷5, ×4.71, +1%, 0."""
    if before is None or after is None or not (_present(before["value"]) and _present(after["value"])):
        return MISSING
    ratio = after["value"] / before["value"]
    if ratio == 1:
        return "0"
    if ratio == 0:
        return "→ 0"
    if abs(ratio - 1) < 0.1:
        return f"{(ratio - 1) * 100:+.0f}%"
    return f"×{ratio:.3g}" if ratio > 1 else f"÷{1 / ratio:.3g}"


def _finish(table: Table, records: pd.DataFrame, axes: tuple[str, ...], extra_caveats: list[str] = ()) -> Table:
    table.caveats = [c.text() for c in basis.caveats(records, "row_no", axes)] + list(extra_caveats)
    wide = records["note"].fillna("").astype(str).str.startswith(basis.WIDE_NOTE).any()
    table.legend = [_peak_line(line, records) for line in basis.marker_legend(records["stat"].tolist(), wide=bool(wide))]
    return table


RATE_UNITS = ("tok/s", "req/s")


def _peak_line(line: str, records: pd.DataFrame) -> str:
    """The peak marker's line in the words of the metrics it marks: a peak of memory or power is the highest
    reading, not a throughput."""
    marker, words = basis.STAT_MARKERS["peak"]
    if not line.startswith(f"{marker} ") or "unit" not in records.columns:
        return line
    units = set(records.loc[records["stat"] == "peak", "unit"].dropna())
    if not units or units <= set(RATE_UNITS):
        return line
    named = ", ".join(sorted(units))
    return (f"{marker} peak: the highest reading ({named}), not a typical one" if not units & set(RATE_UNITS)
            else f"{marker} peak, not typical ({named})")


# -- the seeds' tables ------------------------------------------------------------------------------------
# The axes of a seed table are what its rows and columns were chosen to vary.
SEED_AXES = ("variant", "workload", "concurrency", "metric", "spec_tokens", "spec_method", "power_cap_w")


SAME_METHOD = "same method"
SHOWN_BARE = (None, "ratio", "status", "tokens")  # units a seed table's measured cell shows without a suffix
LAUNCH_KEYS = ["ref", "node", "stack", "variant"]
# Launches that ran a post's method workload but not the post row's stack, method or depth: a block of
# their own under the post's rows, never a "same method" row beside it.
OTHER_LAUNCHES = "other launches on the same workload (stack, method or depth differ from the post row's)"
LAUNCH_MATCH = ("stack", "spec_method", "spec_tokens")
# What a seed table reads of a record: its figure (format_cell), unit, cell and launch (matches_post); as dicts,
# only these: converting a record's 60 columns, 36 tables over, costs more than the rest of the tables.
SEED_FIELDS = [*CELL_FIELDS, "unit", "row_label", "col_key", *LAUNCH_MATCH]
# What a seed table reads of a published record: its other columns are left behind by the first filter.
SEED_READS = list(dict.fromkeys(["table_id", "table_title", "col_label", "ref", *SEED_FIELDS, *LAUNCH_KEYS, "workload",
                                 *basis.WHY_IT_MATTERS]))


def _stated(value) -> bool:
    return _present(value) and value != "unknown"


def matches_post(measured: pd.DataFrame, post: dict) -> pd.Series:
    """The measured rows whose launch is the post row's own: the same stack, speculative method and depth,
    wherever the post states them (a field the post leaves unstated matches any launch)."""
    keep = pd.Series(True, index=measured.index)
    for name in LAUNCH_MATCH:
        if name in measured.columns and _stated(post.get(name)):
            keep &= measured[name].map(lambda v, want=post[name]: _present(v) and _same_value(v, want))
    return keep


def _same_value(a, b) -> bool:
    """3 and 3.0 alike (a depth read from a nullable column); text as text."""
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _method_rows(measured: pd.DataFrame | None, layout: Layout, column_keys: dict[str, set[tuple]],
                 posts: list[dict]) -> pd.DataFrame:
    """The measured records that stand beside a post's table: per launch that ran one of the table's method
    workloads, the records matching a column's (metric, concurrency); a column the post gives without a
    concurrency (a profile's acceptance, a launch's pool) takes the launch's own row, else the method's c1.
    Each record gets its display row's label, its column and `own`: whether its launch is one of the post
    rows' own (matches_post)."""
    if measured is None or measured.empty or not layout.method:
        return pd.DataFrame()
    ran = measured[measured["workload"].isin(layout.method)]
    launches = ran[LAUNCH_KEYS].drop_duplicates()
    mine = measured.merge(launches, on=LAUNCH_KEYS)
    mine = mine[mine["workload"].isin(layout.method) | mine["workload"].isna()]
    # One power cap per launch, as the headline picks it (uncapped where it ran uncapped, else its highest):
    # a post's column holds one figure, and a cap sweep's others are in the analysis section.
    cells = mine["workload"].notna()
    mine = mine[~cells | at_headline_cap(mine, LAUNCH_KEYS, cells)]
    picked = []
    for column, keys in column_keys.items():
        for metric, concurrency in keys:
            # The post's aggregate as the post formed it; the row shown under the post's metric, its own named.
            rows = mine[mine["metric"] == layouts.measured_metric(layout, metric)].assign(metric=metric)
            if _present(concurrency):
                hits = rows[rows["workload"].notna() & (rows["concurrency"] == concurrency)]
            else:
                own = rows[rows["workload"].isna()]  # the launch's own figure (pool, VRAM)
                at_one = rows[rows["workload"].notna() & single_stream(rows)]
                has_own = own[LAUNCH_KEYS].drop_duplicates().assign(has_own=True)
                at_one = at_one.merge(has_own, on=LAUNCH_KEYS, how="left")
                hits = pd.concat([own, at_one[at_one["has_own"].isna()].drop(columns="has_own")])
            picked.append(hits.assign(col_key=column))
    rows = pd.concat(picked, ignore_index=True) if picked else pd.DataFrame()
    if rows.empty:
        return rows
    labels = {}
    for key, group in ran.groupby(LAUNCH_KEYS, dropna=False):
        own = any(matches_post(group.head(1), post).iloc[0] for post in posts)
        labels[key] = (_method_label(key, group), own) if own else (_method_label(key, group, other=True), own)
    found = [labels.get(k) for k in row_tuples(rows[LAUNCH_KEYS])]
    rows["row_label"] = [f[0] if f else None for f in found]
    rows["own"] = [f[1] if f else None for f in found]
    return rows[rows["row_label"].notna()]


def at_headline_cap(rows: pd.DataFrame, keys: list[str], per_cell: pd.Series) -> pd.Series:
    """True on the rows at the one power cap a table shows per group of `keys`: uncapped where the group ran
    a cell (`per_cell`) uncapped, else its highest cap. `power_cap_w` is the cap applied (the queries give a
    refused cap as none, analysis.common.applied_cap); a sweep's other caps are in the analysis section."""
    by = [rows[k] for k in keys]
    uncapped = (per_cell & rows["power_cap_w"].isna()).groupby(by, dropna=False).transform("any")
    top = rows["power_cap_w"].where(per_cell).groupby(by, dropna=False).transform("max")
    return (uncapped & rows["power_cap_w"].isna()) | (~uncapped & (rows["power_cap_w"] == top))


def _one_cap(rows: pd.DataFrame) -> pd.DataFrame:
    """Per launch, the cells at the headline's power cap."""
    return rows[at_headline_cap(rows, LAUNCH_KEYS, pd.Series(True, index=rows.index))]


def _keyed_method_rows(measured: pd.DataFrame | None, layout: Layout, records: pd.DataFrame) -> pd.DataFrame:
    """A table keyed by its rows (content class, scene, power cap): under each post row that names the
    workload reproducing it (layout.method_rows), one entry per launch that ran that workload, its cells
    matched to the post row's own cells by metric, concurrency (c1 where the post gives none) and, where the
    post row states one, power cap; a before/after table fills only `method_column`. Each record gets its
    display label and `after`, the post row it stands under."""
    if measured is None or measured.empty or not layout.method_rows:
        return pd.DataFrame()
    picked = []
    for label, workload in layout.method_rows.items():
        cells = measured[(measured["workload"] == workload)]
        if cells.empty:
            continue
        for post in records_of(records[records["row_label"] == label]):
            if layout.method_column and post["col_key"] != layout.method_column:
                continue
            hits = cells[cells["metric"] == layouts.measured_metric(layout, post["metric"])]
            hits = hits[hits["concurrency"] == (post["concurrency"] if _present(post["concurrency"]) else 1)]
            cap = post.get("power_cap_w")
            hits = hits[hits["power_cap_w"] == cap] if _present(cap) else _one_cap(hits)
            if hits.empty:
                continue
            own = matches_post(hits, post)
            labels = {key: f"{label} · {_method_label(key, group)}" for key, group in cells.groupby(LAUNCH_KEYS, dropna=False)}
            # Another launch of the post row's stack stands under its label; one of another stack under the label
            # of the post row of its own stack (and method, depth) where the table has one, else under its
            # workload's name: never under another stack's label.
            others = {key: f"{_label_for(group.head(1), post, label, records, workload)} · "
                           f"{_method_label(key, group, other=True)}"
                      for key, group in cells.groupby(LAUNCH_KEYS, dropna=False)}
            keys = row_tuples(hits[LAUNCH_KEYS])
            picked.append(hits.assign(metric=post["metric"], col_key=post["col_key"], after=[label if o else None for o in own],
                                      row_label=[(labels if o else others)[k] for k, o in zip(keys, own)]))
    return pd.concat(picked, ignore_index=True) if picked else pd.DataFrame()


def _unit_group(record: dict) -> str:
    """What a seed table's column may hold together: figures of one unit; a unit-less figure (a ratio) by its
    metric, and a text or status by none."""
    unit = record.get("unit")
    if unit in (None, "status") or not _present(record.get("value")):
        return ""
    return unit if unit not in SHOWN_BARE else str(record.get("metric"))


def _label_for(launch: pd.DataFrame, post: dict, label: str, records: pd.DataFrame, workload: str) -> str:
    """The label another launch (not the post row's own) stands under in a keyed seed table."""
    stack = launch["stack"].iloc[0] if "stack" in launch.columns else None
    if not _stated(post.get("stack")) or _same_value(post["stack"], stack):
        return label
    return _own_label(launch, records) or workload


def _own_label(launch: pd.DataFrame, records: pd.DataFrame) -> str | None:
    """The label of the table's post row whose stack the post states and whose launch `launch` is
    (matches_post), where there is one."""
    for post in records_of(records.drop_duplicates("row_label")):
        if _stated(post.get("stack")) and matches_post(launch, post).iloc[0]:
            return post["row_label"]
    return None


def _seed_records(records: pd.DataFrame) -> list[dict]:
    return records_of(records[[f for f in SEED_FIELDS if f in records.columns]])


def _method_label(key: tuple, cells: pd.DataFrame, other: bool = False) -> str:
    """'<node>, same method (<stack> / <variant>; 407 prompt / 512 output tokens)': the lengths measured, exact,
    since the post's own may be approximate; '<node>, same workload, other launch (...)' for a launch that is
    not the post row's own (matches_post)."""
    _, node, stack, variant = key
    lengths = []
    for field_name, word in (("prompt_tokens", "prompt"), ("output_tokens", "output")):
        values = sorted({int(v) for v in cells[field_name].dropna()}) if field_name in cells else []
        if values:
            lengths.append(f"{values[0]}" + (f"-{values[-1]}" if len(values) > 1 else "") + f" {word}")
    what = f"{stack} / {variant}" + (f"; {' / '.join(lengths)} tokens" if lengths else "")
    return f"{node}, {'same workload, other launch' if other else SAME_METHOD} ({what})"


def seed_table(results: pd.DataFrame, table_id: str, layout: Layout | None = None,
               measured: pd.DataFrame | None = None) -> Table:
    """Regenerate one of the seeds' tables from the published rows, in its post's own layout: the post's
    header row and row order, its text cells kept as text, its figures written as the post writes them.

    With `measured` rows, every launch that ran the table's method workload (layout.method) gets a row of
    its own after the post's, labelled "<node>, same method", its cells matched to the post's columns by
    metric and concurrency; the caveats then name what still differs (hardware, engine version, ...)."""
    records = results.loc[results["table_id"] == table_id, [c for c in results.columns if c in SEED_READS]]
    if records.empty:
        raise KeyError(f"no published rows for table {table_id!r}")
    layout = layout or Layout()
    row_labels = layout.row_labels or list(dict.fromkeys(records["row_label"]))
    row_labels += [r for r in dict.fromkeys(records["row_label"]) if r not in row_labels]
    if layout.columns:
        columns = list(layout.columns)
    else:
        col_labels = list(dict.fromkeys(records["col_label"].dropna())) or ["value"]
        columns = ["", *col_labels] + (["change"] if col_labels == ["before", "after"] else [])
    change = layout.change or ({"column": "change", "before": "before", "after": "after"} if "change" in columns else None)
    records["col_key"] = records["col_label"].fillna(columns[1])
    column_keys: dict[str, set[tuple]] = {}
    for column, metric, concurrency in row_tuples(records[["col_key", "metric", "concurrency"]].drop_duplicates()):
        column_keys.setdefault(column, set()).add((metric, concurrency if _present(concurrency) else None))
    posts = _seed_records(records)
    beside = _method_rows(measured, layout, column_keys, posts) if not layout.method_rows else pd.DataFrame()
    keyed = _keyed_method_rows(measured, layout, records)
    others: list[str] = []
    if len(keyed):
        own = keyed[keyed["after"].notna()]
        for label in reversed(list(dict.fromkeys(own["row_label"]))):  # each under the post row it reproduces
            under = own.loc[own["row_label"] == label, "after"].iloc[0]
            row_labels.insert(row_labels.index(under) + 1, label)
        others = list(dict.fromkeys(keyed.loc[keyed["after"].isna(), "row_label"]))
        beside = keyed.drop(columns="after")
    elif len(beside):
        row_labels += list(dict.fromkeys(beside.loc[beside["own"], "row_label"]))
        others = list(dict.fromkeys(beside.loc[~beside["own"].astype(bool), "row_label"]))
        beside = beside.drop(columns="own")
    if others:  # the block under the table, titled by its own first row
        row_labels += [OTHER_LAUNCHES, *others]
    if len(beside):
        records = pd.concat([records, beside], ignore_index=True)
    records["row_no"] = records["row_label"].map({label: i + 1 for i, label in enumerate(row_labels)})
    by_cell: dict[tuple, list[dict]] = {}
    for record in _seed_records(records):
        by_cell.setdefault((record["row_label"], record["col_key"]), []).append(record)

    def shown(record: dict, markers: bool = True, unit: bool = True) -> str:
        fmt = layout.formats.get(record["metric"], {})
        suffix = fmt.get("suffix", "")
        # Every figure, the post's and a measured one, carries its unit where the layout gives none for it (a
        # table mixing MiB and a ratio says which is which); inside the post's wording (templated: "3.2s 完整轮")
        # the post writes its own, and a rescaled one's unit is the layout's to say.
        if unit and not suffix and fmt.get("scale", 1.0) == 1.0 and record.get("unit") not in SHOWN_BARE:
            suffix = f" {record['unit']}"
        elif unit and not suffix and name_bare and record.get("unit") in ("ratio", "tokens"):
            suffix = f" ({record['metric']})"  # a bare count or ratio in a column of other units says what it is
        return format_cell(record, fmt.get("scale", 1.0), suffix, markers)

    def templated(template: str, hits: list[dict]) -> str:
        # Figures go into the post's wording bare; their stat markers follow the whole cell.
        markers = "".join(dict.fromkeys(basis.stat_marker(h.get("stat")) for h in hits))
        return template.format(**{h["metric"]: shown(h, markers=False, unit=False) for h in hits}) + markers

    # One metric per column: a column whose figures come in several units (a MiB figure and a ratio, accept
    # lengths and tok/s) is shown as one column per unit, titled with it (a bare ratio by its metric). A table
    # whose rows are its metrics (each row's figures in one unit, as the post's "before / after" tables) is
    # not split: there the unit belongs to the row, and every figure carries it.
    groups: dict[str, dict[str, None]] = {}
    row_units: dict[str, set[str]] = {}
    for label, column in ((label, column) for label in row_labels for column in columns[1:]):  # in the table's order
        for hit in by_cell.get((label, column), []):
            if _unit_group(hit):  # a status or text goes with the column's first unit
                groups.setdefault(column, {})[_unit_group(hit)] = None
                row_units.setdefault(label, set()).add(_unit_group(hit))
    name_bare = False
    if all(len(units) == 1 for units in row_units.values()):
        name_bare = len(set().union(*row_units.values())) > 1 if row_units else False
        groups = {}
    display = []
    for column in columns[1:]:
        found = list(groups.get(column, {})) if not (change and column == change["column"]) else []
        display += [(f"{column} ({group})" if column else group, column, group, i == 0) for i, group in enumerate(found)] \
            if len(found) > 1 else [(column, column, None, True)]
    rows, raw_rows = [], []
    for label in row_labels:
        cells, raw = [label], [None]
        for _, column, group, first in display:
            every = by_cell.get((label, column), [])
            hits = [h for h in every if group is None or _unit_group(h) == group or (first and not _unit_group(h))]
            text = layout.text.get(label, {}).get(column) if first else None
            if text is None and change and column == change["column"]:
                before, after = by_cell.get((label, change["before"])), by_cell.get((label, change["after"]))
                text = _change(before[0] if before else None, after[0] if after else None)
            elif text is None and label in layout.templates and every:
                # The post's wording holds all of the cell's figures: in the sub-column of its first figure's unit.
                text = templated(layout.templates[label], every) if group is None or _unit_group(every[0]) == group else ""
            elif text is None:
                text = " / ".join(shown(h) for h in hits)
            cells.append(text)
            raw.append(hits[0]["value"] if len(hits) == 1 and _present(hits[0]["value"]) else None)
        rows.append(cells)
        raw_rows.append(raw)
    columns = [columns[0], *(title for title, *_ in display)]
    title = records["table_title"].iloc[0] or table_id
    refs = list(dict.fromkeys(records.loc[records["source"] == "published", "ref"]))
    if len(beside):
        methods = layout.method or list(dict.fromkeys(layout.method_rows.values()))
        refs.append(f"{SAME_METHOD}: measured with {', '.join(methods)} (runs {', '.join(dict.fromkeys(beside['ref']))})")
    table = Table(table_id, title, "; ".join(refs), columns, rows, raw_rows)
    caveats = list(layout.caveats) + ([f"no measured row: {layout.no_row}."] if layout.no_row else [])
    if len(beside) and layout.aggregate != "wall" and "aggregate_tps" in set(records["metric"]):
        caveats.append(f"aggregate: the post's is the sum of its streams' decode rates, TTFT excluded; the {SAME_METHOD} "
                       f"rows show {layouts.measured_metric(layout, 'aggregate_tps')}, formed the same way.")
    return _finish(table, records, SEED_AXES, caveats)


# -- the headline -------------------------------------------------------------------------------------------
def headline_records(results: pd.DataFrame, node: str) -> pd.DataFrame:
    """The records behind one node's headline: per variant, its canonical cells only.

    Canonical: concurrency 1 for single-stream rates (a rate whose concurrency is not stated is not
    single-stream), the highest concurrency left for the aggregate (render.headline_input chose it: for
    measured variants the highest all of them ran), and one power cap: uncapped where
    the variant ran uncapped, else its highest cap (a sweep's other caps are in the analysis section).
    Peaks are not typical figures and stay out, and so do the cells of a workload marked not for ranking."""
    results = results[[c for c in results.columns if c in HEADLINE_READS]]
    ranked = ~results["not_for_ranking"].fillna(False).astype(bool) if "not_for_ranking" in results else True
    rows = results[(results["node"] == node) & results["metric"].isin(HEADLINE_METRICS) & (results["status"] == "ok")
                   & (results["stat"] != "peak") & ranked].copy()
    if rows.empty:
        return rows
    rows["post"] = published.posts_of(rows["ref"]).where(rows["source"] == "published", "")
    keys = HEADLINE_KEYS
    rule = rows["metric"].map({c.metric: c.cell for c in HEADLINE})
    # The cap is chosen among the cells' figures; a launch's own figures (pool, VRAM) logged without a cap hold at it.
    per_cell = rule != "any"
    canonical_cap = at_headline_cap(rows, keys, per_cell) | (~per_cell & rows["power_cap_w"].isna())
    rows, rule = rows[canonical_cap], rule[canonical_cap]
    single = single_stream(rows)
    unset = rows["concurrency"].isna()
    highest = rows["concurrency"] == rows[rows["metric"] == "aggregate_tps"].groupby(keys, dropna=False)["concurrency"] \
        .transform("max").reindex(rows.index)
    keep = ((rule == "any") | ((rule == "single") & single) | ((rule == "single-or-unset") & (single | unset))
            | ((rule == "highest") & highest.fillna(False)))
    return rows[keep]


# A measured headline cell is a median over cells; a cell is one workload at one concurrency and prompt length.
CELL_AXES = ["workload", "concurrency", "prompt_tokens"]


def _cells_text(cells: set[tuple]) -> str:
    """'code, prose at c1': the workloads and concurrencies behind a figure."""
    workloads = ", ".join(sorted({str(w) for w, _, _ in cells}))
    levels = "/".join(f"c{int(c)}" for c in sorted({c for _, c, _ in cells if _present(c)}))
    return f"{workloads} at {levels}" if levels else workloads


def like_with_like(records: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Per headline metric, the measured records cut to the cells (CELL_AXES) every measured variant ran, so
    each measured row is a median over the same cells; and the lines that say which. A variant sharing no
    cell with the others keeps its own cells and stands apart, named with the workloads behind its row;
    where the variants left share no cell either, every row stands apart. Published rows and a launch's own
    figures (no workload) pass as they are."""
    measured = records[records["source"].isin(MEASURED) & records["workload"].notna()]
    # The set logic runs on the distinct (metric, variant, cell) combinations, a few hundred however many
    # records; each record then follows its combination's verdict.
    combo_keys = ["metric", *HEADLINE_KEYS[2:], *CELL_AXES]
    combo_of = measured.groupby(combo_keys, dropna=False, sort=False).ngroup().to_numpy()
    combos = measured[combo_keys][~pd.Series(combo_of).duplicated().to_numpy()]  # in ngroup's (first-seen) order
    axes = combos[CELL_AXES].astype(object).where(combos[CELL_AXES].notna(), None)
    variants = zip(*(combos[k].tolist() for k in HEADLINE_KEYS[2:]))
    by_metric: dict[str, dict[tuple, dict[tuple, int]]] = {}  # metric -> variant -> cell -> combination
    for combo, (metric, key, cell) in enumerate(zip(combos["metric"].tolist(), variants, row_tuples(axes))):
        by_metric.setdefault(metric, {}).setdefault(key, {})[cell] = combo
    dropped: list[int] = []
    said: dict[str, list[str]] = {}
    titles = {c.metric: c.title for c in HEADLINE}
    # In the headline's column order: the records come in no fixed order (DuckDB's parallel joins).
    for metric, cells_of in sorted(by_metric.items(), key=lambda item: HEADLINE_METRICS.index(item[0])):
        if len(cells_of) < 2:
            continue
        apart = {key for key, mine in cells_of.items()
                 if not mine.keys() & set().union(*(theirs for other, theirs in cells_of.items() if other != key))}
        rest = [key for key in cells_of if key not in apart]
        common = set.intersection(*(set(cells_of[key]) for key in rest)) if rest else set()
        if not common:
            apart, rest = set(cells_of), []
        dropped += [combo for key in rest for cell, combo in cells_of[key].items() if cell not in common]
        lines = [f"measured rows: the median over the cells every measured variant ran ({_cells_text(common)})"] if common else []
        lines += [f"{stack} / {variant} shares no cell with the other measured variants: its figure is over "
                  f"{_cells_text(set(cells_of[(stack, variant)]))}; not comparable with theirs"
                  for stack, variant in sorted(apart, key=str)]
        for line in lines:
            said.setdefault(line, []).append(titles[metric])
    keep = pd.Series(True, index=records.index)
    keep[measured.index[np.isin(combo_of, dropped)]] = False
    return records[keep], [f"{', '.join(columns)}: {line}." for line, columns in said.items()]


def headline_table(results: pd.DataFrame, node: str, ceiling_percent: dict[tuple, float] | None = None,
                   power_why: str | None = None, correctness: pd.DataFrame | None = None,
                   slowed: pd.DataFrame | None = None) -> Table | None:
    """One row per stack variant on this node at its canonical cells; the seeds' own kind of table. With
    `correctness` (analysis.correctness_by_variant) an outputs column says whether each measured variant's
    outputs equal its no-spec reference; a flagged variant's speed figures carry a marker and a caveat, and
    its row comes after the clean ones, so a fast wrong configuration never tops the table. With `slowed`
    (analysis.slowed_cells) a figure from a cell on a slowed GPU carries its own marker and caveat."""
    records, like = like_with_like(headline_records(results, node))
    if records.empty:
        return None
    records["slowed"] = "" if slowed is None or slowed.empty else \
        records[IDENTITY_COLUMNS].merge(slowed, on=IDENTITY_COLUMNS, how="left")["slowed"].fillna("").to_numpy()
    ceiling_percent = ceiling_percent or {}
    verdicts = {} if correctness is None else {
        (stack, variant): (outputs, flagged, caveat) for stack, variant, outputs, flagged, caveat in
        row_tuples(correctness.loc[correctness["node"] == node, ["stack", "variant", "outputs", "flagged", "caveat"]])}
    scored = {} if correctness is None else {
        (stack, variant): text for stack, variant, text in
        row_tuples(correctness.loc[correctness["node"] == node, ["stack", "variant", "accuracy_text"]]) if text}
    keys = records[HEADLINE_KEYS].astype(object).where(records[HEADLINE_KEYS].notna(), "")
    records["row_key"] = row_tuples(keys)
    order = sorted(dict.fromkeys(records["row_key"]),
                   key=lambda k: (k[0] not in MEASURED, k[1], k[0] in MEASURED and verdicts.get(k[2:], ("", False, ""))[1],
                                  str(k[2]), str(k[3])))  # stacks by name
    records["row_no"] = records["row_key"].map({k: i + 1 for i, k in enumerate(order)})
    # Per (row, metric), the positions of its records in plain column lists: a measured cell shows the median of
    # its values, so only the few records shown one by one become dicts (format_cell).
    by_cell: dict[tuple, list[int]] = {}
    for position, cell in enumerate(zip(records["row_key"].tolist(), records["metric"].tolist())):
        by_cell.setdefault(cell, []).append(position)
    field_values = {f: records[f].tolist() for f in CELL_FIELDS + ["slowed"]}
    values, concurrencies, slowed_by = field_values["value"], field_values["concurrency"], field_values["slowed"]
    shown_columns = [c for c in HEADLINE if any((k, c.metric) in by_cell for k in order)]
    with_ceiling = any(ceiling_percent.get((node, *k)) is not None for k in order)
    gpus = node_gpus(records)
    if gpus == 1:  # one GPU's power is the node's: one column
        shown_columns = [c for c in shown_columns if c.metric != "power_w_per_gpu"]
    power = next(c for c in HEADLINE if c.metric == "power_w")
    like = [line.replace(power.title, column_title(power, gpus)) for line in like]  # the caveats name the columns as shown
    columns = (["source", "stack", "variant"] + [column_title(c, gpus) for c in shown_columns] + ([CEILING_COLUMN] if with_ceiling else [])
               + ([ACCURACY_COLUMN] if scored else []) + ([OUTPUTS_COLUMN] if verdicts else []))
    several_workloads = False
    rows, raw_rows, flagged_lines = [], [], []
    for key in order:
        source, post, stack, variant = key
        cells = [f"published ({post})" if post else source, stack, variant]
        raw: list[float | None] = [None, None, None]
        outputs, flagged, why = verdicts.get((stack, variant), ("", False, "")) if source in MEASURED else ("", False, "")
        for column in shown_columns:
            hits = by_cell.get((key, column.metric), [])
            value = _headline_value([values[i] for i in hits])
            if source in MEASURED and len(hits) > 1:
                several_workloads = True
                text = format_number(_scaled(value, column.scale))
            else:
                # A post's figures are never averaged together: each is shown as the post gives it.
                records_shown = [{f: values_of[i] for f, values_of in field_values.items()} for i in hits]
                text = " / ".join(dict.fromkeys(format_cell(r, column.scale) for r in records_shown))
            if column.cell == "highest" and hits and _present(concurrencies[hits[0]]):
                text += f" @c{int(concurrencies[hits[0]])}"
            if flagged and text and column.cell != "any":
                text += NOT_SAME_OUTPUT
            slow = "; ".join(dict.fromkeys(slowed_by[i] for i in hits if slowed_by[i]))
            if slow and text:
                text += SLOWED_GPU
                flagged_lines.append(f"{SLOWED_GPU} {stack} / {variant} {column.title}: measured on a GPU slowed by {slow} "
                                     "(NVML clock event reasons), not the stack's speed; left out of What to run.")
            cells.append(text or MISSING)
            raw.append(_scaled(value, column.scale))
        if with_ceiling:
            percent = ceiling_percent.get((node, stack, variant)) if source in MEASURED else None
            cells.append(format_number(percent) if percent is not None else MISSING)
            raw.append(percent)
        if scored:  # a published row's quality is unknown: never another launch's score
            cells.append(scored.get((stack, variant), MISSING) if source in MEASURED else MISSING)
            raw.append(None)
        if verdicts:
            cells.append(outputs or MISSING)
            raw.append(None)
        if flagged:
            flagged_lines.append(f"{NOT_SAME_OUTPUT} {stack} / {variant}: {why}; do not rank it on the figures marked {NOT_SAME_OUTPUT}.")
        rows.append(cells)
        raw_rows.append(raw)
    refs = "; ".join(sorted(records["ref"].unique()))
    methods = [w for w in records.loc[records["source"].isin(MEASURED), "workload"].dropna().unique()
               if published.method_post(w)]
    if methods:
        refs += "; measured cells from " + ", ".join(f"{w} (post {published.method_post(w)}'s method)" for w in methods)
    table = Table(f"headline-{node}", f"Headline on {node}: one row per stack variant", refs, columns, rows, raw_rows)
    power = [f"power: not measured on this node: {power_why}."] if power_why else []
    table = _finish(table, records, ("source", "stack", "variant", "spec_method", "spec_tokens", "engine", "metric",
                                     "workload", "concurrency", "prompt_tokens", "output_tokens"), like + flagged_lines + power)
    if several_workloads:
        table.legend.append("A measured cell with several workloads behind it shows their median; the full table below has each workload.")
    return table


def _headline_value(values: list) -> float | None:
    present = [v for v in values if _present(v)]
    return float(statistics.median(present)) if present else None


def _scaled(value, scale: float):
    return value * scale if _present(value) else None


def frame_table(frame: pd.DataFrame, table_id: str, title: str, ref: str, caveats: list[str] | None = None) -> Table:
    """A derived table (analysis output) in the same shape as the others, for Markdown, CSV and HTML."""
    columns = [str(c) for c in frame.columns]
    rows, raw_rows = [], []
    for record in row_tuples(frame):
        cells, raw = [], []
        for value in record:
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            cells.append(format_number(value) if number else ("" if not _present(value) else str(value)))
            raw.append(value if number and _present(value) else None)
        rows.append(cells)
        raw_rows.append(raw)
    return Table(table_id, title, ref, columns, rows, raw_rows, caveats=list(caveats or []))
