"""Native launcher: model checks, port retry on a bind failure, GPU scoping, identity, teardown. The
server is a test double (tests/launch_helpers.py); real engines run in the integration tests. External launcher:
a URL where nothing answers is refused at once (faults injected: a closed port, a name that does not resolve)."""

import json
import time

import pytest
from launch_helpers import PYTHON, DoubleAdapter, make_launch

from stackbench.engines import ADAPTERS
from stackbench.serve.launchers import open_launcher
from stackbench.serve.process import NotRunnable, ServerExited, free_port, group_members


def native(tmp_path, mode, gpu_devices=None, needs=None, **launch_fields):
    (tmp_path / "tiny.gguf").write_bytes(b"GGUF")
    adapter = DoubleAdapter(tmp_path, mode, needs)
    launch = make_launch(**{"model_path": str(tmp_path / "tiny.gguf"), "node": "ci-cpu", "context_len": 2048, **launch_fields})
    env_info = {"server": PYTHON, "version": "b11434"}
    return open_launcher(launch, adapter, env_info, tmp_path / "run", threads=2, gpu_devices=gpu_devices), adapter


def test_native_start_ready_identity_and_stop(tmp_path):
    launcher, adapter = native(tmp_path, "serve", gpu_devices=["0", "GPU-8f2a"])
    assert launcher.mode == "native"
    try:
        assert launcher.start(ready_timeout_s=20) < 20
        assert launcher.alive() and launcher.base_url.startswith("http://127.0.0.1:")
        assert launcher.argv[0] == PYTHON
        assert json.loads(adapter.spawns()[0]) == {"CUDA_VISIBLE_DEVICES": "0,GPU-8f2a"}
        assert launcher.identity() == {"launch_mode": "native", "engine_version": "b11434",
                                       "engine_image": "none (native build)"}
        assert launcher.server.grace_s == adapter.stop_grace_s  # SIGKILL only after the engine's own shutdown time
    finally:
        pgid = launcher.pgid
        launcher.stop()
    assert group_members(pgid) == [] and not launcher.alive()
    launcher.stop()  # idempotent


@pytest.mark.parametrize(("run_env", "seen"), [({}, "adapter's"), ({"DOUBLE_ENGINE_NEEDS": "run's"}, "run's")])
def test_the_server_gets_what_its_adapter_needs_under_the_nodes_and_runs_env(tmp_path, run_env, seen):
    launcher, adapter = native(tmp_path, "serve", needs={"DOUBLE_ENGINE_NEEDS": "adapter's"}, env=run_env)
    try:
        launcher.start(ready_timeout_s=20)
        assert json.loads(adapter.spawns()[0]) == {"CUDA_VISIBLE_DEVICES": None, "DOUBLE_ENGINE_NEEDS": seen}
    finally:
        launcher.stop()


def test_a_bind_failure_is_retried_on_a_fresh_port(tmp_path):
    launcher, adapter = native(tmp_path, "bind-fails-once")
    try:
        launcher.start(ready_timeout_s=20)
        assert len(adapter.spawns()) == 2
        assert "couldn't bind" in (tmp_path / "run/server.log").read_text()  # the file keeps every attempt
        assert "couldn't bind" not in launcher.log_text()  # the running server's own log
    finally:
        launcher.stop()


def test_any_other_exit_is_not_retried(tmp_path):
    launcher, adapter = native(tmp_path, "exit")
    with pytest.raises(ServerExited, match="code 3 .*cannot load model"):
        launcher.start(ready_timeout_s=20)
    assert len(adapter.spawns()) == 1
    assert group_members(launcher.pgid) == []


def test_a_missing_model_file_is_not_runnable_and_names_the_node_field(tmp_path):
    launcher, adapter = native(tmp_path, "serve", model_path=str(tmp_path / "absent.gguf"))
    with pytest.raises(NotRunnable, match=r"absent.gguf \(models.qwen38 in configs/nodes/ci-cpu.yaml\)"):
        launcher.start(ready_timeout_s=5)
    assert adapter.spawns() == []
    launcher.stop()


def test_a_missing_engine_environment_is_not_runnable(tmp_path):
    (tmp_path / "tiny.gguf").write_bytes(b"GGUF")
    launcher = open_launcher(make_launch(model_path=str(tmp_path / "tiny.gguf")), DoubleAdapter(tmp_path, "serve"), {}, tmp_path, None, None)
    with pytest.raises(NotRunnable, match="engine environment llamacpp not built"):
        launcher.start(ready_timeout_s=5)


@pytest.mark.parametrize("engine", sorted(ADAPTERS))
@pytest.mark.parametrize("fault", ["refused", "unresolved"])
def test_an_external_url_where_nothing_answers_is_refused_at_once_naming_it_and_the_field(tmp_path, engine, fault):
    """Connection refused or a name that does not resolve: one line naming the URL and the node file's field,
    before any cell, for every engine's external mode; never a wait toward the ready timeout (600 s by default)."""
    # the free port drawn when the test runs (a collection-time port differs between the workers that collect)
    url = {"refused": f"http://127.0.0.1:{free_port()}", "unresolved": "http://no-such-server.invalid:8000"}[fault]
    launch = make_launch(engine, node="ci-cpu", launch_mode="external", launch_target=url, context_len=2048)
    launcher = open_launcher(launch, ADAPTERS[engine], {}, tmp_path / "run", None, None)
    started = time.monotonic()
    with pytest.raises(NotRunnable) as refused:
        launcher.start(ready_timeout_s=600)
    assert time.monotonic() - started < 10
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"external server at {url}: nothing answers")
    assert line.endswith(f"configs/nodes/ci-cpu.yaml runs[] (stack {engine}) launch.url")
