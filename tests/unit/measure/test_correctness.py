"""Correctness checks beside the speed figures: loops, greedy agreement, smoke grading, needle, output length."""

from __future__ import annotations

import pytest

from stackbench.measure.correctness import (
    LOOP_THRESHOLD,
    grade,
    is_looping,
    needle_found,
    needle_haystack,
    output_len_ok,
    repetition_ratio,
    strip_reasoning,
)
from stackbench.results.agreement import Agreement, greedy_agreement, mean_agreement

# What a good answer to "Explain why memory bandwidth limits LLM decode speed" looks like: ~500 words of prose.
PROSE = """\
When a language model generates text one token at a time, each step has to read every weight of the network
from memory. A model with eight billion parameters stored in sixteen-bit precision occupies about sixteen
gigabytes, so producing a single token means streaming those sixteen gigabytes through the processor. The
arithmetic itself is cheap by comparison: a matrix-vector product performs roughly two floating-point operations
per weight, and a modern accelerator can execute hundreds of trillions of them each second. The bottleneck is
therefore not computation but the rate at which bytes arrive from high-bandwidth memory.

This explains several observations that surprise newcomers. First, quantizing weights to four bits speeds up
decoding almost in proportion to the bytes saved, even though the dequantization adds work. Second, batching
many requests together raises total throughput dramatically, because one pass over the weights now serves
dozens of sequences instead of one. Third, a larger GPU with more compute but similar bandwidth barely improves
single-stream latency. Engineers often summarize this with the roofline model, which plots achievable
performance against arithmetic intensity and shows decode sitting firmly on the memory-bound slope.

Speculative decoding attacks the same limit from another direction. A small draft model, or extra prediction
heads attached to the main network, proposes several tokens cheaply. The large model then verifies all of them
in a single forward pass, reading its weights once for the whole group. When the guesses are right, several
tokens emerge for the price of one memory sweep; when they are wrong, the system falls back gracefully and loses
only a little time. Acceptance rates depend heavily on the content: boilerplate code and structured formats are
easy to predict, while creative prose is not.

The key-value cache adds a second stream of traffic. Every generated token must attend to all previous tokens,
and their cached keys and values live in the same memory. At short contexts this cost is negligible, yet at
sixty thousand tokens it can rival the weights themselves, which is why long-context decoding slows down and
why compressed cache formats matter. Grouped-query attention shrinks this footprint by sharing keys across
heads, and some recent architectures go further with latent projections.

Practical consequences follow directly. If you want to estimate the ceiling for a given card, divide its
bandwidth by the bytes read per token; real systems typically reach sixty to eighty percent of that figure.
If your measurement exceeds the ceiling, suspect the benchmark before celebrating: perhaps the output collapsed
into repetition, perhaps caching skipped work, or perhaps the reported count excluded something. Careful
measurement keeps the prompt, the output length and the sampling settings fixed, records the software versions,
and repeats each run enough times to estimate the spread rather than trusting a single lucky number.

Finally, remember that power limits and thermal throttling change clocks during long runs. A card held at a
lower power cap may lose only a few percent of decode speed, because memory-bound work leaves the compute units
partly idle anyway, but prefill, which is compute-bound, suffers much more. Reporting these conditions alongside
each figure is what makes comparisons between machines honest.
"""

# Legitimate code with boilerplate: similar methods, repeated "self." and "return" patterns.
CODE = """\
import dataclasses
from typing import Optional


@dataclasses.dataclass
class Account:
    owner: str
    balance: float = 0.0
    history: list = dataclasses.field(default_factory=list)

    def deposit(self, amount: float) -> float:
        if amount <= 0:
            raise ValueError("deposit must be positive")
        self.balance += amount
        self.history.append(("deposit", amount))
        return self.balance

    def withdraw(self, amount: float) -> float:
        if amount <= 0:
            raise ValueError("withdrawal must be positive")
        if amount > self.balance:
            raise ValueError("insufficient funds")
        self.balance -= amount
        self.history.append(("withdraw", amount))
        return self.balance

    def last(self) -> Optional[tuple]:
        return self.history[-1] if self.history else None


def transfer(src: Account, dst: Account, amount: float) -> None:
    src.withdraw(amount)
    dst.deposit(amount)


if __name__ == "__main__":
    alice, bob = Account("alice", 100.0), Account("bob")
    transfer(alice, bob, 30.0)
    print(alice.balance, bob.balance, bob.last())
"""

LOOP = "The answer is 42. " * 120

LOOP_CODE = "def f(x):\n    return x\n\n" + "    if x > 0:\n        x = x - 1\n        return f(x)\n" * 60


def test_prose_is_not_looping():
    ratio = repetition_ratio(PROSE)
    assert len(PROSE.split()) > 450
    assert ratio == 0  # none of its 518 word 4-grams repeats an earlier one
    assert not is_looping(ratio)


def test_boilerplate_code_is_not_looping():
    ratio = repetition_ratio(CODE)
    # 107 words, 104 4-grams: withdraw's signature and first check repeat deposit's ("amount: float) -> float:
    # if amount <= 0: raise", six 4-grams), and "amount)) return self.balance def" repeats once.
    assert ratio == pytest.approx(7 / 104)
    assert not is_looping(ratio)


def test_greedy_loop_is_looping():
    ratio = repetition_ratio(LOOP)
    # 480 words, 477 4-grams: the first 4 are new (one cycle), the other 473 repeat.
    assert ratio == pytest.approx(473 / 477)
    assert is_looping(ratio)


def test_code_loop_is_looping():
    ratio = repetition_ratio(LOOP_CODE)
    # 4 + 60 x 11 words, 661 4-grams: the 15 that start in the header or the first body are new, 646 repeat.
    assert ratio == pytest.approx(646 / 661)
    assert is_looping(ratio)


def test_prose_then_loop_crosses_threshold_only_when_loop_dominates():
    # A good start that falls into a loop: flagged once the loop is most of the output.
    half = PROSE + " " + "The answer is 42. " * 40  # ~160 looping words after ~520 of prose
    mostly = PROSE + " " + "The answer is 42. " * 400
    assert not is_looping(repetition_ratio(half))
    assert is_looping(repetition_ratio(mostly))


def test_repetition_ratio_on_token_ids_and_edges():
    assert repetition_ratio([1, 2, 3, 4, 1, 2, 3, 4]) == pytest.approx(1 / 5)  # (1,2,3,4) again at the end
    assert repetition_ratio([7] * 10, n=1) == pytest.approx(9 / 10)
    assert repetition_ratio([1, 2, 3, 4]) is None  # one 4-gram: nothing can repeat
    assert repetition_ratio([1, 2, 3, 4, 5]) == 0.0
    assert repetition_ratio("") is None
    assert repetition_ratio(["a", "b"], n=1) == 0.0
    with pytest.raises(ValueError):
        repetition_ratio([1, 2, 3], n=0)


def test_is_looping_threshold():
    assert LOOP_THRESHOLD == 0.5
    assert not is_looping(None)
    assert not is_looping(0.5)
    assert is_looping(0.51)
    assert is_looping(0.3, threshold=0.2)


def test_greedy_agreement_identical_and_divergent():
    assert greedy_agreement([1, 2, 3], [1, 2, 3]) == Agreement(1.0, None)
    assert greedy_agreement([1, 2, 3, 4], [1, 2, 9, 4]) == Agreement(0.5, 2)
    assert greedy_agreement([1, 2, 3, 4], [9, 2, 3, 4]) == Agreement(0.0, 0)
    assert greedy_agreement("abc", "abd") == Agreement(pytest.approx(2 / 3), 2)


def test_greedy_agreement_prefixes_and_empty():
    assert greedy_agreement([1, 2, 3, 4], [1, 2]) == Agreement(0.5, 2)  # candidate stopped early
    assert greedy_agreement([1, 2], [1, 2, 3, 4]) == Agreement(1.0, 2)  # candidate ran on
    assert greedy_agreement([], []) == Agreement(1.0, None)
    assert greedy_agreement([], [1]) == Agreement(0.0, 0)
    assert greedy_agreement([1], []) == Agreement(0.0, 0)


def test_agreement_is_frozen():
    with pytest.raises(AttributeError):
        greedy_agreement([1], [1]).output_agreement = 0.0


def test_mean_agreement():
    pairs = [([1, 2, 3, 4], [1, 2, 3, 4]), ([1, 2, 3, 4], [1, 2, 3, 9]), ([1, 2, 3, 4], [1, 9, 9, 9])]
    assert mean_agreement(pairs) == Agreement(pytest.approx((1 + 0.75 + 0.25) / 3), 1)
    assert mean_agreement(iter([([1], [1]), ([2, 3], [2, 3])])) == Agreement(1.0, None)
    with pytest.raises(ValueError):
        mean_agreement([])


def test_strip_reasoning():
    assert strip_reasoning("<think>Maybe Lyon? No.</think>\nParis") == "Paris"
    assert strip_reasoning("<THINK>a</THINK>b<think>c</think>d") == "bd"
    assert strip_reasoning("Lyon or Paris... I pick.</think> Paris") == "Paris"  # opening tag was in the prompt
    assert strip_reasoning("<think>thinking until max_tokens ran out") == ""
    assert strip_reasoning("  plain answer ") == "plain answer"


def test_grade_contains_and_any_of():
    assert grade("The capital is PARIS.", {"contains": "paris"})
    assert not grade("The capital is Lyon.", {"contains": "Paris"})
    assert grade("Paris, France", {"contains": ["paris", "france"]})
    assert not grade("Paris, Texas", {"contains": ["paris", "france"]})
    assert grade("首都是巴黎。", {"any_of": ["Paris", "巴黎"]})
    assert not grade("首都是里昂。", {"any_of": ["Paris", "巴黎"]})


def test_grade_ignores_reasoning():
    assert not grade("<think>Is it Paris? I'd say Lyon.</think>Lyon", {"contains": "Paris"})
    assert grade("<think>17*23... 391</think>The product is 391.", {"number": 391})
    assert not grade("<think>17*23 = 391</think>The product is 381.", {"number": 391})


def test_grade_regex():
    assert grade("Answer: B", {"regex": r"answer:\s*b\b"})
    assert not grade("Answer: BC", {"regex": r"answer:\s*b\b"})


@pytest.mark.parametrize(
    ("answer", "number", "expected"),
    [
        ("17 × 23 = 391.", 391, True),
        ("The result is 3910.", 391, False),
        ("The result is 1391", 391, False),
        ("It is 391.5", 391, False),
        ("It is 391.0", 391, True),
        ("About 1,234 people", 1234, True),
        ("About 1234 people", 1234, True),
        ("Population 1,234,567.", 1234567, True),
        ("Population 1,234,567.", 234, False),
        ("It fell to -5 degrees", -5, True),
        ("It fell 5 degrees", -5, False),
        ("Pi is 3.14", 3.14, True),
        ("Pi is 3.14", 14, False),
        ("no digits here", 0, False),
    ],
)
def test_grade_number(answer, number, expected):
    assert grade(answer, {"number": number}) is expected


def test_grade_combined_and_bad_rules():
    assert grade("Paris has 2,100,000 people", {"contains": "Paris", "number": 2100000})
    assert not grade("Lyon has 2,100,000 people", {"contains": "Paris", "number": 2100000})
    with pytest.raises(ValueError, match="'equals'"):
        grade("Paris", {"equals": "Paris"})
    with pytest.raises(ValueError):
        grade("Paris", {})
    with pytest.raises(ValueError):
        grade("1", {"number": "one"})
    with pytest.raises(ValueError):
        grade("1", {"number": True})


FILLER = (
    "The grass is green. The sky is blue. The sun is bright today.\n\nRivers run to the sea. Mountains stand for ages."
)
NEEDLE = "The secret passphrase is violet lantern."


@pytest.mark.parametrize("target", [200, 2000, 20000])
def test_needle_haystack_length_and_single_needle(target):
    text = needle_haystack(FILLER, target, NEEDLE, 0.5)
    longest_sentence = max(len(s) for s in ["The sun is bright today.", "Rivers run to the sea."]) + 2
    assert target <= len(text) < target + longest_sentence
    assert text.count(NEEDLE) == 1


def test_needle_haystack_depth_on_boundaries():
    assert needle_haystack(FILLER, 5000, NEEDLE, 0.0).startswith(NEEDLE)
    assert needle_haystack(FILLER, 5000, NEEDLE, 1.0).endswith(NEEDLE)
    for depth in (0.25, 0.5, 0.75):
        text = needle_haystack(FILLER, 5000, NEEDLE, depth)
        at = text.index(NEEDLE)
        assert abs(at / len(text) - depth) < 0.01
        assert text[at - 2 : at] in (". ", ".\n")  # after a full sentence
        after = text[at + len(NEEDLE) : at + len(NEEDLE) + 3]
        assert after[0] in " \n" and after.lstrip()[0].isupper()  # before a full sentence


def test_needle_haystack_keeps_paragraphs_and_edges():
    text = needle_haystack(FILLER, 1000, NEEDLE, 0.5)
    assert "today.\n\nRivers" in text and "ages.\n\nThe grass" in text
    assert needle_haystack(FILLER, 10, NEEDLE, 0.5) == NEEDLE  # the needle alone already fills it
    assert needle_haystack("No full stop here", 60, NEEDLE, 1.0) == ("No full stop here\n\nNo full stop here " + NEEDLE)
    with pytest.raises(ValueError):
        needle_haystack(FILLER, 1000, NEEDLE, 1.5)
    with pytest.raises(ValueError):
        needle_haystack("  \n\n ", 1000, NEEDLE, 0.5)


def test_needle_found():
    assert needle_found("The passphrase is VIOLET\n  lantern.", "violet lantern")
    assert not needle_found("The passphrase is violet lamp.", "violet lantern")
    assert not needle_found("<think>maybe violet lantern?</think>I don't know.", "violet lantern")
    assert needle_found("<think>searching</think> violet lantern", "Violet  Lantern")
    with pytest.raises(ValueError):
        needle_found("anything", "  ")


def test_output_len_ok():
    assert output_len_ok(512, 512, 512)
    assert output_len_ok(512, 511, 512)  # last token came in a chunk with no text
    assert output_len_ok(512, 513, 512)  # usage-only final chunk counted
    assert not output_len_ok(512, 510, 512)
    assert not output_len_ok(512, 300, 300)  # stopped early (EOS honoured despite min_tokens)
    assert not output_len_ok(512, 513, 513)  # server overshot
    assert output_len_ok(512, None, 512)
    assert not output_len_ok(512, 512, None)
    assert not output_len_ok(512, None, None)


def test_a_number_glued_to_a_word_is_not_that_number():
    assert not grade("t8 t9 t10", {"number": 8})
    assert grade("A spider has 8 legs.", {"number": 8})
