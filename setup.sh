#!/usr/bin/env bash
# Idempotent set-up: the pipeline's own virtual environment (.venv) with the stackbench package, and,
# when run as root on Debian, Chromium and podman for the browser and image-mode tests. Engine
# environments (llama.cpp, vLLM) are not made here: the Snakemake workflow makes them from envs/ when a
# run needs them.
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
# Debian packages the optional tests need, installed when root: Chromium for the report's browser test,
# podman with the runc runtime for the image-mode tests (crun fails on hosts with hybrid cgroups).
install_for_tests() {  # <command> <what is skipped without it> <package>...
  local command=$1 skipped=$2
  shift 2
  command -v "$command" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null) \
      || echo "setup: $* not installed; $skipped will be skipped" >&2
  else
    echo "setup: $command not found and not root; $skipped will be skipped" >&2
  fi
}
install_for_tests chromium "the browser test" chromium
install_for_tests podman "the image-mode tests" podman runc
