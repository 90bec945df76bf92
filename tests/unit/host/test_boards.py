"""A cap a board cannot set is refused at planning, in one line naming what to change (host/boards.py)."""

import pytest

from stackbench.host import boards

RTX_4090 = "NVIDIA GeForce RTX 4090"


def test_100_watts_on_an_rtx_4090_is_below_its_lowest_limit():
    why = boards.cap_error(RTX_4090, 100.0)
    assert why.startswith("100 W is below the NVIDIA GeForce RTX 4090's lowest power limit 150 W")
    assert "hardware.gpu.power_limit_w" in why and "\n" not in why


@pytest.mark.parametrize("cap", [150.0, 250.0, 450.0, 600.0])
def test_a_4090_accepts_caps_up_to_the_600_watts_many_boards_allow(cap):
    assert boards.cap_error(RTX_4090, cap) is None


def test_above_the_highest_known_limit_is_refused_and_an_unknown_highest_is_not_guessed():
    assert "above the NVIDIA RTX A6000's highest power limit 300 W" in boards.cap_error("NVIDIA RTX A6000", 350.0)
    assert boards.cap_error("NVIDIA GeForce RTX 3090", 450.0) is None  # partner boards differ: the GPU decides
    assert boards.cap_error("NVIDIA GeForce RTX 3090", 90.0) is not None
    assert boards.cap_error("Some Future GPU", 5.0) is None


def test_the_nodes_stated_range_wins_over_the_models():
    assert boards.cap_error(RTX_4090, 100.0, [100.0, 450.0]) is None
    assert boards.cap_error(RTX_4090, 500.0, [150.0, 450.0]) == \
        "500 W is outside the GPU's range 150-450 W (hardware.gpu.power_limit_w)"


def test_every_listed_range_holds_the_stock_limit():
    for model, (low, high) in boards.LIMITS_W.items():
        stock = boards.BOARD_POWER_W[model]
        assert (low or 0) < stock <= (high or stock)


# Issue 67: a board no table knows is planned from its node file alone, or refused in one line naming the field.
PRO_4000 = "NVIDIA RTX PRO 4000 Blackwell"
STATED = {"model": PRO_4000, "count": 2, "memory_gib": 24, "bandwidth_gbs": 672, "compute_capability": "12.0",
          "board_power_w": 140, "power_limit_w": [100, 140]}


def test_a_board_no_table_knows_takes_every_fact_from_its_node_file():
    facts = boards.gpu_facts(STATED, "configs/nodes/pro4000.yaml")
    assert facts["board_power_w"] == 140 and facts["power_limit_w"] == (100.0, 140.0)
    assert (facts["memory_gib"], facts["bandwidth_gbs"], facts["compute_capability"]) == (24, 672, "12.0")
    assert facts["tensor_tflops"] is None  # optional: the rehearsal prices prefill as a multiple of decode


def test_the_node_files_facts_win_over_the_tables():
    facts = boards.gpu_facts({"model": RTX_4090, "count": 2, "board_power_w": 400, "power_limit_w": [150, 450],
                              "tensor_tflops": {"bf16": 100.0}}, "x.yaml")
    assert facts["board_power_w"] == 400 and facts["power_limit_w"] == (150.0, 450.0)
    assert facts["tensor_tflops"] == {"bf16": 100.0} and facts["bandwidth_gbs"] == 1008  # the rest from the tables


@pytest.mark.parametrize("missing", boards.NEEDED)
def test_a_missing_fact_of_an_unknown_board_is_refused_in_one_line_naming_it(missing):
    from stackbench.config import ConfigError

    for left in (None, boards.placeholder(missing)):  # unstated, or init-node's placeholder still there
        with pytest.raises(ConfigError) as refused:
            boards.gpu_facts({**STATED, missing: left}, "configs/nodes/pro4000.yaml")
        line = str(refused.value)
        assert line.startswith(f"configs/nodes/pro4000.yaml: hardware.gpu.{missing} is needed for '{PRO_4000}' "
                               "(no table knows this board): ") and boards.WHERE_TO_READ[missing] in line
        assert "\n" not in line


def test_every_new_board_has_the_facts_a_plan_reads_or_asks_for_its_range():
    added = ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
             "NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA H200", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB",
             "NVIDIA A100 80GB PCIe", "NVIDIA L40S", "NVIDIA B200"]
    for model in added:
        assert model in boards.SPECS and model in boards.BOARD_POWER_W and model in boards.INTERCONNECT
    assert boards.BOARD_POWER_W[added[1]] == 300 and boards.BOARD_POWER_W[added[0]] == 600
    assert boards.resolve("RTX PRO 6000 Blackwell Max-Q") == added[1]
    from stackbench.config import ConfigError

    with pytest.raises(ConfigError, match="hardware.gpu.power_limit_w is needed for 'NVIDIA H200' .*does not list it"):
        boards.gpu_facts({"model": "NVIDIA H200", "count": 8}, "h200.yaml")


def test_init_node_on_an_unknown_board_writes_each_fact_to_fill_in_and_the_plan_names_the_first(repo_copy, monkeypatch,
                                                                                               capsys):
    import yaml

    from stackbench import cli

    monkeypatch.chdir(repo_copy)
    assert cli.main(["init-node", "pro4000", "--gpu", PRO_4000, "--count", "2"]) == 0
    text = (repo_copy / "configs/nodes/pro4000.yaml").read_text()
    gpu = yaml.safe_load(text)["hardware"]["gpu"]
    assert gpu["model"] == PRO_4000 and all(gpu[name] == boards.placeholder(name) for name in boards.NEEDED)
    assert "tensor_tflops (optional)" in text and "No table here knows the NVIDIA RTX PRO 4000 Blackwell" in text
    for name in ("<path to the model's GGUF file>", "<path to the model's Hugging Face folder>"):
        text = text.replace(name, "/models/m")
    (repo_copy / "configs/nodes/pro4000.yaml").write_text(text)
    capsys.readouterr()
    assert cli.main(["preflight", "--node", "pro4000", "--simulated"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"config error: configs/nodes/pro4000.yaml: hardware.gpu.memory_gib is needed for '{PRO_4000}' "
                   f"(no table knows this board): {boards.WHERE_TO_READ['memory_gib']}"]  # the first, in the file's order


def test_the_starters_context_follows_the_kv_memory_the_gpus_hold():
    """Issue 67: init-node wrote a 131,072 context whatever the memory allowed. Now the context is the ladder's
    longest point (with its reply) whose one stream's KV fits beside the starter model's weights."""
    from stackbench.provision import nodeinit

    assert nodeinit.gpu_context_len(16, 1) == 12_288  # 17K tokens of KV: the ladder's 8,192 point and its reply
    assert nodeinit.gpu_context_len(96, 2) == 131_072  # the ladder's top, 126,976 + 128, fits many times over
    assert nodeinit.kv_tokens_held(16, 1) < nodeinit.kv_tokens_held(24, 1) < nodeinit.kv_tokens_held(24, 2)
    assert nodeinit.gpu_context_len(boards.placeholder("memory_gib"), 2) == nodeinit.GPU_CONTEXT_LEN  # not known yet


@pytest.mark.parametrize("model", list(boards.SPECS))
def test_every_known_boards_starter_plans_or_asks_only_for_what_no_public_sheet_gives(model):
    from stackbench.config import ConfigError
    from stackbench.provision import nodeinit

    gpu = nodeinit.describe_gpus(model, 2)["hardware"]["gpu"]
    try:
        facts = boards.gpu_facts(gpu, "starter.yaml")
    except ConfigError as refused:
        assert "hardware.gpu.power_limit_w is needed" in str(refused) and boards.limits_w(model)[0] is None
    else:
        assert facts["board_power_w"] == boards.BOARD_POWER_W[model] and facts["power_limit_w"][0] is not None
