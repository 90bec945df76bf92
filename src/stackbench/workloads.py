"""Prompt sets: turn a workload config into the chat conversations one repeat sends."""

from __future__ import annotations

import secrets

from .plan import Workload

CHARS_PER_TOKEN = 4  # rough, only to size long prompts; the real count comes back from the server


def salt() -> str:
    return f"[run {secrets.token_hex(6)}] "


def conversations(workload: Workload, concurrency: int, repeat: int) -> list[list[str]]:
    """For each concurrent stream, the user turns it sends (one turn unless the workload is multi-turn).

    Streams and repeats rotate through the prompt list, so a cell sees every prompt; a random salt at the
    start of each conversation keeps prefix caches from helping across requests.
    """
    out = []
    for stream in range(concurrency):
        if workload.kind == "multi-turn":
            turns = list(workload.prompts[: workload.turns])
        else:
            prompt = workload.prompts[(repeat * concurrency + stream) % len(workload.prompts)]
            if workload.kind == "long-prefill":
                prompt = long_prompt(prompt, workload.prompt_tokens or 1024)
            turns = [prompt]
        if workload.salt:
            turns[0] = salt() + turns[0]
        out.append(turns)
    return out


def long_prompt(passage: str, prompt_tokens: int) -> str:
    """Repeat a passage up to about `prompt_tokens`, then ask a question about it."""
    target = prompt_tokens * CHARS_PER_TOKEN
    copies = max(1, target // max(1, len(passage)))
    return passage * copies + "\nSummarise the text above in one sentence."
