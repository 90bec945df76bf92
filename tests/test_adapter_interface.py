"""Every adapter implements every member of the interface the run loop uses (stacks/base.py Adapter)."""

import inspect

import pytest

from stackbench.stacks import ADAPTERS
from stackbench.stacks.base import Adapter

MEMBERS = ("engine", "engine_label", "health_path", "version_path", "accept_len_basis", "image_entrypoint",
           "image_version_command", "argv", "request_extras", "parse_log", "parse_version", "facts_from_metrics",
           "spec_counters", "server_timings", "version_from_output", "self_report")


def test_the_protocol_declares_every_member_the_run_loop_uses():
    declared = {name for name in dir(Adapter) if not name.startswith("_")} | set(Adapter.__annotations__)
    assert declared == set(MEMBERS)


@pytest.mark.parametrize("engine", ["llamacpp", "vllm", "sglang"])
def test_an_adapter_implements_each_member_with_the_declared_parameters(engine):
    adapter = ADAPTERS[engine]
    for name in MEMBERS:
        assert hasattr(adapter, name), f"{engine} lacks {name}"
        declared = getattr(Adapter, name, None)
        if callable(declared):
            assert inspect.signature(getattr(type(adapter), name)).parameters.keys() == \
                inspect.signature(declared).parameters.keys(), f"{engine}.{name}"
