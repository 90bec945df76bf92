# `snakemake --cores 1 rehearse --config nodes=[<node>]`: each node's whole DAG (every launch, variant,
# power cap and workload, probes, collect, report) with the engines replaced by stand-ins behind the real
# commands and the GPUs by simulated ones. Everything it writes is under data/rehearsal/<node>/ and
# reports/rehearsal/<node>/; data/results.parquet and reports/ are never touched (stackbench.rehearsal).


rule rehearse:
    params:
        cli=STACKBENCH,
        nodes=lambda wildcards: " ".join(CFG["nodes"]),
        time_scale=CFG["rehearsal"]["time_scale"],
        accept_rate=CFG["rehearsal"]["accept_rate"],
        repeats=CFG["measure"]["repeats"],
    log:
        "logs/rehearsal/rehearse.log",
    shell:
        "{params.cli} rehearse {params.nodes} --time-scale {params.time_scale} --accept-rate {params.accept_rate} "
        "--repeats {params.repeats} 2>&1 | tee {log:q}; exit ${{PIPESTATUS[0]}}"
