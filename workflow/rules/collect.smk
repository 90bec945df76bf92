# The boundary between measuring and reporting: every part lands in data/results.parquet (the contract).


rule published_part:
    input:
        sorted(Path(PATHS["published"]).glob("*.yaml")),
    output:
        f"{PATHS['parts']}/published.parquet",
    shell:
        "{STACKBENCH} published --data-dir {PATHS[published]} --out {output}"


rule collect:
    input:
        rules.published_part.output,
        measured_parts(),
    output:
        PATHS["results"],
    shell:
        "{STACKBENCH} collect {input} --out {output}"
