"""A real launch against the stand-in engine (a TEST DOUBLE, not an inference engine) prints one line per
cell on its console."""

from __future__ import annotations

import io
import shutil
from dataclasses import replace

import pytest
import yaml
from helpers import serving
from paths import ROOT, STANDIN_SETS

from stackbench.measure import sequencer
from stackbench.plan import expand, launchspec
from stackbench.rehearsal.standin import Timing


@pytest.mark.integration  # serves the double and measures through the run loop
def test_a_launch_prints_a_line_per_cell_on_its_console(tmp_path):
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    (tmp_path / "configs/nodes/progress-cpu.yaml").write_text(yaml.safe_dump({
        "hardware": {"gpu": {"model": "none", "count": 0}}, "concurrency": [1, 2], "probes": None, "accuracy": None,
        "workloads": ["code"], "models": {"served": {"hf_dir": "/not/ours", "quant": "AWQ W4A16"}},
        "runs": [{"stack": "sglang-nospec", "model": "served", "launch": {"mode": "external", "url": "{url}"}}]}))
    console = io.StringIO()
    with serving(replace(Timing(), ttft_s=0.01, interval_s=0.001, reasoning_tokens=0, engine="sglang")) as url:
        node_file = tmp_path / "configs/nodes/progress-cpu.yaml"
        node_file.write_text(node_file.read_text().replace("'{url}'", url))
        cfg = expand.load_run_config(tmp_path, {"nodes": ["progress-cpu"], "paths": {"datasets": str(STANDIN_SETS)},
                                                "measure": {"repeats": 1, "warmup_requests": 1, "ready_timeout_s": 10}})
        node = expand.load_node("progress-cpu", cfg, tmp_path)
        sequencer.LaunchRun(launchspec.build(cfg, node, node.launches[0]), tmp_path / "run", console=console).run()
    lines = console.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines[:2]] == ["measure progress-cpu/sglang-nospec--nospec: cell 1/2 code--c1--nocap",
                                                           "measure progress-cpu/sglang-nospec--nospec: cell 2/2 code--c2--nocap"]
    assert "left by the cells so far" in lines[1]
    assert lines[2].startswith("measure progress-cpu/sglang-nospec--nospec: 2/2 cells, 2 measured in ")
