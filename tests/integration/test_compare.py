"""`stackbench compare` on two real result sets: the same tiny llama.cpp config run twice through the
workflow, the second time with one engine flag changed (a q8_0 K cache). The compare pairs like rows
only, so the changed field keeps every measured row apart until it is the field allowed to vary."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from launch_helpers import LLAMACPP_READY, TEST_MODEL

from stackbench import analysis
from stackbench.results import store

NODE = {
    "description": "compare test: this CPU, one workload, one launch",
    "hardware": {"gpu": {"model": "none", "count": 0}, "cpu_threads": 2},
    "context_len": 1024,
    "concurrency": [1],
    "workloads": ["code"],
    "accuracy": None,
    "probes": None,  # what is compared is the code cell's rows; the probes would add a launch's worth of requests twice
    "models": {"smollm2-135m-q4-1": {"prepare": "smollm2-q4-1", "quant": "Q4_1"}},
    "runs": [{"stack": "llamacpp", "model": "smollm2-135m-q4-1", "variants": ["nospec"]}],
}


def measure_results(repo: Path, server_args: dict, keep_as: Path) -> Path:
    """Run the workflow to the results table with the node's engine flags set, and keep a copy."""
    node = dict(NODE, runs=[dict(NODE["runs"][0], server_args=server_args)])
    (repo / "configs/nodes/compare-cpu.yaml").write_text(yaml.safe_dump(node))
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "data/results.parquet"], cwd=repo,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    shutil.copy(repo / "data/results.parquet", keep_as)
    return keep_as


@pytest.fixture
def compare_repo(repo_copy, llamacpp_env) -> Path:
    os.symlink(LLAMACPP_READY.parents[1], repo_copy / ".envs")
    os.symlink(TEST_MODEL.parent, repo_copy / "data/models")
    config = yaml.safe_load((repo_copy / "configs/config.yaml").read_text())
    config.update(nodes=["compare-cpu"], measure={"repeats": 1, "warmup_requests": 1})
    (repo_copy / "configs/config.yaml").write_text(yaml.safe_dump(config))
    # Unsalted: a random salt changes the prompt's token count by one or two between runs, and
    # prompt_tokens is part of the basis, so salted runs would never pair.
    (repo_copy / "configs/workloads/code.yaml").write_text(yaml.safe_dump(
        {"prompts": ["Write a Python hello world."], "output_tokens": 16, "salt": False}))
    return repo_copy


def cli_compare(a: Path, b: Path, out: Path, *vary: str) -> str:
    done = subprocess.run([sys.executable, "-m", "stackbench.cli", "compare", str(a), str(b), "--out", str(out), *vary],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return out.read_text()


@pytest.mark.integration
def test_compare_pairs_like_rows_only_across_two_real_runs(compare_repo, tmp_path):
    a = measure_results(compare_repo, {}, tmp_path / "a.parquet")
    b = measure_results(compare_repo, {"cache_type_k": "q8_0"}, tmp_path / "b.parquet")
    runs = store.read_results(a), store.read_results(b)
    measured = [r[(r["source"] == "measured") & (r["status"] == "ok")] for r in runs]
    assert set(measured[0]["kv_dtype"]) == {"f16"} and set(measured[1]["kv_dtype"]) == {"K q8_0 / V f16"}

    # Default: only the engine version may differ. The K cache type differs, so no measured row pairs,
    # and each one says that kv_dtype kept it apart; the seed figures, identical in both, do pair.
    paired, unpaired = analysis.compare(*runs)
    assert not paired["node"].eq("compare-cpu").any()
    lonely = unpaired[unpaired["node"] == "compare-cpu"]
    assert len(lonely) == len(measured[0]) + len(measured[1])
    assert lonely["basis that differs"].str.contains("kv_dtype").all()
    assert "kv_dtype" in cli_compare(a, b, tmp_path / "by-version.md")

    # Allowing the K cache type to vary pairs every measured cell: B/A for the changed flag.
    paired, _ = analysis.compare(*runs, vary="kv_dtype")
    ours = paired[paired["node"] == "compare-cpu"]
    decode = ours[ours["metric"] == "decode_tps"]
    assert len(decode) == 1 and (decode["B/A"] > 0).all()
    assert set(ours["metric"]) == set(measured[0]["metric"]) & set(measured[1]["metric"])
    text = cli_compare(a, b, tmp_path / "by-kv.md", "--vary", "kv_dtype")
    assert "kv_dtype A" in text and "K q8_0 / V f16" in text
