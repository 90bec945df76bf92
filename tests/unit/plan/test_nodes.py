"""Adding a node is adding one file; GPU node configs plan one launch per distinct server configuration.
The tests that run Snakemake (its dry run, its linter) are in the integration lane."""

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
    doc["hardware"]["gpu"].update(model="NVIDIA RTX PRO 6000", memory_gib=96, bandwidth_gbs=1792)
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


def fill_in_model_paths(path, paths: dict[str, str]) -> None:
    """What a person does with init-node's placeholders: replace each with the model's path."""
    text = path.read_text()
    for placeholder, real in paths.items():
        text = text.replace(placeholder, real)
    path.write_text(text)


def test_init_node_writes_a_config_that_plans_once_its_model_path_is_set(repo_copy):
    from stackbench.config import ConfigError
    from stackbench.provision import nodeinit
    from stackbench.rehearsal.simgpu import NvmlDouble

    # A machine without GPUs, on any host: the NVML test double sees none.
    path = nodeinit.write_node("this-box", repo_copy, nvml=NvmlDouble(count=0))
    assert "stackbench init-node this-box" in path.read_text()
    with pytest.raises(ConfigError, match=r"this-box.yaml: models.my-model-gguf.gguf: \"<path to the model's GGUF file>\" "
                                          r"is a placeholder; set the model's path"):
        expand.load_plan(repo_copy, {"nodes": ["this-box"]})
    fill_in_model_paths(path, {"<path to the model's GGUF file>": "/models/m.gguf"})
    _, nodes = expand.load_plan(repo_copy, {"nodes": ["this-box"]})
    assert nodes[0].gpu_count == 0 and [l.name for l in nodes[0].launches] == ["llamacpp--nospec"]


def test_init_node_on_gpus_writes_the_posts_four_way_comparison(repo_copy, monkeypatch, capsys):
    from stackbench import cli
    from stackbench.provision import nodeinit
    from stackbench.rehearsal.simgpu import NvmlDouble

    path = nodeinit.write_node("gpu-box", repo_copy, nvml=NvmlDouble(count=2))
    doc = yaml.safe_load(path.read_text())
    # 384-bit bus x 9751 MHz x 2 / 8 / 1000: the RTX 3090's 936 GB/s
    assert doc["hardware"]["gpu"] == {"model": "NVIDIA GeForce RTX 3090", "count": 2, "memory_gib": 24.0, "bandwidth_gbs": 936,
                                     "compute_capability": "8.6"}
    assert doc["power_caps_w"] == [200, 250, 300, 350]
    fill_in_model_paths(path, {"<path to the model's GGUF file>": "/models/m.gguf",
                               "<path to the model's Hugging Face folder>": "/models/m-hf"})
    _, nodes = expand.load_plan(repo_copy, {"nodes": ["gpu-box"]})  # the slot check passes: concurrency fits every run
    names = [l.name for l in nodes[0].launches]
    assert names == ["llamacpp--nospec", "sglang-nospec--nospec", "sglang-eagle--eagle-3-1-4", "vllm-nvfp4-mtp--nospec",
                     "vllm-nvfp4-mtp--mtp-n2", "vllm-nvfp4-mtp--mtp-n3"]
    assert {l.tp for l in nodes[0].launches if l.engine != "llamacpp"} == {2}
    # Each run is introduced by a comment naming the post it follows: the text before run i holds run i's.
    chunks = path.read_text().split("runs:\n", 1)[1].split("\n  - stack:")
    comments = [" ".join(line for line in chunk.splitlines() if line.startswith("  #")) for chunk in chunks[:-1]]
    assert len(comments) == 4 and all("Seed 00" in comment for comment in comments)
    monkeypatch.chdir(repo_copy)
    assert cli.main(["commands", "--node", "gpu-box"]) == 0
    assert [line.split(" ", 1)[0] for line in capsys.readouterr().out.splitlines()] == names


def test_init_node_leaves_bandwidth_null_where_nvml_does_not_report_it(repo_copy):
    from stackbench.provision import nodeinit
    from stackbench.rehearsal.simgpu import NvmlDouble

    path = nodeinit.write_node("old-driver", repo_copy, nvml=NvmlDouble(count=1, bus_width_supported=False))
    assert yaml.safe_load(path.read_text())["hardware"]["gpu"]["bandwidth_gbs"] is None


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
