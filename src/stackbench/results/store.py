"""The results contract: one pyarrow schema, atomic Parquet writes, and the DuckDB collect step.

`data/results.parquet` holds one row per (cell, metric). Every row carries its full measurement
basis, so a reader never has to look anywhere else to know what a figure means.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from stackbench.config import ConfigError

# Identity of a cell: where the figure comes from and what was run.
IDENTITY = [
    ("source", pa.string()),  # measured | published
    ("ref", pa.string()),  # run id, or seed file and section
    ("node", pa.string()),
    ("stack", pa.string()),  # llamacpp | sglang | vllm
    ("variant", pa.string()),
    ("replicate", pa.int64()),  # which fresh server process of the launch's configuration (node `launches`); null: published
    ("spec_method", pa.string()),
    ("spec_tokens", pa.int64()),
    ("power_cap_w", pa.float64()),  # the requested cap: a cell keeps it even when the cap could not be applied
    ("workload", pa.string()),
    ("concurrency", pa.int64()),  # closed loop: streams; null for an open-loop cell and a launch-level figure
    ("request_rate", pa.float64()),  # open loop: offered request rate (req/s); null for a closed loop
]

# The figure itself.
FIGURE = [
    ("metric", pa.string()),
    ("value", pa.float64()),
    ("value_min", pa.float64()),
    ("value_max", pa.float64()),
    ("ci_low", pa.float64()),  # the median's 95% order-statistic interval over repeats (estimators.median_interval); null below 6
    ("ci_high", pa.float64()),
    ("mad", pa.float64()),  # median absolute deviation over repeats, median(|x - median|), unscaled; null below 2 repeats
    ("spread_over", pa.string()),  # what value_min / value_max and a percentile range over: repeats | requests | tokens | chunks
    ("repeat_values", pa.list_(pa.float64())),  # a median over repeats: each repeat's figure, in order (analysis.decide)
    ("unit", pa.string()),
    ("stat", pa.string()),  # median | mean | single | range | peak | p90 | p95 | p99
    ("n", pa.int64()),
]

# The measurement basis (BRIEF section 2). Unknown strings are the word "unknown"; unknown numbers are null.
BASIS = [
    ("os", pa.string()),
    ("engine", pa.string()),
    ("engine_version", pa.string()),
    ("engine_image", pa.string()),
    ("model", pa.string()),
    ("quant", pa.string()),
    ("weights_id", pa.string()),  # measured: short sha256 of the weights' bytes (+@revision of a hub snapshot), models/provenance.py
    ("kv_dtype", pa.string()),
    ("context_len", pa.int64()),
    ("prompt_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("temperature", pa.float64()),
    ("ttft_included", pa.string()),  # yes | no | unknown
    ("gpu", pa.string()),
    ("gpu_count", pa.int64()),
    ("tp", pa.int64()),
    ("power_cap_enforced_w", pa.float64()),  # what NVML read back during the cell; null when no cap was applied
    ("engine_setup", pa.string()),  # measured: what the server log says it runs on (backend, offload, attention, ...)
    ("launch_mode", pa.string()),  # native | image | external (external: the basis comes from the server's reports)
    ("counted_text", pa.string()),  # which streamed text the token timings count: content, or content+reasoning
    ("thinking", pa.string()),  # on | off (chat_template_kwargs.enable_thinking sent) | server default | unknown
    ("reasoning_effort", pa.string()),  # low | medium | high as sent; null: not sent
    ("method_scale", pa.string()),  # a post's method run reduced on this node ("output 64 of 512"); null: as written
]

# Bookkeeping that lets tables be regenerated and failures be shown.
EXTRA = [
    # ok | rejected | failed | not_run | skipped (a sweep stopped before it) | not_swept (NOT_SWEPT) |
    # gpu_busy (host/gpustate.py) | host_busy (host/hostload.py): reason says why
    ("status", pa.string()),
    ("reason", pa.string()),
    # Published rows: the seed table and the cell the figure belongs to. Measured cross_stack_* rows
    # (results/agreement.py cross_stack_rows): the matrix and its cell, table_title the weights family, row_label
    # the reference launch, col_label the candidate, so the report draws the matrix from those rows alone.
    ("table_id", pa.string()),
    ("table_title", pa.string()),
    ("row_label", pa.string()),
    ("col_label", pa.string()),
    ("note", pa.string()),
    ("chunk_tokens_from", pa.string()),  # measured: where tokens per SSE chunk came from (streamed usage or spread)
    ("stackbench_version", pa.string()),  # measured: the package version and git commit that measured it (host.facts)
    ("not_for_ranking", pa.bool_()),  # the cell's workload is marked not for ranking: never a headline cell
    # Set by collect: the row's launch was not in the run's plan (another stacks= selection, or dropped from its
    # node file) and its part was kept from an earlier run; the report names such launches.
    ("launch_kept", pa.bool_()),
    # Set by collect (analysis/plausibility.py): why the row's cell is physically implausible (decode over its roofline,
    # acceptance over depth + 1, ...); null: no check failed. A flagged cell is never chosen in What to run.
    ("implausible", pa.string()),
]

# What the analysis needs to know about the engine behind a row, written by the engine's adapter
# (engines/base.py KvAccounting) for measured and published rows alike; null where the stack is unknown.
ENGINE_FACTS = [
    ("logged_per_rank", pa.bool_()),  # the logged KV and weight memory is one tensor-parallel rank's
    ("kv_pool_holds_draft", pa.bool_()),  # an MTP head's KV shares the pool
    ("kv_pool_holds_state", pa.bool_()),  # a hybrid model's recurrent state shares the pool
    ("kv_log_mixes_window", pa.bool_()),  # the logged KV bytes cover sliding-window and full layers together
]

# The results format's version (pyperf's _JSON_VERSION), in every results file's Parquet schema metadata: the
# schema carries it, so every table to_table and conform build (parts, results.parquet, bundles' rows, kept runs)
# writes it. Bump it when a reader cannot read an older file as it is (a column renamed or its meaning changed),
# and say in CONVERTED how the older one is read. A file without it was written before it existed (issue 68).
FORMAT_VERSION = 1
FORMAT_KEY = b"stackbench.results_format"
# The older versions this one reads: 0, unversioned, differs only by the columns added since, which every reader
# takes as nulls (conform here, the report's view in report/queries.py).
CONVERTED = (0,)

RESULTS_SCHEMA = pa.schema(IDENTITY + FIGURE + BASIS + EXTRA + ENGINE_FACTS, metadata={FORMAT_KEY: str(FORMAT_VERSION)})
COLUMNS = RESULTS_SCHEMA.names
BASIS_COLUMNS = [name for name, _ in BASIS]
IDENTITY_COLUMNS = [name for name, _ in IDENTITY]  # a cell's identity: every figure of one cell shares these
LAUNCH_COLUMNS = ["source", "ref", "node", "stack", "variant"]  # one server launch (or one post's configuration)
STATS = ("median", "mean", "single", "range", "peak", "p90", "p95", "p99")  # pNN: a percentile over requests or samples
SOURCES = ("measured", "rehearsal", "published")
# Rows this tool measured: on real engines ("measured") or a rehearsal's stand-ins on simulated GPUs ("rehearsal",
# never taken for a measurement: its own source in every table). Every "measured rows" filter reads these two.
MEASURED = ("measured", "rehearsal")
MEASURED_SQL = "('measured', 'rehearsal')"
UNKNOWN = "unknown"
# A capped cell whose cap is at or above what the launch's stock cell of the same load drew per GPU: a cap there
# could not bind, so it is not swept (measure/sequencer.py); a result, as a rejection is, never retried.
NOT_SWEPT = "not_swept"
PROBE_OUTPUTS = "probe_outputs.json"  # beside a launch's cells.parquet: its probe cells' greedy outputs
ACCURACY_OUTPUTS = "accuracy_outputs.json"  # beside it too: the accuracy cell's replies and extracted answers
DIVERGENCE_OUTPUTS = "divergence_scores.json"  # and the divergence cell's scored positions (measure/divergence.py)


def to_table(records: Iterable[dict] | pd.DataFrame) -> pa.Table:
    """Build a results table, filling absent columns with nulls and rejecting unknown ones."""
    frame = records if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    extra = sorted(set(frame.columns) - set(COLUMNS))
    if extra:
        raise ValueError(f"columns outside the results contract: {', '.join(extra)}")
    frame = frame.reindex(columns=COLUMNS)
    arrays = []
    for field in RESULTS_SCHEMA:
        column = frame[field.name].astype(object).where(frame[field.name].notna(), None)
        arrays.append(pa.array(column.tolist(), type=field.type, from_pandas=True))
    return pa.Table.from_arrays(arrays, schema=RESULTS_SCHEMA)


def conform(table: pa.Table) -> pa.Table:
    """A stored table in the current contract: columns a file written before them lacks become nulls."""
    if table.schema.names == COLUMNS:
        return table.cast(RESULTS_SCHEMA)
    columns = [table.column(f.name).cast(f.type) if f.name in table.schema.names else pa.nulls(table.num_rows, f.type)
               for f in RESULTS_SCHEMA]
    return pa.Table.from_arrays(columns, schema=RESULTS_SCHEMA)


def format_of(path: str | os.PathLike) -> int:
    """The results format a Parquet file was written in (its schema metadata; 0: before the version existed)."""
    return int((pq.read_schema(path).metadata or {}).get(FORMAT_KEY, b"0"))


def unreadable(found: int) -> str | None:
    """Why a results format is not read here ("results format 2, this stackbench reads formats 0, 1"), or None."""
    if found == FORMAT_VERSION or found in CONVERTED:
        return None
    return f"results format {found!r}, this stackbench reads formats {', '.join(map(str, sorted({*CONVERTED, FORMAT_VERSION})))}"


def check_format(path: str | os.PathLike) -> int:
    """A results file's format, if this stackbench reads it (FORMAT_VERSION, or one it converts: CONVERTED); else a
    one-line ConfigError naming the file, its format and what to run."""
    found = format_of(path)
    if why := unreadable(found):
        raise ConfigError(f"{path}: {why}: read it with the stackbench that wrote it (its stackbench_version column "
                          "names it), or measure it again with this one (`snakemake --cores 1 report`)")
    return found


def atomic_write(path: str | os.PathLike, write) -> Path:
    """write(temporary path) beside the target, then rename: a crash never leaves a half file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_parquet(table: pa.Table, path: str | os.PathLike) -> Path:
    return atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def union_parts(part_files: Iterable[str | os.PathLike], kept: Iterable[str | os.PathLike] = ()) -> pa.Table:
    """The per-source Parquet parts as one results table, through DuckDB; the rows of the `kept` parts (launches
    the run did not plan) are marked launch_kept. A part written before a column existed gets nulls in it; one of a
    results format this stackbench does not read is refused (check_format)."""
    kept = [str(p) for p in kept]
    parts = [str(p) for p in part_files] + kept
    if not parts:
        raise ValueError("collect: no input parts (neither published data nor measured runs)")
    for path in parts:  # a part of a format this stackbench does not read is refused by name
        check_format(path)
    con = duckdb.connect()
    present = set(con.sql("select * from read_parquet(?, union_by_name = true) limit 0", params=[parts]).columns)
    select = ", ".join(f'"{c}"' for c in COLUMNS if c in present and c != "launch_kept")
    relation = con.sql(
        f"select {select}, filename in (select unnest(?::varchar[])) as launch_kept "
        "from read_parquet(?, union_by_name = true, filename = true) "
        "order by source, node, stack, variant, workload, concurrency, metric",
        params=[kept, parts],
    )
    table = relation.arrow()
    if hasattr(table, "read_all"):  # newer DuckDB returns a record batch reader
        table = table.read_all()
    return conform(table)


def collect(part_files: Iterable[str | os.PathLike], out: str | os.PathLike, derived: Iterable[dict] = (),
            kept: Iterable[str | os.PathLike] = (), check=None, union: pa.Table | None = None) -> int:
    """Union the parts (and the `kept` parts of launches not planned, marked launch_kept), add the rows derived
    from more than one part (results/agreement.py: greedy agreement between launches) or brought in (result
    bundles), fill the `implausible` column with `check(table)` (an Arrow table in, one string per row out:
    analysis/plausibility.py flag_table), write data/results.parquet; return the row count. `union`: the
    union_parts(part_files, kept) the caller already has, so it is not read twice. All in Arrow: no pandas copy."""
    table = union_parts(part_files, kept) if union is None else union
    derived = list(derived)
    if derived:
        table = pa.concat_tables([table, to_table(derived)])
    if check is not None:
        table = table.set_column(COLUMNS.index("implausible"), "implausible", check(table))
    atomic_write_parquet(table, out)
    return table.num_rows


def read_results(path: str | os.PathLike) -> pd.DataFrame:
    """A results file in this contract (check_format: an older format converted, an unknown one refused)."""
    check_format(path)
    return conform(pq.read_table(path)).to_pandas()


def row_tuples(frame: pd.DataFrame) -> list[tuple]:
    """A frame's rows as tuples of plain Python values, the values itertuples(index=False) gives, read column
    by column: itertuples and to_dict box each value one by one, 5x slower on pandas' arrow-backed strings."""
    if frame.columns.empty:
        return [()] * len(frame)
    return list(zip(*(column.tolist() for _, column in frame.items())))


def records_of(frame: pd.DataFrame) -> list[dict]:
    """A frame's rows as dicts, as to_dict("records") gives them (see row_tuples)."""
    columns = list(frame.columns)
    return [dict(zip(columns, row)) for row in row_tuples(frame)]
