"""A load client that cannot keep up is flagged (issue 61), through the whole run loop and the report: the client
pinned to one core (os.sched_setaffinity) reads 64 streams from the SSE emitter (tests/support/sse_emitter.py, a
fixture, not an engine, in a process of its own on another core) sending as fast as they are read, more than one
Python event loop can take. Its cell's rows carry client_saturated with the reason in every note, and the report's
headline marks the figure and says why."""

from __future__ import annotations

import os

import pytest
from helpers import external_spec
from paths import ROOT
from sse_emitter import Emitter, paced_url

from stackbench.measure import sequencer
from stackbench.report import render
from stackbench.report.headline import SATURATED_CLIENT
from stackbench.results import store

pytestmark = pytest.mark.integration


@pytest.fixture
def one_core():
    """This thread (the run loop's, and every thread it starts) on one core; the emitter on another where there is one."""
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, cores[:1])
    try:
        yield set(cores[1:2] or cores[:1])
    finally:
        os.sched_setaffinity(0, cores)


def test_a_client_pinned_to_one_core_under_more_streams_than_it_reads_is_flagged_in_rows_and_report(one_core, tmp_path):
    with Emitter(cpus=one_core) as base:
        # 64 streams of 2,000 tokens, 16 chunks a write, sent as fast as they are read: the reader is the bottleneck
        spec = external_spec(tmp_path, paced_url(base, rate=0, burst=16), {"prompts": ["Go."], "output_tokens": 2000},
                             repeats=2, concurrency=(64,))
        written = sequencer.LaunchRun(spec, tmp_path / "run").run()
    results = store.read_results(written)
    cell = results[(results["workload"] == "code") & (results["concurrency"] == 64)]
    figures = cell.set_index("metric")
    assert figures.loc["client_saturated", "value"] == 1.0
    assert figures.loc["client_saturated", "note"].startswith("CLIENT SATURATED, not the stack's speed: ")
    assert figures.loc["client_loop_lag_p99_ms", "value"] > 5  # the loop lagged or was busy: either flags it
    assert cell["note"].str.contains("CLIENT SATURATED", regex=False).all()  # the reason reaches every row of the cell
    # The emitter's own counter counts what the client received: the client kept counting, it fell behind in time.
    assert figures.loc["server_generated_tps", "value"] == pytest.approx(figures.loc["client_received_tps", "value"])

    render.write_report(written, tmp_path / "report", ROOT / "data/published")
    headline = (tmp_path / "report/report.md").read_text(encoding="utf-8").split("## Headline", 1)[1]
    assert SATURATED_CLIENT in headline and "measured by a load client that could not keep up (client saturated:" in headline
