# Tables, caveats and charts from data/results.parquet only; rendering never triggers a measurement.


rule report:
    input:
        PATHS["results"],
    output:
        html=f"{PATHS['reports']}/index.html",
        markdown=f"{PATHS['reports']}/report.md",
    shell:
        "{STACKBENCH} report --results {input} --out-dir {PATHS[reports]}"
