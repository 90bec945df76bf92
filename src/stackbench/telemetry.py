"""GPU telemetry and power caps through NVML (nvidia-ml-py, imported as pynvml), behind a small interface.

pynvml is touched only by NvmlGpus; tests pass a test double of the module. Units sit in names: NVML
reports power in mW and energy in mJ; everything leaving this module is W, J and MiB.

A power cap changed here is written to a state file before it is applied and restored on every exit
path; a run that died hard leaves the state file behind, and the next start restores from it.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

SAMPLE_PERIOD_S = 0.5
STATE_FILE = Path(".stackbench/power_state.json")


class TelemetryUnavailable(RuntimeError):
    """No GPU, no NVML or no permission: the run goes on and the report says why."""


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    min_limit_w: float
    max_limit_w: float
    default_limit_w: float


class NvmlGpus:
    """The GPUs of this machine through NVML. `nvml` is the pynvml module, or a test double of it."""

    def __init__(self, nvml=None):
        if nvml is None:
            try:
                import pynvml as nvml  # the nvidia-ml-py distribution
            except ImportError as err:
                raise TelemetryUnavailable(f"nvidia-ml-py not importable: {err}") from err
        self.nvml = nvml
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as err:
            raise TelemetryUnavailable(f"NVML unavailable: {err}") from err
        if count == 0:
            raise TelemetryUnavailable("NVML sees no GPU")
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.info = [self._info(i, h) for i, h in enumerate(self.handles)]

    def _text(self, value) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    def _info(self, index: int, handle) -> GpuInfo:
        n = self.nvml
        low_mw, high_mw = n.nvmlDeviceGetPowerManagementLimitConstraints(handle)
        return GpuInfo(index, self._text(n.nvmlDeviceGetUUID(handle)), self._text(n.nvmlDeviceGetName(handle)),
                       low_mw / 1000, high_mw / 1000, n.nvmlDeviceGetPowerManagementDefaultLimit(handle) / 1000)

    def sample(self) -> list[dict]:
        """One reading per GPU. nvmlDeviceGetPowerUsage is a 1-second average on Ampere and newer."""
        n, rows = self.nvml, []
        for info, handle in zip(self.info, self.handles):
            memory = n.nvmlDeviceGetMemoryInfo(handle)
            rows.append({
                "gpu_uuid": info.uuid, "gpu_index": info.index,
                "power_w": n.nvmlDeviceGetPowerUsage(handle) / 1000,
                "energy_j": n.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000,
                "memory_used_mib": memory.used / 2**20,
                "sm_clock_mhz": n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_SM),
                "temperature_c": n.nvmlDeviceGetTemperature(handle, n.NVML_TEMPERATURE_GPU),
                "utilization_pct": n.nvmlDeviceGetUtilizationRates(handle).gpu,
                "throttle_reasons": n.nvmlDeviceGetCurrentClocksEventReasons(handle),
                "enforced_limit_w": n.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000,
            })
        return rows

    def limit_w(self, index: int) -> float:
        return self.nvml.nvmlDeviceGetPowerManagementLimit(self.handles[index]) / 1000

    def set_limit_w(self, index: int, watts: float) -> None:
        try:
            self.nvml.nvmlDeviceSetPowerManagementLimit(self.handles[index], int(round(watts * 1000)))
        except self.nvml.NVMLError as err:
            raise TelemetryUnavailable(f"cannot set the power limit of GPU {index}: {err}") from err

    def enforced_w(self, index: int) -> float:
        return self.nvml.nvmlDeviceGetEnforcedPowerLimit(self.handles[index]) / 1000


def open_gpus(gpu_count: int, nvml=None):
    """The node's GPUs, or the reason there are none to read (a CPU node, no driver, no permission)."""
    if gpu_count == 0:
        return None, "no GPU on this node"
    try:
        return NvmlGpus(nvml), None
    except TelemetryUnavailable as err:
        return None, str(err)


class Sampler:
    """Samples every GPU every 0.5 s in a thread for the whole launch; cells are windows over the series."""

    def __init__(self, gpus: NvmlGpus, period_s: float = SAMPLE_PERIOD_S, clock=time.monotonic):
        self.gpus, self.period_s, self.clock = gpus, period_s, clock
        self.rows: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.take()
            self._stop.wait(self.period_s)

    def take(self) -> None:
        now = self.clock()
        self.rows += [{"t": now, **row} for row in self.gpus.sample()]

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def window(self, start: float, end: float) -> list[dict]:
        return [r for r in self.rows if start <= r["t"] <= end]


def summarise_window(rows: list[dict], output_tokens: int) -> dict:
    """Per-cell figures from the samples inside its window: mean and p95 power (summed over GPUs),
    energy per output token from the energy counter's delta, and peak memory."""
    if not rows:
        return {}
    by_time: dict[float, list[dict]] = {}
    for row in rows:
        by_time.setdefault(row["t"], []).append(row)
    power = sorted(sum(r["power_w"] for r in group) for group in by_time.values())
    energy = 0.0
    for uuid in {r["gpu_uuid"] for r in rows}:
        series = [r["energy_j"] for r in rows if r["gpu_uuid"] == uuid]
        energy += series[-1] - series[0]
    out = {"power_w": statistics.mean(power), "power_p95_w": power[min(len(power) - 1, round(0.95 * (len(power) - 1)))],
           "vram_mib": max(sum(r["memory_used_mib"] for r in group) for group in by_time.values())}
    if output_tokens and energy > 0:
        out["energy_j_per_token"] = energy / output_tokens
    return out


@dataclass
class PowerCapper:
    """Sets a power cap on every GPU of the node and always puts the original limits back.

    The original limits are written to `state_file` before the first change; restore() runs on every
    exit path (context manager, and the caller's signal handling turns SIGTERM into an exception), and
    restore_leftover() at the next start repairs a run that died hard.
    """

    gpus: NvmlGpus
    state_file: Path = STATE_FILE
    settle_s: float = 2.0
    sleep: callable = time.sleep
    original: dict[int, float] = field(default_factory=dict)

    def check(self, cap_w: float) -> None:
        for info in self.gpus.info:
            if not info.min_limit_w <= cap_w <= info.max_limit_w:
                raise ValueError(f"power cap {cap_w:g} W is outside GPU {info.index} ({info.name})'s range "
                                 f"{info.min_limit_w:g}-{info.max_limit_w:g} W")

    def apply(self, cap_w: float) -> float:
        """Set the cap on every GPU, read it back, let clocks settle; return the enforced cap."""
        self.check(cap_w)
        if not self.original:
            self.original = {i.index: self.gpus.limit_w(i.index) for i in self.gpus.info}
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            self.state_file.write_text(json.dumps({"pid": os.getpid(), "limits_w": self.original,
                                                   "uuids": [i.uuid for i in self.gpus.info]}))
        for info in self.gpus.info:
            self.gpus.set_limit_w(info.index, cap_w)
        enforced = [self.gpus.enforced_w(i.index) for i in self.gpus.info]
        if any(abs(e - cap_w) > 1 for e in enforced):
            raise TelemetryUnavailable(f"power cap {cap_w:g} W did not take: enforced {enforced} W")
        self.sleep(self.settle_s)
        return enforced[0]

    def restore(self) -> None:
        for index, watts in self.original.items():
            self.gpus.set_limit_w(index, watts)
        self.original = {}
        self.state_file.unlink(missing_ok=True)

    def restore_leftover(self) -> bool:
        """Restore limits a previous run changed and never put back; True if there was something to do."""
        if not self.state_file.exists():
            return False
        state = json.loads(self.state_file.read_text())
        for index, watts in state["limits_w"].items():
            self.gpus.set_limit_w(int(index), watts)
        self.state_file.unlink()
        return True

    def __enter__(self) -> "PowerCapper":
        self.restore_leftover()
        return self

    def __exit__(self, *exc) -> None:
        self.restore()
