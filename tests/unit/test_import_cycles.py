"""No import cycle hides behind a lazy import: the package's modules, with every import counted wherever it stands
(a function's body too, which import-linter's layers allow inside one layer), import one way only."""

import ast
from pathlib import Path

from paths import ROOT

PACKAGE = ROOT / "src/stackbench"


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, name: str, modules: set[str]) -> set[str]:
    """The package's modules `path` imports anywhere in it: `from a.b import c` is a.b.c where that is a module,
    else a.b (a package's import of its own parent, which Python makes implicitly, is not counted)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], *filter(None, [base])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_cycles(root: Path) -> list[list[str]]:
    """Each group of modules that reach one another through their imports (Tarjan's strongly connected components)."""
    paths = {module_name(path, root): path for path in root.rglob("*.py")}
    graph = {name: imports_of(path, name, set(paths)) for name, path in paths.items()}
    index, low, stack, cycles = {}, {}, [], []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = stack[stack.index(node):]
            del stack[stack.index(node):]
            if len(group) > 1:
                cycles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_modules_of_the_package_import_each_other():
    assert len(list(PACKAGE.rglob("*.py"))) > 90, "no modules found"
    assert import_cycles(PACKAGE) == []


def test_the_check_finds_a_cycle_behind_a_function_level_import(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("def f():\n    from pkg.sub import c\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "c.py").write_text("from .. import d\n")  # pkg.sub.c -> pkg.d
    (package / "d.py").write_text("import pkg\n")  # pkg.d -> pkg
    (package / "e.py").write_text("from pkg.sub import c\n")  # one way only: no cycle
    assert import_cycles(package) == [["pkg", "pkg.d", "pkg.sub.c"]]
