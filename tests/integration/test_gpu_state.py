"""GPU state before, during and after a launch (issue 36), through the measure layer on a rehearsal: stand-in
engines on a simulated host (stackbench.rehearsal.simgpu, an NVML TEST DOUBLE) whose state a test sets: another
user's process holding 20 GB on one GPU, a GPU in thermal slowdown. Each stand-in holds its memory while it runs
and frees it a moment after SIGTERM, as a driver does."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
import yaml
from helpers import copy_repo
from paths import ROOT, STANDIN_SETS

from stackbench.measure import sequencer
from stackbench.plan import expand, launchspec
from stackbench.rehearsal import backend as rehearsal_backend
from stackbench.rehearsal import launcher as rehearsal_launcher
from stackbench.rehearsal import simgpu
from stackbench.results import store

pytestmark = pytest.mark.integration
NODE = "rtx5090"  # one GPU; its simulated host has simgpu.EXTRA_GPUS more


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = copy_repo(tmp_path_factory.mktemp("gpustate") / "repo")
    os.symlink(ROOT / ".envs", repo / ".envs")
    node_file = repo / f"configs/nodes/{NODE}.yaml"
    node = yaml.safe_load(node_file.read_text())
    llamacpp = next(run for run in node["runs"] if run["stack"].startswith("llamacpp"))
    llamacpp.update(variants=["nospec"], workloads=["code"])
    llamacpp.pop("probes", None)
    node.update(workloads=["code"], concurrency=[1], power_caps_w=[400], probes=None, runs=[llamacpp])
    node["hardware"]["gpu_idle"] = {"wait_s": 1, "release_wait_s": 10}
    node_file.write_text(yaml.safe_dump(node))
    return repo


@pytest.fixture(autouse=True)
def drawing_near_board_power(monkeypatch):
    """Stand-ins that draw near board power at any load (an idle share of 0.85, simgpu.IDLE_SHARE is 0.1), so the
    stock cell's draw (about 500 W on this 575 W board) is above the 400 W cap, which the sequencer then sweeps and
    which binds: a cap at or above the stock draw is not swept (sequencer._not_swept), and this RTX 5090's lowest
    limit, 400 W, is above its real batch-1 decode draw."""
    monkeypatch.setattr(simgpu, "IDLE_SHARE", 0.85)


def run_on(repo: Path, device: int, out: str, monkeypatch) -> tuple[dict, list[dict]]:
    """The node's launch on simulated GPU `device`, measured in process: (run.json, result rows)."""
    monkeypatch.chdir(repo)
    doc = yaml.safe_load(Path(f"configs/nodes/{NODE}.yaml").read_text())
    doc["hardware"]["gpu"]["devices"] = [device]
    Path(f"configs/nodes/{NODE}.yaml").write_text(yaml.safe_dump(doc))
    # the code class draws from HumanEval: stand-ins of its fetched file, the set is not what these tests check
    cfg = expand.load_run_config(Path("."), {"nodes": [NODE], "rehearsal": {"node": NODE},
                                             "paths": {"datasets": str(STANDIN_SETS)}})
    node = expand.load_node(NODE, cfg, Path("."))
    spec = launchspec.build(cfg, node, node.launches[0])
    result = sequencer.LaunchRun(spec, Path(out), backend=rehearsal_backend.for_spec(spec)).run()
    return json.loads((Path(out) / "run.json").read_text()), store.read_results(result).to_dict("records")


def host(repo: Path):
    node = expand.load_node(NODE, expand.load_run_config(repo, {"nodes": [NODE], "rehearsal": {"node": NODE}}), repo)
    return rehearsal_launcher.simulated_host(node)


def note_of(row: dict) -> str:
    return row["note"] if isinstance(row["note"], str) else ""  # a row without a note reads back NaN


def by_cell(rows: list[dict], metric: str) -> dict:
    return {row["power_cap_w"] if row["power_cap_w"] == row["power_cap_w"] else None: row
            for row in rows if row["metric"] == metric and row["workload"] == "code"}


def test_a_busy_gpu_is_refused_in_one_line_another_gpu_is_measured_and_memory_release_is_awaited(repo, monkeypatch):
    monkeypatch.chdir(repo)
    simulated = host(repo)
    simulated.add_process(0, 4242, 20480, until=time.time() + 3600)  # another user's job holds 20 GB on GPU 0
    run, rows = run_on(repo, 0, "runs/busy", monkeypatch)
    statuses = {row["status"] for row in rows if row["workload"] == "code"}
    assert statuses == {"gpu_busy"}, statuses
    reason = next(row["reason"] for row in rows if row["workload"] == "code")
    assert "\n" not in reason and "GPU 0 (GPU-simulated-0)" in reason and "pid 4242 holds 20480 MiB" in reason
    assert not [row for row in rows if row["status"] == "ok" and row["value"] == row["value"] and row["workload"] == "code"]
    assert run["launches"] == 0 and any(e["event"] == "gpu_idle_wait" for e in run["timeline"])

    # GPU 1 of the same host: measured, then its memory awaited before the launch ends; a second launch there
    # finds it idle at once.
    first, rows = run_on(repo, 1, "runs/first", monkeypatch)
    assert {row["status"] for row in rows if row["workload"] == "code"} == {"ok"}
    released = [e for e in first["timeline"] if e["event"] == "gpu_memory_released"]
    assert released and released[-1]["seconds"] >= 0.5 * simgpu.RELEASE_S and released[-1]["busy"] == []
    release_row = next(row for row in rows if row["metric"] == "memory_release_s")
    assert release_row["value"] == pytest.approx(max(e["seconds"] for e in released))
    assert simulated.nvmlDeviceGetMemoryInfo(1).used / 2**20 == simgpu.IDLE_USED_MIB
    second, _ = run_on(repo, 1, "runs/second", monkeypatch)
    assert not any(e["event"] == "gpu_idle_wait" for e in second["timeline"]), second["timeline"]  # the first left it idle

    # Energy from the counter, the sampled power's integral beside it: they agree within 5%, not 1%, since the stand-in's
    # draw follows its load (issue 67: prefill at the board's power, decode below it), and the sampler's ticks may
    # miss a prefill burst that the counter accumulates.
    for row in by_cell(rows, "energy_j_per_token").values():
        counter, sampled = (float(x) for x in re.search(r"energy counter delta ([\d.]+) J; sampled power integral ([\d.]+) J",
                                                         row["note"]).groups())
        assert sampled == pytest.approx(counter, rel=0.05) and "GPU-simulated-1" in row["note"]
        assert "GPU-simulated-0" not in row["note"]  # the busy GPU is no part of this launch's energy

    # The capped cell's clocks were held by its own cap only: not flagged; the uncapped one has no reason.
    shares = by_cell(rows, "clock_event_share_sw_power_cap")
    assert shares[400.0]["value"] == 1.0 and shares[None]["value"] == 0.0
    assert all(row["value"] == 0 for row in by_cell(rows, "clock_event_share_thermal").values())
    notes = {cap: note_of(row) for cap, row in by_cell(rows, "decode_tps").items()}
    assert "SW power cap held the clocks" in notes[400.0] and "GPU SLOWED" not in notes[400.0] + notes[None]


def test_every_cell_on_a_thermally_slowed_gpu_carries_its_share_and_a_flag(repo, monkeypatch):
    monkeypatch.chdir(repo)
    host(repo).throttle(2, simgpu.SW_THERMAL)
    _, rows = run_on(repo, 2, "runs/thermal", monkeypatch)
    thermal = by_cell(rows, "clock_event_share_thermal")
    assert set(thermal) == {None, 400.0} and all(row["value"] == 1.0 for row in thermal.values())
    assert all(row["value"] == simgpu.THROTTLED_CLOCK_MHZ for row in by_cell(rows, "sm_clock_mhz").values())
    assert all("GPU SLOWED" in note_of(row) for row in by_cell(rows, "decode_tps").values())
