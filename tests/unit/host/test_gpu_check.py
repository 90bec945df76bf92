"""scripts/gpu-check.sh, the GPU check README offers, runs end to end against the project's NVML test double
(rehearsal/simgpu.py NvmlDouble, two RTX 3090s drawing a fixed 250.5 W each) put in place of pynvml, with a
stub nvidia-smi so its driver check passes: it lists the GPUs, honours CUDA_VISIBLE_DEVICES, and reports the
energy the double's counters say (its known draw x the window)."""

import os
import re
import subprocess
import sys

import pytest
from paths import ROOT

PYNVML_DOUBLE = """from stackbench.rehearsal.simgpu import NvmlDouble
_double = NvmlDouble(count=2)


def __getattr__(name):  # the module's functions are the double's methods
    return getattr(_double, name)
"""


def gpu_check(tmp_path, **env) -> subprocess.CompletedProcess:
    (tmp_path / "bin").mkdir(exist_ok=True)
    smi = tmp_path / "bin/nvidia-smi"
    smi.write_text("#!/bin/sh\nexit 0\n")
    smi.chmod(0o755)
    (tmp_path / "pynvml.py").write_text(PYNVML_DOUBLE)
    environment = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "PYTHON": sys.executable,
                   "PYTHONPATH": f"{tmp_path}:{ROOT / 'src'}", **env}
    for selection in ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        if selection not in env:
            environment.pop(selection, None)
    return subprocess.run([str(ROOT / "scripts/gpu-check.sh"), "1"], env=environment, capture_output=True, text=True,
                          timeout=60)


def test_gpu_check_reads_every_gpu_through_the_projects_sampler(tmp_path):
    done = gpu_check(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "GPU-fake-0" in done.stdout and "GPU-fake-1" in done.stdout
    seconds = float(re.search(r"window ([\d.]+) s", done.stdout).group(1))
    joules = float(re.search(r"energy ([\d.]+) J from energy counter", done.stdout).group(1))
    assert joules == pytest.approx(2 * 250.5 * seconds, rel=0.05)
    assert "limit 300 W (enforced 300 W)" in done.stdout  # read, never changed


def test_gpu_check_samples_only_the_selected_gpus(tmp_path):
    done = gpu_check(tmp_path, CUDA_VISIBLE_DEVICES="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("GPU-fake-") == 1
