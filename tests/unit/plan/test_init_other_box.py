"""A node file an owner writes for a box that is not this one (issue 52 item 7): `stackbench init-node --gpu
"RTX 4090" --count 2` from the GPU model's specifications, never this machine's; each stack's variants and flag
keys listed by `stackbench variants`; NVFP4 on a GPU before Blackwell warned about, naming the GPU. Issue 60: a
GPU node gets a GPU-sized experiment (NVLink where the part implies it, the board's power range, long judged replies
with thinking off, a ladder to its context, rounds that decide), --list-gpus and near misses name the known GPUs,
and a GPU node judged on short replies is warned about."""

import pytest
import yaml
from paths import ROOT
from test_nodes import fill_in_model_paths

from stackbench import cli
from stackbench.config import load_file
from stackbench.engines import adapter_for
from stackbench.host import boards
from stackbench.plan import expand
from stackbench.provision import nodeinit


def test_init_node_for_two_4090s_writes_that_box_not_this_one(repo_copy, monkeypatch):
    monkeypatch.chdir(repo_copy)
    assert cli.main(["init-node", "my-4090s", "--gpu", "RTX 4090", "--count", "2"]) == 0
    path = repo_copy / "configs/nodes/my-4090s.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc["hardware"]["gpu"] == {"model": "NVIDIA GeForce RTX 4090", "count": 2, "memory_gib": 24,
                                     "bandwidth_gbs": 1008, "compute_capability": "8.9", "power_limit_w": [150, 600]}
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


H100_SXM = "NVIDIA H100 80GB HBM3"


def test_init_node_for_four_h100s_writes_a_gpu_sized_experiment_that_decides(repo_copy, monkeypatch, capsys):
    monkeypatch.chdir(repo_copy)
    assert cli.main(["init-node", "h100x4", "--gpu", H100_SXM, "--count", "4"]) == 0
    path = repo_copy / "configs/nodes/h100x4.yaml"
    doc = load_file(path, "node")  # validates against the node schema, defaults filled
    assert doc["hardware"]["interconnect"] == "nvlink"  # the SXM part: NVLink on its baseboard
    assert doc["hardware"]["gpu"]["power_limit_w"] == [200, 700] and doc["power_caps_w"] == [390, 470, 540, 620]
    assert doc["concurrency"] == [1, 8, 32] and doc["launches"] >= 2 and doc["decide"]["most_launches"] > doc["launches"]
    # no budget before the rehearsal prices the rounds (issue 67), and a comment saying how to set it from it
    assert doc["decide"]["budget_minutes"] is None and "set it\n# from the report's" in path.read_text()
    assert doc["accuracy"] == "accuracy-gpu"
    fill_in_model_paths(path, {"<path to the model's GGUF file>": "/models/m.gguf",
                               "<path to the model's Hugging Face folder>": "/models/m-hf"})
    _, [node] = expand.load_plan(repo_copy, {"nodes": ["h100x4"]})
    workloads = {w.name: w for w in node.workloads}
    judged = [w for w in workloads.values() if expand.judged_workload(w)]
    assert judged and all(w.output_tokens >= 512 and w.thinking is False for w in judged)
    assert workloads["accuracy-gpu"].thinking is False  # the accuracy set's thinking stated too, the same on every stack
    top = max(p for w in workloads.values() for p in w.ladder)
    assert doc["context_len"] - 8192 < top + workloads["context-ladder"].output_tokens <= doc["context_len"]
    parsers = {l.stack_config: l.server_args.get(adapter_for(l.engine).reasoning_parser_arg)
               for l in node.launches if adapter_for(l.engine).reasoning_parser_arg}
    assert set(parsers) == {"sglang-nospec", "sglang-eagle", "vllm-nvfp4-mtp"} and set(parsers.values()) == {"qwen3"}
    assert expand.short_reply_warnings(node) == []
    assert cli.main(["commands", "--node", "h100x4"]) == 0
    err = capsys.readouterr().err
    assert "3 round(s) first, then up to 5 more" in err and "decides nothing" not in err and "warning" not in err


def test_list_gpus_names_every_known_model_with_memory_and_power_range(capsys):
    assert cli.main(["init-node", "--list-gpus"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [boards.describe(model) for model in boards.SPECS]
    assert "NVIDIA H100 80GB HBM3: 80 GiB, 3350 GB/s, compute capability 9.0, power limit 200-700 W, stock 700 W, " \
           "nvlink" in out


def test_docs_nodes_lists_the_gpus_init_node_knows():
    page = (ROOT / "docs/nodes.md").read_text()
    assert all(f"- {boards.describe(model)}\n" in page for model in boards.SPECS)


def test_a_near_miss_gpu_name_is_refused_naming_the_candidates(repo_copy, monkeypatch, capsys):
    monkeypatch.chdir(repo_copy)
    assert cli.main(["init-node", "x", "--gpu", "H100 SXM"]) == 2
    err = capsys.readouterr().err
    assert "--gpu 'H100 SXM' matches none of the GPUs known here; candidates: NVIDIA H100 80GB HBM3: 80 GiB" in err
    assert "RTX 4090" not in err and "--list-gpus" in err
    with pytest.raises(ValueError, match="matches several of the GPUs known here; candidates: NVIDIA GeForce RTX 5090"):
        boards.resolve("RTX")


def test_a_gpu_node_judged_on_short_replies_is_warned_naming_node_workload_and_length(repo_copy, monkeypatch, capsys):
    monkeypatch.chdir(repo_copy)
    assert cli.main(["commands", "--node", "2x4090"]) == 0
    assert "warning: node 2x4090: workload code is judged on 48-token replies, under the 256" in capsys.readouterr().err
    _, [cpu] = expand.load_plan(repo_copy, {"nodes": ["local-cpu"]})
    assert expand.short_reply_warnings(cpu) == []  # a CPU node's short replies are its budget's choice
