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
from stackbench.models import geometry
from stackbench.models.formats import BITS_PER_WEIGHT

STARTER = Path("configs/starter")  # the runs a starter gets, as config text with comments
CPU_CONCURRENCY = [1, 2, 4]
CPU_WORKLOADS = ["code", "extraction", "prose", "json", "long-prefill", "multi-turn"]
# A GPU node's experiment. Judged on replies of 512 and 1,024 tokens, thinking off on every stack (the posts time
# 512-2,048; 48 tokens time a GPU's decode over a few dozen steps), beside the one-off sets: long prefill,
# multi-turn, and a context ladder whose top point (126,976 + its reply) fits GPU_CONTEXT_LEN.
# gpu-code, gpu-chat and gpu-long draw from public prompt sets (docs/prompt-sets.md); gpu-chinese is opt-in, its
# set's licence not stated upstream.
GPU_WORKLOADS = ["gpu-code", "gpu-chat", "gpu-long", "long-prefill", "multi-turn", "context-ladder"]
GPU_CONTEXT_LEN = 131072  # the seed posts' long-context runs (seed 000's 127K request): where the memory is not known
# The context a GPU starter gets follows the KV memory its GPUs hold: the context ladder's longest point (with its
# reply) whose one stream's KV fits beside the weights of the seeds' model (configs/models/STARTER_GEOMETRY: KV bytes a
# token from its geometry at BF16; weights of its parameters at INT4's bits per weight, models/formats.py), in
# KV_MEMORY_SHARE of the GPUs' memory (vLLM's gpu_memory_utilization default), rounded up to 4,096. A ladder point
# above 126,976 in configs/workloads/context-ladder.yaml is reached where the memory holds it.
STARTER_GEOMETRY = "qwen3.8-27b"
KV_MEMORY_SHARE = 0.9
LADDER = "context-ladder"
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
                             "bandwidth_gbs": boards.memory_bandwidth_gbs(gpus.nvml, gpus.handles[0]),
                             "compute_capability": f"{major}.{minor}",
                             # the board's own readings (NVML's default and settable limits), whatever the tables say
                             "board_power_w": round(first.default_limit_w),
                             "power_limit_w": [round(first.min_limit_w), round(first.max_limit_w)]},
                     "interconnect": (boards.interconnect(first.name, len(gpus.info)) if first.name in boards.SPECS
                                      else None) or "pcie", "cpu_threads": os.cpu_count()},
        # A sweep inside the GPU's own limits; edit to taste. Never applied by this helper.
        "power_caps_w": sorted({round(first.min_limit_w + (first.max_limit_w - first.min_limit_w) * f) for f in (0.4, 0.6, 0.8, 1.0)}),
    }


def describe_gpus(gpu: str, count: int) -> dict:
    """A machine that is not this one, from its GPU model's specifications (host/boards.py SPECS): memory,
    bandwidth, compute capability, and a cap sweep below its stock limit inside the board's settable range. A fact
    the tables do not know (every one, for a board no table lists: boards.unknown_board) is written as a placeholder
    saying where to read it (boards.placeholder), which the plan refuses in one line until it is filled in."""
    model = gpu if boards.unknown_board(gpu) else boards.resolve(gpu)
    known = {"board_power_w": boards.BOARD_POWER_W.get(model), "power_limit_w": boards.table_range(model),
             **dict(zip(("memory_gib", "bandwidth_gbs", "compute_capability"), boards.SPECS.get(model, (None,) * 3)))}
    if known["power_limit_w"] and known["power_limit_w"][1] is None:  # the table's lowest, the highest by board
        del known["power_limit_w"]
    stated = {name: ([round(w) for w in value] if name == "power_limit_w" else value) if value is not None
              else boards.placeholder(name) for name, value in known.items()}
    if model in boards.BOARD_POWER_W:  # the table's board power: planning reads it there
        del stated["board_power_w"]
    tensor = {} if model in boards.TENSOR_TFLOPS else {"tensor_tflops": None}  # optional: a comment says where
    return {
        "description": f"{count}x {model} (written by init-node --gpu for a box that is not this one)",
        "hardware": {"gpu": {"model": model, "count": count, **{k: stated[k] for k in (
                                 "memory_gib", "bandwidth_gbs", "compute_capability", "board_power_w", "power_limit_w")
                                 if k in stated}, **tensor},
                     "interconnect": (boards.interconnect(model, count) if model in boards.SPECS else None) or "pcie"},
        "power_caps_w": boards.starter_caps_w(model) if model in boards.BOARD_POWER_W else [],
    }


class _StarterDumper(yaml.SafeDumper):
    """The starter's YAML: a mapping holding a fact to fill in is written a key a line, so each placeholder reads
    on its own line; the rest as yaml.safe_dump writes it (flow style for the innermost collections)."""


def _mapping(dumper: yaml.SafeDumper, data: dict):
    filling = any(isinstance(v, str) and v.startswith(boards.PLACEHOLDER) for v in data.values())
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=False if filling else None)


_StarterDumper.add_representer(dict, _mapping)


def _flow(args: dict) -> str:
    return yaml.safe_dump(args, default_flow_style=True, sort_keys=False).strip()


def _template(root: Path, name: str) -> str:
    """A starter template without its own leading comment (which is about the template, not the node)."""
    lines = (root / STARTER / name).read_text().splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


PARALLEL_ARGS = re.compile(r"<parallel args(?:, with (?P<extra>[^>]*))?>")


def kv_tokens_held(memory_gib: float, count: int, root: Path = Path(".")) -> int:
    """Tokens of one stream's KV the node's GPUs hold beside the starter model's weights (STARTER_GEOMETRY)."""
    figures = next(g.figures for g in geometry.load_published_geometries(root) if g.name == STARTER_GEOMETRY)
    per_token = geometry.kv_bytes_per_token(figures["attention_layers"], figures["kv_heads"], figures["key_length"],
                                            figures["value_length"], 2, 2)
    weights = figures["params_b"] * 1e9 * BITS_PER_WEIGHT["int4"] / 8
    return max(int((memory_gib * count * 2**30 * KV_MEMORY_SHARE - weights) / per_token), 0)


def gpu_context_len(memory_gib: float | None, count: int, root: Path = Path(".")) -> int:
    """The starter's context: the ladder's longest point and reply that one stream's KV fits (kv_tokens_held),
    rounded up to 4,096; GPU_CONTEXT_LEN where the memory is not known yet (a placeholder)."""
    if not isinstance(memory_gib, (int, float)):
        return GPU_CONTEXT_LEN
    ladder = load_file(root / "configs/workloads" / f"{LADDER}.yaml", "workload")
    held, reply = kv_tokens_held(memory_gib, count, root), ladder["output_tokens"]
    top = max((p for p in ladder["ladder"] if p + reply <= held), default=min(ladder["ladder"]))
    return -(-(top + reply) // 4096) * 4096


def gpu_experiment(memory_gib: float | None, count: int, root: Path = Path(".")) -> dict:
    """The node-level fields of a GPU node's experiment: context, streams, judged workloads, accuracy set, rounds."""
    known = isinstance(memory_gib, (int, float))
    streams = MANY_STREAMS if known and memory_gib * count >= MANY_STREAMS_GIB else FEW_STREAMS
    return {"context_len": gpu_context_len(memory_gib, count, root), "concurrency": streams, "workloads": GPU_WORKLOADS,
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
    experiment = gpu_experiment(gpu_spec["memory_gib"], gpu_count, root) if gpu_count else \
        {"context_len": 32768, "concurrency": CPU_CONCURRENCY, "workloads": CPU_WORKLOADS}
    doc = {**machine, "os": "auto" if gpu else host_os(), **experiment}
    if gpu:
        model = gpu_spec["model"]
        about = (f"# From {boards.SOURCE.rsplit(' ', 1)[0]} SPECS for the {model}: check memory, bandwidth, "
                 "power_limit_w and interconnect against the box;\n# caps are W per GPU, and every sweep also runs "
                 "the stock limit first. `stackbench preflight --node NAME` on the box checks them.\n"
                 if model in boards.SPECS else
                 f"# No table here knows the {model}: fill in each '<fill in: ...>' from where it says (the plan "
                 "refuses the node, naming\n# the field, until then), then power_caps_w below board_power_w inside "
                 "power_limit_w, context_len from the memory, and\n# concurrency [1, 8, 32] where the GPUs hold "
                 f"{MANY_STREAMS_GIB} GiB or more together.\n"
                 f"# tensor_tflops (optional): {boards.TENSOR_WHERE}, e.g. {{bf16: 209.5, fp8: 419}};\n"
                 "# without it the rehearsal prices prefill as a multiple of decode and says so.\n")
        missing = [k for k, v in gpu_spec.items() if isinstance(v, str) and v.startswith(boards.PLACEHOLDER)]
        if missing and model in boards.SPECS:
            about += (f"# {', '.join(missing)}: not known here for this board; fill in from where each says.\n"
                      + (f"# tensor_tflops (optional): {boards.TENSOR_WHERE}; without it the rehearsal prices "
                         "prefill as a multiple of decode and says so.\n" if "tensor_tflops" in gpu_spec else ""))
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
    path.write_text(header + yaml.dump(doc, Dumper=_StarterDumper, sort_keys=False, default_flow_style=None, width=120)
                    + runs)
    return path
