"""The seeds' tables, regenerated in each post's own layout (report/layouts.py) from the published rows, with
the rows of any node measured with the post's method beside the post's."""

from __future__ import annotations

import pandas as pd

from stackbench.report import layouts
from stackbench.report.headline import at_headline_cap
from stackbench.report.layouts import Layout
from stackbench.report.table import CELL_FIELDS, MISSING, Table, finish, format_cell, present
from stackbench.results import basis
from stackbench.results.judged import single_stream
from stackbench.results.metrics import M
from stackbench.results.store import records_of, row_tuples


def _change(before: dict | None, after: dict | None) -> str:
    """The seeds' 'change' column: ÷5, ×4.71, +1%, 0."""
    if before is None or after is None or not (present(before["value"]) and present(after["value"])):
        return MISSING
    ratio = after["value"] / before["value"]
    if ratio == 1:
        return "0"
    if ratio == 0:
        return "→ 0"
    if abs(ratio - 1) < 0.1:
        return f"{(ratio - 1) * 100:+.0f}%"
    return f"×{ratio:.3g}" if ratio > 1 else f"÷{1 / ratio:.3g}"




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
    return present(value) and value != "unknown"


def matches_post(measured: pd.DataFrame, post: dict) -> pd.Series:
    """The measured rows whose launch is the post row's own: the same stack, speculative method and depth,
    wherever the post states them (a field the post leaves unstated matches any launch)."""
    keep = pd.Series(True, index=measured.index)
    for name in LAUNCH_MATCH:
        if name in measured.columns and _stated(post.get(name)):
            keep &= measured[name].map(lambda v, want=post[name]: present(v) and _same_value(v, want))
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
            if present(concurrency):
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
            hits = hits[hits["concurrency"] == (post["concurrency"] if present(post["concurrency"]) else 1)]
            cap = post.get("power_cap_w")
            hits = hits[hits["power_cap_w"] == cap] if present(cap) else _one_cap(hits)
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
    if unit in (None, "status") or not present(record.get("value")):
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
        column_keys.setdefault(column, set()).add((metric, concurrency if present(concurrency) else None))
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
            raw.append(hits[0]["value"] if len(hits) == 1 and present(hits[0]["value"]) else None)
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
    if len(beside) and layout.aggregate != "wall" and M.aggregate_tps in set(records["metric"]):
        caveats.append(f"aggregate: the post's is the sum of its streams' decode rates, TTFT excluded; the {SAME_METHOD} "
                       f"rows show {layouts.measured_metric(layout, M.aggregate_tps)}, formed the same way.")
    return finish(table, records, SEED_AXES, caveats)
