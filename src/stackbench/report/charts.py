"""Plotly figures: pure functions from one node's result rows to a figure.

Charts compare like with like: each is drawn for one node (the caller passes that node's rows), every
series names its source (measured here, or the post and section it was transcribed from), and a chart
that still mixes measured and published series says so in its title.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

RATE_METRICS = ("decode_tps", "aggregate_tps", "e2e_tps")
MIXED_SOURCES = "measured and published series differ in model and basis: read them side by side, not as one curve"


def source_label(source: str, ref: str) -> str:
    """'measured' or 'published 004 §MTP n=2 和 n=3 A/B': the post number and section a series came from."""
    if source != "published":
        return "measured"
    seed, _, section = ref.partition(" ")
    return f"published {seed.split('_')[0]} {section}".strip()


def _with_source(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows.copy()
    rows["series_source"] = [source_label(s, r) for s, r in zip(rows["source"], rows["ref"])]
    return rows


def _layout(fig: go.Figure, title: str, x: str, y: str, rows: pd.DataFrame) -> go.Figure:
    if rows["source"].nunique() > 1:
        title += f"<br><sup>{MIXED_SOURCES}</sup>"
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, template="plotly_white", height=400,
                      margin=dict(l=60, r=20, t=80, b=50), legend_title_text="series (source / stack / variant / cell)")
    return fig


def _error_bars(frame: pd.DataFrame) -> dict | None:
    if frame["value_min"].isna().all():
        return None
    return dict(type="data", symmetric=False,
                array=(frame["value_max"] - frame["value"]).fillna(0).tolist(),
                arrayminus=(frame["value"] - frame["value_min"]).fillna(0).tolist())


def _name(key: tuple) -> str:
    return " / ".join(str(k) for k in key if k is not None and not (isinstance(k, float) and pd.isna(k)))


def power_sweep(rows: pd.DataFrame, node: str) -> go.Figure | None:
    """Throughput against power cap on one node, one line per sweep (source, stack, variant, cell, metric)."""
    rows = rows[rows["power_cap_w"].notna() & rows["metric"].isin(RATE_METRICS) & (rows["status"] == "ok")]
    if rows.empty:
        return None
    rows = _with_source(rows)
    series = ["series_source", "stack", "variant", "workload", "concurrency", "metric"]
    swept = rows.groupby(series, dropna=False)["power_cap_w"].transform("nunique") > 1
    rows = rows[swept]
    if rows.empty:
        return None
    fig = go.Figure()
    for key, group in rows.groupby(series, dropna=False):
        group = group.sort_values("power_cap_w")
        fig.add_trace(go.Scatter(x=group["power_cap_w"], y=group["value"], mode="lines+markers", name=_name(key),
                                 error_y=_error_bars(group)))
    return _layout(fig, f"Throughput against GPU power cap on {node}", "power cap (W)", "tok/s", rows)


def rate_by_workload(rows: pd.DataFrame, node: str) -> go.Figure | None:
    """Single-stream decode rate per workload and variant on one node, spread across repeats as error bars."""
    rows = rows[(rows["metric"] == "decode_tps") & (rows["concurrency"] == 1) & (rows["status"] == "ok")]
    if rows.empty:
        return None
    rows = _with_source(rows)
    fig = go.Figure()
    # One trace per source and variant; a workload measured twice under one variant (two posters) stays two bars.
    for key, group in rows.groupby(["series_source", "stack", "variant"], dropna=False):
        fig.add_trace(go.Bar(x=group["workload"], y=group["value"], name=_name(key), error_y=_error_bars(group)))
    fig.update_layout(barmode="group")
    return _layout(fig, f"Single-stream decode rate by workload on {node}", "workload", "tok/s", rows)


def concurrency_scaling(rows: pd.DataFrame, node: str) -> go.Figure | None:
    """Aggregate throughput against concurrency on one node, one line per (source, stack, variant, cap),
    the median over the variant's workloads at each concurrency."""
    rows = rows[(rows["metric"] == "aggregate_tps") & rows["concurrency"].notna() & (rows["status"] == "ok")]
    if rows.empty:
        return None
    rows = _with_source(rows)
    series = ["series_source", "stack", "variant", "power_cap_w"]
    points = rows.groupby(series + ["concurrency"], dropna=False).agg(value=("value", "median"),
                                                                       workloads=("workload", "nunique")).reset_index()
    points = points[points.groupby(series, dropna=False)["concurrency"].transform("nunique") > 1]
    if points.empty:
        return None
    fig = go.Figure()
    for key, group in points.groupby(series, dropna=False):
        group = group.sort_values("concurrency")
        cap = f"cap {key[3]:g} W" if pd.notna(key[3]) else None
        fig.add_trace(go.Scatter(x=group["concurrency"], y=group["value"], mode="lines+markers",
                                 name=_name((*key[:3], cap)), customdata=group["workloads"],
                                 hovertemplate="c%{x}: %{y:.3g} tok/s (median of %{customdata} workloads)"))
    return _layout(fig, f"Aggregate throughput against concurrency on {node}", "concurrent streams", "tok/s", rows)


def per_position_acceptance(rows: pd.DataFrame, node: str) -> go.Figure | None:
    """Acceptance rate of each draft position (seed 004: n=3's third position is accepted ~20%)."""
    rows = rows[rows["metric"].str.startswith("accept_rate_pos")]
    if rows.empty:
        return None
    rows = _with_source(rows)
    rows["position"] = rows["metric"].str.removeprefix("accept_rate_pos").astype(int)
    # One bar per position and variant: the mean over the variant's workloads (each pooled from counters).
    means = rows.groupby(["series_source", "stack", "variant", "position"], dropna=False)["value"].mean().reset_index()
    fig = go.Figure()
    for key, group in means.groupby(["series_source", "stack", "variant"], dropna=False):
        group = group.sort_values("position")
        fig.add_trace(go.Bar(x=group["position"], y=group["value"], name=_name(key)))
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 1])
    return _layout(fig, f"Acceptance rate per draft position on {node}", "draft position", "accepted fraction", rows)


def accept_len_by_depth(rows: pd.DataFrame, node: str) -> go.Figure | None:
    """Acceptance length against speculative depth, per workload, measured rows only."""
    rows = rows[(rows["metric"] == "accept_len") & rows["spec_tokens"].notna() & (rows["source"] == "measured")]
    if rows.empty:
        return None
    rows = _with_source(rows)
    fig = go.Figure()
    for key, group in rows.groupby(["series_source", "stack", "workload"], dropna=False):
        group = group.sort_values("spec_tokens")
        fig.add_trace(go.Scatter(x=group["spec_tokens"], y=group["value"], mode="lines+markers", name=_name(key),
                                 error_y=_error_bars(group)))
    return _layout(fig, f"Acceptance length against speculative depth on {node}", "draft tokens per step", "accept length", rows)


def spec_speedup(spec: pd.DataFrame, node: str) -> go.Figure | None:
    """Speculative speed-up against prompt length, per variant (seed 000: +107% short, ~0 at 128K); measured."""
    spec = spec[spec["node"] == node] if len(spec) else spec
    if spec.empty:
        return None
    fig = go.Figure()
    for key, group in spec.groupby(["stack", "variant"]):
        group = group.sort_values("prompt_tokens")
        fig.add_trace(go.Scatter(x=group["prompt_tokens"], y=group["speedup"], mode="markers+lines",
                                 text=group["workload"], name=_name(("measured", *key)),
                                 hovertemplate="%{text}: x%{y:.2f} at %{x} prompt tokens"))
    fig.add_hline(y=1.0, line_dash="dot")
    return _layout(fig, f"Speculative speed-up over no-spec by prompt length on {node}", "prompt tokens", "speed-up (x)",
                   pd.DataFrame({"source": ["measured"]}))
