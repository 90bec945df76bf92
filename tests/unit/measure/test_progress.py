"""A launch's cell progress on the console: a line per cell (done of total, the cell, time so far and time
left), the detail in the job's log. A real launch's console is tests/integration/test_progress_console.py."""

from __future__ import annotations

import io
import subprocess
import sys

from stackbench.measure import progress


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
