"""The real run's time budget from a rehearsal's files (stackbench.rehearsal.budget) and the tables the
rehearsal's report opens with (report/budget.py). The launch and run files here are hand-built test data in
the shape the sequencer writes, not a rehearsal's output."""

import json

import pytest

from stackbench.rehearsal import budget, standin
from stackbench.report.budget import budget_tables

SCALE = 50
REAL = {"repeats": 3, "warmup_requests": 1}


def write_launch(runs, name, mode, cells, ready_s, caps=(), repeats=None, weights_gib=10.0, per_stream=1):
    folder = runs / name
    folder.mkdir(parents=True)
    stack, variant = name.split("--")
    workloads = sorted({c[1] for c in cells})
    (folder / "launch.json").write_text(json.dumps({
        "launch": {"stack_config": stack, "variant": variant, "launch_mode": mode, "launch_target": "img@sha256:1" if mode == "image" else None,
                   "repeats": repeats, "power_caps_w": list(caps)},
        "node": {"workloads": [{"name": w, "load": {"requests_per_stream": per_stream}} for w in workloads]},
        "cells": [{"key": key, "workload": workload, "power_cap_w": cap} for key, workload, cap, _ in cells]}))
    (folder / "run.json").write_text(json.dumps({"timeline": [{"event": "ready", "seconds": ready_s},
                                                              *[{"event": "cell", "seconds": s, "cell": key} for key, _, _, s in cells]]}))
    (folder / "standin_facts.json").write_text(json.dumps({"weights_gib_per_gpu": weights_gib}))


def test_hours_count_repeats_warm_up_start_and_pull_and_name_the_costliest(tmp_path):
    write_launch(tmp_path, "vllm--nospec", "image", [("code--c1--nocap", "code", None, 2.0), ("long--c1--nocap", "long", None, 10.0)],
                 ready_s=1.0)
    write_launch(tmp_path, "vllm--rmtp", "image", [("code--c1--nocap", "code", None, 1.0)], ready_s=1.0, repeats=5)
    doc = budget.budget(tmp_path, SCALE, REAL)
    by_launch = {x["launch"]: x for x in doc["launches"]}
    hour = 3600
    # The first launch of the image (in name order) pulls it; its cells run 3 repeats plus one warm-up request each.
    # Each start at its modeled seconds (start-up and the weights read), not the rehearsal's ready time x the scale.
    start = standin.ready_s(10.0 * 2**30)
    nospec = by_launch["vllm--nospec"]
    assert nospec["start_h"][0] == pytest.approx((start + budget.IMAGE_PULL_S[0]) / hour)
    assert nospec["total_h"][0] == pytest.approx(nospec["start_h"][0] + (2.0 + 10.0) * SCALE * (3 + 1) / hour)
    mtp = by_launch["vllm--rmtp"]  # the same image: no second pull; the run's own 5 repeats
    assert mtp["start_h"][0] == pytest.approx(start / hour)
    assert mtp["total_h"][0] == pytest.approx((start + 1.0 * SCALE * (5 + 1)) / hour)
    # High: the slower roofline share on the cells, the slow disk on the load, the slow pull.
    slow = standin.ROOFLINE_SHARE / budget.HIGH_SHARE
    load_extra = 10.0 * 2**30 * (1 / budget.LOAD_BYTES_PER_S_HIGH - 1 / standin.LOAD_BYTES_PER_S)
    assert mtp["total_h"][1] == pytest.approx((start + load_extra + 1.0 * SCALE * 6 * slow) / hour)
    assert [w["workload"] for w in doc["workloads"]] == ["long", "code"]
    assert doc["top_cells"][0] == {"launch": "vllm--nospec", "cell": "long--c1--nocap", "total_h": [10.0 * SCALE * 4 / hour,
                                                                                                   10.0 * SCALE * 4 * slow / hour]}
    assert doc["total_h"][0] == pytest.approx(nospec["total_h"][0] + mtp["total_h"][0])


def test_a_per_run_cap_list_is_measured_against_caps_on_every_launch(tmp_path):
    write_launch(tmp_path, "sglang-eagle--eagle-3-1-4", "native",
                 [("chat--c1--nocap", "chat", None, 1.0), ("chat--c1--180W", "chat", 180, 2.0), ("chat--c1--260W", "chat", 260, 1.5)],
                 ready_s=0.5, caps=(180, 260))
    write_launch(tmp_path, "llamacpp--nospec", "native", [("chat--c1--nocap", "chat", None, 3.0)], ready_s=0.5)
    doc = budget.budget(tmp_path, SCALE, REAL)
    # Without the run's list, the llama.cpp launch would run its uncapped cell again at both caps.
    assert doc["caps_everywhere"]["caps"] == [180, 260]
    assert doc["caps_everywhere"]["extra_h"][0] == pytest.approx(2 * 3.0 * SCALE * 4 / 3600)
    launches, workloads, top = budget_tables(budget.main(tmp_path, SCALE, REAL, tmp_path / "budget.json"))
    assert launches.rows[-1][0] == "all launches" and launches.rows[1][4] == "180/260"  # llamacpp first (name order)
    assert any("on every launch would add" in c for c in launches.legend)
    assert workloads.rows[0][0] == "chat" and len(top.rows) == 4
