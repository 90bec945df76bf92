"""Derived (analysis) tables: written whole to CSV and Parquet by DuckDB on a background thread while the report's
sections build on the main one, and shown by their first rows."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pyarrow as pa

from stackbench.report.queries import copy_out
from stackbench.report.table import Table, frame_table

# Rows of a derived (analysis) table shown in the page and report.md; all of them are in its CSV and Parquet.
DERIVED_ROWS_SHOWN = 200


class Background:
    """One worker thread for the report's DuckDB-bound jobs (the full per-cell tables, the analysis files)
    while the main thread runs the pandas analyses: DuckDB releases the GIL, so on a 2-core host the two
    overlap. Jobs run in the order given; `wait` raises the first one's error."""

    def __init__(self):
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="report")
        self.pending: list[Future] = []

    def submit(self, fn, *args) -> Future:
        future = self.pool.submit(fn, *args)
        self.pending.append(future)
        return future

    def wait(self) -> None:
        try:
            for future in self.pending:
                future.result()
        finally:
            self.pool.shutdown()


def derived_table(frame: pd.DataFrame, table_id: str, title: str, ref: str, caveats: list[str], table_dir: Path,
                  background: Background) -> Table:
    """An analysis table: written whole as CSV and Parquet by DuckDB (from Arrow, faster than from pandas)
    in the background, shown as its first rows."""
    background.submit(copy_out, pa.Table.from_pandas(frame, preserve_index=False),
                      [(table_dir / f"{table_id}.csv", "header"), (table_dir / f"{table_id}.parquet", "format parquet")])
    table = frame_table(frame.head(DERIVED_ROWS_SHOWN), table_id, title, ref, caveats)
    table.written_whole = True  # the main thread writing its CSV too would race the background's COPY to the same file
    if len(frame) > DERIVED_ROWS_SHOWN:
        table.legend.append(f"First {DERIVED_ROWS_SHOWN} of {len(frame)} rows; all of them are in {table_id}.csv and {table_id}.parquet.")
    return table
