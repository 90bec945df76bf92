"""An energy counter that moves in steps (issue 45): NVML's nvmlDeviceGetTotalEnergyConsumption, like the test
double with `energy_step_mj`, reads no change over a window shorter than its step. Such a window has no energy
figure, its row says why, and the cell is summarised as the launch summarises it, without stopping."""

import time
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stackbench.config.model import Load
from stackbench.engines.vllm import VllmAdapter
from stackbench.host import telemetry
from stackbench.measure import summary
from stackbench.measure.client import RequestRecord
from stackbench.measure.runner import CellRunner
from stackbench.rehearsal.simgpu import NvmlDouble

WATTS = 250.5  # the double's fixed draw per GPU
STEP_MJ = 1_000_000  # a 1 kJ step: about 4 s at 250.5 W, longer than any window below
STALLED = "did not advance over the 0.4 s window: too short for the counter's step"


class Clock:
    """A hand-driven clock shared by the NVML test double and the sampler."""

    def __init__(self, now: float):
        self.now = now

    def __call__(self):
        return self.now


def stepping_sampler(clock: Clock, step_mj: int = STEP_MJ, count: int = 2) -> tuple[NvmlDouble, telemetry.Sampler]:
    fake = NvmlDouble(count=count, clock=clock, energy_step_mj=step_mj)
    return fake, telemetry.Sampler(telemetry.NvmlGpus(fake), clock=clock)


def test_the_double_reads_whole_steps_and_by_default_every_millijoule():
    clock = Clock(100.0)
    stepping, plain = NvmlDouble(count=1, clock=clock, energy_step_mj=STEP_MJ), NvmlDouble(count=1, clock=clock)
    clock.now += 2.0  # 501 J drawn: under one step
    assert stepping.nvmlDeviceGetTotalEnergyConsumption(0) == 1_000_000
    assert plain.nvmlDeviceGetTotalEnergyConsumption(0) == 1_000_000 + 501_000
    clock.now += 2.0  # 1002 J in all: one step
    assert stepping.nvmlDeviceGetTotalEnergyConsumption(0) == 2_000_000


def test_a_window_shorter_than_the_counters_step_reads_no_energy_and_says_why():
    clock = Clock(100.0)
    _, sampler = stepping_sampler(clock)
    sampler.take()
    window = sampler.open_window()
    clock.now += 0.4
    reading = sampler.close_window(window)
    assert reading.energy_j is None and STALLED in reading.energy_source and "GPU-fake-0" in reading.energy_source
    figure = {f.metric: f for f in summary.telemetry_figures(reading, 100)}["energy_j_per_token"]
    assert figure.value is None and figure.note.endswith(reading.energy_source)


def request(stream: int, submit: float, tokens: int = 10) -> RequestRecord:
    """A 0.15 s request on the client's clock: first token 50 ms after submit, then `tokens` chunks 10 ms apart."""
    times = [submit + 0.05 + 0.01 * i for i in range(tokens)]
    record = RequestRecord(stream=stream, turn=0, t_submit=submit, t_first_chunk=times[0], t_first_token=times[0],
                           t_last_token=times[-1], t_last_chunk=times[-1], t_end=times[-1] + 0.01,
                           completion_tokens=tokens, requested_tokens=tokens)
    record.content_chunks, record.chunk_times, record.choice_times = tokens, times, times
    record.parts = ["word "] * tokens
    return record


def test_a_short_c1_cell_is_summarised_as_the_launch_does_with_its_energy_rows_empty_and_explained():
    """CellRunner._judge, the launch's own summary of a measured cell, over a 0.4 s window on GPUs whose counter
    did not step: before issue 45 this raised ZeroDivisionError and the launch stopped."""
    offset = time.monotonic() - time.perf_counter()  # the runner maps the client's clock onto the sampler's
    clock = Clock(time.perf_counter() + offset)
    _, sampler = stepping_sampler(clock)
    sampler.take()
    window = sampler.open_window()
    submit = clock.now - offset
    records = [request(0, submit), request(0, submit + 0.2)]
    for _ in range(2):
        clock.now += 0.2
        sampler.take()
    reading = sampler.close_window(window)

    runner = CellRunner("http://127.0.0.1:9", VllmAdapter(), SimpleNamespace(launch=SimpleNamespace(server_args={}, speculates=False)),
                        None, sampler=sampler)
    cell = SimpleNamespace(workload=SimpleNamespace(name="code", tool=None), load=Load(), concurrency=1, rate=None)
    result = runner._judge(cell, [records], None, reading)

    assert result.status == "ok"
    figures = {f.metric: f for f in result.figures}
    whole, steady = figures["energy_j_per_token"], figures["energy_j_per_token_steady"]
    assert whole.value is None and STALLED in whole.note
    # The steady window: the first request's first to last token, 0.09 s.
    assert steady.value is None and "did not advance over the 0.1 s window: too short for the counter's step" in steady.note
    assert figures["power_w"].value == pytest.approx(2 * WATTS) and figures["decode_tps"].value == pytest.approx(100.0)
    assert figures["output_len_ok"].value == 1.0


@settings(max_examples=60, deadline=None)
@given(seconds=st.floats(0.05, 12.0), step_mj=st.sampled_from([1, 1_000, 100_000, 1_000_000]),
       phase=st.floats(0.0, 8.0))
def test_a_stepping_counter_gives_a_figure_within_a_step_of_the_truth_or_none_with_a_reason(seconds, step_mj, phase):
    clock = Clock(100.0)
    _, sampler = stepping_sampler(clock, step_mj, count=1)
    clock.now += phase  # where the window starts between two steps
    window = sampler.open_window()
    for _ in range(int(seconds / telemetry.SAMPLE_PERIOD_S)):
        clock.now += telemetry.SAMPLE_PERIOD_S
        sampler.take()
    clock.now = window.start + seconds
    reading = sampler.close_window(window)
    truth_j = WATTS * seconds
    if reading.energy_j is None:
        assert "did not advance" in reading.energy_source and truth_j < step_mj / 1000
    else:
        assert abs(reading.energy_j - truth_j) <= (step_mj + 1) / 1000  # one step, and the counter's whole mJ
    energy = {f.metric: f for f in summary.telemetry_figures(reading, 100)}["energy_j_per_token"]
    assert (energy.value is None and energy.note) or energy.value > 0


def test_a_steady_window_inside_one_counter_step_is_left_out_and_named():
    clock = Clock(100.0)
    _, sampler = stepping_sampler(clock)
    sampler.take()
    start = clock.now + 0.1
    for _ in range(4):
        clock.now += 0.5
        sampler.take()
    (figure,) = summary.steady_telemetry_figures([(start, start + 1.5, 150, sampler.rows)], tokens_per_response=10)
    assert figure.value is None and "did not advance over the 1.5 s window" in figure.note and "1 of 1 steady windows" in figure.note
