"""The default's benchmark jobs through Snakemake's SLURM executor on a real one-node SLURM cluster
(Debian's slurm-wlm, started by scripts/slurm-local-cluster.sh), landing in the same results table.

The claim is about our workflow's jobs going through sbatch, not about llama-server: the launches run on the
ENGINE DOUBLE installed as llama-server (tests/support/engine_double.py); the real llama-server's figures
through the same workflow are test_integration_llamacpp.py's report-target test."""

import fcntl
import os
import subprocess
import sys

import pytest
import yaml
from capabilities import require
from paths import ROOT

from stackbench.cli import published_records
from stackbench.results import store

pytestmark = [pytest.mark.integration, pytest.mark.slurm]


# The cluster's daemons are the machine's, not the checkout's: a second test run on the machine (another clone's
# .ci/run) waits on this lock instead of having its cluster stopped under it when the first run's module ends.
CLUSTER_LOCK = "/tmp/stackbench-slurm-cluster.lock"


@pytest.fixture(scope="module")
def slurm_cluster():
    require("a local SLURM cluster", None if os.geteuid() == 0 else "starting slurmctld/slurmd/munge needs root")
    script = str(ROOT / "scripts/slurm-local-cluster.sh")
    with open(CLUSTER_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(["bash", script, "start"], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        yield done.stdout
        # The suite leaves nothing running: munged, slurmctld and slurmd go down with the module.
        stopped = subprocess.run(["bash", script, "stop"], capture_output=True, text=True)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def test_measure_jobs_run_through_the_slurm_executor(slurm_cluster, ci_double_repo):
    ci_repo = ci_double_repo
    node = yaml.safe_load((ci_repo / "configs/nodes/ci-cpu.yaml").read_text())
    node.update(workloads=["code"], concurrency=[1], slurm={"partition": "cpu", "runtime_min": 30})
    (ci_repo / "configs/nodes/ci-cpu.yaml").write_text(yaml.safe_dump(node))
    done = subprocess.run([sys.executable, "-m", "snakemake", "--workflow-profile", "workflow/profiles/slurm",
                           "--slurm-keep-successful-logs", "report"],
                          cwd=ci_repo, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    slurm_logs = [p for p in (ci_repo / ".snakemake/slurm_logs").rglob("*.log") if "rule_measure" in str(p)]
    assert len(slurm_logs) == 2, "each launch's measure job goes through sbatch"
    assert "SLURM run ID" in done.stderr or "SLURM jobid" in done.stderr
    results = store.read_results(ci_repo / "data/results.parquet")
    cells = results[(results["source"] == "measured") & (results["workload"] == "code")]
    assert set(cells["variant"]) == {"nospec", "draft-n2"} and set(cells["status"]) == {"ok"}
    assert {"decode_tps", "prefill_tps", "ttft_s"} <= set(cells["metric"])
    # One table for published and measured rows: every published figure is there beside the measured ones.
    assert (results["source"] == "published").sum() == len(published_records(ci_repo / "data/published", ci_repo))
