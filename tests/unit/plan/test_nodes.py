"""Adding a node is adding one file: init-node writes it from the machine's GPUs. Snakemake's dry run and
linter over the node files are tests/integration/test_nodes_workflow.py."""

import pytest
import yaml

from stackbench.plan import expand


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
    # and the board's own power readings (NVML's default and settable limits; issue 67: any board is its node file)
    assert doc["hardware"]["gpu"] == {"model": "NVIDIA GeForce RTX 3090", "count": 2, "memory_gib": 24.0, "bandwidth_gbs": 936,
                                     "compute_capability": "8.6", "board_power_w": 350, "power_limit_w": [100, 350]}
    assert doc["power_caps_w"] == [200, 250, 300, 350]
    fill_in_model_paths(path, {"<path to the model's GGUF file>": "/models/m.gguf",
                               "<path to the model's Hugging Face folder>": "/models/m-hf"})
    _, nodes = expand.load_plan(repo_copy, {"nodes": ["gpu-box"]})  # the slot check passes: concurrency fits every run
    names = [l.name for l in nodes[0].launches]
    # Round 1's configurations; launches: 3 adds the rounds after it and the one-off sets' own launches
    first_round = [l.name for l in nodes[0].launches if l.replicate == 1 and not l.once]
    assert first_round == ["llamacpp--nospec", "sglang-nospec--nospec", "sglang-eagle--eagle-3-1-4", "vllm-nvfp4-mtp--nospec",
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
