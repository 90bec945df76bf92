"""Seed 002's missing methods measured through external mode against the stand-in engine (a TEST DOUBLE,
not an inference engine) speaking SGLang, as the seed's stack: the tool-call round trip and the multi-turn
second round run, and their rows stand in seed 002's own table under the rows they reproduce, with
request_wall_s and tool_call_ok. Every test here reads the served double's run: the integration lane."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pandas as pd
import pytest
import yaml
from helpers import collect_results, serving
from paths import ROOT

from stackbench.cli import published_records
from stackbench.measure import sequencer
from stackbench.plan import expand, launchspec
from stackbench.rehearsal.standin import Timing
from stackbench.report import render
from stackbench.results import store

pytestmark = pytest.mark.integration

# Every answer 300 tokens (the multi-turn round asks 300): the prefill's, then 100 chunks of 3. SGLang's
# formats and health route (/health_generate), since the node's stack is sglang-nospec.
DOUBLE = Timing(ttft_s=0.05, interval_s=0.005, tokens_per_chunk=3, reasoning_tokens=0, content_tokens=299, engine="sglang")
WALL_S = DOUBLE.ttft_s + DOUBLE.content_tokens / DOUBLE.tokens_per_chunk * DOUBLE.interval_s  # submit to the last chunk
NODE = "seed-002-double"


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("seed002")
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    bodies = tmp_path / "bodies.jsonl"
    with serving(replace(DOUBLE, bodies_file=str(bodies))) as url:
        (tmp_path / f"configs/nodes/{NODE}.yaml").write_text(yaml.safe_dump({
            "hardware": {"gpu": {"model": "none", "count": 0}}, "concurrency": [1], "probes": None,
            "workloads": ["seed-002-tool-call", "seed-002-multi-turn"],
            "models": {"served": {"hf_dir": "/not/ours", "quant": "AWQ W4A16"}},
            "runs": [{"stack": "sglang-nospec", "model": "served", "launch": {"mode": "external", "url": url}}]}))
        # A short ready timeout: a server that never gets ready fails this test in seconds, not in 600.
        cfg = expand.load_run_config(tmp_path, {"nodes": [NODE], "measure": {"repeats": 3, "warmup_requests": 1,
                                                                             "ready_timeout_s": 10}})
        node = expand.load_node(NODE, cfg, tmp_path)
        part = sequencer.LaunchRun(launchspec.build(cfg, node, node.launches[0]), tmp_path / "run").run()
    published = tmp_path / "published.parquet"
    store.atomic_write_parquet(store.to_table(published_records(ROOT / "data/published", ROOT)), published)
    collect_results([published, part], tmp_path / "results.parquet")
    render.write_report(tmp_path / "results.parquet", tmp_path / "reports", ROOT / "data/published")
    return tmp_path, [json.loads(line) for line in bodies.read_text().splitlines()]


def measured_cell(tmp_path, workload: str):
    results = store.read_results(tmp_path / "results.parquet")
    return results[(results["workload"] == workload) & (results["source"] == "measured")].set_index("metric")


def test_the_tool_call_sends_the_schema_without_a_fixed_length_and_checks_the_call(measured):
    tmp_path, bodies = measured
    calls = [b for b in bodies if b.get("tools")]
    assert len(calls) == 4  # the warm-up and three repeats
    assert all(b["tools"][0]["function"]["name"] == "get_weather_forecast" for b in calls)
    assert all("min_tokens" not in b and "ignore_eos" not in b for b in calls)  # ends where the model ends it
    cell = measured_cell(tmp_path, "seed-002-tool-call")
    assert set(cell["status"]) == {"ok"}
    assert cell.loc["tool_call_ok", "value"] == 1  # an answer with a call and no content at all
    assert cell.loc["request_wall_s", "value"] == pytest.approx(WALL_S, rel=0.2)
    assert "output_len_ok" not in cell.index  # no fixed length to check
    requests = pd.read_parquet(next((tmp_path / "run/cells").glob("seed-002-tool-call--*.requests.parquet")))
    assert set(requests["tool_name"]) == {"get_weather_forecast"} and set(requests["content_chars"]) == {0}


def test_the_second_round_is_timed_on_its_own(measured):
    tmp_path, bodies = measured
    second = [b for b in bodies if len(b["messages"]) == 3]  # question, answer, follow-up
    assert len(second) == 4 and all(b["messages"][1]["role"] == "assistant" for b in second)
    cell = measured_cell(tmp_path, "seed-002-multi-turn")
    assert set(cell["status"]) == {"ok"}
    assert cell.loc["request_wall_later_turns_s", "value"] == pytest.approx(WALL_S, rel=0.2)
    assert cell.loc["request_wall_s", "value"] == pytest.approx(WALL_S, rel=0.2)


def test_seed_002s_table_takes_a_no_spec_launch_in_the_block_under_it(measured):
    """The post's rows are SGLang + EAGLE 3/1/4; this node's launch is SGLang without speculation: its
    figures stand in the block of other launches under the table, with their unit, never as the same method."""
    from stackbench.report.seeds import OTHER_LAUNCHES

    tmp_path, _ = measured
    lines = (tmp_path / "reports/tables/s002-op.md").read_text(encoding="utf-8").splitlines()
    rows = [line for line in lines if line.startswith("| ")]
    labels = [row.split(" | ")[0].lstrip("| ") for row in rows]
    assert not [label for label in labels if "same method" in label]
    block = labels.index(OTHER_LAUNCHES)
    tool = next(i for i, label in enumerate(labels) if label.startswith(f"工具调用 · {NODE}, same workload, other launch"))
    turn = next(i for i, label in enumerate(labels) if label.startswith(f"多轮 radix 命中 · {NODE}, same workload, other launch"))
    assert block < tool and block < turn
    # The post's 速度 column holds tok/s, s and ms, one unit per row: it stays whole, each figure with its unit.
    header = rows[0].strip("| ").split(" | ")
    assert header == ["场景", "速度", "测法"]
    at = header.index("速度")
    assert [row.split(" | ")[at].split()[1] for row in (rows[tool], rows[turn])] == ["s", "s"]  # each with its unit
    assert [float(row.split(" | ")[at].split()[0]) for row in (rows[tool], rows[turn])] == pytest.approx([WALL_S] * 2, rel=0.2)
    text = "\n".join(lines)
    assert "same method: measured with" in text and "seed-002-tool-call" in text and "seed-002-multi-turn" in text
