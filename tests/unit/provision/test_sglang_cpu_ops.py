"""The import-only sgl_kernel stand-in that lets SGLang's CPU engine start here
(src/stackbench/provision/sglang_cpu_ops): each name it provides refuses to run, and any other name fails at
import with the stand-in's path. That it provides exactly what the installed SGLang imports is
tests/integration/test_sglang_cpu_ops_installed.py."""

import sys

import pytest
from sgl_kernel_stand_in import load_stand_in


@pytest.fixture(scope="module")
def stand_in():
    return load_stand_in()


def test_every_provided_op_refuses_to_run_and_names_itself(stand_in):
    for name in stand_in.STARTUP_IMPORTS:
        with pytest.raises(NotImplementedError, match=f"sgl_kernel.{name} was called"):
            getattr(stand_in, name)([0], [0])


def test_any_other_op_is_missing_with_the_stand_ins_path(stand_in, monkeypatch):
    with pytest.raises(AttributeError, match="decode_attention_cpu: not provided by .*sglang_cpu_ops"):
        _ = stand_in.decode_attention_cpu
    monkeypatch.setitem(sys.modules, "sgl_kernel", stand_in)
    with pytest.raises(ImportError, match="extend_attention_cpu"):
        from sgl_kernel import extend_attention_cpu  # noqa: F401


def test_it_announces_itself_for_the_server_log(capsys):
    load_stand_in()
    assert capsys.readouterr().err.startswith("sgl_kernel stand-in: ")
