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


def minutes(pair: list[float]) -> str:
    low, high = (format_number(h * 60) for h in pair)
    return f"{low} min" if low == high else f"{low}–{high} min"


def dollars(pair: list[float], node_hour_usd: float) -> str:
    low, high = (format_number(h * node_hour_usd) for h in pair)
    return f"${low}" if low == high else f"${low}–{high}"


def rate_said(rental: dict) -> str:
    """'$10 per GPU-node hour ($2.5 per GPU-hour x 4 GPUs, rental.gpu_hour_usd)'."""
    return (f"${rental['node_hour_usd']:g} per GPU-node hour (${rental['gpu_hour_usd']:g} per GPU-hour x {rental['gpus']} "
            f"GPU{'s' if rental['gpus'] > 1 else ''}, the node's rental.gpu_hour_usd)")


def kwh(pair: list[float]) -> str:
    low, high = (format_number(k) for k in pair)
    return f"{low} kWh" if low == high else f"{low}–{high} kWh"


def box_hours(rental: dict | None) -> str:
    """What the hours are of: a rented node's GPU-node hours (rental.gpu_hour_usd set), else hours of the owner's box."""
    return "GPU-node hours" if priced_at(rental) else "hours of the box"


def energy_said(energy: dict | None) -> str | None:
    """The first rounds' energy at the stand-in's modeled draw, in money where the node states electricity_usd_per_kwh."""
    if not energy:
        return None
    rate = energy.get("usd_per_kwh")
    money = f", {dollars(energy['kwh'], rate)} at ${rate:g} a kWh (the node's electricity_usd_per_kwh)" if rate else \
        " (electricity_usd_per_kwh not set: no money)"
    unpowered = (f"; {energy['unpowered_cells']} cells without a power figure count none" if energy.get("unpowered_cells")
                 else "")
    return (f"Energy of the rounds as rehearsed: {kwh(energy['kwh'])}{money}: each cell's draw, all its GPUs (power_w of "
            "the simulated GPUs, the stand-in's modeled draw), x its modeled seconds; start-ups, compiles and the idle box "
            f"between launches are not in it{unpowered}.")


def priced_at(rental: dict | None) -> bool:
    """Whether the budget states the node's price (rental.gpu_hour_usd; budgets written before it: no)."""
    return bool(rental) and rental.get("node_hour_usd") is not None


def with_cost(columns: list[str], rows: list[list[str]], spans: list[list[float] | None], rental: dict | None):
    """The table's columns and rows with a cost column, each row's hours (`spans`) at the node's price, where the
    node states one (rental.gpu_hour_usd); as they are where it does not."""
    if not priced_at(rental):
        return columns, rows
    return columns + ["cost"], [row + [dollars(span, rental["node_hour_usd"]) if span else ""] for row, span in zip(rows, spans)]


def budget_tables(path: Path) -> list[Table]:
    doc = json.loads(path.read_text())
    rental = doc.get("rental")
    energy = doc.get("energy")  # a budget written before issue 67 has none: no energy column
    launches = [[x["launch"], x["mode"], str(x["repeats"]), str(x["cells"]), "/".join(f"{c:g}" for c in x["caps"]) or "none",
                 hours(x["start_h"]), hours(x["total_h"]), *([kwh(x["kwh"])] if energy else []),
                 flags_checked(x.get("flag_check"), x.get("pinned"))] for x in doc["launches"]]
    launches.append(["all launches", "", "", str(sum(x["cells"] for x in doc["launches"])), "", "", hours(doc["total_h"]),
                     *([kwh(energy["kwh"])] if energy else []), ""])
    launch_columns, launches = with_cost(["launch", "mode", "repeats", "cells", "caps W", "start-up + load", "total",
                                          *(["cells' energy"] if energy else []), "flags checked"],
                                         launches, [x["total_h"] for x in doc["launches"]] + [doc["total_h"]], rental)
    legend = [line for line in ((doc.get("rounds") or {}).get("over_budget_said"), BASIS, energy_said(energy)) if line]
    if priced_at(rental):
        legend.append(f"Cost at {rate_said(rental)}.")
    refused = [x["launch"] for x in doc["launches"] if str(x.get("flag_check") or "").startswith(REFUSED)]
    if refused:
        legend.append(f"The engine's own argument parser REFUSED the flags of {', '.join(refused)}: the real engine "
                      "would exit before it is ready, as the stand-in did; fix the flag the column names before booking.")
    unchecked = [x["launch"] for x in doc["launches"] if not str(x.get("flag_check") or "").startswith(("ok", REFUSED))]
    if unchecked:
        legend.append(f"Flags not checked by the engine's own argument parser on {len(unchecked)} of {len(doc['launches'])} "
                      "launches: a wrong flag there fails only on the GPU node. vLLM's and SGLang's parsers check them "
                      "once their CPU environments are built before the rehearsal (`.venv/bin/snakemake --cores 1 "
                      ".envs/vllm-cpu/ready.json .envs/sglang-cpu/ready.json`, docs/cpu-stacks.md); llama-server's are checked against the "
                      "built llama-server's own --help once its environment is built.")
    if doc.get("compile_s"):
        legend.append("Compile and graph capture per start, assumed (no seed post's log states it): " + "; ".join(
            f"{engine} {low:g}-{high:g} s" for engine, (low, high) in doc["compile_s"].items()) + ".")
    legend += [f"{line}." for line in doc.get("tp_cost") or []]
    if doc.get("unmeasured_cells"):
        legend.append(f"Two rehearsals of this node give this budget where they measure the same cells: "
                      f"{doc['priced_cells']} priced here, {doc['unmeasured_cells']} planned cells not measured (a cap not "
                      "swept, decided once on round 1's stock draw and kept in every round; a sweep stopped past "
                      "saturation). Those verdicts read the stand-in's figures, which carry this host's timing, so a cap or "
                      "a saturation point at the edge can fall the other way in another rehearsal and price another budget.")
    if doc.get("host_timed_cells"):
        legend.append(f"{doc['host_timed_cells']} cells left no request records (they failed here): those count this "
                      "host's seconds x the time scale, and move between rehearsals.")
    if doc.get("client"):
        client = doc["client"]
        legend.append(f"The client: the busiest cell, {client['launch']} {client['cell']}, streams some "
                      f"{client['tokens_per_s']:,.0f} tok/s at the modeled pace: the real run needs {client['processes']} "
                      f"client process{'es' if client['processes'] > 1 else ''} (measure.client_processes: auto sizes "
                      "them from the warm-up; measure/clientload.py).")
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
    return [
        Table("budget-launches", f"Time budget of the real run: {box_hours(rental)} per launch", "rehearsal/budget.py",
              launch_columns, launches, [[None] * len(launch_columns) for _ in launches], legend=legend),
        Table("budget-workloads", f"Time budget of the real run: {box_hours(rental)} per workload, all launches",
              "rehearsal/budget.py", ["workload", "hours"], [[w["workload"], hours(w["total_h"])] for w in doc["workloads"]],
              [[None, None] for _ in doc["workloads"]]),
        Table("budget-top-cells", "Time budget of the real run: the most expensive cells", "rehearsal/budget.py",
              ["launch", "cell", "hours"], [[c["launch"], c["cell"], hours(c["total_h"])] for c in doc["top_cells"]],
              [[None] * 3 for _ in doc["top_cells"]]),
        *before_the_run(doc.get("builds") or [], doc.get("downloads") or [], rental),
        *rounds_tables(doc.get("rounds"), rental, energy),
    ]


def before_the_run(builds: list[dict], downloads: list[dict], rental: dict | None) -> list[Table]:
    """The builds and installs (each engine's build_s, assumed) and the model downloads (at rental.download_gbps), once each, in
    minutes and, where the node states its price, in dollars: GPU-node time, though not in the run's hours."""
    if not builds and not downloads:
        return []
    rows = [[b["env"], f"{b['engine']} {b['what']}", "", minutes(b["h"])] for b in builds]
    rows += [[d["model"], f"download: {d['source']}", "" if d["gb"] is None else f"{format_number(d['gb'])} GB",
              "" if d["h"] is None else minutes([d["h"], d["h"]])] for d in downloads]
    spans = [b["h"] for b in builds] + [None if d["h"] is None else [d["h"], d["h"]] for d in downloads]
    columns, rows = with_cost(["environment or model", "what", "size", "time"], rows, spans, rental)
    legend = ["Builds: assumed ranges (no seed post states them); an image launch's pull is in its start-up above, and an "
              "environment already built on the node costs nothing."]
    if downloads:
        gbps = (rental or {}).get("download_gbps")
        legend.append(f"Downloads at {gbps:g} Gb/s (the node's rental.download_gbps, a stated rate, not a measurement); a "
                      "model already on the node costs nothing.")
    if priced_at(rental):
        legend.append(f"Cost at {rate_said(rental)}: the node is billed while it builds and downloads.")
    return [Table("budget-builds", "Before the run, on the GPU node: builds, installs and model downloads, once each, beside "
                  "the GPU-node hours (not in them)", "engines/<engine>.py build_s, downloads", columns, rows,
                  [[None] * len(columns) for _ in rows], legend=legend)]


def gain(value: float | None) -> str:
    return "beyond reach" if value is None or not math.isfinite(value) else f"±{value:.0%}"


def rounds_tables(rounds: dict | None, rental: dict | None = None, energy: dict | None = None) -> list[Table]:
    """What to run's rounds priced in GPU-node hours (an own box: hours of the box) and kWh (rehearsal/budget.py
    rounds), to the horizon analysis/sequence.py fixes from decide.budget_minutes and decide.most_launches, and the
    gain each resolves at the assumed launch-to-launch noise; a plan that cannot decide says so, with the cheapest one
    that could."""
    if not rounds:
        return []
    first, most = rounds["first_rounds"], rounds["most"]
    low, high = rounds.get("horizon") or [most, most]
    to = f"round {low}" if low == high else f"round {low} (the slow end: {high})"
    said = rounds.get("horizon_why") or []
    energy_of = "budget_kwh" in rounds
    priced = [[f"round{'s 1-' + str(first) if first > 1 else ' 1'}, as rehearsed (every cell, one-off sets included)",
               hours(rounds["first_h"])],
              ["one later round (each configuration again, the cells What to run judges only)", hours(rounds["later_round_h"])],
              [f"the plan: {first} round(s) first" + (f", then later rounds to the horizon, {to}" if max(low, high) > first
                                                     else ", no later round (the horizon is the first look)"),
               hours(rounds["budget_h"])]]
    if energy_of:
        priced = [row + [kwh(rounds[key])] for row, key in zip(priced, ("first_kwh", "later_round_kwh", "budget_kwh"))]
    margin, looks = rounds["min_gain"], most >= rounds["first_look"]
    resolves = []
    for row in rounds["resolves"]:
        cheapest = row["cheapest_rounds"]
        resolves.append([f"{row['cv']:.0%}", gain(row["first_look"]) if looks else "no look",
                         gain(row["last_look"]) if looks else "no look",
                         "none up to 100 rounds" if cheapest is None else f"{cheapest} rounds, {hours(row['cheapest_h'])}"
                         + (f", {dollars(row['cheapest_h'], rental['node_hour_usd'])}" if priced_at(rental) else "")])
    cannot = [f"{r['cv']:.0%}" for r in rounds["resolves"] if not r["last_look"] < margin]
    legend = [line for line in (rounds.get("over_budget_said"),) if line]
    if said:  # a budget written before issue 67 has no horizon
        legend.append(f"The horizon as the real run fixes it at its first look (analysis/sequence.py horizon), from these "
                      f"rounds' measuring minutes at each end of the range: {'; '.join(dict.fromkeys(said))}. "
                      "decide.budget_minutes counts measuring minutes, the cells' time as the real run counts it; the "
                      "plan's hours add each launch's start-up, model load and compile.")
    if energy_of and energy and energy.get("usd_per_kwh"):
        legend.append(f"The plan's energy costs {dollars(rounds['budget_kwh'], energy['usd_per_kwh'])} at "
                      f"${energy['usd_per_kwh']:g} a kWh (the node's electricity_usd_per_kwh).")
    legend += [f"Resolves: how far a true gain must lie from zero to read \"run\", or under the {margin:.0%} margin "
              "(decide.min_gain) to read \"not worth it\", per cell before the correction across cells "
              "(results/estimators.py resolvable_gain: Student's t at the error that look spends). Launch-to-launch CV "
              "assumed (rehearsal/budget.py ASSUMED_LAUNCH_CV): no stand-in measures a real launch's spread."]
    if not looks:
        legend.append("One launch a variant: What to run takes no look (a paired interval needs two rounds) and decides "
                      "nothing; set `launches:` to the cheapest plan's rounds, or 3 with `decide.most_launches` for a sequence.")
    if cannot:
        legend.append(f"This plan cannot decide a gain near the {margin:.0%} margin at a launch CV of {', '.join(cannot)}: "
                      "the last column is the cheapest plan that could (`launches:` that many, one look).")
    columns, priced = with_cost(["rounds", "hours", *(["energy"] if energy_of else [])], priced,
                                [rounds[k] for k in ("first_h", "later_round_h", "budget_h")], rental)
    return [Table("budget-rounds", f"What to run's rounds: {box_hours(rental)}{' and kWh' if energy_of else ''}",
                  "rehearsal/budget.py rounds",
                  columns, priced, [[None] * len(columns) for _ in priced]),
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
