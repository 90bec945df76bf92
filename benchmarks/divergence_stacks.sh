#!/usr/bin/env bash
# Every CPU stack's divergence from the default's quality reference, through the workflow (docs/benchmarks.md,
# "vLLM and SGLang through the workflow"): a clone of this checkout's HEAD in $1 (default /tmp/divergence-stacks),
# local-cpu cut to the json workload at c1 and one launch a variant (the divergence pass as the node sets it),
# `--config stacks=all`; this checkout's .venv, engine environments and models are reused, not rebuilt.
set -euo pipefail
here=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
out=${1:-/tmp/divergence-stacks}
rm -rf "$out" && git clone -q "$here" "$out" && cd "$out"
ln -s "$here/.venv" .venv
cp -r "$here/.envs" .envs
mkdir -p data && for d in models datasets; do cp -al "$here/data/$d" "data/$d"; done
.venv/bin/python - <<'PY'
from pathlib import Path

import yaml

path = Path("configs/nodes/local-cpu.yaml")
node = yaml.safe_load(path.read_text())
node.update(workloads=["json"], concurrency=[1], launches=1)
node.pop("decide", None)
for run in node["runs"]:
    run["workloads"] = None
path.write_text(yaml.safe_dump(node))
PY
time .venv/bin/snakemake --cores 1 report --config stacks=all
.venv/bin/python - <<'PY'
import pandas as pd

rows = pd.read_parquet("data/results.parquet")
quality = rows[rows["metric"].isin(["mean_kld", "same_top_token", "perplexity_ratio", "kld_tail_mass"])]
print(quality[["stack", "variant", "metric", "value", "ci_low", "ci_high", "status"]].to_string())
for _, row in quality[quality["metric"] == "mean_kld"].iterrows():
    print(f"{row['stack']}: {row['note']}")
PY
