"""Prompt salts: drawn, never random, so every variant of a round answers the same texts (docs/what-to-run.md);
inside one launch each request's salt differs, and a salt never moves a prompt's token count."""

import dataclasses
import re
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stackbench.config import load_schema
from stackbench.config.model import Load, Workload
from stackbench.measure import workloads
from stackbench.measure.runner import CellRunner

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


# --- New texts every round, drawn from the class (docs/prompt-sets.md) ---

def _class(size: int) -> Workload:
    """A class of `size` texts, as the plan gives a prompt set's (promptsets.texts_from)."""
    texts = tuple({"set": "humaneval", "row": f"HumanEval/{i}", "category": "", "prefix": [], "turns": [f"def f{i}(): ..."],
                   "tools": []} for i in range(size))
    return Workload(name="code", kind="single", prompts=(), output_tokens=48, prompt_tokens=None, turns=1, salt=True,
                    concurrency=(1, 2), prompts_from=({"set": "humaneval"},), texts=texts)


def _rows(texts: workloads.Texts, workload: Workload, count: int, repeats: int) -> list[str]:
    return [t["row"] for repeat in range(repeats) for t in workloads.drawn(texts, workload, count, repeat)]


@given(st.integers(0, 2**31), st.integers(1, 6), st.integers(1, 3))
def test_rounds_draw_disjoint_texts_until_the_class_is_used_up(seed, rounds, count):
    workload = _class(40)
    drawn = [row for r in range(1, rounds + 1) for row in _rows(workloads.Texts(seed, r, "code--c1--nocap", 2), workload, count, 2)]
    assert len(drawn) == rounds * 2 * count <= 40 and len(set(drawn)) == len(drawn)


def test_a_class_used_up_goes_on_with_a_new_permutation_each_text_once_per_pass():
    workload = _class(5)
    drawn = [row for r in range(1, 6) for row in _rows(workloads.Texts(0, r, "code--c1--nocap", 1), workload, 2, 1)]
    passes = [drawn[:5], drawn[5:10]]
    assert all(sorted(p) == sorted(t["row"] for t in workload.texts) for p in passes) and passes[0] != passes[1]


def test_every_variant_of_a_round_sends_the_same_texts_and_each_round_new_ones():
    workload = _class(164)
    no_spec = workloads.requests(workload, Load(), 2, 0, texts=workloads.Texts(7, 3, "code--c2--nocap", 2))
    ngram = workloads.requests(workload, Load(), 2, 0, texts=workloads.Texts(7, 3, "code--c2--nocap", 2))
    next_round = workloads.requests(workload, Load(), 2, 0, texts=workloads.Texts(7, 4, "code--c2--nocap", 2))
    assert no_spec == ngram and [r.prompt_sha for r in no_spec] == [r.prompt_sha for r in ngram]
    assert not {r.prompt_row for r in no_spec} & {r.prompt_row for r in next_round}
    assert all(r.prompt_set == "humaneval" and r.prompt_row.startswith("HumanEval/") for r in no_spec)


@pytest.mark.parametrize(("across", "text_round"), [("new", 3), ("same", 1)])
def test_a_launch_draws_its_rounds_texts_unless_texts_are_kept(across, text_round):
    """runner.texts_of: round 3's launch draws round 3's texts under `new` (the default), round 1's under `same`;
    a round's draw holds the cell's most repeats."""
    measure = SimpleNamespace(texts_across_rounds=across, text_seed=7, most_repeats=2)
    spec = SimpleNamespace(measure=measure, launch=SimpleNamespace(replicate=3))
    cell = SimpleNamespace(key="code--c1--nocap")
    assert CellRunner("http://x", None, spec, None).texts_of(cell) == workloads.Texts(7, text_round, "code--c1--nocap", 2)


def test_prompts_written_in_the_yaml_name_the_file_and_their_index():
    requests = workloads.requests(_workload(), Load(), 2, 0, texts=workloads.Texts(0, 1, "code--c2--nocap", 1))
    assert sorted((r.prompt_set, r.prompt_row) for r in requests) == [("code.yaml", "0"), ("code.yaml", "1")]


def test_a_texts_system_prompt_and_tools_travel_with_its_request_and_enter_its_identity():
    text = {"set": "bfcl-simple", "row": "simple_python_0", "category": "", "turns": ["Area of a 10 x 5 triangle?"],
            "prefix": [{"role": "system", "content": "Use the tools."}],
            "tools": [{"type": "function", "function": {"name": "area", "parameters": {"type": "object"}}}]}
    workload = dataclasses.replace(_class(1), texts=(text,))
    request = workloads.requests(workload, Load(), 1, 0, texts=workloads.Texts(0, 1, "c", 1))[0]
    assert request.prefix == tuple(text["prefix"]) and request.tools == tuple(text["tools"])
    bare = dataclasses.replace(request, prefix=())
    assert request.prompt_sha != bare.prompt_sha  # another system prompt is another request to pair against


def test_a_class_whose_set_was_not_fetched_says_so():
    workload = dataclasses.replace(_class(3), texts=())
    with pytest.raises(ValueError, match="code: the texts of humaneval are not in the launch spec"):
        workloads.requests(workload, Load(), 1, 0)


def test_new_texts_every_round_is_the_default():
    assert load_schema("config")["properties"]["measure"]["properties"]["texts_across_rounds"]["default"] == "new"
