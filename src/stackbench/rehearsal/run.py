"""`stackbench rehearse <node>...` (what `snakemake --cores 1 rehearse` runs): per node, the workflow's
`report` target as a rehearsal (rehearsal.node set: stand-in engines, simulated GPUs, its own paths and
lock folder), then a summary: every launch ready or why not, the cells without a figure, and the real
run's expected GPU-node hours from the rehearsal's time budget (rehearsal/budget.py, the report's opening).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from stackbench.config import rehearsal
from stackbench.config.model import ONCE_SUFFIX, configuration_name
from stackbench.config.rehearsal import flags_checked
from stackbench.results.store import NOT_SWEPT


def snakemake_argv(node: str, settings: dict, cores: int = 1) -> list[str]:
    """The inner workflow run, its config beside the rehearsal's files (JSON is YAML; --config would take
    nested numbers as strings). --nolock: the outer `snakemake rehearse` holds the folder's lock, and the
    rehearsal writes only under its own paths."""
    given = rehearsal.DATA / node / "config.yaml"
    given.parent.mkdir(parents=True, exist_ok=True)
    given.write_text(json.dumps({"nodes": [node], "rehearsal": {**settings, "node": node}}))
    return [sys.executable, "-m", "snakemake", "report", "--cores", str(cores), "--nolock", "--configfile", str(given)]


def launch_summary(run_dir: Path) -> dict:
    """One launch of a rehearsal: its run folder's name, configuration and round (its replicate; None for the
    one-off sets' launch), ready or why not, its cells' statuses and seconds."""
    run = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}
    spec = json.loads((run_dir / "launch.json").read_text())
    statuses = {}
    for cell in spec["cells"]:
        stored = run_dir / "cells" / f"{cell['key']}--{cell['fingerprint']}.parquet"
        found = set(pq.read_table(stored, columns=["status"]).column("status").to_pylist()) if stored.exists() else {"missing"}
        statuses[cell["key"]] = next((s for s in ("missing", "failed", "gpu_busy", "host_busy", "not_run", NOT_SWEPT, "rejected")
                                      if s in found), "ok")
    timeline = run.get("timeline", [])
    ready = any(event["event"] == "ready" for event in timeline)
    reason = None
    if not ready:
        reason = next((r for r in _cell_reasons(run_dir) if r), "never started")
    argv = json.loads((run_dir / "standin_argv.json").read_text()) if (run_dir / "standin_argv.json").exists() else {}
    facts = json.loads((run_dir / "standin_facts.json").read_text()) if (run_dir / "standin_facts.json").exists() else {}
    launch = spec["launch"]
    return {"launch": run_dir.name, "configuration": configuration_name(launch["stack_config"], launch["variant"], launch.get("label")),
            "round": None if launch.get("once") else launch.get("replicate", 1), "ready": ready, "reason": reason,
            "flag_check": argv.get("flag_check"), "pinned": facts.get("pinned"),
            # how the stand-in priced it where a stated shape stands in for a measured basis (launcher.py)
            "pace_notes": [n for n in (facts.get("compute_basis") if facts.get("prefill_per_decode") else None,
                                       facts.get("priced_as") if not facts.get("calibrated") else None) if n],
            "cells": statuses, "cell_seconds": sum(e["seconds"] for e in timeline if e["event"] == "cell"),
            "draft_model": (launch.get("draft_model") or {}).get("path")}


def _cell_reasons(run_dir: Path) -> list[str]:
    import pandas as pd

    part = run_dir / "cells.parquet"
    if not part.exists():
        return []
    rows = pd.read_parquet(part, columns=["status", "reason"])
    return [r for r in rows.loc[rows["status"] != "ok", "reason"].dropna().unique()]


def summarize(node: str, seconds: float, time_scale: float) -> dict:
    """The rehearsal's summary: its launches, and the real run's price from its time budget (rehearsal/budget.py), or
    None where the workflow stopped before it wrote one (then no plan is printed, never a zero one)."""
    runs = Path(rehearsal.paths(node)["runs"]) / node
    launches = [launch_summary(d) for d in sorted(runs.iterdir()) if (d / "launch.json").exists()] if runs.exists() else []
    budget_path = rehearsal.budget_path(node)
    budget = json.loads(budget_path.read_text()) if budget_path.exists() else None
    if budget is None:
        return {"node": node, "rehearsal_seconds": round(seconds, 1), "time_scale": time_scale, "launches": launches,
                "expected_real_hours": None, "expected_basis": f"no time budget written ({budget_path}): the workflow "
                                                               "stopped before it; its log says where"}
    low, high = budget["total_h"]
    per_hour = (budget.get("rental") or {}).get("node_hour_usd")
    rounds = budget.get("rounds") or {}
    return {"node": node, "rehearsal_seconds": round(seconds, 1), "time_scale": time_scale, "launches": launches,
            "round_costs": round_costs(budget),
            "expected_real_hours": round(low, 2), "expected_real_hours_high": round(high, 2),
            "expected_real_usd": None if per_hour is None else [round(low * per_hour), round(high * per_hour)],
            "node_hour_usd": per_hour,
            "plan_hours": [round(h, 2) for h in rounds["budget_h"]] if "budget_h" in rounds else None,
            "plan_kwh": rounds.get("budget_kwh"),
            "horizon": rounds.get("horizon"), "first_rounds": rounds.get("first_rounds"),
            "usd_per_kwh": (budget.get("energy") or {}).get("usd_per_kwh"),
            "over_budget": rounds.get("over_budget_said"),
            "expected_basis": f"the rehearsal's time budget ({budget_path}): each cell's requests at the stand-in's "
                              "modeled pace (never this host's seconds), the real repeats and warm-up, start-up, "
                              "compile, model load and image pulls; builds and installs beside it"}


def round_costs(budget: dict) -> tuple[float, float, int] | None:
    """(a round's launch start-up and warm-up s, one more repeat of every judged cell s, its repeats) from the
    budget's first round (rehearsal/budget.py: its launches' starts, one later round's judged cells at their repeats
    and warm-up): the costs a round's texts per cell are allocated at (analysis/levels.py allocate)."""
    first = [x for x in budget.get("launches", []) if "--r" not in x["launch"] and ONCE_SUFFIX not in x["launch"]]
    later = (budget.get("rounds") or {}).get("later_round_h")
    if not first or not later:
        return None
    repeats, warmup = max(x["repeats"] for x in first), budget.get("warmup_requests", 0)
    start_s = sum(x["start_h"][0] for x in first) * 3600
    repeat_s = max(later[0] * 3600 - start_s, 0.0) / (repeats + warmup)
    return (start_s + warmup * repeat_s, repeat_s, repeats) if repeat_s > 0 else None


def console_names(launches: list[dict]) -> list[str]:
    """Each launch as the console names it: its configuration, and its round (None: the one-off sets' launch)
    where the configuration launches more than once, so three replicates read as three lines, not one thrice."""
    per_configuration: dict[str, int] = {}
    for launch in launches:
        per_configuration[launch["configuration"]] = per_configuration.get(launch["configuration"], 0) + 1
    names = []
    for launch in launches:
        which = "one-offs" if launch["round"] is None else f"round {launch['round']}"
        alone = per_configuration[launch["configuration"]] == 1
        names.append(launch["configuration"] if alone else f"{launch['configuration']} ({which})")
    return names


def report_lines(summary: dict) -> list[str]:
    lines = [f"rehearsal of {summary['node']}: {summary['rehearsal_seconds']:.0f} s here, stand-in engines and simulated GPUs"]
    for name, launch in zip(console_names(summary["launches"]), summary["launches"]):
        counts: dict[str, int] = {}
        for status in launch["cells"].values():
            counts[status] = counts.get(status, 0) + 1
        state = "ready" if launch["ready"] else f"NOT READY: {launch['reason']}"
        draft = f", draft {launch['draft_model']}" if launch["draft_model"] else ""
        lines.append(f"  {name}: {state}{draft}; cells " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                     + f"; flags checked: {flags_checked(launch.get('flag_check'), launch.get('pinned'))}")
    notes = dict.fromkeys(n for launch in summary["launches"] for n in launch.get("pace_notes") or ())
    lines += [f"  priced: {note}" for note in notes]
    if summary.get("expected_real_hours") is None:
        lines.append(f"  the real run: not priced, {summary['expected_basis']}")
    else:
        if summary.get("over_budget"):
            lines.append(f"  {summary['over_budget']}")
        cost = summary.get("expected_real_usd")
        unit = "GPU-node hours" if summary.get("node_hour_usd") else "hours of the box"
        money = f", ${cost[0]:g}-{cost[1]:g} at ${summary['node_hour_usd']:g} a GPU-node hour" if cost else ""
        lines.append(f"  the real run: about {summary['expected_real_hours']:g}-{summary['expected_real_hours_high']:g} "
                     f"{unit} for the rounds as rehearsed{money} ({summary['expected_basis']})")
        if summary.get("plan_hours"):
            (low, high), kwh = summary["plan_hours"], summary.get("plan_kwh")
            rate = summary.get("usd_per_kwh")
            energy = "" if not kwh or not kwh[1] else f", {kwh[0]:.3g}-{kwh[1]:.3g} kWh at the stand-in's modeled draw" + (
                f" (${kwh[0] * rate:.2f}-{kwh[1] * rate:.2f} at ${rate:g} a kWh)" if rate else "")
            rounds = "-".join(str(r) for r in dict.fromkeys(summary["horizon"]))
            later = (f", then later rounds to the horizon, round {rounds}" if max(summary["horizon"]) > summary["first_rounds"]
                     else ", no later round")
            lines.append(f"  the plan: {summary['first_rounds']} round(s) first{later} (analysis/sequence.py; "
                         f"decide.budget_minutes counts the cells' minutes only): about {low:g}-{high:g} {unit}, start-ups "
                         f"and compiles included{energy}")
    if summary.get("texts_advised"):
        lines.append("  " + summary["texts_advised"].lstrip("# "))
    lines.append(f"  report: {rehearsal.paths(summary['node'])['reports']}/index.html")
    return lines


def rehearse(nodes: list[str], settings: dict, advise=None) -> int:
    """Rehearse each node in turn; the exit code is the first failing workflow's (0 when all ran). `advise` (launch
    s, repeat s, repeats) -> the line on a round's texts per cell at those costs (the caller's analysis.levels)."""
    code = 0
    for node in nodes:
        env = {**os.environ, "STACKBENCH_LOCK_DIR": str(rehearsal.lock_dir(node).absolute())}
        started = time.monotonic()
        done = subprocess.run(snakemake_argv(node, settings), env=env)
        summary = summarize(node, time.monotonic() - started, settings["time_scale"])
        if advise and summary.get("round_costs"):
            summary["texts_advised"] = advise(*summary["round_costs"])
        out = rehearsal.DATA / node / "rehearsal.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({**summary, "workflow_exit_code": done.returncode}, indent=1))
        print("\n".join(report_lines(summary)), flush=True)
        code = code or done.returncode
    return code
