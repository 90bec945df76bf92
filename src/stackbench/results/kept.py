"""Runs kept on purpose for a rerun to be judged against: `stackbench keep <node>` copies the node's measured
rows out of data/results.parquet into <kept>/<node>/<label>.parquet (docs/what-to-run.md). A kept run is never
collected into the results again; the report reads each one beside this run's rows and says which of its
decisions held (analysis/held.py)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from stackbench.config import ConfigError
from stackbench.results.store import MEASURED_SQL, atomic_write_parquet, atomic_write_text, check_format, conform

LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
RULE_SUFFIX = ".rule.json"  # beside <label>.parquet: the rule its last look ran under


def keep(results: Path, node: str, kept_dir: Path, label: str | None = None, looks: Path | None = None) -> tuple[Path, int]:
    """Write the node's measured rows of `results` as <kept_dir>/<node>/<label>.parquet (label: the UTC time by
    default), and beside it the rule its looks ran under (`looks`: its round-<k>.json files; RULE_SUFFIX), so a
    later report replays the kept run under its own rule; returns the file and its row count. A one-line
    ConfigError names what is wrong."""
    label = label or datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    if not LABEL.fullmatch(label):
        raise ConfigError(f"keep: --label {label!r}: letters, digits, '.', '_' and '-' only (it names a file)")
    if not results.is_file():
        raise ConfigError(f"keep: {results}: no results table; run `snakemake --cores 1 report` first")
    path = kept_dir / node / f"{label}.parquet"
    if path.exists():
        raise ConfigError(f"keep: {path} exists; give another --label")
    check_format(results)
    rows = duckdb.connect().sql(f"select * from read_parquet('{_quoted(results)}') where node = $node "
                                f"and source in {MEASURED_SQL}", params={"node": node}).to_arrow_table()
    if rows.num_rows == 0:
        raise ConfigError(f"keep: {results}: no measured rows of node {node!r}")
    atomic_write_parquet(conform(rows), path)  # in this contract, its format version with it
    found = sorted(looks.glob("round-*.json"), key=lambda f: int(f.stem.split("-")[1])) if looks and looks.is_dir() else []
    if found:
        atomic_write_text(path.with_suffix(RULE_SUFFIX), json.dumps(json.loads(found[-1].read_text())["rule"]))
    return path, rows.num_rows


def kept_rule(path: Path) -> dict | None:
    """The rule a kept run's looks ran under (config.model.Decision's fields), None where it was not kept."""
    rule = path.with_suffix(RULE_SUFFIX)
    return json.loads(rule.read_text()) if rule.exists() else None


def kept_runs(kept_dir: Path, node: str) -> list[Path]:
    """The node's kept runs, the latest kept first; one of a results format this stackbench does not read is refused
    by name (store.check_format)."""
    found = sorted((kept_dir / node).glob("*.parquet"), key=lambda path: path.stat().st_mtime, reverse=True)
    for path in found:
        check_format(path)
    return found


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")
