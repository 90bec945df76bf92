"""The openai-compatible engine against each engine's own adapter (issue 68 item 2), on the same running server.

Per engine (llama.cpp, vLLM on CPU, SGLang on CPU), one server at a time is started as the local-cpu node's no-spec
launch starts it (the pipeline's native launcher, its own flags), then the same cells are measured through the real
run loop (`stackbench measure`) in external mode, alternately through the engine's own adapter (the reference) and
through `openai-compatible`, A/B/A/B, each run a fresh launch folder; the server is stopped after its engine's pairs.
Printed side by side per engine and arm: client decode tok/s and TTFT (each run's cell median, then the median over
runs with their min-max: the run-to-run spread), output tokens per request and the share of requests at the asked
length. The own adapter asks a fixed length (ignore_eos / min_tokens); the OpenAI API cannot, so an answer that ends
early is counted as it is.

    .venv/bin/python benchmarks/openai_compatible.py [--unsalted] [pairs] [engines...]   (llamacpp vllm-cpu sglang-cpu)

The workload is salted as every default workload is, and a salted request asks llama-server not to reuse a cached
prefix (cache_prompt false), which the OpenAI API cannot ask: --unsalted measures both arms with prefix reuse on,
the engine seam alone.

Needs the engines' environments and models (`snakemake --cores 1 -- .envs/llamacpp/ready.json .envs/vllm-cpu/ready.json
.envs/sglang-cpu/ready.json data/models/smollm2-135m-hf`). Writes logs/benchmarks/openai-compatible/<engine>.json.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

from stackbench.engines import adapter_for
from stackbench.plan import expand, launchspec
from stackbench.results import store
from stackbench.serve.launchers import open_launcher

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "logs/benchmarks/openai-compatible"  # logs/ is never committed
# The no-spec launch of each stack on local-cpu, and the model key its server serves under (--served-model-name).
STACKS = {"llamacpp": "llamacpp--nospec", "vllm-cpu": "vllm-cpu--nospec", "sglang-cpu": "sglang-cpu--nospec"}
WORKLOAD = {"prompts": ["Write a Python function that parses a CSV file and returns the rows as dictionaries.",
                        "Explain in a few sentences how a hash table resolves collisions.",
                        "List five uses of the Fourier transform, one line each."],
            "output_tokens": 64, "concurrency": [1]}
MEASURE = {"repeats": 3, "warmup_requests": 1}


def started_server(stack: str):
    """The stack's no-spec server on local-cpu, started as its measure job starts it (native launcher, the node's
    threads); returns the launcher (stop it) and the planned launch."""
    cfg, nodes = expand.load_plan(ROOT, {"nodes": ["local-cpu"], "stacks": "all"})
    node, launch = expand.find_launch(nodes, "local-cpu", STACKS[stack])
    env_info = json.loads((ROOT / ".envs" / launch.env_name / "ready.json").read_text())
    launcher = open_launcher(launch, adapter_for(launch.engine), env_info, OUT / f"{stack}-server", node.cpu_threads, None)
    seconds = launcher.start(ready_timeout_s=900)
    print(f"{stack}: server ready in {seconds:.0f} s at {launcher.base_url}", flush=True)
    return launcher, launch


def repo_with(node_doc: dict, where: Path) -> Path:
    """A copy of the configs with the comparison's node and workload (no runs, no environments)."""
    shutil.copytree(ROOT / "configs", where / "configs")
    (where / "configs/nodes/ab.yaml").write_text(yaml.safe_dump(node_doc))
    (where / "configs/workloads/ab.yaml").write_text(yaml.safe_dump(WORKLOAD))
    return where


def measured(repo: Path, run_index: int, out: Path) -> dict:
    """One `stackbench measure` of the node's run `run_index` (a fresh launch folder): its cell's figures."""
    cfg = expand.load_run_config(repo, {"nodes": ["ab"], "measure": MEASURE})
    node = expand.load_node("ab", cfg, repo)
    launch = [l for l in node.launches if l.replicate == 1][run_index]
    spec = launchspec.write(launchspec.build(cfg, node, launch), out / "launch.json")
    done = subprocess.run([sys.executable, "-m", "stackbench.cli", "measure", "--spec", str(spec), "--out-dir", str(out)],
                          capture_output=True, text=True, cwd=repo)
    if done.returncode != 0:
        raise SystemExit(f"{launch.name}: measure exited {done.returncode}: {done.stderr[-2000:]}")
    rows = store.read_results(out / "cells.parquet")
    ok = rows[(rows["status"] == "ok") & (rows["workload"] == "ab")]
    median = ok[ok["stat"] == "median"].set_index("metric")["value"] if "stat" in ok else pd.Series(dtype=float)
    figure = {m: float(median[m]) for m in ("decode_tps", "ttft_s") if m in median}
    requests = pd.concat([pd.read_parquet(p) for p in (out / "cells").glob("ab--*.requests.parquet")])
    figure |= {"output_tokens": float(requests["tokens"].mean()), "requests": len(requests),
               "at_asked_length": float((requests["tokens"] == WORKLOAD["output_tokens"]).mean()),
               "engine_setup": str(rows["engine_setup"].iloc[0]), "engine_version": str(rows["engine_version"].iloc[0])}
    return figure


def compare(stack: str, pairs: int) -> dict:
    launcher, launch = started_server(stack)
    try:
        path = ROOT / launch.model.path
        model = {"hf_dir" if path.is_dir() else "gguf": str(path), "quant": launch.model.quant}
        node = {"hardware": {"gpu": {"model": "none", "count": 0}, "cpu_threads": 1}, "context_len": launch.context_len,
                "concurrency": [1], "workloads": ["ab"], "accuracy": None, "probes": None, "divergence": None,
                "launches": 1, "default_stacks": "all", "models": {launch.model.name: model},
                "runs": [{"stack": stack, "model": launch.model.name, "variants": ["nospec"],
                          "launch": {"mode": "external", "url": launcher.base_url}},
                         {"stack": "openai-compatible", "model": launch.model.name,
                          "launch": {"mode": "external", "url": launcher.base_url}}]}
        arms: dict[str, list[dict]] = {"own adapter": [], "openai-compatible": []}
        with tempfile.TemporaryDirectory(prefix="stackbench-ab-") as scratch:
            repo = repo_with(node, Path(scratch))
            for pair in range(pairs):
                for index, arm in enumerate(arms):  # A/B/A/B: the own adapter first in every pair
                    figure = measured(repo, index, Path(scratch) / f"{arm}-{pair}")
                    arms[arm].append(figure)
                    print(f"{stack} pair {pair + 1} {arm}: {figure}", flush=True)
    finally:
        launcher.stop()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{stack}{'' if WORKLOAD.get('salt', True) else '-unsalted'}.json").write_text(json.dumps(arms, indent=1))
    return arms


def spread(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    values = [v * scale for v in values]
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def table(results: dict[str, dict]) -> None:
    print(f"\n{'engine':11} {'arm':18} {'decode tok/s':>22} {'TTFT ms':>22} {'output tokens':>14} {'at asked length':>16}")
    for stack, arms in results.items():
        for arm, runs in arms.items():
            print(f"{stack:11} {arm:18} {spread([r['decode_tps'] for r in runs]):>22} "
                  f"{spread([r['ttft_s'] for r in runs], 1000, 0):>22} {statistics.mean(r['output_tokens'] for r in runs):14.1f} "
                  f"{statistics.mean(r['at_asked_length'] for r in runs):16.2f}")
    print(f"median over runs (min-max), each run {MEASURE['repeats']} repeats of one c1 cell, salted: "
          f"{WORKLOAD.get('salt', True)}; load average "
          f"{os.getloadavg()[0]:.2f} at the end")


def main(pairs: int, stacks: list[str]) -> None:
    started = time.monotonic()
    results = {stack: compare(stack, pairs) for stack in stacks}
    table(results)
    print(f"{time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--unsalted"]:
        WORKLOAD["salt"], args = False, args[1:]
    main(int(args[0]) if args else 3, args[1:] or list(STACKS))
