#!/usr/bin/env bash
# Idempotent set-up: the pipeline's own virtual environment (.venv) with the stackbench package, and,
# when run as root on Debian, Chromium for the report's browser test. Engine environments (llama.cpp,
# vLLM) are not made here: the Snakemake workflow makes them from envs/ when a run needs them.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.stackbench-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/pip install --disable-pip-version-check -q -e ".[test]"
  touch "$stamp"
fi
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "setup: chromium not installed; the browser test will be skipped" >&2
  else
    echo "setup: chromium not found and not root; the browser test will be skipped" >&2
  fi
fi
