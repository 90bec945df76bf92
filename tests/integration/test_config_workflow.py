"""A config error stops Snakemake with one line naming file and field, before it plans any job."""

import subprocess
import sys

import pytest
from helpers import edit_yaml as edit


@pytest.mark.integration  # runs Snakemake
def test_snakemake_stops_with_one_line_before_planning(repo_copy):
    edit(repo_copy / "configs/nodes/local-cpu.yaml", lambda d: d.update(power_caps_w=["high"]))
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "report"], cwd=repo_copy,
                          capture_output=True, text=True)
    assert done.returncode != 0
    assert "config error: configs/nodes/local-cpu.yaml: power_caps_w[0]: expected number, got 'high'" in done.stderr
    assert "Job stats" not in done.stdout
