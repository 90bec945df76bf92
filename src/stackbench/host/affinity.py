"""Where the measuring process and the server run on the host's cores (node `hardware.client_cpus`): the client,
its telemetry sampler and the pipeline on their own cores, the server on the rest. On a small CPU host the
server's threads and the client otherwise take turns on the same cores, and a llama.cpp thread pool waits at
each barrier for its slowest thread: a launch-to-launch spread that repeats cannot remove (docs/benchmarks.md
measured it before and after). On a GPU node it keeps the client off the cores the server's scheduler uses."""

from __future__ import annotations

import os

import psutil


def server_cpus(client_cpus: tuple[int, ...]) -> set[int]:
    """The cores left to the server: every core this process may use but the client's."""
    return set(os.sched_getaffinity(0)) - set(client_cpus)


def pin_self(cpus: set[int]) -> None:
    """This process (and the threads it starts from now on) on `cpus`."""
    os.sched_setaffinity(0, cpus)


def pin_tree(pid: int, cpus: set[int]) -> int:
    """Every thread of process `pid` and of its descendants on `cpus` (a server's thread pool exists once it is
    ready); returns how many threads were pinned. Threads that end meanwhile are skipped."""
    pinned = 0
    try:
        processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for process in processes:
        try:
            threads = process.threads()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for thread in threads:
            try:
                os.sched_setaffinity(thread.id, cpus)
                pinned += 1
            except (ProcessLookupError, PermissionError):
                continue
    return pinned
