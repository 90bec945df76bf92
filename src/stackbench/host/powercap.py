"""Power caps on the launch's GPUs through NVML, always put back.

A power cap changed here is written to a state file per GPU (by UUID, beside the GPU's lock) before it is
applied and restored on every exit path; a run that died hard leaves the file behind, and the next launch
that takes that GPU restores from it. NVML reports limits in mW; everything here is W.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from stackbench.host import locks
from stackbench.host.telemetry import NvmlGpus, TelemetryUnavailable


@dataclass(frozen=True)
class CapResult:
    """A cell's cap as asked and as the GPUs enforce it; `reason` says why it was not applied."""

    requested_w: float
    enforced_w: float | None
    applied: bool
    reason: str | None = None


@dataclass
class PowerCapper:
    """Sets a power cap on the selected GPUs and always puts their original limits back.

    The caller holds the GPUs' locks (locks.GpuLocks), so no other launch changes them meanwhile.
    Each GPU's original limit is written to its own state file (`<lock dir>/gpu-<UUID>.powercap.json`)
    before its first change; restore() runs on every exit path (context manager, and the caller's signal
    handling turns SIGTERM into an exception), and on entry a state file left by a launch that died
    hard is restored, for this launch's GPUs only: another GPU's leftover is its own launch's business.
    """

    gpus: NvmlGpus
    state_dir: Path = field(default_factory=locks.lock_dir)
    settle_s: float = 2.0
    sleep: callable = time.sleep
    original: dict[str, float] = field(default_factory=dict)  # UUID -> W
    leftovers_restored: dict[str, float] = field(default_factory=dict)  # UUID -> W, put back on entry
    found: dict[str, float] = field(default_factory=dict)  # UUID -> W at the launch's start (a sweep's uncapped state)

    def state_path(self, uuid: str) -> Path:
        return self.state_dir / f"{locks.file_stem(uuid)}.powercap.json"

    def check(self, cap_w: float) -> None:
        for info in self.gpus.info:
            if not info.min_limit_w <= cap_w <= info.max_limit_w:
                raise ValueError(f"power cap {cap_w:g} W is outside GPU {info.index} ({info.name})'s range "
                                 f"{info.min_limit_w:g}-{info.max_limit_w:g} W")

    def apply(self, cap_w: float) -> CapResult:
        """Set the cap on every selected GPU, read it back, let clocks settle. A cap that NVML refuses or
        that does not take restores the original limits first and comes back with applied=False and the
        reason; a cap outside a GPU's range raises ValueError before any change."""
        self.check(cap_w)
        if not self.original:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            for info in self.gpus.info:
                # A state already there holds the true original (this GPU's limit now may be a cap).
                recorded = self._recorded(info.uuid)
                self.original[info.uuid] = recorded if recorded is not None else self.gpus.limit_w(info.uuid)
                if recorded is None:
                    self._write_state(info.uuid, self.original[info.uuid])
        try:
            for info in self.gpus.info:
                self.gpus.set_limit_w(info.uuid, cap_w)
            enforced = [self.gpus.enforced_w(i.uuid) for i in self.gpus.info]
            if any(abs(e - cap_w) > 1 for e in enforced):
                raise TelemetryUnavailable(f"power cap {cap_w:g} W did not take: enforced {enforced} W")
        except TelemetryUnavailable as err:
            self.restore()
            return CapResult(cap_w, self._enforced_now(), applied=False, reason=str(err))
        self.sleep(self.settle_s)
        return CapResult(cap_w, max(enforced), applied=True)

    def _write_state(self, uuid: str, watts: float) -> None:
        path = self.state_path(uuid)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"uuid": uuid, "limit_w": watts, "pid": os.getpid(), "host": socket.gethostname()}))
        tmp.replace(path)

    def _recorded(self, uuid: str) -> float | None:
        path = self.state_path(uuid)
        if not path.exists():
            return None
        try:
            state = json.loads(path.read_text())
            if state["uuid"] != uuid:
                raise ValueError(state["uuid"])
            return float(state["limit_w"])
        except (ValueError, KeyError, TypeError) as err:
            raise TelemetryUnavailable(f"{path}: not a power-cap state of GPU {uuid} ({err}); "
                                       "check that GPU's limit by hand, then remove the file") from err

    def _enforced_now(self) -> float | None:
        try:
            return max(self.gpus.enforced_w(i.uuid) for i in self.gpus.info)
        except self.gpus.nvml.NVMLError:
            return None

    def restore(self) -> None:
        """Put back every limit that differs from the original (one NVML refused to change stays as is)."""
        for uuid, watts in self.original.items():
            if abs(self.gpus.limit_w(uuid) - watts) > 0.5:
                self.gpus.set_limit_w(uuid, watts)
            self.state_path(uuid).unlink(missing_ok=True)
        self.original = {}

    def restore_leftover(self) -> dict[str, float]:
        """Restore this launch's GPUs' limits that a launch which died hard changed and never put back;
        returns them (UUID -> W)."""
        for info in self.gpus.info:
            watts = self._recorded(info.uuid)
            if watts is not None:
                self.gpus.set_limit_w(info.uuid, watts)
                self.state_path(info.uuid).unlink()
                self.leftovers_restored[info.uuid] = watts
        return self.leftovers_restored

    def __enter__(self) -> PowerCapper:
        self.restore_leftover()
        self.found = {info.uuid: self.gpus.limit_w(info.uuid) for info in self.gpus.info}
        return self

    def __exit__(self, *exc) -> None:
        self.restore()
