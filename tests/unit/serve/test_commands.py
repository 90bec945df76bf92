"""`stackbench commands`: every launch's server command line, as its measure job would run it, printed on
a machine without GPUs, model files or built engine environments; and the plan features the seed
nodes' commands rely on (a speculative run's draft model, a run's own context)."""

import json
import shlex
import shutil
from pathlib import Path

import pytest
import yaml
from paths import ROOT

from stackbench import cli
from stackbench.config import ConfigError
from stackbench.config.model import Launch, Node
from stackbench.plan import expand, launchspec

NODES = sorted(p.stem for p in (ROOT / "configs/nodes").glob("*.yaml"))


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A copy of the configs and schemas as the working directory: no engine environment is built there."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def commands(capsys, *args: str) -> dict[str, list[str]]:
    """launch name -> its command line, split back into arguments."""
    assert cli.main(["commands", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    return {name: shlex.split(command) for name, command in (line.split(" ", 1) for line in lines)}


def flags(argv: list[str]) -> dict[str, str | None]:
    """--flag -> its value (None for a bare flag)."""
    out = {}
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[arg] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def test_rtx5090_runs_seed_000s_sglang_and_seed_004s_vllm_on_one_box(repo, capsys):
    printed = commands(capsys, "--node", "rtx5090")
    eagle, nospec = flags(printed["sglang-eagle--eagle-3-1-4"]), flags(printed["sglang-nospec--nospec"])
    seed_000 = {"--context-length": "131072", "--max-running-requests": "2", "--mem-fraction-static": "0.92",
                "--kv-cache-dtype": "fp8_e4m3", "--page-size": "1", "--max-mamba-cache-size": "16",
                "--mamba-ssm-dtype": "bfloat16", "--enable-hierarchical-cache": None, "--hicache-size": "12",
                "--hicache-write-policy": "write_through", "--language-only": None}
    for run in (eagle, nospec):  # the same command with and without speculation
        assert seed_000.items() <= run.items()
        assert "--chunked-prefill-size" not in run  # the post leaves the engine's default
    assert {k: eagle[k] for k in eagle if k.startswith("--speculative")} == {
        "--speculative-algorithm": "EAGLE", "--speculative-draft-model-path": "/models/RedHatAI-Qwen3.8-27B-INT4",
        "--speculative-num-steps": "3", "--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "4"}
    assert not any(k.startswith("--speculative") for k in nospec)
    assert printed["sglang-eagle--eagle-3-1-4"][:3] == ["<sglang env server>", "-m", "sglang.launch_server"]

    vllm = printed["vllm-nvfp4-mtp--mtp-n2"]
    model = "/models/lyf-Qwen3.8-27B-Heretic-ARA-NVFP4-MTP-VL"
    assert vllm[:2] == ["docker", "run"] and vllm[vllm.index("serve") + 1] == model  # positional, not --model
    assert f"{model}:{model}:ro" in vllm  # the (absent) model folder is mounted as itself
    assert {"--max-model-len": "65536", "--max-num-seqs": "4", "--max-num-batched-tokens": "8192",
            "--gpu-memory-utilization": "0.95", "--kv-cache-dtype": "fp8", "--port": "<port>"}.items() <= flags(vllm).items()
    assert json.loads(flags(vllm)["--speculative-config"]) == {"method": "mtp", "num_speculative_tokens": 2}
    assert "--speculative-config" not in printed["vllm-nvfp4-mtp--nospec"]
    llamacpp = flags(printed["llamacpp--nospec"])
    assert llamacpp["--ctx-size"] == "131072" and "--kv-unified" in llamacpp and llamacpp["--parallel"] == "4"


def test_tp2_dflash_gets_its_draft_model_and_eight_draft_tokens(repo, capsys):
    printed = commands(capsys, "--node", "4xa6000-tp2", "--launch", "sglang-dflash--dflash-n8")
    assert list(printed) == ["sglang-dflash--dflash-n8"]
    dflash = flags(printed["sglang-dflash--dflash-n8"])
    assert dflash["--speculative-algorithm"] == "DFLASH"
    assert dflash["--speculative-draft-model-path"] == "/draft/Qwen3.8-27B-DFlash2"
    assert dflash["--speculative-num-draft-tokens"] == "8"


@pytest.mark.parametrize("node", NODES)
def test_every_node_renders_one_command_per_launch(repo, capsys, node):
    printed = commands(capsys, "--node", node)
    cfg = expand.load_run_config(repo, {"stacks": "all"})  # a named node's every launch, whatever its default_stacks
    assert list(printed) == [l.name for l in expand.load_node(node, cfg, repo).launches]
    for argv in printed.values():
        assert argv[0] == "external" or argv[argv.index("--port") + 1] == "<port>"


def test_an_unknown_launch_is_one_line_naming_the_nodes_launches(repo, capsys):
    assert cli.main(["commands", "--node", "local-cpu", "--launch", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("config error: configs/nodes/local-cpu.yaml: no launch 'nope'; its launches: "
                          "llamacpp--nospec, llamacpp--ngram-n8, llamacpp--ngram-n16, "
                          "vllm-cpu--nospec, vllm-cpu--ngram-n3, sglang-cpu--nospec, ")  # round 1, then rounds 2 and 3
    assert len(err.splitlines()) == 1 and err.count("--r3") == 6


def test_an_external_launch_prints_its_url(repo, capsys):
    node = repo / "configs/nodes/local-cpu.yaml"
    doc = yaml.safe_load(node.read_text())
    doc["runs"][0]["launch"] = {"mode": "external", "url": "http://10.0.0.5:8080"}
    node.write_text(yaml.safe_dump(doc))
    assert commands(capsys, "--node", "local-cpu", "--launch", "llamacpp--nospec") == {
        "llamacpp--nospec": ["external", "http://10.0.0.5:8080"]}


def test_a_built_environment_names_its_own_server(repo, capsys):
    ready = repo / ".envs/llamacpp/ready.json"
    ready.parent.mkdir(parents=True)
    ready.write_text(json.dumps({"server": "/opt/llama/bin/llama-server", "version": "b11434-0c1f39a3"}))
    printed = commands(capsys, "--node", "local-cpu", "--launch", "llamacpp--nospec")
    assert printed["llamacpp--nospec"][0] == "/opt/llama/bin/llama-server"


# -- the draft model of a speculative run ------------------------------------------------------------
def edit_run(repo: Path, node: str, index: int, **changes) -> None:
    path = repo / f"configs/nodes/{node}.yaml"
    doc = yaml.safe_load(path.read_text())
    run = doc["runs"][index]
    run.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del run[key]
    path.write_text(yaml.safe_dump(doc))


def launch_named(repo: Path, node: str, name: str) -> tuple[dict, Node, Launch]:
    cfg = expand.load_run_config(repo, {"nodes": [node]})
    loaded = expand.load_node(node, cfg, repo)
    return cfg, loaded, next(l for l in loaded.launches if l.name == name)


def test_dflash_without_a_draft_model_is_refused_at_plan_time(repo):
    edit_run(repo, "4xa6000-tp2", 1, draft_model=None)
    with pytest.raises(ConfigError, match=r"4xa6000-tp2.yaml: runs\[1\].draft_model: variant 'dflash-n8' speculates "
                                          r"with a draft model \(dflash\); name one"):
        expand.load_plan(repo, {"nodes": ["4xa6000-tp2"]})


def test_the_draft_model_is_in_the_launch_fingerprint_and_its_models(repo):
    cfg, node, launch = launch_named(repo, "4xa6000-tp2", "sglang-dflash--dflash-n8")
    before = launchspec.build(cfg, node, launch)
    assert set(before.models) == {"qwen38-fp8", "dflash2-draft"}
    path = repo / "configs/nodes/4xa6000-tp2.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["models"]["dflash2-draft"]["hf_dir"] = "/draft/another"
    path.write_text(yaml.safe_dump(doc))
    cfg, node, launch = launch_named(repo, "4xa6000-tp2", "sglang-dflash--dflash-n8")
    assert launchspec.build(cfg, node, launch).server_fingerprint != before.server_fingerprint


def test_a_runs_draft_model_skips_its_variants_that_take_none(repo):
    # local-cpu's second run given a draft model, and its no-spec run the same: only the draft launches carry it.
    edit_run(repo, "local-cpu", 1, variants=["draft-n2"], draft_model="smollm2-135m-q4-1")
    edit_run(repo, "local-cpu", 0, draft_model="smollm2-135m-q4-1")
    _, _, nospec = launch_named(repo, "local-cpu", "llamacpp--nospec")
    _, _, draft = launch_named(repo, "local-cpu", "llamacpp--draft-n2")
    assert nospec.draft_model is None and draft.draft_model.name == "smollm2-135m-q4-1"


# -- a run's own context -----------------------------------------------------------------------------
def test_a_runs_context_len_replaces_the_nodes_and_null_keeps_it(repo):
    contexts = {l.name: l.context_len for l in expand.load_plan(repo, {"nodes": ["rtx5090"]})[1][0].launches}
    assert contexts["sglang-eagle--eagle-3-1-4"] == contexts["sglang-nospec--nospec"] == 131072
    assert contexts["vllm-nvfp4-mtp--mtp-n2"] == 65536  # the node's
    assert contexts["llamacpp--nospec"] == contexts["llamacpp--mtp-n2"] == 131072  # seed 000's llama.cpp run, its ladder to 128K


def test_a_runs_context_len_is_checked_by_the_schema(repo):
    edit_run(repo, "local-cpu", 0, context_len=128)
    with pytest.raises(ConfigError, match=r"local-cpu.yaml: runs\[0\].context_len: 128 is less than the minimum of 256"):
        expand.load_plan(repo, {"nodes": ["local-cpu"]})


def test_the_plan_prints_a_rounds_texts_beside_what_the_variance_levels_advise(repo, capsys):
    """Issue 66: the plan says how many texts a round sends a judged cell (its launches' repeats, not the one-off
    launch's) and how many the text, launch and within levels would have it send (analysis/levels.py)."""
    assert cli.main(["commands", "--node", "local-cpu"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("# texts a round")]
    assert len(said) == 1 and "Kalibera & Jones" in said[0]
    assert said[0].endswith("Texts a cell a round at c1 now: 3, new across rounds.")
