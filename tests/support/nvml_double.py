"""A test double of the pynvml module (not NVML): GPUs whose state lives in a dict, or in a JSON file so
that a child process killed by a signal leaves behind what a real GPU would keep (its power limit).

Knobs for the cases a real driver shows: mixed models and PCI bus ids (enumeration vs CUDA order),
an energy counter that integrates the power (tests can reset it, or drive the clock), NVML errors while sampling, a driver that is
missing, a set that is refused, a cap the GPU does not enforce, and a memory bus width it does not report."""

import json
import time
from pathlib import Path
from types import SimpleNamespace


class NVMLError(Exception):
    pass


class FakeNvml:
    NVMLError = NVMLError
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, count=2, state_path: Path | None = None, limit_mw=300_000, deny_set=False,
                 names: list[str] | None = None, bus_ids: list[str] | None = None, no_driver=False,
                 enforce=True, clock=time.monotonic, bus_width_supported=True):
        self.state_path = state_path
        self.deny_set, self.no_driver, self.enforce = deny_set, no_driver, enforce
        self.bus_width_supported = bus_width_supported
        self.set_calls: list[tuple[int, int]] = []
        self.names = names or ["NVIDIA GeForce RTX 3090"] * count
        self.bus_ids = bus_ids or [f"00000000:{0x41 + i:02X}:00.0" for i in range(count)]
        self.power_mw = [250_500] * count
        # Energy counter = offset + power x time since creation (mW x s = mJ); a reset lowers the offset.
        self.clock, self.t0 = clock, clock()
        self.energy_offset_mj = [1_000_000] * count
        self.fail_sampling = False
        if state_path is None or not state_path.exists():
            self._save({"limits_mw": [limit_mw] * count})
        self.count = count

    def _load(self):
        return json.loads(self.state_path.read_text()) if self.state_path else self._state

    def _save(self, state):
        if self.state_path:
            self.state_path.write_text(json.dumps(state))
        else:
            self._state = state

    # the calls NvmlGpus makes ------------------------------------------------------------------------
    def nvmlInit(self):
        if self.no_driver:
            raise NVMLError("Driver Not Loaded")

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-fake-{h}".encode()

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self.bus_ids[h].encode())

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return (8, 6)  # an RTX 3090

    def nvmlDeviceGetName(self, h):
        return self.names[h].encode()

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        return 100_000, 350_000

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return 350_000

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return self._load()["limits_mw"][h]

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._load()["limits_mw"][h] if self.enforce else 350_000

    def nvmlDeviceSetPowerManagementLimit(self, h, mw):
        if self.deny_set:
            raise NVMLError("Insufficient Permissions")
        state = self._load()
        state["limits_mw"][h] = mw
        self._save(state)
        self.set_calls.append((h, mw))

    def nvmlDeviceGetPowerUsage(self, h):
        if self.fail_sampling:
            raise NVMLError("GPU is lost")
        return self.power_mw[h]

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return int(self.energy_offset_mj[h] + self.power_mw[h] * (self.clock() - self.t0))

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=20 * 2**30, total=24 * 2**30)

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1695

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return {self.NVML_CLOCK_MEM: 9751, self.NVML_CLOCK_SM: 2100}[kind]  # an RTX 3090's memory and SM clocks

    def nvmlDeviceGetMemoryBusWidth(self, h):
        if not self.bus_width_supported:
            raise NVMLError("Not Supported")
        return 384

    def nvmlDeviceGetTemperature(self, h, kind):
        return 64

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=97, memory=80)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x4  # SW power cap
