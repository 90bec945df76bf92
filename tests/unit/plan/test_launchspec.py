"""The launch spec and its fingerprints: what re-measures a cell and what does not (no server needed)."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from paths import ROOT

from stackbench.config import ConfigError, rehearsal
from stackbench.config.model import Launch, Node
from stackbench.measure.cellstore import CellStore
from stackbench.plan import expand, launchspec


@pytest.fixture
def repo(tmp_path) -> Path:
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    return tmp_path


def spec_of(repo: Path, node: str = "local-cpu", index: int = 0, **given) -> launchspec.LaunchSpec:
    """The spec of the node's launch `index`, with the cells of its configuration's one-off launch (Launch.once)
    added: what the configuration's first round measures."""
    cfg = expand.load_run_config(repo, {"nodes": [node], **given})
    loaded = expand.load_node(node, cfg, repo)
    spec = launchspec.build(cfg, loaded, loaded.launches[index])
    once = [launchspec.build(cfg, loaded, l).cells for l in loaded.launches
            if l.once and l.configuration == spec.launch.configuration and spec.launch.replicate == 1]
    return replace(spec, cells=spec.cells + sum(once, ())) if once else spec


def fingerprints(spec: launchspec.LaunchSpec) -> dict[str, str]:
    return {c.key: spec.cell_fingerprint(c) for c in spec.cells}


def test_spec_round_trips_and_names_everything_the_measure_job_needs(repo, tmp_path):
    spec = spec_of(repo)
    path = launchspec.write(spec, tmp_path / "launch.json")
    again = launchspec.read(path)
    assert again == spec and again.fingerprint == spec.fingerprint
    doc = json.loads(path.read_text())
    assert {c["key"] for c in doc["cells"]} >= {"code--c1--nocap", "code--c2--nocap"}
    assert doc["launch"]["env_name"] == "llamacpp" and doc["measure"]["repeats"] == 3  # the run's own repeats


def test_a_hand_edited_spec_is_refused(repo, tmp_path):
    path = launchspec.write(spec_of(repo), tmp_path / "launch.json")
    path.write_text(path.read_text().replace('"repeats": 3', '"repeats": 5'))
    with pytest.raises(ValueError, match="fingerprint does not match"):
        launchspec.read(path)


def test_a_spec_whose_measure_settings_are_not_the_current_ones_says_to_plan_again(repo, tmp_path):
    path = launchspec.write(spec_of(repo), tmp_path / "launch.json")
    doc = json.loads(path.read_text())
    del doc["measure"]["spread_flag_ratio"]
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"launch.json: measure: missing 1 required .*'spread_flag_ratio'; re-run the plan step$"):
        launchspec.read(path)


def test_engine_version_and_model_file_change_every_cell_fingerprint(repo, tmp_path):
    base = spec_of(repo)
    upgraded = replace(base, engine={**base.engine, "version": "b99999"})
    new_model = replace(base, models={"smollm2-135m-q4km": {"sha256": "0" * 64}})
    for changed in (upgraded, new_model):
        assert set(fingerprints(changed).values()).isdisjoint(fingerprints(base).values())


def test_adding_a_workload_keeps_the_other_cells(repo):
    before = fingerprints(spec_of(repo))
    node = repo / "configs/nodes/local-cpu.yaml"
    doc = yaml.safe_load(node.read_text())
    doc["runs"][0]["workloads"] = doc["runs"][0]["workloads"][:2]  # the no-spec launch names its own
    node.write_text(yaml.safe_dump(doc))
    fewer = fingerprints(spec_of(repo))
    assert len(fewer) < len(before) and fewer.items() <= before.items()  # the rest keep their fingerprints


def test_a_run_may_measure_its_own_workloads(repo):
    """local-cpu: prefill, prefix, load and the ladder run on the no-spec launch only; giving the n-gram run
    the same list adds exactly those cells to its launches and leaves their server and other cells alone."""
    nospec, draft = spec_of(repo, index=0), spec_of(repo, index=1)
    assert draft.launch.name == "llamacpp--ngram-n8"
    load_cells = {"code-load--c1--nocap", "code-load--c4--nocap", "code-load--r2--nocap", "code-load--r4--nocap"}
    assert load_cells <= {c.key for c in nospec.cells} and not load_cells & {c.key for c in draft.cells}
    node = repo / "configs/nodes/local-cpu.yaml"
    doc = yaml.safe_load(node.read_text())
    doc["runs"][1]["workloads"] = doc["runs"][0]["workloads"]
    node.write_text(yaml.safe_dump(doc))
    loaded = spec_of(repo, index=1)
    assert loaded.server_fingerprint == draft.server_fingerprint
    run_only = {c.key for c in nospec.cells if c.workload.name in ("code-load", "ladder-cpu", "long-prefill", "multi-turn")}
    assert set(fingerprints(loaded)) - set(fingerprints(draft)) == run_only
    assert fingerprints(draft).items() <= fingerprints(loaded).items()
    doc["runs"][1]["workloads"] = ["poetry"]
    node.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"local-cpu.yaml: runs\[1\].workloads\[0\]: unknown workload 'poetry'"):
        spec_of(repo)


def test_node_list_and_run_only_settings_do_not_touch_a_launch(repo):
    base = spec_of(repo)
    assert spec_of(repo, measure={"keep_failed": True, "ready_timeout_s": 30}).cells == base.cells
    assert fingerprints(spec_of(repo, measure={"keep_failed": True, "ready_timeout_s": 30})) == fingerprints(base)
    assert fingerprints(spec_of(repo, measure={"warmup_requests": 3})) != fingerprints(base)


def test_failed_cells_are_todo_unless_kept(repo, tmp_path):
    spec = spec_of(repo)
    cells = CellStore(spec, tmp_path / "run")
    ok, failed = spec.cells[0], spec.cells[1]
    row = {"source": "measured", "metric": "decode_tps", "unit": "tok/s", "stat": "single"}
    cells.write(ok, [{**row, "status": "ok", "value": 1.0}], [])
    cells.write(failed, [{**row, "status": "failed", "reason": "out of memory"}], [])
    assert ok not in cells.todo() and failed in cells.todo()
    assert failed not in CellStore(spec, tmp_path / "run", keep_failed=True).todo()
    assert cells.unfinished()[0] == failed


def test_gpu_nodes_build_llamacpp_for_their_architecture(repo):
    cfg = expand.load_run_config(repo, {"nodes": ["2x3090-nvlink"]})
    envs = {l.env_name for l in expand.load_node("2x3090-nvlink", cfg, repo).launches if l.engine == "llamacpp"}
    assert envs == {"llamacpp-cuda-sm86"}


def test_reasoning_parser_on_some_runs_of_a_node_only_is_refused(repo):
    node = repo / "configs/nodes/2x3090-nvlink.yaml"
    doc = yaml.safe_load(node.read_text())
    # a new dict for this run alone: the file's SGLang runs share theirs (a YAML anchor)
    doc["runs"][1]["server_args"] = {k: v for k, v in doc["runs"][1]["server_args"].items() if k != "reasoning_parser"}
    node.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"2x3090-nvlink.yaml: runs: a reasoning parser \(reasoning_parser\) is set on some "
                                          r"runs but not on sglang-nospec--nospec"):
        expand.load_plan(repo, {"nodes": ["2x3090-nvlink"]})


def test_the_fingerprint_covers_only_the_fields_it_names(repo):
    """An allow-list: a field added to Node or Launch moves no fingerprint until launchspec names it, and
    correcting a roofline input (the GPU's bandwidth) re-measures nothing."""
    import dataclasses

    base = spec_of(repo)

    @dataclasses.dataclass(frozen=True)
    class NodeWithMore(Node):
        rack_position: str = "top"

    @dataclasses.dataclass(frozen=True)
    class LaunchWithMore(Launch):
        scheduler_note: str = "night"

    fields = {f: getattr(base.node, f) for f in base.node.__dataclass_fields__}
    grown = replace(base, node=NodeWithMore(**fields, rack_position="bottom"),
                    launch=LaunchWithMore(**{f: getattr(base.launch, f) for f in base.launch.__dataclass_fields__}))
    assert grown.server_fingerprint == base.server_fingerprint
    assert replace(base, node=replace(base.node, bandwidth_gbs=936.0)).server_fingerprint == base.server_fingerprint
    moved = {name: replace(base, node=replace(base.node, **{name: value})).server_fingerprint != base.server_fingerprint
             for name, value in (("gpu_model", "NVIDIA RTX A6000"), ("cpu_threads", 16), ("os", "Windows 11"))}
    assert moved == {"gpu_model": True, "cpu_threads": True, "os": True}
    assert replace(base, launch=replace(base.launch, context_len=8192)).server_fingerprint != base.server_fingerprint
    assert set(launchspec.SERVER_NODE_FIELDS) <= set(Node.__dataclass_fields__)
    assert set(launchspec.SERVER_LAUNCH_FIELDS) <= set(Launch.__dataclass_fields__)


def test_a_run_may_name_its_own_concurrency_and_keeps_a_workloads_own_list(repo):
    node = repo / "configs/nodes/local-cpu.yaml"
    doc = yaml.safe_load(node.read_text())
    doc["runs"][1]["concurrency"] = [1]
    node.write_text(yaml.safe_dump(doc))
    draft = spec_of(repo, index=1)
    assert {c.concurrency for c in draft.cells} == {1}
    assert {c.concurrency for c in spec_of(repo, index=0).cells if c.workload.name == "code"} == {1, 2}
    doc["runs"][0]["concurrency"] = [2]
    node.write_text(yaml.safe_dump(doc))
    nospec = spec_of(repo, index=0)
    assert {c.concurrency for c in nospec.cells if c.workload.name == "code-load" and c.rate is None} == {1, 2, 3, 4}
    assert {c.concurrency for c in nospec.cells if c.workload.name == "code"} == {2}


def test_more_streams_than_the_server_runs_at_once_is_refused_at_plan_time(repo):
    node = repo / "configs/nodes/local-cpu.yaml"
    doc = yaml.safe_load(node.read_text())
    doc["runs"][0]["server_args"] = {"parallel": 2}  # code-load sweeps to 4
    node.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"/configs/nodes/local-cpu.yaml: runs\[0\] \(llamacpp--nospec\): concurrency 4 "
                                          r"exceeds the server's 2 concurrent requests \(--parallel\); give the run its own "
                                          r"list \(runs\[0\].concurrency\), raise --parallel, or set allow_queueing: true$"):
        spec_of(repo)
    doc["allow_queueing"] = True
    node.write_text(yaml.safe_dump(doc))
    assert {c.concurrency for c in spec_of(repo).cells} >= {4}


def test_a_flag_the_pipeline_sets_in_a_stack_file_stops_the_plan_with_its_key(repo):
    stack = repo / "configs/stacks/llamacpp.yaml"
    doc = yaml.safe_load(stack.read_text())
    doc["server_args"]["port"] = 8080
    stack.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"local-cpu.yaml: runs\[0\] \(llamacpp--nospec\): server_args.port: set by the "
                                          r"pipeline .*remove it from server_args \(the run's, its stack's or its variant's\)$"):
        spec_of(repo)


def test_stating_the_weights_family_or_the_checkpoint_moves_no_fingerprint(repo):
    """models.<key>.weights pairs launches at collect and .checkpoint names them in the rows; the server's
    figures depend on neither, so every node's launches keep the fingerprints they had before they were
    stated (and the spec still names them)."""
    names = sorted(p.stem for p in (repo / "configs/nodes").glob("*.yaml"))

    def all_fingerprints() -> dict[str, tuple]:
        out = {}
        for name in names:
            every = expand.load_run_config(repo, {"nodes": [name], "stacks": "all"})
            for index in range(len(expand.load_node(name, every, repo).launches)):
                spec = spec_of(repo, node=name, index=index, stacks="all")
                model = spec.launch.model
                out[f"{name}/{spec.launch.name}"] = (spec.fingerprint, spec.server_fingerprint, model.weights, model.label)
        return out

    stated = all_fingerprints()
    assert stated["local-cpu/llamacpp--nospec"][2] == "SmolLM2-135M-Instruct"
    assert stated["local-cpu/vllm-cpu--nospec"][2] == "SmolLM2-135M-Instruct"
    # rtx5090's INT4 launch names the checkpoint as seed 000 writes it; local-cpu states none: its key.
    assert stated["rtx5090/sglang-nospec--nospec"][3] == "RedHatAI/Qwen3.8-27B-INT4"
    assert stated["local-cpu/llamacpp--nospec"][3] == "smollm2-135m-q4km"
    for name in names:
        path = repo / f"configs/nodes/{name}.yaml"
        doc = yaml.safe_load(path.read_text())
        for model in doc["models"].values():
            model.pop("weights", None)
            model.pop("checkpoint", None)
        path.write_text(yaml.safe_dump(doc))
    unstated = all_fingerprints()
    assert {k: v[:2] for k, v in unstated.items()} == {k: v[:2] for k, v in stated.items()}
    assert {v[2] for v in unstated.values()} == {None}
    assert unstated["rtx5090/sglang-nospec--nospec"][3] == "qwen38-int4"
    named = replace(spec_of(repo), launch=replace(spec_of(repo).launch, model=replace(spec_of(repo).launch.model, weights="F")))
    assert named.fingerprint == spec_of(repo).fingerprint
    assert launchspec.read(launchspec.write(named, repo / "launch.json")).launch.model.weights == "F"  # the spec carries it


def test_a_run_may_sweep_its_own_caps_and_repeats_and_the_node_keeps_its_defaults(repo):
    """2x3090-nvlink sweeps seed 002's caps on the post's configuration only; a run's repeats replace the
    config's for its cells (and their fingerprints) alone."""
    cfg = expand.load_run_config(repo, {"nodes": ["2x3090-nvlink"]})
    node = expand.load_node("2x3090-nvlink", cfg, repo)
    caps = {launch.name: {c.power_cap_w for c in launchspec.cells_of(node, launch)} for launch in node.launches}
    assert caps.pop("sglang-eagle--eagle-3-1-4") == {None, 180, 220, 260, 300}
    assert caps and all(found == {None} for found in caps.values())
    before = spec_of(repo, "2x3090-nvlink", index=0)
    path = repo / "configs/nodes/2x3090-nvlink.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["runs"][0]["repeats"] = 5
    doc["power_caps_w"] = [200]
    path.write_text(yaml.safe_dump(doc))
    changed, other = spec_of(repo, "2x3090-nvlink", index=0), spec_of(repo, "2x3090-nvlink", index=4)
    assert changed.measure.repeats == 5 and other.measure.repeats == cfg["measure"]["repeats"]
    assert {c.power_cap_w for c in changed.cells} == {None, 200}  # the node's list where the run names none
    assert {c.power_cap_w for c in other.cells} == {None, 180, 220, 260, 300}
    assert set(fingerprints(changed).values()).isdisjoint(fingerprints(before).values())
    doc["runs"][0]["power_caps_w"] = [400]
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"runs\[0\].power_caps_w\[0\]: 400 W is outside the GPU's range 100-350 W"):
        spec_of(repo, "2x3090-nvlink", index=0)


def test_the_probes_run_first_on_the_fresh_server(repo):
    """The greedy outputs compared across launches start from the same empty cache (plan/launchspec.py cells_of)."""
    spec = spec_of(repo)
    assert spec.cells[0].workload.kind == "probe" and [c.workload.name for c in spec.cells[1:3]] == ["code-edit", "code-edit"]


def test_a_rehearsal_is_planned_again_once_the_engines_own_parser_is_built(repo, tmp_path):
    """Issue 60: a rehearsal run before the engines' CPU environments are built skips the flag check. Building one
    makes its ready.json an input of the launch's plan and moves the launch's fingerprint, so the rehearsal run
    again re-launches the stand-in, whose check then runs (a refusal is reported at that rerun); llama.cpp,
    whose parser never runs here, keeps its fingerprint."""
    envs = tmp_path / "envs"
    given = {"nodes": ["rtx5090"], "rehearsal": {"node": "rtx5090"}, "paths": {"envs": str(envs)}}
    cfg = expand.load_run_config(repo, given)
    node = expand.load_node("rtx5090", cfg, repo)
    vllm, llamacpp = (next(l for l in node.launches if l.engine == engine) for engine in ("vllm", "llamacpp"))
    before = {l.name: launchspec.build(cfg, node, l) for l in (vllm, llamacpp)}
    assert "flag_parser" not in launchspec.inputs(node, vllm, cfg["paths"], rehearsal.selected(cfg))
    assert before[vllm.name].engine["flag_parser"]["missing"] == str(envs / "vllm-cpu/ready.json")
    (envs / "vllm-cpu").mkdir(parents=True)
    (envs / "vllm-cpu/ready.json").write_text(json.dumps({"server": "/bin/false", "version": "0.32.0"}))
    assert launchspec.inputs(node, vllm, cfg["paths"], rehearsal.selected(cfg))["flag_parser"] == \
        str(envs / "vllm-cpu/ready.json")
    after = {l.name: launchspec.build(cfg, node, l) for l in (vllm, llamacpp)}
    assert after[vllm.name].engine["flag_parser"] == {"env": "vllm-cpu", "version": "0.32.0"}
    assert after[vllm.name].server_fingerprint != before[vllm.name].server_fingerprint
    assert after[llamacpp.name].server_fingerprint == before[llamacpp.name].server_fingerprint
    real = expand.load_run_config(repo, {**given, "rehearsal": {}})  # a real run: the engine parses its own flags
    assert "flag_parser" not in launchspec.build(real, node, vllm).engine
    assert "flag_parser" not in launchspec.inputs(node, vllm, real["paths"])
