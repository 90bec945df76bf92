"""Prompt sets and load: turn a workload config into the requests a repeat sends, and when it sends them.

A workload's `load` section says how cells drive the server: closed loop (every stream sends its requests
back to back; `requests_per_stream` >= 2 gives a steady-state window) and, for each of `rates`, one open-loop
cell whose requests arrive at that rate (Poisson, constant or gamma, as vLLM `bench serve --request-rate
--burstiness`). Its `slo` section gives the latency limits goodput counts against.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from dataclasses import dataclass, field

import numpy

from stackbench.config.kinds import KINDS
from stackbench.config.model import Load, Workload
from stackbench.models import promptsets

CHARS_PER_TOKEN = promptsets.CHARS_PER_TOKEN  # rough, only to size long prompts; the real count comes back from the server


@dataclass(frozen=True)
class Request:
    """One conversation: the user turns it sends (one unless multi-turn) and its max_tokens, the messages sent
    before its first turn and its tools (a prompt set's or a prompts_file's text), and which text it is."""

    turns: tuple[str, ...]
    output_tokens: int
    salt: str = ""  # the salt at the start of its first turn ("" unsalted): the request files record it
    prefix: tuple[dict, ...] = ()  # messages before the first user turn: a system prompt, a recording's earlier turns
    tools: tuple[dict, ...] = ()  # OpenAI chat-completions tools of this text (BFCL's functions)
    prompt_set: str = ""  # the set, prompts_file or <workload>.yaml the text came from (models/promptsets.texts_of)
    prompt_row: str = ""  # the text's row there

    @property
    def prompt_sha(self) -> str:
        """Its first turn's identity, salt and the messages before it included: paired requests (same round, cell,
        repeat and index on two variants) must have the same (results/pairing.py checks it)."""
        if not self.turns:
            return ""
        text = self.turns[0] if not self.prefix else json.dumps([*self.prefix, self.turns[0]], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


# Common short English words, each one token (with its leading space) in the BPE vocabularies of the
# models served here: four of them make a salt of the same token count every time (16.7 million
# choices), so a salted prompt's length does not move between runs and like rows still pair in a compare.
SALT_WORDS = ("apple", "river", "stone", "cloud", "green", "table", "music", "light", "paper", "house", "water",
              "bread", "chair", "plant", "horse", "glass", "night", "sugar", "train", "field", "dance", "storm",
              "smile", "heart", "clock", "forest", "bridge", "candle", "garden", "window", "silver", "orange",
              "pencil", "rocket", "summer", "winter", "island", "market", "castle", "mirror", "coffee", "camera",
              "planet", "button", "jacket", "yellow", "purple", "circle", "simple", "little", "number", "letter",
              "animal", "bottle", "flower", "friend", "doctor", "school", "travel", "corner", "finger", "butter",
              "ticket", "valley")


def thinking_fields(thinking: bool | None) -> dict:
    """Thinking on or off for one request, as the chat templates of reasoning models read it (Qwen3's
    enable_thinking; llama.cpp, vLLM and SGLang all pass chat_template_kwargs to the template, and templates
    without the key ignore it); None sends nothing: the server's default."""
    return {} if thinking is None else {"chat_template_kwargs": {"enable_thinking": thinking}}


def request_fields(workload: Workload) -> dict:
    """The request body fields a workload sets on every request: thinking and reasoning effort."""
    fields = thinking_fields(workload.thinking)
    if workload.reasoning_effort is not None:
        fields["reasoning_effort"] = workload.reasoning_effort  # OpenAI chat API; vLLM and SGLang take it
    if workload.tool is not None:
        fields["tools"] = [{"type": "function", "function": workload.tool}]  # OpenAI chat API tools
    return fields


def thinking_basis(thinking: bool | None) -> str:
    """The rows' `thinking` basis column."""
    return {True: "on", False: "off", None: "server default"}[thinking]


@dataclass(frozen=True)
class Sizing:
    """Prompts built to about `tokens` tokens of the served model: each prompt text's characters per token
    as measured on the launch (calibrate.chars_per_token), and how they were measured (the rows' note)."""

    tokens: int
    chars_per_token: dict[str, float] = field(default_factory=dict)
    how: str = ""

    def prompt(self, text: str) -> str:
        """The text repeated, then cut at a word boundary, to about `tokens` tokens."""
        target = max(1, round(self.tokens * self.chars_per_token[text]))
        copies = -(-target // len(text))
        built = " ".join([text] * copies)
        if len(built) <= target:
            return built
        cut = built[:target]
        return cut.rsplit(" ", 1)[0] if " " in cut else cut


@dataclass(frozen=True)
class Texts:
    """Where a launch's texts and salts come from (docs/what-to-run.md, "The same texts"): the run's
    `measure.text_seed` and the text round. Both are drawn, never random, so no-spec and every speculative variant
    of a round answer the same requests and their gain is paired request by request (common random numbers, Law &
    Kelton ch. 11). The text round is the launch's round (`measure.texts_across_rounds: new`, the default: each
    round draws new texts of the class, so a verdict covers the class), else 1 on every launch (`same`: a verdict
    covers round 1's texts)."""

    seed: int = 0
    round: int = 1
    cell: str = ""  # the cell's key (workload, load, prompt length, cap): no two cells of a launch share a salt
    repeats: int = 1  # the most repeats a cell runs in a launch: how many texts a round's draw holds (`drawn`)


WARM_UP = -1  # the repeat warm-up requests are salted as: never a measured repeat's texts, so its cache helps none


def salt(texts: Texts, workload: str, index: int, repeat: int) -> str:
    """Conversation `index` of `repeat`'s salt: from a generator seeded by the text seed, the cell (its workload,
    load, prompt length and cap), the index, the repeat and the text round, no other input. Inside one launch every
    request's salt differs (cell, index or repeat differ), so no prefix cache helps across its requests."""
    rng = random.Random(f"{texts.seed}/{texts.cell or workload}/{index}/{repeat}/{texts.round}")
    return "[run " + " ".join(rng.choice(SALT_WORDS) for _ in range(4)) + "] "


@functools.lru_cache(maxsize=64)
def _order(seed: int, workload: str, cell: str, cycle: int, size: int) -> tuple[int, ...]:
    order = list(range(size))
    random.Random(f"{seed}/{workload}/{cell}/{cycle}").shuffle(order)
    return tuple(order)


def drawn(texts: Texts, workload: Workload, count: int, repeat: int) -> list[dict]:
    """The class's texts (promptsets.texts_of) that `repeat`'s `count` conversations answer. The cell's rounds walk
    one permutation of the class, seeded by the text seed, the class and the cell: round r's repeat k takes the
    positions from ((r - 1) x repeats + k) x count on, so every text is sent once before any is sent again, and a
    class used up goes on with a new permutation (cycle). Nothing else enters, so no-spec and every speculative
    variant of a round send the same texts; under `same` every launch is round 1. The warm-up's texts come from
    a generator of their own: they never hold a measured repeat's place."""
    pool = promptsets.texts_of(workload)
    if repeat == WARM_UP:
        rng = random.Random(f"{texts.seed}/{workload.name}/{texts.cell}/warm-up/{texts.round}")
        return [pool[rng.randrange(len(pool))] for _ in range(count)]
    start = ((texts.round - 1) * texts.repeats + repeat) * count
    return [pool[_order(texts.seed, workload.name, texts.cell, cycle, len(pool))[at]]
            for cycle, at in (divmod(position, len(pool)) for position in range(start, start + count))]


@dataclass(frozen=True)
class _Shape:
    """One cell's prompt lengths, as a kind's turns ask for them (config/kinds/base.py PromptShape)."""

    sizing: Sizing | None
    prompt_tokens: list[int] | None

    def sized(self, text: str) -> str:
        return text if self.sizing is None else self.sizing.prompt(text)

    def drawn(self, text: str, index: int, fallback: int | None) -> str:
        if self.sizing is not None:
            return self.sizing.prompt(text)
        if self.prompt_tokens is not None:
            return long_prompt(text, self.prompt_tokens[index])
        return text if fallback is None else long_prompt(text, fallback)


def conversations(workload: Workload, count: int, repeat: int, prompt_tokens: list[int] | None = None,
                  sizing: Sizing | None = None, texts: Texts = Texts()) -> list[tuple[str, list[str], dict]]:
    """For each of `count` conversations, its salt and the user turns it sends, as the workload's kind builds
    them (config/kinds); the salt (`salt`, drawn from `texts`) at the start of each conversation keeps prefix
    caches from helping across requests. `prompt_tokens` sizes each conversation's prompt (synthetic lengths) by repeating its text, as
    long-prefill does; `sizing` builds every prompt to a length in the served model's tokens
    (prompt_tokens_target, ladder points). A kind that draws (config/kinds base.py `draws`) sends, where no length
    is built, the class's texts as `drawn` picks them; the third of each triple is the text ({} where none).
    """
    shape = _Shape(sizing, prompt_tokens)
    picked = drawn(texts, workload, count, repeat) if KINDS[workload.kind].draws and sizing is None \
        and prompt_tokens is None else None
    out = []
    for index in range(count):
        text = picked[index] if picked else {}
        turns = list(text["turns"]) if text else KINDS[workload.kind].turns(workload, index, count, repeat, shape)
        salted = salt(texts, workload.name, index, repeat) if workload.salt else ""
        turns[0] = salted + turns[0]
        out.append((salted, turns, text))
    return out


def requests(workload: Workload, load: Load, count: int, repeat: int, sizing: Sizing | None = None,
             texts: Texts = Texts()) -> list[Request]:
    """`count` requests of one repeat; synthetic lengths are drawn from a generator seeded with
    (seed, repeat), so every run of a repeat asks for the same lengths, and salts from `texts`, so every
    variant of a round sends the same texts."""
    rng = numpy.random.default_rng([load.seed, max(repeat, 0)])  # the warm-up: repeat 0's lengths, texts of its own
    draw = (lambda bounds: [int(n) for n in rng.integers(bounds[0], bounds[1], count, endpoint=True)])
    prompt_tokens = draw(load.input_tokens) if load.input_tokens else None
    outputs = draw(load.output_tokens) if load.output_tokens else [workload.output_tokens] * count
    built = conversations(workload, count, repeat, prompt_tokens, sizing, texts)
    return [Request(tuple(turns), out, salted, tuple(text.get("prefix", ())), tuple(text.get("tools", ())),
                    text.get("set", f"{workload.name}.yaml"), text.get("row", ""))
            for (salted, turns, text), out in zip(built, outputs)]


def arrival_offsets(load: Load, rate: float, repeat: int) -> list[float]:
    """Send times (s after the first) of one open-loop repeat, as vLLM `bench serve` draws them: the first
    request at once, then gaps from a gamma distribution of shape `burstiness` and mean 1/rate (Poisson
    arrivals at burstiness 1), or exactly 1/rate for `constant`. Ends at `requests` requests or before
    `duration_s` seconds."""
    rng = numpy.random.default_rng([load.seed, repeat, 1])
    shape = 1.0 if load.arrival == "poisson" else load.burstiness

    def gap() -> float:
        return 1.0 / rate if load.arrival == "constant" else float(rng.gamma(shape, 1.0 / (rate * shape)))

    offsets = [0.0]
    while True:
        if load.requests is not None and len(offsets) >= load.requests:
            return offsets
        following = offsets[-1] + gap()
        if load.duration_s is not None and following >= load.duration_s:
            return offsets
        offsets.append(following)


def long_prompt(passage: str, prompt_tokens: int) -> str:
    """Repeat a passage up to about `prompt_tokens`, then ask a question about it."""
    target = prompt_tokens * CHARS_PER_TOKEN
    copies = max(1, target // max(1, len(passage)))
    return passage * copies + "\nSummarise the text above in one sentence."
