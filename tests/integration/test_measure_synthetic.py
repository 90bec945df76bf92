"""The whole run loop (launch spec, external launcher, cell runner, rows) against the synthetic engine, a
TEST DOUBLE whose timing is known in advance: reasoning streamed first, 3 tokens per chunk, vLLM
speculative counters; for the load figures, a capacity of two requests at once. The figures must come back
within a few percent of what it was built to emit.

Every test here serves the double and measures through the run loop: the integration lane."""

import json
import re
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import external_spec, serving, unregistered
from paths import ROOT

from stackbench.config.model import Load
from stackbench.measure import sequencer, summary
from stackbench.plan import expand, launchspec
from stackbench.rehearsal.standin import Timing
from stackbench.results import store

pytestmark = pytest.mark.integration

TIMING = Timing(ttft_s=0.25, interval_s=0.03, tokens_per_chunk=3, reasoning_tokens=30, content_tokens=30, spec_tokens=3)


@pytest.fixture
def engine_url():
    with serving(TIMING) as url:
        yield url


def test_external_launch_measures_reasoning_multi_token_chunks_and_acceptance(engine_url, tmp_path):
    spec = external_spec(tmp_path, engine_url, {"prompts": ["Write a Python hello world."], "output_tokens": 61})
    results = store.read_results(sequencer.LaunchRun(spec, tmp_path / "run").run())
    cell = results[(results["workload"] == "code") & (results["status"] == "ok")].set_index("metric")
    value = cell["value"]

    # First reasoning token, not first content (that would be 0.55 s later). The double sends a role-only
    # chunk the moment it has the request, so TTFT - TTFC is its prefill time with the client's connect
    # and send (tens of ms on this loaded 2-core machine) taken out.
    assert value["ttft_s"] - value["ttfc_s"] == pytest.approx(TIMING.ttft_s, rel=0.1)  # sleeps overshoot under load
    assert value["ttft_s"] < TIMING.ttft_s + 0.1
    assert value["decode_tps"] == pytest.approx(TIMING.decode_tps, rel=0.05)  # all tokens over the whole decode span
    assert value["itl_p50_ms"] == pytest.approx(TIMING.itl_ms, rel=0.05)  # per token: chunk gap / 3
    assert value["icl_p50_ms"] == pytest.approx(TIMING.interval_s * 1000, rel=0.05)  # per chunk, by its own name
    assert value["accept_len"] == pytest.approx(TIMING.accept_len, rel=0.02)  # 1 + accepted / drafts
    # vLLM's TPOT, from the role-only chunk: prefill and decode over the tokens after the first.
    tokens = TIMING.output_tokens - 1
    assert value["tpot_ms"] == pytest.approx((value["ttft_s"] - value["ttfc_s"] + tokens / TIMING.decode_tps) / tokens * 1000,
                                             rel=0.05)
    assert "fewer than" in cell.loc["tpot_ms", "note"]  # 3 requests: a rough percentile, and it says so
    assert set(cell["counted_text"]) == {"content,reasoning"} or set(cell["counted_text"]) == {"reasoning+content"}
    assert set(cell["launch_mode"]) == {"external"}
    # Every row names the code that measured it: package version, commit, +dirty for an edited checkout.
    assert results["stackbench_version"].nunique() == 1
    assert unregistered(results["metric"]) == []  # every row of the launch, its server rows too, is registered
    assert re.fullmatch(r"\d+\.\d+\.\d+\+[0-9a-f]{12}(\+dirty)?", results["stackbench_version"].iloc[0])
    # The pipeline did not set the context, TP or quantization of a server it did not start.
    assert set(cell["quant"]) == {"unknown"} and cell["engine_image"].iloc[0].startswith("external")


# Two requests at once; each takes 0.2 s to its first token, then 10 chunks of 3 tokens 30 ms apart: one
# stream decodes at 100 tok/s, so the engine's capacity is 200 tok/s of decode.
CAPACITY = Timing(ttft_s=0.2, interval_s=0.03, tokens_per_chunk=3, reasoning_tokens=0, content_tokens=30, spec_tokens=3,
                  capacity=2)
LOAD_WORKLOAD = {"prompts": ["Say hi."], "output_tokens": 31, "concurrency": [1, 2, 3],
                 "load": {"requests_per_stream": 2, "knee_fraction": 0.1, "rates": [4], "requests": 4},
                 "slo": {"ttft_s": 0.35, "min_attainment": 0.9}}


@pytest.fixture(scope="module")
def load_run(tmp_path_factory) -> Path:
    tmp_path = tmp_path_factory.mktemp("load")
    with serving(CAPACITY) as url:
        spec = external_spec(tmp_path, url, LOAD_WORKLOAD, repeats=2)
        sequencer.LaunchRun(spec, tmp_path / "run").run()
    return tmp_path / "run"


@pytest.fixture(scope="module")
def load_results(load_run):
    return store.read_results(load_run / "cells.parquet")


def figures(results, **where):
    rows = results[(results["workload"] == "code") & (results["status"] == "ok")]
    for column, value in where.items():
        rows = rows[rows[column].isna()] if value is None else rows[rows[column] == value]
    return rows.set_index("metric")


def test_steady_window_holds_the_engine_decode_rate_and_keeps_ramp_and_tail_apart(load_results):
    for streams in (1, 2):
        cell = figures(load_results, concurrency=streams)["value"]
        # All streams decoding, no prefill wait inside: streams x 100 tok/s.
        assert cell["aggregate_tps_steady"] == pytest.approx(streams * CAPACITY.decode_tps, rel=0.06)
        # The whole-repeat figure carries each request's 0.2 s before its first token.
        assert cell["aggregate_tps"] < 0.8 * cell["aggregate_tps_steady"]
        assert cell["aggregate_tps_ramp"] < cell["aggregate_tps_steady"]
        assert cell["steady_window_s"] == pytest.approx(0.3, abs=0.05)  # one request's decode span


def test_knee_is_the_engine_capacity(load_results):
    # A third stream only waits for a slot: the steady aggregate stays at the capacity (200 tok/s by the engine's
    # clock), as this machine delivered it at c=2 in the same run: a loaded host slows both alike, so the claim
    # holds against the run's own figure, never over the capacity (a timed bound would fail on a busy CI).
    third = figures(load_results, concurrency=3)["value"]
    second = figures(load_results, concurrency=2)["value"]
    assert third["aggregate_tps_steady"] == pytest.approx(second["aggregate_tps_steady"], rel=0.1)
    assert third["aggregate_tps_steady"] <= 2 * CAPACITY.decode_tps * 1.06
    knee = figures(load_results, metric="knee_concurrency", concurrency=None)
    assert knee["value"].tolist() == [2]
    assert "rose > 10% over the level below" in knee["note"].iloc[0]
    # The SLO breaks at c=3 too; without one, the throughput rule alone finds the same knee.
    levels = {c: figures(load_results, concurrency=c)["value"].to_dict() for c in (1, 2, 3)}
    by_throughput = summary.knee_figure(levels, Load(knee_fraction=0.1))
    assert by_throughput.value == 2 and "from c=2 to c=3" in by_throughput.note


def test_goodput_counts_the_requests_that_waited_for_a_slot_as_missing_the_slo(load_run, load_results):
    for streams in (1, 2):
        assert figures(load_results, concurrency=streams)["value"]["slo_attainment"] == 1.0
    # Three streams, two slots: the first wave's third request waits a whole request (0.5 s) for a slot,
    # beyond the 0.35 s TTFT limit. How many of the second wave wait depends on which request reaches a
    # freed slot first (4/6 or 5/6 per repeat), so the figure is checked against the requests' own TTFTs.
    requests = pd.read_parquet(next((load_run / "cells").glob("code--c3--*.requests.parquet")))
    by_repeat = requests.groupby("repeat")
    good = ((requests["status"] == "ok") & (requests["ttft_s"] <= 0.35)).groupby(requests["repeat"])
    assert len(by_repeat) == 2 and (good.mean() < 1).all()
    third = figures(load_results, concurrency=3)
    assert third["value"]["slo_attainment"] == pytest.approx(good.mean().median())
    # Goodput: the good requests over the repeat's duration, first submit to last end (vLLM's duration).
    duration = by_repeat["t_end"].max() - by_repeat["t_submit"].min()
    assert third["value"]["goodput_rps"] == pytest.approx((good.sum() / duration).median())
    assert "TTFT <= 0.35 s" in third.loc["goodput_rps", "note"]


def test_open_loop_cell_is_keyed_by_its_rate_and_says_how_it_was_driven(load_results):
    cell = figures(load_results, request_rate=4.0)
    assert cell["concurrency"].isna().all()
    assert "open loop: poisson arrivals at 4 req/s, 4 requests per repeat" in cell.loc["request_rps", "note"]
    assert {"request_rps", "goodput_rps", "slo_attainment", "aggregate_tps"} <= set(cell.index)
    assert "aggregate_tps_steady" not in cell.index  # no fixed number of streams: no steady window
    # Two repeats: each median keeps both repeats' figures and says its spread is over them; the median's 95%
    # interval needs 6 repeats (estimators.median_interval), so none is stated.
    assert len(cell.loc["aggregate_tps", "repeat_values"]) == 2 and cell.loc["aggregate_tps", "spread_over"] == "repeats"
    assert pd.isna(cell.loc["aggregate_tps", "ci_low"])


@pytest.fixture
def one_file_engine():
    """tests/support/toy_engine.py loaded as a new engine's module is (its @register runs), and unregistered after."""
    import importlib.util

    from stackbench.engines import ADAPTERS

    source = ROOT / "tests/support/toy_engine.py"
    spec = importlib.util.spec_from_file_location("toy_engine_under_test", source)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    try:
        yield ADAPTERS["toy"]
    finally:
        ADAPTERS.pop("toy")


def test_an_engine_written_from_scratch_in_one_file_is_measured_through_the_plan_runner_and_report(
        one_file_engine, engine_url, tmp_path, monkeypatch):
    """Adding an engine is its one module (here a TEST DOUBLE written from the base class, no other engine's code), a
    stack file and a node run; no other module changes."""
    from stackbench.report import render

    spec_dir = tmp_path / "repo"
    external_spec(spec_dir, engine_url, {"prompts": ["Say hi."], "output_tokens": 12}, repeats=1)  # the configs
    (spec_dir / "configs/stacks/toy.yaml").write_text(yaml.safe_dump({"engine": "toy", "variants": [{"name": "nospec"}]}))
    node_file = spec_dir / "configs/nodes/external-double.yaml"
    node = yaml.safe_load(node_file.read_text())
    node["runs"][0]["stack"] = "toy"
    node_file.write_text(yaml.safe_dump(node))
    cfg = expand.load_run_config(spec_dir, {"nodes": ["external-double"], "measure": {"repeats": 1, "warmup_requests": 0}})
    loaded = expand.load_node("external-double", cfg, spec_dir)
    assert [(l.engine, l.name) for l in loaded.launches] == [("toy", "toy--nospec")]
    cells = sequencer.LaunchRun(launchspec.build(cfg, loaded, loaded.launches[0]), tmp_path / "run").run()
    results = tmp_path / "results.parquet"
    store.collect([cells], results)
    monkeypatch.chdir(spec_dir)
    render.write_report(results, tmp_path / "reports", ROOT / "data/published")
    headline = (tmp_path / "reports/tables/headline-external-double.md").read_text()
    assert "| measured | toy | nospec |" in headline
    rows = store.read_results(results)
    assert set(rows["engine"]) == {"Toy engine"}
    # The double's own pace, read through the plain OpenAI stream (it sends its 61 tokens whatever is asked).
    assert rows.loc[rows["metric"] == "decode_tps", "value"].to_list() == [pytest.approx(TIMING.decode_tps, rel=0.05)]


def measured_cell(tmp_path, timing: Timing, output_tokens: int) -> pd.DataFrame:
    """One cell (one repeat) of the double's output against a workload asking `output_tokens`, by metric."""
    with serving(timing) as url:
        spec = external_spec(tmp_path, url, {"prompts": ["Write a Python hello world."], "output_tokens": output_tokens},
                             repeats=1)
        results = store.read_results(sequencer.LaunchRun(spec, tmp_path / "run").run())
    return results[(results["workload"] == "code") & (results["status"] == "ok")].set_index("metric")


def test_an_engine_returning_fewer_tokens_than_asked_marks_the_cell(tmp_path):
    cell = measured_cell(tmp_path, TIMING, output_tokens=TIMING.output_tokens + 20)  # it always sends 61
    assert cell.loc["output_len_ok", "value"] == 0  # no request got the length it asked for
    assert cell.loc["output_len_ok", "unit"] == "ratio"
    # Every speed figure of the cell says it measured another workload than it names.
    assert "output length not as asked: 0 of 1 requests as asked" in cell.loc["decode_tps", "note"]
    assert cell.loc["looping", "value"] == 0 and "loop" not in cell.loc["decode_tps", "note"].replace("closed loop", "")


def test_a_looping_output_is_flagged_beside_its_speed(tmp_path):
    looping = Timing(ttft_s=0.1, interval_s=0.01, tokens_per_chunk=1, reasoning_tokens=0, content_tokens=60, loop_period=5)
    cell = measured_cell(tmp_path, looping, output_tokens=looping.output_tokens)
    assert cell.loc["output_len_ok", "value"] == 1  # the length was right: only the loop is flagged
    # Its 61 words cycle t0..t4: of the 58 word 4-grams the first 5 are new and the other 53 repeat one.
    assert cell.loc["repetition_ratio", "value"] == pytest.approx(53 / 58) and cell.loc["looping", "value"] == 1
    assert "outputs loop: 1 of 1 outputs loop" in cell.loc["decode_tps", "note"]


# Seed 004's short profile: 512 tokens per request (the prefill's and 73 chunks of 7), prompt tokens counted
# as words by the double, on its vLLM-style /tokenize too.
SEED004 = Timing(ttft_s=0.02, interval_s=0.002, tokens_per_chunk=7, reasoning_tokens=0, content_tokens=511,
                 prompt_tokens=0)


@pytest.mark.parametrize("tokenize", [1, 0], ids=["tokenize-endpoint", "calibration-requests"])
def test_seed_004_short_sends_the_posts_requests_and_its_rows_carry_that_basis(tmp_path, tokenize):
    bodies = tmp_path / "bodies.jsonl"
    with serving(replace(SEED004, bodies_file=str(bodies), tokenize=tokenize)) as url:
        spec = external_spec(tmp_path, url, workloads=("seed-004-short",))
        results = store.read_results(sequencer.LaunchRun(spec, tmp_path / "run").run())
    sent = [json.loads(line) for line in bodies.read_text().splitlines()]
    calibration, sent = sent[:2 - 2 * tokenize], sent[2 - 2 * tokenize:]  # without the endpoint: the text once and twice
    sent = [b for b in sent if "Review the following Python module" in b["messages"][0]["content"]]  # not the launch's accuracy set
    assert all("min_tokens" not in body and body["max_tokens"] == 1 for body in calibration)
    assert len(sent) == 4 * (1 + 2 + 3 + 4)  # at each concurrency 1-4 a warm-up round at it, then 3 measured
    for body in sent:
        assert body["temperature"] == 0.0 and body["max_tokens"] == body["min_tokens"] == 512
        assert body["chat_template_kwargs"] == {"enable_thinking": False}
        assert body["messages"][0]["content"].startswith("[run ")
        assert len(body["messages"][0]["content"].split()) == pytest.approx(400, rel=0.1)
    assert len({b["messages"][0]["content"] for b in sent}) == len(sent)  # a fresh salt every request
    rows = results[(results["workload"] == "seed-004-short") & (results["metric"] == "aggregate_tps")]
    assert sorted(rows["concurrency"]) == [1, 2, 3, 4] and set(rows["status"]) == {"ok"} and set(rows["n"]) == {3}
    assert set(rows["thinking"]) == {"off"} and rows["reasoning_effort"].isna().all()
    assert set(rows["temperature"]) == {0.0} and set(rows["output_tokens"]) == {512}
    assert all(abs(n - 400) <= 40 for n in rows["prompt_tokens"])
    how = "sized with the engine's /tokenize" if tokenize else "two calibration requests per prompt.*HTTP 404"
    assert rows["note"].str.contains(how).all()


def test_each_cells_shape_is_warmed_up_once_at_its_concurrency_and_a_failed_warm_up_fails_the_cell(tmp_path, monkeypatch):
    import asyncio

    from stackbench.engines import adapter_for
    from stackbench.measure import runner
    from stackbench.measure.client import RequestRecord

    spec = external_spec(tmp_path, "http://127.0.0.1:9")
    sent, fail = [], {"now": False}

    async def streams_sent(client, requests, concurrency, final_hook=None):
        sent.append((len(requests), concurrency))
        return [RequestRecord(stream=i, turn=0, t_submit=0.0, status=fail.get("status", "failed") if fail["now"] else "ok",
                              error="HTTP 500: out of memory" if fail["now"] else None) for i in range(len(requests))]

    monkeypatch.setattr(runner, "run_streams", streams_sent)
    cells = runner.CellRunner("http://127.0.0.1:9", adapter_for("vllm"), spec, None)
    code = spec.cells[0]
    for cell in (code, code, replace(code, concurrency=3), replace(code, power_cap_w=200.0)):
        asyncio.run(cells._warm_up(None, cell, None))
    assert sent == [(1, 1), (3, 3), (1, 1)]  # c1, then c3 at its own concurrency, then the capped cell; no repeat
    fail["now"] = True
    with pytest.raises(runner.WarmupFailed, match=r"warm-up at c2 failed \(failed\): HTTP 500: out of memory"):
        asyncio.run(cells._warm_up(None, replace(code, concurrency=2), None))
    fail["status"] = "rejected"  # over the context: the measured requests record the rejection, not the warm-up
    asyncio.run(cells._warm_up(None, replace(code, concurrency=4), None))
    assert sent[-1] == (4, 4) and (code.workload.name, 4, code.rate, code.prompt_tokens_target, code.power_cap_w) not in cells.warmed
