"""Planning checks of a GPU node (issue 47), on copies of the repository's node files: a power cap above the
GPU's board power is refused naming the field; a GPU-sized accuracy set on a run whose server serves fewer
streams is refused naming the workload and a fix that works, and the fix plans; a rehearsal's rows take the
node's OS, not the rehearsal host's."""

import re
import shutil
from pathlib import Path

import pytest
import yaml
from paths import ROOT

from stackbench.config import ConfigError
from stackbench.plan import expand


@pytest.fixture
def repo(tmp_path) -> Path:
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    return tmp_path


def edit_node(repo: Path, name: str, change) -> None:
    path = repo / f"configs/nodes/{name}.yaml"
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def load(repo: Path, name: str, **given):
    return expand.load_node(name, expand.load_run_config(repo, {"nodes": [name], **given}), repo)


def test_a_650_w_cap_on_an_rtx_5090_is_refused_naming_the_field(repo):
    edit_node(repo, "rtx5090", lambda doc: doc.update(power_caps_w=[400, 650]))
    with pytest.raises(ConfigError, match=re.escape("power_caps_w[1]: 650 W is above the NVIDIA GeForce RTX 5090's highest "
                                                    "power limit 600 W")):
        load(repo, "rtx5090")


def test_a_cap_below_the_boards_lowest_limit_is_refused_at_planning(repo):
    edit_node(repo, "2x4090", lambda doc: doc.update(power_caps_w=[100]))
    with pytest.raises(ConfigError, match=re.escape("power_caps_w[0]: 100 W is below the NVIDIA GeForce RTX 4090's lowest "
                                                    "power limit 150 W")):
        load(repo, "2x4090")


def test_a_run_cap_above_the_board_power_names_the_runs_field(repo):
    def change(doc):
        doc["runs"][0]["power_caps_w"] = [650]
    edit_node(repo, "rtx5090", change)
    with pytest.raises(ConfigError, match=re.escape("runs[0].power_caps_w[0]: 650 W")):
        load(repo, "rtx5090")


def test_caps_within_the_board_power_plan_and_a_stated_range_wins(repo):
    edit_node(repo, "rtx5090", lambda doc: doc.update(power_caps_w=[400, 575]))
    assert load(repo, "rtx5090").power_caps_w == (400, 575)

    def stated(doc):  # a board whose stated range goes higher: the node's own range decides
        doc["hardware"]["gpu"]["power_limit_w"] = [400, 600]
        doc["power_caps_w"] = [600]
    edit_node(repo, "rtx5090", stated)
    assert load(repo, "rtx5090").power_caps_w == (600,)


def test_the_gpu_accuracy_set_on_two_slots_names_the_workload_and_a_fix_that_plans(repo):
    edit_node(repo, "rtx5090", lambda doc: doc.update(accuracy="accuracy-gpu"))
    with pytest.raises(ConfigError) as refused:
        load(repo, "rtx5090")
    message = str(refused.value)
    assert "workload accuracy-gpu (kind accuracy) runs at concurrency 4 by its own list" in message
    assert re.search(r"runs\[\d\]\.accuracy", message) and "concurrency: [2]" in message
    # The fix the message names: the two-slot runs get a set at 2 streams.
    two = yaml.safe_load((repo / "configs/workloads/accuracy-gpu.yaml").read_text())
    two["concurrency"] = [2]
    (repo / "configs/workloads/accuracy-gpu-c2.yaml").write_text(yaml.safe_dump(two, sort_keys=False))

    def fix(doc):
        for run in doc["runs"]:
            if run.get("concurrency") == [1, 2]:
                run["accuracy"] = "accuracy-gpu-c2"
    edit_node(repo, "rtx5090", fix)
    node = load(repo, "rtx5090")
    sets = {launch.stack_config: {w for w in launch.workloads if w.startswith("accuracy")} for launch in node.launches}
    assert sets["vllm-nvfp4-mtp"] == {"accuracy-gpu"} and sets["sglang-eagle"] == {"accuracy-gpu-c2"}


def test_a_rehearsal_takes_the_os_from_the_node_file_not_the_host():
    rehearsal = load(ROOT, "rtx5090", rehearsal={"node": "rtx5090"})
    assert rehearsal.os == "unknown"  # os: auto is read on the GPU host; a rehearsal's host is not it
    assert load(ROOT, "rtx5090").os == "auto"  # a real run reads its own host
