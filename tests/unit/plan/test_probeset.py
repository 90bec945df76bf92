"""Correctness probes in every launch (plan.probeset): whatever a node lists, unless it turns them off."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
import yaml
from paths import ROOT

from stackbench.config import ConfigError
from stackbench.plan import expand
from stackbench.report import queries


def node_with(tmp_path, **fields) -> expand.Node:
    shutil.copytree(ROOT / "configs", tmp_path / "configs", dirs_exist_ok=True)
    doc = {"hardware": {"gpu": {"model": "none", "count": 0}}, "workloads": ["code"],
           "models": {"served": {"hf_dir": "/not/ours"}},
           "runs": [{"stack": "vllm-cpu", "model": "served", "variants": ["nospec"],
                     "launch": {"mode": "external", "url": "http://127.0.0.1:1"}, **fields.pop("run", {})}], **fields}
    (tmp_path / "configs/nodes/probed.yaml").write_text(yaml.safe_dump(doc))
    cfg = expand.load_run_config(tmp_path, {"nodes": ["probed"]})
    return expand.load_node("probed", cfg, tmp_path)


def test_a_node_that_lists_no_probes_runs_them_and_the_accuracy_set_anyway(tmp_path):
    (launch,) = node_with(tmp_path).launches
    assert launch.workloads == ("code", "accuracy", "probes") and launch.probes_off is None
    assert launch.accuracy_off is None


def test_accuracy_null_turns_the_set_off_and_says_where(tmp_path):
    (launch,) = node_with(tmp_path, accuracy=None).launches
    assert launch.workloads == ("code", "probes")
    assert "probed.yaml: runs[0]: accuracy: null" in launch.accuracy_off
    (run_off,) = node_with(tmp_path / "b", run={"accuracy": None}).launches
    assert run_off.workloads == ("code", "probes") and run_off.accuracy_off


def test_an_accuracy_set_that_is_not_of_kind_accuracy_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"accuracy: 'code' is a workload of kind 'single', not of kind accuracy"):
        node_with(tmp_path, run={"accuracy": "code"})


def test_a_run_may_take_its_own_probe_set_and_a_listed_probe_workload_is_kept(tmp_path):
    (launch,) = node_with(tmp_path, run={"probes": "probes-seed-004"}).launches
    assert launch.workloads == ("code", "accuracy", "probes-seed-004")
    (listed,) = node_with(tmp_path / "b", workloads=["code", "probes-seed-004"]).launches
    assert listed.workloads == ("code", "probes-seed-004", "accuracy")  # not probes as well


def test_probes_off_is_recorded_with_where_it_was_turned_off(tmp_path):
    (launch,) = node_with(tmp_path, probes=None).launches
    assert launch.workloads == ("code", "accuracy")
    assert "probed.yaml: runs[0]: probes: null" in launch.probes_off


def test_a_probe_set_that_is_not_of_kind_probe_is_refused_naming_the_run(tmp_path):
    with pytest.raises(ConfigError, match=r"probed.yaml: runs\[0\]: probes: 'code' is a workload of kind 'single'"):
        node_with(tmp_path, run={"probes": "code"})


def test_the_seed_004_node_runs_the_posts_regressions_on_its_vllm_launches_and_every_seed_node_runs_probes():
    _, nodes = expand.load_plan(ROOT, {"nodes": ["rtx5090", "2x3090-nvlink", "4xa6000-tp2", "4xa6000-tp4"]})
    for node in nodes:
        for launch in node.launches:
            kinds = [w.kind for w in node.workloads if w.name in launch.workloads]
            assert "probe" in kinds, launch.name
            expected = "probes-seed-004" if launch.engine == "vllm" and node.name == "rtx5090" else "probes"
            assert launch.workloads[-1] == expected, (node.name, launch.name)


def test_the_report_names_the_launches_without_probes():
    rows = pd.DataFrame([{"source": "measured", "node": "n", "stack": "vllm", "variant": "nospec", "workload": "server",
                          "metric": "smoke_score", "status": "not_run", "reason": "correctness probes off (n.yaml: probes: null)"}])
    assert queries.probes_off(queries.Results(rows)) == {"n": "vllm / nospec: correctness probes off (n.yaml: probes: null)"}
