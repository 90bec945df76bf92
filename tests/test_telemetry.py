"""Telemetry and power caps against a test double of NVML (tests/nvml_double.py): units, windows,
the sweep, restore on every exit path, constraint errors and missing permissions. The real NVML is
only read, never changed, and only where a GPU is lent."""

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nvml_double import FakeNvml
from stackbench import telemetry


def gpus(**kw):
    return telemetry.NvmlGpus(FakeNvml(**kw))


def test_units_are_converted_from_milliwatts_and_millijoules():
    row = gpus(count=1).sample()[0]
    assert row["power_w"] == 250.5 and row["memory_used_mib"] == 20 * 1024
    assert row["energy_j"] == pytest.approx(1500.0) and row["enforced_limit_w"] == 300.0
    assert row["gpu_uuid"] == "GPU-fake-0" and row["throttle_reasons"] == 0x4


def test_constraints_are_read_in_watts():
    info = gpus(count=1).info[0]
    assert (info.min_limit_w, info.max_limit_w, info.default_limit_w) == (100, 350, 350)


def test_window_summary_power_energy_per_token_and_peak_vram():
    rows = [{"t": t, "gpu_uuid": g, "power_w": p, "energy_j": e, "memory_used_mib": m}
            for t, g, p, e, m in [(0, "a", 200, 1000, 100), (0, "b", 100, 500, 50),
                                  (1, "a", 220, 1200, 120), (1, "b", 110, 600, 60)]]
    out = telemetry.summarise_window(rows, output_tokens=100)
    assert out["power_w"] == pytest.approx(315) and out["power_p95_w"] == 330
    assert out["energy_j_per_token"] == pytest.approx(3.0)  # (200 + 100) J over 100 tokens
    assert out["vram_mib"] == 180


def test_sampler_samples_every_half_second():
    sampler = telemetry.Sampler(gpus(count=1))
    with sampler:
        time.sleep(1.2)
    assert 2 <= len(sampler.rows) <= 4


def test_sweep_sets_every_gpu_reads_back_and_restores(tmp_path):
    fake = FakeNvml(count=2)
    capper = telemetry.PowerCapper(telemetry.NvmlGpus(fake), state_file=tmp_path / "state.json", sleep=lambda s: None)
    with capper:
        for cap in (180, 220, 260):
            assert capper.apply(cap) == cap
            assert [fake.nvmlDeviceGetPowerManagementLimit(i) for i in (0, 1)] == [cap * 1000] * 2
        assert (tmp_path / "state.json").exists()
    assert [fake.nvmlDeviceGetPowerManagementLimit(i) for i in (0, 1)] == [300_000, 300_000]
    assert not (tmp_path / "state.json").exists()


def test_restore_after_an_exception(tmp_path):
    fake = FakeNvml(count=1)
    with pytest.raises(RuntimeError, match="cell crashed"):
        with telemetry.PowerCapper(telemetry.NvmlGpus(fake), state_file=tmp_path / "s.json", sleep=lambda s: None) as capper:
            capper.apply(200)
            raise RuntimeError("cell crashed")
    assert fake.nvmlDeviceGetPowerManagementLimit(0) == 300_000


def test_cap_outside_the_gpus_range_is_refused_before_any_change(tmp_path):
    fake = FakeNvml(count=1)
    capper = telemetry.PowerCapper(telemetry.NvmlGpus(fake), state_file=tmp_path / "s.json", sleep=lambda s: None)
    with pytest.raises(ValueError, match=r"power cap 400 W is outside GPU 0 \(NVIDIA GeForce RTX 3090\)'s range 100-350 W"):
        capper.apply(400)
    assert fake.set_calls == []


def test_missing_permission_is_reported_not_invented(tmp_path):
    capper = telemetry.PowerCapper(gpus(count=1, deny_set=True), state_file=tmp_path / "s.json", sleep=lambda s: None)
    with pytest.raises(telemetry.TelemetryUnavailable, match="cannot set the power limit of GPU 0: Insufficient Permissions"):
        capper.apply(200)


def test_no_gpu_or_no_nvml_gives_a_reason():
    assert telemetry.open_gpus(0) == (None, "no GPU on this node")
    found, why = telemetry.open_gpus(1)  # the real pynvml on this machine: no driver library here
    if found is None:
        assert why.startswith("NVML unavailable:")


def test_a_leftover_state_file_is_restored_at_the_next_start(tmp_path):
    state_gpu = tmp_path / "gpu.json"
    fake = FakeNvml(count=1, state_path=state_gpu, limit_mw=180_000)  # a run died with the cap at 180 W
    (tmp_path / "s.json").write_text('{"pid": 1, "limits_w": {"0": 300.0}, "uuids": ["GPU-fake-0"]}')
    with telemetry.PowerCapper(telemetry.NvmlGpus(fake), state_file=tmp_path / "s.json", sleep=lambda s: None):
        assert fake.nvmlDeviceGetPowerManagementLimit(0) == 300_000
    assert not (tmp_path / "s.json").exists()


CHILD = textwrap.dedent("""
    import signal, sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from nvml_double import FakeNvml
    from stackbench import measure, telemetry
    signal.signal(signal.SIGTERM, measure._raise_interrupted)
    fake = FakeNvml(count=2, state_path=Path({gpu!r}))
    with telemetry.PowerCapper(telemetry.NvmlGpus(fake), state_file=Path({state!r}), sleep=lambda s: None) as capper:
        capper.apply(220)
        print("capped", flush=True)
        time.sleep(60)
""")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_restore_on_sigint_and_sigterm(tmp_path, signum):
    gpu, state = tmp_path / "gpu.json", tmp_path / "state.json"
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=str(Path(__file__).parent), gpu=str(gpu), state=str(state)))
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "capped"
    assert FakeNvml(count=2, state_path=gpu).nvmlDeviceGetPowerManagementLimit(0) == 220_000
    child.send_signal(signum)
    child.wait(timeout=20)
    limits = FakeNvml(count=2, state_path=gpu)
    assert [limits.nvmlDeviceGetPowerManagementLimit(i) for i in (0, 1)] == [300_000, 300_000]
    assert not state.exists()
