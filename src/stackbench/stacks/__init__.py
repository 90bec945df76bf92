"""One adapter per engine, in a plain dict keyed by the results contract's stack name."""

from .base import Adapter
from .llamacpp import LlamaCppAdapter
from .sglang import SglangAdapter
from .vllm import VllmAdapter

ADAPTERS: dict[str, Adapter] = {"llamacpp": LlamaCppAdapter(), "sglang": SglangAdapter(), "vllm": VllmAdapter()}


def adapter_for(engine: str) -> Adapter:
    try:
        return ADAPTERS[engine]
    except KeyError:
        raise KeyError(f"no adapter for engine {engine!r}; known: {', '.join(sorted(ADAPTERS))}") from None
