"""Image mode. Unit part: the container command for each engine and CLI (entrypoint, GPUs, read-only
model mounts, names, ulimits). Integration part: the real llama-server in a podman container built here
from the pipeline's own build; rows of a real request, and no container or process left after success, a
failed start, SIGINT, SIGTERM and a hard death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from container_image import build_llamacpp_image, container_engine_problem
from launch_helpers import make_launch
from stackbench.launchers import ImageLauncher, NotRunnable, ServerExited, container_name, group_members
from stackbench.stacks import adapter_for

ROOT = Path(__file__).resolve().parents[1]


def image_launcher(tmp_path, engine="llamacpp", cli="docker", gpu_devices=None, image="example/engine@sha256:ab12", **fields):
    model_dir = tmp_path / "models"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "tiny.gguf").write_bytes(b"GGUF")
    link = tmp_path / "linked-models"
    link.symlink_to(model_dir)
    launch = make_launch(tmp_path, engine=engine, model_path=str(link / "tiny.gguf"), launch_mode="image",
                         launch_target=image, env={"HF_TOKEN": "secret-value"}, **fields)
    return ImageLauncher(launch, adapter_for(engine), tmp_path / "run", 4, gpu_devices, cli)


@pytest.mark.parametrize("engine, entrypoint, first_args", [
    ("llamacpp", ["--entrypoint", "/app/llama-server", "example/engine@sha256:ab12"], ["--model"]),
    ("sglang", ["--entrypoint", "python3", "example/engine@sha256:ab12", "-m", "sglang.launch_server"], ["--model-path"]),
    ("vllm", ["--entrypoint", "vllm", "example/engine@sha256:ab12", "serve"], ["--model"]),
])
def test_each_engine_starts_through_its_image_entrypoint(tmp_path, engine, entrypoint, first_args):
    argv = image_launcher(tmp_path, engine).server_argv("127.0.0.1", 8123)
    at = argv.index("--entrypoint")
    assert argv[at:at + len(entrypoint)] == entrypoint
    assert argv[at + len(entrypoint):][:1] == first_args
    assert "<native binary>" not in argv and "-m" not in argv[:at]


def test_models_are_mounted_read_only_at_their_real_path(tmp_path):
    argv = image_launcher(tmp_path).server_argv("127.0.0.1", 8123)
    real = (tmp_path / "models").resolve()
    assert argv[argv.index("-v") + 1] == f"{real}:{real}:ro"
    assert argv[argv.index("--model") + 1] == str(real / "tiny.gguf")  # the symlinked path would not exist inside


def test_the_container_is_named_after_node_and_launch_and_secrets_stay_off_the_command_line(tmp_path):
    launcher = image_launcher(tmp_path)
    argv = launcher.server_argv("127.0.0.1", 8123)
    assert argv[:5] == ["docker", "run", "--rm", "--name", "stackbench-ci-cpu-llamacpp--nospec"]
    assert argv[argv.index("-e") + 1] == "HF_TOKEN" and "secret-value" not in " ".join(argv)
    assert container_name(make_launch(tmp_path, node="a/b c")) == "stackbench-a-b-c-llamacpp--nospec"


@pytest.mark.parametrize("cli, devices, flags", [
    ("docker", ["1", "3"], ["--gpus", '"device=1,3"']),
    ("docker", ["GPU-8f2a"], ["--gpus", '"device=GPU-8f2a"']),
    ("podman", ["1", "GPU-8f2a"], ["--device", "nvidia.com/gpu=1", "--device", "nvidia.com/gpu=GPU-8f2a"]),
    ("podman", None, []),
])
def test_gpu_flags_name_only_the_launchs_gpus(tmp_path, cli, devices, flags):
    argv = image_launcher(tmp_path, cli=cli, gpu_devices=devices).server_argv("127.0.0.1", 8123)
    gpu_args = [a for i, a in enumerate(argv) if a in ("--gpus", "--device") or argv[i - 1] in ("--gpus", "--device")]
    assert gpu_args == flags
    assert "all" not in " ".join(gpu_args)


def test_ulimits_are_explicit_and_within_the_hosts(tmp_path):
    import resource

    argv = image_launcher(tmp_path, cli="podman").server_argv("127.0.0.1", 8123)
    limits = dict(argv[i + 1].split("=") for i, a in enumerate(argv) if a == "--ulimit")
    soft, hard = (int(v) for v in limits["nofile"].split(":"))
    host_soft, host_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft <= hard and soft == host_soft and (host_hard == resource.RLIM_INFINITY or hard <= host_hard)
    assert "nproc" in limits


def test_a_missing_container_cli_is_not_runnable(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NotRunnable, match=r"container CLI 'docker' not found .*runs.launch.container_cli in configs/nodes/ci-cpu.yaml"):
        image_launcher(tmp_path).start(5)
