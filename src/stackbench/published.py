"""The seed posts' figures as data: load data/published/*.yaml into results-contract records.

Each file is one post; groups are its tables. A basis field the post does not state stays unknown
(the word "unknown" for text, null for numbers): it is never filled with a guess.
"""

from __future__ import annotations

from pathlib import Path

from . import config
from .store import UNKNOWN

TEXT_BASIS = ("node", "gpu", "os", "engine", "engine_version", "engine_image", "model", "quant", "kv_dtype",
              "ttft_included", "spec_method", "workload", "variant")


def load_file(path: Path, root: Path = Path(".")) -> list[dict]:
    doc = config.load_file(path, "published", root)
    records = []
    for group_no, group in enumerate(doc["groups"]):
        for row_no, row in enumerate(group["rows"]):
            record = {**doc.get("basis", {}), **group.get("basis", {}), **row}
            where = f"{path}: groups[{group_no}].rows[{row_no}]"
            records.append(_finish(record, doc["seed"], group, where))
    return records


def _finish(record: dict, seed: str, group: dict, where: str) -> dict:
    record.update(source="published", ref=f"{seed} §{group['section']}", table_id=group["table_id"],
                  table_title=group["title"])
    for field in ("metric", "unit", "row_label"):
        if field not in record:
            raise config.ConfigError(f"{where}: {field}: required (in the row, its group basis or the file basis)")
    for field in TEXT_BASIS:
        record.setdefault(field, UNKNOWN)
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


def load_all(directory: Path, root: Path = Path(".")) -> list[dict]:
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise config.ConfigError(f"{directory}: no published data files (*.yaml)")
    records = []
    for path in files:
        records.extend(load_file(path, root))
    return records
