"""The node schema's launch and GPU settings: each mode's target is required (one line naming file and
field), the container CLI is docker or podman, GPUs are named by index or UUID."""

import shutil
from pathlib import Path

import pytest
import yaml
from paths import ROOT

from stackbench.config import ConfigError, load_file
from stackbench.plan import expand


def node_file(tmp_path: Path, launch: dict, **top) -> Path:
    doc = {"hardware": {"gpu": {"model": "none", "count": 0}}, "models": {"m": {"gguf": "/models/m.gguf"}},
           "runs": [{"stack": "llamacpp", "model": "m", "launch": launch}], **top}
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("launch, message", [
    ({"mode": "image"}, "runs[0].launch: 'image' is a required property"),
    ({"mode": "external"}, "runs[0].launch: 'url' is a required property"),
    ({"mode": "image", "image": "x@sha256:ab", "container_cli": "lxc"},
     "runs[0].launch.container_cli: expected one of docker, podman, got 'lxc'"),
    ({"mode": "external", "url": "gpu-box:8000"}, "runs[0].launch.url: 'gpu-box:8000' does not match '^https?://'"),
])
def test_each_mode_needs_its_target_named_in_one_line(tmp_path, launch, message):
    path = node_file(tmp_path, launch)
    with pytest.raises(ConfigError) as err:
        load_file(path, "node")
    assert str(err.value) == f"{path}: {message}"


def test_defaults_are_docker_and_the_first_count_gpus(tmp_path):
    doc = load_file(node_file(tmp_path, {"mode": "image", "image": "x@sha256:ab"}), "node")
    assert doc["runs"][0]["launch"]["container_cli"] == "docker"
    assert doc["hardware"]["gpu"]["devices"] is None


def test_gpus_are_named_by_index_or_uuid(tmp_path):
    gpu = {"model": "NVIDIA H100 80GB HBM3", "count": 2, "devices": [1, "GPU-8f2a1c3e-0b1d-4c1e-9a7b-2f6e5d4c3b2a"]}
    doc = load_file(node_file(tmp_path, {"mode": "native"}, hardware={"gpu": gpu}), "node")
    assert doc["hardware"]["gpu"]["devices"] == gpu["devices"]
    gpu["devices"] = ["all"]
    with pytest.raises(ConfigError, match=r"hardware.gpu.devices\[0\]"):
        load_file(node_file(tmp_path, {"mode": "native"}, hardware={"gpu": gpu}), "node")


def test_the_plan_carries_the_container_cli_to_the_launch(tmp_path):
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    node = tmp_path / "configs/nodes/local-cpu.yaml"
    doc = yaml.safe_load(node.read_text())
    doc["runs"][0]["launch"] = {"mode": "image", "image": "localhost/llama@sha256:ab", "container_cli": "podman"}
    node.write_text(yaml.safe_dump(doc))
    _, nodes = expand.load_plan(tmp_path)
    launch = nodes[0].launches[0]
    assert (launch.launch_mode, launch.launch_target, launch.container_cli) == ("image", "localhost/llama@sha256:ab", "podman")
