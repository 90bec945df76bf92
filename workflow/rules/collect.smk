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
    benchmark:
        f"{BENCHMARKS}/published_part.tsv"
    shell:
        "{params.cli} published --data-dir {params.data_dir:q} --out {output:q} > {log:q} 2>&1"


rule collect:
    input:
        published=rules.published_part.output,
        first=first_round_parts(),
        later=later_round_parts,
        looks=first_looks,
    output:
        PATHS["results"],
    params:
        cli=STACKBENCH,
        gone=parts_gone(),
        kept=kept_parts(),
        # Result bundles in data/bundles (docs/bundles.md): a param, so adding or removing one reruns collect.
        bundles=bundle_files(),
    log:
        "logs/collect/collect.log",
    benchmark:
        f"{BENCHMARKS}/collect.tsv"
    shell:
        "{params.cli} collect {input.published:q} {input.first:q} {input.later:q} --kept {params.kept:q} --bundles {params.bundles:q} --out {output:q} > {log:q} 2>&1"


import os


rule bundle:
    # One node's run as a result bundle (docs/bundles.md): `snakemake --cores 1 data/outgoing/<node>.stackbench.tar`.
    # The owner label is STACKBENCH_OWNER, else the node name.
    input:
        results=PATHS["results"],
    output:
        f"{Path(PATHS['results']).parent}/outgoing/{{node}}.stackbench.tar",
    params:
        cli=STACKBENCH,
        runs=RUNS,
        owner=lambda wildcards: os.environ.get("STACKBENCH_OWNER", "") or wildcards.node,
        out_dir=lambda wildcards, output: Path(output[0]).parent,
    log:
        "logs/collect/bundle-{node}.log",
    benchmark:
        f"{BENCHMARKS}/bundle/{{node}}.tsv"
    shell:
        "{params.cli} bundle {wildcards.node:q} --owner {params.owner:q} --results {input.results:q} "
        "--runs {params.runs:q} --out-dir {params.out_dir:q} > {log:q} 2>&1"


localrules:
    bundle,
