"""GPU telemetry and power caps through NVML (nvidia-ml-py, imported as pynvml), behind a small interface.

pynvml is touched only here; tests pass a test double of the module. Units sit in names: NVML reports
power in mW and energy in mJ; everything leaving this module is W, J and MiB.

NVML ignores CUDA_VISIBLE_DEVICES and enumerates every GPU of the host, so `select_gpus` picks the
launch's GPUs explicitly, and sampling, caps and restore touch exactly those.


Power caps and their restore state are host/powercap.py, over the same NvmlGpus.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy

SAMPLE_PERIOD_S = 0.5
MAX_SAMPLE_GAP_S = 2.0  # a window with a longer gap between samples gets no energy figure (InferenceX rejects gaps)

# NVML's clock event reasons (nvml.h nvmlClocksEventReason*) grouped as a cell's rows name them. Thermal is
# the SW or HW thermal slowdown; the SW power cap is the limit this tool (or the owner) set.
CLOCK_EVENTS = {"thermal": 0x20 | 0x40, "hw_slowdown": 0x8, "power_brake": 0x80, "sw_power_cap": 0x4, "idle": 0x1}


class TelemetryUnavailable(RuntimeError):
    """No GPU, no NVML or no permission: the run goes on and the report says why."""


@dataclass(frozen=True)
class GpuInfo:
    index: int  # NVML's index, which is nvidia-smi's
    uuid: str
    pci_bus_id: str
    name: str
    min_limit_w: float
    max_limit_w: float
    default_limit_w: float


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlGpus:
    """Some GPUs of this machine through NVML. `nvml` is the pynvml module, or a test double of it;
    `indices` are NVML indices (all GPUs when None). `source` says how they were chosen."""

    def __init__(self, nvml=None, indices: Sequence[int] | None = None, source: str = "every GPU NVML sees"):
        if nvml is None:
            try:
                import pynvml as nvml  # the nvidia-ml-py distribution
            except ImportError as err:
                raise TelemetryUnavailable(f"nvidia-ml-py not importable: {err}") from err
        self.nvml, self.source = nvml, source
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as err:
            raise TelemetryUnavailable(f"NVML unavailable: {err}") from err
        if count == 0:
            raise TelemetryUnavailable("NVML sees no GPU")
        chosen = list(range(count)) if indices is None else list(indices)
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in chosen]
        self.info = [self._info(i, h) for i, h in zip(chosen, self.handles)]

    def _info(self, index: int, handle) -> GpuInfo:
        n = self.nvml
        low_mw, high_mw = n.nvmlDeviceGetPowerManagementLimitConstraints(handle)
        return GpuInfo(index, _text(n.nvmlDeviceGetUUID(handle)), _text(n.nvmlDeviceGetPciInfo(handle).busId),
                       _text(n.nvmlDeviceGetName(handle)), low_mw / 1000, high_mw / 1000,
                       n.nvmlDeviceGetPowerManagementDefaultLimit(handle) / 1000)

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
                "limit_w": n.nvmlDeviceGetPowerManagementLimit(handle) / 1000,
                "enforced_limit_w": n.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000,
            })
        return rows

    def memory_used_mib(self) -> dict[str, float]:
        """nvmlDeviceGetMemoryInfo used per GPU UUID, MiB."""
        return {info.uuid: self.nvml.nvmlDeviceGetMemoryInfo(h).used / 2**20 for info, h in zip(self.info, self.handles)}

    def processes(self) -> dict[str, list[tuple[int, float | None]]]:
        """nvmlDeviceGetComputeRunningProcesses per GPU UUID: (pid, MiB it holds; None where NVML cannot say)."""
        return {info.uuid: [(p.pid, p.usedGpuMemory / 2**20 if p.usedGpuMemory is not None else None)
                            for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(h)]
                for info, h in zip(self.info, self.handles)}

    def energy_mj(self) -> dict[str, int]:
        """nvmlDeviceGetTotalEnergyConsumption per GPU UUID: mJ since the driver loaded (Volta and newer)."""
        return {info.uuid: self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) for info, h in zip(self.info, self.handles)}

    def handle_of(self, uuid: str):
        """The handle of the GPU with this UUID among the selected ones."""
        for info, handle in zip(self.info, self.handles):
            if info.uuid == uuid:
                return handle
        raise TelemetryUnavailable(f"GPU {uuid} is not among the selected GPUs ({', '.join(i.uuid for i in self.info)})")

    def limit_w(self, uuid: str) -> float:
        return self.nvml.nvmlDeviceGetPowerManagementLimit(self.handle_of(uuid)) / 1000

    def set_limit_w(self, uuid: str, watts: float) -> None:
        try:
            self.nvml.nvmlDeviceSetPowerManagementLimit(self.handle_of(uuid), int(round(watts * 1000)))
        except self.nvml.NVMLError as err:
            raise TelemetryUnavailable(f"cannot set the power limit of GPU {uuid}: {err}") from err

    def enforced_w(self, uuid: str) -> float:
        return self.nvml.nvmlDeviceGetEnforcedPowerLimit(self.handle_of(uuid)) / 1000


# -- which GPUs --------------------------------------------------------------------------------------
def select_gpus(devices: Sequence[int | str] | None, count: int, nvml=None,
                environ: Mapping[str, str] | None = None) -> NvmlGpus:
    """The launch's GPUs, from the first of these that names any:

    1. `devices` from the node config (hardware.gpu.devices): nvidia-smi indices or UUIDs;
    2. the scheduler's allocation, SLURM_STEP_GPUS or SLURM_JOB_GPUS: GPU indices as the node numbers
       them. Checked before CUDA_VISIBLE_DEVICES because SLURM with device cgroups renumbers that
       variable from 0 inside the job, while NVML still sees the whole node;
    3. CUDA_VISIBLE_DEVICES: CUDA indices or UUIDs. CUDA numbers GPUs fastest first unless
       CUDA_DEVICE_ORDER=PCI_BUS_ID; both orders are the PCI bus order when every GPU is the same
       model, otherwise indices cannot be mapped and UUIDs are needed;
    4. the first `count` GPUs.
    Raises ValueError naming the source when it names a GPU that is not there or selects a number of
    GPUs other than `count`; TelemetryUnavailable when there is no NVML.
    """
    environ = os.environ if environ is None else environ
    every = NvmlGpus(nvml)
    slurm = next(((name, environ[name]) for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS") if environ.get(name)), None)
    if devices:
        source, indices = "hardware.gpu.devices", [_resolve(d, every.info, "hardware.gpu.devices") for d in devices]
    elif slurm:
        source = slurm[0]
        indices = [_resolve(int(d), every.info, source) for d in slurm[1].split(",")]
    elif environ.get("CUDA_VISIBLE_DEVICES"):
        source = "CUDA_VISIBLE_DEVICES"
        in_cuda_order = _cuda_order(every.info, environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST"))
        indices = [_resolve(d, in_cuda_order, source, by_position=True)
                   for d in environ["CUDA_VISIBLE_DEVICES"].split(",")]
    else:
        source, indices = f"the first {count}", [info.index for info in every.info[:count]]
    if len(indices) != count:
        raise ValueError(f"{source} selects {len(indices)} GPUs but the node has hardware.gpu.count {count}")
    return NvmlGpus(every.nvml, indices, source)


def _cuda_order(info: list[GpuInfo], device_order: str) -> list[GpuInfo] | None:
    """The GPUs in the order CUDA numbers them, or None where that cannot be known without CUDA."""
    by_bus = sorted(info, key=lambda i: i.pci_bus_id.lower())
    if device_order == "PCI_BUS_ID" or len({i.name for i in info}) == 1:
        return by_bus
    return None


def _resolve(device: int | str, ordered: list[GpuInfo] | None, source: str, by_position: bool = False) -> int:
    """NVML index of one device named by index or UUID (or a unique UUID prefix, as CUDA accepts)."""
    text = str(device).strip()
    if text.isdigit():
        if ordered is None:
            raise ValueError(f"{source}: index {text} cannot be mapped to a GPU: the GPUs differ and "
                             "CUDA_DEVICE_ORDER is not PCI_BUS_ID; name them by UUID")
        position = int(text)
        match = ordered[position:position + 1] if by_position else [i for i in ordered if i.index == position]
    else:
        match = [i for i in ordered or [] if i.uuid.startswith(text)]
    if len(match) != 1:
        known = ", ".join(f"{i.index}={i.uuid}" for i in ordered or [])
        raise ValueError(f"{source}: {text!r} names {'no' if not match else 'more than one'} GPU here ({known})")
    return match[0].index


def open_gpus(gpu_count: int, nvml=None, devices: Sequence[int | str] | None = None,
              environ: Mapping[str, str] | None = None):
    """(the node's selected GPUs, None), or (None, the reason there are none to read: a CPU node, no
    driver, no permission). A selection that names missing GPUs raises ValueError."""
    if gpu_count == 0:
        return None, "no GPU on this node"
    try:
        return select_gpus(devices, gpu_count, nvml, environ), None
    except TelemetryUnavailable as err:
        return None, str(err)


def all_gpus(nvml=None):
    """(every GPU NVML sees, None) or (None, why not): for describing a machine, never for measuring."""
    try:
        return NvmlGpus(nvml), None
    except TelemetryUnavailable as err:
        return None, str(err)


# -- sampling and energy windows ---------------------------------------------------------------------
@dataclass
class EnergyWindow:
    """An open measurement window: its start time and the energy counters read at that moment."""

    start: float
    energy_mj: dict[str, int] | None  # None: the counters could not be read
    why_no_counter: str | None = None


@dataclass(frozen=True)
class WindowReading:
    """What the selected GPUs did between open_window and close_window, summed over GPUs (the node's total),
    with each GPU's own mean power beside it (power_mean_w_by_gpu)."""

    duration_s: float
    energy_j: float | None  # None: no valid figure, energy_source says why
    energy_source: str  # "energy counter", why the power samples were integrated instead, or why there is none
    power_mean_w: float | None
    power_p95_w: float | None
    power_samples: int  # sample times inside the window
    vram_peak_mib: float | None
    gpu_uuids: tuple[str, ...]
    sampler_errors: tuple[str, ...] = ()
    clock: dict[str, dict[str, float]] = field(default_factory=dict)  # per GPU UUID: clock_state(samples)
    energy_sampled_j: float | None = None  # the sampled power's integral over the window: the counter's cross-check
    power_mean_w_by_gpu: dict[str, float] = field(default_factory=dict)  # per GPU UUID: its own mean power (W per GPU)


class Sampler:
    """Samples the selected GPUs every 0.5 s in a thread for the whole launch; cells are windows over it.

    An NVML error in the thread is recorded (time and message) and sampling goes on; `errors_between`
    tells a window about it so that its cell can say so.
    """

    def __init__(self, gpus: NvmlGpus, period_s: float = SAMPLE_PERIOD_S, clock=time.monotonic):
        self.gpus, self.period_s, self.clock = gpus, period_s, clock
        self.rows: list[dict] = []
        self.errors: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.take()
            except self.gpus.nvml.NVMLError as err:
                self.errors.append((self.clock(), f"NVML error while sampling: {err}"))
            self._stop.wait(self.period_s)

    def take(self) -> None:
        now = self.clock()
        self.rows += [{"t": now, **row} for row in self.gpus.sample()]

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def window(self, start: float, end: float) -> list[dict]:
        return [r for r in self.rows if start <= r["t"] <= end]

    def errors_between(self, start: float, end: float) -> list[str]:
        return [message for t, message in self.errors if start <= t <= end]

    def open_window(self) -> EnergyWindow:
        """Start a window now: read every selected GPU's energy counter at this moment."""
        start = self.clock()
        try:
            return EnergyWindow(start, self.gpus.energy_mj())
        except self.gpus.nvml.NVMLError as err:
            return EnergyWindow(start, None, f"energy counter unreadable ({err})")

    def close_window(self, window: EnergyWindow) -> WindowReading:
        """End the window now. Energy is the counters' difference between the window's start and end; where
        a counter went backwards (driver reload, reset) or could not be read, the power samples inside
        the window are integrated instead (trapezoids) and `energy_source` says so. A counter that did not
        advance gives no energy figure (counter_stalled). Power mean and p95 come from the samples inside
        the window only (one taken at its end when it was shorter than the sampling period)."""
        end = self.clock()
        try:
            now_mj = self.gpus.energy_mj()
        except self.gpus.nvml.NVMLError as err:
            now_mj, window.why_no_counter = None, f"energy counter unreadable ({err})"
        inside = self.window(window.start, end)
        if not inside:  # a window shorter than the sampling period: one sample, at its end
            try:
                self.take()
                inside = self.window(window.start, self.clock())
            except self.gpus.nvml.NVMLError as err:
                self.errors.append((self.clock(), f"NVML error while sampling: {err}"))
        totals = power_by_time(inside)
        energy_j, source = None, "energy counter"
        if window.energy_mj is not None and now_mj is not None:
            deltas = {uuid: now_mj[uuid] - window.energy_mj[uuid] for uuid in window.energy_mj}
            stalled = next((uuid for uuid, delta in deltas.items() if delta == 0), None)
            if any(delta < 0 for delta in deltas.values()):
                window.why_no_counter = "energy counter went backwards (reset)"
            elif stalled is not None:
                source = f"no energy figure: {counter_stalled(stalled, end - window.start)}"
            else:
                energy_j = sum(deltas.values()) / 1000
        if window.why_no_counter is not None:
            source = f"integrated {self.period_s:g} s power samples: {window.why_no_counter}"
            energy_j = _integrate(totals) if len(totals) >= 2 else None
            if energy_j is None:
                source = f"no energy figure: {window.why_no_counter}, and fewer than 2 power samples to integrate"
        gap = sample_gap_s([t for t, _ in totals], window.start, end)
        if gap > MAX_SAMPLE_GAP_S:  # the samples do not cover the window: neither figure can be checked
            energy_j, source = None, f"no energy figure: a {gap:.1f} s gap between NVML samples (over {MAX_SAMPLE_GAP_S:g} s)"
        power = [watts for _, watts in totals]
        return WindowReading(
            duration_s=end - window.start, energy_j=energy_j, energy_source=source,
            power_mean_w=float(numpy.mean(power)) if power else None,
            power_p95_w=float(numpy.percentile(power, 95)) if power else None, power_samples=len(power),
            vram_peak_mib=_vram_peak(inside), gpu_uuids=tuple(i.uuid for i in self.gpus.info),
            sampler_errors=tuple(self.errors_between(window.start, end)), clock=clock_state(inside),
            energy_sampled_j=power_integral(self.window(window.start - MAX_SAMPLE_GAP_S, end + MAX_SAMPLE_GAP_S),
                                            window.start, end),
            power_mean_w_by_gpu=power_by_gpu(inside))


def sample_gap_s(times: list[float], start: float, end: float) -> float:
    """The longest span in [start, end] without a sample (the window's edges count as its bounds)."""
    inside = sorted(t for t in times if start <= t <= end)
    points = [start, *inside, end]
    return max(b - a for a, b in zip(points, points[1:]))


def _at(series: list[tuple[float, float]], t: float) -> float | None:
    """The series linearly interpolated at t from the two points that bracket it; None when none do."""
    before = [p for p in series if p[0] <= t]
    after = [p for p in series if p[0] >= t]
    if not before or not after:
        return None
    (t0, v0), (t1, v1) = before[-1], after[0]
    return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def counter_stalled(uuid: str, seconds: float) -> str:
    """Why a window whose energy counter read the same at both edges has no energy figure. The counter moves in
    steps, so a window shorter than one reads no change: 0 J there is not the energy, and nothing divides by it."""
    return f"the energy counter of {uuid} did not advance over the {seconds:.1f} s window: too short for the counter's step"


def counter_energy_j(rows: list[dict], start: float, end: float) -> tuple[float | None, str]:
    """Energy over [start, end] from the nvmlDeviceGetTotalEnergyConsumption readings in the samples: per GPU,
    the counter interpolated at each edge from the two samples that bracket it, end minus start, summed over
    the GPUs. (None, why) where the window is empty, a sample gap inside it exceeds MAX_SAMPLE_GAP_S, no
    sample brackets an edge, or a counter went backwards or did not advance (counter_stalled)."""
    if not end > start:
        return None, f"an empty window ({start:g} s to {end:g} s)"
    by_gpu: dict[str, list[tuple[float, float]]] = {}
    for row in sorted(rows, key=lambda r: r["t"]):
        by_gpu.setdefault(row["gpu_uuid"], []).append((row["t"], row["energy_j"]))
    if not by_gpu:
        return None, "no NVML sample around the window"
    total = 0.0
    for uuid, series in by_gpu.items():
        times = [t for t, _ in series]
        covering = [t for t in times if t <= start][-1:] + [t for t in times if start < t < end] + [t for t in times if t >= end][:1]
        gap = max((b - a for a, b in zip(covering, covering[1:])), default=float("inf"))
        first, last = _at(series, start), _at(series, end)
        if first is None or last is None:
            return None, f"no NVML sample brackets the window's edges on {uuid}"
        if gap > MAX_SAMPLE_GAP_S:
            return None, f"a {gap:.1f} s gap between NVML samples on {uuid} (over {MAX_SAMPLE_GAP_S:g} s)"
        if last < first:
            return None, f"the energy counter of {uuid} went backwards (reset)"
        if last == first:
            return None, counter_stalled(uuid, end - start)
        total += last - first
    return total, "energy counter"


def power_integral(rows: list[dict], start: float, end: float) -> float | None:
    """The power summed over GPUs, sampled, integrated over [start, end] (trapezoids): the cross-check of the
    counter's energy. An edge is interpolated from the samples that bracket it, else the nearest sample's
    power is held to it (a window closing before its next sample). None without any sample."""
    series = power_by_time(rows)
    if not series:
        return None
    first = _at(series, start)
    last = _at(series, end)
    first = series[0][1] if first is None else first
    last = series[-1][1] if last is None else last
    return _integrate([(start, first), *[p for p in series if start < p[0] < end], (end, last)])


def clock_state(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per GPU UUID over these samples: the share of samples with each clock event reason (CLOCK_EVENTS, from
    nvmlDeviceGetCurrentClocksEventReasons), the SM clock's median (MHz) and the temperature's maximum (C)."""
    by_gpu: dict[str, list[dict]] = {}
    for row in rows:
        by_gpu.setdefault(row["gpu_uuid"], []).append(row)
    return {uuid: {**{f"share_{name}": sum(1 for r in samples if r["throttle_reasons"] & bits) / len(samples)
                      for name, bits in CLOCK_EVENTS.items()},
                   "sm_clock_mhz": float(numpy.median([r["sm_clock_mhz"] for r in samples])),
                   "temp_max_c": float(max(r["temperature_c"] for r in samples))}
            for uuid, samples in by_gpu.items()}


def power_by_gpu(rows: list[dict]) -> dict[str, float]:
    """Each GPU's own mean power over these samples (W per GPU): what that GPU's power limit bounds."""
    by_gpu: dict[str, list[float]] = {}
    for row in rows:
        by_gpu.setdefault(row["gpu_uuid"], []).append(row["power_w"])
    return {uuid: float(numpy.mean(watts)) for uuid, watts in by_gpu.items()}


def power_by_time(rows: list[dict]) -> list[tuple[float, float]]:
    """Power summed over the selected GPUs at each sample time, in time order."""
    by_time: dict[float, float] = {}
    for row in rows:
        by_time[row["t"]] = by_time.get(row["t"], 0.0) + row["power_w"]
    return sorted(by_time.items())


def _integrate(series: list[tuple[float, float]]) -> float:
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(series, series[1:]))


def _vram_peak(rows: list[dict]) -> float | None:
    by_time: dict[float, float] = {}
    for row in rows:
        by_time[row["t"]] = by_time.get(row["t"], 0.0) + row["memory_used_mib"]
    return max(by_time.values()) if by_time else None
