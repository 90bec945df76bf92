"""Snakemake's dry run and linter over the node files: GPU nodes plan one launch per distinct server
configuration, a copied node plans with no other change, a broken copy fails naming file and field."""

import subprocess
import sys

import pytest
import yaml
from helpers import planned

from stackbench.plan import expand


def dry_run(repo, nodes):
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "report", "--config", f"nodes=[{nodes}]"],
                          cwd=repo, capture_output=True, text=True)
    return done


def measure_jobs(stdout: str) -> list[str]:
    return planned(stdout, "measure")


@pytest.mark.integration  # runs Snakemake
def test_gpu_nodes_plan_all_four_stacks_one_launch_each(repo_copy):
    done = dry_run(repo_copy, "rtx5090,2x3090-nvlink")
    assert done.returncode == 0, done.stderr[-2000:]
    jobs = measure_jobs(done.stdout)
    assert jobs == sorted(["vllm-nvfp4-mtp--nospec", "vllm-nvfp4-mtp--mtp-n2", "vllm-nvfp4-mtp--mtp-n3",
                           "sglang-eagle--eagle-3-1-4", "sglang-nospec--nospec", "llamacpp--nospec", "llamacpp--mtp-n2",
                           "llamacpp--mtp-n3", "llamacpp--nospec", "llamacpp--mtp-n2", "llamacpp--mtp-n3", "sglang-nospec--nospec",
                           "sglang-eagle--eagle-2-1-3", "sglang-eagle--eagle-3-1-4", "sglang-eagle--eagle-4-1-5",
                           "sglang-eagle--eagle-5-1-6"])
    # Each measure job asks what its node's slurm: block states, and takes its node's one launch slot.
    resources = [line for line in done.stdout.splitlines() if "launch_slot_rtx5090=1" in line]
    assert len(resources) == 8
    assert all("gpu=1" in line and "cpus_per_task=16" in line and "mem_mb=65536" in line for line in resources)
    _, nodes = expand.load_plan(repo_copy, {"nodes": ["rtx5090", "2x3090-nvlink"]})
    for node in nodes:
        names = [l.name for l in node.launches]
        assert len(names) == len(set(names))  # one launch per distinct server configuration
    assert {l.engine for n in nodes for l in n.launches} == {"llamacpp", "sglang", "vllm"}
    assert {l.spec_method for n in nodes for l in n.launches} == {"none", "mtp"}


@pytest.mark.integration  # runs Snakemake
def test_a_copied_node_with_other_hardware_plans_with_no_other_change(repo_copy):
    doc = yaml.safe_load((repo_copy / "configs/nodes/rtx5090.yaml").read_text())
    # a board no table knows: the node file states every fact the plan reads (issue 67), and nothing else changes
    doc["hardware"]["gpu"].update(model="NVIDIA RTX PRO 6000", memory_gib=96, bandwidth_gbs=1792, board_power_w=600,
                                  power_limit_w=[150, 600], compute_capability="12.0")
    (repo_copy / "configs/nodes/pro6000.yaml").write_text(yaml.safe_dump(doc))
    done = dry_run(repo_copy, "pro6000")
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(measure_jobs(done.stdout)) == 8
    assert "node=pro6000" in done.stdout


@pytest.mark.integration  # runs Snakemake
def test_a_broken_copy_fails_with_file_and_field(repo_copy):
    doc = yaml.safe_load((repo_copy / "configs/nodes/rtx5090.yaml").read_text())
    doc["runs"][0]["launch"]["mode"] = "kubernetes"
    (repo_copy / "configs/nodes/broken.yaml").write_text(yaml.safe_dump(doc))
    done = dry_run(repo_copy, "broken")
    assert done.returncode != 0
    assert "config error: configs/nodes/broken.yaml: runs[0].launch.mode: expected one of native, image, external, got 'kubernetes'" in done.stderr


@pytest.mark.integration  # runs Snakemake
def test_snakemake_lint_is_clean(repo_copy):
    done = subprocess.run([sys.executable, "-m", "snakemake", "--lint"], cwd=repo_copy, capture_output=True, text=True)
    output = done.stdout + done.stderr
    findings = [line.strip() for line in output.splitlines() if line.strip().startswith("* ")]
    # Every rule was linted (the linter ran over the whole workflow, not stopped at an error) ...
    assert output.count("Lints for rule ") == len(findings) >= 9
    # ... and its only finding is the conda suggestion: no conda channel is reachable from these machines,
    # environments are made from envs/ by rules.
    assert {f for f in findings} == {"* Specify a conda environment or container for each rule.:"}
