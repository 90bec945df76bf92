# Four-way inference-stack comparison. `snakemake --cores 1 report` runs the whole DAG for the nodes in
# configs/config.yaml: build stack environments, prepare models, one job per server launch, collect,
# report. Rules are thin; the logic is the `stackbench` package in src/.
from snakemake.utils import min_version

min_version("9.0")


configfile: "configs/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/setup.smk"
include: "workflow/rules/measure.smk"
include: "workflow/rules/collect.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/rehearse.smk"


# Everything but the measure jobs runs on the submitting host (under SLURM too): environments, models,
# launch specs, collecting and reporting.
localrules:
    all,
    engine_env,
    smollm2_source,
    dataset,
    prepare_model,
    prepare_hf_model,
    launch_settings,
    plan_launch,
    round_verdict,
    published_part,
    collect,
    report,
    rehearse,


rule all:
    default_target: True
    input:
        rules.report.output,
