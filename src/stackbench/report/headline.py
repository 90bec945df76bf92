"""The headline: per node, one row per stack variant at the node's canonical cells, each figure with its
basis; like is compared with like (like_with_like), and a figure's markers say what it is (a slowed GPU, a
saturated client, outputs not the same as no-spec's)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np
import pandas as pd

from stackbench.report.table import CELL_FIELDS, MISSING, Table, finish, format_cell, format_number, present
from stackbench.results import basis, metrics, published
from stackbench.results.judged import single_stream
from stackbench.results.metrics import M
from stackbench.results.store import IDENTITY_COLUMNS, MEASURED, row_tuples


@dataclass(frozen=True)
class HeadlineColumn:
    title: str
    metric: str
    cell: str  # "single": concurrency 1; "single-or-unset": 1 or not stated; "highest": the variant's highest; "any"
    scale: float = 1.0  # display unit: TTFT is stored in s, read in ms


# The figures a seed post puts in its own comparison table, in the metric registry's order.
HEADLINE = [HeadlineColumn(m.headline.title, m.name, m.headline.cell, m.headline.scale) for m in metrics.HEADLINE]
HEADLINE_METRICS = [c.metric for c in HEADLINE]
CEILING_COLUMN = "% of decode ceiling"
OUTPUTS_COLUMN = "outputs"
# The quality column: the accuracy set's share right (Wilson interval, n) and the mean KLD from the node's quality
# reference with its interval, where each was measured (analysis.correctness accuracy_text).
ACCURACY_COLUMN = "quality [95% CI]"
NOT_SAME_OUTPUT = "≠"  # on the speed figures of a variant whose outputs differ from no-spec, loop, or ran other lengths
SLOWED_GPU = "🌡"  # on a figure measured on a GPU slowed by thermal, HW slowdown or power brake (analysis.slowed_cells)
SATURATED_CLIENT = "⏳"  # on a figure measured by a client that could not keep up (analysis.saturated_cells)
# A cell flagged as not its stack's speed: the headline_table argument that names them, its marker, what it says.
CELL_FLAGS = {"slowed": (SLOWED_GPU, "measured on a GPU slowed by {} (NVML clock event reasons)"),
              "saturated": (SATURATED_CLIENT, "measured by a load client that could not keep up ({})")}
HEADLINE_KEYS = ["source", "post", "stack", "variant"]
# What format_cell reads from a record.
# What the headline reads of a record: its cell, figure and basis. The other columns are left behind before the
# first filter, which would copy each of them.
HEADLINE_READS = list(dict.fromkeys([*IDENTITY_COLUMNS, *CELL_FIELDS, "ref", "not_for_ranking", "gpu_count",
                                     *basis.WHY_IT_MATTERS]))


def node_gpus(records: pd.DataFrame) -> int | None:
    """The node's GPU count as its rows state it: the measured rows', else the posts'; None where none says."""
    if "gpu_count" not in records:
        return None
    counts = pd.to_numeric(records["gpu_count"], errors="coerce")
    mine = counts[records["source"].isin(MEASURED)].dropna()
    counts = mine if len(mine) else counts.dropna()
    return int(counts.max()) if len(counts) else None


def column_title(column: HeadlineColumn, gpus: int | None) -> str:
    """A headline column's title; the node's summed power says over how many GPUs ("power W, 2 GPUs"), beside
    "power W per GPU", so a two-GPU sum is never read as one GPU's draw."""
    if column.metric == M.power_w and gpus:
        return f"power W, {gpus} GPU{'s' if gpus > 1 else ''}"
    return column.title



def at_headline_cap(rows: pd.DataFrame, keys: list[str], per_cell: pd.Series) -> pd.Series:
    """True on the rows at the one power cap a table shows per group of `keys`: uncapped where the group ran
    a cell (`per_cell`) uncapped, else its highest cap. `power_cap_w` is the cap applied (the queries give a
    refused cap as none, analysis.common.applied_cap); a sweep's other caps are in the analysis section."""
    by = [rows[k] for k in keys]
    uncapped = (per_cell & rows["power_cap_w"].isna()).groupby(by, dropna=False).transform("any")
    top = rows["power_cap_w"].where(per_cell).groupby(by, dropna=False).transform("max")
    return (uncapped & rows["power_cap_w"].isna()) | (~uncapped & (rows["power_cap_w"] == top))




def headline_records(results: pd.DataFrame, node: str) -> pd.DataFrame:
    """The records behind one node's headline: per variant, its canonical cells only.

    Canonical: concurrency 1 for single-stream rates (a rate whose concurrency is not stated is not
    single-stream), the highest concurrency left for the aggregate (render.headline_input chose it: for
    measured variants the highest all of them ran), and one power cap: uncapped where
    the variant ran uncapped, else its highest cap (a sweep's other caps are in the analysis section).
    Peaks are not typical figures and stay out, and so do the cells of a workload marked not for ranking."""
    results = results[[c for c in results.columns if c in HEADLINE_READS]]
    ranked = ~results["not_for_ranking"].fillna(False).astype(bool) if "not_for_ranking" in results else True
    rows = results[(results["node"] == node) & results["metric"].isin(HEADLINE_METRICS) & (results["status"] == "ok")
                   & (results["stat"] != "peak") & ranked].copy()
    if rows.empty:
        return rows
    rows["post"] = published.posts_of(rows["ref"]).where(rows["source"] == "published", "")
    keys = HEADLINE_KEYS
    rule = rows["metric"].map({c.metric: c.cell for c in HEADLINE})
    # The cap is chosen among the cells' figures; a launch's own figures (pool, VRAM) logged without a cap hold at it.
    per_cell = rule != "any"
    canonical_cap = at_headline_cap(rows, keys, per_cell) | (~per_cell & rows["power_cap_w"].isna())
    rows, rule = rows[canonical_cap], rule[canonical_cap]
    single = single_stream(rows)
    unset = rows["concurrency"].isna()
    highest = rows["concurrency"] == rows[rows["metric"] == M.aggregate_tps].groupby(keys, dropna=False)["concurrency"] \
        .transform("max").reindex(rows.index)
    keep = ((rule == "any") | ((rule == "single") & single) | ((rule == "single-or-unset") & (single | unset))
            | ((rule == "highest") & highest.fillna(False)))
    return rows[keep]


# A measured headline cell is a median over cells; a cell is one workload at one concurrency and prompt length.
CELL_AXES = ["workload", "concurrency", "prompt_tokens"]


def _cells_text(cells: set[tuple]) -> str:
    """'code, prose at c1': the workloads and concurrencies behind a figure."""
    workloads = ", ".join(sorted({str(w) for w, _, _ in cells}))
    levels = "/".join(f"c{int(c)}" for c in sorted({c for _, c, _ in cells if present(c)}))
    return f"{workloads} at {levels}" if levels else workloads


def like_with_like(records: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Per headline metric, the measured records cut to the cells (CELL_AXES) every measured variant ran, so
    each measured row is a median over the same cells; and the lines that say which. A variant sharing no
    cell with the others keeps its own cells and stands apart, named with the workloads behind its row;
    where the variants left share no cell either, every row stands apart. Published rows and a launch's own
    figures (no workload) pass as they are."""
    measured = records[records["source"].isin(MEASURED) & records["workload"].notna()]
    # The set logic runs on the distinct (metric, variant, cell) combinations, a few hundred however many
    # records; each record then follows its combination's verdict.
    combo_keys = ["metric", *HEADLINE_KEYS[2:], *CELL_AXES]
    combo_of = measured.groupby(combo_keys, dropna=False, sort=False).ngroup().to_numpy()
    combos = measured[combo_keys][~pd.Series(combo_of).duplicated().to_numpy()]  # in ngroup's (first-seen) order
    axes = combos[CELL_AXES].astype(object).where(combos[CELL_AXES].notna(), None)
    variants = zip(*(combos[k].tolist() for k in HEADLINE_KEYS[2:]))
    by_metric: dict[str, dict[tuple, dict[tuple, int]]] = {}  # metric -> variant -> cell -> combination
    for combo, (metric, key, cell) in enumerate(zip(combos["metric"].tolist(), variants, row_tuples(axes))):
        by_metric.setdefault(metric, {}).setdefault(key, {})[cell] = combo
    dropped: list[int] = []
    said: dict[str, list[str]] = {}
    titles = {c.metric: c.title for c in HEADLINE}
    # In the headline's column order: the records come in no fixed order (DuckDB's parallel joins).
    for metric, cells_of in sorted(by_metric.items(), key=lambda item: HEADLINE_METRICS.index(item[0])):
        if len(cells_of) < 2:
            continue
        apart = {key for key, mine in cells_of.items()
                 if not mine.keys() & set().union(*(theirs for other, theirs in cells_of.items() if other != key))}
        rest = [key for key in cells_of if key not in apart]
        common = set.intersection(*(set(cells_of[key]) for key in rest)) if rest else set()
        if not common:
            apart, rest = set(cells_of), []
        dropped += [combo for key in rest for cell, combo in cells_of[key].items() if cell not in common]
        lines = [f"measured rows: the median over the cells every measured variant ran ({_cells_text(common)})"] if common else []
        lines += [f"{stack} / {variant} shares no cell with the other measured variants: its figure is over "
                  f"{_cells_text(set(cells_of[(stack, variant)]))}; not comparable with theirs"
                  for stack, variant in sorted(apart, key=str)]
        for line in lines:
            said.setdefault(line, []).append(titles[metric])
    keep = pd.Series(True, index=records.index)
    keep[measured.index[np.isin(combo_of, dropped)]] = False
    return records[keep], [f"{', '.join(columns)}: {line}." for line, columns in said.items()]


def headline_table(results: pd.DataFrame, node: str, ceiling_percent: dict[tuple, float] | None = None,
                   power_why: str | None = None, correctness: pd.DataFrame | None = None,
                   slowed: pd.DataFrame | None = None, saturated: pd.DataFrame | None = None,
                   not_reported: set[tuple] = frozenset()) -> Table | None:
    """One row per stack variant on this node at its canonical cells; the seeds' own kind of table. With
    `correctness` (analysis.correctness_by_variant) an outputs column says whether each measured variant's
    outputs equal its no-spec reference; a flagged variant's speed figures carry a marker and a caveat, and
    its row comes after the clean ones, so a fast wrong configuration never tops the table. With `slowed`
    (analysis.slowed_cells) a figure from a cell on a slowed GPU carries its own marker and caveat; with
    `saturated` (analysis.saturated_cells) one measured by a client that could not keep up (CELL_FLAGS). A measured
    figure its endpoint cannot give (`not_reported`: (node, stack, variant, metric), queries.not_reported) reads
    basis.NOT_REPORTED, not a blank."""
    records, like = like_with_like(headline_records(results, node))
    if records.empty:
        return None
    for flag, cells in (("slowed", slowed), ("saturated", saturated)):
        records[flag] = "" if cells is None or cells.empty else \
            records[IDENTITY_COLUMNS].merge(cells, on=IDENTITY_COLUMNS, how="left")[flag].fillna("").to_numpy()
    ceiling_percent = ceiling_percent or {}
    verdicts = {} if correctness is None else {
        (stack, variant): (outputs, flagged, caveat) for stack, variant, outputs, flagged, caveat in
        row_tuples(correctness.loc[correctness["node"] == node, ["stack", "variant", "outputs", "flagged", "caveat"]])}
    scored = {} if correctness is None else {
        (stack, variant): text for stack, variant, text in
        row_tuples(correctness.loc[correctness["node"] == node, ["stack", "variant", "accuracy_text"]]) if text}
    keys = records[HEADLINE_KEYS].astype(object).where(records[HEADLINE_KEYS].notna(), "")
    records["row_key"] = row_tuples(keys)
    order = sorted(dict.fromkeys(records["row_key"]),
                   key=lambda k: (k[0] not in MEASURED, k[1], k[0] in MEASURED and verdicts.get(k[2:], ("", False, ""))[1],
                                  str(k[2]), str(k[3])))  # stacks by name
    records["row_no"] = records["row_key"].map({k: i + 1 for i, k in enumerate(order)})
    # Per (row, metric), the positions of its records in plain column lists: a measured cell shows the median of
    # its values, so only the few records shown one by one become dicts (format_cell).
    by_cell: dict[tuple, list[int]] = {}
    for position, cell in enumerate(zip(records["row_key"].tolist(), records["metric"].tolist())):
        by_cell.setdefault(cell, []).append(position)
    field_values = {f: records[f].tolist() for f in CELL_FIELDS + list(CELL_FLAGS)}
    values, concurrencies = field_values["value"], field_values["concurrency"]
    shown_columns = [c for c in HEADLINE if any((k, c.metric) in by_cell for k in order)]
    with_ceiling = any(ceiling_percent.get((node, *k)) is not None for k in order)
    gpus = node_gpus(records)
    if gpus == 1:  # one GPU's power is the node's: one column
        shown_columns = [c for c in shown_columns if c.metric != M.power_w_per_gpu]
    power = next(c for c in HEADLINE if c.metric == M.power_w)
    like = [line.replace(power.title, column_title(power, gpus)) for line in like]  # the caveats name the columns as shown
    columns = (["source", "stack", "variant"] + [column_title(c, gpus) for c in shown_columns] + ([CEILING_COLUMN] if with_ceiling else [])
               + ([ACCURACY_COLUMN] if scored else []) + ([OUTPUTS_COLUMN] if verdicts else []))
    several_workloads = False
    rows, raw_rows, flagged_lines = [], [], []
    for key in order:
        source, post, stack, variant = key
        cells = [f"published ({post})" if post else source, stack, variant]
        raw: list[float | None] = [None, None, None]
        outputs, flagged, why = verdicts.get((stack, variant), ("", False, "")) if source in MEASURED else ("", False, "")
        for column in shown_columns:
            hits = by_cell.get((key, column.metric), [])
            value = _headline_value([values[i] for i in hits])
            if source in MEASURED and len(hits) > 1:
                several_workloads = True
                text = format_number(_scaled(value, column.scale))
            else:
                # A post's figures are never averaged together: each is shown as the post gives it.
                records_shown = [{f: values_of[i] for f, values_of in field_values.items()} for i in hits]
                text = " / ".join(dict.fromkeys(format_cell(r, column.scale) for r in records_shown))
            if column.cell == "highest" and hits and present(concurrencies[hits[0]]):
                text += f" @c{int(concurrencies[hits[0]])}"
            if flagged and text and column.cell != "any":
                text += NOT_SAME_OUTPUT
            for flag, (marker, said) in CELL_FLAGS.items():
                flag_why = "; ".join(dict.fromkeys(field_values[flag][i] for i in hits if field_values[flag][i]))
                if flag_why and text:
                    text += marker
                    flagged_lines.append(f"{marker} {stack} / {variant} {column.title}: {said.format(flag_why)}, not the stack's "
                                         "speed; left out of What to run.")
            unreported = source in MEASURED and (node, stack, variant, column.metric) in not_reported
            cells.append(text or (basis.NOT_REPORTED if unreported else MISSING))
            raw.append(_scaled(value, column.scale))
        if with_ceiling:
            percent = ceiling_percent.get((node, stack, variant)) if source in MEASURED else None
            cells.append(format_number(percent) if percent is not None else MISSING)
            raw.append(percent)
        if scored:  # a published row's quality is unknown: never another launch's score
            cells.append(scored.get((stack, variant), MISSING) if source in MEASURED else MISSING)
            raw.append(None)
        if verdicts:
            cells.append(outputs or MISSING)
            raw.append(None)
        if flagged:
            flagged_lines.append(f"{NOT_SAME_OUTPUT} {stack} / {variant}: {why}; do not rank it on the figures marked {NOT_SAME_OUTPUT}.")
        rows.append(cells)
        raw_rows.append(raw)
    refs = "; ".join(sorted(records["ref"].unique()))
    methods = [w for w in records.loc[records["source"].isin(MEASURED), "workload"].dropna().unique()
               if published.method_post(w)]
    if methods:
        refs += "; measured cells from " + ", ".join(f"{w} (post {published.method_post(w)}'s method)" for w in methods)
    table = Table(f"headline-{node}", f"Headline on {node}: one row per stack variant", refs, columns, rows, raw_rows)
    power = [f"power: not measured on this node: {power_why}."] if power_why else []
    table = finish(table, records, ("source", "stack", "variant", "spec_method", "spec_tokens", "engine", "metric",
                                     "workload", "concurrency", "prompt_tokens", "output_tokens"), like + flagged_lines + power)
    if several_workloads:
        table.legend.append("A measured cell with several workloads behind it shows their median; the full table below has each workload.")
    return table


def _headline_value(values: list) -> float | None:
    given = [v for v in values if present(v)]
    return float(statistics.median(given)) if given else None


def _scaled(value, scale: float):
    return value * scale if present(value) else None
