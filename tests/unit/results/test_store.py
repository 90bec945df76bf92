"""The results contract: column set, atomic writes, DuckDB collect."""

import duckdb
import pyarrow as pa
import pytest

from stackbench.results import store


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
