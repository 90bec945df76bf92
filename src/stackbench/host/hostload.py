"""Whether the host's CPUs are free for a launch: checked before every server start and watched during every
cell, as host/gpustate.py checks its GPUs (docs/host-state.md).

On a CPU node the CPUs are the engine's compute; on a GPU node they run the client and the server's
scheduler. Another workload on them slows the stack without any GPU seeing it, so the share of the host's
CPU time spent OUTSIDE the launch is measured, from psutil's reading of /proc:

- the host's busy CPU time (psutil.cpu_times: user + nice + system + steal; IRQ time serves every process
  and is left out), which counts every process, short-lived ones included;
- minus the CPU time of the processes inside the launch: this process and its descendants (the client,
  a server it started), the server's own tree found by its listening port (a container's engine, an
  external server on this host), and this process's ancestors (the measure job's shell, Snakemake, the
  login that started it);
- over wall time x the host's logical cores: 1.0 is every core busy outside the launch. Where this process may
  use only some CPUs (a SLURM job's cpuset, taskset), those CPUs' counters and cores, and only the processes
  that may run on them.

The busiest outside processes are named with their own share. What no live process accounts for ran in
processes that exited between two looks: it is charged to the outside parents that reaped them (a `make`
stands for the compilers it ran), the rest named as such, and the hypervisor's steal by that name.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

# One look a second: a look reads every process's /proc/<pid>/stat (about 6 ms for 100 processes here, more on
# a big host), in the client's process, so a faster pace would take that much more of its GIL.
PERIOD_S = 1.0
BUSIEST = 5  # outside processes named in a reason
NAMED_AT = 0.01  # an outside process is named from this share of the host's cores up
STEAL = "hypervisor steal"
EXITED = "processes that exited"


@dataclass(frozen=True)
class Proc:
    name: str
    created: float  # psutil create_time: tells a reused pid from the process seen before
    own_s: float  # user + system CPU seconds of the process itself
    reaped_s: float  # CPU seconds of its children it has waited for
    ppid: int


@dataclass(frozen=True)
class Look:
    """One reading of the host: its CPU counters and every readable process."""

    t: float  # the sampler's clock (monotonic)
    busy_s: float  # host CPU seconds busy since boot, steal included
    steal_s: float
    load1: float  # the 1-minute load average
    procs: dict[int, Proc]


def look(clock: Callable[[], float] = time.monotonic, cpus: frozenset[int] | None = None) -> Look:
    """Read the host now (psutil). With `cpus` (this process may run on these only: a SLURM job's cpuset,
    taskset), the counters of those CPUs, and only the processes that may run on one of them."""
    times = psutil.cpu_times()
    if cpus is not None:
        per_cpu = psutil.cpu_times(percpu=True)  # one per online CPU, in CPU order
        times = type(times)(*(sum(values) for values in zip(*(per_cpu[i] for i in cpus if i < len(per_cpu)))))
    steal = getattr(times, "steal", 0.0)
    procs = {}
    for p in psutil.process_iter(["name", "create_time", "cpu_times", "ppid", *(["cpu_affinity"] if cpus else [])]):
        info = p.info
        cpu = info["cpu_times"]
        if cpu is None or info["create_time"] is None:  # gone, or not readable
            continue
        if cpus is not None and info["cpu_affinity"] and cpus.isdisjoint(info["cpu_affinity"]):
            continue  # it never runs on this launch's CPUs
        procs[p.pid] = Proc(info["name"] or "?", info["create_time"], cpu.user + cpu.system,
                            getattr(cpu, "children_user", 0.0) + getattr(cpu, "children_system", 0.0), info["ppid"] or 0)
    return Look(clock(), times.user + times.nice + times.system + steal, steal, os.getloadavg()[0], procs)


def inside(procs: dict[int, Proc], roots: Iterable[int], me: int) -> set[int]:
    """The pids inside the launch: every root and its descendants, and `me`'s ancestors (not their other children)."""
    children: dict[int, list[int]] = {}
    for pid, proc in procs.items():
        children.setdefault(proc.ppid, []).append(pid)
    found: set[int] = set()
    stack = [pid for pid in roots if pid in procs]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack += children.get(pid, [])
    pid = me
    while pid in procs and pid > 0:
        found.add(pid)
        pid = procs[pid].ppid if procs[pid].ppid != pid else 0
    return found


@dataclass(frozen=True)
class Interval:
    """What the host did between two looks: CPU seconds outside and inside the launch, per outside process."""

    start: float
    end: float
    outside_s: float
    inside_s: float
    by_process: dict[str, float]  # "name (pid N)", STEAL or EXITED: outside CPU seconds
    load1: float


def between(a: Look, b: Look, roots: Iterable[int], me: int) -> Interval:
    """The interval from look `a` to look `b`. A process first seen at `b` counts all its CPU time (it was
    born inside the interval or just became readable); a pid whose creation time changed is a new process."""
    ins = inside(b.procs, roots, me)

    def used(pid: int, proc: Proc, attr: str) -> float:
        before = a.procs.get(pid)
        then = getattr(before, attr) if before and before.created == proc.created else 0.0
        return max(0.0, getattr(proc, attr) - then)

    inside_s = sum(used(pid, b.procs[pid], "own_s") for pid in ins)
    outside_s = max(0.0, (b.busy_s - a.busy_s) - inside_s)
    outside = {pid: p for pid, p in b.procs.items() if pid not in ins}
    by_process = {f"{p.name} (pid {pid})": used(pid, p, "own_s") for pid, p in outside.items()}
    by_process = {name: s for name, s in by_process.items() if s > 0}
    steal = max(0.0, b.steal_s - a.steal_s)
    if steal > 0:
        by_process[STEAL] = steal
    # What no live process accounts for ran in processes that exited: charged to the parents that reaped them
    # (a make's compilers), never beyond it, as their reaped time also holds what their children ran before.
    unaccounted = outside_s - sum(by_process.values())
    reaped = sorted(((used(pid, p, "reaped_s"), f"{p.name} (pid {pid})") for pid, p in outside.items()), reverse=True)
    for seconds, name in reaped:
        if unaccounted <= 0 or seconds <= 0:
            break
        charged = min(seconds, unaccounted)
        by_process[name] = by_process.get(name, 0.0) + charged
        unaccounted -= charged
    if unaccounted > 0:
        by_process[EXITED] = unaccounted
    return Interval(a.t, b.t, outside_s, inside_s, by_process, b.load1)


@dataclass(frozen=True)
class HostLoad:
    """The host over a window: outside share (mean, and the highest over any `window_s` stretch), the 1-minute
    load average per core (highest), the busiest outside processes (name, share of the cores)."""

    seconds: float
    cores: int
    outside_share: float
    peak_share: float
    window_s: float
    load_per_core: float
    busiest: tuple[tuple[str, float], ...]
    intervals: int  # the looks' intervals it covers

    def busy(self, busy_share: float) -> bool:
        return self.peak_share >= busy_share

    def processes(self) -> str:
        """'python3 (pid 4242) 97%, make (pid 17) 12%', or that no process stood out."""
        return ", ".join(f"{name} {share:.0%}" for name, share in self.busiest) or "no single outside process"

    def describe(self, busy_share: float) -> str:
        """One line: how busy the host was outside the launch, against the threshold, and by what."""
        return (f"processes outside the launch used {self.peak_share:.0%} of the {self.cores} cores "
                f"(highest {self.window_s:g} s; busy at >= {busy_share:.0%}; load average {self.load_per_core:.2f} per core): "
                f"{self.processes()}")


def summarise(intervals: list[Interval], cores: int, window_s: float) -> HostLoad | None:
    """The HostLoad of these consecutive intervals; None without any."""
    if not intervals:
        return None
    span = sum(i.end - i.start for i in intervals)
    if not span > 0:
        return None
    # The host's counters and the processes' are read a few ms apart: a share can overshoot 1 by that much.
    mean = min(1.0, sum(i.outside_s for i in intervals) / (span * cores))
    peak = mean
    if span > window_s:  # the busiest stretch of at least window_s; a shorter window is its own stretch
        peak = 0.0
        for first in range(len(intervals)):
            used = seconds = 0.0
            for interval in intervals[first:]:
                used, seconds = used + interval.outside_s, seconds + interval.end - interval.start
                if seconds >= window_s:
                    peak = max(peak, min(1.0, used / (seconds * cores)))
                    break
    by_process: dict[str, float] = {}
    for interval in intervals:
        for name, used in interval.by_process.items():
            by_process[name] = by_process.get(name, 0.0) + used
    ranked = sorted(((name, used / (span * cores)) for name, used in by_process.items()), key=lambda x: -x[1])
    busiest = tuple((name, share) for name, share in ranked[:BUSIEST] if share >= NAMED_AT)
    return HostLoad(span, cores, mean, peak, window_s, max(i.load1 for i in intervals) / cores, busiest, len(intervals))


class HostSampler:
    """Looks at the host every PERIOD_S in a thread for the whole launch; a window asks for its HostLoad.

    `roots` is called at each look: the pids whose trees are inside the launch besides this process (the
    server's, once it listens). Only the intervals are kept, with the outside processes that used CPU time.
    A look that fails is recorded and sampling goes on.
    """

    def __init__(self, roots: Callable[[], Iterable[int]] = tuple, period_s: float = PERIOD_S,
                 clock: Callable[[], float] = time.monotonic, looker: Callable[..., Look] = look,
                 cores: int | None = None, me: int | None = None, cpus: frozenset[int] | None = None):
        self.roots, self.period_s, self.clock, self.looker = roots, period_s, clock, looker
        # The launch's CPUs (`cpus`, where the client is pinned to some of them), else those this process may use:
        # all of the host's, or a cpuset's (other jobs on other CPUs are no load here).
        usable = cpus or (frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset())
        self.cpus = usable if usable and len(usable) < (psutil.cpu_count() or 0) else None
        self.cores = cores or (len(self.cpus) if self.cpus else psutil.cpu_count()) or 1
        self.me = os.getpid() if me is None else me
        self.intervals: list[Interval] = []
        self.errors: list[str] = []
        self.started = clock()
        self._last: Look | None = None
        self._lock = threading.Lock()  # the thread's looks and a cell's closing look share _last
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def take(self) -> None:
        with self._lock:
            now = self.looker(self.clock, self.cpus)
            if self._last is not None:
                self.intervals.append(between(self._last, now, [self.me, *self.roots()], self.me))
            self._last = now

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.take()
            except (psutil.Error, OSError) as err:
                self.errors.append(f"host look failed: {err}")
            self._stop.wait(self.period_s)

    def __enter__(self) -> HostSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def load(self, start: float, end: float, window_s: float) -> HostLoad | None:
        """The host over [start, end]: the intervals that overlap it."""
        return summarise([i for i in list(self.intervals) if i.end > start and i.start < end], self.cores, window_s)

    def recent(self, window_s: float, sleep: Callable[[float], None] = time.sleep) -> HostLoad | None:
        """The host over the last `window_s`, waiting first until the sampler has looked that long; a look now
        closes the window."""
        short = self.started + window_s - self.clock()
        if short > 0:
            sleep(short)
        self.take()
        now = self.clock()
        return self.load(now - window_s, now, window_s)


@dataclass
class Verdict:
    """The check before a launch: how long it waited, the host's load at the last look, and whether it was busy."""

    waited_s: float
    load: HostLoad | None
    busy: bool


def wait_quiet(measure: Callable[[], HostLoad | None], busy_share: float, wait_s: float, on_wait=None,
               poll_s: float = PERIOD_S, clock=time.monotonic, sleep=time.sleep) -> Verdict:
    """Measure the host until it is quiet or `wait_s` has passed. `on_wait` is told, once, what is being waited
    for. A host quiet at the first look took 0 s (the first measurement's own wait for history is not counted);
    a host the sampler could not read counts as quiet."""
    load = measure()
    start, waited = clock(), 0.0
    while True:
        busy = load is not None and load.busy(busy_share)
        if not busy or waited >= wait_s:
            return Verdict(waited, load, busy)
        if on_wait is not None:
            on_wait(f"waiting up to {wait_s:g} s for a busy host: {load.describe(busy_share)}")
            on_wait = None
        sleep(min(poll_s, wait_s - waited))
        waited = clock() - start
        load = measure()


def listening_pids(port: int) -> list[int]:
    """The processes listening on this TCP port here: the server of a launch whose process tree is not ours (a
    container's engine, an external server). Empty where the host does not say (another user's sockets)."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return []
    return sorted({c.pid for c in connections if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid})
