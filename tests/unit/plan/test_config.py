"""Config files are validated against their schemas; every error is one line naming file and field."""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from helpers import edit_yaml as edit
from paths import ROOT

from stackbench.config import ConfigError, load_schema
from stackbench.config.model import Measure
from stackbench.plan import expand, launchspec


@pytest.fixture
def configs(tmp_path) -> Path:
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    return tmp_path


def test_defaults_come_from_the_schema(configs):
    cfg, nodes = expand.load_plan(configs)
    assert cfg["measure"]["ready_timeout_s"] == 600 and cfg["paths"]["results"] == "data/results.parquet"
    assert {launch.bind_host for launch in nodes[0].launches} == {"127.0.0.1"}


def test_the_measure_settings_are_a_typed_record_whose_defaults_are_the_schemas(configs):
    """config.model.Measure names every key of the schema's `measure` block and repeats no default of it."""
    properties = load_schema("config")["properties"]["measure"]["properties"]
    assert [f.name for f in dataclasses.fields(Measure)] == list(properties)
    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(Measure))
    assert set(launchspec.NOT_IN_CELL_IDENTITY + launchspec.PRECISION_SETTINGS) <= set(properties)  # no misspelt name
    measure = Measure.of(expand.load_run_config(configs, {"nodes": ["local-cpu"], "measure": {"repeats": 4}}))
    assert (measure.repeats, measure.ready_timeout_s, measure.client_processes) == (4, 600, "auto")
    assert measure.most_repeats == 4 and dataclasses.replace(measure, target_rel_ci=0.05).most_repeats == 10  # max_repeats


def test_a_misspelt_measure_setting_is_refused_at_load_in_one_line(configs):
    edit(configs / "configs/config.yaml", lambda d: d["measure"].update(warmup_request=2))
    with pytest.raises(ConfigError, match=r"^\S*configs/config.yaml: measure: 'warmup_request' was unexpected; allowed: "
                                          r".*warmup_requests$"):
        expand.load_run_config(configs)


def test_the_default_plan_has_one_launch_per_server_configuration_and_round(configs):
    _, nodes = expand.load_plan(configs)
    first_round = [l for l in nodes[0].launches if l.replicate == 1 and not l.once]
    assert [l.name for l in first_round] == ["llamacpp--nospec", "llamacpp--ngram-n8", "llamacpp--ngram-n16"]
    assert [l.spec_tokens for l in first_round] == [None, 8, 16]
    rounds = [l for l in nodes[0].launches if not l.once]
    assert sorted(l.configuration for l in rounds) == sorted([l.configuration for l in first_round] * 3)
    # and no-spec's one-off sets on a launch of their own, last (plan/expand.py one_offs_apart)
    assert [l.name for l in nodes[0].launches if l.once] == [nodes[0].launches[-1].name] == ["llamacpp--nospec--once"]


def test_wrong_type_names_file_and_field(configs):
    node = configs / "configs/nodes/local-cpu.yaml"
    edit(node, lambda d: d["hardware"]["gpu"].update(count="two"))
    with pytest.raises(ConfigError) as err:
        expand.load_plan(configs)
    assert str(err.value) == f"{node}: hardware.gpu.count: expected integer, got 'two'"


def test_unknown_key_is_an_error_with_the_allowed_keys(configs):
    node = configs / "configs/nodes/local-cpu.yaml"
    edit(node, lambda d: d.update(contxt_len=8192))
    with pytest.raises(ConfigError, match=r"local-cpu.yaml: \(top level\): 'contxt_len' was unexpected; allowed: .*context_len"):
        expand.load_plan(configs)


def test_unknown_stack_and_workload_names_fail_before_any_job(configs):
    node = configs / "configs/nodes/local-cpu.yaml"
    edit(node, lambda d: d["runs"][0].update(stack="llamacpp-typo"))
    with pytest.raises(ConfigError, match=r"runs\[0\]\.stack: unknown stack 'llamacpp-typo'; known: llamacpp"):
        expand.load_plan(configs)
    edit(node, lambda d: (d["runs"][0].update(stack="llamacpp"), d.update(workloads=["code", "poetry"])))
    with pytest.raises(ConfigError, match=r"workloads\[1\]: unknown workload 'poetry'"):
        expand.load_plan(configs)


def test_enum_errors_list_the_choices(configs):
    stack = configs / "configs/stacks/llamacpp.yaml"
    edit(stack, lambda d: d["variants"][0]["spec"].update(method="medusa"))
    with pytest.raises(ConfigError, match=r"llamacpp.yaml: variants\[0\]\.spec\.method: expected one of none, mtp, eagle"):
        expand.load_plan(configs)


def test_invalid_yaml_names_the_line(configs):
    (configs / "configs/workloads/code.yaml").write_text("prompts: [unclosed\n")
    with pytest.raises(ConfigError, match=r"code.yaml: line \d+: not valid YAML"):
        expand.load_plan(configs)


def test_impossible_tp_size_fails_before_any_job(configs):
    node = configs / "configs/nodes/rtx5090.yaml"
    edit(node, lambda d: d["runs"][1]["server_args"].update(tp_size=2))
    with pytest.raises(ConfigError, match=r"rtx5090.yaml: runs \(launch sglang-eagle--eagle-3-1-4\): "
                                          r"tp_size 2 needs 2 GPUs; hardware.gpu.count is 1"):
        expand.load_plan(configs, {"nodes": ["rtx5090"]})


def test_sglangs_tp_size_on_a_vllm_run_is_refused_naming_the_flag_vllm_takes(configs):
    """Issue 52: server_args.tp_size on a vLLM stack would reach vLLM as --tp-size, which it does not take."""
    node = configs / "configs/nodes/rtx5090.yaml"
    edit(node, lambda d: d["runs"][0]["server_args"].update(tp_size=4))
    with pytest.raises(ConfigError, match=r"rtx5090.yaml: runs\[0\] \(vllm-nvfp4-mtp--nospec\): server_args.tp_size becomes "
                                          r"--tp-size, which vLLM does not take; it takes --tensor-parallel-size "
                                          r"\(server_args.tensor_parallel_size;"):
        expand.load_plan(configs, {"nodes": ["rtx5090"]})


def test_cap_outside_the_gpus_range_fails_before_any_job(configs):
    node = configs / "configs/nodes/2x3090-nvlink.yaml"
    edit(node, lambda d: (d["hardware"]["gpu"].update(power_limit_w=[100, 350]), d.update(power_caps_w=[180, 400])))
    with pytest.raises(ConfigError, match=r"power_caps_w\[1\]: 400 W is outside the GPU's range 100-350 W"):
        expand.load_plan(configs, {"nodes": ["2x3090-nvlink"]})


def test_api_key_comes_from_the_environment_and_is_never_stored(configs, monkeypatch):
    from stackbench.measure import sequencer
    from stackbench.measure.client import StreamClient
    from stackbench.plan import launchspec

    edit(configs / "configs/nodes/rtx5090.yaml", lambda d: d.update(api_key_env="STACKBENCH_TEST_API_KEY"))
    monkeypatch.setenv("STACKBENCH_TEST_API_KEY", "sk-secret")
    cfg, nodes = expand.load_plan(configs, {"nodes": ["rtx5090"]})
    spec = launchspec.build(cfg, nodes[0], nodes[0].launches[0])
    assert "sk-secret" not in spec.to_json()  # the launch spec names the variable, never its value
    key = sequencer.api_key(spec.node)
    assert key == "sk-secret"
    client = StreamClient("http://127.0.0.1:1", "m", {}, 1, 1, api_key=key)
    assert client.headers["Authorization"] == "Bearer sk-secret"
    assert "sk-secret" not in json.dumps(client.body([{"role": "user", "content": "hi"}], 4))
    monkeypatch.delenv("STACKBENCH_TEST_API_KEY")
    with pytest.raises(ConfigError, match="rtx5090.yaml: api_key_env: STACKBENCH_TEST_API_KEY is not set"):
        sequencer.api_key(spec.node)


def test_two_runs_of_one_stack_need_labels_and_with_them_plan_apart(configs):
    """Issue 60: one stack at TP 4 and at TP 2 in one node file. Unlabelled, the second run's launches repeat the
    first's names (refused, naming runs[].label); labelled, each run's launches, rows' stack and cells stand apart."""
    node = configs / "configs/nodes/4xa6000-tp4.yaml"

    def at_tp_4_and_2(doc):
        run = doc["runs"][0]
        doc["runs"] = [{**run, "server_args": {**run["server_args"], "tp_size": tp}} for tp in (4, 2)]
    edit(node, at_tp_4_and_2)
    with pytest.raises(ConfigError, match=r"launch 'sglang-eagle--eagle-3-1-4' appears twice; .*each take a `label` "
                                          r"\(runs\[\]\.label\)"):
        expand.load_plan(configs, {"nodes": ["4xa6000-tp4"]})
    edit(node, lambda d: [run.update(label=f"tp{run['server_args']['tp_size']}") for run in d["runs"]])
    _, [plan] = expand.load_plan(configs, {"nodes": ["4xa6000-tp4"]})
    first = [l for l in plan.launches if l.replicate == 1 and not l.once]
    assert [(l.name, l.stack, l.tp) for l in first] == [("sglang-eagle+tp4--eagle-3-1-4", "sglang+tp4", 4),
                                                        ("sglang-eagle+tp2--eagle-3-1-4", "sglang+tp2", 2)]
    names = [l.name for l in plan.launches]
    assert len(names) == len(set(names))
    edit(node, lambda d: d["runs"][1].update(label="tp 2"))
    with pytest.raises(ConfigError, match=r"runs\[1\]\.label: .*does not match"):
        expand.load_plan(configs, {"nodes": ["4xa6000-tp4"]})
