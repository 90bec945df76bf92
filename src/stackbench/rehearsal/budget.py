"""The real run's time budget from its rehearsal: what each launch and each workload of the node will cost in
GPU-node hours, with start-up, model load (or image pull) and warm-up counted, as a low-high range, and the
most expensive cells named. The rehearsal's report opens with it (report/budget.py renders it).

Read from the rehearsal's own files: each launch's spec (launch.json: its cells, its real repeats), run
(run.json: which cells and starts ran), each cell's request records (cells/<cell>--<fingerprint>.requests.parquet:
each request's prompt and completion tokens, stream and repeat) and the stand-in's facts (standin_facts.json:
the roofline, the fitted pace, the acceptance, the weights per GPU). A cell's seconds are its requests at the
stand-in's modeled pace (modeled_cell_s, standin.modeled_request_s), never this host's seconds times the time
scale, which would multiply the host's own stalls: two rehearsals of one node give one budget. Only a cell
that left no request records falls back to the host's seconds, and the budget counts those. Then:
- a cell: once here, `repeats` times in the real run, plus its warm-up requests at the cell's own shape
  (warmup_requests / requests_per_stream of one repeat: each warm-up request is one request per stream); a
  cell of a once-per-launch set (the accuracy set, the probes: a kind whose runner is not "repeats") once,
  as the real run runs it, without warm-up;
- a launch: its start to ready as the stand-in models it (start-up plus the weights read at LOAD_BYTES_PER_S,
  standin.ready_s; not the rehearsal's ready time x the time scale, which would scale this host's own work),
  plus each start's compile and CUDA-graph capture (Adapter.compile_s, a stated assumption per engine: the stand-in
  does not model it), plus, for an image launch, the image pull once per image on the node;
- the range: low is the stand-in's pace as modeled; high assumes engines reach HIGH_SHARE of the
  roofline instead of ROOFLINE_SHARE (a launch whose pace is fitted to a post, rehearsal/calibration.py:
  FITTED_MARGIN slower than the post), a slower disk (LOAD_BYTES_PER_S_HIGH), a slow pull and compile.
Beside the GPU-node hours, not in them: each native environment's build (Adapter.build_s) and each model's download at
the node's `rental.download_gbps`, from its files' size where they are here, else its weights as the stand-in sizes
them (the model's parameters x its quantization's bits per weight: configs/models, models/formats.py); all of it
in money too where the node states `rental.gpu_hour_usd`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from stackbench.config import default_decision, default_rental
from stackbench.config.kinds import KINDS
from stackbench.config.model import Decision, Rental, Workload, from_json
from stackbench.engines import ADAPTERS, adapter_for
from stackbench.measure import clientload
from stackbench.plan.expand import repeated_cell
from stackbench.rehearsal import standin
from stackbench.results import estimators
from stackbench.results.metrics import KWH_J, M

HIGH_SHARE = 0.4  # of the bandwidth roofline: the slow end of what engines reach at single-stream decode
FITTED_MARGIN = 1.3  # a pace fitted to a post: the slow end 30% slower (the posts' own runs spread 5-35%)
LOAD_BYTES_PER_S_HIGH = 0.5e9  # weights from a network filesystem or a cold page cache
IMAGE_PULL_S = (120.0, 900.0)  # an engine image of 10-20 GB at about 150 MB/s, and at about 20 MB/s
TOP_CELLS = 5
# analysis/sequence.py horizon(rule, look, spent_s, round_s) -> (rule, why): the one rule that fixes the real run's
# horizon, passed in by the caller (stackbench rehearsal-budget), since the rehearsal's layer sits beside analysis's
Horizon = Callable[[Decision, int, float, float], tuple[Decision, str]]
# Launch-to-launch CVs the rounds are priced at (what gain a budget resolves): this machine's pinned llama.cpp
# (2.7-7.5%, docs/benchmarks.md), a GPU server's usual few percent, and vLLM issue 53436's up to 19.65% with
# speculation at c2. An assumption, stated, until the node's own runs show its spread.
ASSUMED_LAUNCH_CV = (0.03, 0.05, 0.10, 0.20)


def assumed(engine: str, fact: str):
    """An engine's stated assumption for the budget (Adapter.compile_s, build_s, build_what); an engine that states
    none raises instead of costing nothing."""
    value = getattr(adapter_for(engine), fact)
    if value is None:
        raise KeyError(f"engines: {adapter_for(engine).engine_label} states no {fact} (Adapter.{fact}): the rehearsal's "
                       "budget cannot price an engine it does not know how to start")
    return value


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def launch_budget(run_dir: Path, time_scale: float, real: dict, pulled: set[str]) -> dict:
    """One launch's real hours (low, high): its start and its cells, with each cell's share."""
    spec, run = _json(run_dir / "launch.json"), _json(run_dir / "run.json")
    facts = _json(run_dir / "standin_facts.json")
    launch = spec["launch"]
    repeats = launch.get("repeats") or real["repeats"]
    workloads = {w["name"]: w for w in spec["node"]["workloads"]}
    timeline = run.get("timeline", [])
    starts = sum(1 for e in timeline if e["event"] == "ready")
    engine = launch["engine"]
    compile_low, compile_high = assumed(engine, "compile_s")
    weights = float(facts.get("weights_gib_per_gpu") or 0.0) * 2**30
    # Each start at its modeled seconds (standin.ready_s: start-up and the weights read), never the rehearsal's
    # ready time x the time scale: that would multiply this host's own work (the flag check's import of the
    # engine's parser, seconds here) by the time scale. The slow end reads the weights at the slow rate.
    start_low = starts * (standin.ready_s(weights) + compile_low)
    start_high = starts * (standin.ready_s(weights) + compile_high
                           + weights * (1 / LOAD_BYTES_PER_S_HIGH - 1 / standin.LOAD_BYTES_PER_S))
    if launch["launch_mode"] == "image" and launch["launch_target"] not in pulled:
        pulled.add(launch["launch_target"])
        start_low, start_high = start_low + IMAGE_PULL_S[0], start_high + IMAGE_PULL_S[1]
    by_key = {c["key"]: c for c in spec["cells"]}
    # A launch whose pace was fitted to a post (rehearsal/calibration.py) is already at the post's pace: its
    # high end is the post's spread beyond it, FITTED_MARGIN, where the stated shape's is HIGH_SHARE's.
    slow = max(float(facts.get("step_share") or standin.ROOFLINE_SHARE) / HIGH_SHARE, FITTED_MARGIN)
    cells = []
    for event in (e for e in timeline if e["event"] == "cell"):
        cell = by_key.get(event["cell"])
        if cell is None:
            continue
        once = modeled_cell_s(facts, cell, run_dir)
        host_timed = once is None
        if host_timed:  # no request records (a failed cell): this host's seconds are all there is, said so
            once = event["seconds"] * time_scale
        workload = workloads.get(cell["workload"], {})
        per_stream = (workload.get("load") or {}).get("requests_per_stream") or 1
        per_launch = once_per_launch(workload)
        low = once if per_launch else once * (repeats + real["warmup_requests"] / per_stream)
        watts = cell_power_w(run_dir, cell)
        cells.append({"key": cell["key"], "workload": cell["workload"], "power_cap_w": cell["power_cap_w"],
                      "low_s": low, "high_s": low * slow, "power_w": watts,
                      "low_kwh": (watts or 0.0) * low / KWH_J, "high_kwh": (watts or 0.0) * low * slow / KWH_J,
                      "once_per_launch": per_launch, "host_timed": host_timed,
                      "judged": repeated(workload, cell, launch)})
    argv = _json(run_dir / "standin_argv.json")
    build = launch.get("env_name") if launch["launch_mode"] == "native" else None
    # the model's weights as the stand-in sized them (engine_facts), what its download weighs where no file is here
    sized = {"sized_mib": facts.get("weights_mib"), "bpw": facts.get("bpw")}
    models = [{**model, **(sized if key == "model" else {})} for key in ("model", "draft_model") if (model := launch.get(key))]
    # its run folder's name: the configuration, its label and its round (<stack>[+<label>]--<variant>[--r<k>])
    return {"launch": run_dir.name, "mode": launch["launch_mode"], "repeats": repeats, "once": bool(launch.get("once")),
            "build": {"env": build, "engine": engine} if build else None, "models": models,
            "tp_cost": facts.get("tp_cost") or "",
            "flag_check": argv.get("flag_check") or ("not started" if not argv else "not recorded"),
            "pinned": facts.get("pinned"),
            "power_caps_w": list(launch.get("power_caps_w") or []), "start_low_s": start_low, "start_high_s": start_high,
            "cells": cells, "low_s": start_low + sum(c["low_s"] for c in cells),
            "high_s": start_high + sum(c["high_s"] for c in cells), "replicate": launch.get("replicate") or 1,
            # a later round launches it again for the cells What to run judges only (expand.interleaved_rounds)
            "round_low_s": start_low + sum(c["low_s"] for c in cells if c["judged"]),
            "round_high_s": start_high + sum(c["high_s"] for c in cells if c["judged"]),
            "low_kwh": sum(c["low_kwh"] for c in cells), "high_kwh": sum(c["high_kwh"] for c in cells),
            "round_low_kwh": sum(c["low_kwh"] for c in cells if c["judged"]),
            "round_high_kwh": sum(c["high_kwh"] for c in cells if c["judged"]),
            "unpowered_cells": sum(1 for c in cells if c["power_w"] is None),
            # planned but not measured here (a cap not swept, a sweep stopped past saturation): the figures decided it
            "unmeasured_cells": len(by_key) - len(cells)}


def cell_power_w(run_dir: Path, cell: dict) -> float | None:
    """The cell's draw, all the launch's GPUs together: its power_w row (the simulated GPUs' modeled draw in a rehearsal,
    rehearsal/simgpu.py, sampled as NVML would be); None where the cell has no stored rows or no such figure."""
    found = sorted((run_dir / "cells").glob(f"{cell['key']}--{cell.get('fingerprint') or '*'}.parquet"))
    found = [f for f in found if not f.name.endswith(".requests.parquet")]
    if not found:
        return None
    rows = pd.read_parquet(found[-1], columns=["metric", "value"])
    power = rows.loc[(rows["metric"] == M.power_w) & rows["value"].notna(), "value"]
    return float(power.iloc[0]) if len(power) else None


def repeated(workload: dict, cell: dict, launch: dict) -> bool:
    """Whether a later round repeats a cell of the spec: a judged workload's, or the long-context use's deciding
    point (expand.repeated_cell)."""
    return bool(workload) and repeated_cell(from_json(Workload, workload), cell.get("ladder_tokens"),
                                            tuple(launch.get("deciding") or ()), launch.get("context_len"))


def modeled_cell_s(facts: dict, cell: dict, run_dir: Path) -> float | None:
    """One repeat of a cell in real seconds at the stand-in's modeled pace, from the requests it sent (the
    cell's request records: each one's prompt and completion tokens, its stream and repeat), never from how
    long this host took: each request's modeled seconds (standin.modeled_request_s at the cell's cap); a closed
    loop takes its busiest stream's sum, or all requests over the server's slots where they queue; an open
    loop its requests at the offered rate plus one request; 0 where the server rejected every request (a ladder point
    over the context). None where the cell left no request records."""
    found = sorted((run_dir / "cells").glob(f"{cell['key']}--{cell.get('fingerprint') or '*'}.requests.parquet"))
    if not found or not facts.get("roofline_decode_tps"):
        return None
    requests = pd.read_parquet(found[-1], columns=["stream", "repeat", "prompt_tokens", "completion_tokens", "status"])
    if len(requests) and (requests["status"] == "rejected").all():
        return 0.0  # the server refused each request before any prefill (over its context): no GPU time
    requests = requests.dropna(subset=["prompt_tokens", "completion_tokens"])
    if requests.empty:
        return None
    seconds = [standin.modeled_request_s(facts, p, c, cell.get("power_cap_w"))
               for p, c in zip(requests["prompt_tokens"], requests["completion_tokens"])]
    requests = requests.assign(seconds=seconds)
    slots = max(int(facts.get("slots") or 1), 1)
    per_repeat = []
    for _, one in requests.groupby("repeat"):
        if cell.get("rate"):
            per_repeat.append(len(one) / float(cell["rate"]) + float(one["seconds"].mean()))
        else:
            per_repeat.append(max(float(one.groupby("stream")["seconds"].sum().max()), float(one["seconds"].sum()) / slots))
    return sum(per_repeat) / len(per_repeat)


def once_per_launch(workload: dict) -> bool:
    """Whether a workload runs once per launch (the accuracy set, the probes), not per repeat."""
    kind = KINDS.get(workload.get("kind") or "")
    return kind is not None and kind.runs != "repeats"


def caps_cost_s(launches: list[dict]) -> tuple[float, float, float, float]:
    """What the cap sweeps as planned cost (low, high seconds: every capped cell) and the uncapped run's
    (low, high): the sweep's share of the run."""
    capped = [c for launch in launches for c in launch["cells"] if c["power_cap_w"] is not None]
    rest = [c for launch in launches for c in launch["cells"] if c["power_cap_w"] is None]
    return (sum(c["low_s"] for c in capped), sum(c["high_s"] for c in capped),
            sum(c["low_s"] for c in rest) + sum(x["start_low_s"] for x in launches),
            sum(c["high_s"] for c in rest) + sum(x["start_high_s"] for x in launches))


def caps_everywhere_s(launches: list[dict]) -> tuple[list[float], float, float]:
    """The node's cap lists joined, and the hours (low, high) its launches without all of them would add if
    every launch swept every cap: each of their uncapped cells again at each cap they lack."""
    caps = sorted({cap for launch in launches for cap in launch["power_caps_w"]})
    low = high = 0.0
    for launch in launches:
        missing = len(set(caps) - set(launch["power_caps_w"]))
        uncapped = [c for c in launch["cells"] if c["power_cap_w"] is None]
        low += missing * sum(c["low_s"] for c in uncapped)
        high += missing * sum(c["high_s"] for c in uncapped)
    return caps, low, high


def budget(runs_dir: Path, time_scale: float, real: dict, decision: Decision | None = None,
           rental: Rental | None = None, horizon: Horizon | None = None, usd_per_kwh: float | None = None) -> dict:
    """The node's budget in hours and kWh: per launch, per workload, the most expensive cells, what sweeping the caps
    on every launch would add, and What to run's rounds under the node's rule (`decision`; the schema's default) to
    the horizon `horizon` fixes (analysis/sequence.py's); beside them the builds and downloads, at the node's `rental`
    (its price and download rate; the schema's), and the energy at `usd_per_kwh` (the node's electricity_usd_per_kwh)."""
    rental = rental or default_rental()
    pulled: set[str] = set()
    launches = [launch_budget(d, time_scale, real, pulled) for d in sorted(runs_dir.iterdir())
                if (d / "launch.json").exists()] if runs_dir.exists() else []
    workloads: dict[str, list[float]] = {}
    for launch in launches:
        for cell in launch["cells"]:
            spent = workloads.setdefault(cell["workload"], [0.0, 0.0])
            spent[0], spent[1] = spent[0] + cell["low_s"], spent[1] + cell["high_s"]
    top = sorted(((c["low_s"], c["high_s"], launch["launch"], c["key"]) for launch in launches for c in launch["cells"]),
                 reverse=True)[:TOP_CELLS]
    caps, extra_low, extra_high = caps_everywhere_s(launches)
    capped = caps_cost_s(launches)
    hours = 1 / 3600
    return {
        "time_scale": time_scale, "repeats": real["repeats"], "warmup_requests": real["warmup_requests"],
        "total_h": [sum(x["low_s"] for x in launches) * hours, sum(x["high_s"] for x in launches) * hours],
        "launches": [{"launch": x["launch"], "mode": x["mode"], "repeats": x["repeats"], "cells": len(x["cells"]),
                      "flag_check": x["flag_check"], "pinned": x["pinned"],
                      "caps": x["power_caps_w"], "start_h": [x["start_low_s"] * hours, x["start_high_s"] * hours],
                      "total_h": [x["low_s"] * hours, x["high_s"] * hours], "kwh": [x["low_kwh"], x["high_kwh"]]}
                     for x in launches],
        "workloads": [{"workload": name, "total_h": [low * hours, high * hours]}
                      for name, (low, high) in sorted(workloads.items(), key=lambda item: -item[1][0])],
        "top_cells": [{"launch": launch, "cell": key, "total_h": [low * hours, high * hours]} for low, high, launch, key in top],
        "caps_everywhere": {"caps": caps, "extra_h": [extra_low * hours, extra_high * hours]},
        "caps_planned": {"caps": caps, "capped_h": [capped[0] * hours, capped[1] * hours],
                         "uncapped_h": [capped[2] * hours, capped[3] * hours]},
        # Every engine's stated compile assumption, the slowest first.
        "compile_s": {a.engine_label: list(a.compile_s) for a in sorted(
            (a for a in ADAPTERS.values() if a.compile_s is not None), key=lambda a: -a.compile_s[1])},
        "host_timed_cells": sum(1 for x in launches for c in x["cells"] if c["host_timed"]),
        "priced_cells": sum(len(x["cells"]) for x in launches),
        "unmeasured_cells": sum(x["unmeasured_cells"] for x in launches),
        "builds": builds(launches),
        "downloads": downloads(launches, rental.download_gbps),
        "rental": {"gpu_hour_usd": rental.gpu_hour_usd, "gpus": rental.gpus, "node_hour_usd": rental.node_hour_usd,
                   "download_gbps": rental.download_gbps},
        "tp_cost": sorted({x["tp_cost"] for x in launches if x["tp_cost"]}),
        "client": busiest_client(runs_dir),
        "rounds": rounds(launches, decision or default_decision(), horizon),
        # the cells' energy at the stand-in's modeled draw (each cell's power_w x its modeled seconds); start-ups,
        # compiles and the idle box between launches are not in it
        "energy": {"kwh": [sum(x["low_kwh"] for x in launches), sum(x["high_kwh"] for x in launches)],
                   "unpowered_cells": sum(x["unpowered_cells"] for x in launches), "usd_per_kwh": usd_per_kwh},
        "once_per_launch_h": [sum(c["low_s"] for x in launches for c in x["cells"] if c["once_per_launch"]) * hours,
                              sum(c["high_s"] for x in launches for c in x["cells"] if c["once_per_launch"]) * hours],
    }


def rounds(launches: list[dict], decision: Decision, horizon: Horizon | None = None) -> dict:
    """What to run's rounds priced as the real run will execute them: the first rounds as rehearsed, one later round
    (each configuration again, the judged cells only), and the horizon as analysis/sequence.py horizon() will fix it
    at the first look from `decide.budget_minutes` and `decide.most_launches`, at each end of the range (its
    measuring seconds so far: every cell of the rounds before the look, as the real run counts them from its cells,
    cli.launch_seconds; a full later round's the same way). `over_budget`: where the first rounds alone take more
    than the budget, the minutes that would do (the first rounds, and up to decide.most_launches), at the slow end.
    Then the gain each plan resolves at ASSUMED_LAUNCH_CV: at the first look, at the horizon's last, and the fewest
    rounds of a single look that resolve decide.min_gain (the cheapest plan that decides)."""
    hours = 1 / 3600
    first = [sum(x[key] for x in launches) * hours for key in ("low_s", "high_s")]
    later = [sum(x[key] for x in launches if x["replicate"] == 1) * hours for key in ("round_low_s", "round_high_s")]
    first_kwh = [sum(x[key] for x in launches) for key in ("low_kwh", "high_kwh")]
    later_kwh = [sum(x[key] for x in launches if x["replicate"] == 1) for key in ("round_low_kwh", "round_high_kwh")]
    planned = max((x["replicate"] for x in launches), default=0)
    # measuring seconds only (no start-up, no one-off sets' launch): what the budget's minutes count
    spent = [sum(c[key] for x in launches if not x["once"] for c in x["cells"]) for key in ("low_s", "high_s")]
    full = [sum(c[key] for x in launches if x["replicate"] == 1 and not x["once"] for c in x["cells"] if c["judged"])
            for key in ("low_s", "high_s")]
    fixed = [horizon(decision, max(planned, 1), spent[i], full[i]) if horizon else
             (decision, "horizon: not fixed here (no horizon rule passed: stackbench rehearsal-budget passes analysis/sequence.py's)")
             for i in (0, 1)]
    last = [max(rule.most, planned) for rule, _ in fixed]
    over = None
    if decision.budget_minutes is not None and spent[1] / 60 > decision.budget_minutes:
        over = {"budget_minutes": decision.budget_minutes, "first_minutes": [spent[0] / 60, spent[1] / 60],
                "needed_minutes": math.ceil(spent[1] / 60),
                "needed_most_minutes": math.ceil((spent[1] + max(decision.most - planned, 0) * full[1]) / 60)}
    said = over_budget_said({"over_budget": over, "first_rounds": planned, "most_launches": decision.most})
    taken = estimators.looks(decision.first, last[0])  # the first round whose look can decide, if any
    first_look = taken[0] if taken else decision.first
    resolves = []
    for cv in ASSUMED_LAUNCH_CV:
        sd = estimators.paired_sd_of_launch_cv(cv)
        cheapest = estimators.rounds_to_resolve(sd, decision.min_gain)
        resolves.append({"cv": cv, "first_look": estimators.resolvable_gain(sd, first_look, decision.first, last[0]),
                         "last_look": estimators.resolvable_gain(sd, last[0], decision.first, last[0]),
                         "cheapest_rounds": cheapest,
                         "cheapest_h": None if cheapest is None else [first[i] + (cheapest - max(planned, 1)) * later[i]
                                                                      if cheapest > planned else first[i] for i in (0, 1)]})
    return {"first_rounds": planned, "most": last[0], "most_launches": decision.most, "horizon": last,
            "horizon_why": [why for _, why in fixed], "budget_minutes": decision.budget_minutes, "over_budget": over,
            "over_budget_said": said,
            "first_look": first_look, "min_gain": decision.min_gain,
            "first_h": first, "later_round_h": later,
            "budget_h": [first[i] + max(last[i] - planned, 0) * later[i] for i in (0, 1)],
            "first_kwh": first_kwh, "later_round_kwh": later_kwh,
            "budget_kwh": [first_kwh[i] + max(last[i] - planned, 0) * later_kwh[i] for i in (0, 1)], "resolves": resolves}


def over_budget_said(rounds: dict | None) -> str | None:
    """Where the first rounds alone measure longer than decide.budget_minutes: the sentence the report and the console
    open with, and the budget that would do."""
    over = (rounds or {}).get("over_budget")
    if not over:
        return None
    first, (low, high) = rounds["first_rounds"], over["first_minutes"]
    return (f"OVER BUDGET: rounds 1-{first} alone measure for {low:.0f}-{high:.0f} min, past decide.budget_minutes "
            f"{over['budget_minutes']:g}: the first look comes after them whatever the budget, and no later round starts. "
            f"A budget that would do: budget_minutes: {over['needed_minutes']} (rounds 1-{first}, the slow end), or "
            f"{over['needed_most_minutes']} to reach decide.most_launches {rounds['most_launches']} at a full round each.")


def builds(launches: list[dict]) -> list[dict]:
    """Each native environment the launches need, once, with its build or install time (Adapter.build_s, hours)."""
    seen: dict[str, dict] = {}
    for launch in launches:
        build = launch["build"]
        if build and build["env"] not in seen:
            low, high = assumed(build["engine"], "build_s")
            seen[build["env"]] = {"env": build["env"], "engine": adapter_for(build["engine"]).engine_label,
                                  "what": assumed(build["engine"], "build_what"), "h": [low / 3600, high / 3600]}
    return list(seen.values())


def downloads(launches: list[dict], gbps: float) -> list[dict]:
    """Each model the launches load (and draft), once, with its size and its download's hours at `gbps`: its files'
    bytes where they are on this machine, else the weights as the stand-in sized them; a model neither gives (a draft
    whose files are elsewhere) is listed without a size, never guessed."""
    seen: dict[str, dict] = {}
    for launch in launches:
        for model in launch["models"]:
            if model["path"] in seen:
                continue
            size, source = model_bytes(model)
            seen[model["path"]] = {"model": model["name"], "path": model["path"], "gb": None if size is None else size / 1e9,
                                   "source": source, "h": None if size is None else size * 8 / (gbps * 1e9) / 3600}
    return list(seen.values())


def model_bytes(model: dict) -> tuple[float | None, str]:
    """A model's download size in bytes and where the figure comes from."""
    path = Path(model["path"])
    if path.is_file():
        return float(path.stat().st_size), "its file here"
    if path.is_dir():
        return float(sum(f.stat().st_size for f in path.rglob("*") if f.is_file())), "its folder's files here"
    if model.get("sized_mib"):
        return model["sized_mib"] * 2**20, (f"not here: its weights as the stand-in sizes them, {model['quant']} at "
                                            f"{model['bpw']:g} bits per weight (configs/models, models/formats.py)")
    return None, "not here, and no size stated: not priced"


def main(runs_dir: Path, time_scale: float, real: dict, out: Path, decision: Decision | None = None,
         rental: Rental | None = None, horizon: Horizon | None = None, usd_per_kwh: float | None = None) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(budget(runs_dir, time_scale, real, decision, rental, horizon, usd_per_kwh), indent=1))
    tmp.replace(out)
    return out


def busiest_client(runs_dir: Path) -> dict | None:
    """The node's busiest cell for the client (client_processes over its launches), with its launch; None where no
    cell left request records."""
    said = [{"launch": d.name, **found} for d in sorted(runs_dir.glob("*/")) if (d / "launch.json").exists()
            and (found := client_processes(d))] if runs_dir.exists() else []
    return max(said, key=lambda x: x["tokens_per_s"], default=None)


def client_processes(run_dir: Path) -> dict | None:
    """The client processes the real run of this launch needs (measure/clientload.py processes_for_rate), for its
    busiest cell: one repeat's output tokens over that repeat's seconds at the stand-in's modeled pace
    (modeled_cell_s), never this host's pace: {"cell", "tokens_per_s", "processes"}. None where no cell left
    request records."""
    spec, facts = _json(run_dir / "launch.json"), _json(run_dir / "standin_facts.json")
    rates = {}
    for cell in spec.get("cells", []):
        seconds = modeled_cell_s(facts, cell, run_dir)
        found = sorted((run_dir / "cells").glob(f"{cell['key']}--{cell.get('fingerprint') or '*'}.requests.parquet"))
        if not seconds or not found:
            continue
        requests = pd.read_parquet(found[-1], columns=["repeat", "completion_tokens"])
        rates[cell["key"]] = float(requests["completion_tokens"].sum()) / requests["repeat"].nunique() / seconds
    if not rates:
        return None
    busiest = max(rates, key=rates.get)
    return {"cell": busiest, "tokens_per_s": rates[busiest], "processes": clientload.processes_for_rate(rates[busiest])}
