"""The client's check of itself (measure/clientload.py): its loop's lag and its thread's CPU share over a window,
the flag where it could not keep up, and its streams spread over worker processes where one loop cannot read
them. A starved client against the emitter, through rows and report, is
tests/integration/test_client_saturation.py."""

import asyncio

import pytest

from stackbench.measure import clientload
from stackbench.measure.client import RequestRecord, StreamClient, run_streams
from stackbench.measure.clientload import ClientLoad, ClientPool, LoopWatch
from stackbench.measure.workloads import Request
from stackbench.rehearsal.standin import StandinEngine, Timing


class VirtualTime(asyncio.SelectorEventLoop):
    """An event loop on a virtual clock: with nothing ready it jumps to its next timer instead of waiting, and work on
    its thread is `work(s)`, which moves the clock and the thread's CPU time alike. What LoopWatch reads is then the
    loop's schedule, never this machine's pace (a loaded host delays real wake-ups by milliseconds)."""

    def __init__(self):
        super().__init__()
        self.now = self.cpu = 0.0
        select = self._selector.select
        self._selector.select = lambda timeout=None: (self._jump(timeout), select(0))[1]

    def _jump(self, timeout):
        self.now += timeout or 0.0

    def time(self) -> float:
        return self.now

    def work(self, seconds: float) -> None:
        self.now += seconds
        self.cpu += seconds


def watched(work, monkeypatch) -> ClientLoad:
    loop = VirtualTime()
    monkeypatch.setattr(clientload.time, "thread_time", lambda: loop.cpu)

    async def window():
        async with LoopWatch(clock=loop.time) as watch:
            await work(loop)
        return watch.load

    try:
        return loop.run_until_complete(window())
    finally:
        loop.close()


def test_a_loop_kept_busy_by_its_own_work_lags_and_uses_its_core_and_an_idle_one_does_neither(monkeypatch):
    async def busy(loop):
        for _ in range(10):  # 50 ms of work on the loop's thread between two awaits
            loop.work(0.05)
            await asyncio.sleep(0)

    async def idle(loop):
        await asyncio.sleep(0.5)

    loaded, quiet = watched(busy, monkeypatch), watched(idle, monkeypatch)
    # a wake-up due 10 ms after a sample waited for the 50 ms of work in its way
    assert loaded.lag_ms(99) >= 40 and len(loaded.lags_s) >= 2
    assert quiet.lag_ms(50) == quiet.lag_ms(99) == 0 and len(quiet.lags_s) >= 49  # its sleeps end on time
    assert quiet.cpu_share == 0 and loaded.cpu_share == pytest.approx(1)  # working counts, sleeping does not
    assert loaded.processes == quiet.processes == 1 and loaded.seconds == pytest.approx(0.5) == quiet.seconds


def records(gap_s: float, chunks: int = 20) -> list[RequestRecord]:
    """One request whose chunks came `gap_s` apart (test data)."""
    record = RequestRecord(stream=0, turn=0, t_submit=0.0)
    record.choice_times = [i * gap_s for i in range(chunks)]
    return [record]


def load(cpu_share: float, lag_ms: float, median_ms: float | None = None) -> ClientLoad:
    """A window whose loop lag reads `lag_ms` at p99, and `median_ms` at p50 (the same where None)."""
    median_ms = lag_ms if median_ms is None else median_ms
    return ClientLoad(10.0, (cpu_share * 10,), (median_ms / 1000,) * 90 + (lag_ms / 1000,) * 10)


@pytest.mark.parametrize(("cpu_share", "lag_ms", "median_ms", "gap_s", "why"), [
    (0.95, 1.0, None, 0.02, "its event loop busy 95% of a core (>= 90%)"),
    (0.95, 20.0, 1.0, 0.03, "its event loop busy 95% of a core (>= 90%); loop lag p99 20.0 ms above half the median "
                            "inter-chunk gap (30.0 ms), its loop busy 95% of a core"),
    (0.6, 12.0, 1.0, 0.002, "loop lag p99 12.0 ms above 10 ms, its loop busy 60% of a core"),
    # late at its median: a backlog, even where other processes held its core (the starved client under CI's load:
    # p50 35.8 ms, p99 624 ms at 30% of a core)
    (0.3, 624.0, 35.8, 0.002, "loop lag p50 35.8 ms above 10 ms: late at its median, a backlog"),
    # late only in its tail with time to spare: it waited now and then for a CPU the host gave elsewhere (on a CPU
    # node, the engine's): not the client's bottleneck (the default run's llama-server cells: p50 0.1-0.2 ms, p99 4-12
    # ms at 1-2% of a core)
    (0.3, 20.0, 0.2, 0.03, None),
    (0.3, 12.0, 0.2, 0.002, None),
    (0.3, 8.0, None, 0.016, None),  # within half a 16 ms gap, and under the floor
    (0.3, 8.0, None, 0.002, None),  # above half a 2 ms gap, under the floor: the node's scheduling
])
def test_a_client_is_saturated_by_a_busy_core_a_median_lag_or_a_busy_loops_tail_beyond_half_a_gap_and_the_floor(
        cpu_share, lag_ms, median_ms, gap_s, why):
    said = clientload.saturation(load(cpu_share, lag_ms, median_ms), records(gap_s))
    assert said == (None if why is None else f"CLIENT SATURATED, not the stack's speed: {why}")


def test_the_figures_carry_the_flag_its_reason_and_the_busiest_process():
    figures, why = clientload.figures(ClientLoad(10.0, (2.0, 9.5), (0.001,) * 50), records(0.02))
    by_name = {f.metric: f for f in figures}
    assert by_name["client_cpu_share"].value == pytest.approx(0.95) and by_name["client_cpu_share"].n == 2
    assert by_name["client_saturated"].value == 1.0 and by_name["client_saturated"].note == why
    assert by_name["client_loop_lag_p99_ms"].value == pytest.approx(1.0) and by_name["client_loop_lag_p99_ms"].stat == "p99"
    calm, none = clientload.figures(ClientLoad(10.0, (1.0,), (0.001,) * 50), records(0.02))
    assert none is None and {f.metric: f.value for f in calm}["client_saturated"] == 0.0


def test_the_servers_token_rate_stands_beside_the_clients_over_the_same_window():
    request = records(0.02)[0]
    request.completion_tokens = 50
    server, client = clientload.token_rate_figures(60.0, [request], 2.0)
    assert (server.metric, server.value, client.metric, client.value) == ("server_generated_tps", 30.0, "client_received_tps", 25.0)
    assert "the client's 50 tokens / the server's 60" in server.note
    assert clientload.token_rate_figures(None, [request], 2.0) == []  # no counter, no figure


def test_streams_spread_over_two_processes_come_back_as_one_loop_returns_them():
    """Against the stand-in (a test double, served from a thread): 8 requests on 4 streams read by two worker
    processes come back as run_streams returns them, every request once with its index, each stream's in order,
    each answer whole, and the pool's load has both processes."""
    timing = Timing(ttft_s=0.02, interval_s=0.01, tokens_per_chunk=1, reasoning_tokens=0, content_tokens=6)
    requests = [Request((f"question {j}",), timing.output_tokens) for j in range(8)]
    with StandinEngine(timing) as engine:
        client = StreamClient(engine.base_url, "synthetic", {}, stall_timeout_s=10, request_timeout_s=30)
        alone = asyncio.run(spread_or_not(client, requests, None))
        with ClientPool(client, 2) as pool:
            spread = asyncio.run(spread_or_not(client, requests, pool))
    for records in (alone, spread):
        assert sorted(r.request for r in records) == list(range(8)) and {r.status for r in records} == {"ok"}
        assert [r.stream for r in records] == sorted(r.stream for r in records) and {r.stream for r in records} == {0, 1, 2, 3}
        for stream in range(4):
            mine = [r.request for r in records if r.stream == stream]
            assert mine == sorted(mine)
    contents = {r.request: (r.content, r.prompt_sha, r.tokens) for r in alone}
    assert {r.request: (r.content, r.prompt_sha, r.tokens) for r in spread} == contents
    assert all(r.ttft_s >= timing.ttft_s for r in spread)  # stamped on the one monotonic clock: after its own submit
    assert pool.load.processes == 2 and len(pool.load.lags_s) > 0


async def spread_or_not(client: StreamClient, requests: list[Request], pool: ClientPool | None):
    try:
        return await (pool.run_streams(requests, 4) if pool else run_streams(client, requests, 4))
    finally:
        await client.aclose()
        client.session = None


def test_the_streams_go_to_their_workers_in_blocks_with_their_share_of_the_queue():
    requests = [Request(("q",), 4)] * 10
    assert clientload.split_streams(requests, 5, 2) == [(0, 3, [0, 1, 2, 5, 6, 7]), (3, 2, [3, 4, 8, 9])]
    assert clientload.split_streams(requests, 2, 4) == [(0, 1, [0, 2, 4, 6, 8]), (1, 1, [1, 3, 5, 7, 9])]  # no idle worker


def test_a_warm_up_that_kept_its_loop_busy_asks_for_enough_processes_to_halve_it():
    assert clientload.processes_for_load(None) == 1
    assert clientload.processes_for_load(load(0.3, 1.0), cores=8) == 1
    assert clientload.processes_for_load(load(0.95, 1.0), cores=8) == 2
    assert clientload.processes_for_load(load(1.0, 1.0), cores=1) == 1  # never more than the cores it may use
