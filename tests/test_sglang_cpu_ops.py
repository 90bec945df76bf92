"""The sgl_kernel stand-in that lets SGLang's CPU engine serve here (src/stackbench/sglang_cpu_ops):
each op against a plain-PyTorch reference, and every other op failing loudly. torch lives only in the
sglang-cpu environment, so the checks (tests/sglang_cpu_ops_checks.py) run with that environment's Python."""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SGLANG_PYTHON = ROOT / ".envs/sglang-cpu/venv/bin/python"
STAND_IN = ROOT / "src/stackbench/sglang_cpu_ops"
CHECKS = ["check_assign_req_to_token_pool", "check_assign_extend_cache_locs", "check_copy_all_layer_kv_cache",
          "check_other_ops_fail_loudly"]


@pytest.fixture(scope="module")
def results():
    if not SGLANG_PYTHON.exists():
        pytest.skip("the sglang-cpu environment is not built (the workflow makes it for the local-cpu-sglang node: "
                    "snakemake --cores 1 .envs/sglang-cpu/ready.json)")
    done = subprocess.run([str(SGLANG_PYTHON), str(ROOT / "tests/sglang_cpu_ops_checks.py")], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(STAND_IN)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_the_checks_cover_every_check_in_the_script(results):
    assert sorted(results) == sorted(CHECKS)


@pytest.mark.parametrize("check", CHECKS)
def test_stand_in(results, check):
    assert results[check] == "ok", results[check]
