"""Prompt salts: drawn, never random, so every variant of a round answers the same texts (docs/what-to-run.md);
inside one launch each request's salt differs, and a salt never moves a prompt's token count."""

import re

from hypothesis import given
from hypothesis import strategies as st

from stackbench.config.model import Load, Workload
from stackbench.measure import workloads

SHAPE = re.compile(r"\[run (\w+) (\w+) (\w+) (\w+)\] ")


def _workload(name="code") -> Workload:
    return Workload(name=name, kind="single", prompts=("Write a sort.", "Fix the bug."), output_tokens=48,
                    prompt_tokens=None, turns=1, salt=True, concurrency=(1, 2))


def test_every_salt_of_one_launch_differs_and_keeps_one_shape():
    texts = workloads.Texts(seed=0, round=1)
    salts = [workloads.salt(texts, "code", index, repeat) for repeat in range(5) for index in range(10)]
    assert len(set(salts)) == len(salts)
    for salt in salts:
        assert set(SHAPE.fullmatch(salt).groups()) <= set(workloads.SALT_WORDS)


@given(st.integers(0, 2**31), st.integers(0, 64), st.integers(0, 8), st.integers(1, 16))
def test_a_salt_is_a_function_of_its_seed_workload_index_repeat_and_round_alone(seed, index, repeat, text_round):
    texts = workloads.Texts(seed, text_round)
    assert workloads.salt(texts, "code", index, repeat) == workloads.salt(workloads.Texts(seed, text_round), "code", index, repeat)


def test_no_spec_and_a_variant_of_one_round_send_the_same_requests():
    texts = workloads.Texts(seed=0, round=1)
    no_spec = workloads.requests(_workload(), Load(), 4, repeat=1, texts=texts)
    variant = workloads.requests(_workload(), Load(), 4, repeat=1, texts=workloads.Texts(seed=0, round=1))
    assert no_spec == variant
    assert [r.prompt_sha for r in no_spec] == [r.prompt_sha for r in variant]
    assert all(r.turns[0].startswith(r.salt) and r.salt for r in no_spec)


def test_the_warm_up_never_sends_a_measured_text_and_new_seeds_or_rounds_draw_new_ones():
    texts = workloads.Texts(seed=0, round=1)
    measured = {r.turns[0] for repeat in range(3) for r in workloads.requests(_workload(), Load(), 4, repeat, texts=texts)}
    warm = {r.turns[0] for r in workloads.requests(_workload(), Load(), 4, workloads.WARM_UP, texts=texts)}
    assert not warm & measured
    for other in (workloads.Texts(seed=1, round=1), workloads.Texts(seed=0, round=2)):
        assert not {r.turns[0] for r in workloads.requests(_workload(), Load(), 4, 0, texts=other)} & measured
    # another workload with the same prompts is salted apart
    assert workloads.salt(texts, "code", 0, 0) != workloads.salt(texts, "json", 0, 0)


def test_no_two_cells_of_a_launch_share_a_prompt():
    """The same workload at c1 and c2 (or at two caps, or two ladder points) would send its request 0 of repeat 0
    twice in one launch, and a prefix cache would serve the second: the cell is in the salt's seed."""
    cells = ("code--c1--nocap", "code--c2--nocap", "code--c1--300W")
    prompts = [r.turns[0] for key in cells for r in workloads.requests(_workload(), Load(), 2, 0, texts=workloads.Texts(0, 1, key))]
    assert len(set(prompts)) == len(prompts)
