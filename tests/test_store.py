"""The results contract: column set, atomic writes, DuckDB collect."""

import duckdb
import pyarrow as pa
import pytest

from stackbench import store


def record(**extra):
    return {"source": "measured", "ref": "run", "node": "n", "stack": "llamacpp", "variant": "nospec",
            "spec_method": "none", "workload": "code", "concurrency": 1, "metric": "decode_tps", "value": 68.0,
            "unit": "tok/s", "stat": "median", "n": 3, **extra}


def test_contract_columns_and_types():
    schema = store.RESULTS_SCHEMA
    for name in ("source", "ref", "node", "stack", "variant", "spec_method", "spec_tokens", "power_cap_w", "workload",
                 "concurrency", "metric", "value", "value_min", "value_max", "unit", "stat", "n", "os", "engine",
                 "engine_version", "model", "quant", "kv_dtype", "context_len", "prompt_tokens", "output_tokens",
                 "temperature", "ttft_included", "gpu", "gpu_count", "tp"):
        assert name in schema.names
    assert schema.field("spec_tokens").type == pa.int64() and schema.field("value").type == pa.float64()


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
