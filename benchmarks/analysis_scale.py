"""Benchmark: collect + report on a SYNTHETIC results table of 1,000,000 rows (generated here, labelled
synthetic, never written under data/), and `snakemake -n` planning a 1,000-cell sweep. Targets: under
10 s each. Each runs 5 times; median and spread printed.

    .venv/bin/python benchmarks/analysis_scale.py [--rows 1000000] [--repeats 5]
"""

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from stackbench import store  # noqa: E402
from stackbench.report import render  # noqa: E402


def synthetic(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    cells = rows // 10
    metrics = ["decode_tps", "aggregate_tps", "e2e_tps", "prefill_tps", "ttft_s", "tpot_ms", "accept_len",
               "kv_pool_tokens", "power_w", "energy_j_per_token"]
    frame = pd.DataFrame({
        "source": "measured", "ref": "SYNTHETIC benchmark data",
        "node": rng.choice([f"synthetic-node-{i}" for i in range(4)], rows),
        "stack": rng.choice(["llamacpp", "sglang", "vllm"], rows),
        "variant": rng.choice([f"v{i}" for i in range(20)], rows), "spec_method": "none",
        "workload": rng.choice([f"w{i}" for i in range(50)], rows),
        "concurrency": rng.integers(1, 9, rows), "power_cap_w": rng.choice([180.0, 220.0, 260.0, 300.0], rows),
        "metric": np.tile(metrics, cells + 1)[:rows], "value": rng.uniform(1, 200, rows), "unit": "tok/s",
        "stat": "median", "n": 3, "status": "ok", "model": "synthetic", "quant": "Q4_K_M", "kv_dtype": "f16",
    })
    return frame


def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def plan_sweep(repo: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "report", "--config", "nodes=[sweep1000]"],
                          cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        part = tmp / "synthetic.parquet"
        store.atomic_write_parquet(store.to_table(synthetic(args.rows)), part)

        def collect_and_report():
            store.collect([part], tmp / "results.parquet")
            render.write_report(tmp / "results.parquet", tmp / "reports")

        med, lo, hi = timed(collect_and_report, args.repeats)
        print(f"collect + report, {args.rows:,} synthetic rows: median {med:.2f} s (min {lo:.2f}, max {hi:.2f}); target < 10 s")

        repo = tmp / "repo"
        repo.mkdir()
        for name in ("Snakefile", "workflow", "configs", "envs"):
            (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, repo / name)
        shutil.copytree(ROOT / "data/published", repo / "data/published")
        node = yaml.safe_load((ROOT / "configs/nodes/rtx5090.yaml").read_text())
        workloads = [f"w{i}" for i in range(10)]
        for w in workloads:
            (repo / f"configs/workloads/{w}.yaml").write_text(yaml.safe_dump({"prompts": [f"prompt {w}"]}))
        node.update(workloads=workloads, concurrency=list(range(1, 11)), power_caps_w=[180, 200, 220, 240, 260, 280, 300, 320, 340, 360])
        (repo / "configs/nodes/sweep1000.yaml").write_text(yaml.safe_dump(node))
        cells = len(workloads) * 10 * 10
        med, lo, hi = timed(lambda: plan_sweep(repo), args.repeats)
        print(f"snakemake -n, {cells} cells per launch x 6 launches: median {med:.2f} s (min {lo:.2f}, max {hi:.2f}); target < 10 s")


if __name__ == "__main__":
    main()
