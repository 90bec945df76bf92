"""What a GPU board is, where it is known without the GPU: board power, settable range, memory, bandwidth,
compute capability, dense tensor peaks and interconnect, per model as NVML names it. A node file states any of
them in hardware.gpu (its own board's readings win over these tables), so a board no table knows is planned from
its node file alone (gpu_facts, called once at load by plan/expand.py).

BOARD_POWER_W is the board power: NVML's default limit (the stock limit a sweep's uncapped cell runs at), from
NVIDIA's product pages. LIMITS_W is the lowest and highest limit NVML accepts (nvmlDeviceGetPowerManagementLimit
Constraints, `nvidia-smi -q -d POWER` "Min/Max Power Limit") as reference boards report them; a partner board
may allow more (many RTX 4090 boards 600 W, some RTX 3090 boards 450-500 W), so a highest limit is listed only
where the boards agree, and None stands for "not known here". A node that states hardware.gpu.power_limit_w (its
own board's `nvidia-smi -q -d POWER`, or scripts/gpu-check.sh's printout) is checked against that instead.

Planning refuses a cap outside these (cap_error, called by plan/expand.py); the rehearsal's simulated GPUs
(rehearsal/simgpu.py) take their board power and limit range from the node's resolved facts.
"""

from __future__ import annotations

import re

from stackbench.config import ConfigError

# Board power (W), settable range (W, None: not known here) and memory (GiB), memory bandwidth (GB/s) and compute
# capability, per board, from NVIDIA's pages unless said:
# - RTX 5090, 4090, 3090, RTX A6000, H100 80GB HBM3 (SXM): their product pages and datasheets (the seeds' boards).
# - RTX PRO 6000 Blackwell, three boards of one GB202 (188 SMs, 96 GB GDDR7 on 512 bits at 28 Gbps: 1,792 GB/s,
#   sm_120, "4,000 AI TOPS" FP4 with sparsity): the Workstation Edition 600 W, the Max-Q Workstation Edition 300 W
#   (NVIDIA's RTX PRO 6000 Blackwell datasheets; Fixstars, "What kind of GPU is the NVIDIA RTX PRO 6000 Blackwell
#   Max-Q?", 2025-09-04), the Server Edition 600 W (configurable, so its settable range is left to the node file).
#   No NVLink on any of them.
# - H200 (SXM): 141 GB HBM3e, 4.8 TB/s, 700 W (NVIDIA H200 datasheet).
# - H100 PCIe: 80 GB HBM2e, 2,000 GB/s, 350 W (NVIDIA H100 datasheet, PCIe column).
# - A100 80GB: SXM4 2,039 GB/s at 400 W, PCIe 1,935 GB/s at 300 W (NVIDIA A100 datasheet).
# - L40S: 48 GB GDDR6, 864 GB/s, 350 W, sm_89 (NVIDIA L40S datasheet).
# - B200 (HGX B200): 180 GB HBM3e (1,440 GB per 8), 8 TB/s, 1,000 W, sm_100 (NVIDIA HGX B200 datasheet).
# The lowest settable limit is listed only where a public reading gives it; elsewhere the node file states its own
# board's (`nvidia-smi -q -d POWER`).
BOARD_POWER_W = {"NVIDIA GeForce RTX 5090": 575.0, "NVIDIA GeForce RTX 4090": 450.0,
                 "NVIDIA GeForce RTX 3090": 350.0, "NVIDIA RTX A6000": 300.0, "NVIDIA H100 80GB HBM3": 700.0,
                 "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": 600.0,
                 "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition": 300.0,
                 "NVIDIA RTX PRO 6000 Blackwell Server Edition": 600.0, "NVIDIA H200": 700.0,
                 "NVIDIA H100 PCIe": 350.0, "NVIDIA A100-SXM4-80GB": 400.0, "NVIDIA A100 80GB PCIe": 300.0,
                 "NVIDIA L40S": 350.0, "NVIDIA B200": 1000.0}
# (lowest, highest) settable limit in W; None: differs between boards or not known here.
LIMITS_W: dict[str, tuple[float | None, float | None]] = {
    "NVIDIA GeForce RTX 5090": (400.0, 600.0), "NVIDIA GeForce RTX 4090": (150.0, 600.0),
    "NVIDIA GeForce RTX 3090": (100.0, None), "NVIDIA RTX A6000": (100.0, 300.0),
    "NVIDIA H100 80GB HBM3": (200.0, 700.0)}
SOURCE = "stackbench/host/boards.py LIMITS_W"
# Per model, what a node file states about it without the GPU at hand (`stackbench init-node --gpu`): memory
# (GiB), peak memory bandwidth (GB/s: bus width x memory clock, as memory_bandwidth_gbs reads it from
# NVML) and CUDA compute capability, from NVIDIA's specifications (sources above).
SPECS = {"NVIDIA GeForce RTX 5090": (32, 1792, "12.0"), "NVIDIA GeForce RTX 4090": (24, 1008, "8.9"),
         "NVIDIA GeForce RTX 3090": (24, 936, "8.6"), "NVIDIA RTX A6000": (48, 768, "8.6"),
         "NVIDIA H100 80GB HBM3": (80, 3350, "9.0"),
         "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": (96, 1792, "12.0"),
         "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition": (96, 1792, "12.0"),
         "NVIDIA RTX PRO 6000 Blackwell Server Edition": (96, 1792, "12.0"), "NVIDIA H200": (141, 4800, "9.0"),
         "NVIDIA H100 PCIe": (80, 2000, "9.0"), "NVIDIA A100-SXM4-80GB": (80, 2039, "8.0"),
         "NVIDIA A100 80GB PCIe": (80, 1935, "8.0"), "NVIDIA L40S": (48, 864, "8.9"), "NVIDIA B200": (180, 8000, "10.0")}
# How a box's GPUs of this model talk to each other: nvlink where every board of the model is built onto an NVLink
# baseboard (an H100 80GB HBM3 is the SXM part, on HGX's NVSwitch; so are the H200, the A100 SXM4 and the B200),
# pcie where the model has no NVLink connector, None where a bridge is optional (an RTX 3090, RTX A6000, H100 PCIe or
# A100 PCIe pair may carry one): the node file asks its owner.
INTERCONNECT: dict[str, str | None] = {
    "NVIDIA GeForce RTX 5090": "pcie", "NVIDIA GeForce RTX 4090": "pcie", "NVIDIA GeForce RTX 3090": None,
    "NVIDIA RTX A6000": None, "NVIDIA H100 80GB HBM3": "nvlink",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "pcie",
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition": "pcie",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "pcie", "NVIDIA H200": "nvlink", "NVIDIA H100 PCIe": None,
    "NVIDIA A100-SXM4-80GB": "nvlink", "NVIDIA A100 80GB PCIe": None, "NVIDIA L40S": "pcie", "NVIDIA B200": "nvlink"}
CAP_SHARES = (5 / 9, 6 / 9, 7 / 9, 8 / 9)  # a starter cap sweep below the stock limit: 250-400 W on a 450 W board
FP4_MAJOR = 10  # FP4 tensor cores from Blackwell (sm_100, sm_120) on
FP8_CAPABILITY = (8, 9)  # FP8 tensor cores from Ada (sm_89) and Hopper (sm_90) on
# Dense tensor-core peaks in TFLOPS per math format (FP32 accumulate, no sparsity: the sparse figures NVIDIA
# lists halved), the compute roofline of a compute-bound prefill; a format the GPU has no tensor cores for, or
# whose dense figure no public sheet gives, is absent (the stand-in then prices prefill as a multiple of decode, and
# the rehearsal's report says so). From NVIDIA's pages: H100 SXM datasheet (1,979 BF16 and 3,958 FP8 with
# sparsity); the RTX Blackwell, Ada and Ampere GA102 architecture whitepapers' appendix tables (RTX 5090: 209.5
# BF16, 419 FP8, 1,676 FP4 with FP32 accumulate; RTX 4090: 165.2 BF16, 330.3 FP8; RTX 3090: 71 BF16); the RTX A6000
# datasheet (309.7 tensor TFLOPS with sparsity); H200 datasheet (as the H100 SXM: 1,979 BF16, 3,958 FP8 sparse);
# H100 PCIe datasheet (1,513 BF16, 3,026 FP8 sparse); A100 datasheet (312 BF16 dense, both boards); L40S datasheet
# (733 BF16, 1,466 FP8 sparse); HGX B200 datasheet (per 8 GPUs 36 PF BF16, 72 PF FP8, 144 PF FP4 sparse); the RTX
# PRO 6000's "4,000 AI TOPS" (FP4 sparse, Workstation and Server Editions; the Max-Q's lower clocks are not
# published as a tensor figure, so it is left out).
TENSOR_TFLOPS: dict[str, dict[str, float]] = {
    "NVIDIA GeForce RTX 5090": {"bf16": 209.5, "fp8": 419.0, "fp4": 1676.0},
    "NVIDIA GeForce RTX 4090": {"bf16": 165.2, "fp8": 330.3}, "NVIDIA GeForce RTX 3090": {"bf16": 71.0},
    "NVIDIA RTX A6000": {"bf16": 154.8}, "NVIDIA H100 80GB HBM3": {"bf16": 989.4, "fp8": 1978.9},
    "NVIDIA H200": {"bf16": 989.4, "fp8": 1978.9}, "NVIDIA H100 PCIe": {"bf16": 756.5, "fp8": 1513.0},
    "NVIDIA A100-SXM4-80GB": {"bf16": 312.0}, "NVIDIA A100 80GB PCIe": {"bf16": 312.0},
    "NVIDIA L40S": {"bf16": 366.5, "fp8": 733.0}, "NVIDIA B200": {"bf16": 2250.0, "fp8": 4500.0, "fp4": 9000.0},
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": {"fp4": 2000.0},
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": {"fp4": 2000.0}}
# Where an owner reads each fact of hardware.gpu for a board no table here knows: init-node writes it into the
# field's placeholder, and the refusal of a node that leaves it out names it.
WHERE_TO_READ = {
    "memory_gib": 'nvidia-smi -q -d MEMORY, "FB Memory Usage" Total in MiB / 1024',
    "bandwidth_gbs": "the spec sheet, memory bandwidth in GB/s",
    "compute_capability": "nvidia-smi --query-gpu=compute_cap --format=csv",
    "board_power_w": 'nvidia-smi -q -d POWER, "Default Power Limit"',
    "power_limit_w": 'nvidia-smi -q -d POWER, "Min Power Limit" and "Max Power Limit"',
}
NEEDED = tuple(WHERE_TO_READ)  # the facts a GPU node's plan, stand-in and preflight read
PLACEHOLDER = "<fill in"  # how init-node marks a fact it could not know: "<fill in: nvidia-smi -q -d POWER, ...>"
# Optional: without it prefill is priced as a multiple of decode (rehearsal/standin.py PREFILL_PER_DECODE).
TENSOR_WHERE = "the spec sheet's dense tensor TFLOPS per format (bf16, fp8, fp4; a sparse figure halved)"


def memory_bandwidth_gbs(nvml, handle) -> int | None:
    """Peak memory bandwidth from NVML: bus width (bits) x max memory clock (MHz) x 2 / 8 / 1000 = GB/s.

    NVML reports the memory clock at half the data rate on GDDR6, GDDR6X, GDDR7 and HBM alike, so x2
    gives the published figures: RTX A6000 384 bit x 8001 MHz = 768, RTX 3090 384 x 9751 = 936, RTX 5090
    512 x 14001 = 1792, A100 5120 x 1215 = 1555 GB/s. None where NVML does not report either figure."""
    try:
        bus_bits = nvml.nvmlDeviceGetMemoryBusWidth(handle)
        clock_mhz = nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)
    except (nvml.NVMLError, AttributeError):  # an old driver or nvidia-ml-py without the call
        return None
    return round(bus_bits * clock_mhz * 2 / 8 / 1000) if bus_bits and clock_mhz else None


def placeholder(name: str) -> str:
    """The value init-node writes for a fact of hardware.gpu it could not know, saying where to read it."""
    return f"{PLACEHOLDER}: {WHERE_TO_READ[name]}>"


def gpu_facts(gpu: dict, where: str) -> dict:
    """hardware.gpu's facts about the board (NEEDED, and tensor_tflops), each as the node file states it, else as
    the tables here know the model: the file wins, so any board is planned from its node file (a table board whose
    highest limit differs between boards keeps None there: the simulated GPU takes its board power). ConfigError, one line naming the field
    and where to read it, for a GPU node that leaves a NEEDED fact unknown (unstated, or init-node's placeholder)."""
    model = gpu["model"]
    table = {"board_power_w": BOARD_POWER_W.get(model),
             "power_limit_w": table_range(model), "tensor_tflops": TENSOR_TFLOPS.get(model),
             **dict(zip(("memory_gib", "bandwidth_gbs", "compute_capability"), SPECS.get(model, (None,) * 3)))}
    facts = {name: _stated(gpu.get(name)) if _stated(gpu.get(name)) is not None else known
             for name, known in table.items()}
    if facts["power_limit_w"] is not None:
        facts["power_limit_w"] = tuple(None if w is None else float(w) for w in facts["power_limit_w"])
    missing = next((name for name in NEEDED if facts[name] is None), None) if gpu["count"] else None
    if missing:
        known = "no table knows this board" if model not in SPECS else f"{SOURCE.rsplit(' ', 1)[0]} does not list it"
        raise ConfigError(f"{where}: hardware.gpu.{missing} is needed for {model!r} ({known}): "
                          f"{WHERE_TO_READ[missing]}")
    return facts


def _stated(value):
    """A value the node file states, None where it leaves it (null, or init-node's placeholder)."""
    return None if value is None or (isinstance(value, str) and value.startswith(PLACEHOLDER)) else value


def table_range(model: str) -> tuple[float, float | None] | None:
    """The table's settable range, its highest None where the boards differ; None without a lowest."""
    low, high = limits_w(model)
    return None if low is None else (low, high)


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
    stated = _stated(stated)
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


def describe(gpu_model: str) -> str:
    """One line about a known model, as `stackbench init-node --list-gpus` prints it: memory, bandwidth, compute
    capability, settable power range and stock limit, and how several of it connect."""
    memory, bandwidth, capability = SPECS[gpu_model]
    low, high = limits_w(gpu_model)
    settable = f"{low:g}-{high:g} W" if low is not None and high is not None else \
        f"from {low:g} W, highest by board" if low is not None else "range from the node file (nvidia-smi -q -d POWER)"
    links = INTERCONNECT[gpu_model] or "pcie, or nvlink with a bridge"
    return (f"{gpu_model}: {memory} GiB, {bandwidth} GB/s, compute capability {capability}, power limit {settable}, "
            f"stock {BOARD_POWER_W[gpu_model]:g} W, {links}")


def _numbered_words(name: str) -> set[str]:
    """The words of a GPU name that carry a number ("h100", "4090", "80gb"): what a near miss shares with a model."""
    return {word for word in re.findall(r"[a-z0-9]+", name.lower()) if any(c.isdigit() for c in word)}


def unknown_board(name: str) -> bool:
    """Whether `name` is a board's full NVML name ("NVIDIA ...", as nvidia-smi prints it) that no table here lists:
    init-node writes a starter whose facts its owner fills in (a short name that matches none is a typo, refused)."""
    return name.startswith("NVIDIA ") and name not in SPECS


def resolve(name: str) -> str:
    """The model NVML names for `name` ("RTX 4090" -> "NVIDIA GeForce RTX 4090"); ValueError where it matches none
    or several, naming the candidates: the models it matches, else those sharing a numbered word with it ("H100 SXM":
    the H100 80GB HBM3), else every known model."""
    matches = [model for model in SPECS if name.lower() == model.lower()] or \
        [model for model in SPECS if name.lower() in model.lower()]
    if len(matches) == 1:
        return matches[0]
    near = matches or [model for model in SPECS if _numbered_words(name) & _numbered_words(model)] or list(SPECS)
    raise ValueError(f"--gpu {name!r} matches {'none' if not matches else 'several'} of the GPUs known here; "
                     f"{'candidates' if len(near) < len(SPECS) else 'known'}: "
                     + "; ".join(describe(model) for model in near)
                     + f" ({SOURCE.rsplit(' ', 1)[0]} SPECS, `stackbench init-node --list-gpus`). Pass one of these "
                     "names, or for another board its full name as `nvidia-smi --query-gpu=name --format=csv` prints it "
                     "(\"NVIDIA ...\"): init-node then writes its facts to fill in")


def interconnect(gpu_model: str, count: int) -> str | None:
    """How `count` GPUs of the model connect (node.schema.yaml hardware.interconnect): none for one GPU, else
    INTERCONNECT's answer, None where the box decides (a bridge is optional, or no table knows the board)."""
    return "none" if count < 2 else INTERCONNECT.get(gpu_model)


def starter_caps_w(gpu_model: str) -> list[int]:
    """A cap sweep below the model's stock limit (CAP_SHARES of it, to 10 W) inside its settable range; the stock
    limit itself is every sweep's first cell."""
    stock, (low, _) = BOARD_POWER_W[gpu_model], limits_w(gpu_model)
    caps = {round(stock * share / 10) * 10 for share in CAP_SHARES}
    return sorted(c for c in caps if low is None or c >= low)


def _capability(compute_capability: str | None) -> tuple[int, int] | None:
    """(major, minor) of a compute capability written "9.0"; None where not known."""
    if not compute_capability:
        return None
    major, _, minor = str(compute_capability).partition(".")
    return int(major), int(minor or 0)


def fp4_unpacked(compute_capability: str | None, quant: str | None) -> bool:
    """Whether a 4-bit float checkpoint (NVFP4, MXFP4) meets a GPU without FP4 tensor cores (before Blackwell,
    sm_100+), where the engine unpacks it to wider math or refuses it; False where the capability is not known."""
    capability = _capability(compute_capability)
    return bool(quant) and "FP4" in quant.upper() and capability is not None and capability[0] < FP4_MAJOR


def math_format(compute_capability: str | None, quant: str | None) -> str:
    """The tensor-core format a checkpoint's matmuls run in on this GPU (a TENSOR_TFLOPS key): fp4 for a 4-bit float
    checkpoint where the GPU has FP4 tensor cores, fp8 for an FP8 one where it has FP8 tensor cores, else bf16:
    integer and GGUF checkpoints, and a float format the GPU has no tensor cores for, are unpacked to 16-bit math
    (weight-only kernels: vLLM's Marlin on Hopper for NVFP4, vllm/model_executor/layers/quantization/utils/
    marlin_utils_fp4.py "Weight-only FP4 compression will be used leveraging the Marlin kernel")."""
    label, capability = (quant or "").upper(), _capability(compute_capability)
    if capability is None:
        return "bf16"
    if "FP4" in label and capability[0] >= FP4_MAJOR:
        return "fp4"
    if label.startswith("FP8") and capability >= FP8_CAPABILITY:
        return "fp8"
    return "bf16"


def tensor_tflops(peaks: dict[str, float] | None, compute_capability: str | None,
                  quant: str | None) -> tuple[float, str] | None:
    """(the dense tensor peak in TFLOPS the checkpoint's matmuls run at on this GPU, its format), from the board's
    peaks (gpu_facts' tensor_tflops: the node file's, else TENSOR_TFLOPS); None where they do not list that format."""
    fmt = math_format(compute_capability, quant)
    peak = (peaks or {}).get(fmt)
    return (peak, fmt) if peak else None


def fp4_warning(gpu_model: str, compute_capability: str | None, quant: str | None) -> str | None:
    """A line where a 4-bit float checkpoint (NVFP4, MXFP4) meets a GPU without FP4 tensor cores (before
    Blackwell, sm_100+): the engine unpacks it to wider math (vLLM's Marlin kernels) or refuses it, so it is not the
    speed a Blackwell post reports. None otherwise, or where the compute capability is not known."""
    if not fp4_unpacked(compute_capability, quant):
        return None
    sm = str(compute_capability).replace(".", "")
    return (f"{quant} on the {gpu_model} (sm_{sm}): no FP4 tensor cores before Blackwell (sm_100+); the engine "
            "unpacks it to wider math or refuses it, so its speed is not a Blackwell post's: an INT4 or AWQ "
            "checkpoint is the like-for-like choice here")
