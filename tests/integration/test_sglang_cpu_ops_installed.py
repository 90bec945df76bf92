"""The import-only sgl_kernel stand-in (src/stackbench/provision/sglang_cpu_ops) against the installed SGLang:
it provides exactly the names SGLang's CPU engine imports at start-up."""

import ast
from pathlib import Path

import pytest
from paths import ROOT
from sgl_kernel_stand_in import load_stand_in


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
