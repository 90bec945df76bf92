"""The report's SQL, all of it: DuckDB queries over data/results.parquet (bound parameters) for the few thousand
rows the headline, the analyses, the charts and the same-method rows read, however many the results hold, and
the COPY statements that write whole tables (the full per-cell tables, the analysis tables) to CSV and Parquet."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa

from stackbench import analysis
from stackbench.analysis import hoststate
from stackbench.analysis.common import CAP_NOT_APPLIED
from stackbench.report import charts, usecase
from stackbench.report.headline import HEADLINE, HEADLINE_METRICS
from stackbench.report.layouts import AGGREGATE_METRICS, Layout
from stackbench.results import basis, metrics, published
from stackbench.results.judged import single_stream_sql
from stackbench.results.metrics import ACCEPT_RATE_POS, GEOMETRY_PREFIX, REQUEST_ACCEPT_RATE_BIN, M
from stackbench.results.pairing import PROMPTS, REPLIES
from stackbench.results.store import MEASURED_SQL, NOT_SWEPT, RESULTS_SCHEMA, row_tuples


def named_like(prefix: str) -> str:
    """The SQL test that a row's metric is one of a family's (a prefix the registry names)."""
    return f"metric like '{prefix}%'"


LIKE_COLUMNS = ", ".join(charts.LIKE_BASIS)
# What the analysis functions read (the metric registry's `analysed`), besides the model's geometry_* figures.
ANALYSIS_METRICS = metrics.names(analysed=True)
# Bookkeeping columns the analysis functions never read: left in DuckDB, not converted to pandas (a
# geometry row's note, which says where the geometry came from, is the one note they read).
NOT_ANALYSED = ("reason", "table_id", "table_title", "row_label", "col_label", "note", "unit", "repeat_values")
GEOMETRY_NOTE = f"case when {named_like(GEOMETRY_PREFIX)} then note end as note"
CHART_METRICS = metrics.names(charted=True)
CHART_COLUMNS = ("source", "ref", "node", "stack", "variant", "spec_tokens", "power_cap_w", "workload", "concurrency",
                 "metric", "value", "value_min", "value_max", "status")
# The full tables' row keys, and the metrics they show in ms (renamed with their unit).
FULL_KEYS = ["source", "ref", "stack", "variant", "spec_tokens", "power_cap_w", "workload", "concurrency"]
MILLISECONDS = {M.ttft_s: ("ttft_ms", 1000), M.ttfc_s: ("ttfc_ms", 1000)}
DUCKDB_TYPES = {"int64": "bigint", "double": "double", "string": "varchar", "bool": "boolean", "list<item: double>": "double[]"}

# analysis.common.applied_cap in SQL: the cap a measured cell ran under is the one read back, a refused cap none.
APPLIED_CAP = f"case when r.source in {MEASURED_SQL} then r.power_cap_enforced_w else r.power_cap_w end"


class Results:
    """The results table behind a DuckDB view: selections and aggregates come back as small frames."""

    def __init__(self, source: Path | pd.DataFrame):
        self.source = source
        self.con = duckdb.connect()
        if isinstance(source, pd.DataFrame):
            self.con.register("stored", source)
        else:
            self.con.execute(f"create view stored as select * from read_parquet('{sql_text(str(source))}')")
        # A results file collected before a column existed reads it as null (e.g. the launch replicate).
        present = set(self.con.sql("select * from stored limit 0").columns)
        added = "".join(f", null::{DUCKDB_TYPES[str(field.type)]} as {field.name}" for field in RESULTS_SCHEMA
                        if field.name not in present)
        self.con.execute(f"create view results as select *{added} from stored")

    def frame(self, sql: str, params: list | None = None) -> pd.DataFrame:
        return self.con.sql(sql, params=params).to_arrow_table().to_pandas()  # plain object strings: arrow-backed ones are slow element by element

    def rows(self, where: str, params: list | None = None) -> pd.DataFrame:
        return self.frame(f"select * from results where {where}", params)

    def register_posts(self) -> None:
        """The view `posts` (ref, post): each published ref's post by published.post_of, the one rule for
        it, applied to the distinct refs (a handful) rather than re-written in SQL."""
        refs = self.frame("select distinct ref from results where source = 'published'")["ref"]
        self.con.register("posts", pd.DataFrame({"ref": refs, "post": published.posts_of(refs)}))


def sql_text(text: str) -> str:
    return text.replace("'", "''")


def sql_in(values) -> str:
    return "(" + ", ".join(f"'{sql_text(v)}'" for v in values) + ")"


def power_not_measured(results: Results) -> dict[str, str]:
    """Per node, why power was not measured (said once per node, not once per launch or cell)."""
    frame = results.frame("select node, string_agg(distinct reason, '; ') as why from results "
                          f"where metric = '{M.power_w}' and status = 'not_run' and source in {MEASURED_SQL} group by node")
    return dict(zip(frame["node"], frame["why"]))


def not_reported(results: Results) -> set[tuple[str, str, str, str]]:
    """(node, stack, variant, metric) of every figure a measured launch's endpoint cannot give (measure/rows.py: a
    not_run row whose reason ends with basis.NOT_REPORTED): where a table would show it, it says so."""
    frame = results.frame("select distinct node, stack, variant, metric from results "
                          f"where source in {MEASURED_SQL} and status = 'not_run' and ends_with(reason, ?)",
                          [basis.NOT_REPORTED])
    return set(row_tuples(frame))


def caps_not_applied(results: Results) -> dict[str, str]:
    """Per node, 'cap not applied on <GPU> (<caps> W asked): <why>' for the measured cells whose requested power
    cap the GPU did not enforce (analysis.common.applied_cap): said under every table that reads caps."""
    frame = results.frame(
        "select node, gpu, string_agg(distinct power_cap_w::varchar, ', ' order by power_cap_w::varchar) as caps, "
        "string_agg(distinct regexp_extract(note, ?, 1), '; ') as why from results "
        f"where source in {MEASURED_SQL} and power_cap_w is not null and power_cap_enforced_w is null "
        f"and status <> '{NOT_SWEPT}' "  # a cap not swept was never asked of the GPU (caps_not_swept says so)
        # A cell's own rows only: a figure derived over a sweep (knee_concurrency: no concurrency, no rate) or a
        # launch-level row carries no read-back cap, which says nothing about the GPU refusing one.
        "and workload is not null and (concurrency is not null or request_rate is not null) "
        "group by node, gpu order by node, gpu", [f"{CAP_NOT_APPLIED}([^;]*)"])
    out: dict[str, list[str]] = {}
    for node, gpu, caps, why in frame.itertuples(index=False):
        out.setdefault(node, []).append(f"cap not applied on {node} ({gpu}; {caps} W asked): {why or 'no reason recorded'}")
    return {node: "; ".join(lines) for node, lines in out.items()}


def caps_not_swept(results: Results) -> dict[str, str]:
    """Per node, a line naming the caps its launches did not sweep (status NOT_SWEPT, measure/sequencer.py): each at
    or above the stock cell's measured draw per GPU plus a margin, where it could not bind; said under every table that reads caps."""
    frame = results.frame(
        "select node, power_cap_w, count(distinct (ref, workload, concurrency, request_rate, prompt_tokens)) as cells, "
        f"min(reason) as example from results where source in {MEASURED_SQL} and status = '{NOT_SWEPT}' "
        f"and metric = '{M.cell_status}' group by node, power_cap_w order by node, power_cap_w")
    return {node: f"caps not swept on {node}: {'/'.join(f'{cap:g}' for cap in mine['power_cap_w'])} W in "
                  f"{mine['cells'].sum()} cells, each at or above its launch's stock cell's measured draw per GPU plus "
                  "the sequencer's margin for transients (measure/sequencer.py CAP_BIND_MARGIN), where it could not bind; "
                  f"those cells have no figure (e.g. {mine['example'].iloc[0]})"
            for node, mine in frame.groupby("node", sort=True)}


def kept_launches(results: Results) -> dict[str, str]:
    """Per node, the launches whose rows collect kept from an earlier run though this run did not plan them
    (store.union_parts launch_kept): 'stack / variant (run ref)', so no figure of theirs passes unannounced."""
    frame = results.frame("select node, string_agg(distinct stack || ' / ' || variant || ' (' || ref || ')', ', ' "
                          "order by stack || ' / ' || variant || ' (' || ref || ')') as launches from results "
                          "where launch_kept group by node order by node")
    return dict(zip(frame["node"], frame["launches"]))


def probes_off(results: Results, metric: str = M.smoke_score) -> dict[str, str]:
    """Per node, the launches whose correctness probes (metric smoke_score) or accuracy set (accuracy) were
    turned off, and where (plan.probeset)."""
    frame = results.frame("select node, string_agg(distinct stack || ' / ' || variant, ', ') as launches, "
                          "string_agg(distinct reason, '; ') as why from results where metric = ? "
                          "and status = 'not_run' and workload = 'server' "
                          f"and source in {MEASURED_SQL} group by node", [metric])
    return {node: f"{launches}: {why}" for node, launches, why in frame.itertuples(index=False)}


# A rehearsal does not read the model files (they are on the GPU host): its launches' geometry rows say so,
# and are no cell's failure (geometry_not_read names them once).
REHEARSAL_GEOMETRY = f"source = 'rehearsal' and {named_like(GEOMETRY_PREFIX)} and status <> 'ok'"


def geometry_not_read(results: Results) -> dict[str, str]:
    """Per rehearsed node, the launches whose model geometry was not read: 'not read in a rehearsal'."""
    frame = results.frame("select node, string_agg(distinct stack || ' / ' || variant, ', ' order by stack || ' / ' || variant) "
                          f"as launches from results where {REHEARSAL_GEOMETRY} group by node")
    return {node: f"model geometry not read in a rehearsal (the model files are on the GPU host; the stand-ins were "
                  f"sized from configs/models): {launches}" for node, launches in frame.itertuples(index=False)}


def unpacked_fp4(results: Results) -> dict[str, list[str]]:
    """Per node, a line per stack whose server said it unpacks its 4-bit float checkpoint (no FP4 tensor cores, rows'
    engine_setup: basis.UNPACKED_FP4), naming its variants: a speed that is not a Blackwell post's."""
    frame = results.frame(
        "select node, stack, quant, gpu, string_agg(distinct variant, ', ' order by variant) as variants from results "
        f"where source in {MEASURED_SQL} and engine_setup like '%{basis.UNPACKED_FP4}%' group by all order by all")
    lines: dict[str, list[str]] = {}
    for row in frame.itertuples(index=False):
        lines.setdefault(row.node, []).append(
            f"{row.stack} ({row.variants}): {row.quant} on the {row.gpu}, whose server says it has no FP4 tensor cores "
            "(before Blackwell) and unpacks the 4-bit weights to BF16 math (weight-only): its speed is not a Blackwell "
            "post's, and an INT4 or AWQ checkpoint is the like-for-like choice on this GPU")
    return lines


def status_lines(results: Results) -> list[str]:
    """Cells that did not produce a figure, and why: failures are results, never silently dropped. Launch-level
    rows (no workload) are not cells; power that was not measured is said once per node under its headline."""
    frame = results.frame(
        "select distinct node, stack, variant, workload, concurrency, status, reason from results "
        f"where source in {MEASURED_SQL} and status <> 'ok' and workload is not null and metric <> '{M.power_w}' "
        f"and not ({REHEARSAL_GEOMETRY}) order by node, stack, variant, workload, concurrency")
    lines = []
    for row in frame.itertuples(index=False):
        concurrency = f"c{int(row.concurrency)}" if pd.notna(row.concurrency) else "concurrency not set"
        lines.append(f"{row.node} / {row.stack} / {row.variant} / {row.workload} / {concurrency}: {row.status}: {row.reason}")
    return lines


def headline_input(results: Results) -> pd.DataFrame:
    """Only the rows a headline can show (headline_records makes the final choice): its metrics at
    concurrency 1 (or unset) and each variant's aggregate at one higher concurrency, at the variant's
    canonical power cap (uncapped where it ran uncapped, else its highest; a measured cell's cap is the one
    the GPU enforced, so a refused cap counts as uncapped and power_cap_w comes back as applied), peaks and workloads marked not
    for ranking left out. A launch's own figures (pool, VRAM) logged without a cap hold at that cap. Where
    every measured variant of a node ran a post's method workload, their cells are that method's alone
    (the first by name where several qualify); like_with_like then cuts to the cells all ran.

    The aggregate's concurrency: for measured variants, the highest that every measured variant of the
    node ran, so a load sweep on one launch does not put its column at another level than the rest's; a
    published variant keeps its post's own highest."""
    launch_metrics = [c.metric for c in HEADLINE if c.cell == "any"]
    results.register_posts()
    return results.frame(f"""
        with all_rows as (
          -- The cap a cell ran under (analysis.common.applied_cap): a refused cap is no cap.
          select r.* replace ({APPLIED_CAP} as power_cap_w), coalesce(p.post, '') as post
          from results r left join posts p using (ref)
          where status = 'ok' and stat <> 'peak' and metric in {sql_in(HEADLINE_METRICS)} and not coalesce(not_for_ranking, false)),
        measured_variants as (
          select node, count(distinct (stack, variant)) as variants from all_rows where source in {MEASURED_SQL} group by node),
        node_method as (
          select node, workload from (
            select node, workload, count(distinct (stack, variant)) as variants from all_rows
            where source in {MEASURED_SQL} and workload is not null and regexp_matches(workload, ?) group by all)
          join measured_variants using (node, variants)
          qualify row_number() over (partition by node order by workload) = 1),
        ran_method as (select distinct node, stack, variant from all_rows join node_method using (node, workload)
                       where source in {MEASURED_SQL}),
        rows as (
          select a.* from all_rows a left join node_method m on a.node = m.node
            left join ran_method v on a.node = v.node and a.stack = v.stack and a.variant = v.variant
          where a.source not in {MEASURED_SQL} or a.workload is null or v.node is null or a.workload = m.workload),
        aggregates as (
          select node, stack, variant, concurrency from rows
          where source in {MEASURED_SQL} and metric = '{M.aggregate_tps}' and concurrency is not null),
        common as (
          select node, max(l.concurrency) as concurrency
          from (select node, concurrency, count(distinct (stack, variant)) as variants from aggregates group by all) l
          join (select node, count(distinct (stack, variant)) as variants from aggregates group by node) n
            using (node, variants)
          group by node),
        variant as (
          select node, source, post, stack, variant,
                 coalesce(bool_or(power_cap_w is null) filter (where metric not in {sql_in(launch_metrics)}), true) as uncapped,
                 max(power_cap_w) filter (where metric not in {sql_in(launch_metrics)}) as top_cap,
                 max(case when metric = '{M.aggregate_tps}' then concurrency end) as top_concurrency
          from rows group by all),
        chosen as (
          select v.*, case when v.source in {MEASURED_SQL} then coalesce(c.concurrency, v.top_concurrency)
                           else v.top_concurrency end as aggregate_concurrency
          from variant v left join common c using (node))
        select r.* exclude (post) from rows r join chosen v using (node, source, post, stack, variant)
        where ((r.metric in {sql_in(launch_metrics)} and r.power_cap_w is null)
               or case when v.uncapped then r.power_cap_w is null else r.power_cap_w = v.top_cap end)
          and (r.concurrency is null or {single_stream_sql('r')} or (r.metric = '{M.aggregate_tps}' and r.concurrency = v.aggregate_concurrency))""",
                         [published.METHOD_WORKLOAD_SQL])


def correctness_input(results: Results) -> pd.DataFrame:
    """The measured correctness rows only (probes, agreement, validity and loops of every cell): small."""
    return results.frame("select node, stack, variant, workload, metric, value, unit, prompt_tokens, source, status, "
                         f"ci_low, ci_high, n, row_label, case when metric = '{M.mean_kld}' then note end as note "  # exact or bound
                         f"from results where source in {MEASURED_SQL} and metric in {sql_in(analysis.CORRECTNESS_METRICS)}")


def decide_input(results: Results) -> pd.DataFrame:
    """What analysis.decide and analysis.energy read: the judged rates (with their MAD and repeats), loops,
    pools, power and energy, and the cells without a figure, measured rows only."""
    # notes only where a verdict reads them (a launch beyond its node's quality limit says why in its note)
    return results.frame(f"select * exclude (note), case when metric = '{M.quality_beyond_limit}' then note end as note from results "
                         f"where source in {MEASURED_SQL} and metric in {sql_in(analysis.DECIDE_METRICS + analysis.ENERGY_METRICS)}")


def pairing_input(results: Results) -> pd.DataFrame:
    """The pairing rows (results/pairing.py): per speculative launch's cell, identical prompts and replies."""
    return results.frame("select node, stack, model, power_cap_w, variant, replicate, workload, concurrency, metric, value, n, "
                         "note from results "
                         f"where source in {MEASURED_SQL} and metric in {sql_in([PROMPTS, REPLIES])}")


def texts_input(results: Results) -> pd.DataFrame:
    """The per-text rows (results/pairing.py text_gain, text_accept_rate): each paired request's gain and
    acceptance, with its prompt set (table_title) and row (row_label)."""
    return results.frame("select node, stack, model, power_cap_w, variant, replicate, workload, concurrency, prompt_tokens, "
                         "metric, value, n, table_title, row_label from results "
                         f"where source in {MEASURED_SQL} and metric in {sql_in([M.text_gain, M.text_accept_rate])}")


def cross_stack_input(results: Results) -> pd.DataFrame:
    """The cross-stack agreement rows only: a handful per weights family."""
    return results.frame("select source, table_title, row_label, col_label, metric, value, unit from results "
                         f"where source in {MEASURED_SQL} and metric in {sql_in(analysis.CROSS_STACK_METRICS)}")


def quality_input(results: Results) -> pd.DataFrame:
    """The answer agreement rows across stacks, with the launch compared and the words on the intervals."""
    return results.frame("select source, table_title, row_label, col_label, node, stack, variant, metric, value, note "
                         f"from results where source in {MEASURED_SQL} and metric in {sql_in(analysis.QUALITY_METRICS)}")


def divergence_input(results: Results) -> pd.DataFrame:
    """The divergence rows per weights family, and each launch's own perplexity (a few rows per launch)."""
    return results.frame("select source, table_title, row_label, col_label, node, stack, variant, quant, metric, value, "
                         "ci_low, ci_high, status, reason, note "
                         f"from results where source in {MEASURED_SQL} and metric in {sql_in(analysis.DIVERGENCE_METRICS)}")


def method_input(results: Results, layouts: dict[str, Layout]) -> pd.DataFrame:
    """The measured rows a seed table can show beside the post's (seed_table picks them): rows of
    the tables' method workloads and the launch-level rows of the launches that ran one, only the metrics
    the posts' tables hold. Small: a few launches' cells."""
    methods = sorted({m for layout in layouts.values() for m in layout.method})
    if not methods:
        return pd.DataFrame()
    return results.frame(f"""
        with ran as (select distinct ref, node, stack, variant from results
                     where source in {MEASURED_SQL} and workload in (select unnest(?::varchar[])))
        select r.* replace ({APPLIED_CAP} as power_cap_w) from results r join ran using (ref, node, stack, variant)
        where r.source in {MEASURED_SQL} and r.status = 'ok'
          and (r.workload in (select unnest(?::varchar[])) or r.workload is null)
          and (r.metric in (select distinct metric from results where source = 'published' and table_id is not null)
               or r.metric in {sql_in(AGGREGATE_METRICS.values())})""",
                         [methods, methods])


def ladder_input(results: Results) -> pd.DataFrame:
    """The context ladders' cells: measured prefill and decode rates at c1 of every launch that ran one
    workload at charts.LADDER_MIN_LENGTHS or more prompt lengths. Few rows, however large the results."""
    like = LIKE_COLUMNS
    return results.frame(f"""
        with c1 as (select ref, node, stack, variant, workload, prompt_tokens, metric, value, {like} from results
                    where source in {MEASURED_SQL} and status = 'ok' and {single_stream_sql()} and workload is not null
                      and prompt_tokens is not null and value is not null and metric in (select unnest(?::varchar[]))),
        ladders as (select ref, node, stack, variant, workload from c1 group by all
                    having count(distinct prompt_tokens) >= ?)
        select c1.* from c1 join ladders using (ref, node, stack, variant, workload)""",
                         [list(charts.LADDER_METRICS), charts.LADDER_MIN_LENGTHS])


def pareto_input(results: Results) -> pd.DataFrame:
    """The Pareto charts' points: measured aggregate throughput per node, variant, workload, basis and
    concurrency, the median over runs (DuckDB reduces them, so a large sweep comes back as its cells)."""
    like = LIKE_COLUMNS
    return results.frame(f"""
        select node, stack, variant, workload, {like}, concurrency, median(value) as value from results
        where source in {MEASURED_SQL} and status = 'ok' and metric = '{M.aggregate_tps}' and concurrency is not null
          and workload is not null and value is not null
        group by all""")


# -- what every section shares ---------------------------------------------------------------------------

def has_rehearsal_rows(results: Results) -> bool:
    return bool(results.frame("select count(*) as n from results where source = 'rehearsal'")["n"].iloc[0])


def source_counts(results: Results) -> dict[str, int]:
    return results.frame("select source, count(*) as n from results group by source").set_index("source")["n"].to_dict()


def nodes(results: Results, measured_only: bool = False) -> list[str]:
    """Nodes measured here first, then the posts' nodes; `measured_only`: the nodes measured here."""
    if measured_only:
        return results.frame(f"select distinct node from results where source in {MEASURED_SQL}")["node"].tolist()
    return results.frame(f"select node from results group by node order by min(case when source in {MEASURED_SQL} "
                         "then 0 else 1 end), node")["node"].tolist()


def analysed(results: Results) -> pd.DataFrame:
    """The rows the analyses read: the registry's analysed metrics, acceptance per position, the model's geometry
    and a sweep's stock limit, without the bookkeeping columns."""
    present = set(results.frame("select * from results limit 0").columns)  # a file from before a column was added lacks it
    return results.frame(f"select * exclude ({', '.join(c for c in NOT_ANALYSED if c in present)}), {GEOMETRY_NOTE} from results "
                         f"where metric in {sql_in(ANALYSIS_METRICS)} "
                         f"or {named_like(ACCEPT_RATE_POS.prefix)} or {named_like(GEOMETRY_PREFIX)} "
                         f"or metric in {sql_in([M.power_limit_found_w, M.power_limit_default_w])}")


def use_case_rows(results: Results, any_status: bool = False) -> pd.DataFrame:
    """The use-case table's single-stream decode and TTFT rows; `any_status`: failed cells too (a rehearsal's plan)."""
    return results.frame(
        f"select node, ref, stack, variant, replicate, workload, prompt_tokens, output_tokens, metric, value, ci_low, ci_high, "
        f"{', '.join(usecase.SEPARATING)} from results where source in {MEASURED_SQL} and metric in "
        f"{sql_in([usecase.DECODE, usecase.TTFT])} and {single_stream_sql()} and workload is not null"
        + ("" if any_status else " and status = 'ok' and value is not null"))


def calibration_rows(results: Results) -> pd.DataFrame:
    """A rehearsal's single-stream figures that the posts' calibration points compare (report/budget.py)."""
    return results.frame("select engine, spec_method, spec_tokens, workload, concurrency, metric, value from results "
                         "where source = 'rehearsal' and status = 'ok' and value is not null and metric in "
                         f"{sql_in([M.decode_tps, M.accept_len, M.tpot_ms])} and " + single_stream_sql())


def busy_rows(results: Results) -> pd.DataFrame:
    """The launches that ran (or were refused) on a busy host (analysis/hoststate.py)."""
    return results.frame(f"select * from results where source in {MEASURED_SQL} and (metric in "
                         f"{sql_in([M.host_busy, M.host_outside_cpu_share_peak])} or status = '{hoststate.REFUSED}')")


def bundle_manifests(results: Results) -> pd.DataFrame:
    return results.frame("select table_title, source, node, value, status, reason, note from results "
                         f"where metric = '{M.bundle_manifest}' order by table_title")


def implausible_cells(results: Results) -> pd.DataFrame:
    """One row per flagged cell: its launch and cell, its replies' length, whether the host was busy during it (the
    cell's host_busy row: its other processes ran beside the client and the server) and why it was flagged."""
    return results.frame(
        "select source, node, stack, variant, power_cap_w, workload, concurrency, max(output_tokens) as reply_tokens, "
        f"coalesce(case max(case when metric = '{M.host_busy}' then value end) when 1 then 'busy' when 0 then 'not busy' "
        "end, 'not sampled') as host, any_value(implausible) as why from results where implausible is not null "
        "group by source, ref, node, stack, variant, replicate, spec_method, spec_tokens, power_cap_w, workload, concurrency, "
        "request_rate order by all")


def posts_and_nodes(results: Results, nodes: list[str]) -> pd.DataFrame:
    """The posts' rows and the rows of `nodes`: source, node and GPU only, to count them."""
    return results.frame(f"select source, node, gpu from results where source = 'published' or node in {sql_in(nodes)}")


def charted(results: Results) -> pd.DataFrame:
    """What the charts read, in one narrow query (a scan per node, or filtering a wide frame of arrow-backed
    strings in pandas, costs more)."""
    return results.frame(f"select {', '.join(CHART_COLUMNS)} from results where "
                         f"metric in {sql_in(CHART_METRICS)} or {named_like(ACCEPT_RATE_POS.prefix)} "
                         f"or {named_like(REQUEST_ACCEPT_RATE_BIN.prefix)}")


# -- whole tables written to files --------------------------------------------------------------------

def copy_out(table: pa.Table, paths: list[tuple[Path, str]]) -> None:
    """An Arrow table written to each (path, COPY options), on a connection of its own (the background thread's)."""
    con = duckdb.connect()
    con.register("derived", table)
    for path, options in paths:
        con.execute(f"copy derived to '{sql_text(str(path))}' ({options})")


def pivot_cells(results: Results) -> None:
    """Every node's cells, one row per cell (source, run or post, stack, variant, depth, cap, workload,
    concurrency) and one column per metric (the median of its rows; seconds shown as ms), pivoted once by
    DuckDB into the table `cells`."""
    keys = ", ".join(["node"] + FULL_KEYS)
    renamed = " ".join(f"when '{sql_text(m)}' then '{sql_text(name)}'" for m, (name, _) in MILLISECONDS.items())
    scaled = " ".join(f"when '{sql_text(m)}' then {factor}" for m, (_, factor) in MILLISECONDS.items())
    results.con.execute(f"""create or replace temp table cells as pivot (
        select {keys}, case metric {renamed} else metric end as metric, value * case metric {scaled} else 1 end as value
        from results where status = 'ok' and value is not null and not isnan(value) and metric <> '{M.bundle_manifest}')
        on metric using median(value) group by {keys}""")


def copy_cells(results: Results, node: str, csv_path: Path, parquet_path: Path, page_rows: int) -> tuple[list[str], list[list], int] | None:
    """One node's cells from `cells`, only the metric columns it has, written to CSV and Parquet by DuckDB (the
    table's size never passes through Python rows): its columns, its first `page_rows` rows and its row count."""
    columns = results.frame("select * from cells where node = ? limit 1", [node])
    if columns.empty:
        return None
    present = results.frame("select " + ", ".join(f"count(\"{c}\") as \"{c}\"" for c in columns.columns[len(FULL_KEYS) + 1:])
                            + " from cells where node = ?", [node]).iloc[0]
    shown = [c for c, n in present.items() if n > 0]
    query = (f"select {', '.join(FULL_KEYS)}, {', '.join(chr(34) + m + chr(34) for m in shown)} from cells "
             f"where node = '{sql_text(node)}' order by source, stack, variant, spec_tokens, power_cap_w, workload, concurrency, ref")
    results.con.execute(f"copy ({query}) to '{sql_text(str(parquet_path))}' (format parquet)")
    results.con.execute(f"copy (select * from read_parquet('{sql_text(str(parquet_path))}')) to '{sql_text(str(csv_path))}' (header)")
    total = results.frame(f"select count(*) as n from read_parquet('{sql_text(str(parquet_path))}')")["n"].iloc[0]
    head = results.con.sql(f"select * from read_parquet('{sql_text(str(parquet_path))}') limit {page_rows}")
    return head.columns, [list(row) for row in head.fetchall()], int(total)


def basis_combinations(results: Results, fields: list[str]) -> pd.DataFrame:
    """Each node's distinct combinations of `fields` (a handful however many rows)."""
    present = set(results.frame("select * from results limit 0").columns)
    kept = [f for f in fields if f in present]
    return results.frame(f"select distinct node, {', '.join(kept)} from results where metric <> '{M.bundle_manifest}'")


def published_rows(results: Results) -> pd.DataFrame:
    """The posts' rows, whole: the seeds' tables read their layouts' labels from them."""
    return results.rows("source = 'published'")
