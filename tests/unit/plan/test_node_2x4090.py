"""configs/nodes/2x4090.yaml (issue 52), a node no seed post describes, as an owner writes it: it plans TP 2
where it asks for it, every sweep runs the stock limit first and then its per-GPU caps, and its board's limits
(host/boards.py) accept the caps it names and refuse one an RTX 4090 cannot set."""

from paths import ROOT

from stackbench.host import boards
from stackbench.plan import expand, launchspec

NODE = "2x4090"


def plan():
    cfg = expand.load_run_config(ROOT, {"nodes": [NODE]})
    return cfg, expand.load_node(NODE, cfg, ROOT)


def test_the_2x4090_node_plans_its_launches_at_tp_2_where_it_asks():
    _, node = plan()
    tp = {launch.name: launch.tp for launch in node.launches}
    assert tp == {"llamacpp--nospec": 1, "llamacpp--mtp-n2": 1, "llamacpp--mtp-n3": 1, "sglang-nospec--nospec": 2,
                  "sglang-eagle--eagle-2-1-3": 2, "sglang-eagle--eagle-3-1-4": 2, "vllm-nvfp4-mtp--nospec": 2,
                  "vllm-nvfp4-mtp--mtp-n2": 2, "vllm-nvfp4-mtp--mtp-n3": 2}


def test_every_sweep_runs_the_stock_limit_first_then_the_caps(monkeypatch):
    monkeypatch.chdir(ROOT)
    _, node = plan()
    for launch in node.launches:
        caps = list(dict.fromkeys(cell.power_cap_w for cell in launchspec.cells_of(node, launch)))
        assert caps == [None, 250, 300, 350, 400], launch.name  # None: the limit found at the start, 450 W stock


def test_the_nodes_caps_are_settable_on_an_rtx_4090_and_100_w_is_not():
    _, node = plan()
    model = node.gpu_model
    assert all(boards.cap_error(model, cap) is None for launch in node.launches for cap in launch.power_caps_w)
    assert boards.cap_error(model, 100.0).startswith("100 W is below the NVIDIA GeForce RTX 4090's lowest power limit 150 W")


def test_the_long_context_use_has_prompts_that_fit_the_nodes_context(monkeypatch):
    from stackbench.report import usecase

    monkeypatch.chdir(ROOT)
    _, node = plan()
    ladder = {cell.ladder_tokens for launch in node.launches for cell in launchspec.cells_of(node, launch)
              if cell.workload.name in usecase.USES[usecase.LONG] and cell.ladder_tokens}
    # report/usecase.py judges long context at prompts of at least 8192 tokens; the ones that fit with the output
    assert max(n for n in ladder if n + 128 <= 65536) >= 8192
