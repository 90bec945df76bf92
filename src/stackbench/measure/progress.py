"""A launch's progress for the person at the console: a line as each cell starts (cells done of total, the
cell, the time so far and the time left by the cells measured so far) and one when the launch ends.

Snakemake prints a local job's stderr on its console, so the measure rule lets the job's stderr through and
the job sends its own detail (logging, tracebacks, library warnings) to the rule's log instead
(`console_and_log`): the console gets these lines only, the log keeps everything, these lines included.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TextIO

log = logging.getLogger(__name__)


def console_and_log(log_path: Path) -> TextIO:
    """Send this process's stderr (file descriptor 2, so child processes' and C libraries' writes too) to
    `log_path`, and return a line-buffered stream on the stderr it had, the console."""
    console = os.fdopen(os.dup(2), "w", buffering=1)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    return console


def duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


class CellProgress:
    """Counts a launch's cells; `total` includes the `done` ones a resumed launch measured before, which
    are left out of the time per cell."""

    def __init__(self, label: str, total: int, done: int, console: TextIO | None = None, clock=time.monotonic):
        self.label, self.total, self.done = label, total, done
        self.console, self.clock = console, clock
        self.started = clock()
        self.measured_here = 0

    def _say(self, text: str) -> None:
        line = f"measure {self.label}: {text}"
        log.info("%s", line)
        if self.console is not None:
            self.console.write(line + "\n")

    def start(self, key: str) -> None:
        """A line as cell `key` starts: what is done, the time so far, the time left by the cells so far."""
        elapsed = self.clock() - self.started
        timing = f"{duration(elapsed)} so far"
        if self.measured_here:
            left = elapsed / self.measured_here * (self.total - self.done)
            timing += f", about {duration(left)} left by the cells so far"
        self._say(f"cell {self.done + 1}/{self.total} {key} ({timing})")

    def finish(self) -> None:
        """After a cell, measured or skipped."""
        self.done += 1
        self.measured_here += 1

    def note(self, text: str) -> None:
        """Something the person should see between cells (waiting for a GPU another launch holds)."""
        self._say(text)

    def close(self, also: str | None = None) -> None:
        """The launch's last line; `also` adds what the person must know about its cells (a busy host)."""
        self._say(f"{self.done}/{self.total} cells, {self.measured_here} measured in {duration(self.clock() - self.started)}"
                  + (f"; {also}" if also else ""))
