"""Adding a node is adding one file; GPU node configs plan one launch per distinct server configuration."""

import subprocess
import sys

import yaml

from stackbench import plan


def dry_run(repo, nodes):
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "report", "--config", f"nodes=[{nodes}]"],
                          cwd=repo, capture_output=True, text=True)
    return done


def planned(stdout: str, rule: str) -> list[str]:
    """The launch of every job of `rule` in a dry run's output."""
    jobs, current = [], None
    for line in stdout.splitlines():
        if line.startswith(("rule ", "localrule ")):
            current = line.split()[1].rstrip(":")
        elif current == rule and "wildcards: node=" in line:
            jobs.append(line.split("launch=")[1].strip())
    return sorted(jobs)


def measure_jobs(stdout: str) -> list[str]:
    return planned(stdout, "measure")


def test_gpu_nodes_plan_all_four_stacks_one_launch_each(repo_copy):
    done = dry_run(repo_copy, "rtx5090,2x3090-nvlink")
    assert done.returncode == 0, done.stderr[-2000:]
    jobs = measure_jobs(done.stdout)
    assert jobs == sorted(["vllm-nvfp4-mtp--nospec", "vllm-nvfp4-mtp--mtp-n2", "vllm-nvfp4-mtp--mtp-n3",
                           "sglang-eagle--eagle-3-1-4", "sglang-nospec--nospec", "llamacpp--nospec",
                           "llamacpp--nospec", "llamacpp--mtp-n2", "llamacpp--mtp-n3", "sglang-nospec--nospec",
                           "sglang-eagle--eagle-2-1-3", "sglang-eagle--eagle-3-1-4", "sglang-eagle--eagle-4-1-5",
                           "sglang-eagle--eagle-5-1-6"])
    # Each measure job asks what its node's slurm: block states, and takes its node's one launch slot.
    resources = [line for line in done.stdout.splitlines() if "launch_slot_rtx5090=1" in line]
    assert len(resources) == 6
    assert all("gpu=1" in line and "cpus_per_task=16" in line and "mem_mb=65536" in line for line in resources)
    _, nodes = plan.load_plan(repo_copy, {"nodes": ["rtx5090", "2x3090-nvlink"]})
    for node in nodes:
        names = [l.name for l in node.launches]
        assert len(names) == len(set(names))  # one launch per distinct server configuration
    assert {l.engine for n in nodes for l in n.launches} == {"llamacpp", "sglang", "vllm"}
    assert {l.spec_method for n in nodes for l in n.launches} == {"none", "mtp"}


def test_a_copied_node_with_other_hardware_plans_with_no_other_change(repo_copy):
    doc = yaml.safe_load((repo_copy / "configs/nodes/rtx5090.yaml").read_text())
    doc["hardware"]["gpu"].update(model="NVIDIA RTX PRO 6000", memory_gib=96, bandwidth_gbs=1792)
    (repo_copy / "configs/nodes/pro6000.yaml").write_text(yaml.safe_dump(doc))
    done = dry_run(repo_copy, "pro6000")
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(measure_jobs(done.stdout)) == 6
    assert "node=pro6000" in done.stdout


def test_a_broken_copy_fails_with_file_and_field(repo_copy):
    doc = yaml.safe_load((repo_copy / "configs/nodes/rtx5090.yaml").read_text())
    doc["runs"][0]["launch"]["mode"] = "kubernetes"
    (repo_copy / "configs/nodes/broken.yaml").write_text(yaml.safe_dump(doc))
    done = dry_run(repo_copy, "broken")
    assert done.returncode != 0
    assert "config error: configs/nodes/broken.yaml: runs[0].launch.mode: expected one of native, image, external, got 'kubernetes'" in done.stderr


def test_init_node_writes_a_valid_config_from_this_machine(repo_copy):
    from nvml_double import FakeNvml
    from stackbench.provision import nodeinit

    # A machine without GPUs, on any host: the NVML test double sees none.
    path = nodeinit.write_node("this-box", repo_copy, nvml=FakeNvml(count=0))
    _, nodes = plan.load_plan(repo_copy, {"nodes": ["this-box"]})
    assert nodes[0].gpu_count == 0 and nodes[0].launches[0].name == "llamacpp--nospec"
    assert "stackbench init-node this-box" in path.read_text()


def test_init_node_reads_gpus_through_nvml(repo_copy):
    from nvml_double import FakeNvml
    from stackbench.provision import nodeinit

    nodeinit.write_node("gpu-box", repo_copy, nvml=FakeNvml(count=2))
    doc = yaml.safe_load((repo_copy / "configs/nodes/gpu-box.yaml").read_text())
    assert doc["hardware"]["gpu"] == {"model": "NVIDIA GeForce RTX 3090", "count": 2, "memory_gib": 24.0, "bandwidth_gbs": None,
                                     "compute_capability": "8.6"}
    assert doc["power_caps_w"] == [200, 250, 300, 350]
    plan.load_plan(repo_copy, {"nodes": ["gpu-box"]})  # valid as written


def test_snakemake_lint_is_clean(repo_copy):
    done = subprocess.run([sys.executable, "-m", "snakemake", "--lint"], cwd=repo_copy, capture_output=True, text=True)
    output = done.stdout + done.stderr
    findings = [line.strip() for line in output.splitlines() if line.strip().startswith("* ")]
    # Every rule was linted (the linter ran over the whole workflow, not stopped at an error) ...
    assert output.count("Lints for rule ") == len(findings) >= 9
    # ... and its only finding is the conda suggestion: no conda channel is reachable from these machines,
    # environments are made from envs/ by rules.
    assert {f for f in findings} == {"* Specify a conda environment or container for each rule.:"}
