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
# Debian packages only the tests need, installed when root: Chromium for the report's browser test,
# podman with the runc runtime for the image-mode tests (crun fails on hosts with hybrid cgroups). They
# install in the background, so a run does not wait for them: the install holds .venv/test-tools.lock
# (taken here, before setup returns), and the tests that need them wait for it (tests/support/test_tools.py).
# Its output goes to .venv/test-tools.log.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v podman >/dev/null 2>&1 || missing+=(podman runc)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: ${missing[*]} not installed and not root on Debian; the browser or image-mode tests will be skipped" >&2
  else
    exec 9>.venv/test-tools.lock
    if flock -n 9; then  # else an earlier setup's install is still running
      (
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } \
          > .venv/test-tools.log 2>&1 9>&- \
          || echo "setup: ${missing[*]} not installed; the tests needing them will be skipped" >> .venv/test-tools.log
      ) &
      echo "setup: installing ${missing[*]} for the tests in the background (.venv/test-tools.log)" >&2
    fi
    exec 9>&-
  fi
fi
