"""One table of speculative methods (config/speculative.py): the schemas offer exactly its methods, and every
engine adapter that maps methods to its engine's own names maps each of them."""

import re

import pytest
from paths import ROOT

from stackbench.config import load_schema
from stackbench.config.speculative import NO_SPEC, SPEC_METHODS, TAKES_DRAFT_MODEL
from stackbench.engines import llamacpp, sglang
from stackbench.plan import expand


def test_the_stack_schema_offers_the_tables_methods_in_its_order():
    schema = load_schema("stack")
    method = schema["properties"]["variants"]["items"]["properties"]["spec"]["properties"]["method"]
    assert method["enum"] == list(SPEC_METHODS)


def test_a_published_row_may_name_a_method_of_the_table_or_leave_it_unknown():
    assert load_schema("published")["$defs"]["fields"]["properties"]["spec_method"]["enum"] == [*SPEC_METHODS, "unknown"]


@pytest.mark.parametrize("names", [llamacpp.SPEC_TYPES, sglang.ALGORITHMS], ids=["llamacpp", "sglang"])
def test_each_adapter_names_every_method_for_its_engine(names):
    assert set(names) == set(SPEC_METHODS) - {NO_SPEC}


def test_a_method_that_needs_a_draft_model_also_takes_one():
    assert {m.name for m in SPEC_METHODS.values() if m.draft_model == "needs"} <= set(TAKES_DRAFT_MODEL)
    assert NO_SPEC not in TAKES_DRAFT_MODEL and "ngram" not in TAKES_DRAFT_MODEL


def test_a_launch_speculates_unless_it_runs_the_no_spec_baseline():
    cfg = expand.load_run_config(ROOT, {"nodes": ["local-cpu"], "stacks": "all"})
    launches = expand.load_node("local-cpu", cfg, ROOT).launches
    assert {l.variant for l in launches if not l.speculates} == {"nospec"}
    assert all(l.speculates == (l.spec_method != "none") for l in launches) and any(l.speculates for l in launches)


def test_the_baseline_is_named_in_one_place():
    """spec_method against NO_SPEC or Launch.speculates, never the literal, the engines' adapters included."""
    package = ROOT / "src/stackbench"
    literal = re.compile(r"""spec_method.*["']none["']""")
    found = [f"{path.relative_to(package)}:{number}" for path in sorted(package.rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1) if literal.search(line)]
    assert found == []
