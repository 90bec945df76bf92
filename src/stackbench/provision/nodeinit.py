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
CPU_CONCURRENCY = [1, 2, 4]
CPU_WORKLOADS = ["code", "extraction", "prose", "json", "long-prefill", "multi-turn"]
# A GPU node's experiment. Judged on replies of 512 and 1,024 tokens, thinking off on every stack (the posts time
# 512-2,048; 48 tokens time a GPU's decode over a few dozen steps), beside the one-off sets: long prefill,
# multi-turn, and a context ladder whose top point (126,976 + its reply) fits GPU_CONTEXT_LEN.
GPU_WORKLOADS = ["gpu-code", "gpu-chat", "long-prefill", "multi-turn", "context-ladder"]
GPU_CONTEXT_LEN = 131072  # the seed posts' long-context runs (seed 000's 127K request)
GPU_ACCURACY = "accuracy-gpu"  # all 100 GSM8K questions of the sample, 512-token replies, at c4
# Streams a GPU node is judged at: 1, 8 and 32 where its GPUs hold 160 GiB or more (room for 32 streams' KV cache
# beside a ~30B model's weights), else 1, 2 and 4 as the seed workstations run.
MANY_STREAMS_GIB = 160
MANY_STREAMS, FEW_STREAMS = [1, 8, 32], [1, 2, 4]
# What to run decides: three rounds of launches before the first look (a paired interval needs two), up to eight
# if cells stay undecided. No budget_minutes: only the node's rehearsal prices its rounds (BUDGET_COMMENT).
GPU_LAUNCHES = 3
GPU_DECIDE = {"most_launches": 8}
BUDGET_COMMENT = ("# decide.budget_minutes is not written: no budget is known before the rehearsal prices the rounds. "
                  "Rehearse, then set it\n# from the report's \"What to run's rounds\" table (the plan's minutes, "
                  "docs/rehearsal.md); it opens with OVER BUDGET where\n# rounds 1-3 alone exceed the one you set.\n")
# The reasoning parser every SGLang and vLLM run gets, so that thinking streams apart alike on every stack:
# Qwen3's, the seed nodes' model family; name your model's.
REASONING_PARSER = "qwen3"


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
                     "interconnect": (boards.interconnect(first.name, len(gpus.info)) if first.name in boards.SPECS
                                      else None) or "pcie", "cpu_threads": os.cpu_count()},
        # A sweep inside the GPU's own limits; edit to taste. Never applied by this helper.
        "power_caps_w": sorted({round(first.min_limit_w + (first.max_limit_w - first.min_limit_w) * f) for f in (0.4, 0.6, 0.8, 1.0)}),
    }


def describe_gpus(gpu: str, count: int) -> dict:
    """A machine that is not this one, from its GPU model's specifications (host/boards.py SPECS): memory,
    bandwidth, compute capability, and a cap sweep below its stock limit inside the board's settable range."""
    model = boards.resolve(gpu)
    memory, bandwidth, capability = boards.SPECS[model]
    low, high = boards.limits_w(model)
    # The board's settable range, where both ends are known: caps outside it fail at planning, not on the box.
    power_limit = {"power_limit_w": [round(low), round(high)]} if low is not None and high is not None else {}
    return {
        "description": f"{count}x {model} (written by init-node --gpu for a box that is not this one)",
        "hardware": {"gpu": {"model": model, "count": count, "memory_gib": memory, "bandwidth_gbs": bandwidth,
                             "compute_capability": capability, **power_limit},
                     "interconnect": boards.interconnect(model, count) or "pcie"},
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


def gpu_experiment(memory_gib: float, count: int) -> dict:
    """The node-level fields of a GPU node's experiment: context, streams, judged workloads, accuracy set, rounds."""
    streams = MANY_STREAMS if memory_gib * count >= MANY_STREAMS_GIB else FEW_STREAMS
    return {"context_len": GPU_CONTEXT_LEN, "concurrency": streams, "workloads": GPU_WORKLOADS,
            "accuracy": GPU_ACCURACY, "launches": GPU_LAUNCHES, "decide": GPU_DECIDE}


def gpu_runs(gpu_count: int, slots: int, root: Path = Path(".")) -> str:
    """The four-way comparison of the seed posts (configs/starter/gpu-runs.yaml, a comment per run), each
    run's parallel flags and reasoning parser in its engine's own words, `slots` requests at once."""
    lines, stack = [], None
    for line in _template(root, "gpu-runs.yaml").splitlines(keepends=True):
        if line.lstrip().startswith("- stack:"):
            stack = line.split(":", 1)[1].strip()
        found = PARALLEL_ARGS.search(line)
        if found:
            adapter = adapter_for(load_file(root / "configs/stacks" / f"{stack}.yaml", "stack")["engine"])
            extra = yaml.safe_load("{" + (found["extra"] or "") + "}")
            parser = {adapter.reasoning_parser_arg: REASONING_PARSER} if adapter.reasoning_parser_arg else {}
            line = line.replace(found[0], _flow({**extra, **adapter.parallel_args(gpu_count, slots), **parser}))
        lines.append(line)
    return "".join(lines)




def write_node(name: str, root: Path = Path("."), nvml=None, gpu: str | None = None, count: int = 1) -> Path:
    """configs/nodes/<name>.yaml for this machine, or, with `gpu`, for `count` of that GPU model on a box that
    is not this one (its OS read there at run time: `os: auto`)."""
    path = root / "configs/nodes" / f"{name}.yaml"
    if path.exists():
        raise FileExistsError(f"{path} exists; choose another name or edit it")
    machine = describe_gpus(gpu, count) if gpu else describe_machine(nvml)
    gpu_spec = machine["hardware"]["gpu"]
    gpu_count = gpu_spec["count"]
    experiment = gpu_experiment(gpu_spec["memory_gib"], gpu_count) if gpu_count else \
        {"context_len": 32768, "concurrency": CPU_CONCURRENCY, "workloads": CPU_WORKLOADS}
    doc = {**machine, "os": "auto" if gpu else host_os(), **experiment}
    if gpu:
        model = gpu_spec["model"]
        about = (f"# From {boards.SOURCE.rsplit(' ', 1)[0]} SPECS for the {model}: check memory, bandwidth, "
                 "power_limit_w and interconnect against the box;\n# caps are W per GPU, and every sweep also runs "
                 "the stock limit first. `stackbench preflight --node NAME` on the box checks them.\n")
        if boards.interconnect(model, gpu_count) is None:
            about += (f"# interconnect: is there an NVLink bridge between the {model}s? (`nvidia-smi nvlink -s` on "
                      "the box) pcie is written; set nvlink if so.\n")
    else:
        about = ("# bandwidth_gbs: NVML's bus width x max memory clock x 2 / 8 / 1000; null where NVML did not say\n"
                 if gpu_count else "")
    if gpu_count:
        about += ("# Sized for a GPU: judged on 512- and 1,024-token replies with thinking off on every stack, a "
                  "context ladder to the node's\n# context, GSM8K's 100 questions, and launches + decide so "
                  "What to run can decide (docs/nodes.md).\n" + BUDGET_COMMENT)
    header = (f"# Starting config for {'a ' + str(count) + 'x ' + gpu + ' box' if gpu else 'this machine'}, written by "
              f"`stackbench init-node {name}{f' --gpu {gpu!r} --count {count}' if gpu else ''}`.\n"
              f"{about}"
              "# Set the model paths, check the runs (stackbench variants lists each stack's variants and flag keys),\n"
              "# print their server commands, rehearse here, check the box, then measure (docs/nodes.md):\n"
              f"#   stackbench commands --node {name}\n"
              f"#   snakemake --cores 1 rehearse --config 'nodes=[{name}]'\n"
              f"#   stackbench preflight --node {name}   (on the GPU box)\n"
              f"#   snakemake --cores 1 report --config 'nodes=[{name}]'\n")
    runs = gpu_runs(gpu_count, max(doc["concurrency"]), root) if gpu_count else _template(root, "cpu-runs.yaml")
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120) + runs)
    return path
