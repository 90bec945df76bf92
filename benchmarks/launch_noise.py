"""Where the default's launch-to-launch noise comes from (issue 51 item 1): llama-server launched afresh N times in
each of two placements, interleaved in shuffled rounds, each launch's median client decode rate over five streamed
greedy requests (the pipeline's definition: tokens after the first / time from the first to the last). Printed
side by side: the placement the default used before (2 threads, server and client free on both cores) is the
reference, the pinned one (1 thread on core 0, the client on core 1: host/affinity.py, configs/nodes/local-cpu.yaml)
is measured in the same run.

    .venv/bin/python benchmarks/launch_noise.py [launches]     (after the README's first command built llama.cpp)
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
SERVER = json.loads((ROOT / ".envs/llamacpp/ready.json").read_text())["server"]
MODEL = ROOT / "data/models/smollm2-135m-q4km.gguf"
PROMPT = "Write a Python function that parses a CSV file and returns the rows as dictionaries, with error handling."
PLACEMENTS = {
    "2 threads, free (before)": dict(threads=2, server_cpus=None, client_cpus=None),
    "1 thread on core 0, client on core 1 (now)": dict(threads=1, server_cpus={0}, client_cpus={1}),
}


def launch_rate(placement: dict, port: int) -> tuple[float, float]:
    """One fresh server: the median decode rate of five requests after one warm-up, and their CV."""
    argv = [SERVER, "--model", str(MODEL), "--host", "127.0.0.1", "--port", str(port), "--ctx-size", "4096",
            "--threads", str(placement["threads"]), "--parallel", "4", "--kv-unified", "--log-disable"]
    pin = placement["server_cpus"]
    os.sched_setaffinity(0, placement["client_cpus"] or set(range(os.cpu_count())))
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              preexec_fn=(lambda: os.sched_setaffinity(0, pin)) if pin else None)
    try:
        for _ in range(300):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        rates = []
        for attempt in range(6):
            body = {"prompt": PROMPT, "n_predict": 64, "temperature": 0, "stream": True, "cache_prompt": False,
                    "ignore_eos": True}
            stamps = []
            with httpx.stream("POST", f"http://127.0.0.1:{port}/completion", json=body, timeout=60) as reply:
                stamps = [time.perf_counter() for line in reply.iter_lines() if line.startswith("data:")]
            if attempt:  # the first is the warm-up
                rates.append((len(stamps) - 1) / (stamps[-1] - stamps[0]))
        return statistics.median(rates), statistics.pstdev(rates) / statistics.mean(rates)
    finally:
        server.terminate()
        server.wait()


def main(launches: int) -> None:
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in PLACEMENTS}
    port = 43100
    for round_no in range(launches):
        order = list(PLACEMENTS)
        random.Random(round_no).shuffle(order)
        for name in order:
            port += 1
            got[name].append(launch_rate(PLACEMENTS[name], port))
    print(f"{'placement':45} {'median tok/s':>12} {'CV between launches':>20} {'CV within (median)':>19}")
    for name, runs in got.items():
        logs = [math.log(rate) for rate, _ in runs]
        print(f"{name:45} {statistics.median(r for r, _ in runs):12.1f} {statistics.stdev(logs):20.3f} "
              f"{statistics.median(w for _, w in runs):19.3f}")
    print(f"{launches} launches each, interleaved; load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
