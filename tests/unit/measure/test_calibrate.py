"""Prompt lengths in the served model's tokens: each adapter's tokenize request and reply (fixtures from a
real llama-server, and from vLLM's and SGLang's source), the per-request context, and the calibration that
sizes prompts from it (a fake client: the endpoint, or one calibration request where it is missing)."""

import asyncio
import json

import pytest
from launch_helpers import make_launch
from paths import FIXTURES

from stackbench.engines import ADAPTERS
from stackbench.measure import calibrate
from stackbench.measure.client import RequestRecord
from stackbench.measure.workloads import Sizing

TEXT = "The committee met on a Tuesday to review the quarterly figures."  # 12 tokens of SmolLM2
REPLIES = {"llamacpp": "llamacpp/tokenize-b11434-real.json", "vllm": "vllm/tokenize-0.32-from-source.json",
           "sglang": "sglang/tokenize-0.5.23-from-source.json"}


@pytest.mark.parametrize("engine", sorted(REPLIES))
def test_each_adapter_reads_its_engines_tokenize_reply(engine):
    reply = json.loads((FIXTURES / REPLIES[engine]).read_text())
    assert ADAPTERS[engine].token_count(reply) == 12


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_llamacpps_bare_token_list_is_no_count_for_the_engines_that_send_one(engine):
    llamacpp_reply = json.loads((FIXTURES / REPLIES["llamacpp"]).read_text())
    assert ADAPTERS[engine].token_count(llamacpp_reply) is None
    assert ADAPTERS[engine].token_count({"count": True}) is None  # a flag is not a count


def test_an_error_reply_is_no_count():
    assert all(adapter.token_count({"error": "no such route"}) is None for adapter in ADAPTERS.values())


def test_request_bodies_name_the_text_as_each_engine_reads_it():
    assert ADAPTERS["llamacpp"].tokenize_body("m", TEXT) == {"content": TEXT, "add_special": False}
    for engine in ("vllm", "sglang"):
        assert ADAPTERS[engine].tokenize_body("m", TEXT) == {"model": "m", "prompt": TEXT, "add_special_tokens": False}


def test_llamacpp_slots_split_the_context_unless_they_share_one_pool():
    split = make_launch("llamacpp", context_len=4096, server_args={"parallel": 4})
    shared = make_launch("llamacpp", context_len=4096, server_args={"parallel": 4, "kv_unified": True})
    assert ADAPTERS["llamacpp"].request_context(split) == 1024
    assert ADAPTERS["llamacpp"].request_context(shared) == 4096
    assert ADAPTERS["vllm"].request_context(make_launch("vllm", context_len=4096, server_args={"max_num_seqs": 4})) == 4096


class FakeClient:
    """The two calls calibration makes: the tokenize POST and one chat request."""

    model = "served"

    TEMPLATE = 30  # the chat template's own tokens, in every usage.prompt_tokens

    def __init__(self, status: int | None, reply, text_tokens: int | None = None):
        self.status, self.reply, self.text_tokens = status, reply, text_tokens
        self.chats = 0

    def without_extras(self):
        return self

    async def aclose(self):
        pass

    async def post_json(self, path, body):
        return self.status, self.reply

    async def chat(self, messages, output_tokens, stream, turn, final_hook=None):
        self.chats += 1
        copies = messages[0]["content"].count(TEXT)
        counted = None if self.text_tokens is None else self.TEMPLATE + copies * self.text_tokens
        record = RequestRecord(stream=stream, turn=turn, t_submit=0.0, prompt_tokens=counted)
        if counted is None:
            record.status, record.error = "failed", "HTTP 500: boom"
        return record


def size(client, tokens=400):
    return asyncio.run(calibrate.sizing(client, ADAPTERS["llamacpp"], (TEXT,), tokens, {}))


def test_calibration_reads_chars_per_token_from_the_tokenize_endpoint_once():
    client = FakeClient(200, json.loads((FIXTURES / REPLIES["llamacpp"]).read_text()))
    known: dict = {}
    first = asyncio.run(calibrate.sizing(client, ADAPTERS["llamacpp"], (TEXT,), 400, known))
    again = asyncio.run(calibrate.sizing(client, ADAPTERS["llamacpp"], (TEXT,), 900, known))
    assert first.chars_per_token[TEXT] == pytest.approx(len(TEXT) / 12) and client.chats == 0
    assert again.chars_per_token == first.chars_per_token and "/tokenize" in first.how
    # 400 tokens of this text: its words at 12 per sentence, within one word of the target.
    assert len(first.prompt(TEXT).split()) == pytest.approx(400 * len(TEXT.split()) / 12, abs=11)


def test_without_the_endpoint_two_calibration_requests_size_the_prompt_without_the_template():
    client = FakeClient(404, {"error": "no route"}, text_tokens=12)
    sizing = size(client)
    assert client.chats == 2 and sizing.chars_per_token[TEXT] == pytest.approx((len(TEXT) + 1) / 12)
    assert "calibration requests" in sizing.how and "HTTP 404" in sizing.how


def test_neither_endpoint_nor_usage_fails_with_why():
    with pytest.raises(calibrate.CalibrationError, match="HTTP 404.*boom"):
        size(FakeClient(404, None))


def test_a_sized_prompt_ends_on_a_word_and_a_longer_text_is_cut_down():
    sizing = Sizing(5, {TEXT: len(TEXT) / 12})
    cut = sizing.prompt(TEXT)
    assert TEXT.startswith(cut) and cut.split() == TEXT.split()[: len(cut.split())] and 3 <= len(cut.split()) <= 5


def test_an_engine_without_a_tokenize_route_is_sized_from_usage_without_asking_one():
    """The openai-compatible engine: no tokenize POST is sent (FakeClient would answer it 200 with a count)."""
    client = FakeClient(200, {"count": 99}, text_tokens=12)
    sizing = asyncio.run(calibrate.sizing(client, ADAPTERS["openai-compatible"], (TEXT,), 400, {}))
    assert client.chats == 2 and sizing.chars_per_token[TEXT] == pytest.approx((len(TEXT) + 1) / 12)
    assert sizing.how.endswith("(tokenize route: none on this engine)")
