"""What a launch runs on, chosen once where the launch starts (the `measure` command, stackbench.cli) and
handed to the sequencer, which asks it and never which one it has: the node's own engines and GPUs (REAL,
here), or a rehearsal's stand-ins on simulated GPUs (stackbench.rehearsal.backend), whose clock runs
`time_scale` times fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from stackbench.config.model import Launch, Node
from stackbench.host import locks, powercap
from stackbench.host.telemetry import NvmlGpus
from stackbench.measure.summary import Figure
from stackbench.plan.launchspec import Cell
from stackbench.serve.launchers import Launcher, open_launcher


class RunBackend(Protocol):
    source: str  # what the launch's rows are (results/store.py SOURCES)

    def gpu_host(self, node: Node):
        """The NVML the launch's telemetry and caps read; None: this machine's own (pynvml)."""

    def lock_dir(self, node: Node) -> Path:
        """The folder of the launch's GPU locks, server records and power-cap states."""

    def open_server(self, launch: Launch, node: Node, adapter, env_info: dict, out_dir: Path,
                    gpu_devices: list[str] | None) -> Launcher:
        """The launch's server, not started yet."""

    def power_capper(self, gpus: NvmlGpus, lock_dir: Path) -> powercap.PowerCapper:
        """The capper of the launch's GPUs, letting their clocks settle as long as the backend's clock needs."""

    def start_cell(self, cell: Cell, server: Launcher) -> None:
        """Before a cell's first request: set the clock its figures are read at (a rehearsal's, per cell)."""

    def figures_at_pace(self, figures: list[Figure], cell: Cell) -> list[Figure]:
        """A cell's figures at the pace its rows report."""

    def ready_at_pace(self, seconds: float | None) -> float | None:
        """The launch's seconds to ready at the pace its rows report."""


class RealBackend:
    """The node's own engines on its GPUs: every figure as measured."""

    source = "measured"

    def gpu_host(self, node: Node):
        return None

    def lock_dir(self, node: Node) -> Path:
        return locks.lock_dir(node.lock_dir)

    def open_server(self, launch: Launch, node: Node, adapter, env_info: dict, out_dir: Path,
                    gpu_devices: list[str] | None) -> Launcher:
        return open_launcher(launch, adapter, env_info, out_dir, node.cpu_threads, gpu_devices)

    def power_capper(self, gpus: NvmlGpus, lock_dir: Path) -> powercap.PowerCapper:
        return powercap.PowerCapper(gpus, lock_dir)

    def start_cell(self, cell: Cell, server: Launcher) -> None:
        pass  # a real server runs at its own pace

    def figures_at_pace(self, figures: list[Figure], cell: Cell) -> list[Figure]:
        return figures

    def ready_at_pace(self, seconds: float | None) -> float | None:
        return seconds


REAL = RealBackend()
