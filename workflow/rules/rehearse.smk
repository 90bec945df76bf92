# `snakemake --cores 1 rehearse --config nodes=[<node>]`: each node's whole DAG (every launch, variant,
# power cap and workload, probes, collect, report) with the engines replaced by stand-ins behind the real
# commands and the GPUs by simulated ones. Everything it writes is under data/rehearsal/<node>/ and
# reports/rehearsal/<node>/; data/results.parquet and reports/ are never touched (stackbench.rehearsal).


# No benchmark: file here: a rule without outputs runs every time it is asked, and Snakemake would take its benchmark
# file for an output and call a second rehearsal up to date (the rehearsal's own rules write theirs).
rule rehearse:
    params:
        cli=STACKBENCH,
        nodes=lambda wildcards: " ".join(CFG["nodes"]),
        time_scale=CFG["rehearsal"]["time_scale"],
        accept_rate=CFG["rehearsal"]["accept_rate"],
    log:
        "logs/rehearsal/rehearse.log",
    shell:
        "{params.cli} rehearse {params.nodes} --time-scale {params.time_scale} --accept-rate {params.accept_rate} "
        "2>&1 | tee {log:q}; exit ${{PIPESTATUS[0]}}"


if REHEARSAL:
    # The real run's measure settings (before the rehearsal ran each cell once), which its budget prices.
    from stackbench.config.model import Measure as _Measure

    REAL_MEASURE = _Measure.of(_expand.load_run_config(Path("."), {**config, "rehearsal": {}}))

    localrules:
        rehearsal_budget,

    # The real run's hours from the rehearsal's cells and starts (rehearsal/budget.py): the report opens with it.
    rule rehearsal_budget:
        input:
            first_round_parts(),  # a rehearsal plans its first rounds only
        output:
            BUDGET,
        params:
            cli=STACKBENCH,
            runs=f"{RUNS}/{REHEARSAL}",
            node=REHEARSAL,
            time_scale=CFG["rehearsal"]["time_scale"],
            repeats=REAL_MEASURE.repeats,
            warmup=REAL_MEASURE.warmup_requests,
        log:
            "logs/rehearsal/budget.log",
        benchmark:
            f"{BENCHMARKS}/rehearsal_budget.tsv"
        shell:
            "{params.cli} rehearsal-budget --runs {params.runs:q} --node {params.node} --time-scale {params.time_scale} "
            "--repeats {params.repeats} --warmup-requests {params.warmup} --out {output:q} > {log:q} 2>&1"
