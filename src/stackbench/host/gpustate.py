"""Whether a launch's GPUs are idle: before a launch (nothing is measured on a GPU another process holds) and
after a server stops (the next launch on those GPUs starts only once its memory is back).

This tool's GPU locks (host/locks.py) only see its own launches; another user's job, or a previous server's
memory the driver has not freed yet, shows only in NVML: nvmlDeviceGetComputeRunningProcesses and
nvmlDeviceGetMemoryInfo, read through telemetry.NvmlGpus. A GPU is idle when it runs no compute process and
its used memory is at or under the node's gpu_idle.max_used_mib (the driver's own use is a few hundred MiB).
"""

from __future__ import annotations

import time

from stackbench.host.telemetry import NvmlGpus

POLL_S = 1.0


def busy(gpus: NvmlGpus, max_used_mib: float) -> list[str]:
    """One description per GPU of `gpus` that is not idle, naming it, the processes on it and the memory held."""
    used, processes = gpus.memory_used_mib(), gpus.processes()
    found = []
    for info in gpus.info:
        on_it = processes[info.uuid]
        if not on_it and used[info.uuid] <= max_used_mib:
            continue
        held = ", ".join(f"pid {pid} holds {mib:.0f} MiB" if mib is not None else f"pid {pid}" for pid, mib in on_it)
        found.append(f"GPU {info.index} ({info.uuid}): {held or 'no compute process'}; {used[info.uuid]:.0f} MiB used "
                     f"(idle at <= {max_used_mib:g} MiB)")
    return found


def wait_idle(gpus: NvmlGpus, max_used_mib: float, wait_s: float, on_wait=None, poll_s: float = POLL_S,
              clock=time.monotonic, sleep=time.sleep) -> tuple[float, list[str]]:
    """Poll until every GPU is idle or `wait_s` has passed: (seconds waited, the GPUs still busy then).
    `on_wait` is told, once, what is being waited for. GPUs idle at the first look took 0 s."""
    start, waited = clock(), 0.0
    while True:
        found = busy(gpus, max_used_mib)
        if not found or waited >= wait_s:
            return waited, found
        if on_wait is not None:
            on_wait(f"waiting up to {wait_s:g} s for busy GPUs: {'; '.join(found)}")
            on_wait = None
        sleep(min(poll_s, wait_s - waited))
        waited = clock() - start
