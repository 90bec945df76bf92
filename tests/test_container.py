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
from launch_helpers import TEST_MODEL, chat, llamacpp_env, make_launch  # noqa: F401  (llamacpp_env is a fixture)
from stackbench.launchers import NotRunnable, ServerExited, container_name, group_members, llamacpp_build_info, open_launcher
from stackbench.stacks import adapter_for

ROOT = Path(__file__).resolve().parents[1]


def image_launcher(tmp_path, engine="llamacpp", cli="docker", gpu_devices=None, image="example/engine@sha256:ab12", **fields):
    model_dir = tmp_path / "models"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "tiny.gguf").write_bytes(b"GGUF")
    link = tmp_path / "linked-models"
    link.symlink_to(model_dir)
    launch = make_launch(tmp_path, engine=engine, model_path=str(link / "tiny.gguf"), launch_mode="image",
                         launch_target=image, env={"HF_TOKEN": "secret-value"}, container_cli=cli, **fields)
    return open_launcher(launch, adapter_for(engine), {}, tmp_path / "run", 4, gpu_devices)


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


@pytest.mark.parametrize("reported, recorded", [
    ("version: 0.0.0 (build 11434, commit 0c1f39a3)\nbuilt with cc for x86_64", "b11434-0c1f39a3"),
    ("version: 4567 (abcdef12)\nbuilt with cc for x86_64", "b4567-abcdef12"),
    ("llama-server: unrecognized option", "unknown"),
])
def test_llamacpp_version_lines_of_both_forms_read_as_props_build_info(reported, recorded):
    assert llamacpp_build_info(reported) == recorded


def test_a_missing_container_cli_is_not_runnable(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NotRunnable, match=r"container CLI 'docker' not found .*runs.launch.container_cli in configs/nodes/ci-cpu.yaml"):
        image_launcher(tmp_path).start(5)


# -- the real llama-server in a podman container ---------------------------------------------------

DRIVER = textwrap.dedent("""
    # Starts an image-mode server and holds it, handling signals as the run loop does: SIGTERM becomes
    # KeyboardInterrupt (like SIGINT), so the launcher's stop() runs in `finally`.
    import pickle, signal, sys, time
    from stackbench.launchers import open_launcher
    from stackbench.stacks import adapter_for

    def raise_interrupted(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, raise_interrupted)
    launch, out_dir = pickle.load(open(sys.argv[1], "rb"))
    launcher = open_launcher(launch, adapter_for(launch.engine), {}, out_dir, 2, None)
    try:
        launcher.start(300)
        print("ready", launcher.pgid, flush=True)
        time.sleep(600)
    finally:
        launcher.stop()
""")


@pytest.fixture(scope="session")
def podman_image(llamacpp_env, tmp_path_factory):
    problem = container_engine_problem("podman")
    if problem:
        pytest.skip(f"no container engine can run here: {problem}")
    image = build_llamacpp_image("podman", Path(llamacpp_env["server"]), tmp_path_factory.mktemp("image"))
    yield image
    subprocess.run(["podman", "rmi", "-f", image], capture_output=True)


@pytest.fixture
def real_launch(tmp_path, podman_image):
    return make_launch(tmp_path, model_path=str(TEST_MODEL), launch_mode="image", launch_target=podman_image,
                       container_cli="podman", node="ci-podman", server_args={"parallel": 1})


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
    return [pid for pid in found if pid != os.getpid()]


def assert_nothing_left(launcher_name: str, pgid: int | None) -> None:
    assert containers_named(launcher_name) == []
    assert processes_naming(launcher_name) == []
    if pgid is not None:
        assert group_members(pgid) == []


@pytest.mark.integration
def test_image_mode_serves_the_real_llama_server_and_leaves_nothing(tmp_path, real_launch, podman_image):
    launcher = open_launcher(real_launch, adapter_for("llamacpp"), {}, tmp_path / "run", 2, None)
    try:
        assert launcher.start(300) > 0
        assert launcher.alive()
        reply = chat(launcher.base_url)
        assert reply["usage"]["completion_tokens"] > 0
        assert reply["choices"][0]["message"]["content"]
        identity = launcher.identity()
        assert identity["launch_mode"] == "image" and identity["engine_image"] == podman_image
        # Read inside the image before the start; the running server's /props names the same build.
        assert identity["engine_version"] == httpx.get(launcher.base_url + "/props").json()["build_info"]
        assert "llama_model_load" in launcher.log_text() or "model loaded" in launcher.log_text()
    finally:
        pgid = launcher.pgid
        launcher.stop()
    assert not launcher.alive()
    assert_nothing_left(launcher.name, pgid)


@pytest.mark.integration
def test_a_failed_start_leaves_nothing(tmp_path, real_launch):
    import dataclasses

    broken = dataclasses.replace(real_launch, server_args={"no_such_flag": True})
    launcher = open_launcher(broken, adapter_for("llamacpp"), {}, tmp_path / "run", 2, None)
    with pytest.raises(ServerExited, match="no-such-flag|invalid argument"):
        launcher.start(300)
    assert_nothing_left(launcher.name, launcher.pgid)


def start_driver(tmp_path, launch) -> tuple[subprocess.Popen, int]:
    import pickle

    (tmp_path / "driver.py").write_text(DRIVER)
    (tmp_path / "launch.pickle").write_bytes(pickle.dumps((launch, tmp_path / "run")))
    driver = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "launch.pickle")],
                              stdout=subprocess.PIPE, text=True)
    line = driver.stdout.readline()
    assert line.startswith("ready"), f"driver did not start the server: {line!r}"
    return driver, int(line.split()[1])


@pytest.mark.integration
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_sigint_and_sigterm_remove_the_container(tmp_path, real_launch, signum):
    driver, pgid = start_driver(tmp_path, real_launch)
    name = container_name(real_launch)
    assert containers_named(name) == [name]
    driver.send_signal(signum)
    assert driver.wait(timeout=60) != 0  # interrupted, not finished
    assert_nothing_left(name, pgid)


@pytest.mark.integration
def test_a_container_left_by_a_hard_death_is_removed_at_the_next_start(tmp_path, real_launch):
    driver, pgid = start_driver(tmp_path, real_launch)
    name = container_name(real_launch)
    driver.kill()
    driver.wait(timeout=30)
    time.sleep(1)
    assert containers_named(name) == [name]  # SIGKILL runs no cleanup: the container outlives its launcher
    launcher = open_launcher(real_launch, adapter_for("llamacpp"), {}, tmp_path / "again", 2, None)
    try:
        launcher.start(300)
        assert chat(launcher.base_url)["usage"]["completion_tokens"] > 0
    finally:
        launcher.stop()
    assert_nothing_left(name, launcher.pgid)
    assert group_members(pgid) == []  # the dead launcher's podman client went with its container
