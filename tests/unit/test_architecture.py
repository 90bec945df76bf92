"""The architecture shows itself: every engine difference lives in its adapter (src/stackbench/engines/),
so no code outside it names an engine, in the package or in the workflow; comments and docstrings may."""

import ast
import io
import re
import tokenize
from pathlib import Path

from paths import ROOT

from stackbench.engines import ADAPTERS

PACKAGE = ROOT / "src/stackbench"
WORKFLOW = [ROOT / "Snakefile", *sorted((ROOT / "workflow").rglob("*.smk"))]
ENGINE_KEY = re.compile(rf"^({'|'.join(ADAPTERS)})(\b|[-_])")
# In a rule an engine may stand anywhere in a string (a path, a shell command): as a word of its own.
ENGINE_WORD = re.compile(rf"(?<![A-Za-z0-9])({'|'.join(ADAPTERS)})(?![A-Za-z0-9])")


def docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def engine_names_in(path: Path, root: Path = PACKAGE) -> list[str]:
    """Engine-keyed string literals (an engine's name, or a name it prefixes: "sglang:...", "vllm-cpu"),
    docstrings aside and lines whose comment says why it names one."""
    text = path.read_text()
    tree = ast.parse(text)
    skip = docstrings(tree)
    explained = {token.start[0] for token in tokenize.generate_tokens(io.StringIO(text).readline) if token.type == tokenize.COMMENT}
    return [f"{path.relative_to(root)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
            and ENGINE_KEY.match(node.value) and node.lineno not in explained]


def test_no_engine_is_named_outside_its_adapter():
    # The rehearsal's stand-in included: it speaks each engine's formats through that engine's module.
    outside = [p for p in PACKAGE.rglob("*.py") if "engines" not in p.relative_to(PACKAGE).parts
               and "sglang_cpu_ops" not in p.parts]
    assert outside, "no modules found"
    assert [hit for path in sorted(outside) for hit in engine_names_in(path)] == []


def test_the_check_finds_an_engine_named_in_code(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""llamacpp in a docstring is fine."""\nSTACKS = {"sglang", "vllm-cpu"}\n'
                      'METRIC = "sglang:token_usage"\nDEFAULT = "vllm"  # a test double needs one\n')
    assert sorted(engine_names_in(module, tmp_path)) == ["m.py:2: 'sglang'", "m.py:2: 'vllm-cpu'", "m.py:3: 'sglang:token_usage'"]


def strings_in_rules(path: Path, root: Path = ROOT) -> list[str]:
    """Engine names in a Snakemake file's string literals (Snakemake's grammar is Python's tokens, not its
    syntax tree); a string that stands alone as a statement is a rule's or function's docstring."""
    found, previous = [], tokenize.NEWLINE
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type == tokenize.STRING and previous not in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT):
            if ENGINE_WORD.search(token.string):
                found.append(f"{path.relative_to(root)}:{token.start[0]}: {token.string}")
        if token.type not in (tokenize.COMMENT, tokenize.NL):
            previous = token.type
    return found


def test_no_engine_is_named_in_the_workflow():
    assert len(WORKFLOW) > 3, "no workflow files found"
    assert [hit for path in WORKFLOW for hit in strings_in_rules(path)] == []


def test_the_check_finds_an_engine_named_in_a_rule(tmp_path):
    rules = tmp_path / "x.smk"
    rules.write_text('rule x:\n    """llamacpp in a docstring is fine."""\n    input:\n        env=f"envs/llamacpp-targets.cmake",\n'
                     '    params:\n        tools={"smollm2-hf": "vllm-cpu"}.get("x"),\n')
    assert [hit.split(": ", 1)[0] for hit in strings_in_rules(rules, tmp_path)] == ["x.smk:4", "x.smk:6"]
