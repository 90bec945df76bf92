"""What to run: per node, stack, power cap, workload and concurrency, the variant to run, its gain over the
stack's no-spec with an interval, the runner-up, and the price of the choice in KV pool and contexts held.

The score follows vLLM benchmarks/sweep/tune_speculative_k.py: each cell's median penalised by its spread,
median - 1.4826 x MAD x MAD_PENALTY (1.4826 x MAD estimates a normal standard deviation); cells with failed
requests or a relative MAD above MAX_REL_MAD are excluded and named; a smaller depth (no-spec is depth 0) is
preferred when its score is within DEPTH_MARGIN of the best. Only variants whose greedy outputs agree with
no-spec (analysis.correctness: no divergence, lengths as asked, the headline's rule) and that loop no more
than their reference cell are candidates. A variant is chosen over no-spec only when its gain's interval
clears zero: the 95% Welch interval (gain_interval) of its rate over no-spec's across their repeats; where it
does not, the choice says how many repeats each would decide at the spread seen (repeats_to_decide).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import scipy.stats

from stackbench.analysis.common import LAUNCH
from stackbench.analysis.gpustate import slowed_of
from stackbench.analysis.speculative import SPEC_PAIR
from stackbench.results.metrics import SLOWDOWN_METRICS
from stackbench.results.store import MEASURED

SCALED_MAD = 1.4826
MAD_PENALTY = 1.0
MAX_REL_MAD = 0.1
DEPTH_MARGIN = 0.01
NO_SPEC = "no-spec"
LEVEL = 0.95
GAIN_INTERVAL = ("Welch's t interval (95%) of the difference of the mean log rates over repeats, read as the ratio "
                 "of the geometric means - 1")
MOST_REPEATS_SAID = 1000  # repeats_to_decide looks no further
# The figure a cell is judged on: the per-stream decode rate of a single stream, the aggregate of several.
SINGLE_STREAM_METRIC, CONCURRENT_METRIC = "decode_tps", "aggregate_tps"
DECIDE_METRICS = (SINGLE_STREAM_METRIC, CONCURRENT_METRIC, "looping", "kv_pool_tokens", "cell_status", *SLOWDOWN_METRICS)
RULE = (f"score = median - {SCALED_MAD} x MAD x {MAD_PENALTY:g} over repeats (vLLM tune_speculative_k.py) of decode tok/s "
        f"at c1, aggregate tok/s above; excluded (named): cells with failed requests, relative MAD > {MAX_REL_MAD:g}, "
        "variants whose greedy outputs differ from no-spec or ran other lengths, variants whose accuracy interval lies "
        "wholly below no-spec's, cells that loop more than no-spec's, cells on a GPU slowed by thermal, HW slowdown or "
        "power brake; "
        f"a smaller depth (no-spec = 0) is preferred within {DEPTH_MARGIN:.0%} of the best score; a variant is run only "
        f"when its gain over no-spec clears zero on the gain's interval, {GAIN_INTERVAL}, else no-spec (with the "
        "repeats each would need at the spread seen). Price: KV pool tokens and contexts held (pool / context length) "
        "beside no-spec's.")
CHOICE_COLUMNS = ["node", "stack", "model", "power_cap_w", "workload", "concurrency", "prompt_tokens", "metric", "run",
                  "gain", "gain_low", "gain_high", "runner_up", "runner_up_gain", "why", "kv_pool_tokens",
                  "kv_pool_tokens_nospec", "contexts_held", "contexts_held_nospec", "excluded"]
# A cell's peers: SPEC_PAIR, the same in everything but the launch (each launch's rows carry a ref of their own).


def _log_moments(values) -> tuple[float, float, int] | None:
    """Mean and sample variance of the log rates, and their count; None below two positive repeats."""
    logs = np.log([v for v in (values if values is not None else ()) if v and v > 0])
    return (float(logs.mean()), float(logs.var(ddof=1)), len(logs)) if len(logs) >= 2 else None


def _welch_t(variance_a: float, variance_b: float, n_a: int, n_b: int) -> tuple[float, float]:
    """The standard error of a difference of means and Welch-Satterthwaite's t quantile at LEVEL."""
    a, b = variance_a / n_a, variance_b / n_b
    se = math.sqrt(a + b)
    df = (a + b) ** 2 / (a ** 2 / (n_a - 1) + b ** 2 / (n_b - 1)) if se > 0 else float("inf")
    return se, float(scipy.stats.t.ppf((1 + LEVEL) / 2, df))


def gain_interval(variant, reference) -> tuple[float, float, float] | None:
    """(gain, low, high) of `variant`'s rate over `reference`'s, from their per-repeat rates: GAIN_INTERVAL
    (rates are positive and their ratio is the question, so the difference is taken on logs). None where
    either has fewer than two repeats."""
    a, b = _log_moments(variant), _log_moments(reference)
    if a is None or b is None:
        return None
    diff = a[0] - b[0]
    se, t = _welch_t(a[1], b[1], a[2], b[2])
    return math.expm1(diff), math.expm1(diff - t * se), math.expm1(diff + t * se)


def repeats_to_decide(variant, reference) -> int | None:
    """How many repeats of each would make the gain's interval exclude zero, were the log rates' difference and
    variances what these repeats show; None where none up to MOST_REPEATS_SAID would (or either has < 2)."""
    a, b = _log_moments(variant), _log_moments(reference)
    if a is None or b is None or a[0] == b[0]:
        return None
    for n in range(2, MOST_REPEATS_SAID + 1):
        se, t = _welch_t(a[1], b[1], n, n)
        if t * se < abs(a[0] - b[0]):
            return n
    return None


def _undecided(variant: str, gain: float, low: float, high: float, more) -> str:
    need = f"about {more} repeats each would decide at the spread seen" if more else \
        f"more than {MOST_REPEATS_SAID} repeats each would be needed at the spread seen"
    return f"{variant} {gain:+.1%} ({low:+.1%} to {high:+.1%}): its interval does not clear zero, no-spec kept; {need}"


def judged(results: pd.DataFrame) -> pd.DataFrame:
    """The row each measured closed-loop cell is judged on: decode rate at c1, aggregate above."""
    measured = results[results["source"].isin(MEASURED) & results["concurrency"].notna()]
    metric = np.where(measured["concurrency"] == 1, SINGLE_STREAM_METRIC, CONCURRENT_METRIC)
    cells = measured[(measured["metric"] == metric) & (measured["status"] == "ok") & measured["value"].notna()]
    return cells.drop_duplicates(SPEC_PAIR + ["variant"]).reset_index(drop=True)


def _cells(results: pd.DataFrame) -> pd.DataFrame:
    """One row per measured closed-loop cell: its judged figure with median, interval, MAD and depth."""
    cells = judged(results)
    cells["depth"] = np.where(cells["spec_method"] == "none", 0, cells["spec_tokens"].astype(float).fillna(0))
    cells["score"] = cells["value"] - SCALED_MAD * cells["mad"].astype(float).fillna(0) * MAD_PENALTY
    cells["rel_mad"] = cells["mad"].astype(float) / cells["value"]
    return cells.reset_index(drop=True)


def _exclusions(cells: pd.DataFrame, results: pd.DataFrame, correctness: pd.DataFrame) -> pd.Series:
    """Why each cell may not be chosen ('' where it may)."""
    why = pd.Series("", index=cells.index, dtype=object)
    wide = cells["rel_mad"] > MAX_REL_MAD
    why[wide] = "relative MAD " + cells.loc[wide, "rel_mad"].map("{:.2f}".format).astype(str) + f" > {MAX_REL_MAD:g}"
    if not correctness.empty:
        verdict = cells[["node", "stack", "variant"]].merge(correctness, on=["node", "stack", "variant"], how="left")
        differs = verdict["first_divergence_token"].notna().to_numpy() & (cells["spec_method"] != "none").to_numpy()
        if "noise_floor" in verdict:  # judged against no-spec's own noise where it measured it (analysis.correctness)
            differs &= (verdict["charged"].fillna(False).astype(bool) | verdict["noise_floor"].isna()).to_numpy()
        lengths = verdict["length_off_in"].fillna("").ne("").to_numpy()
        why[differs] = "greedy outputs differ from no-spec"
        # A variant answering worse than its no-spec launch beyond both accuracy intervals (none ran: no column).
        if "accuracy_below_reference" in verdict:
            worse = (verdict["accuracy_below_reference"].fillna(0) > 0).to_numpy() & ~differs
            why[worse] = "accuracy interval wholly below its no-spec launch's (" + verdict.loc[worse, "accuracy_text"].set_axis(
                cells.index[worse]) + ")"
        why[lengths & ~differs] = "lengths not as asked in " + verdict.loc[lengths & ~differs, "length_off_in"].set_axis(
            cells.index[lengths & ~differs])
    looping = results[(results["metric"] == "looping") & results["value"].notna()].drop_duplicates(SPEC_PAIR + ["variant"])
    loops = cells[SPEC_PAIR + ["variant"]].merge(looping[SPEC_PAIR + ["variant", "value"]], on=SPEC_PAIR + ["variant"], how="left")["value"]
    reference = looping[looping["spec_method"] == "none"][SPEC_PAIR + ["value"]]
    ref_loops = cells[SPEC_PAIR].merge(reference, on=SPEC_PAIR, how="left")["value"].fillna(0)
    more = (loops.fillna(0) > ref_loops).to_numpy() & (why == "").to_numpy()
    why[more] = "loops in " + loops[more].map("{:.0%}".format).astype(str).to_numpy() + " of requests, no-spec " + ref_loops[more].map(
        "{:.0%}".format).astype(str).to_numpy()
    slowed = slowed_of(cells, results)
    why[slowed != ""] = "GPU slowed: " + slowed[slowed != ""]
    return why


def _failed_cells(results: pd.DataFrame) -> pd.DataFrame:
    """Cells that produced no figure (failed requests, rejections), named by group and variant."""
    bad = results[results["source"].isin(MEASURED) & (results["metric"] == "cell_status")
                  & results["status"].isin(["failed", "rejected", "not_run", "gpu_busy"]) & results["concurrency"].notna()]
    bad = bad.drop_duplicates(SPEC_PAIR + ["variant"])
    return bad.assign(why=bad["status"] + ": " + bad["reason"].fillna("no reason given"))[SPEC_PAIR + ["variant", "why"]]


def _launch_price(results: pd.DataFrame) -> pd.DataFrame:
    """Per launch, its KV pool tokens and how many full contexts that pool holds."""
    pools = results[(results["metric"] == "kv_pool_tokens") & results["value"].notna() & results["concurrency"].isna()]
    pools = pools.drop_duplicates(LAUNCH)
    context = pd.to_numeric(pools["context_len"], errors="coerce")
    return pd.DataFrame({**{c: pools[c] for c in LAUNCH}, "kv_pool_tokens": pools["value"],
                         "contexts_held": pools["value"] / context})


def _first(frame: pd.DataFrame, order: list[str], ascending: list[bool]) -> pd.DataFrame:
    return frame.sort_values(SPEC_PAIR + order, ascending=[True] * len(SPEC_PAIR) + ascending, kind="stable",
                             na_position="last").drop_duplicates(SPEC_PAIR)


def what_to_run(results: pd.DataFrame, correctness: pd.DataFrame) -> pd.DataFrame:
    """One row per (node, stack, model, cap, workload, concurrency, lengths): CHOICE_COLUMNS. `results` holds
    the DECIDE_METRICS rows (with mad, ci_low, ci_high), `correctness` is analysis.correctness_by_variant."""
    cells = _cells(results)
    if cells.empty:
        return pd.DataFrame(columns=CHOICE_COLUMNS)
    cells["excluded_why"] = _exclusions(cells, results, correctness)
    named = cells.loc[cells["excluded_why"] != "", SPEC_PAIR + ["variant", "excluded_why"]].rename(columns={"excluded_why": "why"})
    named = pd.concat([named, _failed_cells(results)], ignore_index=True)
    excluded = (named["variant"] + " (" + named["why"] + ")").groupby([named[c] for c in SPEC_PAIR], dropna=False).agg("; ".join)
    candidates = cells[cells["excluded_why"] == ""].copy()
    best = candidates.groupby(SPEC_PAIR, dropna=False)["score"].transform("max")
    candidates["within"] = candidates["score"] >= best * (1 - DEPTH_MARGIN)
    pick = _first(candidates, ["within", "depth", "score"], [False, True, False])
    rest = candidates.merge(pick[SPEC_PAIR + ["variant"]].assign(picked=True), on=SPEC_PAIR + ["variant"], how="left")
    runner = _first(rest[rest["picked"].isna()], ["score"], [False])
    reference = cells[cells["spec_method"] == "none"].drop_duplicates(SPEC_PAIR)

    keys = cells[SPEC_PAIR].drop_duplicates()
    out = keys.merge(pick, on=SPEC_PAIR, how="left").merge(
        runner[SPEC_PAIR + ["variant", "value", "spec_method"]].rename(columns=lambda c: c if c in SPEC_PAIR else f"runner_{c}"),
        on=SPEC_PAIR, how="left").merge(
        reference[SPEC_PAIR + ["source", "ref", "variant", "value", "repeat_values"]].rename(
            columns=lambda c: c if c in SPEC_PAIR else f"ref_{c}"),
        on=SPEC_PAIR, how="left")
    has_ref = out["ref_value"].notna()
    picked_spec = out["variant"].notna() & (out["spec_method"] != "none")
    intervals = [gain_interval(mine, theirs) if spec else None
                 for mine, theirs, spec in zip(out["repeat_values"], out["ref_repeat_values"], picked_spec & has_ref)]
    gain, low, high = (pd.Series([i[k] if i else np.nan for i in intervals], index=out.index, dtype=float) for k in range(3))
    clears = picked_spec & has_ref & (low > 0)
    falls_back = picked_spec & has_ref & ~clears
    run = np.select([out["variant"].isna(), ~has_ref | clears, falls_back], ["none eligible", out["variant"], NO_SPEC], NO_SPEC)
    # Who else: when a variant's gain did not clear, that variant; else the next score down.
    runner_up = np.where(falls_back, out["variant"], np.where(out["runner_spec_method"] == "none", NO_SPEC, out["runner_variant"]))
    runner_value = np.where(falls_back, out["value"], out["runner_value"])
    no_interval = gain.isna()
    undecided = [_undecided(v, g, lo, hi, repeats_to_decide(mine, theirs)) if fall and not none else ""
                 for v, g, lo, hi, mine, theirs, fall, none in zip(out["variant"], gain, low, high, out["repeat_values"],
                                                                   out["ref_repeat_values"], falls_back, no_interval)]
    why = np.select(
        [out["variant"].isna(), ~has_ref, clears, falls_back & no_interval, falls_back, out["spec_method"] == "none"],
        ["every cell excluded", "no no-spec launch here: variants ranked without a reference",
         "gain's interval clears zero", "no interval of the gain (fewer than 2 repeats of either, or no per-repeat "
         "values stored): no-spec kept", pd.Series(undecided, index=out.index),
         "no-spec scores best (or within the depth margin)"], "")
    price = _launch_price(results)
    runs_reference = run == NO_SPEC
    chosen = pd.DataFrame({"source": np.where(runs_reference, out["ref_source"], out["source"]),
                           "ref": np.where(runs_reference, out["ref_ref"], out["ref"]), "node": out["node"],
                           "stack": out["stack"], "variant": np.where(runs_reference, out["ref_variant"], out["variant"])})
    chosen = chosen.merge(price, on=LAUNCH, how="left")
    nospec = pd.DataFrame({"source": out["ref_source"], "ref": out["ref_ref"], "node": out["node"], "stack": out["stack"],
                           "variant": out["ref_variant"]}).merge(price, on=LAUNCH, how="left")
    table = pd.DataFrame({
        **{c: out[c] for c in ["node", "stack", "model", "power_cap_w", "workload", "concurrency", "prompt_tokens"]},
        "metric": np.where(out["concurrency"] == 1, SINGLE_STREAM_METRIC, CONCURRENT_METRIC), "run": run,
        "gain": gain.where(clears), "gain_low": low.where(clears), "gain_high": high.where(clears),
        "runner_up": runner_up, "runner_up_gain": (pd.Series(runner_value, index=out.index) / out["ref_value"] - 1),
        "why": why,
        "kv_pool_tokens": chosen["kv_pool_tokens"].to_numpy(), "kv_pool_tokens_nospec": nospec["kv_pool_tokens"].to_numpy(),
        "contexts_held": chosen["contexts_held"].to_numpy(), "contexts_held_nospec": nospec["contexts_held"].to_numpy(),
        "excluded": out[SPEC_PAIR].merge(excluded.rename("excluded").reset_index(), on=SPEC_PAIR, how="left")["excluded"].fillna("").to_numpy(),
    })
    return table.sort_values(["node", "stack", "model", "power_cap_w", "workload", "concurrency"], kind="stable").reset_index(drop=True)
