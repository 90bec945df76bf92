"""Image mode. Unit part: the container command for each engine and CLI (entrypoint, GPUs, read-only
model mounts, names, ulimits). Integration part: the real llama-server in a podman container built here
from the pipeline's own build; rows of a real request, and no container or process left after success, a
failed start, SIGINT, SIGTERM and a hard death, all through `stackbench measure` (the real run loop)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from capabilities import require
from container_image import build_llamacpp_image, container_engine_problem
from helpers import interruptible
from launch_helpers import make_launch, measure_argv, one_launch_spec, one_model_node, server_pid

from stackbench.engines import adapter_for
from stackbench.results import store
from stackbench.serve.container import container_name
from stackbench.serve.launchers import open_launcher
from stackbench.serve.process import NotRunnable, group_members


def image_launcher(tmp_path, engine="llamacpp", cli="docker", gpu_devices=None, image="example/engine@sha256:ab12", **fields):
    model_dir = tmp_path / "models"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "tiny.gguf").write_bytes(b"GGUF")
    link = tmp_path / "linked-models"
    link.symlink_to(model_dir)
    launch = make_launch(engine, model_path=str(link / "tiny.gguf"), node="ci-cpu", context_len=2048, launch_mode="image",
                         launch_target=image, env={"HF_TOKEN": "secret-value"}, container_cli=cli, **fields)
    return open_launcher(launch, adapter_for(engine), {}, tmp_path / "run", 4, gpu_devices)


@pytest.mark.parametrize("engine, entrypoint, first_args", [
    ("llamacpp", ["--entrypoint", "/app/llama-server", "example/engine@sha256:ab12"], ["--model", "{model}"]),
    ("sglang", ["--entrypoint", "python3", "example/engine@sha256:ab12", "-m", "sglang.launch_server"],
     ["--model-path", "{model}"]),
    # `vllm serve` takes the model positionally; --model there is deprecated
    ("vllm", ["--entrypoint", "vllm", "example/engine@sha256:ab12", "serve"], ["{model}", "--served-model-name"]),
])
def test_each_engine_starts_through_its_image_entrypoint(tmp_path, engine, entrypoint, first_args):
    argv = image_launcher(tmp_path, engine).server_argv("127.0.0.1", 8123)
    at = argv.index("--entrypoint")
    assert argv[at:at + len(entrypoint)] == entrypoint
    model = str((tmp_path / "models/tiny.gguf").resolve())
    assert argv[at + len(entrypoint):][:2] == [arg.format(model=model) for arg in first_args]
    assert "<native binary>" not in argv and "-m" not in argv[:at] and argv.count(model) == 1


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
    assert container_name(make_launch(node="a/b c")) == "stackbench-a-b-c-llamacpp--nospec"


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


@pytest.mark.parametrize("reported, recorded", [
    ("version: 0.0.0 (build 11434, commit 0c1f39a3)\nbuilt with cc for x86_64", "b11434-0c1f39a3"),
    ("version: 4567 (abcdef12)\nbuilt with cc for x86_64", "b4567-abcdef12"),
    ("llama-server: unrecognized option", "unknown"),
])
def test_llamacpp_version_lines_of_both_forms_read_as_props_build_info(reported, recorded):
    assert adapter_for("llamacpp").version_from_output(reported) == recorded


def test_a_missing_container_cli_is_not_runnable(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NotRunnable, match=r"container CLI 'docker' not found .*runs.launch.container_cli in configs/nodes/ci-cpu.yaml"):
        image_launcher(tmp_path).start(5)


# -- the real llama-server in a podman container, measured through the run loop ---------------------

@pytest.fixture(scope="session")
def podman_image(llamacpp_env, tmp_path_factory):
    require("podman", container_engine_problem("podman"))
    image = build_llamacpp_image("podman", Path(llamacpp_env["server"]), tmp_path_factory.mktemp("image"))
    yield image
    subprocess.run(["podman", "rmi", "-f", image], capture_output=True)


# The node, and so the container name (one per launch), is this test process's own: another suite sharing the
# machine (a second CI run) starts the same launch, and a launch removes a container of its own name left behind.
NODE = f"ci-podman-{os.getpid()}"
NAME = f"stackbench-{NODE}-llamacpp--nospec"


def image_spec(repo: Path, image: str, out: Path, server_args: dict | None = None) -> Path:
    return one_launch_spec(repo, NODE, one_model_node({"mode": "image", "image": image, "container_cli": "podman"},
                                                      server_args), out)


def containers_named(name: str) -> list[str]:
    listed = subprocess.run(["podman", "ps", "-a", "--filter", f"name=^{name}$", "--format", "{{.Names}}"],
                            capture_output=True, text=True, check=True)
    return listed.stdout.split()


def processes_naming(name: str) -> list[int]:
    """Live processes whose command line holds the container name (the podman client, conmon)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and name.encode() in (entry / "cmdline").read_bytes() \
                    and (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def assert_nothing_left(out: Path) -> None:
    assert containers_named(NAME) == [] and processes_naming(NAME) == []
    assert group_members(server_pid(out)) == []


def start_measuring(spec: Path, out: Path) -> subprocess.Popen:
    """`stackbench measure` in the background, returned once its server answered ready."""
    run = subprocess.Popen(measure_argv(spec, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           preexec_fn=interruptible)
    deadline = time.monotonic() + 300
    while not (out / "server_command.json").exists():
        assert run.poll() is None, f"measure exited early: {run.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "server not ready within 300 s"
        time.sleep(0.2)
    return run


@pytest.mark.integration
def test_image_mode_is_measured_through_the_run_loop_and_leaves_nothing(repo_copy, tmp_path, podman_image, llamacpp_env):
    out = tmp_path / "run"
    done = subprocess.run(measure_argv(image_spec(repo_copy, podman_image, out), out), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = store.read_results(out / "cells.parquet")
    decode = rows[(rows["metric"] == "decode_tps") & (rows["status"] == "ok")]
    assert len(decode) == 1 and decode["value"].iloc[0] > 0
    assert set(rows["launch_mode"]) == {"image"} and set(rows["engine_image"]) == {podman_image}
    # Read inside the image; the same binary run on the host reports the same build.
    assert set(rows["engine_version"]) == {adapter_for("llamacpp").version_from_output(llamacpp_env["binary_reports"])}
    assert "--entrypoint" in json.loads((out / "server_command.json").read_text())["argv"]
    assert_nothing_left(out)


@pytest.mark.integration
def test_a_failed_start_is_recorded_and_leaves_nothing(repo_copy, tmp_path, podman_image):
    out = tmp_path / "run"
    spec = image_spec(repo_copy, podman_image, out, server_args={"no_such_flag": True})
    subprocess.run(measure_argv(spec, out), capture_output=True, text=True)
    rows = store.read_results(out / "cells.parquet")
    cells = rows[rows["workload"] == "code"]
    assert set(cells["status"]) == {"failed"}
    assert cells["reason"].str.contains("last log line: error: invalid argument: --no-such-flag").all()
    assert_nothing_left(out)


@pytest.mark.integration
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_sigint_and_sigterm_remove_the_container(repo_copy, tmp_path, podman_image, signum):
    out = tmp_path / "run"
    run = start_measuring(image_spec(repo_copy, podman_image, out), out)
    assert containers_named(NAME) == [NAME]
    run.send_signal(signum)
    assert run.wait(timeout=120) != 0  # interrupted, not finished
    assert_nothing_left(out)


@pytest.mark.integration
def test_a_container_left_by_a_hard_death_is_removed_at_the_next_start(repo_copy, tmp_path, podman_image):
    out = tmp_path / "run"
    spec = image_spec(repo_copy, podman_image, out)
    run = start_measuring(spec, out)
    run.kill()
    run.wait(timeout=30)
    assert containers_named(NAME) == [NAME]  # SIGKILL runs no cleanup: the container outlives the run
    done = subprocess.run(measure_argv(spec, out), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = store.read_results(out / "cells.parquet")
    assert (rows[rows["metric"] == "decode_tps"]["status"] == "ok").all()
    assert_nothing_left(out)
