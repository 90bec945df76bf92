# Two steps per server launch. The plan step writes the launch spec (everything that changes what the
# launch measures, with its fingerprints); the measure job reads only that spec: start the server, wait
# until ready, warm up, measure every cell not already stored, tear the server down.


# The settings are a param here, so changing them (a --config override, an edit of configs/config.yaml)
# rewrites the file, which replans every launch; the plans read the file, not a command line.
rule launch_settings:
    output:
        SETTINGS,
    params:
        settings=launch_settings,
    log:
        "logs/plan/launch-settings.log",
    benchmark:
        f"{BENCHMARKS}/launch_settings.tsv"
    run:
        _launchspec.write_settings(params.settings, Path(output[0]))
        Path(log[0]).write_text(f"launch settings -> {output[0]}\n")


rule plan_launch:
    input:
        unpack(plan_inputs),
        settings=SETTINGS,
    output:
        f"{RUNS}/{{node}}/{{launch}}/launch.json",
    params:
        cli=STACKBENCH,
        open_cells=open_cells_flag,
    log:
        "logs/plan/{node}/{launch}.log",
    benchmark:
        f"{BENCHMARKS}/plan_launch/{{node}}/{{launch}}.tsv"
    shell:
        "{params.cli} plan-launch --node {wildcards.node:q} --launch {wildcards.launch:q} "
        "--settings {input.settings:q} {params.open_cells} --out {output:q} > {log:q} 2>&1"


rule measure:
    input:
        spec=rules.plan_launch.output[0],
    output:
        f"{RUNS}/{{node}}/{{launch}}/cells.parquet",
    params:
        cli=STACKBENCH,
        out_dir=lambda wildcards, output: Path(output[0]).parent,
    priority: launch_order
    resources:
        **NODE_SLOTS,
        # Each node config maps to its own SLURM partition / constraint / GPUs / CPUs / memory / time.
        gpu=slurm_resource("gpu", 0),
        runtime=slurm_resource("runtime"),
        cpus_per_task=slurm_resource("cpus_per_task", 1),
        mem_mb=slurm_resource("mem_mb", 4000),
        slurm_partition=slurm_resource("slurm_partition", ""),
        constraint=slurm_resource("constraint", ""),
        gpu_model=slurm_resource("gpu_model", ""),
        slurm_extra=slurm_resource("slurm_extra", ""),
    log:
        "logs/measure/{node}/{launch}.log",
    benchmark:
        f"{BENCHMARKS}/measure/{{node}}/{{launch}}.tsv"
    # The job's stderr reaches the console: it keeps a line per cell there (each naming the node and launch)
    # and sends its detail to the log (stackbench.measure.progress). No `message:`: it would replace the
    # job's wildcards in Snakemake's output, which `snakemake -n` readers use.
    shell:
        "{params.cli} measure --spec {input.spec:q} --out-dir {params.out_dir:q} --log {log:q}"


# The look after each round from the node's first (What to run's sequential rule, docs/what-to-run.md): the
# verdict so far on the console and in reports/provisional/<node>.md, and which variants the next round launches
# again (only those of cells still undecided, within the budget). A checkpoint: Snakemake re-plans the DAG after
# it, so `snakemake -n` shows the rounds planned so far, and a resumed run continues the sequence from the files.
checkpoint round_verdict:
    input:
        parts=lambda wildcards: sequence_parts(node_named(wildcards.node), upto=int(wildcards.round)),
    output:
        f"{RUNS}/{{node}}/rounds/round-{{round}}.json",
    params:
        cli=STACKBENCH,
        # Not passed on: the CLI reads the rule from the node file and the look before (cli.py round-verdict); a
        # param, so a changed rule runs the look again.
        rule=lambda wildcards: node_rule(node_named(wildcards.node), int(wildcards.round)),
        fix=lambda wildcards: "--fix-horizon" if int(wildcards.round) == first_look_round(node_named(wildcards.node)) else "",
        provisional=lambda wildcards: f"{PATHS['reports']}/provisional/{wildcards.node}.md",
    log:
        "logs/rounds/{node}/round-{round}.log",
    benchmark:
        f"{BENCHMARKS}/round_verdict/{{node}}/round-{{round}}.tsv"
    shell:
        "{params.cli} round-verdict {input.parts:q} --node {wildcards.node:q} --round {wildcards.round} "
        "{params.fix} --out {output:q} --provisional {params.provisional:q} > {log:q}"
