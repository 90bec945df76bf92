# The boundary between measuring and reporting: every part lands in data/results.parquet (the contract).


rule published_part:
    # The seeds' figures, with the geometry of their model (configs/models) as rows of their own.
    input:
        published=sorted(Path(PATHS["published"]).glob("*.yaml")),
        models=sorted(Path("configs/models").glob("*.yaml")),
    output:
        f"{PATHS['parts']}/published.parquet",
    params:
        cli=STACKBENCH,
        data_dir=lambda wildcards, input: Path(input.published[0]).parent,
    log:
        "logs/collect/published_part.log",
    shell:
        "{params.cli} published --data-dir {params.data_dir:q} --out {output:q} > {log:q} 2>&1"


rule collect:
    input:
        rules.published_part.output,
        measured_parts(),
    output:
        PATHS["results"],
    params:
        cli=STACKBENCH,
        gone=parts_gone(),
        kept=kept_parts(),
    log:
        "logs/collect/collect.log",
    shell:
        "{params.cli} collect {input:q} --kept {params.kept:q} --out {output:q} > {log:q} 2>&1"
