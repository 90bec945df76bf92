"""Prompt lengths in the served model's own tokens: calibrated once per launch, then every prompt is sized.

Each prompt text is measured once with the engine's tokenize endpoint (the adapter names it and reads its
reply), giving its characters per token on this model; a prompt of N tokens is then that text repeated and
cut to N x chars-per-token characters (workloads.Sizing). The calibration only sizes the text: the rows'
prompt_tokens is the server's usage.prompt_tokens, the chat template and salt included. A server without
the endpoint (an external one) is sent two calibration requests instead, the text once and twice: the
difference of their usage.prompt_tokens is the text's own length; the rows' note says which was used.
"""

from __future__ import annotations

from stackbench.engines.base import Adapter
from stackbench.measure.client import StreamClient
from stackbench.measure.workloads import Sizing

BY_TOKENIZE = "prompts sized with the engine's {path} (plain text, chat template not counted)"
BY_USAGE = ("prompts sized from usage.prompt_tokens of two calibration requests per prompt, its text once and "
            "twice ({path}: {why})")


class CalibrationError(RuntimeError):
    """Neither the tokenize endpoint nor a calibration request told the prompt's length: the cell fails with it."""


def route(adapter: Adapter) -> str:
    """The tokenize route as the notes name it."""
    return adapter.tokenize_path or "tokenize route"


async def chars_per_token(client: StreamClient, adapter: Adapter, text: str) -> tuple[float, str | None]:
    """Characters per token of `text` on this server, and why the tokenize endpoint was not used (None when
    it was)."""
    if adapter.tokenize_path is None:  # an engine without one (an OpenAI-compatible endpoint): usage alone
        status, reply, why = None, None, "none on this engine"
    else:
        status, reply = await client.post_json(adapter.tokenize_path, adapter.tokenize_body(client.model, text))
        why = "reply not in the engine's format" if status == 200 else f"HTTP {status}" if status else "no answer"
    count = adapter.token_count(reply) if status == 200 and isinstance(reply, dict) else None
    if count:
        return len(text) / count, None
    # Without the endpoint: usage.prompt_tokens of the text once and twice (as Sizing repeats it); the
    # difference is the text's own tokens, the chat template's cancelling out.
    plain = client.without_extras()
    try:
        counted = [await plain.chat([{"role": "user", "content": " ".join([text] * copies)}], 1, 0, 0) for copies in (1, 2)]
    finally:
        await plain.aclose()
    failed = next((r for r in counted if r.status != "ok" or not r.prompt_tokens), None)
    if failed is not None:
        raise CalibrationError(f"prompt sizing: {route(adapter)} gave {why} and the calibration request "
                               f"{failed.error or 'reported no usage.prompt_tokens'}")
    return (len(text) + 1) / max(1, counted[1].prompt_tokens - counted[0].prompt_tokens), why


async def sizing(client: StreamClient, adapter: Adapter, texts: tuple[str, ...], tokens: int,
                 known: dict[str, tuple[float, str | None]]) -> Sizing:
    """The Sizing of `texts` at `tokens`; `known` holds the launch's measurements so far (each text is
    measured once per launch) and is filled in."""
    for text in texts:
        if text not in known:
            known[text] = await chars_per_token(client, adapter, text)
    whys = sorted({known[t][1] for t in texts if known[t][1] is not None})
    how = BY_USAGE.format(path=route(adapter), why=", ".join(whys)) if whys else \
        BY_TOKENIZE.format(path=adapter.tokenize_path)
    return Sizing(tokens, {t: known[t][0] for t in texts}, how)
