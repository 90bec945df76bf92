"""Where the measuring process and the server run on the host's cores (node `hardware.client_cpus`): the client,
its telemetry sampler and the pipeline on their own cores, the server on the rest. On a small CPU host the
server's threads and the client otherwise take turns on the same cores, and a llama.cpp thread pool waits at
each barrier for its slowest thread: a launch-to-launch spread that repeats cannot remove (docs/benchmarks.md
measured it before and after). On a GPU node it keeps the client off the cores the server's scheduler uses."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import psutil


def split(client_cpus: tuple[int, ...]) -> set[int]:
    """The cores left to the server: every core this process may use but the client's. ValueError where a client
    core is not one this process may use, or none is left to the server."""
    usable = set(os.sched_getaffinity(0))
    if not set(client_cpus) <= usable:
        raise ValueError(f"{sorted(client_cpus)} are not all among the cores this process may use, {sorted(usable)}")
    if not usable - set(client_cpus):
        raise ValueError(f"{sorted(client_cpus)} leave the server none of the cores this process may use, {sorted(usable)}")
    return usable - set(client_cpus)


@contextlib.contextmanager
def pinned_self(cpus: set[int]) -> Iterator[None]:
    """This process (and the threads it starts meanwhile) on `cpus`, then back on the cores it had: a caller in
    the same process (a test, a notebook) must not inherit the client's cores."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


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
            except OSError:  # the thread ended (ESRCH), or is not ours to move (EPERM)
                continue
    return pinned
