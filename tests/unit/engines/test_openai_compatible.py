"""The openai-compatible engine on captured output: llama-server b11434's /v1/models and stream (tests/fixtures/
openai-compatible, captured here), and the real /metrics of vLLM, SGLang 0.5.23's CPU engine and llama-server
(tests/fixtures/<engine>/). It reads what the OpenAI API gives, takes a known engine's /metrics counters through
that engine's own parsers and says which; what the endpoint cannot give reads NOT_REPORTED. Native and image
launches of it are refused at plan."""

import json
import shutil

import httpx
import orjson
import pytest
import yaml
from launch_helpers import make_launch
from paths import FIXTURES, ROOT

from stackbench.config import ConfigError
from stackbench.engines import ADAPTERS
from stackbench.engines.openai_compatible import metrics_read
from stackbench.measure.client import RequestRecord, StreamClient
from stackbench.plan import expand
from stackbench.results.basis import NOT_REPORTED
from stackbench.results.metrics import M

ENGINE = ADAPTERS["openai-compatible"]
OWN = FIXTURES / "openai-compatible"


def endpoint(routes: dict[str, tuple[int, str]]) -> httpx.Client:
    """An httpx client whose transport answers from captured text (a test double of the server); 404 elsewhere."""
    def answer(request: httpx.Request) -> httpx.Response:
        status, text = routes.get(request.url.path, (404, '{"error": "not found"}'))
        return httpx.Response(status, text=text)
    return httpx.Client(transport=httpx.MockTransport(answer))


MODELS = (200, (OWN / "v1-models-llamacpp-b11434-real.json").read_text())


def test_a_llama_server_without_metrics_reports_only_what_the_openai_api_gives():
    report = ENGINE.self_report(endpoint({"/v1/models": MODELS, "/metrics": (501, "")}), "http://own")
    assert report == {"engine_version": NOT_REPORTED, "context_len": None,
                      "engine_setup": "served models: smollm2-135m-q4-1.gguf; metrics: no /metrics route",
                      "not_reported": (M.kv_pool_tokens, M.accept_len)}


def test_vllms_max_model_len_is_the_context_it_reports():
    models = (200, (FIXTURES / "external/vllm-v1-models-from-source.json").read_text())
    report = ENGINE.self_report(endpoint({"/v1/models": models}), "http://vllm")
    assert report["context_len"] == 32768 and report["engine_version"] == NOT_REPORTED


@pytest.mark.parametrize(("capture", "family", "line", "pool", "speculates"), [
    ("vllm/metrics-mtp.txt", "vllm", "metrics: vllm:* exposed (vllm:spec_decode_* read; KV pool 184242 tokens read)",
     184242, True),
    ("llamacpp/metrics-draft.txt", "llamacpp",
     "metrics: llamacpp:* exposed (llamacpp:spec_decode_* read; llamacpp:tokens_predicted_total present)", None, True),
    ("sglang/metrics-0.5.23-cpu-real.txt", "sglang",
     "metrics: sglang:* exposed (sglang:generation_tokens_total present; KV pool 8192 tokens read)", 8192, False),
])
def test_a_known_engines_metrics_are_read_by_its_own_parsers_and_named(capture, family, line, pool, speculates):
    text = (FIXTURES / capture).read_text()
    said, facts, speculating = metrics_read(text)
    assert (said, facts.kv_pool_tokens, speculating) == (line, pool, speculates)
    # the counters are the engine's own adapter's, not a copy's
    assert ENGINE.spec_counters(text) == ADAPTERS[family].spec_counters(text)
    report = ENGINE.self_report(endpoint({"/v1/models": MODELS, "/metrics": (200, text)}), "http://own")
    assert report["engine_setup"].endswith(line)
    assert report["not_reported"] == tuple(m for m, known in ((M.kv_pool_tokens, pool), (M.accept_len, speculates)) if not known)


@pytest.mark.parametrize(("text", "line"), [
    ('{"error": "metrics not enabled"}', "metrics: /metrics is not Prometheus text, none read"),
    ("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n",
     "metrics: no vllm:, sglang: or llamacpp: counters at /metrics, none read"),
])
def test_metrics_of_no_known_family_are_said_to_be_none(text, line):
    assert metrics_read(text)[0] == line
    assert ENGINE.facts_from_metrics(text).kv_pool_tokens is None


def test_the_stream_is_measured_from_the_chunks_and_usage_without_server_timings():
    """llama-server's last chunk carries `timings`; as an OpenAI endpoint they are not read."""
    record = RequestRecord(stream=0, turn=0, t_submit=0.0)
    for at, line in enumerate((OWN / "stream-chat-llamacpp-b11434-real.sse").read_text().splitlines()):
        if line.startswith("data: {"):
            StreamClient._take(record, orjson.loads(line[6:]), line[6:].encode(), 0.1 * at, ENGINE.server_timings)
    assert (record.completion_tokens, record.prompt_tokens) == (8, 34)
    assert record.ttft_s is not None and record.decode_tps is not None and record.server == {}


def test_requests_carry_nothing_beyond_the_openai_api():
    launch = make_launch("openai-compatible", launch_mode="external", launch_target="http://own", context_len=4096)
    assert ENGINE.request_extras(launch, 64) == {} and ENGINE.request_extras(launch, None) == {}
    assert ENGINE.parse_version({"version": "1.2"}) == NOT_REPORTED and ENGINE.tokenize_path is None


@pytest.mark.parametrize("mode", ["native", "image"])
def test_a_launch_it_would_have_to_start_is_refused_at_plan_naming_the_field(tmp_path, mode):
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    path = tmp_path / "configs/nodes/local-cpu.yaml"
    doc = yaml.safe_load(path.read_text())
    launch = {"mode": mode, **({"image": "ollama/ollama@sha256:" + "0" * 64} if mode == "image" else {})}
    doc["runs"], doc["default_stacks"] = [{"stack": "openai-compatible", "model": "smollm2-135m-q4km", "launch": launch}], "all"
    path.write_text(yaml.safe_dump(doc))
    cfg = expand.load_run_config(tmp_path, {"nodes": ["local-cpu"]})
    with pytest.raises(ConfigError, match=r"local-cpu.yaml: runs\[0\].launch.mode \(openai-compatible--nospec\): .* started by its owner"):
        expand.load_node("local-cpu", cfg, tmp_path)
    doc["runs"][0]["launch"] = {"mode": "external", "url": "http://127.0.0.1:11434"}
    path.write_text(yaml.safe_dump(doc))
    planned = expand.load_node("local-cpu", cfg, tmp_path).launches
    assert {(l.engine, l.launch_mode, l.stack) for l in planned} == {("openai-compatible", "external", "openai-compatible")}


def test_the_stack_file_is_schema_valid_and_names_the_engine():
    from stackbench.config import load_file

    doc = load_file(ROOT / "configs/stacks/openai-compatible.yaml", "stack")
    assert doc["engine"] == "openai-compatible" and [v["name"] for v in doc["variants"]] == ["nospec"]
    assert json.dumps(doc["server_args"]) == "{}"
