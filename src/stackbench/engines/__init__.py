"""One adapter per engine, in a plain dict keyed by the results contract's stack name."""

from stackbench.engines.base import Adapter, kv_accounting_columns
from stackbench.engines.llamacpp import LlamaCppAdapter, LlamaCppFormats
from stackbench.engines.openai_compatible import OpenAICompatibleAdapter
from stackbench.engines.sglang import SglangAdapter, SglangFormats
from stackbench.engines.vllm import VllmAdapter, VllmFormats

ADAPTERS: dict[str, Adapter] = {adapter.engine: adapter for adapter in (LlamaCppAdapter(), SglangAdapter(), VllmAdapter(), OpenAICompatibleAdapter())}
# Each engine's formats as the rehearsal's stand-in writes them (rehearsal/formats.py says what one has), keyed alike.
FORMATS = {formats.engine: formats for formats in (LlamaCppFormats(), SglangFormats(), VllmFormats())}


def adapter_for(engine: str) -> Adapter:
    try:
        return ADAPTERS[engine]
    except KeyError:
        raise KeyError(f"no adapter for engine {engine!r}; known: {', '.join(sorted(ADAPTERS))}") from None


def adapter_for_env(env_name: str) -> Adapter:
    """The adapter of an engine environment: env names are <engine>[-<flavour>] (llamacpp-cuda-sm86, vllm-cpu)."""
    return adapter_for(env_name.split("-", 1)[0])


def flag_parser_env(engine: str) -> str | None:
    """The environment whose copy of the engine's own argument parser checks a rehearsal's flags (its formats'
    flag_parser: a Python source, or llama-server's own --help); None where no parser of it runs here."""
    parser = FORMATS[engine].flag_parser if engine in FORMATS else None
    return parser[0] if isinstance(parser, tuple) else None


def env_with_tool(tool: str) -> str:
    """The engine environment that provides a model recipe's tool (models/recipes.py), as its adapter says."""
    for adapter in ADAPTERS.values():
        if tool in adapter.tools:
            return adapter.tools[tool]
    raise KeyError(f"no engine provides the tool {tool!r}")


def engine_facts(stack: str) -> dict:
    """The columns a row of this stack carries about its engine (results/store.py ENGINE_FACTS); none for a
    stack no adapter knows (a published row may name one)."""
    return kv_accounting_columns(ADAPTERS[stack]) if stack in ADAPTERS else {}
