"""Launch replicates (node `launches`, --config launches=N): fresh server processes of one configuration, planned
in interleaved rounds, each its own run folder and job; the replicate is in the plan, never a cell's fingerprint.
Issue 60: the long-context use's deciding cells (a ladder's longest prompt that fits, long-prefill) repeat in every
round where a speculative launch can be judged on them, unless the node keeps them to its first round."""

import pytest
from test_nodes import fill_in_model_paths

from stackbench import cli
from stackbench.plan import expand, launchspec


@pytest.fixture
def local_cpu(repo_copy):
    def plan(**given):
        _, (node,) = expand.load_plan(repo_copy, {"nodes": ["local-cpu"], **given})
        return node

    return plan


def test_one_launch_each_named_as_before_the_replicates(local_cpu):
    node = local_cpu(launches=1)
    assert [l.name for l in node.launches] == ["llamacpp--nospec", "llamacpp--ngram-n8", "llamacpp--ngram-n16",
                                               "llamacpp--nospec--once"]
    assert {l.replicate for l in node.launches} == {1}
    assert max(l.replicate for l in local_cpu().launches) == 3  # the default's own count (configs/nodes/local-cpu.yaml)


def test_rounds_interleave_and_later_rounds_repeat_only_the_judged_workloads(local_cpu):
    node = local_cpu(launches=3)
    rounds = [l.replicate for l in node.launches if not l.once]
    assert rounds == [1, 1, 1, 2, 2, 2, 3, 3, 3]  # round k's replicates all before any of round k+1
    assert [l.name for l in node.launches[:3]] == ["llamacpp--nospec", "llamacpp--ngram-n8", "llamacpp--ngram-n16"]
    assert {l.name for l in node.launches[3:6]} == {"llamacpp--nospec--r2", "llamacpp--ngram-n8--r2", "llamacpp--ngram-n16--r2"}
    first, later = node.launches[0], next(l for l in node.launches if l.name == "llamacpp--nospec--r2")
    assert set(later.workloads) == {"code-edit", "extraction", "code", "sql", "prose"}  # no probes, accuracy, sweeps
    assert "probes" in first.workloads and not {"long-prefill", "ladder-cpu", "code-load"} & set(first.workloads)
    # the one-off sets run after the rounds What to run looks at, on a no-spec launch of their own
    (once,) = (l for l in node.launches if l.once)
    assert node.launches[-1] == once and once.replicate == 1 and once.configuration == first.configuration
    assert set(once.workloads) == {"long-prefill", "multi-turn", "code-load", "ladder-cpu"}


def test_one_off_sets_stay_on_their_first_launch_without_a_sequence_or_where_they_are_the_smaller_part(local_cpu, repo_copy):
    node = local_cpu(stacks="all")
    # vLLM's lone long-prefill cell is not worth a server start of its own
    assert [l.name for l in node.launches if l.once] == ["llamacpp--nospec--once"]
    assert "long-prefill" in next(l for l in node.launches if l.name == "vllm-cpu--nospec").workloads
    path = repo_copy / "configs/nodes/local-cpu.yaml"
    path.write_text(path.read_text().replace("decide: {most_launches: 6, budget_minutes: 13}", "decide: {most_launches: null}"))
    assert not any(l.once for l in local_cpu().launches)  # no look to wait for: nothing moves
    assert {"long-prefill", "code-load"} <= set(local_cpu().launches[0].workloads)


def test_the_seed_shuffles_within_a_round_never_across(local_cpu):
    plans = [local_cpu(launches=3, measure={"order_seed": seed}).launches for seed in range(8)]
    assert len({tuple(l.name for l in launches) for launches in plans}) > 1
    assert all([l.replicate for l in launches if not l.once] == [1, 1, 1, 2, 2, 2, 3, 3, 3] for launches in plans)


def test_a_replicate_shares_its_configurations_fingerprints(repo_copy):
    cfg, (node,) = expand.load_plan(repo_copy, {"nodes": ["local-cpu"], "launches": 2})
    one, two = (launchspec.build(cfg, node, l) for l in node.launches if l.configuration == "llamacpp--ngram-n8")
    assert (one.launch.name, two.launch.name) == ("llamacpp--ngram-n8", "llamacpp--ngram-n8--r2")
    assert one.server_fingerprint == two.server_fingerprint
    by_key = {c.key: one.cell_fingerprint(c) for c in one.cells}
    assert two.cells and all(two.cell_fingerprint(c) == by_key[c.key] for c in two.cells)


def h100_node(repo_copy, monkeypatch, edit=lambda text: text):
    """The node `stackbench init-node h100 --gpu "NVIDIA H100 80GB HBM3" --count 4` writes (issue 60), its model
    paths set and `edit` applied to its text, as planned."""
    monkeypatch.chdir(repo_copy)
    assert cli.main(["init-node", "h100", "--gpu", "NVIDIA H100 80GB HBM3", "--count", "4"]) == 0
    path = repo_copy / "configs/nodes/h100.yaml"
    fill_in_model_paths(path, {"<path to the model's GGUF file>": "/models/m.gguf",
                               "<path to the model's Hugging Face folder>": "/models/m-hf"})
    path.write_text(edit(path.read_text()))
    _, (node,) = expand.load_plan(repo_copy, {"nodes": ["h100"]})
    return node


def long_context_cells(node, launch) -> tuple[set, bool]:
    """The context ladder's lengths a launch runs, and whether it runs long-prefill."""
    cells = launchspec.cells_of(node, launch)
    return ({c.ladder_tokens for c in cells if c.workload.name == "context-ladder"},
            any(c.workload.name == "long-prefill" for c in cells))


LADDER = {1024, 8192, 32768, 65536, 126976}


def test_long_context_is_decided_on_every_round_at_the_ladders_top_and_long_prefill(repo_copy, monkeypatch):
    node = h100_node(repo_copy, monkeypatch)
    for launch in node.launches + node.later_rounds:
        ladder, prefill = long_context_cells(node, launch)
        if launch.stack_config == "llamacpp":  # no speculative launch to judge against: its long context stays a one-off
            assert (ladder, prefill) == ((LADDER, True) if launch.once else (set(), False)), launch.name
        elif launch.replicate > 1:  # every later round: the use's deciding cells, as many launches as chat and coding
            assert (ladder, prefill) == ({126976}, True), launch.name
        else:  # the first round keeps the ladder's one-off lengths: fewer cells than its judged ones, no start of their own
            assert (ladder, prefill) == (LADDER, True) and not launch.once, launch.name


def test_where_the_one_offs_run_apart_the_first_round_keeps_the_deciding_cells_and_the_once_launch_the_rest(repo_copy,
                                                                                                       monkeypatch):
    node = h100_node(repo_copy, monkeypatch, lambda text: text.replace("concurrency: [1, 8, 32]", "concurrency: [1]"))
    eagle = [l for l in node.launches if l.stack_config == "sglang-eagle"]
    assert [l.name for l in eagle] == ["sglang-eagle--eagle-3-1-4", "sglang-eagle--eagle-3-1-4--r2",
                                       "sglang-eagle--eagle-3-1-4--r3", "sglang-eagle--eagle-3-1-4--once"]
    assert [long_context_cells(node, l) for l in eagle] == [({126976}, True)] * 3 + [(LADDER - {126976}, False)]
    assert "multi-turn" in eagle[-1].workloads and "multi-turn" not in eagle[0].workloads


def test_a_node_may_keep_long_context_to_its_first_round_and_its_cells_are_then_one_offs(repo_copy, monkeypatch):
    node = h100_node(repo_copy, monkeypatch, lambda text: text + "long_context_rounds: first\n")
    assert all(long_context_cells(node, l) == (set(), False) for l in node.launches + node.later_rounds if l.replicate > 1)
    # as before issue 60: the whole ladder and long-prefill a one-off, after the rounds
    assert long_context_cells(node, next(l for l in node.launches if l.name == "sglang-eagle--eagle-3-1-4--once")) == (LADDER, True)


def test_commands_warns_where_a_speculative_run_sweeps_caps_its_no_spec_run_does_not(repo_copy, monkeypatch, capsys):
    unpaired = "    power_caps_w: []\n  # Seed 000 section 6 and seed 002"
    node = h100_node(repo_copy, monkeypatch, lambda text: text.replace("\n  # Seed 000 section 6 and seed 002", "\n" + unpaired, 1))
    assert {l.stack_config: l.power_caps_w for l in node.launches}["sglang-nospec"] == ()
    assert cli.main(["commands", "--node", "h100"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: node h100: sglang-eagle--eagle-3-1-4 sweeps 390/470/540/620 W, which the no-spec run "
                        "sglang-nospec does not: those capped cells have no no-spec at their cap to pair with and are not "
                        "judged; give the no-spec run sglang-nospec the same power_caps_w in configs/nodes/h100.yaml "
                        "(docs/what-to-run.md)"]

