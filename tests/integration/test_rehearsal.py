"""Rehearsals of the seed nodes (`snakemake --cores 1 rehearse --config nodes=[<node>]`, stand-in engines
and simulated GPUs, stackbench.rehearsal) and what they prove, read from their output: every launch ready
or refused with its reason, every cell with a figure or a named status, caps on the launch's GPUs only,
read back and restored (also after a SIGKILL mid-cap), a headline row per stack and variant, and the argv
each stand-in received equal to `stackbench commands` after the normalisation docs/rehearsal.md states.

CI runs the four at once at the config's time scale (rehearsal.time_scale) and, for the SIGKILL case, a node
cut to one launch and one workload; each rehearsal's wall time is printed (pytest -s)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import copy_repo, unregistered
from paths import ROOT

from stackbench.rehearsal import simgpu

pytestmark = pytest.mark.integration

SEED_NODES = ["rtx5090", "2x3090-nvlink", "4xa6000-tp2", "4xa6000-tp4"]
# named; "missing" is a cell silently lost. not_swept: a cap at or above the stock cell's drawn power (the stand-in's
# draw follows its load, so a 2x3090's 220-300 W caps sit above a batch-1 decode's draw)
CELL_STATUSES = {"ok", "failed", "not_run", "rejected", "gpu_busy", "not_swept"}


def rehearse_argv(node: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--cores", "1", "rehearse", "--config", f"nodes=[{node}]"]


def rehearse(repo: Path, node: str, timeout_s: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(rehearse_argv(node), cwd=repo, capture_output=True, text=True, timeout=timeout_s)


@pytest.fixture(scope="module")
def rehearsed(tmp_path_factory):
    """Every seed node rehearsed once, all four at the same time (each waits mostly on its stand-ins' modeled
    sleeps, so together they take about as long as the longest alone), each in its own repository copy with
    a results table that must not change."""
    sentinel_text = b"the real run's results: a rehearsal never touches them"
    started = time.monotonic()
    running = {}
    for node in SEED_NODES:
        repo = copy_repo(tmp_path_factory.mktemp(node) / "repo")
        os.symlink(ROOT / ".envs", repo / ".envs")
        (repo / "data/results.parquet").write_bytes(sentinel_text)
        running[node] = (repo, subprocess.Popen(rehearse_argv(node), cwd=repo, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE, text=True))
    done: dict[str, dict] = {}

    def get(node: str) -> dict:
        if node not in done:
            repo, proc = running[node]
            stdout, stderr = proc.communicate(timeout=1800)
            seconds = time.monotonic() - started
            print(f"rehearsal of {node}: done {seconds:.0f} s after the four started together")
            assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
            assert (repo / "data/results.parquet").read_bytes() == sentinel_text
            assert not (repo / "reports").exists() or not [p for p in (repo / "reports").iterdir() if p.name != "rehearsal"]
            summary = json.loads((repo / f"data/rehearsal/{node}/rehearsal.json").read_text())
            done[node] = {"repo": repo, "summary": summary, "seconds": seconds, "stdout": stdout}
        return done[node]

    yield get
    for _, proc in running.values():
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("node", SEED_NODES)
def test_every_launch_ready_every_cell_named(rehearsed, node):
    result = rehearsed(node)
    launches = result["summary"]["launches"]
    assert launches, "no launch rehearsed"
    for launch in launches:
        assert launch["ready"] or launch["reason"], launch
        assert launch["ready"], f"{launch['launch']} not ready: {launch['reason']}"  # the seed nodes are meant to run
        statuses = set(launch["cells"].values())
        assert statuses <= CELL_STATUSES, f"{launch['launch']}: cells without a named status: {launch['cells']}"
    # Probes ran wherever a launch lists a probe workload (the seed nodes list none yet: issue 29 adds them).
    for run_dir in (result["repo"] / f"data/rehearsal/{node}/runs/{node}").iterdir():
        spec = json.loads((run_dir / "launch.json").read_text())
        probes = [c["key"] for c in spec["cells"] if c["workload"] in [w["name"] for w in spec["node"]["workloads"]
                                                                         if w["kind"] == "probe"]]
        launch = next(x for x in launches if x["launch"] == run_dir.name)
        assert all(launch["cells"][key] == "ok" for key in probes), launch
    assert result["summary"]["expected_real_hours"] > 0
    assert f"rehearsal of {node}" in result["stdout"] and "the real run: about" in result["stdout"]


@pytest.mark.parametrize("node", SEED_NODES)
def test_headline_row_per_stack_and_variant_and_every_title_a_rehearsal(rehearsed, node):
    repo = rehearsed(node)["repo"]
    results = pd.read_parquet(repo / f"data/rehearsal/{node}/results.parquet")
    measured = results[results["source"] != "published"]
    assert (measured["source"] == "rehearsal").all()  # a stand-in's rows are never labelled measured
    assert measured["engine_image"].str.startswith("REHEARSAL").all()
    assert measured["engine_version"].str.startswith("stackbench-standin").all()
    report = (repo / f"reports/rehearsal/{node}/report.md").read_text()
    titles = [line for line in report.splitlines() if line.startswith("### ") or line.startswith("# ")]
    assert titles and all("REHEARSAL (stand-in engines at their modeled pace" in t for t in titles)
    headline = next((repo / f"reports/rehearsal/{node}/tables").glob(f"headline-{node}.csv"))
    rows = pd.read_csv(headline)
    shown = set(zip(rows.loc[rows["source"] == "rehearsal", "stack"], rows.loc[rows["source"] == "rehearsal", "variant"]))
    assert shown == set(zip(measured["stack"], measured["variant"]))


@pytest.mark.parametrize("node", SEED_NODES)
def test_every_metric_a_rehearsal_writes_is_registered(rehearsed, node):
    """Every row the rehearsal's launches wrote (cells, server facts, probes, collect's comparisons) is under a
    name results/metrics.py holds: an unregistered one would be read by nothing."""
    results = pd.read_parquet(rehearsed(node)["repo"] / f"data/rehearsal/{node}/results.parquet", columns=["metric"])
    assert unregistered(results["metric"]) == []


def test_rtx5090_reads_at_the_modeled_pace_and_slows_with_context(rehearsed):
    """A 27B model on one RTX 5090 decodes at tens of tok/s, not the time scale's thousands; the 128K request
    decodes slower than the short ones by the stand-in's stated shape (rehearsal/standin.py Pace); one
    repeat shows no range; What to run says what a rehearsal cannot decide."""
    repo = rehearsed("rtx5090")["repo"]
    results = pd.read_parquet(repo / "data/rehearsal/rtx5090/results.parquet")
    ok = results[(results["source"] == "rehearsal") & (results["status"] == "ok")]
    decode = ok[(ok["metric"] == "decode_tps") & (ok["concurrency"] == 1) & (ok["stack"] == "sglang") & (ok["variant"] == "nospec")]
    short = decode[decode["workload"] == "seed-000-short-code"]["value"].iloc[0]
    long = decode[decode["workload"] == "seed-000-128k"]["value"].iloc[0]
    # The stated shape gives 1.29 here; the harness's own timing noise rides on it at the time scale.
    assert 40 < short < 150 and 1.1 < short / long < 1.7, (short, long)
    assert ok.loc[ok["metric"] == "decode_tps", "value_min"].isna().all()
    report = (repo / "reports/rehearsal/rtx5090/report.md").read_text()
    assert "A rehearsal chooses nothing: it runs each cell once" in report
    sections = [line for line in report.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Time budget of the real run"
    assert "llamacpp--mtp-n2" in report  # seed 000 section 8's llama.cpp Q4_K_M + MTP
    assert not [line for line in report.splitlines() if "RTX 5090 32GB" in line and "GeForce RTX 5090" in line]  # one GPU
    # one checkpoint, one spelling: the rows name the node's models as the post does (models.<key>.checkpoint)
    assert not [line for line in report.splitlines() if line.startswith("- model:") and "qwen38-" in line]
    use_case = (repo / "reports/rehearsal/rtx5090/tables/use-case-rtx5090.md").read_text()
    assert "| chat |" in use_case and "| long context |" in use_case


def test_2x3090_per_run_caps_cut_the_budget_and_the_report_says_by_how_much(rehearsed):
    repo = rehearsed("2x3090-nvlink")["repo"]
    budget = json.loads((repo / "data/rehearsal/2x3090-nvlink/budget.json").read_text())
    capped = [x for x in budget["launches"] if x["caps"]]
    assert [x["launch"] for x in capped] == ["sglang-eagle--eagle-3-1-4"]
    assert budget["caps_everywhere"]["extra_h"][0] > 0.5 * budget["total_h"][0]
    report = (repo / "reports/rehearsal/2x3090-nvlink/report.md").read_text()
    assert "180/220/260/300 W on every launch would add" in report
    use_case = (repo / "reports/rehearsal/2x3090-nvlink/tables/use-case-2x3090-nvlink.md").read_text()
    assert "| coding |" in use_case


@pytest.mark.parametrize("node", SEED_NODES)
def test_stand_in_received_the_commands_of_stackbench_commands(rehearsed, node):
    """Normalisation (docs/rehearsal.md): the executable (native) or the container CLI's
    own flags up to the image (image mode; its entrypoint stays) are the launcher's, not the engine's;
    `<port>` is the port chosen at start. GPU indices against UUIDs appear only in what is dropped
    (CUDA_VISIBLE_DEVICES, docker --gpus)."""
    repo = rehearsed(node)["repo"]
    listed = subprocess.run([sys.executable, "-m", "stackbench.cli", "commands", "--node", node], cwd=repo,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for line in listed:
        launch, command = line.split(" ", 1)
        expected = shlex.split(command)
        if expected[0] in ("docker", "podman"):
            at = expected.index("--entrypoint")  # --entrypoint <entrypoint> <image> <the container's command>
            expected = [expected[at + 1], *expected[at + 3:]]
        else:
            expected = expected[1:]
        received = json.loads((repo / f"data/rehearsal/{node}/runs/{node}/{launch}/standin_argv.json").read_text())["argv"]
        port = received[received.index("--port") + 1]
        assert received == [port if a == "<port>" else a for a in expected], launch


@pytest.mark.parametrize("node", SEED_NODES)
def test_caps_only_on_the_launch_gpus_read_back_and_restored(rehearsed, node):
    repo = rehearsed(node)["repo"]
    spec = yaml.safe_load((repo / f"configs/nodes/{node}.yaml").read_text())
    gpu = spec["hardware"]["gpu"]
    state = json.loads((repo / f"data/rehearsal/{node}/locks/simulated-gpus.json").read_text())
    board_mw = int(simgpu.board_power_w(gpu["model"]) * 1000)
    assert state["limits_mw"] == [board_mw] * (gpu["count"] + simgpu.EXTRA_GPUS)  # every limit restored
    assert set(state.get("touched", [])) <= set(range(gpu["count"]))  # never the host's other GPUs
    results = pd.read_parquet(repo / f"data/rehearsal/{node}/results.parquet")
    capped = results[(results["source"] == "rehearsal") & results["power_cap_w"].notna() & (results["status"] == "ok")]
    caps = set(spec.get("power_caps_w") or []) | {c for run in spec["runs"] for c in run.get("power_caps_w") or []}
    if caps:
        assert state["touched"] == list(range(gpu["count"]))
        # The cells' rows carry the cap as read back (launch-level rows such as the knee name only the cap).
        read_back = capped.dropna(subset=["power_cap_enforced_w"])
        assert (read_back["power_cap_enforced_w"] == read_back["power_cap_w"]).all()
        assert set(read_back["power_cap_w"]) == caps
    else:
        assert capped.empty and not state.get("touched")


def test_dflash_launch_ready_with_its_draft_path(rehearsed):
    launches = {launch["launch"]: launch for launch in rehearsed("4xa6000-tp2")["summary"]["launches"]}
    dflash = next(launch for name, launch in launches.items() if "dflash" in name)
    assert dflash["ready"] and dflash["draft_model"] == "/draft/Qwen3.8-27B-DFlash2"


def test_caps_restored_after_sigkill_mid_cap_and_rerun(tmp_path):
    """The measure job SIGKILLed while its GPUs are capped leaves them capped, as a real GPU would stay;
    the rehearsal run again restores them before measuring, and finishes every cell."""
    repo = copy_repo(tmp_path / "repo")
    os.symlink(ROOT / ".envs", repo / ".envs")
    node_file = repo / "configs/nodes/2x3090-nvlink.yaml"
    node = yaml.safe_load(node_file.read_text())
    node.update(workloads=["code"], concurrency=[1], runs=node["runs"][:1], power_caps_w=[180, 220, 260, 300])
    node["runs"][0].pop("workloads", None)
    node_file.write_text(yaml.safe_dump(node))
    state_file = repo / "data/rehearsal/2x3090-nvlink/locks/simulated-gpus.json"
    first = subprocess.Popen(rehearse_argv("2x3090-nvlink"), cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    board_mw = int(simgpu.board_power_w(node["hardware"]["gpu"]["model"]) * 1000)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if state_file.exists() and min(json.loads(state_file.read_text())["limits_mw"]) < board_mw:
            break
        time.sleep(0.05)
    else:
        first.kill()
        pytest.fail("no cap was ever applied")
    measure_job = next(pid for pid in _pids() if _cmdline(pid).split(" ")[1:4] == ["-m", "stackbench.cli", "measure"]
                       and _cwd(pid) == str(repo))
    os.kill(measure_job, signal.SIGKILL)
    first.wait(timeout=300)
    assert min(json.loads(state_file.read_text())["limits_mw"]) < board_mw  # left capped by the killed job
    again = rehearse(repo, "2x3090-nvlink")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert json.loads(state_file.read_text())["limits_mw"] == [board_mw] * (2 + simgpu.EXTRA_GPUS)
    summary = json.loads((repo / "data/rehearsal/2x3090-nvlink/rehearsal.json").read_text())
    # every cell finished: measured, or a cap at or above what the stock cell drew, not swept (a result too)
    assert all(set(launch["cells"].values()) <= {"ok", "not_swept"} for launch in summary["launches"])
    assert all("ok" in launch["cells"].values() for launch in summary["launches"])
    runs = repo / "data/rehearsal/2x3090-nvlink/runs/2x3090-nvlink"
    leftovers = [item for run in runs.glob("*/run.json") for item in json.loads(run.read_text())["leftovers"]]
    assert any("power limit" in item for item in leftovers)


def test_two_labelled_runs_rehearse_apart_and_a_flag_the_built_parser_refuses_is_reported_at_the_rerun(tmp_path):
    """Issue 60: SGLang at TP 4 and TP 2 in one node file (runs[].label), the TP 2 run with a flag SGLang does not
    take. Rehearsed before SGLang's CPU environment is built, both launches run, their flags unchecked; once it is
    built, the rehearsal run again re-launches them (the parser is part of a rehearsal launch), and the console and
    the budget say the parser refused the TP 2 run's flag and checked the TP 4 run's, beside the pinned version."""
    repo = copy_repo(tmp_path / "repo")
    node_file = repo / "configs/nodes/4xa6000-tp4.yaml"
    node = yaml.safe_load(node_file.read_text())
    run = {"stack": "sglang-nospec", "model": node["runs"][0]["model"]}
    node.update(workloads=["code"], concurrency=[1], probes=None, accuracy=None,
                runs=[{**run, "label": "tp4", "server_args": {"tp_size": 4}},
                      {**run, "label": "tp2", "server_args": {"tp_size": 2, "no_such_flag": True}}])
    node_file.write_text(yaml.safe_dump(node))
    first = rehearse(repo, "4xa6000-tp4")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    launches = {x["launch"]: x for x in json.loads((repo / "data/rehearsal/4xa6000-tp4/rehearsal.json").read_text())["launches"]}
    assert set(launches) == {"sglang-nospec+tp4--nospec", "sglang-nospec+tp2--nospec"}
    assert all(x["ready"] and x["flag_check"].startswith("skipped") for x in launches.values())
    stacks = set(pd.read_parquet(repo / "data/rehearsal/4xa6000-tp4/results.parquet", columns=["stack", "source"])
                 .query("source == 'rehearsal'")["stack"])
    assert stacks == {"sglang+tp4", "sglang+tp2"}
    built = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", ".envs/sglang-cpu/ready.json"], cwd=repo,
                           capture_output=True, text=True, timeout=3600)  # the cached build where there is one
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    again = rehearse(repo, "4xa6000-tp4")
    version = json.loads((repo / ".envs/sglang-cpu/ready.json").read_text())["version"]
    lines = {line.split(":", 1)[0].strip(): line for line in again.stdout.splitlines() if line.startswith("  sglang-nospec+")}
    assert "NOT READY" in lines["sglang-nospec+tp2--nospec"] and "flags checked: REFUSED: " in lines["sglang-nospec+tp2--nospec"]
    assert "--no-such-flag" in lines["sglang-nospec+tp2--nospec"]
    assert lines["sglang-nospec+tp4--nospec"].endswith(f"flags checked: yes, sglang-cpu's argparse, version {version}; "
                                                        f"the run pins {(repo / 'envs/sglang.txt').read_text().split()[0]}")
    budget = json.loads((repo / "data/rehearsal/4xa6000-tp4/budget.json").read_text())
    assert {x["launch"]: x["flag_check"].split(" ")[0] for x in budget["launches"]} == {
        "sglang-nospec+tp4--nospec": "ok", "sglang-nospec+tp2--nospec": "refused:"}


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""
