"""The engine seam (engines/base.py Adapter): an engine subclasses the base, registers itself and overrides only
what differs from the defaults, keeping each member's signature."""

import inspect

import pytest

from stackbench.engines import ADAPTERS, FORMATS
from stackbench.engines.base import Adapter, register

MEMBERS = sorted({name for name in vars(Adapter) if not name.startswith("_")} | set(Adapter.__annotations__))


def test_the_base_has_members_to_check():
    assert {"engine_flags", "native_command", "engine", "concurrent_slots", "parse_log", "compile_s", "formats"} <= set(MEMBERS)


@pytest.mark.parametrize("engine", sorted(ADAPTERS))
def test_an_engine_is_a_registered_subclass_whose_overrides_keep_the_declared_parameters(engine):
    adapter = ADAPTERS[engine]
    assert isinstance(adapter, Adapter) and adapter.engine == engine and adapter.engine_label
    for name in MEMBERS:
        declared = getattr(Adapter, name, None)
        if callable(declared) and not isinstance(declared, type):
            assert inspect.signature(getattr(type(adapter), name)).parameters.keys() == \
                inspect.signature(declared).parameters.keys(), f"{engine}.{name}"


@pytest.mark.parametrize("engine", sorted(ADAPTERS))
def test_no_engine_restates_a_default(engine):
    """An engine's class (and the shared bases between it and Adapter) sets a plain value only where it differs
    from the value it would inherit: a restated default hides which facts are the engine's own."""
    for cls in type(ADAPTERS[engine]).__mro__[:-2]:  # up to, not including, Adapter and object
        parent = cls.__mro__[1]
        for name, value in vars(cls).items():
            if name.startswith("_") or callable(value) or name == "formats":
                continue
            if hasattr(parent, name):
                assert getattr(parent, name) != value, f"{cls.__name__}.{name} restates its default {value!r}"


def test_a_second_engine_under_a_taken_name_is_refused():
    class Again(Adapter):
        engine, engine_label = "vllm", "vLLM again"

    with pytest.raises(ValueError, match="two engines named 'vllm'"):
        register(Again)


def test_every_rehearsed_engine_writes_its_formats_and_names_the_parser_that_checks_its_flags():
    assert set(FORMATS) <= set(ADAPTERS)
    for engine, formats in FORMATS.items():
        assert formats is ADAPTERS[engine].formats
        assert isinstance(formats.flag_parser, tuple | str)


def test_chunks_are_tokens_only_without_speculation_and_at_a_stream_interval_of_one():
    from launch_helpers import make_launch

    from stackbench.engines.base import streams_token_per_chunk

    sglang, llamacpp = ADAPTERS["sglang"], ADAPTERS["llamacpp"]
    assert streams_token_per_chunk(sglang, make_launch("sglang"))
    assert not streams_token_per_chunk(sglang, make_launch("sglang", server_args={"stream_interval": 4}))
    assert not streams_token_per_chunk(sglang, make_launch("sglang", spec_method="eagle"))
    assert streams_token_per_chunk(llamacpp, make_launch("llamacpp", server_args={"stream_interval": 4}))  # no such flag
