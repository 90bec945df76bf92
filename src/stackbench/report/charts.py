"""Plotly figures: pure functions from result rows to a figure, faceted by named basis columns."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

RATE_METRICS = ("decode_tps", "aggregate_tps", "e2e_tps")


def _layout(fig: go.Figure, title: str, x: str, y: str) -> go.Figure:
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, template="plotly_white", height=380,
                      margin=dict(l=60, r=20, t=60, b=50), legend_title_text="")
    return fig


def _error_bars(frame: pd.DataFrame) -> dict | None:
    if frame["value_min"].isna().all():
        return None
    return dict(type="data", symmetric=False,
                array=(frame["value_max"] - frame["value"]).fillna(0).tolist(),
                arrayminus=(frame["value"] - frame["value_min"]).fillna(0).tolist())


def power_sweep(results: pd.DataFrame) -> go.Figure | None:
    """Throughput against power cap, one line per (source, node, stack, variant)."""
    rows = results[results["power_cap_w"].notna() & results["metric"].isin(RATE_METRICS) & (results["status"] == "ok")]
    series = ["source", "node", "stack", "variant", "workload", "concurrency", "metric"]
    rows = rows.groupby(series, dropna=False).filter(lambda g: g["power_cap_w"].nunique() > 1)
    if rows.empty:
        return None
    fig = go.Figure()
    for key, group in rows.groupby(series, dropna=False):
        group = group.sort_values("power_cap_w")
        fig.add_trace(go.Scatter(x=group["power_cap_w"], y=group["value"], mode="lines+markers",
                                 name=" / ".join(str(k) for k in key), error_y=_error_bars(group)))
    return _layout(fig, "Throughput against GPU power cap", "power cap (W)", "tok/s")


def rate_by_workload(results: pd.DataFrame, node: str) -> go.Figure | None:
    """Single-stream decode rate per workload and variant, with the spread across repeats as error bars."""
    rows = results[(results["node"] == node) & (results["metric"] == "decode_tps") & (results["concurrency"] == 1)
                   & (results["status"] == "ok")]
    if rows.empty:
        return None
    fig = go.Figure()
    # One trace per source row set; a workload measured twice under one variant (two posters) stays two bars.
    for (source, ref, stack, variant), group in rows.groupby(["source", "ref", "stack", "variant"], dropna=False):
        name = f"{source} / {stack} / {variant}" + (f" ({ref.split(' ')[0]})" if source == "published" else "")
        fig.add_trace(go.Bar(x=group["workload"], y=group["value"], name=name, error_y=_error_bars(group)))
    fig.update_layout(barmode="group")
    return _layout(fig, f"Single-stream decode rate by workload on {node}", "workload", "tok/s")


def concurrency_scaling(results: pd.DataFrame) -> go.Figure | None:
    """Aggregate throughput against concurrency, one line per (source, node, stack, variant, workload)."""
    rows = results[(results["metric"] == "aggregate_tps") & results["concurrency"].notna() & (results["status"] == "ok")]
    rows = rows.groupby(["source", "node", "stack", "variant", "workload"], dropna=False).filter(lambda g: g["concurrency"].nunique() > 1)
    if rows.empty:
        return None
    fig = go.Figure()
    for key, group in rows.groupby(["source", "node", "stack", "variant", "workload"], dropna=False):
        group = group.sort_values("concurrency")
        fig.add_trace(go.Scatter(x=group["concurrency"], y=group["value"], mode="lines+markers",
                                 name=" / ".join(str(k) for k in key), error_y=_error_bars(group)))
    return _layout(fig, "Aggregate throughput against concurrency", "concurrent streams", "tok/s")


def per_position_acceptance(results: pd.DataFrame) -> go.Figure | None:
    """Acceptance rate of each draft position (seed 004: n=3's third position is accepted ~20%)."""
    rows = results[results["metric"].str.startswith("accept_rate_pos")].copy()
    if rows.empty:
        return None
    rows["position"] = rows["metric"].str.removeprefix("accept_rate_pos").astype(int)
    # One bar per position and variant: the mean over the variant's workloads (each pooled from counters).
    rows = rows.groupby(["source", "node", "stack", "variant", "position"], dropna=False)["value"].mean().reset_index()
    fig = go.Figure()
    for key, group in rows.groupby(["source", "node", "stack", "variant"], dropna=False):
        group = group.sort_values("position")
        fig.add_trace(go.Bar(x=group["position"], y=group["value"], name=" / ".join(str(k) for k in key)))
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 1])
    return _layout(fig, "Acceptance rate per draft position", "draft position", "accepted fraction")


def accept_len_by_depth(results: pd.DataFrame) -> go.Figure | None:
    """Acceptance length against speculative depth, per workload."""
    rows = results[(results["metric"] == "accept_len") & results["spec_tokens"].notna() & (results["source"] == "measured")]
    if rows.empty:
        return None
    fig = go.Figure()
    for key, group in rows.groupby(["node", "stack", "workload"], dropna=False):
        group = group.sort_values("spec_tokens")
        fig.add_trace(go.Scatter(x=group["spec_tokens"], y=group["value"], mode="lines+markers",
                                 name=" / ".join(str(k) for k in key), error_y=_error_bars(group)))
    return _layout(fig, "Acceptance length against speculative depth (measured)", "draft tokens per step", "accept length")


def spec_speedup(spec: pd.DataFrame) -> go.Figure | None:
    """Speculative speed-up against prompt length, per variant (seed 000: +107% short, ~0 at 128K)."""
    if spec.empty:
        return None
    fig = go.Figure()
    for key, group in spec.groupby(["node", "stack", "variant"]):
        group = group.sort_values("prompt_tokens")
        fig.add_trace(go.Scatter(x=group["prompt_tokens"], y=group["speedup"], mode="markers+lines",
                                 text=group["workload"], name=" / ".join(key),
                                 hovertemplate="%{text}: x%{y:.2f} at %{x} prompt tokens"))
    fig.add_hline(y=1.0, line_dash="dot")
    return _layout(fig, "Speculative decoding speed-up over no-spec, by prompt length", "prompt tokens", "speed-up (x)")
