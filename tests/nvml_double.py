"""A test double of the pynvml module (not NVML): GPUs whose state lives in a dict, or in a JSON file so
that a child process killed by a signal leaves behind what a real GPU would keep (its power limit)."""

import json
from pathlib import Path
from types import SimpleNamespace


class NVMLError(Exception):
    pass


class FakeNvml:
    NVMLError = NVMLError
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, count=2, state_path: Path | None = None, limit_mw=300_000, deny_set=False):
        self.state_path = state_path
        self.deny_set = deny_set
        self.set_calls: list[tuple[int, int]] = []
        self.tick = 0
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
        pass

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-fake-{h}".encode()

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA GeForce RTX 3090"

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        return 100_000, 350_000

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return 350_000

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return self._load()["limits_mw"][h]

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._load()["limits_mw"][h]

    def nvmlDeviceSetPowerManagementLimit(self, h, mw):
        if self.deny_set:
            raise NVMLError("Insufficient Permissions")
        state = self._load()
        state["limits_mw"][h] = mw
        self._save(state)
        self.set_calls.append((h, mw))

    def nvmlDeviceGetPowerUsage(self, h):
        return 250_500  # mW

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self.tick += 1
        return 1_000_000 + 500_000 * self.tick  # mJ, rising

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=20 * 2**30, total=24 * 2**30)

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1695

    def nvmlDeviceGetTemperature(self, h, kind):
        return 64

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=97, memory=80)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x4  # SW power cap
