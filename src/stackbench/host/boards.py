"""What a GPU model's boards accept as a power limit, where it is known without the GPU.

BOARD_POWER_W is the board power: NVML's default limit (the stock limit a sweep's uncapped cell runs at), from
NVIDIA's product pages. LIMITS_W is the lowest and highest limit NVML accepts (nvmlDeviceGetPowerManagementLimit
Constraints, `nvidia-smi -q -d POWER` "Min/Max Power Limit") as reference boards report them; a partner board
may allow more (many RTX 4090 boards 600 W, some RTX 3090 boards 450-500 W), so a highest limit is listed only
where the boards agree, and None stands for "not known here". A node that states hardware.gpu.power_limit_w (its
own board's `nvidia-smi -q -d POWER`, or scripts/gpu-check.sh's printout) is checked against that instead.

Planning refuses a cap outside these (cap_error, called by plan/expand.py); the rehearsal's simulated GPUs
(rehearsal/simgpu.py) take their limit range from them.
"""

from __future__ import annotations

BOARD_POWER_W = {"NVIDIA GeForce RTX 5090": 575.0, "NVIDIA GeForce RTX 4090": 450.0,
                 "NVIDIA GeForce RTX 3090": 350.0, "NVIDIA RTX A6000": 300.0, "NVIDIA H100 80GB HBM3": 700.0}
# (lowest, highest) settable limit in W; None: differs between boards or not known here.
LIMITS_W: dict[str, tuple[float | None, float | None]] = {
    "NVIDIA GeForce RTX 5090": (400.0, 600.0), "NVIDIA GeForce RTX 4090": (150.0, 600.0),
    "NVIDIA GeForce RTX 3090": (100.0, None), "NVIDIA RTX A6000": (100.0, 300.0),
    "NVIDIA H100 80GB HBM3": (200.0, 700.0)}
SOURCE = "stackbench/host/boards.py LIMITS_W"


def board_power_w(gpu_model: str) -> float | None:
    """The model's board power in W (its stock limit), or None where it is not listed."""
    return BOARD_POWER_W.get(gpu_model)


def limits_w(gpu_model: str) -> tuple[float | None, float | None]:
    """(lowest, highest) settable limit of the model's boards in W, each None where not known here."""
    return LIMITS_W.get(gpu_model, (None, None))


def cap_error(gpu_model: str, cap_w: float, stated: list[float] | None = None) -> str | None:
    """Why `cap_w` cannot be set on this GPU, or None: outside the node's stated hardware.gpu.power_limit_w,
    else outside the lowest and highest limits known for the model's boards. The message is the part after the
    file and field ("100 W is below the NVIDIA GeForce RTX 4090's lowest power limit 150 W ...")."""
    if stated:
        low, high = stated
        if not low <= cap_w <= high:
            return f"{cap_w:g} W is outside the GPU's range {low:g}-{high:g} W (hardware.gpu.power_limit_w)"
        return None
    low, high = limits_w(gpu_model)
    state = "or state this board's range as hardware.gpu.power_limit_w (nvidia-smi -q -d POWER)"
    if low is not None and cap_w < low:
        return (f"{cap_w:g} W is below the {gpu_model}'s lowest power limit {low:g} W ({SOURCE}); raise the cap, "
                f"{state}")
    if high is not None and cap_w > high:
        return (f"{cap_w:g} W is above the {gpu_model}'s highest power limit {high:g} W ({SOURCE}); lower the cap, "
                f"{state}")
    return None
