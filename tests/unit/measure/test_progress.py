"""A launch's cell progress on the console: a line per cell (done of total, the cell, time so far and time
left), the detail in the job's log; a real launch against the stand-in engine (a TEST DOUBLE, not an
inference engine) prints one line per cell."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest
import yaml
from helpers import serving
from paths import ROOT

from stackbench.measure import progress, sequencer
from stackbench.plan import expand, launchspec
from stackbench.rehearsal.standin import Timing


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_each_cell_says_done_of_total_and_the_time_left_by_the_cells_measured_so_far():
    clock, console = Clock(), io.StringIO()
    # A resumed launch: 2 of 6 cells measured before, so they count as done but not in the time per cell.
    bar = progress.CellProgress("local-cpu/llamacpp-nospec", 6, 2, console, clock)
    bar.start("code--c1--nocap")
    clock.now += 30
    bar.finish()
    bar.start("code--c2--nocap")
    clock.now += 50
    bar.finish()
    bar.close()
    lines = console.getvalue().splitlines()
    assert lines == [
        "measure local-cpu/llamacpp-nospec: cell 3/6 code--c1--nocap (0 s so far)",
        # 30 s for one cell, 3 cells left: 90 s
        "measure local-cpu/llamacpp-nospec: cell 4/6 code--c2--nocap (30 s so far, about 1 min 30 s left by the cells so far)",
        "measure local-cpu/llamacpp-nospec: 4/6 cells, 2 measured in 1 min 20 s",
    ]


def test_the_console_gets_the_progress_and_the_log_the_detail_child_processes_included(tmp_path):
    log = tmp_path / "measure.log"
    script = ("import subprocess, sys, logging\n"
              "from pathlib import Path\n"
              "from stackbench.measure.progress import console_and_log\n"
              f"console = console_and_log(Path({str(log)!r}))\n"
              "logging.basicConfig(stream=sys.stderr)\n"
              "logging.warning('detail from logging')\n"
              "subprocess.run([sys.executable, '-c', 'import sys; sys.stderr.write(\"detail from a child\\\\n\")'])\n"
              "console.write('cell 1/2\\n')\n"
              "raise SystemExit('a traceback-worthy end')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stderr == "cell 1/2\n"
    detail = log.read_text()
    assert "detail from logging" in detail and "detail from a child" in detail and "a traceback-worthy end" in detail


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
        cfg = expand.load_run_config(tmp_path, {"nodes": ["progress-cpu"], "measure": {"repeats": 1, "warmup_requests": 1,
                                                                                     "ready_timeout_s": 10}})
        node = expand.load_node("progress-cpu", cfg, tmp_path)
        sequencer.LaunchRun(launchspec.build(cfg, node, node.launches[0]), tmp_path / "run", console=console).run()
    lines = console.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines[:2]] == ["measure progress-cpu/sglang-nospec--nospec: cell 1/2 code--c1--nocap",
                                                           "measure progress-cpu/sglang-nospec--nospec: cell 2/2 code--c2--nocap"]
    assert "left by the cells so far" in lines[1]
    assert lines[2].startswith("measure progress-cpu/sglang-nospec--nospec: 2/2 cells, 2 measured in ")
