"""The idle check and wait (host/gpustate.py) against the NVML test double (stackbench.rehearsal.simgpu)."""

import time

from stackbench.host import gpustate, telemetry
from stackbench.rehearsal.simgpu import IDLE_USED_MIB, NvmlDouble


def test_a_gpu_with_a_process_or_memory_over_the_threshold_is_busy_and_named():
    fake = NvmlDouble(count=3)
    fake.add_process(1, 4242, 20480, until=time.time() + 3600)
    gpus = telemetry.NvmlGpus(fake)
    assert gpustate.busy(gpus, 1024) == [f"GPU 1 (GPU-fake-1): pid 4242 holds 20480 MiB; {20480 + IDLE_USED_MIB} MiB used "
                                         "(idle at <= 1024 MiB)"]
    assert gpustate.busy(gpus, IDLE_USED_MIB - 1)[0].startswith("GPU 0 (GPU-fake-0): no compute process; 300 MiB used")


def test_the_wait_polls_until_idle_or_its_limit():
    now = [0.0]
    fake = NvmlDouble(count=1)
    fake.add_process(0, 4242, 8000, until=time.time() + 3600)
    gpus, told = telemetry.NvmlGpus(fake), []

    def sleep(seconds):
        now[0] += seconds
        if now[0] >= 3:
            fake.release(4242, after_s=0)  # freed three seconds in

    seconds, still = gpustate.wait_idle(gpus, 1024, 600, told.append, poll_s=1, clock=lambda: now[0], sleep=sleep)
    assert (seconds, still) == (3.0, []) and len(told) == 1 and "pid 4242 holds 8000 MiB" in told[0]
    fake.add_process(0, 4243, 8000, until=time.time() + 3600)
    seconds, still = gpustate.wait_idle(gpus, 1024, 5, poll_s=2, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert seconds == 5 and "pid 4243" in still[0]
    assert gpustate.wait_idle(telemetry.NvmlGpus(NvmlDouble(count=1)), 1024, 5)[0] == 0.0
