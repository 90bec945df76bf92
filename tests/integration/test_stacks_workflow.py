"""Snakemake's dry run plans the stacks a run selects (`--config stacks=...`) and gives collect the parts on
disk of launches not selected."""

import subprocess
import sys

import pytest
from helpers import copy_repo, planned


@pytest.mark.integration  # runs Snakemake
def test_the_workflow_plans_the_command_lines_selection(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "report", "--config",
                           "nodes=[rtx5090]", "stacks=[vllm-nvfp4-mtp]"], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert planned(done.stdout, "measure") == ["vllm-nvfp4-mtp--mtp-n2", "vllm-nvfp4-mtp--mtp-n3", "vllm-nvfp4-mtp--nospec"]
    wrong = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "report", "--config",
                            "nodes=[rtx5090]", "stacks=[vllm-cpu]"], cwd=repo, capture_output=True, text=True)
    assert wrong.returncode != 0
    assert ("config error: configs/config.yaml (or --config): stacks: 'vllm-cpu' is not a stack of "
            "configs/nodes/rtx5090.yaml; its stacks: vllm-nvfp4-mtp, sglang-eagle, sglang-nospec, llamacpp\n") in wrong.stderr


@pytest.mark.integration  # runs Snakemake
def test_collect_is_given_the_parts_on_disk_of_launches_not_selected(tmp_path):
    """A vLLM part measured under stacks=all goes to collect on a plain (llama.cpp-only) run; a part of
    another node does not (the integration test test_rerun.py measures the whole round trip)."""
    repo = copy_repo(tmp_path / "repo")
    for part in ("local-cpu/vllm-cpu--nospec", "rtx5090/llamacpp--nospec"):
        (repo / "data/runs" / part).mkdir(parents=True)
        (repo / "data/runs" / part / "cells.parquet").write_bytes(b"")
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "1", "report"], cwd=repo,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    command = next(line for line in done.stdout.splitlines() if " collect " in line)
    assert "data/runs/local-cpu/vllm-cpu--nospec/cells.parquet" in command and "rtx5090" not in command
    # the node's own parts reach collect once What to run's checkpoint after round 3 has planned the rest
    assert "round_verdict" in done.stdout
    assert planned(done.stdout, "measure") == sorted([f"llamacpp--{v}{r}" for v in ("nospec", "ngram-n8", "ngram-n16")
                                                      for r in ("", "--r2", "--r3")] + ["llamacpp--nospec--once"])
