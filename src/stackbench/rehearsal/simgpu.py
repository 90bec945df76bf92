"""TEST DOUBLE of the pynvml module (not NVML): simulated GPUs whose state lives in a dict, or in a JSON
file so that a process killed by a signal leaves behind what a real GPU keeps (its power limit).

Two uses, one double. Unit tests build it with knobs for the cases a real driver shows: mixed models and
PCI bus ids (enumeration vs CUDA order), NVML errors while sampling, a missing driver, a refused set, a cap
the GPU does not enforce, a memory bus width it does not report. A rehearsal builds a simulated host for
a node (`simulated_host`): the node's GPU model and memory, its power-limit range, and more GPUs than the
node uses, so that GPU scope is tested; there a set cap reads back, power = min(cap, demand), the demand
follows the load the stand-in on the GPU reports (report_load: idle, decode, prefill; load_draw_mw) and the
energy counter integrates that power. A real counter (nvmlDeviceGetTotalEnergyConsumption) moves in steps:
`energy_step_mj` makes the double's read in whole steps of that many mJ, so a short window can read no change.

GPU state (issue 36) lives in the same state: compute processes (pid, MiB held, and until when a dead one's
memory is still held: a driver frees a context some time after its process ends), so memory follows
launches and another user's process can be put on a GPU; extra clock event reasons per GPU (a throttled
GPU). A GPU drawing less than its demand because of its cap reports the SW power cap reason.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from stackbench.host import boards
from stackbench.host.boards import BOARD_POWER_W

# Board power (NVML's default limit) and the settable range: the node's (config/model.py Node, the file's facts
# else host/boards.py's), what a simulated GPU's limits are made of.
# Draw against load, as shares of the board power. An idle GPU (a context loaded, nothing running) draws
# IDLE_SHARE of it (30 W on a 300 W board). A compute-bound phase (a prefill, or a decode batch whose math fills
# the step) asks for the whole board power: the stock limit binds it. Public readings: an RTX 3090's llama.cpp
# prefill gained from 300 W to its stock 350 W (9,326 to 9,893 tok/s at 198K; llmgarage.ai "power limit tokens per
# second benchmark", 6x RTX 3090), and prefill is the heavy phase on an H200 (Ma et al., "The Illusion of Power
# Capping in LLM Decode", arXiv:2605.11999).
IDLE_SHARE = 0.1
DEMAND_SHARE = 1.0
# A memory-bound decode step (one stream) asks for this share of the way from idle to the full demand, by board
# class (memory_bound_share):
# - GDDR boards (GeForce, RTX workstation, L40S): 0.65. The same llmgarage.ai sweep's decode kept 94% of its speed
#   at 200 W and 97% at 250 W of 350 W (72.6 tok/s stock, 68.3 at 200 W, 70.7 at 250 W): its draw lies near
#   200-250 W, 0.57-0.71 of the board; an RTX 3090 on Qwen 3.6 27B lost under 1% at 280 W of 350 W (jeanfbrito.
#   github.io, "RTX 3090 power limit sweet spot"); an RTX 5060 Ti's single-stream decode of a 7B drew 172.7 W of
#   its 180 W (inventivehq.com, "GPU power limit tokens per watt"), a small model's short steps.
# - HBM boards (A100, H100, H200, B200): 0.15. An H200's decode drew 137-300 W of 700 W (Ma et al.): (137 - 70) /
#   (700 - 70) = 0.11 at its lightest; its 300 W is the batched end, which the compute share below reaches.
# The class is read from the bandwidth (HBM_BANDWIDTH_GBS): every GDDR board to date is at most 1,792 GB/s
# (GDDR7 on 512 bits at 28 Gbps), every HBM board from the A100 80GB PCIe's 1,935 GB/s on; a modeled boundary.
# A decode batch whose tokens' math takes a share f of the step (standin.decode_demand_mw) asks for
# share x (1 - f) + f of the way: near the limit where batching fills the tensor cores (a modeled assumption:
# the math of a full batch is a prefill's), its memory-bound share at one stream.
MEMORY_BOUND_SHARE = {"gddr": 0.65, "hbm": 0.15}
HBM_BANDWIDTH_GBS = 1900.0
# nvmlDeviceGetPowerUsage on Ampere and newer: the mean power over the last second (measure/summary.py
# telemetry_figures). A cell of a rehearsal lasts milliseconds here, between two 0.5 s samples, so the draw at an
# instant would mostly read the idle GPU after the cell's last request.
POWER_AVERAGE_S = 1.0
EXTRA_GPUS = 2  # a simulated host has this many GPUs more than the node uses
UUID_PREFIX = "GPU-simulated-"
SIM_BUS_BITS = 512  # a simulated board of a stated bandwidth: this bus width, and the memory clock that gives it
IDLE_USED_MIB = 300  # what an idle GPU shows used (the driver's own), under any idle threshold
RELEASE_S = 1.0  # how long after its process ends a context's memory is still held

# NVML's clock event reasons (nvml.h nvmlClocksEventReason*), the bits nvmlDeviceGetCurrentClocksEventReasons ORs.
GPU_IDLE, SW_POWER_CAP, HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, HW_POWER_BRAKE = 0x1, 0x4, 0x8, 0x20, 0x40, 0x80
THROTTLED_CLOCK_MHZ, THROTTLED_TEMP_C = 1200, 90  # what a thermally slowed simulated GPU reads


class NVMLError(Exception):
    pass


def memory_bound_share(bandwidth_gbs: float | None) -> float:
    """The share of the way from idle to the full demand a memory-bound decode step asks for, by the board's class
    (MEMORY_BOUND_SHARE): HBM from HBM_BANDWIDTH_GBS on, else GDDR."""
    return MEMORY_BOUND_SHARE["hbm" if (bandwidth_gbs or 0.0) >= HBM_BANDWIDTH_GBS else "gddr"]


def load_draw_mw(idle_mw: float, demand_mw: float, memory_share: float, compute_share: float) -> int:
    """What a GPU asks for under a load (the shape above): `memory_share` of the way from idle to its full demand
    where the step only reads, the full demand for the share of the step its math takes (`compute_share`)."""
    busy = memory_share * (1 - compute_share) + compute_share
    return int(idle_mw + (demand_mw - idle_mw) * min(1.0, max(0.0, busy)))


class NvmlDouble:
    """The calls NvmlGpus and PowerCapper make, over `count` simulated GPUs."""

    NVMLError = NVMLError
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_P2P_CAPS_INDEX_READ, NVML_P2P_CAPS_INDEX_NVLINK = 0, 2
    NVML_P2P_STATUS_OK, NVML_P2P_STATUS_NOT_SUPPORTED = 0, 5
    memory_bound_share = MEMORY_BOUND_SHARE["gddr"]  # a simulated host's: its board class's (simulated_host)

    def __init__(self, count=2, state_path: Path | None = None, limit_mw=300_000, deny_set=False,
                 names: list[str] | None = None, bus_ids: list[str] | None = None, no_driver=False,
                 enforce=True, clock=time.monotonic, bus_width_supported=True, min_mw=100_000, max_mw=350_000,
                 default_mw=350_000, memory_gib=24.0, demand_mw: int | None = None, idle_mw: int | None = None,
                 uuid_prefix="GPU-fake-",
                 energy_step_mj: int = 1, compute_capability=(8, 6), driver="simulated 0.0", cuda_driver=12080,
                 p2p_read=0, p2p_nvlink=5, average_s: float = 0.0, bandwidth_gbs: float | None = None):
        self.state_path = Path(state_path) if state_path else None
        # What the preflight reads (host/preflight.py): a P2P status is NVML's (0 ok, 5 not supported) per capability.
        self.compute_capability, self.driver, self.cuda_driver = compute_capability, driver, cuda_driver
        self.p2p = {self.NVML_P2P_CAPS_INDEX_READ: p2p_read, self.NVML_P2P_CAPS_INDEX_NVLINK: p2p_nvlink}
        self.energy_step_mj = energy_step_mj
        self.deny_set, self.no_driver, self.enforce = deny_set, no_driver, enforce
        self.bus_width_supported = bus_width_supported
        # What the bus width and memory clock give (host/boards.py memory_bandwidth_gbs): an RTX 3090's unless told.
        self.bus_bits = SIM_BUS_BITS if bandwidth_gbs else 384
        self.memory_clock_mhz = round(bandwidth_gbs * 1000 * 8 / 2 / SIM_BUS_BITS) if bandwidth_gbs else 9751
        self.min_mw, self.max_mw, self.default_mw = min_mw, max_mw, default_mw
        self.memory_gib, self.demand_mw, self.uuid_prefix = memory_gib, demand_mw, uuid_prefix
        # A GPU no process reports a load on asks for idle_mw (a simulated host), else its full demand.
        self.idle_mw = idle_mw
        self._loads: dict[int, tuple[list[int], int]] = {}  # pid -> (its GPUs, their demand), from its reports
        self._read_to: dict[Path, int] = {}  # how far each load log has been read
        self._unread: list[dict] = []  # this double's own reports, where no state file holds them
        # The sampler's thread and the cell's (the energy at a window's edges) read one double: one reads the logs at a time.
        self._reading = threading.RLock()
        self.set_calls: list[tuple[int, int]] = []
        self.names = names or ["NVIDIA GeForce RTX 3090"] * count
        self.bus_ids = bus_ids or [f"00000000:{0x41 + i:02X}:00.0" for i in range(count)]
        self._power_mw = [250_500] * count  # the unit tests' fixed draw, where no demand is simulated
        # Energy counter: an offset plus the integral of the power since creation (mW x s = mJ).
        self.clock, self.t0 = clock, clock()
        self.energy_offset_mj = [1_000_000] * count
        self._energy_mj, self._energy_at = [0.0] * count, [self.t0] * count
        # nvmlDeviceGetPowerUsage: the mean power over the last `average_s` (NVML's is over the last second on Ampere
        # and newer), from the energy at each load change (_checkpoints: time, each GPU's energy); 0: the draw now.
        self.average_s = average_s
        self._checkpoints: list[tuple[float, list[float]]] = [(self.t0, [0.0] * count)]
        self.fail_sampling = False
        if self.state_path is None or not self.state_path.exists():
            self._save({"limits_mw": [limit_mw] * count})
        self.count = count
        self._skip_history()

    @property
    def power_mw(self) -> list[int]:
        """Each GPU's power as NVML reports it: a fixed figure, or on a simulated host min(its cap, its demand), now
        or averaged over the last average_s."""
        if self.demand_mw is None:
            return self._power_mw
        with self._reading:
            self._advance()
            if not self.average_s:
                return self._draws(self._enforced())
            now = self._energy_at[0]  # the energy is accrued to here (_advance)
            since = max(now - self.average_s, self.t0)
            if now <= since:
                return self._draws(self._enforced())
            before = self._energy_at_time(since)
            return [int((self._energy_mj[h] - before[h]) / (now - since)) for h in range(self.count)]

    def _energy_at_time(self, t: float) -> list[float]:
        """Each GPU's integrated energy at time t (after the oldest checkpoint kept): the draw is constant between
        two checkpoints, so linear there."""
        earlier = [c for c in self._checkpoints if c[0] <= t]
        (t0, e0), (t1, e1) = earlier[-1], next((c for c in self._checkpoints if c[0] > t), (self._energy_at[0], self._energy_mj))
        share = (t - t0) / (t1 - t0) if t1 > t0 else 0.0
        return [a + (b - a) * share for a, b in zip(e0, e1)]

    @power_mw.setter
    def power_mw(self, values: list[int]) -> None:
        self._power_mw = values

    def demands_mw(self) -> list[int]:
        """What each GPU asks for now: the load a live process last reported on it (report_load), else idle_mw
        where set, else the full demand."""
        demands = [self.idle_mw if self.idle_mw is not None else self.demand_mw] * self.count
        for gpus, demand in self._loads.values():
            for h in gpus:
                demands[h] = demand
        return demands

    def _draws(self, limits: list[int]) -> list[int]:
        return [min(limit, demand) for limit, demand in zip(limits, self.demands_mw())]

    def _load_log(self, pid: int) -> Path:
        return self.state_path.with_name(f"{self.state_path.stem}.load.{pid}.jsonl")

    def report_load(self, gpus: list[int], demand_mw: int | None) -> None:
        """This process's work on GPUs `gpus` asks for demand_mw each (load_draw_mw; None: it ends) from now on.
        Appended to a log per process with the time (this double's clock, monotonic: one time base across the
        host's processes), so the energy counter of any process's double integrates every change in its order,
        however seldom it is read, and no report races the limits' writes."""
        event = {"t": self.clock(), "pid": os.getpid(), "gpus": list(gpus), "demand_mw": demand_mw}
        if self.state_path is None:
            self._unread.append(event)
            return
        with open(self._load_log(event["pid"]), "a") as log:
            log.write(json.dumps(event) + "\n")

    def end_load(self) -> None:
        """This process ends: its load with it (a killed one's ends when a reader finds its pid gone)."""
        self.report_load([], None)

    def _new_events(self) -> list[dict]:
        """The load events appended since this double last read them, every process's, in time order."""
        events, self._unread = self._unread, []
        if self.state_path is None:
            return events
        for path in self.state_path.parent.glob(f"{self.state_path.stem}.load.*.jsonl"):
            with open(path) as log:
                log.seek(self._read_to.get(path, 0))
                lines = log.readlines()
            complete = [line for line in lines if line.endswith("\n")]  # a line still being written waits
            self._read_to[path] = self._read_to.get(path, 0) + sum(len(line.encode()) for line in complete)
            events += [json.loads(line) for line in complete]
        return sorted(events, key=lambda e: e["t"])

    def _skip_history(self) -> None:
        """A new double starts from the loads in effect now (each log's last event), not their history."""
        if self.state_path is None:
            return
        for path in self.state_path.parent.glob(f"{self.state_path.stem}.load.*.jsonl"):
            text = path.read_bytes()
            end = text.rfind(b"\n") + 1
            self._read_to[path] = end
            last = text[:end].rstrip(b"\n").rsplit(b"\n", 1)[-1]
            if last:
                self._apply([json.loads(last)])

    def _apply(self, events: list[dict]) -> None:
        for event in events:
            if event["demand_mw"] is None:
                self._loads.pop(event["pid"], None)
            else:
                self._loads[event["pid"]] = (event["gpus"], event["demand_mw"])

    def _advance(self) -> None:
        """Energy and demands up to now: each load event since the last read at its own time, then the loads of
        processes that ended without a word (SIGKILL) dropped."""
        with self._reading:
            limits, now = self._enforced(), self.clock()
            for event in self._new_events():
                self._accrue(limits, min(event["t"], now))
                self._apply([event])
            for pid in [pid for pid in self._loads if not _alive(pid)]:
                del self._loads[pid]
            self._accrue(limits, now)

    def _accrue(self, limits: list[int], until: float) -> None:
        for h, power in enumerate(self._draws(limits)):
            if until > self._energy_at[h]:
                self._energy_mj[h] += power * (until - self._energy_at[h])
                self._energy_at[h] = until
        if self.average_s and until > self._checkpoints[-1][0]:  # the draws change here: a checkpoint for the average
            self._checkpoints.append((until, list(self._energy_mj)))
            before = [i for i, c in enumerate(self._checkpoints) if c[0] <= until - self.average_s]
            if before:  # keep the last one at or before the window's start
                del self._checkpoints[:before[-1]]

    def _enforced(self) -> list[int]:
        return [limit if self.enforce else self.default_mw for limit in self._load()["limits_mw"]]

    def _integrate(self) -> None:
        if self.demand_mw is not None:
            self._advance()

    def _processes(self, h: int) -> list[dict]:
        """The processes holding memory on GPU h now: alive, or dead less than their release time ago."""
        now = time.time()
        return [p for p in self._load().get("processes", []) if p["gpu"] == h
                and (now < (p.get("until") or 0) or (p.get("until") is None and _alive(p["pid"])))]

    def add_process(self, h: int, pid: int, used_mib: float, until: float | None = None) -> None:
        """A compute process on GPU h holding `used_mib`; with `until` (epoch s) it holds it that long
        whether its pid lives or not (another user's job in another pid namespace)."""
        state = self._load()
        holding = [p for gpu in range(self.count) for p in self._processes(gpu)]  # the ended ones are dropped
        state["processes"] = [*holding, {"gpu": h, "pid": pid, "used_mib": used_mib, "until": until}]
        self._save(state)

    def release(self, pid: int, after_s: float = RELEASE_S) -> None:
        """Process `pid` is ending: its memory is freed `after_s` from now."""
        state = self._load()
        for p in state.get("processes", []):
            if p["pid"] == pid:
                p["until"] = time.time() + after_s
        self._save(state)

    def throttle(self, h: int, reasons: int) -> None:
        """GPU h reports these clock event reasons (bits above) besides its own from now on."""
        state = self._load()
        state["throttle"] = {**state.get("throttle", {}), str(h): reasons}
        self._save(state)

    def _extra_reasons(self, h: int) -> int:
        return self._load().get("throttle", {}).get(str(h), 0)

    def _load(self):
        return json.loads(self.state_path.read_text()) if self.state_path else self._state

    def _save(self, state):
        if self.state_path:  # atomically: the sampler thread and the stand-in read it meanwhile
            self.state_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.state_path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(state))
            os.replace(tmp, self.state_path)
        else:
            self._state = state

    def index_of(self, uuid: str) -> int:
        return int(uuid.removeprefix(self.uuid_prefix))

    # the calls NvmlGpus makes ------------------------------------------------------------------------
    def nvmlInit(self):
        if self.no_driver:
            raise NVMLError("Driver Not Loaded")

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return f"{self.uuid_prefix}{h}".encode()

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self.bus_ids[h].encode())

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return self.compute_capability  # (8, 6) unless told: an RTX 3090

    def nvmlSystemGetDriverVersion(self):
        if self.no_driver:
            raise NVMLError("Driver Not Loaded")
        return self.driver.encode()

    def nvmlSystemGetCudaDriverVersion(self):
        return self.cuda_driver

    def nvmlDeviceGetP2PStatus(self, h1, h2, index):
        return self.p2p.get(index, self.NVML_P2P_STATUS_NOT_SUPPORTED)

    def nvmlDeviceGetName(self, h):
        return self.names[h].encode()

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        return self.min_mw, self.max_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return self.default_mw

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return self._load()["limits_mw"][h]

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._enforced()[h]

    def nvmlDeviceSetPowerManagementLimit(self, h, mw):
        if self.deny_set:
            raise NVMLError("Insufficient Permissions")
        if self.demand_mw is not None and not self.min_mw <= mw <= self.max_mw:
            raise NVMLError("Invalid Argument")  # what NVML answers for a limit outside the constraints
        self._integrate()
        state = self._load()
        state["limits_mw"][h] = mw
        state["touched"] = sorted({*state.get("touched", []), h})  # the GPUs ever set, so a test sees a run's scope
        self._save(state)
        self.set_calls.append((h, mw))

    def nvmlDeviceGetPowerUsage(self, h):
        if self.fail_sampling:
            raise NVMLError("GPU is lost")
        return self.power_mw[h]

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if self.demand_mw is None:
            total = int(self.energy_offset_mj[h] + self.power_mw[h] * (self.clock() - self.t0))
        else:
            with self._reading:
                self._integrate()
                total = int(self.energy_offset_mj[h] + self._energy_mj[h])
        return total - total % self.energy_step_mj  # the last whole step the counter has reached

    def nvmlDeviceGetMemoryInfo(self, h):
        total = int(self.memory_gib * 2**30)
        used = IDLE_USED_MIB + sum(p["used_mib"] for p in self._processes(h))
        return SimpleNamespace(used=int(min(used * 2**20, total)), total=total)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=int(p["used_mib"] * 2**20)) for p in self._processes(h)]

    def nvmlDeviceGetClockInfo(self, h, kind):
        return THROTTLED_CLOCK_MHZ if self._extra_reasons(h) & (SW_THERMAL | HW_THERMAL) else 1695

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return {self.NVML_CLOCK_MEM: self.memory_clock_mhz, self.NVML_CLOCK_SM: 2100}[kind]

    def nvmlDeviceGetMemoryBusWidth(self, h):
        if not self.bus_width_supported:
            raise NVMLError("Not Supported")
        return self.bus_bits

    def nvmlDeviceGetTemperature(self, h, kind):
        return THROTTLED_TEMP_C if self._extra_reasons(h) & (SW_THERMAL | HW_THERMAL) else 64

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=97, memory=80)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        if self.demand_mw is None:
            draw, demand = self.power_mw[h], self.default_mw
        else:  # the draw now, not the reported average
            self._advance()
            draw, demand = self._draws(self._enforced())[h], self.demands_mw()[h]
        capped = draw < demand and draw >= self._enforced()[h]
        return (SW_POWER_CAP if capped else 0) | self._extra_reasons(h)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def board_power_w(gpu_model: str) -> float:
    """A model's board power from host/boards.py (the tests' boards); a node's own is Node.board_power_w."""
    if gpu_model not in BOARD_POWER_W:
        raise ValueError(f"no board power known for {gpu_model!r} (host/boards.py BOARD_POWER_W)")
    return BOARD_POWER_W[gpu_model]


def simulated_host(gpu_model: str, gpu_count: int, memory_gib: float | None, state_path: Path,
                   compute_capability: str | None = None, interconnect: str | None = None,
                   average_s: float = POWER_AVERAGE_S, board_w: float | None = None,
                   limits_w: tuple[float, float] | None = None, bandwidth_gbs: float | None = None) -> NvmlDouble:
    """A host of the node's GPUs and EXTRA_GPUS more, every limit at its board power until a cap is set, each
    drawing IDLE_SHARE of it until a stand-in reports a load; its board power `board_w` and settable range
    `limits_w` are the node's (Node.board_power_w, power_limit_w: the file's, else host/boards.py's), a model's
    from host/boards.py where not given (a test's), and its memory-bound draw share its class's (bandwidth_gbs).
    The limits live in `state_path`, so a SIGKILLed measure job leaves them as a real GPU would. With the node's
    compute capability and interconnect (the preflight's simulated machine) it reports those: NVLink peer
    access only where the interconnect is nvlink. Its power reads as NVML's, a mean over the last `average_s` (a
    rehearsal's: POWER_AVERAGE_S at its time scale)."""
    board_mw = int((board_w or board_power_w(gpu_model)) * 1000)
    low, high = limits_w or (boards.limits_w(gpu_model)[0], boards.limits_w(gpu_model)[1])
    if low is None:
        raise ValueError(f"no settable power range known for {gpu_model!r}: the node's hardware.gpu.power_limit_w")
    count = gpu_count + EXTRA_GPUS
    host = NvmlDouble(count=count, state_path=state_path, limit_mw=board_mw, names=[gpu_model] * count,
                      min_mw=int(low * 1000), max_mw=int(high * 1000) if high else board_mw, default_mw=board_mw,
                      memory_gib=memory_gib or 24.0, demand_mw=int(board_mw * DEMAND_SHARE),
                      idle_mw=int(board_mw * IDLE_SHARE), uuid_prefix=UUID_PREFIX,
                      **({"compute_capability": tuple(int(p) for p in compute_capability.split("."))}
                         if compute_capability else {}),
                      p2p_nvlink=0 if interconnect == "nvlink" else 5, average_s=average_s, bandwidth_gbs=bandwidth_gbs)
    host.memory_bound_share = memory_bound_share(bandwidth_gbs)
    return host
