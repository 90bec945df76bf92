"""Launch replicates (node `launches`, --config launches=N): fresh server processes of one configuration, planned
in interleaved rounds, each its own run folder and job; the replicate is in the plan, never a cell's fingerprint."""

import pytest

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
    assert set(later.workloads) == {"code-edit", "extraction", "code", "json", "prose"}  # no probes, accuracy, sweeps
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
