"""Reruns through the real workflow: one plan step per launch, one fingerprint for Snakemake and the cell
store, failed cells retried, server rows kept, one launch at a time per node.

The engine here is the synthetic engine (stackbench.rehearsal.standin), a TEST DOUBLE with known timing,
installed as if it were the pipeline-built llama-server: `.envs/llamacpp/ready.json` names a small script
that serves it. Every other piece (Snakemake rules, plan, launcher, runner, store) is the real one.
"""

import json
import os
import shutil
import stat
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from engine_double import install_ready
from helpers import copy_repo
from paths import SUPPORT

from stackbench.results import store

pytestmark = pytest.mark.integration  # whole workflow runs: minutes, so outside the fast lane

ENGINE_SCRIPT = f"""#!{sys.executable}
# TEST DOUBLE standing in for llama-server: serves stackbench.rehearsal.standin on the --host/--port it is
# given and ignores every other flag.
import argparse, os, sys
from stackbench.rehearsal.standin import StandinEngine, Timing
parser = argparse.ArgumentParser()
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, default=0)
args, _ = parser.parse_known_args()
timing = Timing(ttft_s=0.05, interval_s=float(os.environ.get("ENGINE_DOUBLE_INTERVAL_S", "0.01")),
                reasoning_tokens=0, content_tokens=12)
print("engine test double listening", flush=True)
with StandinEngine(timing, args.port) as engine:
    engine.thread.join()
"""


def node(name: str, draft_path: str, variants=("nospec", "draft-n2")) -> dict:
    return {"description": f"{name}: the synthetic engine test double as llama-server",
            "hardware": {"gpu": {"model": "none", "count": 0}, "cpu_threads": 1}, "context_len": 2048,
            "concurrency": [1], "workloads": ["code"], "accuracy": None,
            "models": {"target": {"gguf": str(SUPPORT / "helpers.py"), "quant": "Q4_K_M"},
                       "draft": {"gguf": draft_path, "quant": "Q4_1"}},
            "runs": [{"stack": "llamacpp", "model": "target", "draft_model": "draft", "variants": list(variants)}]}


def install_engine(repo: Path, version: str) -> None:
    script = repo / "engine-double"
    script.write_text(ENGINE_SCRIPT)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    install_ready(repo, script, version)


def make_double_repo(repo: Path, draft: Path) -> Path:
    draft.write_bytes(b"draft model stand-in")
    for name in ("node-a", "node-b"):
        (repo / f"configs/nodes/{name}.yaml").write_text(yaml.safe_dump(node(name, str(draft))))
    (repo / "configs/workloads/code.yaml").write_text(yaml.safe_dump({"prompts": ["Say hi."], "output_tokens": 12}))
    config = yaml.safe_load((repo / "configs/config.yaml").read_text())
    config.update(nodes=["node-a"], measure={"repeats": 1, "warmup_requests": 0})
    (repo / "configs/config.yaml").write_text(yaml.safe_dump(config))
    install_engine(repo, "b1")
    return repo


@pytest.fixture
def double_repo(repo_copy, tmp_path):
    """A repository copy with the engine double installed and nothing measured yet."""
    return make_double_repo(repo_copy, tmp_path / "draft.gguf")


@pytest.fixture(scope="module")
def node_a_measured(tmp_path_factory):
    """node-a's report run once for the module; tests that start from it change a copy (measured_repo)."""
    base = tmp_path_factory.mktemp("measured-once")
    repo = make_double_repo(copy_repo(base / "repo"), base / "draft.gguf")
    done = snakemake(repo, "report")
    assert done.returncode == 0, done.stderr[-3000:]
    return repo


@pytest.fixture
def measured_repo(node_a_measured, tmp_path):
    """A copy of node_a_measured (runs, results, Snakemake's records, times kept) that the test may change."""
    repo = tmp_path / "repo"
    shutil.copytree(node_a_measured, repo, symlinks=True)
    return repo


def snakemake(repo: Path, *args: str, nodes: str = "node-a", cores: int = 1, config: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", str(cores), *args,
                           "--config", f"nodes=[{nodes}]", *config], cwd=repo, capture_output=True, text=True, timeout=600)
    return done


def jobs_of(dry_run_stdout: str, rule: str) -> list[str]:
    from helpers import planned

    return planned(dry_run_stdout, rule)


def cell_files(repo: Path, node_name: str) -> dict[str, int]:
    return {str(p.relative_to(repo)): p.stat().st_mtime_ns
            for p in (repo / "data/runs" / node_name).glob("*/cells/*--????????????????.parquet")}


def measured(repo: Path):
    results = store.read_results(repo / "data/results.parquet")
    return results[results["source"] == "measured"]


def test_adding_a_node_plans_nothing_for_the_finished_launches_of_others(measured_repo):
    dry = snakemake(measured_repo, "-n", "report", nodes="node-a,node-b")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert jobs_of(dry.stdout, "measure") == ["llamacpp--draft-n2", "llamacpp--nospec"]
    assert "node=node-a" not in dry.stdout  # node-a's finished launches are neither re-planned nor re-measured


def test_an_engine_upgrade_remeasures_every_cell_of_its_launches(measured_repo):
    before = cell_files(measured_repo, "node-a")
    install_engine(measured_repo, "b2")
    done = snakemake(measured_repo, "report")
    assert done.returncode == 0, done.stderr[-3000:]
    after = cell_files(measured_repo, "node-a")
    assert len(after) == 2 * len(before) == 8  # two launches, code and probes each: new cell files, fingerprinted anew
    rows = measured(measured_repo)
    assert set(rows["engine_version"]) == {"b2"}  # the old version's rows are not published again


def test_a_failed_cell_is_retried_and_a_finished_one_is_not(double_repo, tmp_path):
    draft = tmp_path / "draft.gguf"
    draft.unlink()  # the draft launch cannot start: its cell is not run
    done = snakemake(double_repo, "report")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = measured(double_repo)
    cells = rows[rows["workload"] == "code"]
    assert set(cells.loc[cells["variant"] == "draft-n2", "status"]) == {"not_run"}
    assert set(cells.loc[cells["variant"] == "nospec", "status"]) == {"ok"}
    finished = {k: v for k, v in cell_files(double_repo, "node-a").items() if "nospec" in k}

    draft.write_bytes(b"draft model stand-in")
    dry = snakemake(double_repo, "-n", "report")
    assert jobs_of(dry.stdout, "measure") == ["llamacpp--draft-n2"]
    done = snakemake(double_repo, "report")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = measured(double_repo)
    assert set(rows.loc[rows["workload"] == "code", "status"]) == {"ok"}
    assert {k: v for k, v in cell_files(double_repo, "node-a").items() if "nospec" in k} == finished
    assert jobs_of(snakemake(double_repo, "-n", "report").stdout, "measure") == []  # nothing left to retry


def test_keep_failed_keeps_a_failed_cell(double_repo, tmp_path):
    (tmp_path / "draft.gguf").unlink()
    args = ("report", "--config", "measure={keep_failed: true, repeats: 1, warmup_requests: 0}")
    assert snakemake(double_repo, *args).returncode == 0
    dry = snakemake(double_repo, "-n", *args)
    assert jobs_of(dry.stdout, "measure") == []


def test_server_rows_survive_a_fully_cached_rerun(measured_repo):
    first = measured(measured_repo)
    done = snakemake(measured_repo, "report", "--forcerun", "measure")
    assert done.returncode == 0, done.stderr[-3000:]
    again = measured(measured_repo)
    run = json.loads((measured_repo / "data/runs/node-a/llamacpp--nospec/run.json").read_text())
    assert run["launches"] == 0  # every cell was cached: no server started
    server_metrics = lambda frame: sorted(frame.loc[frame["workload"] == "server", "metric"])
    assert server_metrics(again) == server_metrics(first) and "ready_s" in server_metrics(again)


def test_one_launch_at_a_time_per_node_while_nodes_run_in_parallel(double_repo):
    # each request takes about 0.8 s (4 chunks of 3 tokens), a launch several seconds: long enough for the two
    # nodes' launches to overlap, short enough not to spend CI's minutes waiting on the double. No probes: at 0.8 s
    # a request their set alone took most of the test's minute, and the launches' order needs none of it.
    for name in ("node-a", "node-b"):
        path = double_repo / f"configs/nodes/{name}.yaml"
        path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "probes": None}))
    env_slow = {**os.environ, "ENGINE_DOUBLE_INTERVAL_S": "0.2"}
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "report", "--config", "nodes=[node-a,node-b]"],
                          cwd=double_repo, capture_output=True, text=True, timeout=600, env=env_slow)
    assert done.returncode == 0, done.stderr[-3000:]
    spans = {}
    for run_json in (double_repo / "data/runs").glob("*/*/run.json"):
        run = json.loads(run_json.read_text())
        spans[(run["node"], run["launch"])] = (datetime.fromisoformat(run["started"]), datetime.fromisoformat(run["finished"]))

    def overlap(a, b):
        return spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]

    for name in ("node-a", "node-b"):
        assert not overlap((name, "llamacpp--nospec"), (name, "llamacpp--draft-n2"))
    across = [(a, b) for a in spans for b in spans if a[0] == "node-a" and b[0] == "node-b"]
    assert any(overlap(a, b) for a, b in across)


def test_a_deleted_run_folder_is_measured_again_and_its_old_rows_are_gone(measured_repo):
    first = measured(measured_repo)
    old_ref = set(first.loc[first["variant"] == "nospec", "ref"])
    subprocess.run(["rm", "-rf", str(measured_repo / "data/runs/node-a/llamacpp--nospec")], check=True)
    done = snakemake(measured_repo, "report")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "localrule measure:" in done.stderr and "llamacpp--nospec" in done.stderr
    assert (measured_repo / "data/runs/node-a/llamacpp--nospec/cells.parquet").exists()
    again = measured(measured_repo)
    new_ref = set(again.loc[again["variant"] == "nospec", "ref"])
    assert new_ref and not new_ref & old_ref  # the deleted launch's rows are not published; its new run's are
    # draft-n2's own rows stay; its agreement rows name the new no-spec run ("<draft run> vs <no-spec run>")
    own = lambda rows: set(rows.loc[(rows["variant"] == "draft-n2") & ~rows["ref"].str.contains(" vs "), "ref"])
    assert own(again) == own(first)
    report = (measured_repo / "reports/report.md").read_text()
    assert not any(ref in report for ref in old_ref)


def test_a_nodes_finished_launches_stay_in_the_results_whichever_stacks_a_later_run_selects(double_repo):
    """Two stacks on one node: measured together, then the other one alone; the first stack's rows stay
    (nothing re-measured) until its run folder is deleted."""
    (double_repo / "configs/stacks/llamacpp-twin.yaml").write_text((double_repo / "configs/stacks/llamacpp.yaml").read_text())
    path = double_repo / "configs/nodes/node-a.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["runs"] = [{**doc["runs"][0], "variants": ["nospec"]}, {**doc["runs"][0], "stack": "llamacpp-twin", "variants": ["nospec"]}]
    path.write_text(yaml.safe_dump(doc))

    def run(*args: str, stacks: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *args, "report", "--config",
                               "nodes=[node-a]", f"stacks={stacks}"], cwd=double_repo, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    run(stacks="all")
    refs = set(measured(double_repo)["ref"])  # <node>/<launch>@<start>
    assert {ref.split("@")[0] for ref in refs} == {"node-a/llamacpp--nospec", "node-a/llamacpp-twin--nospec"}
    twin_refs = {ref for ref in refs if ref.startswith("node-a/llamacpp-twin--nospec@")}
    assert jobs_of(run("-n", stacks="[llamacpp]").stdout, "measure") == []  # the finished launch is not re-measured
    run(stacks="[llamacpp]")
    assert set(measured(double_repo)["ref"]) == refs  # the twin's rows are kept though it was not selected
    subprocess.run(["rm", "-rf", str(double_repo / "data/runs/node-a/llamacpp-twin--nospec")], check=True)
    done = run(stacks="[llamacpp]")
    assert "localrule measure:" not in done.stderr  # the unselected launch is not measured again ...
    assert set(measured(double_repo)["ref"]) == refs - twin_refs  # ... and its rows are gone with its folder


def test_launch_replicates_run_in_interleaved_rounds_and_a_new_round_measures_only_itself(double_repo):
    """Process handling, on the engine double: `launches: 2` runs round 1 (both variants) before round 2,
    each replicate its own run folder and rows; raising it to 3 measures round 3 alone."""
    def runs() -> dict[str, tuple[datetime, int]]:
        out = {}
        for run_json in (double_repo / "data/runs/node-a").glob("*/run.json"):
            run = json.loads(run_json.read_text())
            out[run["launch"]] = (datetime.fromisoformat(run["started"]), run_json.stat().st_mtime_ns)
        return out

    done = snakemake(double_repo, "report", config=("launches=2",))
    assert done.returncode == 0, done.stderr[-3000:]
    first = runs()
    order = sorted(first, key=lambda name: first[name][0])
    assert sorted(order[:2]) == ["llamacpp--draft-n2", "llamacpp--nospec"]
    assert sorted(order[2:]) == ["llamacpp--draft-n2--r2", "llamacpp--nospec--r2"]
    rows = measured(double_repo)
    assert set(rows.loc[rows["workload"] == "code", "replicate"]) == {1, 2}

    done = snakemake(double_repo, "report", config=("launches=3",))
    assert done.returncode == 0, done.stderr[-3000:]
    again = runs()
    assert {name for name in again if name not in first} == {"llamacpp--draft-n2--r3", "llamacpp--nospec--r3"}
    assert all(again[name] == first[name] for name in first)  # rounds 1 and 2 untouched


def test_the_sequence_launches_a_later_round_only_as_its_look_asks_and_says_the_verdict_so_far(double_repo):
    """Process handling, on the engine double: with `decide.most_launches`, the checkpoint after each round from
    the first look writes the verdict so far (console, provisional report, rounds/round-k.json), and every later
    round launches exactly the (stack, variant) pairs the look before asked for; a rerun has nothing to do."""
    node_file = double_repo / "configs/nodes/node-a.yaml"
    node = yaml.safe_load(node_file.read_text())
    node["decide"] = {"most_launches": 4}
    node_file.write_text(yaml.safe_dump(node))
    done = snakemake(double_repo, "report", config=("launches=2",))
    assert done.returncode == 0, done.stderr[-3000:]
    looks = {int(p.stem.removeprefix("round-")): json.loads(p.read_text())
             for p in (double_repo / "data/runs/node-a/rounds").glob("round-*.json")}
    assert min(looks) == 2 and max(looks) <= 4  # the first look after the node's two rounds, the last at the budget's
    assert looks[2]["rule"]["most"] <= 4  # the horizon, fixed at the first look, never past most_launches
    for look, verdict in looks.items():
        launched = {p.name for p in (double_repo / "data/runs/node-a").glob(f"*--r{look + 1}")}
        assert launched == {f"{stack}--{variant}--r{look + 1}" for stack, variant in verdict["next"]}
        assert sum(verdict["counts"].values()) > 0 and verdict["why"]
        assert verdict["rule"]["most"] == looks[2]["rule"]["most"]  # every later look judges under that horizon
        for name in launched:  # a later round measures only the cells its look left open
            cells = json.loads((double_repo / "data/runs/node-a" / name / "launch.json").read_text())["cells"]
            assert {(c["workload"], c["concurrency"]) for c in cells} == {
                (workload, concurrency) for stack, workload, concurrency, _ in verdict["open_cells"] if name.startswith(stack)}
    assert "What to run on node-a: horizon: round" in done.stderr
    assert "What to run on node-a after round 2 (provisional)" in done.stderr
    # every variant of a round sent its no-spec's texts, request by request (results/pairing.py)
    rows = measured(double_repo)
    paired = rows[rows["metric"] == "paired_prompts_identical"]
    assert len(paired) and (paired["value"] == 1.0).all()
    assert (double_repo / "reports/provisional/node-a.md").read_text().startswith("# PROVISIONAL: the answer on node-a")
    again = snakemake(double_repo, "-n", "report", config=("launches=2",))
    assert again.returncode == 0 and "round_verdict" not in again.stdout  # the sequence continues, never restarts
