"""Write a starting node config from the machine it runs on (NVML for GPUs, /proc for the CPU), for a
person to edit. A GPU machine gets the posts' four-way comparison: llama.cpp, SGLang without and with
speculation, and vLLM, each run named after the post it follows; model paths are placeholders that stop
the plan, with a line naming the field, until they are filled in."""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from stackbench.config import load_file
from stackbench.engines import adapter_for
from stackbench.host import boards, telemetry
from stackbench.host.facts import cpu_name, host_os

STARTER = Path("configs/starter")  # the runs a starter gets, as config text with comments
SLOTS = 4  # every run's concurrent requests, named explicitly so that the node's concurrency fits them
CONCURRENCY = [1, 2, 4]


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


def describe_machine(nvml=None) -> dict:
    gpus, why = telemetry.all_gpus(nvml)
    if gpus is None:
        return {"description": f"{cpu_name()}, {os.cpu_count()} cores; no GPU ({why})",
                "hardware": {"gpu": {"model": "none", "count": 0}, "cpu_threads": os.cpu_count()}}
    names = {info.name for info in gpus.info}
    memory = gpus.nvml.nvmlDeviceGetMemoryInfo(gpus.handles[0]).total / 2**30
    first = gpus.info[0]
    # llama.cpp is built for this compute capability (a CUDA build per architecture).
    major, minor = gpus.nvml.nvmlDeviceGetCudaComputeCapability(gpus.handles[0])
    return {
        "description": f"{len(gpus.info)}x {', '.join(sorted(names))}",
        "hardware": {"gpu": {"model": first.name, "count": len(gpus.info), "memory_gib": round(memory, 1),
                             "bandwidth_gbs": memory_bandwidth_gbs(gpus.nvml, gpus.handles[0]),
                             "compute_capability": f"{major}.{minor}"},
                     "interconnect": "pcie", "cpu_threads": os.cpu_count()},
        # A sweep inside the GPU's own limits; edit to taste. Never applied by this helper.
        "power_caps_w": sorted({round(first.min_limit_w + (first.max_limit_w - first.min_limit_w) * f) for f in (0.4, 0.6, 0.8, 1.0)}),
    }


def describe_gpus(gpu: str, count: int) -> dict:
    """A machine that is not this one, from its GPU model's specifications (host/boards.py SPECS): memory,
    bandwidth, compute capability, and a cap sweep below its stock limit inside the board's settable range."""
    model = boards.resolve(gpu)
    memory, bandwidth, capability = boards.SPECS[model]
    return {
        "description": f"{count}x {model} (written by init-node --gpu for a box that is not this one)",
        "hardware": {"gpu": {"model": model, "count": count, "memory_gib": memory, "bandwidth_gbs": bandwidth,
                             "compute_capability": capability},
                     "interconnect": "pcie"},
        "power_caps_w": boards.starter_caps_w(model),
    }


def _flow(args: dict) -> str:
    return yaml.safe_dump(args, default_flow_style=True, sort_keys=False).strip()


def _template(root: Path, name: str) -> str:
    """A starter template without its own leading comment (which is about the template, not the node)."""
    lines = (root / STARTER / name).read_text().splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


PARALLEL_ARGS = re.compile(r"<parallel args(?:, with (?P<extra>[^>]*))?>")


def gpu_runs(gpu_count: int, root: Path = Path(".")) -> str:
    """The four-way comparison of the seed posts (configs/starter/gpu-runs.yaml, a comment per run), each
    run's parallel flags in its engine's own words."""
    lines, stack = [], None
    for line in _template(root, "gpu-runs.yaml").splitlines(keepends=True):
        if line.lstrip().startswith("- stack:"):
            stack = line.split(":", 1)[1].strip()
        found = PARALLEL_ARGS.search(line)
        if found:
            engine = load_file(root / "configs/stacks" / f"{stack}.yaml", "stack")["engine"]
            extra = yaml.safe_load("{" + (found["extra"] or "") + "}")
            line = line.replace(found[0], _flow({**extra, **adapter_for(engine).parallel_args(gpu_count, SLOTS)}))
        lines.append(line)
    return "".join(lines)




def write_node(name: str, root: Path = Path("."), nvml=None, gpu: str | None = None, count: int = 1) -> Path:
    """configs/nodes/<name>.yaml for this machine, or, with `gpu`, for `count` of that GPU model on a box that
    is not this one (its OS read there at run time: `os: auto`)."""
    path = root / "configs/nodes" / f"{name}.yaml"
    if path.exists():
        raise FileExistsError(f"{path} exists; choose another name or edit it")
    machine = describe_gpus(gpu, count) if gpu else describe_machine(nvml)
    doc = {**machine, "os": "auto" if gpu else host_os(), "context_len": 32768, "concurrency": CONCURRENCY,
           "workloads": ["code", "extraction", "prose", "json", "long-prefill", "multi-turn"]}
    gpu_count = machine["hardware"]["gpu"]["count"]
    if gpu:
        bandwidth = (f"# From {boards.SOURCE.rsplit(' ', 1)[0]} SPECS for the {machine['hardware']['gpu']['model']}: check "
                     "memory, bandwidth and interconnect (pcie or nvlink) against the box; caps are W per GPU, and every\n"
                     "# sweep also runs the stock limit first. `stackbench preflight --node NAME` on the box checks them.\n")
    else:
        bandwidth = ("# bandwidth_gbs: NVML's bus width x max memory clock x 2 / 8 / 1000; null where NVML did not say\n"
                     if gpu_count else "")
    header = (f"# Starting config for {'a ' + str(count) + 'x ' + gpu + ' box' if gpu else 'this machine'}, written by "
              f"`stackbench init-node {name}{f' --gpu {gpu!r} --count {count}' if gpu else ''}`.\n"
              f"{bandwidth}"
              "# Set the model paths, check the runs (stackbench variants lists each stack's variants and flag keys),\n"
              "# print their server commands, rehearse here, check the box, then measure (docs/nodes.md):\n"
              f"#   stackbench commands --node {name}\n"
              f"#   snakemake --cores 1 rehearse --config 'nodes=[{name}]'\n"
              f"#   stackbench preflight --node {name}   (on the GPU box)\n"
              f"#   snakemake --cores 1 report --config 'nodes=[{name}]'\n")
    runs = gpu_runs(gpu_count, root) if gpu_count else _template(root, "cpu-runs.yaml")
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False) + runs)
    return path
