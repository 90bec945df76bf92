"""A rehearsal's run backend (measure/backend.py RunBackend): the stand-in behind the real command
(launcher.py), the node's GPUs simulated (simgpu.py) with their locks in the rehearsal's own folder, and a
clock `time_scale` times fast (less for a cell of short replies or many streams: standin.cell_time_scale), divided
out of what
each cell's rows report so that they read at the stand-in's modeled pace.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from stackbench.config import rehearsal
from stackbench.config.model import Launch, Node
from stackbench.host import powercap
from stackbench.host.telemetry import NvmlGpus
from stackbench.measure.backend import REAL, RunBackend
from stackbench.measure.summary import Figure
from stackbench.plan.launchspec import Cell, LaunchSpec
from stackbench.rehearsal.launcher import StandinLauncher, simulated_host

# How a figure's unit scales with time: a rehearsal's clock runs `time_scale` times fast, so its seconds are
# multiplied and its rates divided by it to read at the stand-in's modeled pace; energy is power (modeled,
# not scaled) over time. Any other unit (ratio, tokens, W, MiB) has no time in it.
PER_TIME = {"s": 1, "ms": 1, "tok/s": -1, "req/s": -1, "J/token": 1, "J/response": 1}


def at_model_pace(figure: Figure, time_scale: float) -> Figure:
    """A rehearsal's figure at the modeled pace: its value, range, interval and deviation rescaled by its
    unit's power of time (PER_TIME)."""
    factor = time_scale ** PER_TIME.get(figure.unit, 0)
    if factor == 1:
        return figure
    scaled = {name: getattr(figure, name) * factor for name in ("value", "value_min", "value_max", "ci_low", "ci_high", "mad")
              if getattr(figure, name) is not None}
    return dataclasses.replace(figure, **scaled)


@dataclasses.dataclass(frozen=True)
class RehearsalBackend:
    """A rehearsal's launch: the stand-in on the node's simulated GPUs, its figures at the modeled pace."""

    settings: dict  # the spec's `rehearsal` (config/rehearsal.py Rehearsal.settings)
    # cell key -> the time scale it ran at (standin.cell_time_scale: the rehearsal's, less for short replies)
    scales: dict = dataclasses.field(default_factory=dict, compare=False)
    source = "rehearsal"  # stand-in engines on simulated GPUs measure nothing real: their rows' own source

    @property
    def time_scale(self) -> float:
        return self.settings["time_scale"]

    def gpu_host(self, node: Node):
        return simulated_host(node, self.time_scale)

    def lock_dir(self, node: Node) -> Path:
        return rehearsal.lock_dir(node.name)

    def open_server(self, launch: Launch, node: Node, adapter, env_info: dict, out_dir: Path,
                    gpu_devices: list[str] | None) -> StandinLauncher:
        return StandinLauncher(launch, adapter, env_info, out_dir, node.cpu_threads, gpu_devices, node, self.settings)

    def power_capper(self, gpus: NvmlGpus, lock_dir: Path) -> powercap.PowerCapper:
        # The simulated clocks settle as much faster as the rehearsal's time runs.
        return powercap.PowerCapper(gpus, lock_dir, settle_s=powercap.PowerCapper.settle_s / self.time_scale)

    def start_cell(self, cell: Cell, server: StandinLauncher) -> None:
        self.scales[cell.key] = server.set_cell_time_scale(shortest_reply(cell), cell.concurrency or 1)

    def figures_at_pace(self, figures: list[Figure], cell: Cell) -> list[Figure]:
        return [at_model_pace(f, self.scales.get(cell.key, self.time_scale)) for f in figures]

    def ready_at_pace(self, seconds: float | None) -> float | None:
        return seconds * self.time_scale if seconds else seconds


def shortest_reply(cell: Cell) -> int:
    """The fewest tokens a reply of the cell is asked for: its workload's output tokens, or the low end of a
    synthetic load's output lengths."""
    synthetic = cell.load.output_tokens
    return min(cell.workload.output_tokens, synthetic[0]) if synthetic else cell.workload.output_tokens


def for_spec(spec: LaunchSpec) -> RunBackend:
    """The backend a launch spec runs on: a rehearsal's where it was planned for one, else the node's own."""
    return RehearsalBackend(spec.rehearsal) if spec.rehearsal else REAL
