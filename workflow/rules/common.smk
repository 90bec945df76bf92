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
        needed["env"] = f"{PATHS['envs']}/{launch.engine}/ready.json"
    needed["model"] = launch.model.path
    if launch.draft_model is not None:
        needed["draft"] = launch.draft_model.path
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
    if model_recipe(wildcards) == "smollm2-q4km":
        return {"env": f"{PATHS['envs']}/llamacpp/ready.json", "source": f"{PATHS['models']}/source/SmolLM2-135M-Instruct.Q4_1.gguf"}
    return {"source": f"{PATHS['models']}/source/SmolLM2-135M-Instruct.Q4_1.gguf"}
