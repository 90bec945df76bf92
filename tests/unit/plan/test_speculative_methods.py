"""One table of speculative methods (config/speculative.py): the schemas offer exactly its methods, and every
engine adapter that maps methods to its engine's own names maps each of them."""

import pytest

from stackbench.config import load_schema
from stackbench.config.speculative import NONE, SPEC_METHODS, TAKES_DRAFT_MODEL
from stackbench.engines import llamacpp, sglang


def test_the_stack_schema_offers_the_tables_methods_in_its_order():
    schema = load_schema("stack")
    method = schema["properties"]["variants"]["items"]["properties"]["spec"]["properties"]["method"]
    assert method["enum"] == list(SPEC_METHODS)


def test_a_published_row_may_name_a_method_of_the_table_or_leave_it_unknown():
    assert load_schema("published")["$defs"]["fields"]["properties"]["spec_method"]["enum"] == [*SPEC_METHODS, "unknown"]


@pytest.mark.parametrize("names", [llamacpp.SPEC_TYPES, sglang.ALGORITHMS], ids=["llamacpp", "sglang"])
def test_each_adapter_names_every_method_for_its_engine(names):
    assert set(names) == set(SPEC_METHODS) - {NONE}


def test_a_method_that_needs_a_draft_model_also_takes_one():
    assert {m.name for m in SPEC_METHODS.values() if m.draft_model == "needs"} <= set(TAKES_DRAFT_MODEL)
    assert NONE not in TAKES_DRAFT_MODEL and "ngram" not in TAKES_DRAFT_MODEL
