"""Benchmark: collect + report on a SYNTHETIC results table of 1,000,000 rows (a seed-style sweep generated
here, labelled synthetic, never written under data/) beside its reference measured in the same run (DuckDB
alone computing per-variant medians of the same Parquet), the page's size, and `snakemake -n` planning a
1,000-cell sweep. Targets: collect + report within 30x the reference at 1,000,000 rows and under 3 s at
100,000, index.html under 10 MB, planning under 10 s. Each runs 5 times; median and spread.

    .venv/bin/python benchmarks/analysis_scale.py [--rows 1000000] [--repeats 5]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from stackbench.analysis import plausibility  # noqa: E402
from stackbench.plan.definitions import DEFINITIONS  # noqa: E402
from stackbench.report import render  # noqa: E402
from stackbench.results import collect, published, store  # noqa: E402

RATIO_TARGET = 30  # collect + report against the reference, at 1,000,000 rows
PAGE_BUDGET_MB = 10
METRICS = ["decode_tps", "aggregate_tps", "aggregate_tps_steady", "e2e_tps", "prefill_tps", "ttft_s", "ttfc_s", "tpot_ms",
           "itl_p50_ms", "itl_p99_ms", "accept_len", "accept_rate", "accept_rate_pos1", "accept_rate_pos2", "power_w",
           "energy_j_per_token", "vram_mib", "goodput_rps", "slo_attainment", "e2e_s"]


def synthetic(rows: int) -> pd.DataFrame:
    """A seed-style sweep, SYNTHETIC: nodes x stacks x draft depths x power caps x workloads x concurrency x
    run dates, ~20 metrics per cell (one row per cell and metric, as the results contract stores repeats'
    median), plus each launch's server rows; trimmed to `rows`."""
    rng = np.random.default_rng(0)
    grid = pd.MultiIndex.from_product([
        [f"synthetic-node-{i}" for i in range(4)], ["llamacpp", "sglang", "vllm"], [0, 2, 3, 4],
        [180.0, 220.0, 260.0, 300.0], [f"w{i}" for i in range(16)], [1, 2, 4, 8], [f"run-{d}" for d in "abcde"], METRICS,
    ], names=["node", "stack", "spec_tokens", "power_cap_w", "workload", "concurrency", "ref", "metric"]).to_frame(index=False)
    frame = grid.iloc[:rows].copy()
    frame["variant"] = np.where(frame["spec_tokens"] == 0, "nospec", "mtp-n" + frame["spec_tokens"].astype(str))
    frame["spec_method"] = np.where(frame["spec_tokens"] == 0, "none", "mtp")
    frame["spec_tokens"] = frame["spec_tokens"].where(frame["spec_tokens"] > 0)
    frame["ref"] = "SYNTHETIC " + frame["ref"]
    frame["value"] = rng.uniform(1, 200, len(frame))
    frame["value_min"], frame["value_max"] = frame["value"] * 0.95, frame["value"] * 1.04
    frame = frame.assign(source="measured", unit="tok/s", stat="median", n=3, status="ok", model="synthetic", quant="Q4_K_M",
                         kv_dtype="f16", os="Debian 13", engine="synthetic", engine_version="0", context_len=65536,
                         prompt_tokens=400, output_tokens=512, temperature=0.0, ttft_included="no", gpu="synthetic",
                         gpu_count=1, tp=1)
    launches = frame.drop_duplicates(["node", "stack", "variant", "ref"])[
        ["source", "ref", "node", "stack", "variant", "spec_method", "spec_tokens", "model", "quant", "kv_dtype", "os",
         "engine", "engine_version", "context_len", "gpu", "gpu_count", "tp"]]
    server = pd.concat([launches.assign(metric=m, value=v, unit=u, stat="single", n=1, status="ok")
                        for m, v, u in (("kv_pool_tokens", 184242.0, "tokens"), ("model_mib", 18410.0, "MiB"),
                                        ("gpu_mem_bandwidth_gbs", 1790.0, "GB/s"))])
    return pd.concat([frame, server], ignore_index=True)


def reference_aggregate(results: Path, out: Path) -> None:
    """The floor for the report: DuckDB reads the same Parquet, takes per-variant medians and writes them."""
    con = duckdb.connect()
    con.execute(f"copy (select node, stack, variant, power_cap_w, concurrency, metric, median(value) as value "
                f"from read_parquet('{results}') group by all) to '{out}' (header)")


def timed(fns: dict, repeats: int) -> dict[str, tuple[float, float, float, float]]:
    """Per named function, (median, min, max) wall seconds and the median CPU seconds (all threads). The
    functions take turns within each repeat, so a load that comes and goes on a shared 2-core host weighs on
    each alike; the CPU figure is the one other jobs inflate least."""
    times: dict[str, list] = {name: [] for name in fns}
    cpu: dict[str, list] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    return {name: (statistics.median(times[name]), min(times[name]), max(times[name]), statistics.median(cpu[name]))
            for name in fns}


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
        part, published_part = tmp / "synthetic.parquet", tmp / "published.parquet"
        store.atomic_write_parquet(store.to_table(synthetic(args.rows)), part)
        store.atomic_write_parquet(store.to_table(published.load_all(ROOT / "data/published", ROOT)), published_part)
        results = tmp / "results.parquet"
        collected, reported, reference = timed({
            # the workflow's collect: the union, the rows derived across launches, the plausibility checks
            "collect": lambda: collect.collect_results([published_part, part], results, check=plausibility.flag_table,
                                                      definitions=DEFINITIONS),
            "report": lambda: render.write_report(results, tmp / "reports", ROOT / "data/published"),
            "reference": lambda: reference_aggregate(results, tmp / "reference.csv"),
        }, args.repeats).values()
        rows = duckdb.sql(f"select count(*) from read_parquet('{results}')").fetchall()[0][0]
        page_mb = (tmp / "reports/index.html").stat().st_size / 1e6
        ours = collected[0] + reported[0]
        print(f"{rows:,} rows (SYNTHETIC sweep + the seeds' published rows), median of {args.repeats} (min-max):")
        print(f"  {'':<18}{'wall s':>8}{'CPU s':>8}  min-max wall")
        for name, (med, lo, hi, cpu) in (("collect", collected), ("report", reported), ("DuckDB scan", reference)):
            print(f"  {name:<18}{med:8.2f}{cpu:8.2f}  {lo:.2f}-{hi:.2f}")
        print(f"  {'collect + report':<18}{ours:8.2f}{collected[3] + reported[3]:8.2f}")
        print(f"  collect + report / DuckDB scan: {ours / reference[0]:.0f}x wall, "
              f"{(collected[3] + reported[3]) / reference[3]:.0f}x CPU   target <= {RATIO_TARGET}x")
        print("  (DuckDB scan: DuckDB alone, per-variant medians of the same Parquet written to CSV)")
        print(f"  index.html        {page_mb:6.2f} MB of its {PAGE_BUDGET_MB} MB budget")
        print(f"  load average      {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")

        repo = tmp / "repo"
        repo.mkdir()
        for name in ("Snakefile", "workflow", "configs", "envs"):
            (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, repo / name)
        shutil.copytree(ROOT / "data/published", repo / "data/published")
        node = yaml.safe_load((ROOT / "configs/nodes/rtx5090.yaml").read_text())
        workloads = [f"w{i}" for i in range(10)]
        for w in workloads:
            (repo / f"configs/workloads/{w}.yaml").write_text(yaml.safe_dump({"prompts": [f"prompt {w}"]}))
        # allow_queueing: planning time is what is measured here, not what the cells would measure
        node.update(workloads=workloads, concurrency=list(range(1, 11)), allow_queueing=True,
                    power_caps_w=[180, 200, 220, 240, 260, 280, 300, 320, 340, 360])
        (repo / "configs/nodes/sweep1000.yaml").write_text(yaml.safe_dump(node))
        cells = len(workloads) * 10 * 10
        med, lo, hi, _ = timed({"plan": lambda: plan_sweep(repo)}, args.repeats)["plan"]
        print(f"snakemake -n, {cells} cells per launch x 6 launches: median {med:.2f} s (min {lo:.2f}, max {hi:.2f}); target < 10 s")


if __name__ == "__main__":
    main()
