"""Facts about the machine a launch runs on: OS, CPU, the host memory bandwidth (the CPU roofline), and the
version of this tool that measures there."""

from __future__ import annotations

import functools
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path


def host_os() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.platform()


@functools.cache
def stackbench_version() -> str:
    """This package's version and the git commit of the checkout it runs from, `+dirty` when tracked files
    differ from it ("0.1.0+3f2a9c1d2e4b+dirty"); `+nogit` outside a git checkout. Read once per process:
    every row of a run names the code that measured it."""
    try:
        version = metadata.version("stackbench")
    except metadata.PackageNotFoundError:
        version = "unknown"
    here = Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(here), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return f"{version}+nogit"
    # Untracked files are left out: a checkout's symlinked .venv or data would mark every tree dirty.
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"{version}+{commit[:12]}" + ("+dirty" if dirty else "")


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
