"""Every adapter implements every member of the engine interface (stacks/base.py Adapter), read from the
Protocol itself: a member added there fails here for each adapter that lacks it."""

import inspect

import pytest

from stackbench.engines import ADAPTERS
from stackbench.engines.base import Adapter

MEMBERS = sorted({name for name in vars(Adapter) if not name.startswith("_")} | set(Adapter.__annotations__))


def test_the_protocol_has_members_to_check():
    assert {"engine_flags", "native_command", "engine", "concurrent_slots", "parse_log"} <= set(MEMBERS)


@pytest.mark.parametrize("engine", sorted(ADAPTERS))
def test_an_adapter_implements_each_member_with_the_declared_parameters(engine):
    adapter = ADAPTERS[engine]
    for name in MEMBERS:
        assert hasattr(adapter, name), f"{engine} lacks {name}"
        declared = getattr(Adapter, name, None)
        if callable(declared):
            assert inspect.signature(getattr(type(adapter), name)).parameters.keys() == \
                inspect.signature(declared).parameters.keys(), f"{engine}.{name}"
