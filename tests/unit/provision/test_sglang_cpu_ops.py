"""The import-only sgl_kernel stand-in that lets SGLang's CPU engine start here
(src/stackbench/provision/sglang_cpu_ops): it provides exactly the names SGLang's CPU engine imports at start-up,
each of them refuses to run, and any other name fails at import with the stand-in's path."""

import ast
import importlib.util
import sys
from pathlib import Path

import pytest
from paths import ROOT

STAND_IN = ROOT / "src/stackbench/provision/sglang_cpu_ops/sgl_kernel/__init__.py"


def load_stand_in():
    spec = importlib.util.spec_from_file_location("sgl_kernel", STAND_IN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def stand_in():
    return load_stand_in()


def cpu_startup_imports(package: Path) -> set[str]:
    """Names SGLang's modules take from `sgl_kernel` itself in a module-level `if _is_cpu:` (or
    `elif _is_cpu:`) block: the imports that run when the CPU engine loads those modules."""
    names = set()
    for path in package.rglob("*.py"):
        source = path.read_bytes()
        if b"from sgl_kernel import" not in source:
            continue
        branches = [node for node in ast.parse(source).body if isinstance(node, ast.If)]
        while branches:
            branch = branches.pop()
            branches += [node for node in branch.orelse if isinstance(node, ast.If)]
            if ast.unparse(branch.test) == "_is_cpu":
                names |= {alias.name for stmt in branch.body if isinstance(stmt, ast.ImportFrom)
                          and stmt.module == "sgl_kernel" for alias in stmt.names}
    return names


@pytest.mark.integration  # builds the sglang-cpu environment through the workflow first (a no-op where it exists)
def test_provides_exactly_what_the_installed_sglang_imports_on_cpu(stand_in, sglang_ready):
    (sglang_source,) = (ROOT / ".envs/sglang-cpu/venv/lib").glob("python3*/site-packages/sglang")
    assert set(stand_in.STARTUP_IMPORTS) == cpu_startup_imports(sglang_source)


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
