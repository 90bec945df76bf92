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


def test_chunks_are_tokens_only_without_speculation_and_at_a_stream_interval_of_one():
    from launch_helpers import make_launch

    from stackbench.engines.base import streams_token_per_chunk

    sglang, llamacpp = ADAPTERS["sglang"], ADAPTERS["llamacpp"]
    assert streams_token_per_chunk(sglang, make_launch("sglang"))
    assert not streams_token_per_chunk(sglang, make_launch("sglang", server_args={"stream_interval": 4}))
    assert not streams_token_per_chunk(sglang, make_launch("sglang", spec_method="eagle"))
    assert streams_token_per_chunk(llamacpp, make_launch("llamacpp", server_args={"stream_interval": 4}))  # no such flag
