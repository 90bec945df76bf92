"""The results contract: column set, atomic writes, DuckDB collect."""

import re

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stackbench import cli
from stackbench.config import ConfigError
from stackbench.results import store
from stackbench.results.kept import keep, kept_runs


def record(**extra):
    return {"source": "measured", "ref": "run", "node": "n", "stack": "llamacpp", "variant": "nospec",
            "spec_method": "none", "workload": "code", "concurrency": 1, "metric": "decode_tps", "value": 68.0,
            "unit": "tok/s", "stat": "median", "n": 3, **extra}


def test_a_row_round_trips_through_parquet_and_duckdb_with_contract_types(tmp_path):
    """What a reader of data/results.parquet gets: integer depths and counts, double figures, and null for
    every basis field the row did not state (the BRIEF's contract, section 5)."""
    path = tmp_path / "part.parquet"
    store.atomic_write_parquet(store.to_table([record(spec_tokens=3, power_cap_w=260)]), path)
    row = duckdb.sql(f"select typeof(spec_tokens), typeof(concurrency), typeof(n), typeof(value), typeof(power_cap_w), "
                     f"spec_tokens, power_cap_w, engine_version, context_len from '{path}'").fetchall()[0]
    assert row == ("BIGINT", "BIGINT", "BIGINT", "DOUBLE", "DOUBLE", 3, 260.0, None, None)
    with pytest.raises(pa.ArrowInvalid):
        store.to_table([record(spec_tokens="three")])


def test_unknown_columns_are_rejected():
    with pytest.raises(ValueError, match="outside the results contract: tokens_per_sec"):
        store.to_table([record(tokens_per_sec=1.0)])


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    target = tmp_path / "cells.parquet"
    store.atomic_write_parquet(store.to_table([record()]), target)

    def broken(table, where):
        open(where, "wb").write(b"half a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store.pq, "write_table", broken)
    with pytest.raises(OSError, match="No space left"):
        store.atomic_write_parquet(store.to_table([record(value=1.0)]), target)
    assert store.read_results(target)["value"].tolist() == [68.0]
    assert [p.name for p in tmp_path.iterdir()] == ["cells.parquet"]


def test_collect_unions_parts_readable_by_duckdb(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    store.atomic_write_parquet(store.to_table([record()]), a)
    store.atomic_write_parquet(store.to_table([record(source="published", value=2.0)]), b)
    out = tmp_path / "results.parquet"
    assert store.collect([a, b], out) == 2
    assert duckdb.sql(f"select count(*) from '{out}' where source='published'").fetchall() == [(1,)]


def test_a_part_written_before_a_column_existed_conforms_to_the_contract(tmp_path):
    older = pa.table({"source": ["measured"], "metric": ["decode_tps"], "value": [60.0]})
    table = store.conform(older)
    assert table.schema == store.RESULTS_SCHEMA and table.num_rows == 1
    assert table.column("value").to_pylist() == [60.0] and table.column("logged_per_rank").to_pylist() == [None]


def test_row_tuples_and_records_of_give_what_itertuples_and_to_dict_give():
    """The report reads frames column by column (store.row_tuples): the same plain values, nulls and types as
    pandas' own row readers, on DuckDB's arrow-backed strings too."""
    frame = store.to_table([record(), record(workload=None, concurrency=None, value=float("nan"), not_for_ranking=True)]).to_pandas()
    assert [tuple(map(repr, row)) for row in store.row_tuples(frame)] == \
        [tuple(map(repr, row)) for row in frame.itertuples(index=False, name=None)]
    assert [{k: repr(v) for k, v in row.items()} for row in store.records_of(frame)] == \
        [{k: repr(v) for k, v in row.items()} for row in frame.to_dict("records")]
    assert store.row_tuples(frame[[]]) == [(), ()]


def _written(path, version: str | None, drop: tuple[str, ...] = ()):
    """A results file as a stackbench of results format `version` wrote it (None: before the version existed)."""
    table = store.to_table([record()]).drop_columns(list(drop))
    pq.write_table(table.replace_schema_metadata(None if version is None else {store.FORMAT_KEY: version}), path)
    return path


def test_every_results_file_carries_its_format_version_and_collect_writes_it(tmp_path):
    part = tmp_path / "cells.parquet"
    store.atomic_write_parquet(store.to_table([record()]), part)
    out = tmp_path / "results.parquet"
    store.collect([_written(tmp_path / "old.parquet", None, drop=("launch_kept",)), part], out)
    assert store.format_of(part) == store.format_of(out) == store.FORMAT_VERSION >= 1
    assert pq.read_schema(out).metadata[store.FORMAT_KEY] == str(store.FORMAT_VERSION).encode()


def test_a_kept_run_carries_the_format_version_even_from_a_file_written_before_it(tmp_path):
    old = _written(tmp_path / "results.parquet", None)
    path, rows = keep(old, "n", tmp_path / "kept", "run1")
    assert rows == 1 and store.format_of(path) == store.FORMAT_VERSION and kept_runs(tmp_path / "kept", "n") == [path]


def test_a_file_written_before_the_version_is_read_with_the_columns_added_since_as_nulls(tmp_path):
    """Today's files (no version; format 0): read as they are, a column added since null (store.CONVERTED)."""
    old = _written(tmp_path / "results.parquet", None, drop=("implausible", "launch_kept"))
    assert store.format_of(old) == 0 and store.check_format(old) == 0
    rows = store.read_results(old)
    assert list(rows.columns) == store.COLUMNS and rows["implausible"].isna().all() and rows["value"].tolist() == [68.0]


def test_a_file_of_a_newer_format_is_refused_in_one_line_naming_it_its_format_and_what_to_run(tmp_path, capsys):
    newer = _written(tmp_path / "results.parquet", str(store.FORMAT_VERSION + 1))
    said = (f"{newer}: results format {store.FORMAT_VERSION + 1}, this stackbench reads formats 0, {store.FORMAT_VERSION}: "
            "read it with the stackbench that wrote it")
    for read in (store.read_results, lambda path: store.collect([path], tmp_path / "out.parquet")):
        with pytest.raises(ConfigError, match=re.escape(said)):
            read(newer)
    assert cli.main(["report", "--results", str(newer), "--out-dir", str(tmp_path / "reports")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"config error: {said}") and err.endswith("(`snakemake --cores 1 report`)\n") and err.count("\n") == 1
    kept = tmp_path / "kept/n"
    kept.mkdir(parents=True)
    newer.rename(kept / "run1.parquet")
    with pytest.raises(ConfigError, match="run1.parquet: results format"):
        kept_runs(tmp_path / "kept", "n")
