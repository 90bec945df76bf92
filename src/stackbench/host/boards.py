"""What a GPU model's board accepts as a power limit, where it is known without the GPU: its board power
(NVML's default and, on reference boards, maximum limit), from NVIDIA's product pages. Planning refuses a
cap above it on a node that does not state hardware.gpu.power_limit_w (plan/expand.py); the rehearsal's
simulated GPUs (rehearsal/simgpu.py) take their limit range from it. The lowest settable limit differs per
board and driver, so it is not listed: only a node's power_limit_w (nvidia-smi -q -d POWER) states it."""

from __future__ import annotations

BOARD_POWER_W = {"NVIDIA GeForce RTX 5090": 575.0, "NVIDIA GeForce RTX 4090": 450.0,
                 "NVIDIA GeForce RTX 3090": 350.0, "NVIDIA RTX A6000": 300.0, "NVIDIA H100 80GB HBM3": 700.0}
SOURCE = "stackbench/host/boards.py BOARD_POWER_W"


def board_power_w(gpu_model: str) -> float | None:
    """The model's board power in W, or None where it is not listed."""
    return BOARD_POWER_W.get(gpu_model)
