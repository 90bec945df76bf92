"""Like with like in the headline (issue 35 item 1): a measured cell is the median over the cells (workload,
concurrency, prompt length) every measured variant of the node ran; a variant sharing none stands apart, its
workloads named; a workload marked not for ranking never forms a headline cell. Hand-built rows (test data)
whose medians are known."""

from stackbench.report import queries
from stackbench.report.headline import headline_table
from stackbench.report.table import Table
from stackbench.results import store

BASE = dict(source="measured", ref="test-run", node="n1", stack="llamacpp", status="ok", stat="median", note=None,
            value_min=None, value_max=None, power_cap_w=None, metric="decode_tps", concurrency=1, unit="tok/s")


def cells(variant: str, values: dict, stack: str = "llamacpp") -> list[dict]:
    """One decode_tps row at c1 per workload: value; a key (workload, prompt) sets its prompt length (else 40)."""
    return [dict(BASE, stack=stack, variant=variant, workload=key[0] if isinstance(key, tuple) else key,
                 prompt_tokens=key[1] if isinstance(key, tuple) else 40, value=value) for key, value in values.items()]


def headline(rows: list[dict]) -> Table:
    return headline_table(queries.headline_input(queries.Results(store.to_table(rows).to_pandas())), "n1")


def decode(table: Table) -> dict[tuple, str]:
    at = table.columns.index
    return {(r[at("stack")], r[at("variant")]): r[at("decode tok/s")] for r in table.rows}


def test_a_variant_that_ran_more_workloads_is_read_on_the_shared_ones_only():
    """no-spec also ran code-load and a long ladder prompt the draft never ran: its headline is the median of
    code and prose (100, 120 -> 110), not of all four (median 80)."""
    rows = (cells("nospec", {"code": 100.0, "prose": 120.0, "code-load": 60.0, ("ladder-cpu", 3500): 20.0})
            + cells("draft-n2", {"code": 150.0, "prose": 170.0}))
    table = headline(rows)
    assert decode(table) == {("llamacpp", "nospec"): "110", ("llamacpp", "draft-n2"): "160"}
    assert any("median over the cells every measured variant ran (code, prose at c1)" in c for c in table.caveats)


def test_the_same_workload_at_another_prompt_length_is_another_cell():
    rows = cells("nospec", {("ladder", 1000): 100.0, ("ladder", 8000): 50.0}) + cells("draft-n2", {("ladder", 1000): 140.0})
    assert decode(headline(rows)) == {("llamacpp", "nospec"): "100", ("llamacpp", "draft-n2"): "140"}


def test_a_variant_with_no_cell_in_common_stands_apart_with_its_workloads_named():
    rows = (cells("nospec", {"code": 100.0, "prose": 120.0}) + cells("draft-n2", {"code": 150.0, "prose": 170.0})
            + cells("eagle", {"seed-000-short-code": 90.0, "json": 70.0}, stack="sglang"))
    table = headline(rows)
    assert decode(table)[("sglang", "eagle")] == "80"  # its own two cells
    assert decode(table)[("llamacpp", "nospec")] == "110"
    apart = [c for c in table.caveats if "sglang / eagle shares no cell" in c]
    assert len(apart) == 1 and "json, seed-000-short-code at c1" in apart[0]


def test_variants_that_share_no_cell_all_stand_apart():
    rows = cells("a", {"code": 100.0, "prose": 50.0}) + cells("b", {"code": 200.0, "json": 10.0}) + cells("c", {"prose": 30.0, "json": 20.0})
    table = headline(rows)
    assert decode(table) == {("llamacpp", "a"): "75", ("llamacpp", "b"): "105", ("llamacpp", "c"): "25"}
    assert sum("shares no cell" in c for c in table.caveats) == 3
    assert not any("every measured variant ran" in c for c in table.caveats)


def test_a_workload_marked_not_for_ranking_never_forms_a_headline_cell():
    """rtx5090's shape: the vLLM variants ran seed 004's short and long profiles, SGLang did not; the long
    profile (bimodal, not for ranking) is out, and every measured row reads the workload all of them ran."""
    long = [dict(r, not_for_ranking=True) for r in cells("mtp-n3", {"seed-004-long": 400.0}, stack="vllm")]
    rows = (cells("mtp-n2", {"code": 100.0, "seed-004-short": 90.0}, stack="vllm")
            + cells("mtp-n3", {"code": 110.0, "seed-004-short": 95.0}, stack="vllm") + long
            + cells("nextn", {"code": 80.0, "seed-000-short-code": 85.0}, stack="sglang"))
    table = headline(rows)
    assert decode(table) == {("vllm", "mtp-n2"): "100", ("vllm", "mtp-n3"): "110", ("sglang", "nextn"): "80"}
    assert not any("seed-004-long" in c for c in table.caveats)
    alone = headline(long + [dict(r, not_for_ranking=True) for r in cells("mtp-n2", {"seed-004-long": 10.0}, stack="vllm")])
    assert alone is None  # nothing rankable left


def test_a_method_every_variant_ran_is_still_read_alone():
    rows = cells("nospec", {"code": 300.0, "seed-004-short": 94.0}) + cells("mtp-n2", {"code": 310.0, "seed-004-short": 99.0})
    assert decode(headline(rows)) == {("llamacpp", "nospec"): "94", ("llamacpp", "mtp-n2"): "99"}


def test_the_cell_lines_do_not_depend_on_the_order_the_records_come_in():
    """The records come from DuckDB's parallel joins in no fixed order: the lines name the columns in the
    headline's order whatever it was."""
    rows = (cells("nospec", {"code": 100.0, "prose": 120.0, "json": 60.0}) + cells("draft-n2", {"code": 150.0, "prose": 170.0})
            + [dict(row, metric="ttft_s", value=0.1) for row in cells("nospec", {"code": 0, "json": 0})
               + cells("draft-n2", {"code": 0})])
    frame = store.to_table(rows).to_pandas()
    caveats = [headline_of(frame.iloc[order]).caveats for order in (range(len(frame)), reversed(range(len(frame))))]
    assert caveats[0] == caveats[1]
    assert [c.split(":")[0] for c in caveats[0][:2]] == ["decode tok/s", "TTFT ms"]


def headline_of(frame) -> Table:
    return headline_table(queries.headline_input(queries.Results(frame.reset_index(drop=True))), "n1")


def test_power_columns_say_per_gpu_and_over_how_many_gpus():
    """A two-GPU node's summed power is titled with its GPU count beside the per-GPU column; on one GPU the two
    are one figure and one column."""
    def power(gpus):
        return [dict(BASE, variant="nospec", workload="code", prompt_tokens=40, gpu_count=gpus, metric=metric, unit="W",
                     stat="mean", value=value) for metric, value in (("power_w", 300.0 * gpus), ("power_w_per_gpu", 300.0))]
    two = headline(cells("nospec", {"code": 100.0}) + power(2))
    at = two.columns.index
    assert (two.rows[0][at("power W, 2 GPUs")], two.rows[0][at("power W per GPU")]) == ("600", "300")
    # The caveats name the columns as shown: nospec also ran prose, so each column's line says which cells it reads.
    wider = headline(cells("nospec", {"code": 100.0, "prose": 90.0}) + cells("draft-n2", {"code": 150.0}) + power(2)
                     + [dict(r, variant="draft-n2") for r in power(2)] + [dict(r, workload="prose") for r in power(2)])
    assert "power W, 2 GPUs" in " ".join(wider.caveats) and "all GPUs" not in " ".join(wider.caveats)
    one = headline(cells("nospec", {"code": 100.0}) + power(1))
    assert "power W, 1 GPU" in one.columns and "power W per GPU" not in one.columns
