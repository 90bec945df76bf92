"""What an engine needs in its environment (SGLang's CPU engine, its sgl_kernel stand-in) comes from its
adapter per launch: it reaches no other engine's server and no launch's fingerprint, and one run's own
`env` reaches that run's launches only."""

import shutil
from pathlib import Path

import pytest
from paths import ROOT

from stackbench import cli
from stackbench.engines import adapter_for
from stackbench.plan import expand, launchspec


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def local_cpu(repo: Path) -> dict:
    """Every stack's launches on local-cpu, one of each configuration (launches: 1)."""
    _, nodes = expand.load_plan(repo, {"nodes": ["local-cpu"], "stacks": "all", "launches": 1})
    return {l.name: l for l in nodes[0].launches}


def test_only_sglang_on_cpu_gets_its_cpu_engine_and_the_stand_in(repo):
    launches = local_cpu(repo)
    needs = {name: adapter_for(l.engine).native_env(l, 2) for name, l in launches.items()}
    sglang = needs.pop("sglang-cpu--nospec")
    assert sglang["SGLANG_USE_CPU_ENGINE"] == "1"
    assert (Path(sglang["PYTHONPATH"]) / "sgl_kernel/__init__.py").is_file()  # the package's own stand-in
    assert not any("SGLANG_USE_CPU_ENGINE" in env or "PYTHONPATH" in env for env in needs.values())
    # SGLang on a GPU uses its own kernels: no stand-in there.
    _, gpu = expand.load_plan(repo, {"nodes": ["rtx5090"], "stacks": ["sglang-nospec"]})
    assert adapter_for("sglang").native_env(gpu[0].launches[0], 16) == {}


def test_a_runs_env_reaches_its_launches_only_and_moves_no_other_fingerprint(repo):
    launches = local_cpu(repo)
    assert {name: l.env for name, l in launches.items()} == {
        "llamacpp--nospec": {}, "llamacpp--nospec--once": {}, "llamacpp--ngram-n8": {}, "llamacpp--ngram-n16": {},
        "vllm-cpu--nospec": {"VLLM_CPU_KVCACHE_SPACE": "2"}, "vllm-cpu--ngram-n3": {"VLLM_CPU_KVCACHE_SPACE": "2"},
        "sglang-cpu--nospec": {}}
    cfg = expand.load_run_config(repo, {"nodes": ["local-cpu"], "stacks": "all", "launches": 1})
    node = expand.load_node("local-cpu", cfg, repo)
    before = {l.name: launchspec.build(cfg, node, l).fingerprint for l in node.launches}
    path = repo / "configs/nodes/local-cpu.yaml"
    path.write_text(path.read_text().replace('VLLM_CPU_KVCACHE_SPACE: "2"', 'VLLM_CPU_KVCACHE_SPACE: "3"'))
    node = expand.load_node("local-cpu", cfg, repo)
    after = {l.name: launchspec.build(cfg, node, l).fingerprint for l in node.launches}
    assert {n for n in before if before[n] != after[n]} == {"vllm-cpu--nospec", "vllm-cpu--ngram-n3"}


def test_the_printed_command_starts_with_what_the_engine_needs(repo, capsys):
    assert cli.main(["commands", "--node", "local-cpu", "--launch", "sglang-cpu--nospec"]) == 0
    line = capsys.readouterr().out.split(" ", 1)[1]
    assert line.startswith("SGLANG_USE_CPU_ENGINE=1 PYTHONPATH=") and " -m sglang.launch_server " in line


def test_vllm_on_cpu_binds_its_threads_to_the_nodes_cores_and_the_basis_says_so(repo):
    from dataclasses import replace

    from stackbench.engines.base import ServerFacts
    from stackbench.measure.rows import engine_setup

    cfg = expand.load_run_config(repo, {"nodes": ["local-cpu"], "stacks": "all", "launches": 1})
    node = expand.load_node("local-cpu", cfg, repo)
    specs = {l.name: launchspec.build(cfg, node, l) for l in node.launches}
    # The node's server core, as llama.cpp's --threads 1 (cpu_threads; the client has core 1, hardware.client_cpus);
    # vLLM's 'auto' would reserve a core of its own.
    assert {name: s.engine.get("setup_env") for name, s in specs.items() if s.launch.engine == "vllm"} == {
        "vllm-cpu--nospec": {"VLLM_CPU_OMP_THREADS_BIND": "0-0"}, "vllm-cpu--ngram-n3": {"VLLM_CPU_OMP_THREADS_BIND": "0-0"}}
    assert not any("setup_env" in s.engine for s in specs.values() if s.launch.engine != "vllm")
    vllm = specs["vllm-cpu--nospec"]
    unbound = replace(vllm, engine={k: v for k, v in vllm.engine.items() if k != "setup_env"})
    assert unbound.server_fingerprint != vllm.server_fingerprint  # the binding changes the figures: it re-measures
    assert engine_setup(ServerFacts(backend="CPU"), (), vllm.engine["setup_env"]) == "backend CPU; VLLM_CPU_OMP_THREADS_BIND=0-0"
    # vLLM on a GPU (seed 004's image) gets no CPU binding.
    _, gpu = expand.load_plan(repo, {"nodes": ["rtx5090"], "stacks": ["vllm-nvfp4-mtp"]})
    assert adapter_for("vllm").native_env(gpu[0].launches[0], None) == {}
