"""One adapter per engine, in a plain dict keyed by the results contract's stack name."""

from .llamacpp import LlamaCppAdapter
from .sglang import SglangAdapter
from .vllm import VllmAdapter

ADAPTERS = {"llamacpp": LlamaCppAdapter(), "sglang": SglangAdapter(), "vllm": VllmAdapter()}


def adapter_for(engine: str):
    try:
        return ADAPTERS[engine]
    except KeyError:
        raise KeyError(f"no adapter for engine {engine!r}; known: {', '.join(sorted(ADAPTERS))}") from None
