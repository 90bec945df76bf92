"""The host's CPU accounting (host/hostload.py): which processes are inside a launch, how outside CPU time is
shared out over two looks, the window's figures, the wait before a launch (fake clock) and the sequencer's
refuse/flag choice. Looks here are made by hand (test data, not readings of this host) except where a test
says it reads the host."""

import os
import socket
import subprocess
import sys
from types import SimpleNamespace

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stackbench.config.model import HostIdle
from stackbench.host import hostload
from stackbench.host.hostload import EXITED, STEAL, HostLoad, Interval, Look, Proc
from stackbench.measure import sequencer

# A process table: 1 init; 10 login shell -> 20 snakemake -> 30 measure job (this process) -> 31 server, 32 its
# worker; 20 -> 40 a sibling job of the same snakemake; 1 -> 50 somebody's build -> 51 its compiler.
TREE = {1: ("init", 0), 10: ("bash", 1), 20: ("snakemake", 10), 30: ("stackbench", 20), 31: ("llama-server", 30),
        32: ("worker", 31), 40: ("stackbench", 20), 50: ("make", 1), 51: ("cc1", 50), 60: ("vllm", 1), 61: ("vllm-worker", 60)}


def procs(cpu: dict[int, float] | None = None, reaped: dict[int, float] | None = None, created: dict[int, float] | None = None,
          gone: tuple[int, ...] = ()) -> dict[int, Proc]:
    cpu, reaped, created = cpu or {}, reaped or {}, created or {}
    return {pid: Proc(name, created.get(pid, 0.0), cpu.get(pid, 0.0), reaped.get(pid, 0.0), ppid)
            for pid, (name, ppid) in TREE.items() if pid not in gone}


def test_inside_is_the_roots_trees_and_this_process_ancestors_not_their_other_children():
    table = procs()
    assert hostload.inside(table, [30], 30) == {1, 10, 20, 30, 31, 32}
    # A server found by its port (a container's engine, parented elsewhere) brings its tree in.
    assert hostload.inside(table, [30, 60], 30) == {1, 10, 20, 30, 31, 32, 60, 61}
    # A root that is gone is ignored; a sibling job of the pipeline and another user's build stay outside.
    assert {40, 50, 51}.isdisjoint(hostload.inside(table, [30, 999], 30))


def test_outside_time_is_the_host_busy_time_less_the_launch_and_is_named_per_process():
    a = Look(0.0, busy_s=100.0, steal_s=0.0, load1=0.5, procs=procs({30: 5.0, 31: 10.0, 50: 1.0, 51: 2.0}))
    # Over 2 s on 2 cores (4 CPU seconds): the launch used 1.5 s (client 0.5, server 1.0), the compiler 1.0 s,
    # the sibling job 0.5 s; 0.5 s more ran in a compiler that exited and make reaped (reaped time 0.8 s).
    b = Look(2.0, busy_s=103.5, steal_s=0.0, load1=1.0,
             procs=procs({30: 5.5, 31: 11.0, 40: 0.5, 50: 1.0, 51: 3.0}, reaped={50: 0.8}, created={40: 1.5}))
    interval = hostload.between(a, b, [30], 30)
    assert interval.inside_s == pytest.approx(1.5) and interval.outside_s == pytest.approx(2.0)
    assert interval.by_process == pytest.approx({"cc1 (pid 51)": 1.0, "stackbench (pid 40)": 0.5, "make (pid 50)": 0.5})
    assert sum(interval.by_process.values()) == pytest.approx(interval.outside_s)


def test_a_reused_pid_counts_from_zero_and_what_no_process_explains_is_steal_or_exited():
    a = Look(0.0, 100.0, 1.0, 0.1, procs({51: 50.0}, created={51: 7.0}))
    # pid 51 is a new process (another creation time) that used 0.2 s; the hypervisor stole 0.3 s; 0.5 s is gone.
    b = Look(1.0, 101.0, 1.3, 0.1, procs({51: 0.2}, created={51: 9.0}))
    interval = hostload.between(a, b, [30], 30)
    assert interval.by_process == pytest.approx({"cc1 (pid 51)": 0.2, STEAL: 0.3, EXITED: 0.5})
    # The launch's own time beyond the host's count (counters read a few ms apart) never makes outside negative.
    busy_self = Look(1.0, 100.1, 1.0, 0.1, procs({30: 3.0}))
    assert hostload.between(a, busy_self, [30], 30).outside_s == 0.0


def interval(start: float, end: float, outside_s: float, by: dict | None = None, load1: float = 1.0) -> Interval:
    return Interval(start, end, outside_s, 0.0, by or {}, load1)


def test_the_window_states_its_mean_its_busiest_stretch_and_its_busiest_processes():
    # 6 s on 2 cores: quiet, then 2 s with a busy loop on both cores, then quiet.
    loop = {"python3 (pid 7)": 2.0}
    parts = [interval(0, 1, 0.0), interval(1, 2, 0.0), interval(2, 3, 2.0, loop), interval(3, 4, 2.0, loop),
             interval(4, 5, 0.1, {"sshd (pid 9)": 0.1}), interval(5, 6, 0.0, load1=3.0)]
    load = hostload.summarise(parts, cores=2, window_s=2)
    assert load.outside_share == pytest.approx(4.1 / 12) and load.peak_share == pytest.approx(1.0)
    assert load.busiest == (("python3 (pid 7)", pytest.approx(4 / 12)),)  # sshd's 0.8% is under NAMED_AT
    assert load.load_per_core == 1.5 and load.intervals == 6 and load.busy(0.25) and not load.busy(1.01)
    assert load.describe(0.25).startswith("processes outside the launch used 100% of the 2 cores (highest 2 s; busy at >= 25%")
    assert "python3 (pid 7) 33%" in load.describe(0.25)
    # A window shorter than window_s is its own stretch; no interval, no figure.
    short = hostload.summarise(parts[2:3], cores=2, window_s=2)
    assert short.peak_share == short.outside_share == 1.0
    assert hostload.summarise([], cores=2, window_s=2) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 3.0), st.floats(0.0, 1.0)), min_size=1, max_size=12),
       st.integers(1, 64), st.floats(0.5, 10.0))
def test_every_share_lies_between_the_quietest_and_the_busiest_interval(parts, cores, window_s):
    t, intervals = 0.0, []
    for seconds, share in parts:
        intervals.append(interval(t, t + seconds, share * seconds * cores))
        t += seconds
    load = hostload.summarise(intervals, cores, window_s)
    low, high = min(s for _, s in parts), max(s for _, s in parts)
    for value in (load.outside_share, load.peak_share):
        assert low - 1e-9 <= value <= high + 1e-9
    if t <= window_s:  # a window no longer than window_s is one stretch
        assert load.peak_share == load.outside_share


def load_at(share: float) -> HostLoad:
    return HostLoad(2.0, 2, share, share, 2.0, 1.0, (("busyloop (pid 4242)", share),), 2)


def test_a_busy_host_is_waited_for_until_quiet_or_the_limit():
    now, told = [0.0], []

    def advance(seconds):
        now[0] += seconds

    def measure():  # busy for the first 3 s
        return load_at(1.0 if now[0] < 3 else 0.05)

    verdict = hostload.wait_quiet(measure, 0.25, 600, told.append, poll_s=1, clock=lambda: now[0], sleep=advance)
    assert (verdict.waited_s, verdict.busy) == (3.0, False) and len(told) == 1 and "busyloop (pid 4242) 100%" in told[0]
    now[0] = 0.0
    verdict = hostload.wait_quiet(lambda: load_at(0.9), 0.25, 5, poll_s=2, clock=lambda: now[0], sleep=advance)
    assert verdict.waited_s == 5 and verdict.busy and verdict.load.peak_share == 0.9
    assert hostload.wait_quiet(lambda: load_at(0.1), 0.25, 5).waited_s == 0.0
    assert not hostload.wait_quiet(lambda: None, 0.25, 5).busy  # an unreadable host does not stop a launch


def launch_run(on_busy: str, share: float):
    """The sequencer's state _check_host reads: a sampler that always reads `share`, and the node's host_idle."""
    sampler = SimpleNamespace(recent=lambda window_s: load_at(share))
    node = SimpleNamespace(host_idle=HostIdle(busy_share=0.25, window_s=2, wait_s=0, on_busy=on_busy))
    return SimpleNamespace(host=sampler, node=node, timeline=[], host_checks=[], host_flag=None, _waiting=lambda text: None)


def test_a_launch_on_a_host_busy_past_the_wait_is_refused_or_flagged_as_the_node_chooses():
    refused = launch_run("refuse", 0.9)
    with pytest.raises(sequencer.HostBusy) as caught:
        sequencer.LaunchRun._check_host(refused)
    line = str(caught.value)
    assert "\n" not in line and line.startswith("host busy after waiting 0 s (host_idle.wait_s)") and "busyloop (pid 4242)" in line
    assert sequencer.status_of(caught.value) == "host_busy"
    flagged = launch_run("flag", 0.9)
    sequencer.LaunchRun._check_host(flagged)
    assert flagged.host_flag.startswith("HOST BUSY before the launch") and "busyloop (pid 4242)" in flagged.host_flag
    assert flagged.timeline[-1]["event"] == "host_busy"
    quiet = launch_run("refuse", 0.1)
    sequencer.LaunchRun._check_host(quiet)
    assert quiet.host_flag is None and quiet.host_checks[0].busy is False


def test_the_sampler_keeps_intervals_and_a_window_reads_those_that_overlap_it():
    now = [0.0]
    shares = iter([0.0, 1.0, 3.0, 3.0])  # host busy seconds at each look

    def looker(clock, cpus):
        return Look(clock(), next(shares), 0.0, 0.0, {})

    sampler = hostload.HostSampler(period_s=1.0, clock=lambda: now[0], looker=looker, cores=2, me=1)
    for _ in range(4):
        sampler.take()
        now[0] += 1.0
    assert [(i.start, i.end, i.outside_s) for i in sampler.intervals] == [(0, 1, 1.0), (1, 2, 2.0), (2, 3, 0.0)]
    assert sampler.load(1.2, 1.8, 2).outside_share == 1.0  # inside one interval: that interval
    slept = []
    now[0] = 3.0
    shares = iter([3.0])  # the look recent() takes to close its window: quiet since the last
    assert sampler.recent(2, sleep=slept.append).outside_share == pytest.approx(0.5) and slept == []
    assert sampler.intervals[-1].end == 3.0
    shares = iter([0.0])
    fresh = hostload.HostSampler(period_s=1.0, clock=lambda: 0.5, looker=looker, cores=2, me=1)
    fresh.started = 0.0
    assert fresh.recent(2, sleep=slept.append) is None and slept == [1.5]  # waited for window_s; one look: no interval


def test_reading_this_host_finds_this_process_inside_and_a_listening_server_by_its_port():
    here = hostload.look()
    assert os.getpid() in here.procs and os.getpid() in hostload.inside(here.procs, [], os.getpid())
    # On one CPU of the host: its counters alone (never more than the whole host's), this process still seen.
    one = hostload.look(cpus=frozenset({0}))
    assert one.busy_s <= hostload.look().busy_s and os.getpid() in one.procs


def test_the_sampler_takes_the_launch_cpus_over_this_process_pinned_client_cores():
    every = frozenset(range(psutil.cpu_count()))
    assert hostload.HostSampler(cpus=every).cpus is None and hostload.HostSampler(cpus=every).cores == len(every)
    one = hostload.HostSampler(cpus=frozenset({0}))
    assert (one.cpus, one.cores) == (frozenset({0}), 1) or len(every) == 1


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin a process away from one")
def test_on_a_cpuset_a_process_pinned_elsewhere_is_no_load():
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        os.sched_setaffinity(other.pid, {max(os.sched_getaffinity(0))})
        mine = frozenset({min(os.sched_getaffinity(0))})
        assert other.pid in hostload.look().procs and other.pid not in hostload.look(cpus=mine).procs
    finally:
        other.kill()
        other.wait()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert os.getpid() in hostload.listening_pids(server.getsockname()[1])
