"""Write a starting node config from the machine it runs on (NVML for GPUs, /proc for the CPU), for a
person to edit: model paths and the stacks to run are left as clearly marked placeholders."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from stackbench.measure import telemetry
from stackbench.measure.host import cpu_name, host_os


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
                             "bandwidth_gbs": None, "compute_capability": f"{major}.{minor}"}, "interconnect": "pcie", "cpu_threads": os.cpu_count()},
        # A sweep inside the GPU's own limits; edit to taste. Never applied by this helper.
        "power_caps_w": sorted({round(first.min_limit_w + (first.max_limit_w - first.min_limit_w) * f) for f in (0.4, 0.6, 0.8, 1.0)}),
    }


def write_node(name: str, root: Path = Path("."), nvml=None) -> Path:
    path = root / "configs/nodes" / f"{name}.yaml"
    if path.exists():
        raise FileExistsError(f"{path} exists; choose another name or edit it")
    doc = {**describe_machine(nvml), "os": host_os(), "context_len": 32768, "concurrency": [1, 2, 4],
           "workloads": ["code", "extraction", "prose", "json", "long-prefill", "multi-turn"],
           "models": {"my-model-q4km": {"gguf": "/path/to/model-Q4_K_M.gguf", "quant": "Q4_K_M"}},
           "runs": [{"stack": "llamacpp", "model": "my-model-q4km", "variants": ["nospec"]}]}
    header = (f"# Starting config for this machine, written by `stackbench init-node {name}`.\n"
              "# Check the GPU bandwidth (GB/s, for the roofline), set model paths and the runs, then:\n"
              f"#   snakemake --cores 1 report --config 'nodes=[{name}]'\n")
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False))
    return path
