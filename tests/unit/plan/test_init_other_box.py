"""A node file an owner writes for a box that is not this one (issue 52 item 7): `stackbench init-node --gpu
"RTX 4090" --count 2` from the GPU model's specifications, never this machine's; each stack's variants and flag
keys listed by `stackbench variants`; NVFP4 on a GPU before Blackwell warned about, naming the GPU."""

import pytest
import yaml
from test_nodes import fill_in_model_paths

from stackbench import cli
from stackbench.host import boards
from stackbench.plan import expand
from stackbench.provision import nodeinit


def test_init_node_for_two_4090s_writes_that_box_not_this_one(repo_copy, monkeypatch):
    monkeypatch.chdir(repo_copy)
    assert cli.main(["init-node", "my-4090s", "--gpu", "RTX 4090", "--count", "2"]) == 0
    path = repo_copy / "configs/nodes/my-4090s.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc["hardware"]["gpu"] == {"model": "NVIDIA GeForce RTX 4090", "count": 2, "memory_gib": 24,
                                     "bandwidth_gbs": 1008, "compute_capability": "8.9"}
    assert doc["os"] == "auto" and "cpu_threads" not in doc["hardware"]  # nothing of the machine it was written on
    assert doc["power_caps_w"] == [250, 300, 350, 400]  # below the stock 450 W, which every sweep runs first
    assert "init-node my-4090s --gpu 'RTX 4090' --count 2" in path.read_text()
    fill_in_model_paths(path, {"<path to the model's GGUF file>": "/models/m.gguf",
                               "<path to the model's Hugging Face folder>": "/models/m-hf"})
    _, nodes = expand.load_plan(repo_copy, {"nodes": ["my-4090s"]})
    assert {l.tp for l in nodes[0].launches if l.engine != "llamacpp"} == {2}


def test_an_unknown_gpu_or_a_count_without_one_is_refused_in_one_line(repo_copy, monkeypatch, capsys):
    monkeypatch.chdir(repo_copy)
    assert cli.main(["init-node", "x", "--gpu", "RTX 9999"]) == 2
    assert "--gpu 'RTX 9999' matches none of the GPUs known here" in capsys.readouterr().err
    assert cli.main(["init-node", "y", "--count", "2"]) == 2
    assert not (repo_copy / "configs/nodes/x.yaml").exists()


def test_variants_lists_every_stacks_variant_names_and_keys(capsys):
    assert cli.main(["variants"]) == 0
    out = capsys.readouterr().out
    assert "sglang-eagle (SGLang): variants eagle-2-1-3, eagle-3-1-4, eagle-4-1-5, eagle-5-1-6" in out
    assert "vllm-nvfp4-mtp (vLLM): variants nospec, mtp-n1, mtp-n2, mtp-n3, mtp-n4" in out
    assert "tensor_parallel_size (--tensor-parallel-size)" in out and "tp_size (--tp-size)" in out


@pytest.mark.parametrize("gpu,capability,warned", [("NVIDIA GeForce RTX 4090", "8.9", True),
                                                   ("NVIDIA GeForce RTX 5090", "12.0", False)])
def test_nvfp4_before_blackwell_is_warned_naming_the_gpu(gpu, capability, warned):
    line = boards.fp4_warning(gpu, capability, "NVFP4 (compressed-tensors)")
    assert (line is not None) == warned
    if warned:
        assert line.startswith("NVFP4 (compressed-tensors) on the NVIDIA GeForce RTX 4090 (sm_89): no FP4 tensor cores")
    assert boards.fp4_warning(gpu, capability, "INT4") is None


def test_commands_warns_about_nvfp4_on_a_4090(repo_copy, monkeypatch, capsys):
    path = repo_copy / "configs/nodes/2x4090.yaml"
    path.write_text(path.read_text().replace("quant: INT4", "quant: NVFP4 (compressed-tensors)"))
    monkeypatch.chdir(repo_copy)
    assert cli.main(["commands", "--node", "2x4090"]) == 0
    err = capsys.readouterr().err
    assert "warning: vllm-nvfp4-mtp--mtp-n2: NVFP4 (compressed-tensors) on the NVIDIA GeForce RTX 4090 (sm_89)" in err
    # one launch a variant: the plan says it decides nothing, and the cheapest plan that would at each assumed noise
    assert "one launch per variant decides nothing" in err
    assert "CV 5%: no look, short of the 10% margin; the cheapest plan that resolves it: launches: 4" in err


def test_a_starter_sweep_stays_inside_the_boards_settable_range():
    for model in boards.SPECS:
        low, high = boards.limits_w(model)
        assert all((low or 0) <= cap < boards.BOARD_POWER_W[model] for cap in boards.starter_caps_w(model))
    assert nodeinit.describe_gpus("RTX 5090", 1)["power_caps_w"] == [450, 510]  # its lowest limit is 400 W
