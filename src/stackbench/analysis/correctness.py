"""Correctness beside speed, per variant: probes, greedy agreement with the no-spec launch, output lengths
and loops, in words for the headline and as caveats."""

from __future__ import annotations

import numpy as np
import pandas as pd

from stackbench.analysis.common import text_of
from stackbench.results.metrics import M
from stackbench.results.store import MEASURED

CORRECTNESS_METRICS = [M.smoke_score, M.needle_pass, M.cache_consistent, M.regression_score, M.output_agreement,
                       M.first_divergence_token, M.loops_charged, M.output_len_ok, M.repetition_ratio, M.looping,
                       M.accuracy, M.accuracy_invalid, M.answer_agreement, M.accuracy_below_reference,
                       M.agreement_noise_floor, M.mean_kld, M.perplexity]
VARIANT = ["node", "stack", "variant"]

# The one verdict rule of every table. Loops: charged only from the probes' greedy outputs, prompt by prompt,
# where a variant's output loops and its reference's on the same prompt does not (loops_charged, made at
# collect); the measured cells' `looping` (salted prompts, fixed lengths past EOS, or sampled) is a share
# reported for every variant alike, never a verdict on one. Greedy disagreement is tolerated as numerics:
# GPU kernels (batch shapes, fp8 KV, a verify step's other batch) flip near-ties, mostly late, so a strict
# identity rule would flag nearly every GPU variant. Charged: a first divergence before this many tokens
# (words where pieces are not tokens), or a mean agreement under this share.
TOLERATED_DIVERGENCE = 16
TOLERATED_AGREEMENT = 0.8
TOLERANCE = (f"greedy outputs first differing at token {TOLERATED_DIVERGENCE} or later with a mean agreement of "
             f"{TOLERATED_AGREEMENT:g} or more are reported, not charged: GPU kernels (batch shapes, fp8 KV) flip "
             "near-ties late, and a strict identity rule would flag nearly every GPU variant")


# Judged against noise (issue 37): where the reference (the no-spec launch of the variant's node and stack)
# measured its own noise floor (agreement_noise_floor: itself at concurrency 2 against concurrency 1), a
# variant's disagreement is charged only where it exceeds the floor's by more than this share of the output;
# batched verification flips near-ties on any engine, a real fault changes far more (and the answers:
# accuracy_below_reference is charged whatever the floor).
NOISE_MARGIN = 0.1
NOISE_RULE = (f"where the no-spec launch measured its own noise floor (its probe prompts two at a time vs alone), a "
              f"variant's greedy disagreement is charged only beyond that floor's by more than {NOISE_MARGIN:g} of the "
              "output; answers worse than no-spec's (exact McNemar test on the flips) are charged whatever the floor")


def disagreement_charged(agreement: pd.Series, first_divergence: pd.Series, floor: pd.Series | None = None) -> pd.Series:
    """A greedy disagreement beyond the reference's noise floor by NOISE_MARGIN where it has one (`floor`,
    its agreement_noise_floor), else beyond the fixed tolerance (TOLERATED_DIVERGENCE, TOLERATED_AGREEMENT)."""
    fixed = first_divergence.notna() & ((first_divergence < TOLERATED_DIVERGENCE) | (agreement < TOLERATED_AGREEMENT))
    if floor is None:
        return fixed
    noisy = first_divergence.notna() & ((1 - agreement) > (1 - floor) + NOISE_MARGIN)
    return noisy.where(floor.notna(), fixed)


def reference_floor(table: pd.DataFrame) -> pd.Series:
    """Per variant (the index of `table`), the noise floor of its node and stack's one no-spec launch (the
    only variant there with an agreement_noise_floor); NaN where there is none or several."""
    floors = table[M.agreement_noise_floor].dropna()
    per_stack = floors.groupby(level=["node", "stack"]).agg(["first", "count"])
    one = per_stack.loc[per_stack["count"] == 1, "first"]
    keys = pd.MultiIndex.from_arrays([table.index.get_level_values("node"), table.index.get_level_values("stack")])
    return pd.Series(one.reindex(keys).to_numpy(), index=table.index)


def _workloads_where(rows: pd.DataFrame, flagged: pd.Series) -> pd.Series:
    """Per variant, the workloads of its flagged rows, comma-joined ('' where none)."""
    hits = rows[flagged].drop_duplicates(VARIANT + ["workload"]).sort_values("workload")
    return hits.groupby(VARIANT)["workload"].agg(", ".join)


def correctness_by_variant(results: pd.DataFrame) -> pd.DataFrame:
    """One row per measured variant: its probe figures, its greedy agreement with the no-spec launch, its
    charged loops, the workloads whose cells came out at other lengths than asked, and the highest loop share
    of its cells with where (`looping`, `looping_in`: reported for every variant alike, never a verdict);
    `outputs` says it in words for the headline ("= no-spec", "differs at token 7 (agreement 0.41)",
    "differs late at token 40 (agreement 0.93), within tolerance", "loops where no-spec does not (0.33 of
    probe prompts)") and `flagged` marks a variant whose speed figures are not of the reference's output
    (charged by the rule above), `caveat` says why."""
    rows = results[results["source"].isin(MEASURED) & (results["status"] == "ok")
                   & results["metric"].isin(CORRECTNESS_METRICS)]
    if rows.empty:
        return pd.DataFrame(columns=[*VARIANT, "outputs", "flagged", "caveat", "accuracy_text"])
    # Several probe cells (or launches) of one variant: the worst of them (the lowest share, the earliest
    # divergence, the highest repetition).
    worst = rows.groupby(VARIANT + ["metric"])["value"].agg(["min", "max"]).unstack("metric")
    table = pd.DataFrame(index=worst.index)
    for metric in (M.smoke_score, M.needle_pass, M.cache_consistent, M.regression_score, M.output_agreement, M.output_len_ok,
                   M.first_divergence_token, M.repetition_ratio, M.loops_charged, M.looping, M.accuracy,
                   M.accuracy_invalid, M.answer_agreement, M.accuracy_below_reference, M.agreement_noise_floor):
        higher_is_worse = (M.repetition_ratio, M.loops_charged, M.looping, M.accuracy_invalid, M.accuracy_below_reference)
        side = worst["max" if metric in higher_is_worse else "min"]
        table[metric] = side[metric] if metric in side else np.nan
    quality = pd.concat([accuracy_text(rows), divergence_text(rows)], axis=1).reindex(table.index).fillna("")
    table["accuracy_text"] = ["; ".join(t for t in texts if t) for texts in quality.itertuples(index=False)]
    needle = rows[rows["metric"] == M.needle_pass].groupby(VARIANT)["prompt_tokens"].max()
    table["needle_prompt_tokens"] = needle.reindex(table.index)
    units = rows[rows["metric"] == M.first_divergence_token].groupby(VARIANT)["unit"].first()
    table["divergence_unit"] = units.reindex(table.index)
    table["looping_in"] = _workloads_where(rows, (rows["metric"] == M.looping) & (rows["value"] > 0)).reindex(table.index).fillna("")
    table["length_off_in"] = _workloads_where(rows, (rows["metric"] == M.output_len_ok) & (rows["value"] < 1)).reindex(table.index).fillna("")
    differs = table[M.first_divergence_token].notna()
    table["noise_floor"] = reference_floor(table)
    charged = disagreement_charged(table[M.output_agreement], table[M.first_divergence_token], table["noise_floor"])
    table["charged"] = charged
    loops = table[M.loops_charged].fillna(0) > 0
    unit = table["divergence_unit"].fillna("tokens").str.removesuffix("s")
    where = ("at " + unit + " " + text_of(table[M.first_divergence_token], "{:.0f}")
             + " (agreement " + text_of(table[M.output_agreement], "{:.2f}") + ")")
    floored = table["noise_floor"].notna()
    floor_text = "no-spec's own noise floor (agreement " + text_of(table["noise_floor"], "{:.2f}") + " at c2)"
    within = np.where(floored, ", within " + floor_text, ", within tolerance")
    words = pd.Series(np.where(charged, "differs " + where,
                               np.where(differs, "differs late " + where + within,
                                        np.where(table[M.output_agreement].notna(), "= no-spec", ""))), index=table.index)
    loop_share = text_of(table[M.loops_charged], "{:.2f}")
    parts = [words, np.where(loops, "loops where no-spec does not (" + loop_share + " of probe prompts)", ""),
             np.where(table["length_off_in"] != "", "lengths not as asked: " + table["length_off_in"], "")]
    below = table[M.accuracy_below_reference].fillna(0) > 0
    parts.append(np.where(below, "answers worse than no-spec (flips test)", ""))
    table["outputs"] = ["; ".join(p for p in ps if p) for ps in zip(*parts)]
    table["flagged"] = charged | loops | (table["length_off_in"] != "") | below
    beyond = np.where(floored, f", beyond {NOISE_MARGIN:g} more than " + floor_text,
                      f", beyond the tolerance (first divergence before {TOLERATED_DIVERGENCE} or agreement under "
                      f"{TOLERATED_AGREEMENT:g})")
    why = [np.where(charged, "greedy outputs differ from no-spec " + where + beyond + ": its speed is not of the same output", ""),
           np.where(loops, "greedy outputs loop where no-spec's on the same prompts do not (" + loop_share
                    + " of probe prompts): speed of degenerate, predictable text", ""),
           np.where(table["length_off_in"] != "", "output lengths not as asked in " + table["length_off_in"]
                    + ": another workload than the one named", ""),
           np.where(below, "it answers worse than its no-spec launch (exact McNemar test on the flipped answers)", "")]
    table["caveat"] = ["; ".join(p for p in ps if p) for ps in zip(*why)]
    return table.reset_index()


def divergence_text(rows: pd.DataFrame) -> pd.Series:
    """Per variant, its mean KLD from the node's quality reference with the interval and whether it is exact or a
    bound: "KLD 0.031 [0.028-0.034] exact from <reference>" (results/divergence.py); a variant whose launch scored
    the text but has no figure from a reference says so. The reference is the node's one quality_reference, so
    every stack of a node is read from the same one."""
    scored = rows[rows["metric"] == M.perplexity].drop_duplicates(VARIANT).set_index(VARIANT)
    kld = rows[(rows["metric"] == M.mean_kld) & rows["value"].notna()]
    texts = pd.Series("KLD: no figure from a quality reference (none on this node, or its tokens differ)", index=scored.index, dtype=object)
    if not kld.empty and "row_label" in kld:
        kld = kld.sort_values("value").drop_duplicates(VARIANT, keep="last").set_index(VARIANT)
        notes = kld["note"] if "note" in kld else pd.Series("", index=kld.index)  # a frame without notes cannot say
        kind = ["exact" if "exact:" in str(note) else "bound" if "bound" in str(note) else "" for note in notes]
        texts = pd.concat([texts.drop(kld.index, errors="ignore"), pd.Series(
            [f"KLD {v:.3g} [{lo:.3g}-{hi:.3g}] {how + ' ' if how else ''}from {ref}" for v, lo, hi, how, ref in
             zip(kld["value"], kld["ci_low"], kld["ci_high"], kind, kld["row_label"])], index=kld.index, dtype=object)])
    return texts[~texts.index.duplicated(keep="last")]


def accuracy_text(rows: pd.DataFrame) -> pd.Series:
    """Per variant, its accuracy with the Wilson 95% interval and n: "0.42 [0.29-0.56] n=50" (the lowest
    where several accuracy cells)."""
    acc = rows[rows["metric"] == M.accuracy].sort_values("value").drop_duplicates(VARIANT).set_index(VARIANT)
    if acc.empty:
        return pd.Series(dtype=object)
    return pd.Series([f"{v:.2f} [{lo:.2f}-{hi:.2f}] n={n:.0f}" for v, lo, hi, n in
                      zip(acc["value"], acc["ci_low"], acc["ci_high"], acc["n"])], index=acc.index, dtype=object)


CROSS_STACK_METRICS = [M.cross_stack_agreement, M.cross_stack_divergence]
MATRIX_CORNER = "reference ↓ / compared →"


def cross_stack_matrices(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Per weights family (table_title of the cross_stack_* rows), a matrix of greedy agreement between its
    no-spec launches: rows the reference (the share is over its output length), columns the launch compared
    with it, both labelled node / stack / quant; a cell reads "1 (identical)" or "0.65, differs at token 20".
    Only the few agreement rows are read, never the whole results table."""
    rows = rows[rows["metric"].isin(CROSS_STACK_METRICS) & rows["source"].isin(MEASURED)]
    out = []
    for family, mine in rows.groupby("table_title", sort=True):
        cells = mine.pivot_table(index=["row_label", "col_label"], columns="metric", values="value", aggfunc="first",
                                 dropna=False)
        units = mine[mine["metric"] == M.cross_stack_divergence].groupby(["row_label", "col_label"])["unit"].first()
        labels = sorted(set(mine["row_label"]) | set(mine["col_label"]))
        matrix = pd.DataFrame(index=labels, columns=labels, dtype=object).fillna("")
        for (reference, candidate), values in cells.iterrows():
            share = values.get(M.cross_stack_agreement)
            diverged = values.get(M.cross_stack_divergence)
            if pd.isna(share):
                continue
            unit = str(units.get((reference, candidate), "tokens")).removesuffix("s")
            matrix.loc[reference, candidate] = (f"{share:.2f}, differs at {unit} {diverged:.0f}" if pd.notna(diverged)
                                                else f"{share:.2f} (identical)")
        for label in labels:
            matrix.loc[label, label] = "—"
        out.append((family, matrix.rename_axis(MATRIX_CORNER).reset_index()))
    return out


QUALITY_METRICS = [M.cross_stack_answer_agreement]


def quality_tables(rows: pd.DataFrame, by_variant: pd.DataFrame) -> list[tuple[str, pd.DataFrame, list[str]]]:
    """Per weights family (table_title of the cross_stack_answer_agreement rows): one row per no-spec launch
    with its accuracy and interval (correctness_by_variant's accuracy_text) and, per other launch of the
    family, the share of questions both answered alike; and, in words, for each pair whether the accuracies
    differ beyond both intervals or are not distinguishable at the set's n (the rows' notes)."""
    rows = rows[rows["metric"].isin(QUALITY_METRICS) & rows["source"].isin(MEASURED)]
    scores = by_variant.set_index(VARIANT)["accuracy_text"].to_dict() if not by_variant.empty else {}
    out = []
    for family, mine in rows.groupby("table_title", sort=True):
        launches = mine.drop_duplicates("col_label").sort_values("col_label")
        labels = list(launches["col_label"])
        table = pd.DataFrame({"launch": labels, "accuracy [95% CI]": [
            scores.get((n, s, v), "") for n, s, v in zip(launches["node"], launches["stack"], launches["variant"])]})
        agree = mine.set_index(["row_label", "col_label"])["value"]
        for other in labels:
            table[f"same answers as {other}"] = ["—" if label == other else
                                                 (f"{agree[(other, label)]:.2f}" if (other, label) in agree else "")
                                                 for label in labels]
        pairs = mine[mine["row_label"] < mine["col_label"]]
        # The note is "<words>; <what the share is>", and the words hold "; " themselves (flips; intervals): cut at the last.
        words = [f"{a} vs {b}: {note.rsplit('; ', 1)[0]}" for a, b, note in zip(pairs["row_label"], pairs["col_label"], pairs["note"])]
        out.append((family, table, words))
    return out


# The divergence rows (results/divergence.py), and each launch's own perplexity beside them.
DIVERGENCE_METRICS = [M.perplexity, M.mean_kld, M.kld_p99, M.same_top_token, M.rms_delta_p, M.perplexity_ratio, M.kld_tail_mass]


def _with_interval(value: float, low: float, high: float, digits: str) -> str:
    if pd.isna(value):
        return ""
    return f"{value:{digits}} [{low:{digits}}-{high:{digits}}]" if pd.notna(low) and pd.notna(high) else f"{value:{digits}}"


def divergence_tables(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame, list[str]]]:
    """Per weights family (table_title of the divergence rows): one row per launch compared with the node's
    quality reference (row_label), its perplexity with its interval, mean KLD with its interval, KLD p99, the
    share of positions whose top token is the reference's (Wilson interval) and RMS delta-p; a refused pair
    (another tokenization) says why in its row. The words are each launch's sentence (the perplexity_ratio note)."""
    rows = rows[rows["source"].isin(MEASURED)]
    compared = rows[rows["table_title"].notna() & (rows["metric"] != M.perplexity)]
    own = rows[rows["metric"] == M.perplexity].assign(
        col_label=lambda f: f["node"] + " / " + f["stack"] + " / " + f["variant"] + " / " + f["quant"].fillna("unknown"))
    out = []
    for family, mine in compared.groupby("table_title", sort=True):
        lines, words = [], []
        for (reference, launch), cell in mine.groupby(["row_label", "col_label"], sort=True):
            by = cell.drop_duplicates("metric").set_index("metric")  # replicates of one launch: the first
            ppl = own[own["col_label"] == launch].head(1)
            line = {"launch": launch, "reference": reference,
                    "perplexity [95% CI]": _with_interval(*ppl[["value", "ci_low", "ci_high"]].iloc[0], ".3f") if len(ppl) else ""}
            if (cell["status"] == "rejected").any():
                line["mean KLD [95% CI]"] = "refused: " + str(cell["reason"].dropna().iloc[0])
                lines.append(line)
                continue
            def get(metric, field="value", by=by):
                return by.loc[metric, field] if metric in by.index else np.nan

            line.update({
                "mean KLD [95% CI]": _with_interval(get(M.mean_kld), get(M.mean_kld, "ci_low"), get(M.mean_kld, "ci_high"), ".4f"),
                "KLD p99": f"{get(M.kld_p99):.4f}",
                "same top token [95% CI]": _with_interval(get(M.same_top_token), get(M.same_top_token, "ci_low"),
                                                          get(M.same_top_token, "ci_high"), ".3f"),
                "RMS Δp": f"{get(M.rms_delta_p):.2%}",
                "PPL / reference": f"{get(M.perplexity_ratio):.4f}",
                # kld_tail_mass's note opens with the basis: "exact: ..." or "a lower bound ... (k = ...), mean tail mass ..."
                "KLD basis": ("exact, full vocabulary" if str(get(M.kld_tail_mass, "note")).startswith("exact")
                              else f"bound, unseen mass {get(M.kld_tail_mass):.3g}" if M.kld_tail_mass in by.index else ""),
            })
            lines.append(line)
            note = by.loc[M.perplexity_ratio, "note"] if M.perplexity_ratio in by.index else ""
            words += [part for part in str(note).split("; ") if part.startswith(launch)]
        out.append((family, pd.DataFrame(lines), words))
    return out
