"""A published run regenerated (issue 46): a node measured here, bundled, regenerated into a node file for "this
machine" under another name, run, and read back beside the bundle: every cell of the bundle has its counterpart in
the regenerated run, side by side in one results table. On the ENGINE DOUBLE (tests/support/engine_double.py): the
claim is about our bundle, regenerate and collect, not about llama-server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

pytestmark = pytest.mark.integration
CELL = ["stack", "variant", "workload", "concurrency", "metric", "replicate"]


def snakemake(repo: Path, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *args], cwd=repo, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def stackbench(repo: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "stackbench.cli", *args], cwd=repo, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_a_regenerated_node_reproduces_the_bundles_cells_side_by_side(ci_double_repo):
    repo = ci_double_repo
    snakemake(repo, "report")
    stackbench(repo, "bundle", "ci-cpu", "--owner", "alice", "--out-dir", "data/outgoing")
    tar = repo / "data/outgoing/ci-cpu.stackbench.tar"
    printed = stackbench(repo, "regenerate", str(tar), "--name", "ci-cpu-again")
    node_file = repo / "configs/nodes/ci-cpu-again.yaml"
    assert node_file.exists() and "snakemake" in printed
    unfilled = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "report", "--config",
                               "nodes=[ci-cpu-again]"], cwd=repo, capture_output=True, text=True, timeout=300)
    assert unfilled.returncode != 0 and "ci-cpu-again" in unfilled.stdout + unfilled.stderr  # a placeholder stops the plan
    # "This machine" is this one: the reader fills each placeholder with the model file here (same weights id).
    doc = yaml.safe_load(node_file.read_text())
    original = yaml.safe_load((repo / "configs/nodes/ci-cpu.yaml").read_text())
    for key, model in doc["models"].items():
        assert model["gguf"].startswith(f"<path to {key} on this machine")
        model["gguf"] = original["models"][key]["gguf"]
    node_file.write_text(yaml.safe_dump(doc))
    (repo / "data/bundles").mkdir(parents=True, exist_ok=True)
    (repo / "data/bundles/ci-cpu.stackbench.tar").write_bytes(tar.read_bytes())
    snakemake(repo, "report", "--config", "nodes=[ci-cpu-again]")

    results = pd.read_parquet(repo / "data/results.parquet")
    theirs = results[(results["source"] == "bundle:alice") & (results["metric"] != "bundle_manifest")]
    ours = results[(results["source"] == "measured") & (results["node"] == "ci-cpu-again")]
    assert len(theirs) and len(ours)
    key = lambda frame: set(map(tuple, frame[CELL].astype(str).drop_duplicates().to_numpy()))  # noqa: E731
    assert key(theirs) == key(ours)  # cell for cell
    decode = [f[(f["metric"] == "decode_tps") & (f["concurrency"] == 1)].groupby(["variant", "workload"])["value"].median()
              for f in (theirs, ours)]
    side = pd.concat(decode, axis=1, keys=["bundle", "regenerated"]).dropna()
    assert len(side) and (side["regenerated"] / side["bundle"]).between(0.5, 2.0).all(), side  # the double's pace, both
