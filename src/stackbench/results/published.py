"""The seed posts' figures as data: load data/published/*.yaml into results-contract records (the posts'
own table layouts are the report's: report/layouts.py).

Each file is one post; groups are its tables. A basis field the post does not state stays unknown
(the word "unknown" for text, null for numbers): it is never filled with a guess. A row's `quote` (the
figure as the post writes it) is provenance for the seed-text check, not a result, so it stays here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import yaml

from stackbench import config
from stackbench.results import metrics
from stackbench.results.store import UNKNOWN

TEXT_BASIS = ("node", "gpu", "os", "engine", "engine_version", "engine_image", "model", "quant", "kv_dtype",
              "ttft_included", "spec_method", "workload", "variant", "thinking")


# A published ref is "<seed file> §<section>"; the seed file starts with the post's number (004_...txt).
REF_SECTION = " §"
# Measured workloads that reproduce a post's method are named seed-<NNN>-<what> (configs/workloads).
METHOD_WORKLOAD = re.compile(r"^seed-(\d{3})-")
METHOD_WORKLOAD_SQL = "^seed-[0-9]{3}-"  # the same rule for DuckDB's regexp_matches


def ref_of(seed: str, section: str) -> str:
    return f"{seed}{REF_SECTION}{section}"


def post_of(ref: str | None) -> str:
    """The post a published ref belongs to ('004'), '' for any other ref (a measured run id)."""
    if not isinstance(ref, str) or REF_SECTION not in ref:
        return ""
    seed = ref.split(REF_SECTION, 1)[0]
    number = seed.split("_", 1)[0]
    return number if number.isdigit() else ""


def section_of(ref: str) -> str:
    return ref.split(REF_SECTION, 1)[1] if isinstance(ref, str) and REF_SECTION in ref else ""


def posts_of(refs: pd.Series) -> pd.Series:
    """post_of over a column: one call per distinct ref (a handful), then a vectorized lookup."""
    return refs.map({r: post_of(r) for r in refs.dropna().unique()}).fillna("")


def method_post(workload: str | None) -> str:
    """The post whose method a measured workload reproduces ('004' for seed-004-short), else ''."""
    match = METHOD_WORKLOAD.match(workload) if isinstance(workload, str) else None
    return match[1] if match else ""


def _check_sections(doc: dict, path: Path) -> None:
    for group_no, group in enumerate(doc["groups"]):
        if group["section"] not in doc["sections"]:
            raise config.ConfigError(f"{path}: groups[{group_no}].section: {group['section']!r} is not one of the "
                                     f"file's sections ({', '.join(doc['sections'])})")


def load_file(path: Path, root: Path = Path(".")) -> list[dict]:
    doc = config.load_file(path, "published")
    _check_sections(doc, path)
    records = []
    for group_no, group in enumerate(doc["groups"]):
        for row_no, row in enumerate(group["rows"]):
            record = {**doc.get("basis", {}), **group.get("basis", {}), **row}
            record.pop("quote", None)
            where = f"{path}: groups[{group_no}].rows[{row_no}]"
            records.append(_finish(record, doc["seed"], group, where))
    return records


def _finish(record: dict, seed: str, group: dict, where: str) -> dict:
    record.update(source="published", ref=ref_of(seed, group["section"]), table_id=group["table_id"],
                  table_title=group["title"])
    for field_name in ("metric", "unit", "row_label"):
        if field_name not in record:
            raise config.ConfigError(f"{where}: {field_name}: required (in the row, its group basis or the file basis)")
    # A post's figure sits in the same table as ours: its metric is registered, but keeps the post's own unit.
    try:
        metrics.checked(record["metric"])
    except metrics.UnknownMetric as err:
        raise config.ConfigError(f"{where}: metric: {err}") from err
    for field_name in TEXT_BASIS:
        record.setdefault(field_name, UNKNOWN)
    record.setdefault("status", "ok")
    low, high = record.get("value_min"), record.get("value_max")
    if (low is None) != (high is None):
        raise config.ConfigError(f"{where}: value_min/value_max: give both ends of a range or neither")
    if record.get("value") is None and low is not None:
        record["value"] = (low + high) / 2
        record.setdefault("stat", "range")
    record.setdefault("stat", "single")
    value = record.get("value")
    if record["status"] == "ok" and value is None:
        raise config.ConfigError(f"{where}: value: a row with status ok needs a value or a range")
    if value is not None and low is not None and not low <= value <= high:
        raise config.ConfigError(f"{where}: value: {value} lies outside its range {low}-{high}")
    return record


def files(directory: Path) -> list[Path]:
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise config.ConfigError(f"{directory}: no published data files (*.yaml)")
    return files


def load_all(directory: Path, root: Path = Path(".")) -> list[dict]:
    records = []
    for path in files(directory):
        records.extend(load_file(path, root))
    return records


def read(path: Path) -> dict:
    """A published file already validated against its schema by load_file (the published step runs first):
    read with libyaml, skipping a second validation that costs seconds on every report."""
    with open(path, encoding="utf-8") as handle:
        return yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_sections(path: Path) -> tuple[str, dict[str, str]]:
    """(seed file name, section id -> opening text) of one published file, for checks against the seed text."""
    doc = read(path)
    return doc["seed"], doc["sections"]
