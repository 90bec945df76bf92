"""One host, several launches: GPU locks between processes, per-GPU cap state, leftover servers.

Launches are child processes running the same composition LaunchRun uses (GpuLocks, then PowerCapper on
the NVML test double, tests/nvml_double.py, whose GPU state lives in a file so every process sees the
same GPUs). Synchronisation is by handshake on the children's stdin and stdout, never by sleeping.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from nvml_double import FakeNvml
from paths import SUPPORT

from stackbench.host import locks

LAUNCH = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from nvml_double import FakeNvml
    from stackbench.host import locks
    from stackbench.host import powercap, telemetry
    name, indices = sys.argv[1], [int(i) for i in sys.argv[2].split(",")]
    lock_dir, nvml_state = Path(sys.argv[3]), Path(sys.argv[4])
    fake = FakeNvml(count=4, state_path=nvml_state)
    gpus = telemetry.NvmlGpus(fake, indices=indices)
    say = lambda text: print(text, flush=True)
    holder = locks.Holder("box", name, __import__("os").getpid())
    with locks.GpuLocks([i.uuid for i in gpus.info], lock_dir, holder, on_wait=lambda t: say("WAIT " + t), poll_s=0.05):
        say(f"LOCKED {{time.monotonic()}}")
        with powercap.PowerCapper(gpus, lock_dir, sleep=lambda s: None) as capper:
            capper.apply(200)
            say("CAPPED " + ",".join(str(fake.nvmlDeviceGetPowerManagementLimit(i)) for i in indices))
            sys.stdin.readline()  # the test says when this launch ends
        say(f"RELEASED {{time.monotonic()}}")
""")


def start_launch(tmp_path, name: str, indices: str, nvml_state: Path) -> subprocess.Popen:
    script = tmp_path / "launch.py"
    script.write_text(LAUNCH.format(tests=str(SUPPORT)))
    return subprocess.Popen([sys.executable, str(script), name, indices, str(tmp_path / "locks"), str(nvml_state)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def said(proc: subprocess.Popen) -> tuple[str, str]:
    word, _, rest = proc.stdout.readline().strip().partition(" ")
    return word, rest


def finish(proc: subprocess.Popen) -> float:
    proc.stdin.write("done\n")
    proc.stdin.flush()
    word, rest = said(proc)
    assert word == "RELEASED"
    proc.wait(timeout=20)
    return float(rest)


def limits(nvml_state: Path) -> list[int]:
    fake = FakeNvml(count=4, state_path=nvml_state)
    return [fake.nvmlDeviceGetPowerManagementLimit(i) for i in range(4)]


def test_launches_on_overlapping_gpus_never_overlap_and_every_limit_ends_at_its_original(tmp_path):
    """Seed 001's box as two node files: tp4 on GPUs 0-3, tp2 on GPUs 2-3, started together."""
    nvml_state = tmp_path / "gpus.json"
    FakeNvml(count=4, state_path=nvml_state)
    tp2 = start_launch(tmp_path, "tp2", "2,3", nvml_state)
    assert said(tp2)[0] == "LOCKED"
    assert said(tp2) == ("CAPPED", "200000,200000")
    tp4 = start_launch(tmp_path, "tp4", "0,1,2,3", nvml_state)
    word, waiting = said(tp4)
    assert word == "WAIT"
    assert waiting == f"waiting for GPU GPU-fake-2: held by node box, launch tp2, pid {tp2.pid}"
    released = finish(tp2)
    word, locked = said(tp4)
    assert word == "LOCKED" and float(locked) >= released
    # tp4 read GPUs 2-3's original limits after tp2 restored them, not tp2's caps.
    assert said(tp4) == ("CAPPED", "200000,200000,200000,200000")
    finish(tp4)
    assert limits(nvml_state) == [300_000] * 4
    assert not list((tmp_path / "locks").glob("*.powercap.json"))


def test_launches_on_disjoint_gpus_run_side_by_side(tmp_path):
    # Separate state files: the test double's file is one JSON for all GPUs, and two writers on disjoint
    # GPUs would race on it (a real driver has no such file).
    first = start_launch(tmp_path, "a", "0,1", tmp_path / "gpus-a.json")
    assert said(first)[0] == "LOCKED"
    second = start_launch(tmp_path, "b", "2,3", tmp_path / "gpus-b.json")
    assert said(second)[0] == "LOCKED"  # not WAIT: while the first holds its GPUs
    for proc in (first, second):
        assert said(proc)[0] == "CAPPED"
        finish(proc)


def test_a_lock_of_a_killed_launch_never_blocks(tmp_path):
    nvml_state = tmp_path / "gpus.json"
    dead = start_launch(tmp_path, "dead", "0", nvml_state)
    assert said(dead)[0] == "LOCKED" and said(dead)[0] == "CAPPED"
    dead.kill()
    dead.wait(timeout=10)
    lock_file = tmp_path / "locks/gpu-GPU-fake-0.lock"
    assert json.loads(lock_file.read_text())["pid"] == dead.pid  # the file still names the dead holder

    def never(text):
        raise AssertionError(f"blocked by a dead launch: {text}")

    with locks.GpuLocks(["GPU-fake-0"], tmp_path / "locks", locks.Holder("box", "next", os.getpid()), never):
        assert json.loads(lock_file.read_text())["launch"] == "next"
    assert lock_file.read_text() == ""  # released: nobody named


# -- leftover servers -----------------------------------------------------------------------------------
def orphan_server() -> subprocess.Popen:
    """A stand-in server process in its own session, as launchers start servers."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)


def test_a_leftover_that_is_verifiably_ours_is_stopped_and_said(tmp_path):
    server = orphan_server()
    record = tmp_path / "server.json"
    argv = [sys.executable, "-c", "import time; time.sleep(120)"]
    locks.ServerRecord.of(server.pid, argv, "box", "llamacpp--nospec").write(record)
    what = locks.stop_leftover(record)
    assert what.startswith(f"stopped a leftover server of box/llamacpp--nospec (pid {server.pid}:")
    assert not psutil.pid_exists(server.pid)  # reaped: psutil waited for it
    assert not record.exists()


def test_a_record_whose_pid_is_another_process_stops_nothing(tmp_path):
    server = orphan_server()
    try:
        record = tmp_path / "server.json"
        argv = [sys.executable, "-c", "import time; time.sleep(120)"]
        real = locks.ServerRecord.of(server.pid, argv, "box", "l")
        # Same pid and command but another start time: the pid was reused by a process that is not ours.
        locks.ServerRecord(real.pid, real.create_time - 100, real.argv, "box", "l").write(record)
        assert locks.stop_leftover(record) is None
        locks.ServerRecord(real.pid, real.create_time, ("/usr/bin/other-server",), "box", "l").write(record)
        assert locks.stop_leftover(record) is None
        assert server.poll() is None and not record.exists()
    finally:
        server.kill()
        server.wait()


def test_a_record_of_a_dead_server_is_dropped(tmp_path):
    server = orphan_server()
    record = tmp_path / "server.json"
    locks.ServerRecord.of(server.pid, server.args, "box", "l").write(record)
    server.kill()
    server.wait()
    assert locks.stop_leftover(record) is None and not record.exists()


@pytest.mark.parametrize("override", [None, "node", "env"])
def test_the_lock_folder_is_per_host_unless_overridden(monkeypatch, override):
    monkeypatch.delenv("STACKBENCH_LOCK_DIR", raising=False)
    if override == "env":
        monkeypatch.setenv("STACKBENCH_LOCK_DIR", "/tmp/env-locks")
    node = "/srv/locks" if override else None
    expected = {None: Path("/var/tmp/stackbench-locks"), "node": Path("/srv/locks"), "env": Path("/tmp/env-locks")}
    assert locks.lock_dir(node) == expected[override]
