"""Write a starting node config from the machine it runs on (NVML for GPUs, /proc for the CPU), for a
person to edit. A GPU machine gets the posts' four-way comparison: llama.cpp, SGLang without and with
speculation, and vLLM, each run named after the post it follows; model paths are placeholders that stop
the plan, with a line naming the field, until they are filled in."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from stackbench.measure import telemetry
from stackbench.measure.host import cpu_name, host_os

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


def _flow(args: dict) -> str:
    return yaml.safe_dump(args, default_flow_style=True, sort_keys=False).strip()


def gpu_runs(gpu_count: int) -> str:
    """The four-way comparison of the seed posts, as YAML text with a comment per run."""
    tp = {"tp_size": gpu_count} if gpu_count > 1 else {}
    sglang = {**tp, "max_running_requests": SLOTS}
    vllm = {**({"tensor_parallel_size": gpu_count} if gpu_count > 1 else {}), "max_num_seqs": SLOTS}
    return f"""models:
  # Placeholders in <angle brackets> stop the plan until replaced: set each path and its quantization.
  my-model-gguf: {{gguf: "<path to the model's GGUF file>", quant: Q4_K_M}}
  # One Hugging Face folder for SGLang and vLLM; give each engine its own entry to run the posts' checkpoints
  # (seed 000: INT4 for SGLang, seed 004: NVFP4 for vLLM).
  my-model-hf: {{hf_dir: "<path to the model's Hugging Face folder>", quant: unknown}}
runs:
  # Seed 000 section 8: llama.cpp with every layer on the GPU; --kv-unified lets one request use the whole
  # context across the stack's 4 slots. Add mtp-n2, mtp-n3 to variants when the GGUF carries an MTP head.
  - stack: llamacpp
    model: my-model-gguf
    variants: [nospec]
    server_args: {_flow({"n_gpu_layers": 999, "kv_unified": True})}
  # Seed 000 section 6 without speculation: the same command as the next run, minus the --speculative-* flags.
  # A reasoning parser (e.g. reasoning_parser: qwen3) goes on every SGLang and vLLM run or on none.
  - stack: sglang-nospec
    model: my-model-hf
    server_args: {_flow(sglang)}
  # Seed 000 section 6 and seed 002: the model's own MTP head run as EAGLE, steps/topk/draft tokens 3/1/4.
  - stack: sglang-eagle
    model: my-model-hf
    variants: [eagle-3-1-4]
    server_args: {_flow(sglang)}
  # Seed 004: vLLM without speculation and with MTP n=2 and n=3 (the stack reads any checkpoint vLLM does;
  # NVFP4 is detected from it, not forced).
  - stack: vllm-nvfp4-mtp
    model: my-model-hf
    variants: [nospec, mtp-n2, mtp-n3]
    server_args: {_flow(vllm)}
"""


CPU_RUNS = """models:
  # A placeholder in <angle brackets> stops the plan until replaced.
  my-model-gguf: {gguf: "<path to the model's GGUF file>", quant: Q4_K_M}
runs:
  # llama.cpp on the CPU. SGLang and vLLM on a CPU: see configs/nodes/local-cpu-sglang.yaml and
  # local-cpu-vllm.yaml (checks of the pipeline, not of those engines' CPU speed).
  - stack: llamacpp
    model: my-model-gguf
    variants: [nospec]
"""


def write_node(name: str, root: Path = Path("."), nvml=None) -> Path:
    path = root / "configs/nodes" / f"{name}.yaml"
    if path.exists():
        raise FileExistsError(f"{path} exists; choose another name or edit it")
    machine = describe_machine(nvml)
    doc = {**machine, "os": host_os(), "context_len": 32768, "concurrency": CONCURRENCY,
           "workloads": ["code", "extraction", "prose", "json", "long-prefill", "multi-turn"]}
    gpu_count = machine["hardware"]["gpu"]["count"]
    bandwidth = ("# bandwidth_gbs: NVML's bus width x max memory clock x 2 / 8 / 1000; null where NVML did not say\n"
                 if gpu_count else "")
    header = (f"# Starting config for this machine, written by `stackbench init-node {name}`.\n"
              f"{bandwidth}"
              "# Set the model paths, check the runs, print their server commands, then measure:\n"
              f"#   stackbench commands --node {name}\n"
              f"#   snakemake --cores 1 report --config 'nodes=[{name}]'\n")
    runs = gpu_runs(gpu_count) if gpu_count else CPU_RUNS
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False) + runs)
    return path
