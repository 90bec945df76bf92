# Shared state for every rule: the validated config and the expanded plan. Invalid config stops here,
# before any job is planned, with one line naming the file and the field.
import dataclasses
import json
import re
import shlex
import sys
from pathlib import Path

from stackbench.provision import envs as _envs
from stackbench.plan import expand as _expand
from stackbench.plan import launchspec as _launchspec
from stackbench.config import ConfigError
from stackbench.config import rehearsal as _rehearsal
from stackbench.cli import BENCHMARKS  # every rule's `benchmark:` file under it, which `stackbench timings` reads

try:
    CFG, NODES = _expand.load_plan(Path("."), config)
except ConfigError as _err:
    sys.exit(f"config error: {_err}")

# The package's CLI, run by the same Python that runs Snakemake (so no PATH or activation is needed).
STACKBENCH = f"{sys.executable} -m stackbench.cli"
PATHS = CFG["paths"]
RUNS = PATHS["runs"]
RUN = _rehearsal.selected(CFG)  # a real run, or a rehearsal of one node (config/rehearsal.py)
REHEARSAL = CFG["rehearsal"]["node"]  # the node rehearsed (stand-in engines, simulated GPUs), or None
BUDGET = RUN.budget  # a rehearsal's time budget of the real run, the report's opening; None for a real run
# The run's launch settings, written once for every launch's plan (rule launch_settings).
SETTINGS = f"{RUNS}/launch-settings.json"


wildcard_constraints:
    node=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    launch=r"[^/]+",
    round=r"\d+",
    engine=r"[^/]+",


def node_named(name):
    return next(n for n in NODES if n.name == name)


def _part(node, launch):
    return f"{RUNS}/{node.name}/{launch.name}/cells.parquet"


def round_verdict_file(node, round_no):
    return f"{RUNS}/{node.name}/rounds/round-{round_no}.json"


def _asked(verdict_path):
    """The (stack, variant) pairs a look's verdict asks the next round to launch again (the rows' stack: Launch.stack)."""
    return {tuple(pair) for pair in json.loads(Path(verdict_path).read_text())["next"]}


def _later_parts(node, upto, verdict_of):
    """The parts of the rounds after the first look up to round `upto`: round k + 1 holds the launches the look
    after round k asked for (verdict_of(k): its verdict file, or None where there is none yet)."""
    parts, look = [], max((l.replicate for l in node.launches), default=0)
    while node.later_rounds and look < min(upto, node.decision.most):
        verdict = verdict_of(look)
        asked = _asked(verdict) if verdict else set()
        if not asked:
            break
        parts += [_part(node, l) for l in node.later_rounds if l.replicate == look + 1 and (l.stack, l.variant) in asked]
        look += 1
    return parts


def sequence_parts(node, upto=None):
    """One cells.parquet per server launch of the node's sequence so far (docs/what-to-run.md): the first rounds,
    then each later round as the checkpoint after the round before asks (Snakemake re-plans after each)."""
    return [_part(node, l) for l in node.launches if not l.once] + _later_parts(
        node, node.decision.most if upto is None else upto,
        lambda look: checkpoints.round_verdict.get(node=node.name, round=look).output[0])


def first_round_parts():
    """Every selected node's planned launches (its first `launches` rounds): known before any checkpoint, so a
    deleted one is measured again and collect reruns."""
    return [_part(node, l) for node in NODES for l in node.launches]


def _first_look(node):
    return round_verdict_file(node, first_look_round(node))


def later_round_parts(wildcards=None):
    """The later rounds' launches, as the nodes' checkpoints ask for them (an input function)."""
    return [part for node in NODES if Path(_first_look(node)).exists()
            for part in sequence_parts(node)[sum(not l.once for l in node.launches):]]


def first_looks(wildcards=None):
    """The first look's verdict file of each node running a sequence that has none yet (a new run, or `rm -rf
    data/runs/<node>`): Snakemake does not plan a consumer whose input waits on a checkpoint nothing else asks
    for, so collect asks for the first look by name; the later rounds follow once it exists."""
    return [_first_look(node) for node in NODES if node.later_rounds and not Path(_first_look(node)).exists()]


def parts_on_disk_plan():
    """The parts planned so far as the verdict files on disk say, read without waiting on a checkpoint: what
    kept_parts and parts_gone compare with while the DAG is being built."""
    def on_disk(node):
        return lambda look: (path if Path(path := round_verdict_file(node, look)).exists() else None)

    return [part for node in NODES for part in
            [_part(node, l) for l in node.launches] + _later_parts(node, node.decision.most, on_disk(node))]


def kept_parts():
    """Parts on disk of the selected nodes' launches that this run does not plan (another `stacks=`
    selection, or a launch since dropped from the node file): collect keeps their rows, marked launch_kept
    and named in the report, until their run folder is deleted. A param, not an input, so no rule is asked
    to remake them; a deleted one changes the list, which makes collect rerun without it."""
    planned = set(parts_on_disk_plan())
    on_disk = (f"{RUNS}/{node.name}/{part.parent.name}/cells.parquet" for node in NODES
               for part in Path(RUNS, node.name).glob("*/cells.parquet"))
    return sorted(part for part in on_disk if part not in planned)


def bundle_files():
    """Result bundles to bring in (results/bundle.py): every *.stackbench.tar in the folder beside the results, and
    those the run config names (`bundles`)."""
    from stackbench.results import bundle as _bundle

    return [str(p) for p in _bundle.found(Path(PATHS["results"]).parent / "bundles", CFG["bundles"])]


def parts_gone():
    """Launch parts deleted since the last collect (`rm -rf data/runs/<node>/<launch>` to measure it again).
    Snakemake does not rebuild a missing intermediate file whose consumer is up to date, so results.parquet
    would keep the deleted rows; as a param of collect the list makes collect rerun, which needs the part,
    which measures the launch again."""
    if not Path(PATHS["results"]).exists():
        return []
    return [part for part in parts_on_disk_plan() if not Path(part).exists()]


def plan_inputs(wildcards):
    """What a launch spec is made from (plan/launchspec.py inputs); a later round's launch also reads the look
    before it, which names the cells still open (it measures only those)."""
    node, launch = _expand.find_launch(NODES, wildcards.node, wildcards.launch)
    needed = _launchspec.inputs(node, launch, PATHS, RUN)
    if launch in node.later_rounds:
        needed["look"] = round_verdict_file(node, launch.replicate - 1)
    return needed


def open_cells_flag(wildcards, input):
    """--open-cells <the look before> for a later round's launch (plan_inputs), else nothing."""
    return f"--open-cells {shlex.quote(input.look)}" if "look" in input.keys() else ""


def launch_settings(wildcards):
    """The slice of the top-level config that changes what a launch measures (a param of launch_settings)."""
    # paths.kept is read by the report alone: a run that gains it plans and measures nothing again.
    paths = {name: path for name, path in PATHS.items() if name != "kept"}
    return {"measure": CFG["measure"], "paths": paths, "rehearsal": CFG["rehearsal"]}


def first_look_round(node):
    """The round after which the node's first look runs: its last planned round."""
    return max((l.replicate for l in node.launches), default=0)


def node_rule(node, round_no=None):
    """The node's What to run decision settings (config.model.Decision) as a dict: the node file's for its first
    look (`round_no`; which fixes the horizon), and, once that look's file exists, the settings it wrote, horizon
    included, for every later look and the report. The first look's own settings never change with its output,
    so its job is not run again."""
    first = Path(_first_look(node))
    if (round_no is not None and round_no <= first_look_round(node)) or not first.exists():
        return dataclasses.asdict(node.decision)
    return json.loads(first.read_text())["rule"]


def decision_rules(wildcards=None):
    """Each node's What to run decision settings (node_rule), the report's param: a change renders it again."""
    return {n.name: node_rule(n) for n in NODES}


def report_inputs(wildcards):
    """What the report reads besides the results: a rehearsal's time budget (rehearsal/budget.py), and the runs
    kept by `stackbench keep` (a new one renders the report again)."""
    kept = sorted(Path(PATHS["kept"]).glob("*/*.parquet"))
    return ({"budget": BUDGET} if BUDGET else {}) | ({"kept": kept} if kept else {})


def budget_flag(wildcards, input):
    return f"--budget {shlex.quote(input.budget)}" if "budget" in input.keys() else ""


def kept_flag(wildcards, input):
    return f"--kept-dir {shlex.quote(PATHS['kept'])}" if "kept" in input.keys() else ""


def model_recipe(wildcards):
    return _expand.prepared_model(NODES, wildcards.model).prepare


def recipe_inputs(wildcards):
    """The source file and the environment of the tool a model recipe runs (provision/envs.py)."""
    return _envs.recipe_inputs(model_recipe(wildcards), PATHS)


def recipe_tools(wildcards, input):
    """--tools <ready.json> for a recipe that runs an engine's tools (requantizing, converting)."""
    return f"--tools {shlex.quote(input.env)}" if "env" in input.keys() else ""


def env_inputs(wildcards):
    return _envs.env_inputs(wildcards.engine)


# One launch at a time per node, launches of different nodes in parallel: a resource per node with a
# capacity of one, which each measure job of that node takes.
NOT_IN_A_NAME = re.compile(r"\W")


def _slot(name):
    return f"launch_slot_{NOT_IN_A_NAME.sub('_', name)}"


for _node in NODES:
    workflow.register_resource(_slot(_node.name), 1)

NODE_SLOTS = {_slot(n.name): (lambda wildcards, name=n.name: int(wildcards.node == name)) for n in NODES}


def launch_order(wildcards):
    """A measure job's priority: the node's launches run in the order plan/expand.py interleaved_rounds gives
    (round k's replicates before any of round k+1)."""
    node = node_named(wildcards.node)
    # the one-off sets' launches (Launch.once) after every round the sequence may reach
    ordered = [l for l in node.launches if not l.once] + list(node.later_rounds) + [l for l in node.launches if l.once]
    return -next(i for i, launch in enumerate(ordered) if launch.name == wildcards.launch)


def slurm_resource(name, default=None):
    """A resource of the launch's node for the SLURM executor (ignored when running locally)."""

    def resource(wildcards):
        node = node_named(wildcards.node)
        slurm = node.slurm
        values = {"slurm_partition": slurm.partition, "constraint": slurm.constraint, "gpu": node.gpu_count,
                  "gpu_model": slurm.gpu_model, "runtime": slurm.runtime_min, "slurm_extra": slurm.slurm_extra,
                  "cpus_per_task": slurm.cpus, "mem_mb": slurm.mem_mb}
        value = values[name]
        return default if value is None else value

    return resource
