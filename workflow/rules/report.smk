# Tables, caveats and charts from data/results.parquet and the posts' table layouts (data/published) only;
# rendering never triggers a measurement. The outputs are marked for `snakemake --report report.zip` too.


rule report:
    input:
        unpack(report_inputs),
        results=PATHS["results"],
        layouts=sorted(Path(PATHS["published"]).glob("*.yaml")),
    output:
        html=report(f"{PATHS['reports']}/index.html", caption="../report/index.rst", category="Report"),
        markdown=report(f"{PATHS['reports']}/report.md", caption="../report/markdown.rst", category="Report"),
        tables=report(directory(f"{PATHS['reports']}/tables"), patterns=["{name}.csv"],
                      caption="../report/tables.rst", category="Tables"),
    params:
        cli=STACKBENCH,
        out_dir=lambda wildcards, output: Path(output.html).parent,
        published_dir=lambda wildcards, input: Path(input.layouts[0]).parent,
        budget=budget_flag,
        kept=kept_flag,
        # Not passed on: the CLI reads each node's rule from its looks in the runs folder, else its node file; a
        # param, so a changed rule renders the report again.
        rules=decision_rules(),
        nodes=CFG["nodes"],
        runs=RUNS,
        launches=f"--launches {CFG['launches']}" if CFG["launches"] else "",
    log:
        "logs/report/report.log",
    benchmark:
        f"{BENCHMARKS}/report.tsv"
    shell:
        "{params.cli} report --results {input.results:q} --out-dir {params.out_dir:q} "
        "--published-dir {params.published_dir:q} {params.budget} {params.kept} --runs {params.runs:q} --nodes {params.nodes:q} "
        "{params.launches} > {log:q} 2>&1"
