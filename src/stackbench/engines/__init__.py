"""The engines, one module each, registered by name (base.register): importing this package imports every module
in it, so a new engine is one new file here (plus its stack YAML and its pinned environment)."""

import importlib
import pkgutil

from stackbench.engines.base import ADAPTERS, Adapter, kv_accounting_columns

# Every module of the package: an engine's module registers it as it is imported (the helpers register nothing).
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

# Each engine's formats as the rehearsal's stand-in writes them (rehearsal/formats.py says what one has), keyed alike.
FORMATS = {engine: adapter.formats for engine, adapter in ADAPTERS.items() if adapter.formats is not None}
# The engine whose formats a test double (rehearsal/standin.py Timing) speaks unless told otherwise: vLLM's server
# is the OpenAI API as the others extend it.
DOUBLE_SPEAKS = "vllm"


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
