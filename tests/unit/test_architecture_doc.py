"""docs/architecture.md shows the house as built: its layers are pyproject's import contract, and its stage table
names every module of every stage (a module added or removed without the doc fails here), the engines' modules by
their registry."""

import re
import tomllib

from paths import ROOT

DOC = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
PACKAGE = ROOT / "src/stackbench"


def stage_rows() -> dict[str, str]:
    """Stage folder -> its modules column, from the table whose rows start with a stage in backticks."""
    return {m[1]: m[2] for m in re.finditer(r"^\| `(\w+)/` \| ([^|]+) \|", DOC, re.M)}


def test_the_layers_drawn_are_the_import_contracts():
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    drawn = re.search(r"```\ncli\n(.*?)```", DOC, re.S)[0].splitlines()[1:-1]
    layers = [line[:28].strip() for line in drawn if line[:28].strip()]
    assert layers == [layer.replace("stackbench.", "") for layer in contract["layers"]]


def engine_modules() -> set[str]:
    """The registered engines' modules: the engines row names the registry, not each engine."""
    from stackbench.engines import ADAPTERS

    return {type(adapter).__module__.rsplit(".", 1)[1] for adapter in ADAPTERS.values()}


def test_every_module_of_every_stage_is_named_in_its_row():
    rows = stage_rows()
    stages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    assert sorted(rows) == stages
    missing = []
    for stage, named in rows.items():
        listed = set(re.findall(r"`([\w/]+)`", named)) | (engine_modules() if stage == "engines" else set())
        modules = {p.stem for p in (PACKAGE / stage).glob("*.py") if p.stem != "__init__"}
        packages = {f"{p.name}/" for p in (PACKAGE / stage).iterdir() if p.is_dir() and p.name != "__pycache__"}
        missing += [f"{stage}/{m}" for m in sorted(modules | packages) if m not in listed]
        missing += [f"{stage}/{m} (named, not there)" for m in sorted(listed - modules - packages - {"__init__"})]
    assert missing == []
