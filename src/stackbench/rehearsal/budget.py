"""The real run's time budget from its rehearsal: what each launch and each workload of the node will cost in
GPU-node hours, with start-up, model load (or image pull) and warm-up counted, as a low-high range, and the
most expensive cells named. The rehearsal's report opens with it (report/budget.py renders it).

Read from the rehearsal's own files: each launch's spec (launch.json: its cells, its real repeats) and run
(run.json: the seconds each cell and each start took here), and the stand-in's facts (standin_facts.json:
the weights per GPU). Every figure is the rehearsal's seconds times its time scale (the stand-in's modeled
pace, rehearsal/standin.py Pace), then:
- a cell: once here, `repeats` times in the real run, plus its warm-up requests at the cell's own shape
  (warmup_requests / requests_per_stream of one repeat: each warm-up request is one request per stream);
- a launch: its start to ready (the stand-in models start-up plus the weights read at LOAD_BYTES_PER_S),
  plus, for an image launch, the image pull once per image on the node;
- the range: low is the stand-in's pace as modeled; high assumes engines reach HIGH_SHARE of the
  roofline instead of ROOFLINE_SHARE, a slower disk (LOAD_BYTES_PER_S_HIGH) and a slow pull.
"""

from __future__ import annotations

import json
from pathlib import Path

from stackbench.rehearsal import standin

HIGH_SHARE = 0.4  # of the bandwidth roofline: the slow end of what engines reach at single-stream decode
LOAD_BYTES_PER_S_HIGH = 0.5e9  # weights from a network filesystem or a cold page cache
IMAGE_PULL_S = (120.0, 900.0)  # an engine image of 10-20 GB at about 150 MB/s, and at about 20 MB/s
TOP_CELLS = 5


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
    ready = [e["seconds"] * time_scale for e in timeline if e["event"] == "ready"]
    start_low = sum(ready)
    weights = float(facts.get("weights_gib_per_gpu") or 0.0) * 2**30
    # The slower load for each start: its modeled seconds with the weights read at the slow rate.
    start_high = start_low + len(ready) * weights * (1 / LOAD_BYTES_PER_S_HIGH - 1 / standin.LOAD_BYTES_PER_S)
    if launch["launch_mode"] == "image" and launch["launch_target"] not in pulled:
        pulled.add(launch["launch_target"])
        start_low, start_high = start_low + IMAGE_PULL_S[0], start_high + IMAGE_PULL_S[1]
    by_key = {c["key"]: c for c in spec["cells"]}
    slow = standin.ROOFLINE_SHARE / HIGH_SHARE
    cells = []
    for event in (e for e in timeline if e["event"] == "cell"):
        cell = by_key.get(event["cell"])
        if cell is None:
            continue
        once = event["seconds"] * time_scale
        per_stream = (workloads.get(cell["workload"], {}).get("load") or {}).get("requests_per_stream") or 1
        low = once * (repeats + real["warmup_requests"] / per_stream)
        cells.append({"key": cell["key"], "workload": cell["workload"], "power_cap_w": cell["power_cap_w"],
                      "low_s": low, "high_s": low * slow})
    return {"launch": f"{launch['stack_config']}--{launch['variant']}", "mode": launch["launch_mode"], "repeats": repeats,
            "power_caps_w": list(launch.get("power_caps_w") or []), "start_low_s": start_low, "start_high_s": start_high,
            "cells": cells, "low_s": start_low + sum(c["low_s"] for c in cells),
            "high_s": start_high + sum(c["high_s"] for c in cells)}


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


def budget(runs_dir: Path, time_scale: float, real: dict) -> dict:
    """The node's budget in hours: per launch, per workload, the most expensive cells, and what sweeping
    the caps on every launch would add."""
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
    hours = 1 / 3600
    return {
        "time_scale": time_scale, "repeats": real["repeats"], "warmup_requests": real["warmup_requests"],
        "total_h": [sum(x["low_s"] for x in launches) * hours, sum(x["high_s"] for x in launches) * hours],
        "launches": [{"launch": x["launch"], "mode": x["mode"], "repeats": x["repeats"], "cells": len(x["cells"]),
                      "caps": x["power_caps_w"], "start_h": [x["start_low_s"] * hours, x["start_high_s"] * hours],
                      "total_h": [x["low_s"] * hours, x["high_s"] * hours]} for x in launches],
        "workloads": [{"workload": name, "total_h": [low * hours, high * hours]}
                      for name, (low, high) in sorted(workloads.items(), key=lambda item: -item[1][0])],
        "top_cells": [{"launch": launch, "cell": key, "total_h": [low * hours, high * hours]} for low, high, launch, key in top],
        "caps_everywhere": {"caps": caps, "extra_h": [extra_low * hours, extra_high * hours]},
    }


def main(runs_dir: Path, time_scale: float, real: dict, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(budget(runs_dir, time_scale, real), indent=1))
    tmp.replace(out)
    return out
