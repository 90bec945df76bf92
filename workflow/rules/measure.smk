# One job per server launch: start the server, wait until ready, warm up, measure every client cell
# (workload x concurrency x power cap x repeat), scrape the engine's metrics, tear the server down.
# Finished cells are kept under the run folder, so an interrupted launch resumes with the missing ones.
import json
import shlex


rule measure:
    input:
        unpack(measure_inputs),
    output:
        f"{RUNS}/{{node}}/{{launch}}/cells.parquet",
    params:
        fingerprint=launch_fingerprint,
        run_config=lambda wildcards: shlex.quote(json.dumps(CFG)),
    resources:
        # Each node config maps to its own SLURM partition / constraint / GPU request.
        gpu=slurm_resource("gpu", 0),
        runtime=slurm_resource("runtime"),
        slurm_partition=slurm_resource("slurm_partition", ""),
        constraint=slurm_resource("constraint", ""),
        gpu_model=slurm_resource("gpu_model", ""),
        slurm_extra=slurm_resource("slurm_extra", ""),
    log:
        "logs/measure/{node}/{launch}.log",
    shell:
        "{STACKBENCH} measure --node {wildcards.node} --launch {wildcards.launch} --run-config {params.run_config} "
        f"--out-dir {RUNS}/{{wildcards.node}}/{{wildcards.launch}} 2> {{log}}"
