"""TEST DOUBLE: an engine written from scratch in one file, as an owner would add one (docs/architecture.md, "add an
engine"): a subclass of the base under @register that overrides only what differs from a plain OpenAI-compatible
server. It reads the synthetic engine (rehearsal/standin.py), which streams usage on its last chunk when asked and
serves the plain OpenAI routes; it is never registered in the package (tests/integration/test_measure_synthetic.py
loads this file and removes it from the registry again)."""

from stackbench.engines.base import Adapter, register


@register
class ToyAdapter(Adapter):
    engine = "toy"
    engine_label = "Toy engine"

    def request_extras(self, launch, output_tokens, reuse_prefix=True) -> dict:
        # OpenAI's stream_options: the token counts on the last chunk (the one request field the toy adds)
        return {"stream_options": {"include_usage": True}}
