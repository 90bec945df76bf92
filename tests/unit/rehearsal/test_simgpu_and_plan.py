"""The simulated host (stackbench.rehearsal.simgpu, an NVML TEST DOUBLE) as telemetry and power caps see
it, and what makes a run a rehearsal (stackbench.config.rehearsal)."""

import pytest
from paths import ROOT

from stackbench.config import ConfigError, rehearsal
from stackbench.host import powercap, telemetry
from stackbench.plan import expand, launchspec
from stackbench.rehearsal import simgpu


def test_a_simulated_host_has_more_gpus_than_the_node_and_the_models_range(tmp_path):
    host = simgpu.simulated_host("NVIDIA RTX A6000", 2, 48, tmp_path / "gpus.json")
    gpus, why = telemetry.open_gpus(2, host)
    assert why is None and host.count == 2 + simgpu.EXTRA_GPUS
    assert [g.uuid for g in gpus.info] == ["GPU-simulated-0", "GPU-simulated-1"]
    assert {g.name for g in gpus.info} == {"NVIDIA RTX A6000"}
    assert (gpus.info[0].min_limit_w, gpus.info[0].max_limit_w, gpus.info[0].default_limit_w) == (100.0, 300.0, 300.0)
    assert host.nvmlDeviceGetMemoryInfo(0).total == 48 * 2**30


def test_a_set_cap_reads_back_power_is_min_of_cap_and_demand_energy_integrates_it(tmp_path):
    now = [0.0]
    host = simgpu.NvmlDouble(count=3, state_path=tmp_path / "gpus.json", limit_mw=300_000, min_mw=100_000,
                             max_mw=300_000, default_mw=300_000, demand_mw=270_000, clock=lambda: now[0])
    assert host.nvmlDeviceGetPowerUsage(0) == 270_000  # uncapped: the demand
    start = host.nvmlDeviceGetTotalEnergyConsumption(0)
    now[0] = 10.0
    host.nvmlDeviceSetPowerManagementLimit(0, 200_000)
    assert host.nvmlDeviceGetEnforcedPowerLimit(0) == 200_000 and host.nvmlDeviceGetPowerUsage(0) == 200_000
    assert host.nvmlDeviceGetPowerUsage(1) == 270_000  # another GPU keeps its limit
    now[0] = 20.0
    assert host.nvmlDeviceGetTotalEnergyConsumption(0) - start == 270_000 * 10 + 200_000 * 10  # mJ
    with pytest.raises(simgpu.NVMLError, match="Invalid Argument"):
        host.nvmlDeviceSetPowerManagementLimit(0, 50_000)
    # The limits and every set live in the state file, for the next process (a SIGKILLed job's successor).
    again = simgpu.NvmlDouble(count=3, state_path=tmp_path / "gpus.json", demand_mw=270_000)
    assert again.nvmlDeviceGetPowerManagementLimit(0) == 200_000 and again._load()["touched"] == [0]


def test_caps_on_the_simulated_host_are_restored_by_the_capper(tmp_path):
    host = simgpu.simulated_host("NVIDIA GeForce RTX 3090", 2, 24, tmp_path / "gpus.json")
    gpus, _ = telemetry.open_gpus(2, host)
    with powercap.PowerCapper(gpus, tmp_path / "locks", sleep=lambda s: None) as capper:
        assert capper.apply(200).enforced_w == 200
    assert [host.nvmlDeviceGetPowerManagementLimit(i) for i in range(host.count)] == [350_000] * 4
    assert host._load()["touched"] == [0, 1]  # never the host's other GPUs


def test_a_rehearsal_moves_every_output_and_runs_cells_once():
    cfg = expand.load_run_config(ROOT, {"nodes": ["rtx5090"], "rehearsal": {"node": "rtx5090"}})
    assert cfg["paths"]["results"] == "data/rehearsal/rtx5090/results.parquet"
    assert cfg["paths"]["runs"].startswith("data/rehearsal/rtx5090/") and cfg["paths"]["parts"].startswith("data/rehearsal/rtx5090/")
    assert cfg["paths"]["reports"] == "reports/rehearsal/rtx5090"
    assert cfg["paths"]["published"] == "data/published"  # inputs stay
    assert (cfg["measure"]["repeats"], cfg["measure"]["warmup_requests"]) == (1, 0)
    assert rehearsal.apply(cfg) == cfg
    real = expand.load_run_config(ROOT, {"nodes": ["rtx5090"]})
    assert real["paths"]["results"] == "data/results.parquet"
    with pytest.raises(ConfigError, match="rehearsal.node"):
        expand.load_run_config(ROOT, {"nodes": ["rtx5090", "4xa6000-tp4"], "rehearsal": {"node": "rtx5090"}})


def test_the_stand_in_is_in_every_fingerprint(monkeypatch):
    monkeypatch.chdir(ROOT)
    specs = []
    for given in ({"nodes": ["rtx5090"]}, {"nodes": ["rtx5090"], "rehearsal": {"node": "rtx5090"}}):
        cfg, nodes = expand.load_plan(ROOT, given)
        node, launch = expand.find_launch(nodes, "rtx5090", "llamacpp--nospec")
        specs.append(launchspec.build(cfg, node, launch))
    real, rehearsal = specs
    assert rehearsal.engine["stand_in"].startswith("stackbench-standin")
    assert real.server_fingerprint != rehearsal.server_fingerprint
    assert not {real.cell_fingerprint(c) for c in real.cells} & {rehearsal.cell_fingerprint(c) for c in rehearsal.cells}


def test_memory_follows_processes_and_a_dead_ones_is_freed_after_its_release_time(tmp_path):
    import subprocess
    import time

    host = simgpu.simulated_host("NVIDIA GeForce RTX 3090", 1, 24, tmp_path / "gpus.json")
    gpus, _ = telemetry.open_gpus(1, host)
    assert gpus.memory_used_mib() == {"GPU-simulated-0": simgpu.IDLE_USED_MIB} and gpus.processes() == {"GPU-simulated-0": []}
    child = subprocess.Popen(["sleep", "30"])
    host.add_process(0, child.pid, 8000)
    host.add_process(1, 4242, 20480, until=time.time() + 3600)  # another user's job on a GPU the node does not use
    assert gpus.memory_used_mib()["GPU-simulated-0"] == simgpu.IDLE_USED_MIB + 8000
    assert gpus.processes()["GPU-simulated-0"] == [(child.pid, 8000)]
    host.release(child.pid, after_s=3600)
    child.kill()
    child.wait()
    assert gpus.memory_used_mib()["GPU-simulated-0"] == simgpu.IDLE_USED_MIB + 8000  # dead, but before its release time
    host.release(child.pid, after_s=0)  # its release time is now: past at the next read
    assert gpus.memory_used_mib()["GPU-simulated-0"] == simgpu.IDLE_USED_MIB
    assert host.nvmlDeviceGetComputeRunningProcesses(1)[0].pid == 4242


def test_the_draw_follows_the_load_a_stand_in_reports_until_it_ends(tmp_path):
    """Issue 60: every simulated GPU drew 90% of its board power at any load, so every cap 'bound'. Now an idle GPU
    draws IDLE_SHARE of it, a GPU whose stand-in reports a decode what a memory-bound step asks for, across
    processes (the sampler's double reads the stand-in's report), and the load ends with its process."""
    import os
    import subprocess
    import sys
    import time

    state = tmp_path / "gpus.json"
    sampler = simgpu.simulated_host("NVIDIA H100 80GB HBM3", 4, 80, state, average_s=0, bandwidth_gbs=3350)  # the draw now
    assert sampler.nvmlDeviceGetPowerUsage(0) == 70_000  # idle: 10% of 700 W, not 630 W
    one = simgpu.load_draw_mw(sampler.idle_mw, sampler.demand_mw, sampler.memory_bound_share, 0.0)
    assert 137_000 <= one <= 300_000  # an HBM board's single-stream decode, inside Ma et al.'s H200 range
    decode = simgpu.load_draw_mw(sampler.idle_mw, sampler.demand_mw, sampler.memory_bound_share, 0.5)  # a batch
    assert one < decode < simgpu.load_draw_mw(sampler.idle_mw, sampler.demand_mw, 0.0, 1.0) == 700_000
    script = (f"import sys; from stackbench.rehearsal import simgpu; host = simgpu.simulated_host("
              f"'NVIDIA H100 80GB HBM3', 4, 80, {str(state)!r}); host.report_load([0, 1], {decode}); sys.stdin.readline()")
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    deadline = time.monotonic() + 30
    while sampler.nvmlDeviceGetPowerUsage(1) != decode and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sampler.nvmlDeviceGetPowerUsage(1) == decode and sampler.nvmlDeviceGetPowerUsage(2) == 70_000
    sampler.nvmlDeviceSetPowerManagementLimit(0, 500_000)  # above the decode's draw: the cap does not bind
    assert sampler.nvmlDeviceGetPowerUsage(0) == decode
    assert not sampler.nvmlDeviceGetCurrentClocksEventReasons(0) & simgpu.SW_POWER_CAP
    sampler.nvmlDeviceSetPowerManagementLimit(1, 200_000)  # below it: it binds, and the GPU says so
    assert sampler.nvmlDeviceGetPowerUsage(1) == 200_000 and sampler.nvmlDeviceGetCurrentClocksEventReasons(1) & simgpu.SW_POWER_CAP
    child.communicate(b"\n", timeout=30)
    assert sampler.nvmlDeviceGetPowerUsage(0) == 70_000  # the process ended: its load with it
    sampler.report_load([2], decode)  # a stand-in stopped by SIGTERM ends its load before it exits
    assert sampler.nvmlDeviceGetPowerUsage(2) == decode
    sampler.end_load()
    assert sampler.nvmlDeviceGetPowerUsage(2) == 70_000


def test_the_energy_counter_integrates_every_load_between_two_reads(tmp_path):
    """The counter read only at a cell's edges, both idle, still holds the prefill and decode between them: each
    load change is logged with its time and integrated in order (issue 60: read at its edges, a draw that follows the
    load would give "energy 0.58 J/token below what 1107 W allows")."""
    now = [0.0]
    gpu = dict(count=1, state_path=tmp_path / "gpus.json", limit_mw=700_000, min_mw=200_000, max_mw=700_000,
               default_mw=700_000, demand_mw=630_000, idle_mw=70_000, clock=lambda: now[0])
    sampler, standin_gpus = simgpu.NvmlDouble(**gpu), simgpu.NvmlDouble(**gpu)
    start = sampler.nvmlDeviceGetTotalEnergyConsumption(0)
    now[0] = 1.0
    standin_gpus.report_load([0], 630_000)  # a prompt prefills for 1 s
    now[0] = 2.0
    standin_gpus.report_load([0], 227_000)  # its decode for 3 s
    now[0] = 5.0
    standin_gpus.end_load()  # then idle for 5 s
    now[0] = 10.0
    assert sampler.nvmlDeviceGetTotalEnergyConsumption(0) - start == 70_000 * 1 + 630_000 * 1 + 227_000 * 3 + 70_000 * 5


def test_power_reads_as_nvmls_mean_over_the_last_second():
    """NVML's power on Ampere and newer is the mean over the last second; a rehearsal's cell lasts milliseconds
    here, so the draw at the instant a sample lands (after its last request) would read an idle GPU."""
    now = [0.0]
    gpu = simgpu.NvmlDouble(count=1, limit_mw=700_000, min_mw=200_000, max_mw=700_000, default_mw=700_000,
                            demand_mw=630_000, idle_mw=70_000, clock=lambda: now[0], average_s=1.0)
    now[0] = 2.0
    gpu.report_load([0], 630_000)
    now[0] = 2.5
    assert gpu.nvmlDeviceGetPowerUsage(0) == 350_000  # half the second idle, half prefilling
    now[0] = 4.0
    assert gpu.nvmlDeviceGetPowerUsage(0) == 630_000
    gpu.end_load()
    now[0] = 4.25
    assert gpu.nvmlDeviceGetPowerUsage(0) == 490_000


def test_two_threads_reading_one_double_never_split_a_load_line(tmp_path):
    """The sampler's thread and the cell's thread (the energy at a window's edges) read one double while the stand-in
    writes its loads: unguarded, the two advanced one read offset into the middle of a line (JSONDecodeError). The
    readers read for as long as the writers write a fixed count of lines, no clock: with the guard taken out, 10 runs
    in 10 failed at 2,000 lines a writer (0.4-0.6 s here, against the 2 s sleep before)."""
    import threading

    gpu = dict(count=4, state_path=tmp_path / "gpus.json", demand_mw=630_000, idle_mw=70_000, average_s=0.02)
    standin_gpus, sampler = simgpu.NvmlDouble(**gpu), simgpu.NvmlDouble(**gpu)
    written, errors, start = threading.Event(), [], threading.Barrier(6)

    def write(k):
        start.wait()
        for _ in range(2000):
            standin_gpus.report_load([0, 1, 2, 3], 100_000 + k)

    def read():
        start.wait()
        try:
            while not written.is_set():
                sampler.nvmlDeviceGetTotalEnergyConsumption(0)
                sampler.nvmlDeviceGetPowerUsage(1)
        except Exception as err:  # any error a reader meets is the failure
            errors.append(repr(err))

    writers = [threading.Thread(target=write, args=(k,)) for k in range(3)]
    readers = [threading.Thread(target=read) for _ in range(3)]
    for thread in writers + readers:
        thread.start()
    for thread in writers:
        thread.join()
    written.set()
    for thread in readers:
        thread.join()
    assert errors == []


def test_a_simulated_board_takes_the_node_files_power_and_range(tmp_path):
    """Issue 67: a board no table knows stopped the rehearsal with a traceback, and the simulated GPU took a third of
    the board power as its lowest limit whatever the node stated. Now it is made of the node's facts."""
    host = simgpu.simulated_host("NVIDIA RTX PRO 4000 Blackwell", 2, 24, tmp_path / "gpus.json", board_w=140,
                                 limits_w=(100.0, 140.0), bandwidth_gbs=672)
    assert host.nvmlDeviceGetPowerManagementLimitConstraints(0) == (100_000, 140_000)
    assert host.nvmlDeviceGetPowerManagementDefaultLimit(0) == 140_000 == host.demand_mw
    assert host.memory_bound_share == simgpu.MEMORY_BOUND_SHARE["gddr"]
    from stackbench.host import boards
    assert boards.memory_bandwidth_gbs(host, 0) == 672  # the preflight reads the stated bandwidth back
    with pytest.raises(simgpu.NVMLError):
        host.nvmlDeviceSetPowerManagementLimit(0, 90_000)  # below the stated range, as NVML refuses it
