"""The posts' methods as workloads (configs/workloads/seed-*.yaml), the ladder kind, and a node running a
method at a reduced scale, named as such in the rows' basis (method_scale)."""

import shutil
from pathlib import Path

import pytest
import yaml
from paths import ROOT

from stackbench.config import ConfigError
from stackbench.config.model import Workload
from stackbench.measure import probes, workloads
from stackbench.plan import expand, launchspec

SEEDS = sorted((ROOT / "configs/workloads").glob("seed-*.yaml"))


@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.stem)
def test_a_seed_workload_cites_its_post_and_names_what_the_post_leaves_unstated(path):
    doc = yaml.safe_load(path.read_text())
    number = path.stem.split("-")[1]
    assert doc["source"].startswith(f"{number}_") and ".txt §" in doc["source"]  # the seed file and its section
    assert "not stated" in doc["source"] and "chosen" in doc["source"]


def repo(tmp_path: Path, node: dict, workloads: dict | None = None) -> Path:
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    for name, doc in (workloads or {}).items():
        (tmp_path / f"configs/workloads/{name}.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "configs/nodes/n.yaml").write_text(yaml.safe_dump({
        "hardware": {"gpu": {"model": "none", "count": 0}}, "concurrency": [1], "allow_queueing": True,
        "models": {"m": {"gguf": "/m.gguf", "quant": "Q4_K_M"}},
        "runs": [{"stack": "llamacpp", "model": "m", "variants": ["nospec"]}], **node}))
    return tmp_path


def load(root: Path):
    cfg = expand.load_run_config(root, {"nodes": ["n"]})
    return cfg, expand.load_node("n", cfg, root)


def test_a_node_runs_a_method_reduced_and_says_so(tmp_path):
    cfg, node = load(repo(tmp_path, {"workloads": ["seed-004-short"], "scale": {"seed-004-short": {"output_tokens": 64}}}))
    scaled, _probes, _accuracy = node.workloads  # the probe and accuracy sets every launch runs come after
    assert scaled.output_tokens == 64 and scaled.method_scale == "output 64 of 512"
    assert scaled.prompt_tokens_target == 400 and scaled.thinking is False
    _, plain = load(repo(tmp_path / "plain", {"workloads": ["seed-004-short"]}))
    assert plain.workloads[0].method_scale is None
    # A reduced method is another cell: its fingerprint is not the full method's.
    fingerprints = [launchspec.build(c, n, n.launches[0]).cell_fingerprint(
        next(cell for cell in launchspec.cells_of(n, n.launches[0]) if cell.workload.name == "seed-004-short"))
        for c, n in ((cfg, node), load(tmp_path / "plain"))]
    assert fingerprints[0] != fingerprints[1]


def test_a_scale_for_a_workload_the_node_does_not_run_is_refused_naming_it(tmp_path):
    with pytest.raises(ConfigError, match=r"n\.yaml: scale\.seed-004-long: not a workload of this node"):
        load(repo(tmp_path, {"workloads": ["seed-004-short"], "scale": {"seed-004-long": {"output_tokens": 64}}}))


def test_a_ladder_is_one_cell_per_length_keyed_by_it(tmp_path):
    _, node = load(repo(tmp_path, {"workloads": ["ladder-cpu"]}))
    cells = [c for c in launchspec.cells_of(node, node.launches[0]) if c.workload.kind == "ladder"]
    assert [c.key for c in cells] == [f"ladder-cpu--p{n}--c1--nocap" for n in (512, 1024, 2048, 6000)]
    assert [c.prompt_tokens_target for c in cells] == [512, 1024, 2048, 6000]


def test_lengths_without_kind_ladder_are_refused(tmp_path):
    lengths = {"prompts": ["x"], "ladder": [128]}
    with pytest.raises(ConfigError, match=r"odd\.yaml: ladder: .*kind ladder"):
        load(repo(tmp_path, {"workloads": ["odd"]}, {"odd": lengths}))


def test_a_ladder_spec_survives_the_launch_spec_file(tmp_path):
    cfg, node = load(repo(tmp_path, {"workloads": ["ladder-cpu", "seed-004-short"]}))
    spec = launchspec.build(cfg, node, node.launches[0])
    again = launchspec.read(launchspec.write(spec, tmp_path / "launch.json"))
    assert again.fingerprint == spec.fingerprint and again.cells == spec.cells


def workload(**fields) -> Workload:
    return Workload(name="w", kind="single", prompts=("p",), output_tokens=8, prompt_tokens=None, turns=1,
                         salt=True, concurrency=(1,), **fields)


def test_thinking_and_effort_are_request_fields_and_enter_the_fingerprint_only_when_set():
    assert workloads.request_fields(workload()) == {}
    assert workloads.request_fields(workload(thinking=True, reasoning_effort="medium")) == {
        "chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": "medium"}
    assert workloads.request_fields(workload(thinking=False)) == probes.THINKING_OFF  # one definition
    assert set(workload(thinking=False).identity) - set(workload().identity) == {"thinking"}
    assert not {"thinking", "reasoning_effort", "prompt_tokens_target", "ladder", "method_scale"} & set(workload().identity)
    assert [workloads.thinking_basis(t) for t in (True, False, None)] == ["on", "off", "server default"]


def test_seed_001_single_sends_the_posts_three_groups_in_every_repeat():
    workload = expand.load_workload("seed-001-single", [1], ROOT, "test")
    for repeat in range(3):
        requests = workloads.requests(workload, workload.load, 1 * workload.load.requests_per_stream, repeat)
        texts = [r.turns[0].split("] ", 1)[-1] for r in requests]  # the salt stripped
        assert sorted(texts) == sorted(workload.prompts)
