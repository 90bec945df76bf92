"""Which stacks a run measures: `--config stacks=...` on any node, else the node's default_stacks."""

import shutil
from pathlib import Path

import pytest
import yaml
from paths import ROOT

from stackbench.config import ConfigError
from stackbench.plan import expand, launchspec


@pytest.fixture
def repo(tmp_path) -> Path:
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    return tmp_path


def launches(repo: Path, **given) -> dict[str, list[str]]:
    _, nodes = expand.load_plan(repo, given)
    return {node.name: [l.name for l in node.launches] for node in nodes}


def edit_node(repo: Path, name: str, change) -> Path:
    path = repo / f"configs/nodes/{name}.yaml"
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc))
    return path


def test_naming_one_stack_plans_only_its_launches(repo):
    assert launches(repo, nodes=["rtx5090"], stacks=["vllm-nvfp4-mtp"]) == {
        "rtx5090": ["vllm-nvfp4-mtp--nospec", "vllm-nvfp4-mtp--mtp-n2", "vllm-nvfp4-mtp--mtp-n3"]}
    assert launches(repo, nodes=["rtx5090"], stacks=["llamacpp", "sglang-nospec"]) == {
        "rtx5090": ["sglang-nospec--nospec", "llamacpp--nospec", "llamacpp--mtp-n2", "llamacpp--mtp-n3"]}


def test_without_a_selection_each_node_runs_its_default_stacks(repo):
    # rtx5090 names none, so the schema's default (all) plans every run; local-cpu names llama.cpp only.
    assert len(launches(repo, nodes=["rtx5090"])["rtx5090"]) == 8
    assert launches(repo, nodes=["rtx5090"], stacks="all") == launches(repo, nodes=["rtx5090"])
    assert {name.split("--")[0] for name in launches(repo, nodes=["local-cpu"])["local-cpu"]} == {"llamacpp"}


def test_a_stack_the_node_does_not_have_is_one_line_naming_the_node_file_and_its_stacks(repo):
    with pytest.raises(ConfigError) as err:
        expand.load_plan(repo, {"nodes": ["rtx5090"], "stacks": ["vllm-cpu"]})
    assert str(err.value) == (f"configs/config.yaml (or --config): stacks: 'vllm-cpu' is not a stack of "
                              f"{repo}/configs/nodes/rtx5090.yaml; its stacks: vllm-nvfp4-mtp, sglang-eagle, "
                              "sglang-nospec, llamacpp")


def test_a_default_stack_the_runs_do_not_name_is_an_error_in_the_node_file(repo):
    path = edit_node(repo, "rtx5090", lambda d: d.update(default_stacks=["sglang-eagle", "sglang-dflash"]))
    with pytest.raises(ConfigError, match=rf"^{path}: default_stacks: 'sglang-dflash' is not a stack of {path}; its stacks: "):
        expand.load_plan(repo, {"nodes": ["rtx5090"]})


def test_runs_of_stacks_not_selected_are_still_checked(repo):
    """The node file is checked as a whole, so a mistake in a run that is not measured today stops the plan
    now, not on the day that stack is selected."""
    edit_node(repo, "rtx5090", lambda d: d["runs"][0].update(variants=["nospec", "mtp-n9"]))
    with pytest.raises(ConfigError, match=r"runs\[0\]\.variants: unknown variant\(s\) mtp-n9"):
        expand.load_plan(repo, {"nodes": ["rtx5090"], "stacks": ["llamacpp"]})


def test_the_selection_moves_no_fingerprint(repo):
    def spec(stacks):
        cfg = expand.load_run_config(repo, {"nodes": ["rtx5090"], "stacks": stacks})
        node = expand.load_node("rtx5090", cfg, repo)
        launch = next(l for l in node.launches if l.name == "llamacpp--nospec")
        return launchspec.build(cfg, node, launch)

    alone, together = spec(["llamacpp"]), spec("all")
    assert alone.fingerprint == together.fingerprint
    assert [c.key for c in alone.cells] == [c.key for c in together.cells]
