"""Facts about the machine a launch runs on: OS, CPU, and the host memory bandwidth (the CPU roofline)."""

from __future__ import annotations

import platform
import time
from pathlib import Path


def host_os() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.platform()


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def host_memory_bandwidth_gbs(size_mib: int = 256, repeats: int = 5) -> float:
    """Host memory bandwidth measured here: a large array copy reads and writes every byte once."""
    import numpy as np

    src = np.ones(size_mib * 2**20 // 8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.nbytes / best / 1e9
