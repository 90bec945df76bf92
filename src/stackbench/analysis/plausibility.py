"""Plausibility checks on every row that comes in (a bundle's, a post's) and on our own: figures that the
hardware or the definitions cannot produce. Each flagged cell carries its reason on every row of the cell
(results column `implausible`, set at collect), and What to run never chooses it (analysis/decide.py).

The checks, each against a bound from facts already in the results:
- decode over its roofline: single-stream decode above ROOFLINE_MARGIN x the bandwidth ceiling of the row's
  device (analysis/roofline.py: bandwidth from the GPU's node facts or the measured host copy, bytes per token
  from the engine log, the model file or parameters x bits; x the acceptance length, or x depth + 1 for a
  speculative row that reports none);
- acceptance above depth + 1: a draft of n tokens accepts at most n, plus the token the target adds itself;
- power over the GPU's limit: a central power figure per GPU (power_w_per_gpu, else power_w / gpu_count) above
  POWER_MARGIN x the per-GPU limit the cell ran under (the enforced cap NVML read back, else the limit found at the
  launch's start or NVML's default: host/telemetry.py rows power_limit_found_w, power_limit_default_w);
- energy per token below what power and rate allow: J/token under ENERGY_MARGIN x mean power / the cell's
  fastest token rate (the aggregate, or one stream's decode x streams), which already favours the row;
- aggregate below one stream: at two or more streams, the aggregate rate below what one stream of the same cell
  delivers over a whole request, its output tokens over its TTFT plus their decode (an aggregate over n streams is
  at least one of them; the first-token waits are inside both).
- a speculative speed-up its acceptance cannot explain: a speculative cell's decode (or aggregate) rate over its
  stack's no-spec cell of the same round, load, cap and prompt length above SPEEDUP_MARGIN x its acceptance length.
  Each verification step emits the acceptance length's tokens on average, Leviathan et al. 2023 ("Fast Inference
  from Transformers via Speculative Decoding", ICML, eq. 1: (1 - a^(k+1)) / (1 - a) tokens per step at acceptance
  rate a and depth k; accept_len, 1 + accepted / drafts, is that mean as the engine counted it), and a step costs at
  least one plain decode step (it reads every weight once, as a decode step does, and verifies k + 1 positions; the
  draft's own cost comes on top, their c x k), so the speed-up is at most the acceptance length x decode step time /
  verification step time <= the acceptance length; where no acceptance is reported, depth + 1;
- per-stream decode that does not fall with concurrency, in a rehearsal only: a stand-in cell at FLAT_FROM or more
  streams whose per-stream decode is FLAT_SHARE or more of its launch's single stream's at the same workload, cap and
  prompt length. Batching shares each step's weight read but every stream adds its KV reads and its compute, so a
  real GPU's per-stream rate falls as streams are added; a flat one says the stand-in's pace ignores the batch.
These compare a cell's figures at one prompt length (POINT): a context ladder's points share the cell's identity,
and a short point's energy is not bounded by a long point's power (its prefill) or rate.
Margins absorb the estimates in each bound (a roofline's bandwidth, NVML's sampling), not doubt about the rule.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from stackbench.analysis.common import CELL, GEOMETRY_FIELDS, LAUNCH, launch_values, on_launch
from stackbench.analysis.roofline import roofline
from stackbench.config.speculative import NO_SPEC
from stackbench.results.judged import single_stream
from stackbench.results.metrics import M

ROOFLINE_MARGIN = 1.25
POWER_MARGIN = 1.10
ENERGY_MARGIN = 0.8
SPEEDUP_MARGIN = 1.25  # two launches' spread (the posts' reruns spread up to 19.65%, vLLM issue 53436) in one ratio
FLAT_FROM = 8  # streams
FLAT_SHARE = 0.95  # of the single stream's per-stream decode
CENTRAL = ("median", "mean", "single")
POINT = [*CELL, "prompt_tokens"]  # one cell at one prompt length (a ladder's point)
COLUMN = "implausible"
# What the checks read (and analysis/roofline.py under over_roofline): the rows of these metrics, these columns. Every
# other row's figure is never looked at, so findings() over these rows alone equals findings() over the whole table;
# a check that comes to read another metric or column adds it here.
METRICS = (M.decode_tps, M.accept_len, M.power_w, M.power_w_per_gpu, M.energy_j_per_token, M.aggregate_tps, M.ttft_s,
           M.power_limit_found_w, M.power_limit_default_w,
           M.model_mib, M.load_gib, M.host_mem_bandwidth_gbs, M.gpu_mem_bandwidth_gbs,
           *(f"geometry_{f}" for f in [*GEOMETRY_FIELDS, "params_b", "weight_mib"]))
READS = list(dict.fromkeys([*CELL, *LAUNCH, "metric", "value", "status", "stat", "power_cap_enforced_w", "quant", "kv_dtype",
                            "prompt_tokens", "output_tokens", "tp", "gpu_count", "note", "logged_per_rank"]))


def _ok(results: pd.DataFrame, metric: str) -> pd.DataFrame:
    rows = results[(results["metric"] == metric) & results["value"].notna()]
    return rows[rows["status"].isin(["ok"]) | rows["status"].isna()]


def over_roofline(results: pd.DataFrame) -> pd.DataFrame:
    """Decode rows above their roofline, with the reason (CELL + reason)."""
    roof = roofline(results)
    if roof.empty:
        return pd.DataFrame(columns=CELL + ["reason"])
    decode = _ok(results, M.decode_tps)
    decode = decode[single_stream(decode)]
    keys = ["source", "ref", "node", "stack", "variant", "power_cap_w", "workload"]
    joined = decode.merge(roof[keys + ["decode_tps", "ceiling_tps", "accept_len", "bandwidth_gbs"]].drop_duplicates(),
                          left_on=keys + ["value"], right_on=keys + ["decode_tps"], how="inner")
    speculative = ~joined["spec_method"].isin([NO_SPEC, "unknown"]) & joined["spec_method"].notna()
    # roofline multiplies by the acceptance length where one is reported, else by 1; with none reported a
    # speculative row may still emit up to depth + 1 tokens per weight read.
    depth_bound = pd.to_numeric(joined["spec_tokens"], errors="coerce").fillna(0) + 1
    ceiling = joined["ceiling_tps"] * np.where(speculative & joined["accept_len"].isna(), depth_bound, 1.0)
    over = joined[joined["value"] > ROOFLINE_MARGIN * ceiling]
    ceiling = ceiling[over.index]
    reason = [f"decode {v:.4g} tok/s is {v / c:.1f}x its weight-read roofline ({c:.4g} tok/s at {b:g} GB/s)"
              for v, c, b in zip(over["value"], ceiling, over["bandwidth_gbs"])]
    return over[CELL].assign(reason=reason)


def accept_over_depth(results: pd.DataFrame) -> pd.DataFrame:
    rows = _ok(results, M.accept_len)
    depth = pd.to_numeric(rows["spec_tokens"], errors="coerce")
    over = rows[depth.notna() & (rows["value"] > depth + 1 + 1e-9)]
    reason = [f"acceptance length {v:.3g} above speculative depth {d:g} + 1"
              for v, d in zip(over["value"], pd.to_numeric(over["spec_tokens"]))]
    return over[CELL].assign(reason=reason)


def per_gpu_power(results: pd.DataFrame) -> pd.DataFrame:
    """Each cell's central power per GPU (CELL + value + `basis`): its power_w_per_gpu row where measured (the
    busiest GPU's own mean), else its power_w (the launch's GPUs together) / gpu_count; a post's power_w with no
    GPU count stated is taken as one GPU's."""
    central = results[results["stat"].isin(CENTRAL)]
    own = _ok(central, M.power_w_per_gpu).drop_duplicates(CELL).assign(basis="")
    total = _ok(central, M.power_w)
    total = total[~total.set_index(CELL).index.isin(own.set_index(CELL).index)].drop_duplicates(CELL)
    gpus = pd.to_numeric(total["gpu_count"], errors="coerce").where(lambda n: n > 0).fillna(1)
    basis = [f" ({v:.4g} W over {n:g} GPUs)" if n > 1 else "" for v, n in zip(total["value"], gpus)]
    total = total.assign(value=total["value"] / gpus, basis=basis)
    return pd.concat([own, total]) if len(own) else total


def power_over_limit(results: pd.DataFrame) -> pd.DataFrame:
    """A cell whose power per GPU is above POWER_MARGIN x the limit each GPU ran under: a per-GPU limit is
    compared with per-GPU power only (a two-GPU node's sum is twice what either GPU may draw)."""
    rows = per_gpu_power(results)
    if rows.empty:
        return pd.DataFrame(columns=CELL + ["reason"])
    limits = on_launch(rows, launch_values(results, {M.power_limit_found_w: "found", M.power_limit_default_w: "default"}))
    limit = rows["power_cap_enforced_w"].astype(float).fillna(limits["found"]).fillna(limits["default"])
    over = rows[limit.notna() & (rows["value"] > POWER_MARGIN * limit)]
    reason = [f"power {v:.4g} W per GPU{b} above the GPU's limit {lim:g} W"
              for v, b, lim in zip(over["value"], over["basis"], limit[over.index])]
    return over[CELL].assign(reason=reason)


def energy_below_power(results: pd.DataFrame) -> pd.DataFrame:
    energy = _ok(results, M.energy_j_per_token)
    if energy.empty:
        return pd.DataFrame(columns=CELL + ["reason"])
    per_cell = {}
    for metric in (M.power_w, M.aggregate_tps, M.decode_tps):
        picked = _ok(results, metric)
        per_cell[metric] = picked.groupby(POINT, dropna=False, sort=False)["value"].median().rename(metric).reset_index()
    joined = energy
    for frame in per_cell.values():
        joined = joined.merge(frame, on=POINT, how="left")
    streams = pd.to_numeric(joined["concurrency"], errors="coerce").fillna(1)
    fastest = np.fmax(joined[M.aggregate_tps], joined[M.decode_tps] * streams)
    floor = joined[M.power_w] / fastest
    low = joined[floor.notna() & (joined["value"] < ENERGY_MARGIN * floor)]
    reason = [f"energy {v:.3g} J/token below what {p:.4g} W at {r:.4g} tok/s allows ({f:.3g} J/token)"
              for v, p, r, f in zip(low["value"], low[M.power_w], fastest[low.index], floor[low.index])]
    return low[CELL].assign(reason=reason)


def aggregate_below_single(results: pd.DataFrame) -> pd.DataFrame:
    """At two or more streams, the aggregate below what one stream of the same cell delivers over a whole request:
    its output tokens over its first-token wait plus their decode (out / (TTFT + out / decode)). The aggregate counts
    the first-token waits in its window (vLLM bench serve's output throughput), so a cell of long prompts, whose
    prefill fills much of the window, is measured against a stream's request rate, not its decode rate alone."""
    aggregate = _ok(results, M.aggregate_tps)
    aggregate = aggregate[pd.to_numeric(aggregate["concurrency"], errors="coerce") >= 2]
    central = {metric: _ok(results, metric).groupby(POINT, dropna=False, sort=False)["value"].median().rename(metric)
               for metric in (M.decode_tps, M.ttft_s)}
    joined = aggregate.merge(central[M.decode_tps].reset_index(), on=POINT, how="inner").merge(
        central[M.ttft_s].reset_index(), on=POINT, how="left")
    out = pd.to_numeric(joined["output_tokens"], errors="coerce")
    request_rate = out / (joined[M.ttft_s] + out / joined[M.decode_tps])
    floor = request_rate.where(request_rate.notna(), joined[M.decode_tps])
    low = joined[joined["value"] < floor]
    reason = [f"aggregate {a:.4g} tok/s over {c:.0f} streams below one stream's decode {d:.4g} tok/s" if pd.isna(t) else
              f"aggregate {a:.4g} tok/s over {c:.0f} streams below one stream's {f:.4g} tok/s over a whole request "
              f"(decode {d:.4g} tok/s, TTFT {t:.3g} s)"
              for a, c, f, d, t in zip(low["value"], low["concurrency"], floor[low.index], low[M.decode_tps], low[M.ttft_s])]
    return low[CELL].assign(reason=reason)


def _central(results: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One central figure per cell at one prompt length (POINT + value)."""
    rows = _ok(results, metric)
    rows = rows[rows["stat"].isin(CENTRAL)]
    return rows.groupby(POINT, dropna=False, sort=False)["value"].median().reset_index()


def speedup_over_acceptance(results: pd.DataFrame) -> pd.DataFrame:
    """A speculative cell whose rate over its stack's no-spec cell (same source, node, round, cap, workload, load and
    prompt length) is above SPEEDUP_MARGIN x its acceptance length (else depth + 1): more tokens a step than it
    accepts."""
    pair = ["source", "node", "stack", "replicate", "power_cap_w", "workload", "concurrency", "request_rate", "prompt_tokens"]
    accept = _central(results, M.accept_len).rename(columns={"value": "accept"})
    found = []
    for metric in (M.decode_tps, M.aggregate_tps):
        rates = _central(results, metric)
        speculative = ~rates["spec_method"].isin([NO_SPEC, "unknown"]) & rates["spec_method"].notna()
        base = rates[rates["spec_method"] == NO_SPEC][pair + ["value"]].rename(columns={"value": "base"})
        joined = rates[speculative].merge(base, on=pair, how="inner").merge(accept, on=POINT, how="left")
        depth = pd.to_numeric(joined["spec_tokens"], errors="coerce") + 1
        bound = joined["accept"].fillna(depth)
        speedup = joined["value"] / joined["base"]
        over = joined[bound.notna() & (joined["base"] > 0) & (speedup > SPEEDUP_MARGIN * bound)]
        said = ["acceptance length" if pd.notna(a) else "depth + 1 (no acceptance reported)" for a in over["accept"]]
        found.append(over[CELL].assign(reason=[
            f"{metric} {v:.4g} is {v / b:.2f}x the no-spec cell's {b:.4g}, above what {what} {n:.3g} explains (at most "
            f"that many tokens a verification step, each step at least a decode step's time: Leviathan et al. 2023)"
            for v, b, what, n in zip(over["value"], over["base"], said, bound[over.index])]))
    return pd.concat(found, ignore_index=True)


def flat_per_stream_decode(results: pd.DataFrame) -> pd.DataFrame:
    """A rehearsal cell at FLAT_FROM or more streams whose per-stream decode is FLAT_SHARE or more of its launch's
    single stream's (same workload, cap and prompt length): a stand-in whose pace ignores the batch."""
    decode = _central(results[results["source"] == "rehearsal"], M.decode_tps)
    launch = ["source", "ref", "node", "stack", "variant", "replicate", "power_cap_w", "workload", "prompt_tokens"]
    single = decode[decode["concurrency"] == 1][launch + ["value"]].rename(columns={"value": "single"})
    many = decode[pd.to_numeric(decode["concurrency"], errors="coerce") >= FLAT_FROM].merge(single, on=launch, how="inner")
    flat = many[many["value"] >= FLAT_SHARE * many["single"]]
    reason = [f"per-stream decode {v:.4g} tok/s at {c:.0f} streams is {v / s:.0%} of one stream's {s:.4g} tok/s: it does "
              "not fall with concurrency, as batching on a GPU does (the stand-in's pace ignores the batch)"
              for v, c, s in zip(flat["value"], flat["concurrency"], flat["single"])]
    return flat[CELL].assign(reason=reason)


CHECKS = (over_roofline, accept_over_depth, power_over_limit, energy_below_power, aggregate_below_single,
          speedup_over_acceptance, flat_per_stream_decode)


def findings(results: pd.DataFrame) -> pd.DataFrame:
    """One row per flagged cell (CELL) with every reason its rows failed, joined by '; '."""
    found = [check(results) for check in CHECKS]
    found = [f for f in found if len(f)]
    if not found:
        return pd.DataFrame(columns=CELL + ["reason"])
    every = pd.concat(found, ignore_index=True).drop_duplicates()
    # groupby(CELL, sort=False)["reason"].agg("; ".join), without a pandas Series per cell (1 s at 40,000 cells):
    # cells in order of first appearance, each cell's reasons in order.
    ids = every.groupby(CELL, dropna=False, sort=False).ngroup().tolist()
    reasons = [[] for _ in range(max(ids) + 1)]
    for cell, reason in zip(ids, every["reason"].tolist()):
        reasons[cell].append(reason)
    cells = every.drop_duplicates(CELL)[CELL].reset_index(drop=True)
    return cells.assign(reason=["; ".join(r) for r in reasons])


def flag(results: pd.DataFrame) -> pd.Series:
    """The `implausible` column for `results` held as a pandas frame (the analyses' tests): flag_table's."""
    flags = flag_table(pa.Table.from_pandas(results, preserve_index=False))
    return pd.Series(flags.to_pylist(), index=results.index, dtype=object)


def flag_table(table: pa.Table) -> pa.Array:
    """flag() for a results table in Arrow (store.collect's check): only the rows and columns the checks read
    (METRICS, READS) go to pandas, and each flagged cell's reasons come back onto every row of the cell through a
    DuckDB join on CELL (nulls equal, as pandas' merge has them), in the table's row order."""
    rows = table.select([c for c in READS if c in table.schema.names])
    flagged = findings(rows.filter(pc.is_in(rows["metric"], value_set=pa.array(METRICS, pa.string()))).to_pandas())
    if flagged.empty:
        return pa.nulls(table.num_rows, pa.string())
    keys = pa.table({c: _null_nan(table[c]) for c in CELL}).append_column("_row", pa.array(np.arange(table.num_rows)))
    cells = pa.table({c: pa.array(flagged[c].astype(object).where(flagged[c].notna(), None).tolist(),
                                  type=table.schema.field(c).type, from_pandas=True) for c in CELL})
    cells = cells.append_column("_cell", pa.array(np.arange(len(flagged))))
    on = " and ".join(f'k."{c}" is not distinct from c."{c}"' for c in CELL)
    con = duckdb.connect()
    con.register("k", keys)
    con.register("c", cells)
    hits = con.execute(f"select k._row, c._cell from k join c on {on}").fetchnumpy()
    con.close()
    codes = np.full(table.num_rows, -1, dtype=np.int64)
    codes[hits["_row"]] = hits["_cell"]
    return pc.take(pa.array(flagged["reason"].tolist(), pa.string()), pa.array(codes, mask=codes < 0))


def _null_nan(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A float key column with NaN read as null: pandas' merge matches NaN keys with null ones."""
    if pa.types.is_floating(column.type):
        return pc.if_else(pc.is_nan(column), pa.scalar(None, column.type), column)
    return column
