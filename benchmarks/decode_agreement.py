"""Benchmark: does the client's decode rate agree with the engine's own figures?

Prints, side by side, our client-measured decode rate (TTFT excluded), llama-server's own
`predicted_per_second` for the same requests, and `llama-bench` tg on the same model and threads, as
ratios. Targets: within 2% of the server's figure; within 10% of llama-bench. Run after the default
pipeline (it reads the measured runs and the built engine):

    .venv/bin/python benchmarks/decode_agreement.py [--runs data/runs/local-cpu] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

import pandas as pd


def requests_frame(runs: Path, variant: str) -> pd.DataFrame:
    parts = sorted((runs / f"llamacpp--{variant}" / "cells").glob("*.requests.parquet"))
    if not parts:
        raise SystemExit(f"no request records under {runs}/llamacpp--{variant}; run `snakemake --cores 1 report` first")
    frame = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    return frame[frame["status"] == "ok"]


def llama_bench_tg(bench: str, model: str, threads: int, tokens: int, repeats: int) -> tuple[float, float]:
    out = subprocess.run([bench, "-m", model, "-t", str(threads), "-p", "0", "-n", str(tokens), "-r", str(repeats),
                          "-o", "json"], capture_output=True, text=True, check=True).stdout
    rows = json.loads(out)
    return rows[0]["avg_ts"], rows[0]["stddev_ts"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="data/runs/local-cpu")
    parser.add_argument("--model", default="data/models/smollm2-135m-q4km.gguf")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    frame = requests_frame(Path(args.runs), "nospec")
    single = frame[frame["concurrency"] == 1]
    ratios = (single["decode_tps"] / single["server_predicted_per_second"]).dropna()
    print(f"{'figure':48} {'median':>10} {'min':>10} {'max':>10}")
    for name, series in (("client decode tok/s (nospec, concurrency 1)", single["decode_tps"]),
                         ("server predicted_per_second (same requests)", single["server_predicted_per_second"]),
                         ("ratio client / server", ratios)):
        print(f"{name:48} {series.median():10.3f} {series.min():10.3f} {series.max():10.3f}")
    solo = single[single["tokens"] >= 32]
    ready = json.loads(Path(".envs/llamacpp/ready.json").read_text())
    tokens = int(solo["tokens"].median())
    tg, tg_sd = llama_bench_tg(ready["bench"], args.model, args.threads, tokens, args.repeats)
    client = statistics.median(solo["decode_tps"])
    print(f"{'llama-bench tg' + str(tokens) + f' (-t {args.threads}, r={args.repeats})':48} {tg:10.3f} {tg - tg_sd:10.3f} {tg + tg_sd:10.3f}")
    print(f"{'ratio client / llama-bench':48} {client / tg:10.3f}")
    print()
    print(f"target: client within 2% of server   -> {abs(ratios.median() - 1) * 100:.2f}% off "
          f"({'met' if abs(ratios.median() - 1) <= 0.02 else 'NOT met'})")
    print(f"target: client within 10% of llama-bench -> {abs(client / tg - 1) * 100:.1f}% off "
          f"({'met' if abs(client / tg - 1) <= 0.10 else 'NOT met'}); llama-bench has no HTTP, no sampling "
          "and no chat template, so a small gap is expected")


if __name__ == "__main__":
    main()
