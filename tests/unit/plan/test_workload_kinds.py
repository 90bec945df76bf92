"""The workload-kind registry (config/kinds): one module per kind, the schema's enum and the table agree,
and the plan and the runner take each kind's behaviour from it."""

from __future__ import annotations

import pytest

from stackbench.config import load_schema
from stackbench.config.kinds import KINDS
from stackbench.config.kinds.base import WorkloadKind
from stackbench.config.model import Workload
from stackbench.measure import workloads


def _workload(kind: str, **extra) -> Workload:
    return Workload(name="w", kind=kind, prompts=("a b c", "d e f"), output_tokens=8, prompt_tokens=None,
                    turns=2, salt=False, concurrency=(1,), **extra)


def test_registry_holds_the_schema_kinds_in_its_order():
    assert list(KINDS) == load_schema("workload")["properties"]["kind"]["enum"]
    assert all(isinstance(k, WorkloadKind) and KINDS[name] is k for name, k in KINDS.items())


def test_each_own_field_belongs_to_one_kind_and_is_a_schema_field():
    owned = [k.own_field for k in KINDS.values() if k.own_field]
    assert {"probes", "ladder"} <= set(owned) <= set(load_schema("workload")["properties"])
    assert len(owned) == len(set(owned))


def test_only_probe_runs_the_probes_accuracy_the_accuracy_set_and_divergence_its_text_uncapped():
    assert [name for name, k in KINDS.items() if k.runs == "probes"] == ["probe"]
    assert [name for name, k in KINDS.items() if k.runs == "accuracy"] == ["accuracy"]
    assert [name for name, k in KINDS.items() if k.runs == "divergence"] == ["divergence"]
    assert [name for name, k in KINDS.items() if not k.every_cap] == ["accuracy", "divergence"]


def test_ladder_points_are_its_lengths_and_other_kinds_run_one_point():
    assert KINDS["ladder"].points(_workload("ladder", ladder=(512, 2048))) == (512, 2048)
    assert KINDS["single"].points(_workload("single")) == (None,)


@pytest.mark.parametrize(("kind", "turns"), [("single", 1), ("long-prefill", 1), ("multi-turn", 2)])
def test_each_kind_builds_its_turns(kind, turns):
    built = [turns for _, turns, _ in workloads.conversations(_workload(kind), 3, 0)]
    assert [len(t) for t in built] == [turns] * 3
    if kind == "long-prefill":
        assert all(len(t[0]) > 1024 for t in built)  # repeated to its default length
    if kind == "single":
        assert sorted(t[0] for t in built[:2]) == ["a b c", "d e f"]  # every prompt drawn once before any again
