"""Plotly figures: pure functions from one node's result rows to a figure (plotly's JSON figure format,
{"data": [...], "layout": {...}}, which the page hands to Plotly.newPlot; building it as plain data keeps
a chart of a million-row run from costing seconds in plotly's Python object layer).

Charts compare like with like: each is drawn for one node (the caller passes that node's rows), every
series names its source (measured here, or the post and section it was transcribed from), and a chart
that still mixes measured and published series says so in its title. Series are aggregated (median over
workloads) where a sweep would otherwise draw one line per cell.
"""

from __future__ import annotations

import math

import pandas as pd

from stackbench.analysis.common import RATE_METRICS
from stackbench.results import published
from stackbench.results.judged import SINGLE_STREAM_METRIC, single_stream
from stackbench.results.metrics import ACCEPT_RATE_POS, REQUEST_ACCEPT_RATE_BIN, M
from stackbench.results.store import MEASURED, row_tuples

Figure = dict

MEASURED_ONLY = pd.DataFrame({"source": ["measured"]})  # the frame _figure reads the sources from, for measured-only charts
MIXED_SOURCES = "measured and published series differ in model and basis: read them side by side, not as one curve"


def _with_source(rows: pd.DataFrame) -> pd.DataFrame:
    """Each row's series source: 'measured' (or 'rehearsal'), or 'published 004 §MTP n=2 和 n=3 A/B' (the post's number and
    the section the figure came from)."""
    # Labels per distinct ref (a handful), then one vectorized lookup per row.
    labels = {}
    for source, ref in row_tuples(rows[["source", "ref"]].drop_duplicates()):
        labels[ref] = (f"published {published.post_of(ref)} §{published.section_of(ref)}" if source == "published"
                       else source)
    return rows.assign(series_source=rows["ref"].map(labels))


def _figure(traces: list[dict], title: str, x: str, y: str, rows: pd.DataFrame, **layout) -> Figure:
    if rows["source"].nunique() > 1:
        title += f"<br><sup>{MIXED_SOURCES}</sup>"
    return {"data": traces, "layout": {
        "title": {"text": title}, "xaxis": {"title": {"text": x}}, "yaxis": {"title": {"text": y}}, "height": 400,
        "margin": {"l": 60, "r": 20, "t": 80, "b": 50}, "legend": {"title": {"text": "series (source / stack / variant / cell)"}},
        "paper_bgcolor": "white", "plot_bgcolor": "white", **layout}}


def _values(series: pd.Series) -> list:
    """Plain JSON values: numbers as floats, gaps as null (never NaN, which is not JSON)."""
    return [None if v is None or (isinstance(v, float) and math.isnan(v)) else (float(v) if isinstance(v, (int, float)) else str(v))
            for v in series.tolist()]


def _trace(kind: str, x: pd.Series, y: pd.Series, name: str, error: dict | None = None, **extra) -> dict:
    trace = {"type": "bar" if kind == "bar" else "scatter", "x": _values(x), "y": _values(y), "name": name, **extra}
    if kind != "bar":
        trace["mode"] = kind
    if error:
        trace["error_y"] = error
    return trace


def _error_bars(frame: pd.DataFrame) -> dict | None:
    if frame["value_min"].isna().all():
        return None
    return {"type": "data", "symmetric": False, "array": _values((frame["value_max"] - frame["value"]).fillna(0)),
            "arrayminus": _values((frame["value"] - frame["value_min"]).fillna(0))}


def _name(key: tuple) -> str:
    return " / ".join(str(k) for k in key if k is not None and not (isinstance(k, float) and pd.isna(k)))


def _canonical_cap(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One power cap per series, as the headline picks it: uncapped where it ran uncapped, else its highest."""
    has_uncapped = rows["power_cap_w"].isna().groupby([rows[k] for k in keys], dropna=False).transform("any")
    top = rows.groupby(keys, dropna=False)["power_cap_w"].transform("max")
    return rows[(has_uncapped & rows["power_cap_w"].isna()) | (~has_uncapped & (rows["power_cap_w"] == top))]


def power_sweep(rows: pd.DataFrame, node: str) -> Figure | None:
    """Single-stream throughput against power cap on one node, one line per sweep (source, stack, variant,
    metric), the median over the sweep's workloads at each cap."""
    rows = rows[rows["power_cap_w"].notna() & rows["metric"].isin(RATE_METRICS) & (rows["status"] == "ok")
                & (rows["concurrency"].isna() | single_stream(rows))]
    if rows.empty:
        return None
    rows = _with_source(rows)
    series = ["series_source", "stack", "variant", "metric"]
    points = rows.groupby(series + ["power_cap_w"], dropna=False)["value"].median().reset_index()
    points = points[points.groupby(series, dropna=False)["power_cap_w"].transform("nunique") > 1]
    if points.empty:
        return None
    traces = [_trace("lines+markers", group["power_cap_w"], group["value"], _name(key))
              for key, group in points.sort_values("power_cap_w").groupby(series, dropna=False)]
    return _figure(traces, f"Single-stream throughput against GPU power cap on {node}", "power cap (W)", "tok/s", rows)


def rate_by_workload(rows: pd.DataFrame, node: str) -> Figure | None:
    """Single-stream decode rate per workload and variant on one node (at its headline power cap), spread
    across repeats as error bars."""
    rows = rows[(rows["metric"] == SINGLE_STREAM_METRIC) & single_stream(rows) & (rows["status"] == "ok")]
    if rows.empty:
        return None
    rows = _canonical_cap(_with_source(rows), ["series_source", "stack", "variant"])
    # One trace per source and variant; a workload measured twice under one variant (two posters) stays two bars.
    traces = [_trace("bar", group["workload"], group["value"], _name(key), _error_bars(group))
              for key, group in rows.groupby(["series_source", "stack", "variant"], dropna=False)]
    return _figure(traces, f"Single-stream decode rate by workload on {node}", "workload", "tok/s", rows, barmode="group")


def concurrency_scaling(rows: pd.DataFrame, node: str) -> Figure | None:
    """Aggregate throughput against concurrency on one node, one line per (source, stack, variant) at its
    headline power cap, the median over the variant's workloads at each concurrency."""
    rows = rows[(rows["metric"] == M.aggregate_tps) & rows["concurrency"].notna() & (rows["status"] == "ok")]
    if rows.empty:
        return None
    series = ["series_source", "stack", "variant"]
    rows = _canonical_cap(_with_source(rows), series)
    points = rows.groupby(series + ["concurrency"], dropna=False).agg(value=("value", "median"),
                                                                       workloads=("workload", "nunique")).reset_index()
    points = points[points.groupby(series, dropna=False)["concurrency"].transform("nunique") > 1]
    if points.empty:
        return None
    traces = [_trace("lines+markers", group["concurrency"], group["value"], _name(key), customdata=_values(group["workloads"]),
                     hovertemplate="c%{x}: %{y:.3g} tok/s (median of %{customdata} workloads)")
              for key, group in points.sort_values("concurrency").groupby(series, dropna=False)]
    return _figure(traces, f"Aggregate throughput against concurrency on {node}", "concurrent streams", "tok/s", rows)


def per_position_acceptance(rows: pd.DataFrame, node: str) -> Figure | None:
    """Acceptance rate of each draft position (seed 004: n=3's third position is accepted ~20%)."""
    rows = rows[rows["metric"].str.startswith(ACCEPT_RATE_POS.prefix)]
    if rows.empty:
        return None
    rows = _with_source(rows)
    rows["position"] = rows["metric"].str.removeprefix(ACCEPT_RATE_POS.prefix).astype(int)
    # One bar per position and variant: the mean over the variant's workloads (each pooled from counters).
    means = rows.groupby(["series_source", "stack", "variant", "position"], dropna=False)["value"].mean().reset_index()
    traces = [_trace("bar", group["position"], group["value"], _name(key))
              for key, group in means.sort_values("position").groupby(["series_source", "stack", "variant"], dropna=False)]
    return _figure(traces, f"Acceptance rate per draft position on {node}", "draft position", "accepted fraction", rows,
                   barmode="group", yaxis={"title": {"text": "accepted fraction"}, "range": [0, 1]})


def request_acceptance_histogram(rows: pd.DataFrame, node: str) -> Figure | None:
    """Requests by their own acceptance (accepted / drafted, tenths), one bar series per speculative cell
    (stack / variant / workload / concurrency), measured rows only: the spread a pooled ratio hides."""
    rows = rows[rows["metric"].str.startswith(REQUEST_ACCEPT_RATE_BIN.prefix) & rows["source"].isin(MEASURED) & rows["value"].notna()]
    if rows.empty:
        return None
    rows = _with_source(rows)
    rows["low"] = rows["metric"].str.removeprefix(REQUEST_ACCEPT_RATE_BIN.prefix).astype(int) / 10
    rows["load"] = "c" + rows["concurrency"].map("{:.0f}".format).astype(str)
    keys = ["series_source", "stack", "variant", "workload", "load"]
    traces = [_trace("bar", group["low"] + 0.05, group["value"], _name(key))
              for key, group in rows.sort_values("low").groupby(keys, dropna=False)]
    return _figure(traces, f"Requests by their acceptance (accepted / drafted) on {node}", "accepted / drafted (bin centre)",
                   "requests", rows, barmode="group", xaxis={"title": {"text": "accepted / drafted (bin centre)"}, "range": [0, 1]})


def accept_len_by_depth(rows: pd.DataFrame, node: str) -> Figure | None:
    """Acceptance length against speculative depth, per workload (median over concurrencies), measured rows only."""
    rows = rows[(rows["metric"] == M.accept_len) & rows["spec_tokens"].notna() & rows["source"].isin(MEASURED)]
    if rows.empty:
        return None
    rows = _with_source(rows)
    points = rows.groupby(["series_source", "stack", "workload", "spec_tokens"], dropna=False)["value"].median().reset_index()
    traces = [_trace("lines+markers", group["spec_tokens"], group["value"], _name(key))
              for key, group in points.sort_values("spec_tokens").groupby(["series_source", "stack", "workload"], dropna=False)]
    return _figure(traces, f"Acceptance length against speculative depth on {node}", "draft tokens per step", "accept length", rows)


def spec_speedup(spec: pd.DataFrame, node: str) -> Figure | None:
    """Speculative speed-up against prompt length, per variant (seed 000: +107% short, ~0 at 128K); measured."""
    spec = spec[spec["node"] == node] if len(spec) else spec
    if spec.empty:
        return None
    traces = [_trace("markers+lines", group["prompt_tokens"], group["speedup"], _name(("measured", *key)),
                     text=_values(group["workload"]), hovertemplate="%{text}: x%{y:.2f} at %{x} prompt tokens")
              for key, group in spec.sort_values("prompt_tokens").groupby(["stack", "variant"])]
    return _figure(traces, f"Speculative speed-up over no-spec by prompt length on {node}", "prompt tokens", "speed-up (x)",
                   pd.DataFrame({"source": ["measured"]}),
                   shapes=[{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1, "line": {"dash": "dot"}}])


# -- one workload and basis per chart ------------------------------------------------------------------------
# What must be equal between the series of the ladder and Pareto charts besides the node and the workload:
# the request-side basis and the cap (the series themselves are stack variants, so engine and checkpoint are
# what they compare). Columns a results table lacks are unknown, and equal.
LIKE_BASIS = ("output_tokens", "temperature", "power_cap_w", "thinking", "reasoning_effort")
LADDER_METRICS = (M.prefill_tps, M.decode_tps)
LADDER_MIN_LENGTHS = 3  # a ladder: one launch at c1 over this many distinct prompt lengths of one workload


def _one_like_group(rows: pd.DataFrame, like: list[str], series: list[str]) -> tuple[tuple, pd.DataFrame]:
    """The (workload, basis) group a chart draws: a post's method workload first, then the one with the most
    series, then by name; every other group is left out, so a chart never mixes workloads or bases."""
    sizes = rows[like + series].drop_duplicates().groupby(like, dropna=False).size().rename("series").reset_index()
    sizes["method"] = [published.method_post(w) != "" for w in sizes["workload"]]
    best = sizes.sort_values(["method", "series", "workload"], ascending=[False, False, True], kind="stable").iloc[0]
    key = tuple(best[c] for c in like)
    mask = pd.Series(True, index=rows.index)
    for column, value in zip(like, key):
        mask &= rows[column].isna() if pd.isna(value) else rows[column].eq(value)
    return key, rows[mask]


def _like_text(like: list[str], key: tuple) -> str:
    parts = [f"{c} {v:g}" if isinstance(v, float) else f"{c} {v}" for c, v in zip(like, key) if c != "workload" and not pd.isna(v)]
    return ", ".join(parts)


def context_ladder(rows: pd.DataFrame, node: str) -> Figure | None:
    """Prefill and decode rate against prompt length (render.ladder_input: measured cells at c1 of launches
    that ran one workload at LADDER_MIN_LENGTHS or more prompt lengths), one series per variant, the median
    over runs at each length; the top panel prefill, the bottom decode."""
    rows = rows[rows["node"] == node] if len(rows) else rows
    if rows.empty:
        return None
    like = ["workload", *[c for c in LIKE_BASIS if c in rows.columns]]
    key, rows = _one_like_group(rows, like, ["stack", "variant"])
    points = rows.groupby(["stack", "variant", "metric", "prompt_tokens"])["value"].median().reset_index()
    traces = []
    for (stack, variant, metric), group in points.sort_values("prompt_tokens").groupby(["stack", "variant", "metric"]):
        traces.append(_trace("lines+markers", group["prompt_tokens"], group["value"], f"measured / {stack} / {variant} / {metric}",
                             yaxis="y" if metric == M.prefill_tps else "y2", xaxis="x" if metric == M.prefill_tps else "x2"))
    if not traces:
        return None
    title = f"Context ladder on {node}: {key[0]}<br><sup>prefill (top) and decode (bottom) at c1; {_like_text(like, key)}</sup>"
    return _figure(traces, title, "prompt tokens", "prefill tok/s", MEASURED_ONLY, height=560,
                   xaxis={"title": {"text": ""}, "type": "log", "anchor": "y", "matches": "x2"},
                   yaxis={"title": {"text": "prefill tok/s"}, "domain": [0.55, 1]},
                   xaxis2={"title": {"text": "prompt tokens"}, "type": "log", "anchor": "y2"},
                   yaxis2={"title": {"text": "decode tok/s"}, "domain": [0, 0.45]})


def throughput_pareto(rows: pd.DataFrame, node: str) -> Figure | None:
    """vLLM's benchmarks/sweep Pareto view: throughput per stream (aggregate / concurrency) against
    aggregate throughput across concurrency, one line per variant, each point labelled with its concurrency
    (render.pareto_input: measured aggregate_tps, the median over runs per cell)."""
    rows = rows[rows["node"] == node] if len(rows) else rows
    if rows.empty:
        return None
    like = ["workload", *[c for c in LIKE_BASIS if c in rows.columns]]
    rows = rows[rows.groupby(["stack", "variant", *like], dropna=False)["concurrency"].transform("nunique") > 1]
    if rows.empty:
        return None
    key, rows = _one_like_group(rows, like, ["stack", "variant"])
    rows = rows.assign(per_stream=rows["value"] / rows["concurrency"])
    traces = [_trace("lines+markers+text", group["value"], group["per_stream"], f"measured / {stack} / {variant}",
                     text=[f"c{int(c)}" for c in group["concurrency"]], textposition="top center",
                     hovertemplate="%{text}: %{x:.4g} tok/s total, %{y:.4g} tok/s per stream")
              for (stack, variant), group in rows.sort_values("concurrency").groupby(["stack", "variant"])]
    title = f"Throughput per stream against aggregate on {node}: {key[0]}<br><sup>{_like_text(like, key)}</sup>"
    return _figure(traces, title, "aggregate tok/s", "tok/s per stream", MEASURED_ONLY)
