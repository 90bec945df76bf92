"""The host's CPUs before and during a launch (issue 55), through the whole run loop against the synthetic engine
(a TEST DOUBLE served by this process's child, so inside the launch like a native server): a Python busy loop on
every core, double-forked so that it belongs to no launch, is the outside workload. Its cells are flagged with
the process named, or the launch is refused, as the node chooses; without it, the launch's own client and
server never count as load."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml
from helpers import serving
from paths import ROOT

from stackbench.analysis import hoststate
from stackbench.config.model import HostIdle
from stackbench.measure import sequencer
from stackbench.plan import expand, launchspec
from stackbench.rehearsal.standin import Timing
from stackbench.results import store

pytestmark = pytest.mark.integration

# 0.05 s to the first token, 20 tokens 20 ms apart: under half a second a request.
TIMING = Timing(ttft_s=0.05, interval_s=0.02, tokens_per_chunk=1, reasoning_tokens=0, content_tokens=20)


@pytest.fixture(scope="module")
def engine():
    with serving(TIMING) as url:
        yield url


# The busy loops' process name, this test process's own: another suite sharing the machine (a second CI run) may
# run loops of its own at the same time, and those are load from outside the launch like any other process.
BUSY_LOOP = f"busy{os.getpid()}"


@pytest.fixture
def busy_loops(tmp_path):
    """A Python busy loop per core, run as BUSY_LOOP and orphaned at once (its shell exits): nobody's launch."""
    name = tmp_path / BUSY_LOOP
    name.symlink_to(sys.executable)
    spawn = " ".join(f"{name} -I -S -c 'while True: pass' >/dev/null 2>&1 & echo $!;" for _ in range(psutil.cpu_count()))
    pids = [int(p) for p in subprocess.run(["sh", "-c", spawn], capture_output=True, text=True, check=True).stdout.split()]
    time.sleep(0.5)
    yield pids
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def spec_for(tmp_path: Path, url: str, on_busy: str, wait_s: float) -> launchspec.LaunchSpec:
    """One external launch of the double: the code workload at c1 and c2, 2 repeats each."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    (tmp_path / "configs/workloads/code.yaml").write_text(yaml.safe_dump({"prompts": ["Say hi."], "output_tokens": 20}))
    (tmp_path / "configs/nodes/host-double.yaml").write_text(yaml.safe_dump({
        "hardware": {"gpu": {"model": "none", "count": 0}}, "concurrency": [1, 2], "workloads": ["code"],
        "probes": None, "accuracy": None, "divergence": None,
        "models": {"served": {"hf_dir": "/not/ours", "quant": "Q4"}},
        "runs": [{"stack": "vllm-cpu", "model": "served", "variants": ["nospec"], "launch": {"mode": "external", "url": url}}]}))
    cfg = expand.load_run_config(tmp_path, {"nodes": ["host-double"], "measure": {"repeats": 2, "warmup_requests": 1}})
    node = expand.load_node("host-double", cfg, tmp_path)
    spec = launchspec.build(cfg, node, node.launches[0])
    # host_idle as the node file would set it, once plan/expand.py reads the field
    return dataclasses.replace(spec, node=dataclasses.replace(spec.node, host_idle=HostIdle(0.25, 2, wait_s, on_busy)))


def run(spec: launchspec.LaunchSpec, out: Path, console: io.StringIO | None = None) -> tuple[pd.DataFrame, dict]:
    results = store.read_results(sequencer.LaunchRun(spec, out, console=console).run())
    return results, json.loads((out / "run.json").read_text())


def cell_rows(results: pd.DataFrame, metric: str) -> pd.DataFrame:
    return results[(results["workload"] == "code") & (results["metric"] == metric)]


def engine_pid(url: str) -> int:
    from stackbench.host.hostload import listening_pids

    return listening_pids(int(url.rsplit(":", 1)[1].split("/")[0]))[0]


def test_a_loaded_host_flags_every_cell_with_the_process_named_or_refuses_the_launch(engine, busy_loops, tmp_path):
    console = io.StringIO()
    results, _ = run(spec_for(tmp_path / "flag", engine, "flag", wait_s=0), tmp_path / "flag/run", console)
    named = [f"{BUSY_LOOP} (pid {pid})" for pid in busy_loops]
    last = console.getvalue().splitlines()[-1]  # the person sees it on the console too
    assert "2/2 cells" in last and "HOST BUSY in 2 cells" in last and any(name in last for name in named), last
    busy = cell_rows(results, "host_busy")
    assert len(busy) == 2 and set(busy["value"]) == {1.0}  # c1 and c2
    for note in busy["note"]:
        assert "HOST BUSY before the launch" in note and "HOST BUSY during the cell" in note
        assert any(name in note for name in named), note
    assert (cell_rows(results, "host_outside_cpu_share_peak")["value"] >= 0.25).all()
    assert all("HOST BUSY during the cell" in note for note in cell_rows(results, "decode_tps")["note"])
    cells = cell_rows(results, "decode_tps")
    assert all(f"{BUSY_LOOP} (pid" in why for why in hoststate.busy_of(cells, results))
    launches = hoststate.busy_launches(results)
    assert len(launches) == 1 and launches["cells"].iloc[0] == 2 and f"{BUSY_LOOP} (pid" in launches["processes"].iloc[0]
    launch_row = results[(results["workload"] == "server") & (results["metric"] == "host_busy")]
    assert launch_row["value"].tolist() == [1.0]

    results, timeline = run(spec_for(tmp_path / "refuse", engine, "refuse", wait_s=1), tmp_path / "refuse/run")
    code = results[results["workload"] == "code"]
    assert set(code["status"]) == {"host_busy"} and timeline["launches"] == 0
    reason = code["reason"].iloc[0]
    assert "\n" not in reason and reason.startswith("host busy after waiting 1 s (host_idle.wait_s)")
    assert any(name in reason for name in named), reason
    assert hoststate.busy_launches(results)["refused"].tolist() == [True]


def test_the_launch_own_client_and_server_never_count_as_load(engine, tmp_path):
    results, _ = run(spec_for(tmp_path, engine, "flag", wait_s=0), tmp_path / "run")
    ours = [f"(pid {os.getpid()})", f"(pid {engine_pid(engine)})"]
    host = results[results["metric"].str.startswith("host_")]
    assert len(cell_rows(results, "host_busy")) == 2 and set(host["status"]) == {"ok"}
    for note in host["note"].dropna():
        assert BUSY_LOOP not in note and not any(pid in note for pid in ours), note
    # A cell is flagged exactly where processes outside the launch reached busy_share: on a machine nobody else
    # loads, none is (what else ran here is named in the note).
    peaks = cell_rows(results, "host_outside_cpu_share_peak").set_index("concurrency")["value"]
    flags = cell_rows(results, "host_busy").set_index("concurrency")["value"]
    before = results[(results["workload"] == "server") & (results["metric"] == "host_busy")]["value"].iloc[0]
    assert ((flags == 1.0) == ((peaks >= 0.25) | (before == 1.0))).all(), (peaks, flags, before)
