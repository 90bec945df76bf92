"""The preflight (host/preflight.py, `stackbench preflight --node N`) on simulated GPUs (rehearsal/simgpu.py, an
NVML TEST DOUBLE): each check passes on a machine as the node file says, and each one's failure prints what was
found and what to do; the cap check puts back every limit it changed."""

import pytest
from paths import ROOT

from stackbench import cli
from stackbench.host import preflight
from stackbench.host.preflight import FAIL, OK, SKIP, WARN
from stackbench.plan import expand
from stackbench.rehearsal import simgpu
from stackbench.serve.process import free_port

RTX_4090 = "NVIDIA GeForce RTX 4090"


def host(tmp_path, **knobs):
    """Two simulated RTX 4090s (and two more the node does not use), limits 150-600 W, stock 450 W."""
    settings = dict(count=4, state_path=tmp_path / "gpus.json", limit_mw=450_000, names=[RTX_4090] * 4,
                    min_mw=150_000, max_mw=600_000, default_mw=450_000, demand_mw=405_000, memory_gib=24.0,
                    compute_capability=(8, 9))
    return simgpu.NvmlDouble(**{**settings, **knobs})


def want(**changes):
    base = dict(file="configs/nodes/2x4090.yaml", gpu_model=RTX_4090, gpu_count=2, memory_gib=24, compute_capability="8.9",
                caps_w=(250.0, 400.0), tp_sizes=(1, 2))
    return preflight.Expected(**{**base, **changes})


def machine(tmp_path, nvml, **changes):
    return preflight.Machine(**{"nvml": nvml, "environ": {}, "state_dir": tmp_path / "locks", "run": lambda argv: 0,
                                "which": lambda name: f"/usr/bin/{name}", "disk_free_gib": lambda path: 500.0,
                                **changes})


def checks(tmp_path, nvml, expected=None, **changes) -> dict[str, preflight.Check]:
    return {c.name: c for c in preflight.preflight(expected or want(), machine(tmp_path, nvml, **changes))}


def test_a_machine_as_the_node_says_passes_and_the_cap_is_put_back(tmp_path):
    nvml = host(tmp_path)
    found = checks(tmp_path, nvml)
    assert {name: c.status for name, c in found.items()} == {"gpus": OK, "board": OK, "idle": OK, "driver": OK,
                                                             "caps": OK, "p2p": OK, "disk": OK}
    assert found["caps"].found == "250 W set and read back on 2 GPUs, restored to 450 W"
    assert (0, 250_000) in nvml.set_calls and [nvml.nvmlDeviceGetPowerManagementLimit(h) for h in range(4)] == [450_000] * 4
    assert not list((tmp_path / "locks").glob("*.powercap.json"))  # no restore state left behind


def test_another_gpu_model_or_less_memory_fails_naming_the_field(tmp_path):
    wrong = checks(tmp_path, host(tmp_path), want(gpu_model="NVIDIA GeForce RTX 3090"))["gpus"]
    assert wrong.status == FAIL and "set hardware.gpu.model to 'NVIDIA GeForce RTX 4090'" in wrong.todo
    small = checks(tmp_path, host(tmp_path, memory_gib=16.0))["gpus"]
    assert small.status == FAIL and "hardware.gpu.memory_gib says 24" in small.todo


def test_no_driver_fails_and_skips_the_other_gpu_checks(tmp_path):
    found = checks(tmp_path, host(tmp_path, no_driver=True))
    assert found["gpus"].status == FAIL and "NVML unavailable: Driver Not Loaded" in found["gpus"].found
    assert {found[n].status for n in ("idle", "driver", "caps", "p2p")} == {SKIP}


def test_a_busy_gpu_fails_idle_and_no_cap_is_set_on_it(tmp_path):
    nvml = host(tmp_path)
    nvml.add_process(1, pid=4242, used_mib=20_000, until=4e9)
    found = checks(tmp_path, nvml)
    assert found["idle"].status == FAIL and "pid 4242 holds 20000 MiB" in found["idle"].found
    assert found["caps"].status == SKIP and nvml.set_calls == []


def test_a_compute_capability_other_than_the_nodes_fails(tmp_path):
    found = checks(tmp_path, host(tmp_path, compute_capability=(8, 6)))["driver"]
    assert found.status == FAIL and "set 8.6 in configs/nodes/2x4090.yaml" in found.todo
    assert "CUDA 12.8" in found.found


def test_caps_this_user_may_not_set_say_they_will_be_skipped(tmp_path):
    found = checks(tmp_path, host(tmp_path, deny_set=True))["caps"]
    assert found.status == WARN and "Insufficient Permissions" in found.found
    assert "report says caps were skipped" in found.todo


def test_a_cap_outside_the_boards_range_fails_before_any_change(tmp_path):
    nvml = host(tmp_path)
    found = checks(tmp_path, nvml, want(caps_w=(100.0, 250.0)))["caps"]
    assert found.status == FAIL and found.found == "100 W is outside GPU 0's range 150-600 W (NVML)"
    assert nvml.set_calls == []


def test_no_peer_access_warns_and_a_missing_nvlink_fails(tmp_path):
    pcie = checks(tmp_path, host(tmp_path, p2p_read=5))["p2p"]
    assert pcie.status == WARN and "no peer-to-peer reads between GPUs 0-1" in pcie.found and "NCCL_P2P_DISABLE=1" in pcie.todo
    nvlink = checks(tmp_path, host(tmp_path), want(interconnect="nvlink"))["p2p"]
    assert nvlink.status == FAIL and "set hardware.interconnect to pcie" in nvlink.todo
    assert checks(tmp_path, host(tmp_path, p2p_nvlink=0), want(interconnect="nvlink"))["p2p"].found.endswith("over NVLink")
    assert checks(tmp_path, host(tmp_path), want(tp_sizes=(1,)))["p2p"].status == SKIP


def test_an_unbuilt_environment_and_a_missing_image_say_how_to_get_them(tmp_path):
    engines = (preflight.Engine("llamacpp--nospec", "native", str(tmp_path / ".envs/llamacpp-cuda-sm89/ready.json"),
                                built_by="snakemake .envs/llamacpp-cuda-sm89/ready.json"),
               preflight.Engine("vllm--mtp", "image", "vllm/vllm-openai@sha256:1", "podman"))
    found = checks(tmp_path, host(tmp_path), want(engines=engines), run=lambda argv: 1)
    assert found["engine llamacpp--nospec"].status == FAIL and found["engine llamacpp--nospec"].todo.startswith("snakemake")
    assert found["engine vllm--mtp"].todo == "podman pull vllm/vllm-openai@sha256:1"
    (tmp_path / ".envs/llamacpp-cuda-sm89").mkdir(parents=True)
    (tmp_path / ".envs/llamacpp-cuda-sm89/ready.json").write_text("{}")
    found = checks(tmp_path, host(tmp_path), want(engines=engines), which=lambda name: None)
    assert found["engine llamacpp--nospec"].status == OK and found["engine vllm--mtp"].found == "podman not found"


def test_an_external_url_where_nothing_answers_fails_naming_it_and_the_field(tmp_path):
    engines = (preflight.Engine("openai-compatible--nospec", "external", "http://gpu-box:11434"),)
    refused = checks(tmp_path, host(tmp_path), want(engines=engines), reaches=lambda url: "[Errno 111] Connection refused")
    line = refused["engine openai-compatible--nospec"]
    assert line.status == FAIL and line.found == "external server http://gpu-box:11434: nothing answers ([Errno 111] Connection refused)"
    assert line.todo.startswith("start it, or fix the run's launch.url in ")
    answering = checks(tmp_path, host(tmp_path), want(engines=engines), reaches=lambda url: None)
    assert answering["engine openai-compatible--nospec"].status == OK
    assert preflight.nothing_answers(f"http://127.0.0.1:{free_port()}") is not None


def test_a_missing_model_and_little_disk_say_so(tmp_path):
    (tmp_path / "here.gguf").write_text("x")
    models = (("models.q4km", str(tmp_path / "here.gguf")), ("models.int4", "/nowhere/int4"))
    found = checks(tmp_path, host(tmp_path), want(models=models, envs_dir=str(tmp_path)), disk_free_gib=lambda path: 12.0)
    assert found["model models.q4km"].status == OK
    assert found["model models.int4"].status == FAIL and "set models.int4's path" in found["model models.int4"].todo
    assert found["disk"].status == WARN and found["disk"].found == f"12 GiB free at {tmp_path}"


@pytest.mark.parametrize("node", ["rtx5090", "2x4090"])
def test_the_cli_runs_on_simulated_gpus_of_the_node(node, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit):  # the seed nodes' models and environments are not on this machine
        cli.main(["preflight", "--node", node, "--simulated"])
    out = capsys.readouterr().out
    assert "SIMULATED GPUs" in out and "ok   gpus: " in out and "ok   driver: " in out
    if node == "2x4090":
        assert "ok   caps: 250 W set and read back on 2 GPUs, restored to 450 W" in out


def test_the_expected_facts_come_from_the_node_file():
    cfg = {**expand.load_run_config(ROOT), "stacks": "all"}
    expected = cli.preflight_expected(expand.load_node("2x4090", cfg, ROOT), cfg)
    assert (expected.gpu_count, expected.compute_capability, expected.interconnect) == (2, "8.9", "pcie")
    assert expected.caps_w == (250, 300, 350, 400) and expected.tp_sizes == (1, 2)
    assert {m for m, _ in expected.models} == {"models.qwen38-q4km", "models.qwen38-awq-mtp", "models.qwen38-int4"}


def reading(**changes):
    """What NVML reports of a stock RTX 4090 board (preflight.board_reading's shape)."""
    return {"board_power_w": 450.0, "power_limit_w": (150.0, 600.0), "memory_gib": 23.6, "bandwidth_gbs": 1008,
            "clocks_mhz": (2520, 10501), **changes}


def test_the_board_as_nvml_reads_it_against_the_node_files_facts():
    """Issue 67: the preflight read NVML's limits for the caps only; now every board fact the plan rests on is held to
    what NVML reports, each disagreement naming the field and what NVML says."""
    stated = want(board_power_w=450.0, power_limit_w=(150.0, 600.0), bandwidth_gbs=1008)
    assert preflight.board_disagreements(reading(), stated) == []
    said = preflight.board_disagreements(reading(board_power_w=400.0, power_limit_w=(150.0, 450.0), bandwidth_gbs=936,
                                                 memory_gib=47.5), stated)
    assert said == ["hardware.gpu.board_power_w says 450 W, NVML's default limit is 400 W",
                    "hardware.gpu.power_limit_w says 150-600 W, NVML accepts 150-450 W: set [150, 450]",
                    "hardware.gpu.memory_gib says 24, NVML reads 47.5 GiB",
                    "hardware.gpu.bandwidth_gbs says 1008, NVML's bus width and memory clock give 936 GB/s"]
    assert preflight.board_disagreements(reading(board_power_w=400.0), want()) == []  # a fact not stated: not compared


def test_a_board_unlike_the_node_file_warns_naming_each_field(tmp_path):
    found = checks(tmp_path, host(tmp_path, default_mw=400_000), want(board_power_w=450.0))["board"]
    assert found.status == WARN and "hardware.gpu.board_power_w says 450 W, NVML's default limit is 400 W" in found.found
    assert found.found.startswith("NVML: board power 400 W, limits 150-600 W, 24.0 GiB") and "configs/nodes/2x4090.yaml" in found.todo


@pytest.mark.skipif(not __import__("shutil").which("nvidia-smi"), reason="the real NVML path needs a GPU")
def test_the_real_nvml_reading_has_every_field():
    from stackbench.host import telemetry

    gpus, why = telemetry.open_gpus(1, None, None, None)
    assert gpus is not None, why
    got = preflight.board_reading(gpus.nvml, gpus.handles[0])
    assert got["board_power_w"] > 0 and got["power_limit_w"][0] <= got["board_power_w"] <= got["power_limit_w"][1]
    assert got["memory_gib"] > 1 and min(got["clocks_mhz"]) > 0


def test_a_highest_limit_the_tables_leave_to_the_board_is_not_held_against_it():
    """An RTX 3090's highest limit differs by partner board (host/boards.py: None): NVML's 450 W is no disagreement."""
    stated = want(power_limit_w=(100.0, None))
    assert preflight.board_disagreements(reading(power_limit_w=(100.0, 450.0)), stated) == []
    assert preflight.board_disagreements(reading(power_limit_w=(150.0, 450.0)), stated) == [
        "hardware.gpu.power_limit_w says 100-? W, NVML accepts 150-450 W: set [150, 450]"]
