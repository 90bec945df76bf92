"""The architecture shows itself: every engine difference lives in its adapter (src/stackbench/engines/),
so no code outside it names an engine; comments and docstrings may."""

import ast
import re
from pathlib import Path

from paths import ROOT

from stackbench.engines import ADAPTERS

PACKAGE = ROOT / "src/stackbench"
ENGINE_KEY = re.compile(rf"^({'|'.join(ADAPTERS)})(\b|[-_])")


def docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def engine_names_in(path: Path, root: Path = PACKAGE) -> list[str]:
    tree = ast.parse(path.read_text())
    skip = docstrings(tree)
    return [f"{path.relative_to(root)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
            and ENGINE_KEY.match(node.value)]


def test_no_engine_is_named_outside_its_adapter():
    # The rehearsal's stand-in impersonates each engine (its log lines, routes and counters by engine), so it
    # names them: a test double of the engines, not an engine difference outside an adapter.
    outside = [p for p in PACKAGE.rglob("*.py") if "engines" not in p.relative_to(PACKAGE).parts
               and "sglang_cpu_ops" not in p.parts and p.relative_to(PACKAGE) != Path("rehearsal/standin.py")]
    assert outside, "no modules found"
    assert [hit for path in sorted(outside) for hit in engine_names_in(path)] == []


def test_the_check_finds_an_engine_named_in_code(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""llamacpp in a docstring is fine."""\nSTACKS = {"sglang", "vllm-cpu"}\n')
    assert sorted(engine_names_in(module, tmp_path)) == ["m.py:2: 'sglang'", "m.py:2: 'vllm-cpu'"]
