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
in the engine's speculative counters on /metrics. Also the engine's health route, /v1/models and the
routes its adapter reads the server's identity from (info_routes). Every engine format it speaks is
written by that engine's formats (formats.py: in engines/, beside the parser that reads it); the stand-in
keeps only what it simulates: timing, slots, acceptance, the pace.

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
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, fields, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from stackbench.config.rehearsal import STANDIN_NAME, STANDIN_VERSION
from stackbench.engines import DOUBLE_SPEAKS, adapter_for
from stackbench.engines.base import RequestTrace, ServedCounts
from stackbench.rehearsal.calibration import PLAIN_STEP_SHARE, PREFILL_ATTENTION_TOKENS, PREFILL_SHARE
from stackbench.rehearsal.formats import formats_for
from stackbench.rehearsal.simgpu import MEMORY_BOUND_SHARE, load_draw_mw


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
    engine: str = DOUBLE_SPEAKS  # whose formats it speaks (an adapter's engine)
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


# -- a rehearsal's pace: the roofline, the context, the power cap, the time scale ---------------------------
# Decode reaches this share of the bandwidth roofline (weights read once per step). A shape, not a figure.
ROOFLINE_SHARE = PLAIN_STEP_SHARE
# NVFP4 (or MXFP4) on a GPU without FP4 tensor cores (host/boards.py fp4_unpacked): vLLM runs it weight-only
# through its Marlin FP4 kernels (vllm/model_executor/layers/quantization/utils/marlin_utils_fp4.py: "Weight-only
# FP4 compression will be used leveraging the Marlin kernel"): the 4-bit weights are read (the roofline's bytes)
# and unpacked to BF16 in the kernel, and prefill runs in BF16 (boards.math_format). What the unpacking costs a
# decode step: one public measurement, a decode profile of Qwen3.6-27B on 2x RTX 5060 Ti (vLLM 0.21, TP 2, CUDA
# graphs, no speculation, 2026-07-10): the NVFP4 checkpoint through Marlin FP4 at 23.2 tok/s, the same weights in
# INT4 through GPTQ-Marlin at 39.2. A step reaches that ratio of the share an INT4 step does, on any GPU without
# FP4 tensor cores: a shape from one GPU, not a Hopper measurement.
UNPACKED_FP4_SHARE = 23.2 / 39.2
# Speed against power: rate = rate uncapped x (min(cap, demand) / demand) ** CAP_EXPONENT, the demand being what
# the phase asks for (simgpu.load_draw_mw: a prefill the full demand, a decode far less), so a cap above a
# phase's demand costs it nothing. Memory-bound decode loses less than proportionally to power; the exponent is
# the double's, no GPU's measurement.
CAP_EXPONENT = 0.5
# Prefill of a short prompt where the GPU's tensor peak is not known (host/boards.py TENSOR_TFLOPS; a CPU node):
# this many times the single-stream decode rate at ROOFLINE_SHARE. Elsewhere it is the compute roofline (each
# token 2 flops per parameter over the TP group's tensor peak, prefill_roofline_tps) at PREFILL_SHARE.
PREFILL_PER_DECODE = 40.0
# The shape of context, attention over the KV in use:
# - decode: each step reads the weights and the request's KV so far, so a step at context c takes
#   (1 + c x kv_share) times a short one, kv_share = KV bytes per token / weight bytes (per GPU). Seed 000
#   (Qwen3.8-27B INT4, fp8 KV, 32 KiB a token over ~15 GB of weights) gives 1 + 128K x 32 KiB / 15 GB = 1.28;
#   its own figures: 86.1 t/s at accept 3.56 short, 31.5 t/s at accept 1.68 at 128K, 1.29 times the time
#   per verify step.
# - prefill: the token at position c costs (1 + c / PREFILL_ATTENTION_TOKENS) times a short prompt's (its
#   attention's flops grow with c, its weights' do not), so a prompt of n tokens averages the short rate /
#   (1 + n / (2 x PREFILL_ATTENTION_TOKENS)). Both PREFILL_* are fitted to seed 000 (calibration.py). Both terms are flops split
#   alike over a TP group, so the shape carries to any GPU and TP where prefill is compute-bound.
# Tensor parallelism's cost: each decode step all-reduces the activations twice per layer across the TP group.
# At one token per step the messages are a few KiB, so each all-reduce costs its latency, not bandwidth: NCCL's
# small-message latency, a stated shape per interconnect (over NVLink a few us; over PCIe without peer access
# through host memory, tens of us), not a measurement. Prefill's all-reduces are bandwidth-bound and left out.
ALLREDUCE_S = {"nvlink": 8e-6, "pcie": 25e-6}


def allreduce_s_per_step(layers: int, tp: int, interconnect: str | None) -> tuple[float, str]:
    """(seconds each decode step spends in all-reduces, what the model assumed or why it is not modeled)."""
    if tp < 2:
        return 0.0, ""
    if interconnect not in ALLREDUCE_S:
        return 0.0, (f"TP {tp} all-reduce not modeled: no interconnect known for the node ({interconnect or 'none'}; "
                     "hardware.interconnect pcie or nvlink)")
    seconds = 2 * layers * ALLREDUCE_S[interconnect]
    return seconds, (f"TP {tp} over {interconnect}: 2 all-reduces x {layers} layers x {ALLREDUCE_S[interconnect] * 1e6:g} us "
                     f"= {seconds * 1e3:.2f} ms per decode step (a shape, rehearsal/standin.py ALLREDUCE_S)")


# A cell's clock: the rehearsal's time scale, slowed (cell_time_scale) for a cell
# - whose shortest reply would decode in under CELL_WINDOW_S here: a client measures a decode from the first token it
#   reads to the last, and at x50 a 32-token reply decoded in 2 ms; a client that read it a few ms late (this host's
#   other work) found every later token waiting at once: decodes of 20x the roofline (issue 60);
# - whose streams together would step more than HOST_STEPS_PER_S times a second here: at x50 32 streams asked this
#   host for 550,000 chunks a second, and the cell measured what the host kept up with (an aggregate of 848 tok/s where
#   the pace gives 8,000), a stream's decode at once faster than the aggregate. One stream at x50, 17,000 a second,
#   kept the pace on this 2-core machine; the bound is that, not a measurement of any other host.
# Every figure of the cell is read at its own scale (rehearsal/backend.py): the cell costs more seconds here, never
# another pace.
CELL_WINDOW_S = 0.03
HOST_STEPS_PER_S = 20_000


def cell_time_scale(facts: dict, time_scale: float, reply_tokens: int, streams: int = 1) -> float:
    """The time scale of a cell of `streams` streams whose shortest reply has `reply_tokens` tokens: the rehearsal's,
    or less, down to real time, so that reply decodes in at least CELL_WINDOW_S here and the streams step at most
    HOST_STEPS_PER_S times a second, each at the pace's fastest (uncapped, no context)."""
    steps_per_s = step_share(facts) * facts["roofline_decode_tps"]
    decode_s = max(reply_tokens - 1, 0) / (steps_per_s * tokens_per_step(facts))
    return min(float(time_scale), max(1.0, min(decode_s / CELL_WINDOW_S, HOST_STEPS_PER_S / (max(streams, 1) * steps_per_s))))


# Ready time: the engine's start (process, CUDA context, graphs) plus the weights read at this rate.
STARTUP_S = 20.0
LOAD_BYTES_PER_S = 2e9
# Where chunks carry several tokens, the stand-in sends them no closer than this (real seconds): a
# fast-forwarded decode coalesces steps.
MIN_CHUNK_S = 0.004


def prefill_tps(facts: dict) -> float:
    """A short prompt's prefill rate uncapped: the launch's compute roofline at the fitted share (engine_facts'
    prefill_roofline_tps), else PREFILL_PER_DECODE times decode at ROOFLINE_SHARE; never the speculative pace (a
    prompt is prefilled once, drafts or not)."""
    roofline = facts.get("prefill_roofline_tps")
    if roofline:
        return PREFILL_SHARE * float(roofline)
    return PREFILL_PER_DECODE * ROOFLINE_SHARE * facts["roofline_decode_tps"]


def prefill_s(facts: dict, processed_tokens: int, cached_tokens: int = 0) -> float:
    """Real seconds to prefill positions cached..cached + processed uncapped: the integral of the per-position
    cost above (the cached ones are not computed again)."""
    n, end = max(processed_tokens, 1), cached_tokens + max(processed_tokens, 1)
    positions = n + (end ** 2 - cached_tokens ** 2) / (2 * PREFILL_ATTENTION_TOKENS)
    return positions / prefill_tps(facts)


def step_share(facts: dict) -> float:
    """The share of the bandwidth roofline a verification step reaches: fitted to a post or the stated shape
    (launcher: facts' step_share), times UNPACKED_FP4_SHARE where an FP4 checkpoint is unpacked."""
    return float(facts.get("step_share") or ROOFLINE_SHARE) * float(facts.get("kernel_share") or 1.0)


def batch_s(facts: dict, streams: int) -> float:
    """Real seconds a decode step spends on the math of the batch's other requests, with `streams` in it: (streams - 1)
    x tokens per step at the prefill's compute rate (prefill_tps: the same matmuls over more rows). A single stream's
    own math is in the step's share already (fitted to single-stream posts). Beside the step's weight reads (one per
    step, whatever the batch) it is what batching costs: per-stream decode falls as it grows, and the aggregate
    bends to a knee where the math outweighs the reads."""
    return (max(streams, 1) - 1) * tokens_per_step(facts) / prefill_tps(facts)


def step_s(facts: dict, streams: int = 1) -> float:
    """Real seconds of one decode step uncapped at no context: the weight reads at the step's share of the roofline
    plus the batch's math (batch_s)."""
    return 1 / (step_share(facts) * facts["roofline_decode_tps"]) + batch_s(facts, streams)


def decode_demand_mw(facts: dict, streams: int = 1) -> float | None:
    """What each of the launch's GPUs asks for while `streams` requests decode (simgpu.load_draw_mw): the board
    class's memory-bound share (facts' memory_bound_share) while the step reads, the full demand for the share of
    the step its batch's math takes (batch_s over step_s). The full demand where no idle draw is known."""
    demand, idle = facts.get("demand_mw"), facts.get("idle_mw")
    if not demand or idle is None:
        return demand
    compute = batch_s(facts, streams) / step_s(facts, streams)
    return load_draw_mw(idle, demand, float(facts.get("memory_bound_share") or MEMORY_BOUND_SHARE["gddr"]), compute)


def cap_factor_at(demand_mw: float | None, cap_w: float | None) -> float:
    """(min(cap, demand) / demand) ** CAP_EXPONENT for a phase asking for `demand_mw` on a GPU capped at `cap_w`:
    1 uncapped, without a demand or with the cap above it."""
    if not cap_w or not demand_mw:
        return 1.0
    return (min(cap_w * 1000, demand_mw) / demand_mw) ** CAP_EXPONENT


class Pace:
    """A rehearsal's timing, all divided by `time_scale` (a rehearsal runs faster than real; its basis says by how
    much; the cell's own where the measure job set one, facts' time_scale_file): decode at the step's share of the
    node's bandwidth roofline, prefill at its compute roofline (prefill_tps), both slowing with context by the shape
    above and under a cap by what the phase asks for; the load it runs is reported to the simulated GPUs
    (report_load), whose draw follows it."""

    def __init__(self, facts: dict, gpus=None):
        self.facts = facts
        self.decode_tps = step_share(facts) * facts["roofline_decode_tps"]
        self.scale_file = Path(facts["time_scale_file"]) if facts.get("time_scale_file") else None
        self.scale, self.scale_read = float(facts["time_scale"]), None
        self.kv_share = float(facts.get("kv_share_per_token") or 0.0)
        self.allreduce_s = float(facts.get("allreduce_s_per_step") or 0.0)  # TP's per-step cost (allreduce_s_per_step)
        self.gpus, self.uuids = gpus, list(facts.get("gpu_uuids") or [])
        self.reported: float | None = None
        self.lock = threading.Lock()

    @property
    def time_scale(self) -> float:
        """The current cell's time scale (the file the measure job writes before each cell), else the rehearsal's."""
        if self.scale_file is not None:
            with contextlib.suppress(OSError, ValueError):
                stamp = self.scale_file.stat().st_mtime_ns
                if stamp != self.scale_read:
                    self.scale, self.scale_read = float(self.scale_file.read_text()), stamp
        return self.scale

    def cap_w(self) -> float | None:
        """The lowest power limit among the launch's simulated GPUs, in W (None without any)."""
        if self.gpus is None or not self.uuids:
            return None
        return min(self.gpus.nvmlDeviceGetEnforcedPowerLimit(self.gpus.index_of(u)) for u in self.uuids) / 1000

    def ttft_s(self, processed_tokens: int, cached_tokens: int = 0) -> float:
        """Prefill of the prompt's positions cached..cached + processed, at the full demand's cap factor."""
        factor = cap_factor_at(self.facts.get("demand_mw"), self.cap_w())
        return prefill_s(self.facts, processed_tokens, cached_tokens) / factor / self.time_scale

    def slowdown(self, context: int) -> float:
        """How many times a short step's time a decode step takes with `context` tokens of KV in use."""
        return 1 + context * self.kv_share

    def interval_s(self, context: int = 0, streams: int = 1) -> float:
        """Seconds per verification step (one token without speculation) with `context` tokens of KV in use, while
        `streams` requests decode: the weight and KV reads, the batch's math (batch_s) and TP's all-reduces, the
        first two slowed by the cap where the GPUs ask for more (decode_demand_mw)."""
        return (self.slowdown(context) * self.reads_s(streams) + self.fixed_s(streams)) / self.time_scale

    def reads_s(self, streams: int = 1) -> float:
        """Real seconds of a step's weight reads at no context, at the cap's factor for `streams` decoding."""
        return 1 / (self.decode_tps * cap_factor_at(decode_demand_mw(self.facts, streams), self.cap_w()))

    def fixed_s(self, streams: int = 1) -> float:
        """Real seconds of a step that do not grow with its context: the batch's math at the cap's factor, and TP's
        all-reduces."""
        factor = cap_factor_at(decode_demand_mw(self.facts, streams), self.cap_w())
        return batch_s(self.facts, streams) / factor + self.allreduce_s

    def report_load(self, prefilling: int, decoding: int) -> None:
        """Tell the launch's simulated GPUs what they now ask for: the full demand while any prompt prefills
        (compute-bound), the decode's demand at its streams while only decodes run, idle without work."""
        if self.gpus is None or not self.uuids or self.facts.get("idle_mw") is None:
            return
        demand = (self.facts["demand_mw"] if prefilling else decode_demand_mw(self.facts, decoding) if decoding
                  else self.facts["idle_mw"])
        with self.lock:
            if demand != self.reported:
                self.reported = demand
                self.gpus.report_load([self.gpus.index_of(u) for u in self.uuids], demand)


def tokens_per_step(facts: dict) -> float:
    """The expected tokens one verification step emits: 1 + p + ... + p^k for k drafts, each position accepted
    with probability p given the ones before it (accept_rate), as accepted_drafts draws them; 1 without drafts."""
    drafts = int(facts.get("spec_tokens") or 0)
    rate = float(facts.get("accept_rate") or 0.0) if drafts else 0.0
    return sum(rate ** i for i in range(drafts + 1))


def modeled_request_s(facts: dict, prompt_tokens: int, completion_tokens: int, cap_w: float | None = None,
                      streams: int = 1) -> float:
    """The real seconds (the time scale undone) the stand-in models for one request of `streams` decoding together:
    the prefill of its prompt (prefill_s, nothing cached: the rehearsal's stand-in caches nothing) at the full
    demand's cap factor, then (completion - 1) tokens at the expected tokens per step (tokens_per_step), each step's
    reads slowed by the context at the reply's middle (Pace.slowdown), plus the batch's math (batch_s), both slowed
    by the cap where the decode asks for more, plus TP's all-reduces (allreduce_s_per_step). The budget's figure:
    the pace as modeled, never this host's seconds."""
    factor = cap_factor_at(decode_demand_mw(facts, streams), cap_w)
    n = max(int(prompt_tokens), 1)
    ttft = prefill_s(facts, n) / cap_factor_at(facts.get("demand_mw"), cap_w)
    steps = max(int(completion_tokens) - 1, 0) / tokens_per_step(facts)
    slowdown = 1 + (n + completion_tokens / 2) * float(facts.get("kv_share_per_token") or 0.0)
    reads = slowdown / (step_share(facts) * facts["roofline_decode_tps"])
    return ttft + steps * ((reads + batch_s(facts, streams)) / factor + float(facts.get("allreduce_s_per_step") or 0.0))


def ready_s(weight_bytes_per_gpu: float) -> float:
    """The modeled seconds from launch to ready: start-up plus the weights read (each GPU its share at once)."""
    return STARTUP_S + weight_bytes_per_gpu / LOAD_BYTES_PER_S


def roofline_decode_tps(bandwidth_gbs: float, weight_bytes: float, tp: int) -> float:
    """The bandwidth roofline of single-stream decode: each step reads every weight once, spread over the
    TP group's GPUs (research/snakemake_nvml.md section 3)."""
    return bandwidth_gbs * 1e9 * tp / weight_bytes


def prefill_roofline_tps(peak_tflops: float, params: float, tp: int) -> float:
    """The compute roofline of a short prompt's prefill: each token costs 2 flops per parameter, spread over
    the TP group's tensor peaks (the attention over earlier positions is the context shape's)."""
    return peak_tflops * 1e12 * tp / (2 * params)


def ridge_tokens(peak_tflops: float, bandwidth_gbs: float, bits_per_weight: float) -> float:
    """Tokens per decode step at which its math takes as long as its weight reads (2 flops per parameter per
    token against bits_per_weight / 8 bytes per parameter): below it a step is bandwidth-bound."""
    return peak_tflops * 1e12 * bits_per_weight / 8 / (2 * bandwidth_gbs * 1e9)


# -- the engines' formats --------------------------------------------------------------------------------
class Counters:
    """Cumulative speculative and prompt counters, shared by the request threads, served in the engine's
    format (its formats' metrics_exposition)."""

    def __init__(self, engine: str = Timing.engine, facts: dict | None = None):
        self.formats, self.facts = formats_for(engine), facts or {}
        self.lock = threading.Lock()
        self.counts = ServedCounts()

    def step(self, accepted: int, proposed: int) -> None:
        with self.lock:
            c = self.counts
            c.drafts, c.draft_tokens, c.accepted = c.drafts + 1, c.draft_tokens + proposed, c.accepted + accepted
            for position in range(accepted):
                c.per_pos[position] = c.per_pos.get(position, 0) + 1

    def finished(self, prompt: int, cached: int, generated: int) -> None:
        with self.lock:
            c = self.counts
            c.requests, c.prompt, c.cached, c.generated = c.requests + 1, c.prompt + prompt, c.cached + cached, c.generated + generated

    def running(self, change: int) -> None:
        with self.lock:
            self.counts.running += change

    def text(self) -> str:
        with self.lock:
            return self.formats.metrics_exposition(self.counts, self.facts, STANDIN_NAME) + "\n"


def startup_lines(engine: str, facts: dict) -> list[str]:
    """The engine's start-up lines (its formats' startup_log), sized from `facts` (rehearsal.launcher.engine_facts)."""
    return formats_for(engine).startup_log(facts, STANDIN_NAME)


def context_error(engine: str, limit: int, asked: int) -> dict:
    """The engine's 400 for a request over its context, worded so that its adapter's context_limit reads it."""
    message = formats_for(engine).context_error(limit, asked)
    return {"error": {"code": 400, "message": message, "type": "invalid_request_error"}}


def _handler(timing: Timing, counters: Counters, pace: Pace | None, facts: dict):
    slots = threading.BoundedSemaphore(timing.capacity) if timing.capacity else contextlib.nullcontext()
    draws = random.Random(0)  # acceptance draws: seeded, so a rehearsal's acceptance repeats exactly
    draws_lock = threading.Lock()
    jitters = random.Random(1)  # a noisy engine's interval draws, apart from the acceptance draws
    adapter, formats = adapter_for(timing.engine), formats_for(timing.engine)
    phases = {"prefilling": 0, "decoding": 0}  # the requests in each phase now: the load the GPUs draw for
    phases_lock = threading.Lock()

    def enter(phase: str | None, leave: str | None = None) -> int:
        """A request moves from `leave` to `phase` (None: arrives or ends); the pace reports the new load. Returns
        the requests now in flight (prefilling or decoding): the batch a request arriving now decodes in."""
        with phases_lock:
            for name, change in ((phase, 1), (leave, -1)):
                if name:
                    phases[name] += change
            prefilling, decoding = phases["prefilling"], phases["decoding"]
        if pace is not None:
            pace.report_load(prefilling, decoding)
        return prefilling + decoding

    def accepted_drafts() -> int:
        if not timing.accept_rate:
            return timing.tokens_per_chunk - 1
        with draws_lock:
            accepted = 0
            while accepted < timing.spec_tokens and draws.random() < timing.accept_rate:
                accepted += 1
            return accepted

    # The routes a client reads the server's identity from, in the engine's format, with the stand-in's own
    # version so that nothing takes it for the engine.
    info_routes = formats.info_routes(STANDIN_VERSION, facts, timing.capacity or 1, timing.context_len)

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
            if self.path in (adapter.health_path, "/health"):
                self._reply(200, "")
            elif self.path == "/v1/models":
                self._reply(200, json.dumps({"object": "list", "data": [
                    {"id": facts.get("served_model_name", "synthetic"), "object": "model", "owned_by": STANDIN_NAME,
                     **({"max_model_len": timing.context_len} if timing.context_len else {})}]}))
            elif self.path in info_routes:
                self._reply(200, json.dumps(info_routes[self.path]))
            elif self.path == adapter.metrics_path:
                self._reply(200, counters.text(), "text/plain; version=0.0.4")
            else:
                self._reply(404, json.dumps({"error": {"message": f"no route {self.path}"}}))

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == adapter.tokenize_path and timing.tokenize:
                # Whichever text field the engine's tokenize body names (Adapter.tokenize_body).
                text = body.get("prompt", body.get("content", body.get("text", "")))
                ids = list(range(len(text.split())))
                self._reply(200, json.dumps(formats.tokenize_reply(ids, timing.context_len or 4096)))
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
                counters.running(+1)
                try:
                    self._stream(body, prompt_tokens)
                finally:
                    counters.running(-1)

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
            ttft = pace.ttft_s(prompt_tokens - cached, cached) if pace else timing.ttft_s
            call_name = body["tools"][0]["function"]["name"] if body.get("tools") else None
            closing = accuracy_answer(body.get("messages") or [], facts.get("answers") or {},
                                      facts.get("right_share", RIGHT_SHARE))
            calling = False
            # Fast-forwarded steps share a chunk only where the engine's chunks carry several tokens anyway
            # (speculation, or usage on every chunk); otherwise one token per chunk, as the engine streams.
            coalesce = pace is not None and (continuous or timing.accept_rate > 0)

            def send(delta: dict | None, usage: bool, final: bool = False) -> None:
                chunk = {"id": STANDIN_NAME, "object": "chat.completion.chunk", "model": facts.get("served_model_name", "synthetic"),
                         "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": None}]}
                if usage:
                    chunk["usage"] = {
                        "prompt_tokens": prompt_tokens, "completion_tokens": emitted,
                        "total_tokens": prompt_tokens + emitted,
                        "prompt_tokens_details": {"cached_tokens": cached},
                        "completion_tokens_details": {"reasoning_tokens": reasoning_emitted}}
                if final:
                    elapsed_ms = (time.perf_counter() - start) * 1000
                    chunk.update(formats.final_chunk_fields(RequestTrace(
                        prompt_tokens=prompt_tokens, cached=cached, prefill_ms=ttft * 1000,
                        decode_ms=max(elapsed_ms - ttft * 1000, 1e-3), emitted=emitted, steps=steps, proposed=proposed,
                        correct=correct)))
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

            phase = "prefilling"
            batch = enter(phase)
            # The step at no context, once per request in the batch it arrives to (every request in flight, itself
            # among them: a burst's requests all decode together; the cap is read once, here, before its first token
            # is due); each step's reads then slow with the context it attends over (Pace.slowdown).
            interval = pace.interval_s(streams=batch) if pace else timing.interval_s
            if timing.jitter:
                with draws_lock:
                    interval *= 1 + timing.jitter * (2 * jitters.random() - 1)
            try:
                send({"role": "assistant", "content": ""}, usage=False)
                wait_until(ttft)
                emitted = 1
                reasoning_emitted = 1 if reasoning_budget else 0
                send(text_delta("reasoning_content" if reasoning_emitted else "content", timing.token_text(0), emitted >= output),
                     usage=continuous)
                # The decode's steps are timed from the first token as sent: where this host sent it late (its
                # threads busy), a schedule kept from the request's start would send the steps it missed at once,
                # a decode faster than the pace (issue 60: 21x the roofline).
                last_sent = due = max(ttft, time.perf_counter() - start)
                enter("decoding", leave=phase)
                phase = "decoding"
                pending = {"reasoning_content": "", "content": ""}
                # The weights-and-KV part slows with the context; the batch's math and TP's all-reduces do not.
                fixed = pace.fixed_s(batch) / pace.time_scale if pace else 0.0
                while emitted < output:
                    step = steps + 1
                    accepted = accepted_drafts()
                    tokens = min(accepted + 1, output - emitted)
                    due += (interval - fixed) * (pace.slowdown(prompt_tokens + emitted) if pace else 1.0) + fixed
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
            finally:
                enter(None, leave=phase)

    return Handler


class Server(ThreadingHTTPServer):
    # The queue of connections not yet accepted: socketserver's default is 5, so a cell of 8 or 32 streams had
    # connections past the fifth dropped and retried by the client's TCP a second later (issue 60: TTFT 1 s here,
    # 50 s at the time scale, "aggregate 77 tok/s over 8 streams"). An engine's server queues far more (uvicorn's
    # backlog: 2048).
    request_queue_size = 2048


class StandinEngine:
    """The stand-in served from a thread on `host` and a port (0: a free one)."""

    def __init__(self, timing: Timing = Timing(), port: int = 0, host: str = "127.0.0.1", pace: Pace | None = None,
                 facts: dict | None = None):
        self.timing = timing
        self.counters = Counters(timing.engine, facts)
        self.httpd = Server((host, port), _handler(timing, self.counters, pace, facts or {}))
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
# Run with the Python of the engine's CPU environment (its formats' flag_parser), on the argv after the
# module: the parse fails on an unknown flag, a bad choice or a bad type exactly as the engine's would.
def engine_flags(engine: str, argv: list[str]) -> list[str]:
    """The engine's own flags: the argv after `-m <module>` or the image's entrypoint (the adapter's
    image_entrypoint), a leading positional model (`vllm serve <model>`) turned into --model as the
    module takes it."""
    rest = list(argv)
    entrypoint = list(adapter_for(engine).image_entrypoint)
    if rest[:1] == ["-m"]:
        rest = rest[2:]
    elif rest[:len(entrypoint)] == entrypoint:
        rest = rest[len(entrypoint):]
    if rest and not rest[0].startswith("-"):
        rest = ["--model", *rest]
    return rest


def check_with_engine_parser(engine: str, flags: list[str], envs_dir: Path, pinned: str | None = None) -> str:
    """'ok' or why not checked; raises SystemExit with the parser's message when the engine would refuse. Where the
    environment holds another version than the run pins, 'ok' names the flags checked against that version only."""
    parser = formats_for(engine).flag_parser
    if isinstance(parser, str):
        return f"skipped: {parser}"
    env, source = parser
    ready = envs_dir / env / "ready.json"
    if not ready.exists():
        return f"skipped: {ready} not built (the engine's own {'argparse' if source else 'arguments'} live in that environment)"
    info = json.loads(ready.read_text())
    if source is None:
        unknown = unknown_flags(info["server"], flags)
        if unknown:
            raise SystemExit(f"{STANDIN_NAME}: {engine}'s own arguments (`{Path(info['server']).name} --help`) lack "
                             f"{', '.join(unknown)}")
        checked = f"{env}'s {Path(info['server']).name} --help"
    else:
        done = subprocess.run([info.get("server"), "-c", source, *flags], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise SystemExit(f"{STANDIN_NAME}: {engine}'s own argument parser refuses the command: {last}")
        checked = f"{env}'s argparse"
    # The version checked, said beside the one the real run pins (rehearsal/budget.py): a CPU build may lag it.
    version = str(info.get("version") or "")
    other = pinned and version and not pinned.endswith(version) and not pinned.endswith(version.lstrip("b"))
    names = sorted({flag.split("=", 1)[0] for flag in flags if flag.startswith("--")})
    return (f"ok ({checked}{', version ' + version if version else ''}"
            + (f"; not the pinned {pinned}: {', '.join(names)} unchecked on it" if other else "") + ")")


def unknown_flags(server: str, flags: list[str]) -> list[str]:
    """The options in `flags` that `server --help` does not list (an argv's values are not options)."""
    done = subprocess.run([server, "--help"], capture_output=True, text=True, timeout=60)
    known = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", done.stdout + done.stderr))
    asked = [flag.split("=", 1)[0] for flag in flags if re.match(r"--?[A-Za-z]", flag)]
    return [flag for flag in dict.fromkeys(asked) if flag not in known]


def hold_gpu_memory(gpus, facts: dict) -> None:
    """On the simulated host, hold the memory the engine would (weights and KV pool per GPU) while this
    process lives; on SIGTERM free it after simgpu.RELEASE_S, as a driver frees a context, and exit."""
    held_mib = (facts["weights_gib_per_gpu"] + max(facts["kv_cache_gib"], 0.0)) * 1024
    for uuid in facts["gpu_uuids"]:
        gpus.add_process(gpus.index_of(uuid), os.getpid(), held_mib)

    def release_and_exit(signum, frame):
        gpus.release(os.getpid())
        gpus.end_load()
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
    argv_out = Path(facts["argv_out"])
    argv_out.write_text(json.dumps({"engine": engine, "argv": argv}))
    print(f"{STANDIN_NAME}: TEST DOUBLE standing in for {engine} (no model is loaded, no kernel runs)", flush=True)
    check = None
    try:
        check = check_with_engine_parser(engine, flags, Path(facts["envs_dir"]), facts.get("pinned"))
    except SystemExit as refused:
        check = f"refused: {refused}"
        raise
    finally:  # whether the engine's own parser checked the flags, for the rehearsal's report (rehearsal/budget.py)
        argv_out.write_text(json.dumps({"engine": engine, "argv": argv, "flag_check": check}))
    print(f"{STANDIN_NAME}: argument check {check}", flush=True)
    print(f"{STANDIN_NAME}: pace: {facts.get('compute_basis') or 'prefill by the stated shape'}", flush=True)
    for line in startup_lines(engine, facts):
        print(line, flush=True)
    time.sleep(ready_s(facts["weights_gib_per_gpu"] * 2**30) / float(facts["time_scale"]))  # loading, as modeled
    gpus = NvmlDouble(count=facts["host_gpus"], state_path=Path(facts["gpu_state"]), demand_mw=facts["demand_mw"],
                      uuid_prefix=facts["uuid_prefix"]) if facts.get("gpu_state") else None
    if gpus is not None:
        hold_gpu_memory(gpus, facts)
    timing = Timing(engine=engine, follow_request=1, prompt_tokens=0, cached_prompt_tokens=0, tokens_per_chunk=1,
                    reasoning_tokens=facts["reasoning_tokens"], spec_tokens=facts["spec_tokens"] or 0,
                    accept_rate=facts["accept_rate"] if facts["spec_tokens"] else 0.0, capacity=facts["slots"],
                    context_len=facts["context_len"])
    with StandinEngine(timing, address.port, address.host, Pace(facts, gpus), facts) as server:
        print(f"{STANDIN_NAME}: listening on {server.base_url}", flush=True)
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
