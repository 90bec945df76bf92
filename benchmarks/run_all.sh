#!/usr/bin/env bash
# All four fidelity and performance benchmarks, one command (after `snakemake --cores 1 report`):
#   bash benchmarks/run_all.sh
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
echo "== 1. decode-rate agreement";   $py benchmarks/decode_agreement.py
echo; echo "== 2. client ceiling";      $py benchmarks/client_ceiling.py
echo; echo "== 3. orchestration overhead"; $py benchmarks/orchestration_overhead.py
echo; echo "== 4. analysis scale";      $py benchmarks/analysis_scale.py
