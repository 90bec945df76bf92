"""Telemetry and power caps against a test double of NVML (stackbench.rehearsal.simgpu): units, windows,
GPU selection, energy windows, the sweep, restore on every exit path, constraint errors and missing
permissions. Every test injects the test double, so each checks the same behaviour on a CPU machine
and on a GPU machine; the real NVML is read only by scripts/gpu-check.sh."""

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import interruptible
from paths import SUPPORT

from stackbench.host import powercap, telemetry
from stackbench.measure import summary
from stackbench.rehearsal.simgpu import HW_POWER_BRAKE, IDLE_USED_MIB, SW_POWER_CAP, SW_THERMAL, NvmlDouble


def gpus(**kw):
    return telemetry.NvmlGpus(NvmlDouble(**kw))


class Clock:
    """A hand-driven clock shared by the NVML test double and the sampler."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_units_are_converted_from_milliwatts_and_millijoules():
    clock = Clock()
    fake = NvmlDouble(count=1, clock=clock)
    clock.now += 2.0
    row = telemetry.NvmlGpus(fake).sample()[0]
    assert row["power_w"] == 250.5 and row["memory_used_mib"] == IDLE_USED_MIB
    assert row["energy_j"] == pytest.approx(1000 + 2 * 250.5) and row["enforced_limit_w"] == 300.0
    assert row["gpu_uuid"] == "GPU-fake-0" and row["throttle_reasons"] == 0  # 250.5 W under its 300 W limit


def test_constraints_are_read_in_watts():
    info = gpus(count=1).info[0]
    assert (info.min_limit_w, info.max_limit_w, info.default_limit_w) == (100, 350, 350)
    assert info.pci_bus_id == "00000000:41:00.0"


# -- which GPUs ------------------------------------------------------------------------------------
def selected(devices=None, count=2, environ=None, **kw):
    chosen = telemetry.select_gpus(devices, count, NvmlDouble(count=4, **kw), environ or {})
    return [i.index for i in chosen.info], chosen.source


def test_node_config_devices_by_index_or_uuid_win_over_the_environment():
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_JOB_GPUS": "0,1"}
    assert selected([2, 3], environ=env) == ([2, 3], "hardware.gpu.devices")
    assert selected(["GPU-fake-3", "GPU-fake-1"], environ=env) == ([3, 1], "hardware.gpu.devices")


def test_scheduler_allocation_before_cuda_visible_devices_which_slurm_renumbers():
    env = {"SLURM_JOB_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert selected(environ=env) == ([2, 3], "SLURM_JOB_GPUS")
    assert selected(environ={**env, "SLURM_STEP_GPUS": "1,3"}) == ([1, 3], "SLURM_STEP_GPUS")


def test_cuda_visible_devices_maps_through_the_pci_bus_order():
    # NVML enumerates 0..3 on buses 41, 42, 43, 44; reverse the buses so CUDA's PCI order differs.
    buses = [f"00000000:{b:02X}:00.0" for b in (0x44, 0x43, 0x42, 0x41)]
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert selected(environ=env, bus_ids=buses) == ([3, 2], "CUDA_VISIBLE_DEVICES")
    assert selected(environ={"CUDA_VISIBLE_DEVICES": "GPU-fake-2,GPU-fake-0"}) == ([2, 0], "CUDA_VISIBLE_DEVICES")


def test_cuda_indices_on_mixed_gpus_without_pci_order_are_refused():
    names = ["NVIDIA RTX A6000", "NVIDIA GeForce RTX 3090"] * 2
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES: index 1 cannot be mapped.*name them by UUID"):
        selected(environ={"CUDA_VISIBLE_DEVICES": "1,2"}, names=names)


def test_default_is_the_first_count_and_a_wrong_count_or_missing_gpu_is_named():
    assert selected(count=2) == ([0, 1], "the first 2")
    with pytest.raises(ValueError, match="SLURM_JOB_GPUS selects 3 GPUs but the node has hardware.gpu.count 2"):
        selected(environ={"SLURM_JOB_GPUS": "0,1,2"})
    with pytest.raises(ValueError, match=r"hardware.gpu.devices: '7' names no GPU here"):
        selected([7, 1])


def test_no_gpu_or_no_driver_gives_a_reason():
    assert telemetry.open_gpus(0) == (None, "no GPU on this node")
    assert telemetry.open_gpus(1, NvmlDouble(no_driver=True), environ={}) == (None, "NVML unavailable: Driver Not Loaded")
    found, why = telemetry.open_gpus(2, NvmlDouble(count=4), environ={})
    assert why is None and [i.uuid for i in found.info] == ["GPU-fake-0", "GPU-fake-1"]


# -- sampling and energy windows -------------------------------------------------------------------
class SteppedStop:
    """Stands in for the sampler thread's stop event: each wait it is asked for moves the hand-driven clock by
    that long at once, and after `waits` of them it says stop."""

    def __init__(self, clock: Clock, waits: int):
        self.clock, self.waits, self.asked = clock, waits, []

    def is_set(self) -> bool:
        return len(self.asked) >= self.waits

    def wait(self, timeout: float) -> bool:
        self.asked.append(timeout)
        self.clock.now += timeout
        return self.is_set()


def test_sampler_samples_every_half_second():
    clock = Clock()
    sampler = telemetry.Sampler(gpus(count=1), clock=clock)
    sampler._stop = SteppedStop(clock, waits=3)
    sampler._loop()  # the thread's body, run here on the hand-driven clock
    assert sampler._stop.asked == [0.5] * 3
    assert [row["t"] for row in sampler.rows] == [100.0, 100.5, 101.0]


def window_over(fake, clock, steps, between=None):
    """Open a window, take a sample every 0.5 s for `steps` steps (calling `between(step)` first), close it."""
    sampler = telemetry.Sampler(telemetry.NvmlGpus(fake), clock=clock)
    sampler.take()  # a sample before the window: must not count
    clock.now += 0.3
    window = sampler.open_window()
    for step in range(steps):
        clock.now += 0.5
        if between:
            between(step)
        sampler.take()
    clock.now += 0.2
    return sampler.close_window(window)


def test_energy_is_the_counter_difference_at_the_windows_own_edges():
    clock = Clock()
    fake = NvmlDouble(count=2, clock=clock)
    reading = window_over(fake, clock, steps=4)
    assert reading.duration_s == pytest.approx(2.2)
    assert reading.energy_j == pytest.approx(2 * 250.5 * 2.2, abs=0.01)  # both GPUs, edge to edge, not sample to sample
    assert reading.energy_source == "energy counter"
    assert reading.power_samples == 4 and reading.power_mean_w == pytest.approx(501.0)
    assert reading.gpu_uuids == ("GPU-fake-0", "GPU-fake-1") and reading.vram_peak_mib == 2 * IDLE_USED_MIB


def test_power_mean_and_p95_only_from_samples_inside_the_window():
    clock = Clock()
    fake = NvmlDouble(count=1, clock=clock)
    fake.power_mw = [900_000]  # the sample before the window is at 900 W

    def ramp(step):
        fake.power_mw = [(100 + 100 * step) * 1000]

    reading = window_over(fake, clock, steps=5, between=ramp)  # 100, 200, 300, 400, 500 W
    assert reading.power_mean_w == pytest.approx(300.0)
    assert reading.power_p95_w == pytest.approx(480.0)  # numpy linear percentile of the five


def test_a_counter_reset_falls_back_to_integrating_the_samples_and_says_so():
    clock = Clock()
    fake = NvmlDouble(count=1, clock=clock)

    def reset(step):
        if step == 2:
            fake.energy_offset_mj = [-10_000_000]  # driver reloaded: the counter starts again

    reading = window_over(fake, clock, steps=4, between=reset)
    assert reading.energy_source == "integrated 0.5 s power samples: energy counter went backwards (reset)"
    assert reading.energy_j == pytest.approx(250.5 * 1.5, abs=0.01)  # trapezoids over the 4 samples 0.5 s apart


def test_a_counter_reset_in_a_window_too_short_to_integrate_gives_no_energy_and_says_why():
    clock = Clock()
    fake = NvmlDouble(count=1, clock=clock)
    sampler = telemetry.Sampler(telemetry.NvmlGpus(fake), clock=clock)
    window = sampler.open_window()
    fake.energy_offset_mj = [-10_000_000]
    clock.now += 0.2  # one sample, taken at the close: nothing to integrate
    reading = sampler.close_window(window)
    assert reading.energy_j is None and reading.power_samples == 1
    assert reading.energy_source == "no energy figure: energy counter went backwards (reset), and fewer than 2 power samples to integrate"


def wait_for(condition, timeout_s: float = 10.0) -> bool:
    """Until the sampler thread has done what the test waits for (its state, not a guess at its timing)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_an_nvml_error_in_the_sampler_thread_is_recorded_and_reaches_the_window():
    fake = NvmlDouble(count=1)
    sampler = telemetry.Sampler(telemetry.NvmlGpus(fake), period_s=0.05)
    with sampler:
        window = sampler.open_window()
        assert wait_for(lambda: sampler.rows)  # sampled at least once while the GPU answered
        fake.fail_sampling = True
        assert wait_for(lambda: sampler.errors)  # the sampler thread met the error
        reading = sampler.close_window(window)
    assert reading.sampler_errors and reading.sampler_errors[0] == "NVML error while sampling: GPU is lost"
    assert reading.energy_source == "energy counter"  # the counter itself still reads


# -- power caps --------------------------------------------------------------------------------------
def capper_for(fake, tmp_path, **kw):
    return powercap.PowerCapper(telemetry.NvmlGpus(fake, **kw), state_dir=tmp_path, sleep=lambda s: None)


def state_of(tmp_path, uuid):
    return tmp_path / f"gpu-{uuid}.powercap.json"


def test_sweep_sets_only_the_selected_gpus_reads_back_and_restores(tmp_path):
    fake = NvmlDouble(count=4)
    capper = capper_for(fake, tmp_path, indices=[2, 3])
    with capper:
        for cap in (180, 220, 260):
            assert capper.apply(cap) == powercap.CapResult(cap, cap, applied=True)
            assert [fake.nvmlDeviceGetPowerManagementLimit(i) for i in range(4)] == [300_000, 300_000] + [cap * 1000] * 2
        assert sorted(p.name for p in tmp_path.glob("*.powercap.json")) == \
            ["gpu-GPU-fake-2.powercap.json", "gpu-GPU-fake-3.powercap.json"]
        assert json.loads(state_of(tmp_path, "GPU-fake-2").read_text())["limit_w"] == 300.0
    assert [fake.nvmlDeviceGetPowerManagementLimit(i) for i in range(4)] == [300_000] * 4
    assert {h for h, _ in fake.set_calls} == {2, 3}
    assert not list(tmp_path.glob("*.powercap.json"))


def test_restore_after_an_exception(tmp_path):
    fake = NvmlDouble(count=1)
    with pytest.raises(RuntimeError, match="cell crashed"):
        with capper_for(fake, tmp_path) as capper:
            capper.apply(200)
            raise RuntimeError("cell crashed")
    assert fake.nvmlDeviceGetPowerManagementLimit(0) == 300_000


def test_cap_outside_the_gpus_range_is_refused_before_any_change(tmp_path):
    fake = NvmlDouble(count=1)
    with pytest.raises(ValueError, match=r"power cap 400 W is outside GPU 0 \(NVIDIA GeForce RTX 3090\)'s range 100-350 W"):
        capper_for(fake, tmp_path).apply(400)
    assert fake.set_calls == []


def test_missing_permission_keeps_the_requested_cap_and_the_reason(tmp_path):
    result = capper_for(NvmlDouble(count=1, deny_set=True), tmp_path).apply(200)
    assert result == powercap.CapResult(200, 300.0, applied=False,
                                         reason="cannot set the power limit of GPU GPU-fake-0: Insufficient Permissions")


def test_a_cap_that_does_not_take_is_restored_before_it_is_reported(tmp_path):
    fake = NvmlDouble(count=2, enforce=False)
    result = capper_for(fake, tmp_path).apply(200)
    assert not result.applied and result.requested_w == 200 and result.enforced_w == 350.0
    assert result.reason == "power cap 200 W did not take: enforced [350.0, 350.0] W"
    assert [fake.nvmlDeviceGetPowerManagementLimit(i) for i in (0, 1)] == [300_000, 300_000]
    assert not list(tmp_path.glob("*.powercap.json"))


def test_a_leftover_state_is_restored_by_the_next_launch_taking_that_gpu(tmp_path):
    fake = NvmlDouble(count=2, state_path=tmp_path / "gpu.json", limit_mw=180_000)  # a run died with the caps at 180 W
    state_of(tmp_path, "GPU-fake-1").write_text('{"uuid": "GPU-fake-1", "limit_w": 300.0, "pid": 1}')
    with capper_for(fake, tmp_path, indices=[1]) as capper:
        assert [fake.nvmlDeviceGetPowerManagementLimit(i) for i in (0, 1)] == [180_000, 300_000]
        assert capper.leftovers_restored == {"GPU-fake-1": 300.0}
    assert not state_of(tmp_path, "GPU-fake-1").exists()


def test_a_leftover_on_another_gpu_neither_blocks_nor_is_touched(tmp_path):
    fake = NvmlDouble(count=2, state_path=tmp_path / "gpu.json", limit_mw=180_000)
    state_of(tmp_path, "GPU-fake-1").write_text('{"uuid": "GPU-fake-1", "limit_w": 300.0, "pid": 1}')
    with capper_for(fake, tmp_path, indices=[0]) as capper:
        assert capper.apply(200).applied
    assert [fake.nvmlDeviceGetPowerManagementLimit(i) for i in (0, 1)] == [180_000, 180_000]  # GPU 0's original
    assert state_of(tmp_path, "GPU-fake-1").exists() and not state_of(tmp_path, "GPU-fake-0").exists()


def test_a_state_already_recorded_is_the_original_not_the_limit_now(tmp_path):
    """The original of a capped GPU is the recorded one: a launch never takes another's cap for it."""
    fake = NvmlDouble(count=1, state_path=tmp_path / "gpu.json", limit_mw=200_000)
    capper = capper_for(fake, tmp_path)
    state_of(tmp_path, "GPU-fake-0").write_text('{"uuid": "GPU-fake-0", "limit_w": 350.0, "pid": 1}')
    capper.apply(250)
    capper.restore()
    assert fake.nvmlDeviceGetPowerManagementLimit(0) == 350_000


def test_a_malformed_state_is_named_with_what_to_do(tmp_path):
    state_of(tmp_path, "GPU-fake-0").write_text('{"uuid": "GPU-other", "limit_w": 350.0}')
    with pytest.raises(telemetry.TelemetryUnavailable, match="not a power-cap state of GPU GPU-fake-0.*remove the file"):
        capper_for(NvmlDouble(count=1), tmp_path).restore_leftover()


CHILD = textwrap.dedent("""
    import signal, sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from stackbench.rehearsal.simgpu import HW_POWER_BRAKE, IDLE_USED_MIB, SW_POWER_CAP, SW_THERMAL, NvmlDouble
    from stackbench.measure import sequencer
    from stackbench.host import powercap, telemetry
    signal.signal(signal.SIGTERM, sequencer._raise_interrupted)
    fake = NvmlDouble(count=2, state_path=Path({gpu!r}))
    with powercap.PowerCapper(telemetry.NvmlGpus(fake), state_dir=Path({state!r}), sleep=lambda s: None) as capper:
        capper.apply(220)
        print("capped", flush=True)
        time.sleep(60)
""")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_restore_on_sigint_and_sigterm(tmp_path, signum):
    gpu, state = tmp_path / "gpu.json", tmp_path / "states"
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=str(SUPPORT), gpu=str(gpu), state=str(state)))
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, preexec_fn=interruptible)
    assert child.stdout.readline().strip() == "capped"
    assert NvmlDouble(count=2, state_path=gpu).nvmlDeviceGetPowerManagementLimit(0) == 220_000
    child.send_signal(signum)
    child.wait(timeout=20)
    limits = NvmlDouble(count=2, state_path=gpu)
    assert [limits.nvmlDeviceGetPowerManagementLimit(i) for i in (0, 1)] == [300_000, 300_000]
    assert not list(state.glob("*.powercap.json"))


def test_a_window_shorter_than_the_sampling_period_still_has_a_power_sample():
    fake = NvmlDouble(count=1)
    sampler = telemetry.Sampler(telemetry.NvmlGpus(fake), period_s=3600)  # the thread samples once, at start
    with sampler:
        assert wait_for(lambda: sampler.rows)
        window = sampler.open_window()
        reading = sampler.close_window(window)
    assert reading.power_samples == 1 and reading.power_mean_w == 250.5


def test_energy_per_response_over_the_steady_window_is_its_energy_over_responses():
    # Two simulated GPUs at 250.5 W each for a 4 s steady window; 300 tokens arrived in it, 60 per response.
    clock = Clock()
    sampler = telemetry.Sampler(telemetry.NvmlGpus(NvmlDouble(count=2, clock=clock)), clock=clock)
    start = clock.now
    sampler.take()
    for _ in range(8):
        clock.now += 0.5
        sampler.take()
    figures = {f.metric: f for f in summary.steady_telemetry_figures([(start, clock.now, 300, sampler.rows)],
                                                                     tokens_per_response=60)}
    assert figures["energy_j_per_response_steady"].value == pytest.approx(2 * 250.5 * 4.0 / (300 / 60))
    assert figures["energy_j_per_response_steady"].unit == "J/response"
    assert figures["energy_j_per_token_steady"].value == pytest.approx(2 * 250.5 * 4.0 / 300)
    assert "energy_j_per_response_steady" not in {f.metric for f in summary.steady_telemetry_figures(
        [(start, clock.now, 300, sampler.rows)])}


def test_the_uncapped_cell_of_a_sweep_runs_at_the_limit_found_at_the_launchs_start(tmp_path):
    """A sweep's cells in plan order: uncapped, then each cap; a cell without a cap after a capped one (a retry)
    gets the launch's starting limit back, which the launch records beside NVML's default."""
    from types import SimpleNamespace

    from stackbench.measure import sequencer
    from stackbench.measure.runner import CellRunner

    fake = NvmlDouble(count=1, limit_mw=280_000)  # an owner's own limit, below the double's 350 W default
    with capper_for(fake, tmp_path) as capper:
        assert capper.found == {"GPU-fake-0": 280.0} and capper.gpus.info[0].default_limit_w == 350.0
        runner = CellRunner("http://x", None, None, None, capper=capper)
        runner.apply_cap(SimpleNamespace(power_cap_w=200.0))
        assert fake.nvmlDeviceGetPowerManagementLimit(0) == 200_000
        assert runner.apply_cap(SimpleNamespace(power_cap_w=None)) is None
        assert fake.nvmlDeviceGetPowerManagementLimit(0) == 280_000
        launch = SimpleNamespace(capper=capper, rows=SimpleNamespace(fact_row=lambda m, v, note: {"metric": m, "value": v}))
        rows = sequencer.LaunchRun.limit_rows(launch)
        assert {r["metric"]: r["value"] for r in rows} == {"power_limit_found_w": 280.0, "power_limit_default_w": 350.0}


def test_every_power_sweep_has_its_uncapped_cell_first():
    from paths import ROOT

    from stackbench.plan import expand, launchspec

    _, (node,) = expand.load_plan(ROOT, {"nodes": ["2x3090-nvlink"]})
    (launch,) = [l for l in node.launches if l.power_caps_w]  # the one configuration seed 002 swept
    caps = list(dict.fromkeys(c.power_cap_w for c in launchspec.cells_of(node, launch)))
    assert caps == [None, 180, 220, 260, 300]


def clock_reading(fake, clock, capped=False):
    """A 2 s window over `fake`; its figures and the cell's slowdown note."""
    reading = window_over(fake, clock, steps=4)
    figures = summary.telemetry_figures(reading, 100)
    return {f.metric: f for f in figures}, summary.slowdown_note(figures, capped)


def test_a_thermally_slowed_gpu_is_a_share_a_clock_a_temperature_and_a_flag():
    clock = Clock()
    fake = NvmlDouble(count=2, clock=clock)
    fake.throttle(1, SW_THERMAL)
    figures, note = clock_reading(fake, clock)
    assert figures["clock_event_share_thermal"].value == 1.0 and "GPU-fake-0 0, GPU-fake-1 1" in figures["clock_event_share_thermal"].note
    assert figures["clock_event_share_hw_slowdown"].value == 0 and figures["clock_event_share_power_brake"].value == 0
    assert figures["sm_clock_mhz"].value == 1200 and figures["gpu_temp_max_c"].value == 90  # the slowed GPU's
    assert note.startswith("GPU SLOWED") and "thermal in 100% of samples" in note


def test_the_sw_power_cap_on_a_capped_cell_is_expected_not_a_flag(tmp_path):
    clock = Clock()
    fake = NvmlDouble(count=1, clock=clock, demand_mw=300_000, state_path=tmp_path / "gpu.json")
    fake.nvmlDeviceSetPowerManagementLimit(0, 200_000)
    figures, note = clock_reading(fake, clock, capped=True)
    assert figures["clock_event_share_sw_power_cap"].value == 1.0 and figures["clock_event_share_thermal"].value == 0
    assert note == "SW power cap held the clocks in 100% of samples (the cell's own cap)"
    fake.throttle(0, SW_POWER_CAP | HW_POWER_BRAKE)  # a brake beside the cap is not the cap's doing
    note = clock_reading(fake, clock, capped=True)[1]
    assert note.startswith("GPU SLOWED") and "power brake in 100% of samples" in note


def test_an_unthrottled_uncapped_gpu_has_no_note():
    clock = Clock()
    figures, note = clock_reading(NvmlDouble(count=1, clock=clock), clock)
    assert note is None and figures["clock_event_share_sw_power_cap"].value == 0 and figures["sm_clock_mhz"].value == 1695


def test_energy_per_token_is_the_counters_truth_within_1pct_steady_and_whole_window_with_the_sampled_check(tmp_path):
    """A simulated host whose draw changes (a cap set mid-window): the counter interpolated at edges that fall
    between samples equals the double's own counter read at those instants; the sampled integral sits beside it."""
    clock = Clock()
    fake = NvmlDouble(count=3, clock=clock, demand_mw=300_000, state_path=tmp_path / "gpu.json")
    gpus = telemetry.NvmlGpus(fake, indices=[0, 1])  # GPU 2 is not the launch's: outside its energy
    sampler = telemetry.Sampler(gpus, clock=clock)
    sampler.take()
    window = sampler.open_window()
    truth = {}
    for step in range(1, 21):
        clock.now += 0.5
        if step == 3:
            clock.now -= 0.2
            truth["start"] = sum(fake.nvmlDeviceGetTotalEnergyConsumption(h) for h in (0, 1)) / 1000
            steady_start = clock.now
            clock.now += 0.2
        if step == 10:
            fake.nvmlDeviceSetPowerManagementLimit(0, 150_000)  # the draw halves on GPU 0
        if step == 17:
            clock.now -= 0.3
            truth["end"] = sum(fake.nvmlDeviceGetTotalEnergyConsumption(h) for h in (0, 1)) / 1000
            steady_end = clock.now
            clock.now += 0.3
        sampler.take()
    whole_truth_end = sum(fake.nvmlDeviceGetTotalEnergyConsumption(h) for h in (0, 1)) / 1000
    reading = sampler.close_window(window)
    whole_truth = whole_truth_end - sum(window.energy_mj.values()) / 1000
    assert reading.energy_j == pytest.approx(whole_truth, rel=0.01) and reading.energy_sampled_j == pytest.approx(whole_truth, rel=0.05)
    whole = {f.metric: f for f in summary.telemetry_figures(reading, 1000)}["energy_j_per_token"]
    assert whole.value == pytest.approx(whole_truth / 1000, rel=0.01)
    assert "GPU-fake-0, GPU-fake-1" in whole.note and "GPU-fake-2" not in whole.note and "sampled power integral" in whole.note
    steady = {f.metric: f for f in summary.steady_telemetry_figures([(steady_start, steady_end, 500, sampler.rows)])}
    assert steady["energy_j_per_token_steady"].value == pytest.approx((truth["end"] - truth["start"]) / 500, rel=0.01)
    assert "energy counter delta" in steady["energy_j_per_token_steady"].note and "sampled power integral" in steady["energy_j_per_token_steady"].note


def test_a_sample_gap_over_two_seconds_gives_no_energy_figure_and_says_why():
    clock = Clock()
    sampler = telemetry.Sampler(telemetry.NvmlGpus(NvmlDouble(count=1, clock=clock)), clock=clock)
    sampler.take()
    window = sampler.open_window()
    clock.now += 0.5
    sampler.take()
    clock.now += 2.5  # the sampler stalled
    sampler.take()
    reading = sampler.close_window(window)
    figure = {f.metric: f for f in summary.telemetry_figures(reading, 100)}["energy_j_per_token"]
    assert figure.value is None and "2.5 s gap between NVML samples" in figure.note
    steady = summary.steady_telemetry_figures([(window.start, clock.now, 100, sampler.rows)])
    assert steady[0].value is None and "2.5 s gap between NVML samples" in steady[0].note


def test_a_cap_at_or_above_the_stock_cells_draw_is_not_swept_and_stays_a_result(tmp_path):
    """Issue 60: a cap is swept only below what the launch's stock cell of the same load drew per GPU (plus
    CAP_BIND_MARGIN, issue 67); at or above it the cap could not bind, so the cell is a row without a figure (status
    not_swept, why), never retried. Each round keeps the first round's verdict: tests/unit/measure/test_sequencer.py."""
    from types import SimpleNamespace

    from paths import ROOT

    from stackbench.measure import sequencer
    from stackbench.measure.cellstore import CellStore
    from stackbench.plan import expand, launchspec
    from stackbench.results.store import NOT_SWEPT

    cfg, (node,) = expand.load_plan(ROOT, {"nodes": ["2x3090-nvlink"]})
    (launch,) = [l for l in node.launches if l.power_caps_w]  # 180/220/260/300 W
    spec = launchspec.build(cfg, node, launch)
    stock = next(c for c in spec.cells if c.power_cap_w is None and c.concurrency == 1 and c.workload.kind == "single")
    capped = {c.power_cap_w: c for c in spec.cells if c.power_cap_w and (c.workload, c.concurrency) == (stock.workload, 1)}
    run = SimpleNamespace(spec=spec, store=CellStore(spec, tmp_path))
    assert sequencer.LaunchRun._cap_above_draw(run, capped[260]) is None  # no stock draw measured: swept as planned
    run.store.write(stock, [{"metric": "power_w_per_gpu", "value": 240.0, "status": "ok"},
                            {"metric": "decode_tps", "value": 50.0, "status": "ok"}], [])
    assert sequencer.LaunchRun._cap_above_draw(run, capped[260]) is None  # 8% above the draw: a transient binds it
    why = sequencer.LaunchRun._cap_above_draw(run, capped[300])
    assert why == (f"not swept: cap 300 W is at or above the stock cell's measured draw 240 W per GPU ({stock.key}) "
                   "+ 15%, where it could not bind")
    run.store.write(capped[300], [{"metric": "cell_status", "status": NOT_SWEPT, "reason": why}], [])
    assert run.store.status(capped[300]) == NOT_SWEPT and capped[300] not in run.store.todo()
