"""Rows kept from launches a run did not plan (workflow common.smk kept_parts) are marked launch_kept by collect
and named in the report; a part written before a column existed still collects (the column is null)."""

import pyarrow.parquet as pq
from helpers import collect_results

from stackbench.report import queries
from stackbench.results import store


def part(path, variant: str, ref: str, drop: tuple[str, ...] = ()):
    rows = [dict(source="measured", ref=ref, node="n1", stack="llamacpp", variant=variant, workload="code",
                 concurrency=1, metric="decode_tps", value=50.0, unit="tok/s", stat="median", status="ok")]
    pq.write_table(store.to_table(rows).drop_columns(list(drop)), path)
    return path


def test_kept_parts_are_marked_and_named_and_old_parts_still_collect(tmp_path):
    planned = part(tmp_path / "planned.parquet", "nospec", "run-a")
    # Written before spread_over, repeat_values and launch_kept existed: collect fills them with nulls.
    dropped = part(tmp_path / "dropped.parquet", "draft-n2", "run-b", drop=("spread_over", "repeat_values", "launch_kept"))
    out = tmp_path / "results.parquet"
    assert collect_results([str(planned)], out, kept=[str(dropped)]) == 2
    rows = store.read_results(out).set_index("variant")
    assert rows.loc["draft-n2", "launch_kept"] and not rows.loc["nospec", "launch_kept"]
    assert rows["spread_over"].isna().all()
    assert queries.kept_launches(queries.Results(out)) == {"n1": "llamacpp / draft-n2 (run-b)"}
    collect_results([str(planned), str(dropped)], out)  # both planned: nothing kept, nothing named
    assert queries.kept_launches(queries.Results(out)) == {}
