"""The posts' own table layouts (data/published/*.yaml, `layout:` and `caveats:` of each group): how the
report sets a seed table out as its post does. The figures themselves are results rows (results/published.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from stackbench import config
from stackbench.results import published
from stackbench.results.metrics import M


@dataclass
class Layout:
    """How one seed table is laid out in its post, and the caveats its rows cannot carry."""

    columns: list[str] | None = None  # the post's header row; None: derived from the rows' col_label
    row_labels: list[str] = field(default_factory=list)  # in the post's order (the YAML's), whatever order rows are stored in
    change: dict | None = None  # {column, before, after}
    text: dict[str, dict[str, str]] = field(default_factory=dict)  # row label -> column -> the post's text
    templates: dict[str, str] = field(default_factory=dict)  # row label -> "{metric} MiB（余 {metric}）"
    formats: dict[str, dict] = field(default_factory=dict)  # metric -> {scale, suffix}
    caveats: list[str] = field(default_factory=list)
    # The measured workloads that reproduce the post's method for this table's figures (seed-004-short):
    # rows measured with them stand beside the post's, one per measured launch. Empty: none does.
    method: list[str] = field(default_factory=list)
    aggregate: str = "wall"  # how the post formed aggregate_tps: wall, or decode_sum (AGGREGATE_METRICS)
    # A table keyed by its rows: the post's row label -> the workload reproducing that row (content class,
    # scene, power cap); same-method entries then stand under each such row. Its workloads are in `method`.
    method_rows: dict[str, str] = field(default_factory=dict)
    method_column: str | None = None  # a before/after table: the one column a measured launch fills
    no_row: str | None = None  # why no measured row can stand beside it (a table of facts, a method not run)


def load_layouts(directory: Path) -> dict[str, Layout]:
    """table_id -> its post's layout; groups sharing a table id (one table quoted in two sections) merge."""
    layouts: dict[str, Layout] = {}
    for path in published.files(directory):
        doc = published.read(path)
        for group_no, group in enumerate(doc["groups"]):
            layout = layouts.setdefault(group["table_id"], Layout())
            labels = [{**group.get("basis", {}), **r}["row_label"] for r in group["rows"]]
            layout.row_labels += [label for label in dict.fromkeys(labels) if label not in layout.row_labels]
            spec = group.get("layout")
            if spec:
                if layout.columns is not None:
                    raise config.ConfigError(f"{path}: groups[{group_no}].layout: table {group['table_id']} has a layout already")
                layout.columns = list(spec["columns"])
                layout.change = spec.get("change")
                layout.text = spec.get("text", {})
                layout.templates = spec.get("templates", {})
                layout.formats = spec.get("formats", {})
            layout.caveats += [c for c in group.get("caveats", []) if c not in layout.caveats]
            layout.method += [m for m in _methods(group.get("method", METHOD_DEFAULT)) if m not in layout.method]
            layout.aggregate = group.get("aggregate", layout.aggregate)
            layout.method_rows.update(group.get("method_rows") or {})
            layout.method += [m for m in (group.get("method_rows") or {}).values() if m not in layout.method]
            layout.method_column = group.get("method_column", layout.method_column)
            layout.no_row = group.get("no_row", layout.no_row)
    for table_id, layout in layouts.items():
        _check_layout(table_id, layout, directory)
    return layouts


# The measured metric a post's aggregate_tps matches, by how the post formed it (groups[].aggregate).
AGGREGATE_METRICS = {"wall": M.aggregate_tps, "decode_sum": M.aggregate_decode_tps}


def measured_metric(layout: Layout, metric: str) -> str:
    """The measured metric that stands in a post's column of `metric`: its own, but for an aggregate the
    one formed as the post formed it."""
    return AGGREGATE_METRICS[layout.aggregate] if metric == M.aggregate_tps else metric


def _schema_default(name: str):
    """A group field's default, as the published schema states it (load_layouts reads the files without
    validating them again, so it reads the default from there)."""
    schema = config.load_schema("published")
    return schema["properties"]["groups"]["items"]["properties"][name].get("default")


METHOD_DEFAULT = _schema_default("method")


def _methods(value) -> list[str]:
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def _check_layout(table_id: str, layout: Layout, directory: Path) -> None:
    """A layout names only its own rows and columns: a typo would otherwise drop a text cell silently."""
    where = f"{directory}: table {table_id}: layout"
    columns = set(layout.columns or [])
    for label in list(layout.text) + list(layout.templates) + list(layout.method_rows):
        if label not in layout.row_labels:
            raise config.ConfigError(f"{where}: row {label!r} is not a row_label of the table")
    for label, cells in layout.text.items():
        for column in cells:
            if column not in columns:
                raise config.ConfigError(f"{where}.text.{label}: column {column!r} is not in layout.columns")
    for workload in layout.method:
        if not published.METHOD_WORKLOAD.match(workload):
            raise config.ConfigError(f"{where}: method {workload!r} is not a post's method workload (seed-<NNN>-<what>)")
    if layout.method_column is not None and layout.columns and layout.method_column not in columns:
        raise config.ConfigError(f"{where}: method_column {layout.method_column!r} is not in layout.columns")
    for field_name in ("column", "before", "after"):
        if layout.change and layout.change[field_name] not in columns:
            raise config.ConfigError(f"{where}.change.{field_name}: {layout.change[field_name]!r} is not in layout.columns")
