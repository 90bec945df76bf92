"""The client's check of itself (measure/clientload.py): its loop's lag and its thread's CPU share over a window,
and the flag where it could not keep up. A starved client against the emitter, through rows and report, is
tests/integration/test_client_saturation.py."""

import asyncio
import time

import pytest

from stackbench.measure import clientload
from stackbench.measure.client import RequestRecord
from stackbench.measure.clientload import ClientLoad, LoopWatch


def watched(work) -> ClientLoad:
    async def window():
        async with LoopWatch() as watch:
            await work()
        return watch.load

    return asyncio.run(window())


def test_a_loop_kept_busy_by_its_own_work_lags_and_uses_its_core_and_an_idle_one_does_neither():
    async def busy():
        end = time.perf_counter() + 0.5
        while time.perf_counter() < end:  # 50 ms of work on the loop's thread between two awaits
            stop = time.perf_counter() + 0.05
            while time.perf_counter() < stop:
                pass
            await asyncio.sleep(0)

    loaded, idle = watched(busy), watched(lambda: asyncio.sleep(0.5))
    assert loaded.lag_ms(99) > 20 and len(loaded.lags_s) >= 5  # a sample that came mid-work waited for it
    assert idle.lag_ms(50) < 5 and len(idle.lags_s) >= 20
    assert idle.cpu_share < 0.2 < loaded.cpu_share  # spinning counts, sleeping does not (shared cores: not 1.0)
    assert loaded.processes == idle.processes == 1 and loaded.seconds == pytest.approx(0.5, abs=0.2)


def records(gap_s: float, chunks: int = 20) -> list[RequestRecord]:
    """One request whose chunks came `gap_s` apart (test data)."""
    record = RequestRecord(stream=0, turn=0, t_submit=0.0)
    record.choice_times = [i * gap_s for i in range(chunks)]
    return [record]


def load(cpu_share: float, lag_ms: float) -> ClientLoad:
    return ClientLoad(10.0, (cpu_share * 10,), (lag_ms / 1000,) * 100)


@pytest.mark.parametrize(("cpu_share", "lag_ms", "gap_s", "why"), [
    (0.95, 1.0, 0.02, "its event loop busy 95% of a core (>= 90%)"),
    (0.95, 15.0, 0.02, "its event loop busy 95% of a core (>= 90%); loop lag p99 15.0 ms above half the median "
                       "inter-chunk gap (20.0 ms)"),
    # a lagging loop with time to spare: the host's cores were busy elsewhere, and the reason says so
    (0.3, 15.0, 0.02, "loop lag p99 15.0 ms above half the median inter-chunk gap (20.0 ms), its loop busy only 30% of "
                      "a core: it waited for a CPU"),
    (0.3, 8.0, 0.002, "loop lag p99 8.0 ms above 5 ms, its loop busy only 30% of a core: it waited for a CPU"),  # the floor
    (0.3, 8.0, 0.02, None),  # within half a 20 ms gap
    (0.3, 4.0, 0.002, None),  # above half a 2 ms gap, under the floor: the node's scheduling
])
def test_a_client_is_saturated_by_a_busy_core_or_a_lag_beyond_half_a_gap_and_the_floor(cpu_share, lag_ms, gap_s, why):
    said = clientload.saturation(load(cpu_share, lag_ms), records(gap_s))
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
