#!/usr/bin/env bash
# Read-only GPU check: samples the selected GPUs (CUDA_VISIBLE_DEVICES, or a SLURM allocation, else
# every GPU) for about 20 s through the project's own sampler (stackbench.host.telemetry) and prints power,
# the energy counter's delta, memory, SM clock and power limits. It never changes a limit.
#   scripts/gpu-check.sh [seconds]
# Before a real run, `stackbench preflight --node N` checks the machine against the node file (GPUs, idle,
# driver, caps set and restored, P2P, engines, models, disk): one line per check, with what to do.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
python="${PYTHON:-.venv/bin/python}"
[ -x "$python" ] || python=python3
if ! command -v nvidia-smi >/dev/null 2>&1 && ! ldconfig -p 2>/dev/null | grep -q libnvidia-ml.so; then
    echo "gpu-check: no NVIDIA driver on this machine (no nvidia-smi, no libnvidia-ml.so): nothing to check" >&2
    exit 2
fi
PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" exec "$python" - "$seconds" <<'PY'
import os
import statistics
import sys
import time

from stackbench.host import telemetry

seconds = float(sys.argv[1])
gpus, why = telemetry.all_gpus()
if gpus is None:
    sys.exit(f"gpu-check: {why}")
selection = os.environ.get("SLURM_STEP_GPUS") or os.environ.get("SLURM_JOB_GPUS") or os.environ.get("CUDA_VISIBLE_DEVICES")
if selection:
    gpus = telemetry.select_gpus(None, len(selection.split(",")), gpus.nvml)
print(f"GPUs ({gpus.source}):")
for info in gpus.info:
    print(f"  {info.index}: {info.name}  {info.uuid}  bus {info.pci_bus_id}  "
          f"limits {info.min_limit_w:g}-{info.max_limit_w:g} W, default {info.default_limit_w:g} W")
with telemetry.Sampler(gpus) as sampler:
    window = sampler.open_window()
    time.sleep(seconds)
    reading = sampler.close_window(window)
print(f"\nwindow {reading.duration_s:.1f} s, {reading.power_samples} samples every {telemetry.SAMPLE_PERIOD_S} s")
print(f"  energy {reading.energy_j} J from {reading.energy_source}")
print(f"  power (sum over GPUs) mean {reading.power_mean_w} W, p95 {reading.power_p95_w} W")
for info in gpus.info:
    rows = [r for r in sampler.rows if r["gpu_uuid"] == info.uuid]
    if not rows:
        continue
    last = rows[-1]
    print(f"  GPU {info.index}: power mean {statistics.mean(r['power_w'] for r in rows):.1f} W, "
          f"energy counter +{rows[-1]['energy_j'] - rows[0]['energy_j']:.1f} J, "
          f"memory {max(r['memory_used_mib'] for r in rows):.0f} MiB, "
          f"SM clock {min(r['sm_clock_mhz'] for r in rows)}-{max(r['sm_clock_mhz'] for r in rows)} MHz, "
          f"limit {last['limit_w']:g} W (enforced {last['enforced_limit_w']:g} W), {last['temperature_c']} C")
for message in reading.sampler_errors:
    print(f"  sampler error: {message}")
PY
