"""Correctness checks beside the speed figures (pure functions, stdlib only): fast wrong output is no result.

- repetition_ratio / is_looping: a long greedy output that falls into a loop is trivially predictable; a seed post
  saw ~100 -> 408 tok/s at ~98 % acceptance. Degenerate output, not a fast engine: flag it, do not rank it.
- grade: smoke questions with rules from the workload file; a wrong loader silently drops weights and the
  server still answers, fast and wrong.
- needle_haystack / needle_found: a context-length figure counts only if the model still reads that far.
- output_len_ok: tok/s compares only when each request produced exactly the tokens it asked for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from itertools import cycle

# 4-gram repeat share, measured in tests/unit/measure/test_correctness.py: ~520 words of varied prose 0.00, code with boilerplate
# 0.07, greedy loops (sentence, code) 0.98-0.99. 0.5 sits far from both: an output that is mostly a loop is flagged
# (prose then loop: 0.23 with a quarter looping, 0.75 with three quarters), honest boilerplate is not.
LOOP_THRESHOLD = 0.5


def repetition_ratio(tokens: Sequence | str, n: int = 4) -> float | None:
    """Share of the n-grams that repeat an n-gram seen earlier in the same output; None below n+1 tokens.

    A str is split on whitespace: a word-level proxy for the token-level ratio (close, not equal).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    seq = tokens.split() if isinstance(tokens, str) else list(tokens)
    if len(seq) < n + 1:
        return None
    seen: set[tuple] = set()
    repeats = 0
    for i in range(len(seq) - n + 1):
        gram = tuple(seq[i : i + n])
        repeats += gram in seen
        seen.add(gram)
    return repeats / (len(seq) - n + 1)


def is_looping(ratio: float | None, threshold: float = LOOP_THRESHOLD) -> bool:
    return ratio is not None and ratio > threshold


_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_CLOSE = re.compile(r"^.*</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>.*$", re.DOTALL | re.IGNORECASE)


def strip_reasoning(text: str) -> str:
    """Drop <think>...</think> blocks, so words inside the reasoning cannot pass a check."""
    text = _THINK_BLOCK.sub("", text)
    # Templates that put "<think>" in the prompt return only the closing tag: everything before it is reasoning.
    text = _THINK_CLOSE.sub("", text)
    # An opening tag never closed (cut at max_tokens) leaves no answer.
    return _THINK_OPEN.sub("", text).strip()


# A number as written: optional sign, thousands groups of three, optional decimals; not part of a longer number
# nor of a word ("t8" is no 8).
_NUMBER = re.compile(r"(?<![\w.,])-?\d+(?:,\d{3})*(?:\.\d+)?(?!\d)")


def _has_number(text: str, target: object) -> bool:
    try:
        want = Decimal(str(target).replace(",", "")) if not isinstance(target, bool) else None
    except InvalidOperation:
        want = None
    if want is None:
        raise ValueError(f"'number' needs a number, got {target!r}")
    return any(Decimal(m.group().replace(",", "")) == want for m in _NUMBER.finditer(text))


def grade(answer: str, rule: Mapping) -> bool:
    """Grade a smoke answer by a workload rule; several keys in one rule must all hold."""
    if not rule:
        raise ValueError("empty grading rule")
    text = strip_reasoning(answer)
    low = text.casefold()
    for key, value in rule.items():
        if key == "contains":
            needed = [value] if isinstance(value, str) else list(value)
            ok = all(str(v).casefold() in low for v in needed)
        elif key == "any_of":
            ok = any(str(v).casefold() in low for v in value)
        elif key == "regex":
            ok = re.search(value, text, re.IGNORECASE) is not None
        elif key == "number":
            ok = _has_number(text, value)
        else:
            raise ValueError(f"unknown grading rule key {key!r} (known: contains, any_of, regex, number)")
        if not ok:
            return False
    return True


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def needle_haystack(filler: str, target_chars: int, needle: str, depth: float) -> str:
    """About target_chars of repeated filler with the needle sentence at a sentence boundary near depth (0..1)."""
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must be within 0..1, got {depth}")
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", filler) if p.strip()]
    if not paragraphs:
        raise ValueError("filler is empty")
    units = [("\n\n" if i == 0 else " ", s) for p in paragraphs for i, s in enumerate(_SENTENCE_END.split(p))]
    needle = needle.strip()
    pieces: list[tuple[str, str]] = []  # (separator before, sentence)
    ends = [0]  # offsets of the sentence boundaries, the only places the needle may go
    for sep, sentence in cycle(units):
        if ends[-1] + len(needle) >= target_chars:
            break
        ends.append(ends[-1] + (len(sep) if pieces else 0) + len(sentence))
        pieces.append((sep, sentence))
    at = min(range(len(ends)), key=lambda k: abs(ends[k] - depth * ends[-1]))
    pieces.insert(at, (" ", needle))
    return "".join((sep if k else "") + sentence for k, (sep, sentence) in enumerate(pieces))


def needle_found(answer: str, passphrase: str) -> bool:
    """The passphrase appears in the answer, ignoring case, line breaks and runs of spaces."""
    want = " ".join(passphrase.split()).casefold()
    if not want:
        raise ValueError("empty passphrase")
    return want in " ".join(strip_reasoning(answer).split()).casefold()


def output_len_ok(requested: int, client_count: int | None, server_count: int | None) -> bool:
    """The request asked min_tokens = max_tokens = requested: the server must report exactly that many.

    The client counts streamed chunks. A last token whose text is empty (a stop or special token) comes in a
    chunk with no text, or the usage-only final chunk gets counted, so client and server may differ by one.
    Missing client count (no stream) is ignored; a missing server count fails: nothing vouches for the length.
    """
    if server_count is None or server_count != requested:
        return False
    return client_count is None or abs(client_count - server_count) <= 1
