"""The metric registry: one entry per metric the summary computes per cell or the report and analyses read,
with its unit, the statistic its row carries, the upstream definition it follows and which direction is
better. measure/summary.py takes its figures' units from here, the analyses and charts their rate metrics,
the report what it loads and charts, and the headline its columns (a metric with `headline` set is shown
there, in this table's order).

Metrics that only one probe or fact step writes (smoke_score, geometry_*, ...) name their unit where they
are made; a test holds every entry here to the rows the summary writes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Headline:
    title: str
    cell: str  # "single": concurrency 1; "single-or-unset": 1 or not stated; "highest": the variant's highest; "any"
    scale: float = 1.0  # display unit: TTFT is stored in s, read in ms


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    stat: str  # the statistic the row carries
    definition: str  # what it measures, after which upstream definition
    better: str | None  # "higher", "lower", or None for a fact of the setup
    group: str = "fact"  # "cell": the summary's per-cell figure over the client's requests; "load": an open- or
    # closed-loop load figure (both medians over repeats, spread_over "repeats", with the median's 95% order-statistic
    # interval, estimators.median_interval, from 6 repeats); "fact": written elsewhere
    ttft_included: str = "no"  # the row's ttft_included: whether the time to first token is inside the figure
    rate: bool = False  # an output-token rate (spread, power sweet spot, power chart)
    analysed: bool = False  # an analysis reads it: the report loads its rows into pandas
    charted: bool = False  # the report's charts read it
    headline: Headline | None = None


def _entries(*metrics: Metric) -> dict[str, Metric]:
    return {m.name: m for m in metrics}


METRICS = _entries(
    # -- per cell, from the client's requests (summary.repeat_figures), median over repeats ---------------
    Metric("decode_tps", "tok/s", "median", "ours: (output tokens - 1) / (first text to the last chunk with choices) per "
           "request, mean over the repeat's requests, TTFT excluded (the inverse of vLLM's TPOT without its role chunk)", "higher", "cell",
           rate=True, analysed=True, charted=True, headline=Headline("decode tok/s", "single")),
    Metric("aggregate_tps", "tok/s", "median", "all output tokens / repeat wall time: vLLM benchmarks/serve.py "
           "\"Output token throughput\"", "higher", "cell", "yes", rate=True, analysed=True, charted=True,
           headline=Headline("aggregate tok/s", "highest")),
    Metric("aggregate_decode_tps", "tok/s", "median", "the sum over streams of each stream's mean decode rate "
           "((output tokens - 1) / (last token - first token)), TTFT excluded: seed 000's \"90.9 + 79.2 = 170.1\" "
           "basis, beside aggregate_tps (wall)", "higher", "cell", rate=True, analysed=True),
    Metric("request_wall_s", "s", "median", "submit to the last chunk with non-empty choices (the usage-only chunk "
           "excluded) per request, mean over requests: vLLM benchmarks/lib/endpoint_request_func.py latency (E2EL); "
           "SGLang bench_serving's latency runs on to [DONE], after the usage chunk",
           "lower", "cell", "yes", analysed=True),
    Metric("request_wall_later_turns_s", "s", "median", "request_wall_s of a conversation's later turns (seed 002's "
           "second round)", "lower", "cell", "yes", analysed=True),
    Metric("batch_wall_s", "s", "median", "first submit to last chunk of a repeat whose streams ran at once (seed "
           "000's two 64K requests: 84.4 s = 2 x 42 s)", "lower", "cell", "yes", analysed=True),
    Metric("stream_overlap", "ratio", "median", "(sum of the streams' spans (first token of a stream's first request to "
           "the last of its last) - their union) / "
           "(sum - longest): 1 side by side, 0 serialised; our own", None, "cell", analysed=True),
    Metric("e2e_tps", "tok/s", "median", "output tokens / (last token - submit) per request, mean over requests",
           "higher", "cell", "yes", rate=True, analysed=True, charted=True),
    Metric("ttft_s", "s", "median", "submit to the first content, reasoning or tool-call text per request, mean "
           "over requests: SGLang bench_serving's TTFT (benchmark/serving.py async_request_openai_chat_completions); "
           "vLLM's TTFT also counts a role-only first chunk (ttfc_s)", "lower", "cell",
           analysed=True, headline=Headline("TTFT ms", "single", 1000.0)),
    Metric("ttfc_s", "s", "median", "submit to the first chunk with non-empty choices (a role-only one "
           "included) per request, mean over requests: vLLM benchmarks/lib/endpoint_request_func.py TTFT", "lower", "cell"),
    Metric("ttft_first_turn_s", "s", "median", "TTFT of a conversation's first turns", "lower", "cell"),
    Metric("ttft_later_turns_s", "s", "median", "TTFT of its later turns (prefix reuse)", "lower", "cell"),
    Metric("prefill_tps", "tok/s", "median", "prompt tokens the engine processed (cached excluded) / client TTFT: "
           "the client-side counterpart of llama.cpp timings.prompt_per_second", "higher", "cell",
           headline=Headline("prefill tok/s", "single")),
    Metric("server_decode_tps", "tok/s", "median", "the engine's own per-request decode rate (llama.cpp "
           "timings.predicted_per_second)", "higher", "cell"),
    Metric("server_prefill_tps", "tok/s", "median", "the engine's own per-request prefill rate (llama.cpp "
           "timings.prompt_per_second)", "higher", "cell"),
    # -- load figures (summary.load_repeat_figures): later requests' prefills fall inside every one ----------
    Metric("request_rps", "req/s", "median", "completed requests / benchmark duration (first submit to last end): "
           "vLLM benchmarks/serve.py \"Request throughput (req/s)\"", "higher", "load", "yes"),
    Metric("goodput_rps", "req/s", "median", "requests within every SLO of the workload / benchmark duration: vLLM "
           "benchmarks/serve.py \"Request goodput (req/s)\"", "higher", "load", "yes"),
    Metric("slo_attainment", "ratio", "median", "share of the repeat's requests within the workload's SLO", "higher",
           "load", "yes"),
    Metric("aggregate_tps_steady", "tok/s", "median", "output tokens while all streams were busy / that span "
           "(ML.ENERGY's steady window)", "higher", "load", "yes"),
    Metric("steady_window_s", "s", "median", "the steady window's length", None, "load", "yes"),
    Metric("aggregate_tps_ramp", "tok/s", "median", "output tokens before the steady window / its span", "higher", "load", "yes"),
    Metric("aggregate_tps_tail", "tok/s", "median", "output tokens after the steady window / its span", "higher", "load", "yes"),
    # -- written by other steps, read by the report -------------------------------------------------------
    Metric("accept_len", "ratio", "mean", "1 + accepted / drafts from the engine's /metrics spec-decode counter "
           "deltas, pooled over the cell", "higher", analysed=True, charted=True, headline=Headline("accept len", "single-or-unset")),
    Metric("kv_pool_tokens", "tokens", "single", "the KV pool's size in tokens, from the server's start-up log",
           "higher", analysed=True, headline=Headline("KV pool tokens", "any")),
    Metric("vram_mib", "MiB", "peak", "NVML nvmlDeviceGetMemoryInfo used, peak over the measured window, summed over the launch's GPUs", "lower",
           headline=Headline("VRAM MiB", "any")),
    Metric("power_w", "W", "mean", "mean of NVML nvmlDeviceGetPowerUsage readings, each NVML's own 1-second trailing "
           "average (Ampere and newer), sampled every 0.5 s in the measured window, summed over the launch's GPUs: the "
           "node's total (gpu_count says over how many)", "lower",
           headline=Headline("power W, all GPUs", "single-or-unset")),
    Metric("power_w_per_gpu", "W", "mean", "per GPU: the same readings as power_w, each GPU's own mean, the highest of "
           "the launch's GPUs (the figure a per-GPU power limit bounds; each GPU's in the note); equal to power_w on one "
           "GPU", "lower", headline=Headline("power W per GPU", "single-or-unset")),
    Metric("power_p95_w", "W", "p95", "95th percentile of the same readings as power_w: of NVML's 1-second trailing "
           "averages, so no peak shorter than a second shows", "lower"),
    Metric("energy_j_per_token", "J/token", "mean", "NVML nvmlDeviceGetTotalEnergyConsumption delta over the measured "
           "window, the launch's GPUs only / its output tokens (reasoning included); the integral of the sampled power "
           "beside it in the note", "lower", analysed=True, headline=Headline("J/token", "single-or-unset")),
    Metric("energy_j_per_token_per_gpu", "J/token", "mean", "per GPU: energy_j_per_token (the launch's GPUs together) "
           "/ the launch's GPU count, each GPU's share of a token's energy", "lower"),
    # -- GPU state over the measured window (telemetry.clock_state): the worst of the launch's GPUs, each GPU's
    # own value in the note. A slowdown share above 0 flags the cell (summary.slowdown_note) -----------------
    Metric("clock_event_share_thermal", "ratio", "single", "share of NVML samples whose nvmlDeviceGetCurrentClocksEventReasons "
           "has SW or HW thermal slowdown (nvmlClocksEventReasonSwThermalSlowdown | HwThermalSlowdown)", "lower", analysed=True),
    Metric("clock_event_share_hw_slowdown", "ratio", "single", "share of NVML samples with nvmlClocksEventReasonHwSlowdown",
           "lower", analysed=True),
    Metric("clock_event_share_power_brake", "ratio", "single", "share of NVML samples with "
           "nvmlClocksEventReasonHwPowerBrakeSlowdown (an external power brake signal)", "lower", analysed=True),
    Metric("clock_event_share_sw_power_cap", "ratio", "single", "share of NVML samples with nvmlClocksEventReasonSwPowerCap: "
           "the power limit held the clocks (expected on a capped cell)", None),
    Metric("sm_clock_mhz", "MHz", "median", "median of NVML nvmlDeviceGetClockInfo(NVML_CLOCK_SM) samples in the measured "
           "window; the lowest GPU's", None),
    Metric("gpu_temp_max_c", "C", "peak", "highest NVML nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU) sample in the "
           "measured window, over the launch's GPUs", "lower"),
    Metric("memory_release_s", "s", "single", "seconds from a server's stop (SIGTERM to its process group, SIGKILL after "
           "the grace period) until every GPU of the launch ran no compute process and held <= gpu_idle.max_used_mib "
           "(NVML nvmlDeviceGetComputeRunningProcesses, nvmlDeviceGetMemoryInfo); the longest of the launch's stops", "lower"),
    # -- the host's CPUs outside the launch (host/hostload.py), over the cell (warm-up included) or, on the
    # launch's own rows, over the window_s before its last server start. host_busy above 0 flags the cell -----------
    Metric("host_outside_cpu_share", "ratio", "mean", "CPU seconds the host spent outside the launch (psutil.cpu_times "
           "user + nice + system + steal, minus the psutil cpu_times of the launch's processes: this client and its "
           "descendants, the server's tree, the pipeline's ancestors) / (wall seconds x logical cores), sampled once a "
           "second; the busiest outside processes in the note; our own", "lower"),
    Metric("host_outside_cpu_share_peak", "ratio", "peak", "host_outside_cpu_share over the busiest host_idle.window_s "
           "stretch of the window: what host_idle.busy_share is held to", "lower", analysed=True),
    Metric("host_load_per_core", "ratio", "peak", "highest 1-minute load average (os.getloadavg) sampled in the window "
           "/ the host's logical cores; counts the launch's own processes too", "lower"),
    Metric("host_busy", "ratio", "single", "1 where the host was busy outside the launch (host_outside_cpu_share_peak "
           ">= host_idle.busy_share) during the cell, or before its launch under host_idle.on_busy: flag; else 0. Its "
           "note names the processes; a flagged cell is never judged", "lower", analysed=True),
    Metric("kv_bytes_per_token", "B", "single", "KV cache MiB / pool tokens, both from the start-up log", None, analysed=True),
    Metric("kv_cache_mib", "MiB", "single", "the KV cache's size, from the start-up log", None, analysed=True),
    Metric("vram_free_mib", "MiB", "single", "GPU memory left free after loading, as the post states it", None, analysed=True),
    Metric("mem_free_after_pool_gb", "GB", "single", "memory left after the KV pool, as the post states it", None, analysed=True),
    Metric("model_mib", "MiB", "single", "the weights' size in memory, from the start-up log", None, analysed=True),
    Metric("load_gib", "GiB", "single", "the loaded model's size, as the post states it", None, analysed=True),
    Metric("host_mem_bandwidth_gbs", "GB/s", "peak", "best of 5 numpy copies of 256 MiB (bytes read + written): the "
           "CPU decode roofline", None, analysed=True),
    Metric("gpu_mem_bandwidth_gbs", "GB/s", "single", "the GPU's memory bandwidth, from the node config", None, analysed=True),
    # -- acceptance per request (measure/acceptance.py, from each adapter's per-request draft counts) and energy
    # per response (summary.steady_response_energy); request_accept_rate_bin<i> is read by its prefix ----------
    Metric("accept_rate", "ratio", "mean", "accepted / draft tokens from the engine's /metrics spec-decode counter "
           "deltas, pooled over the cell (vLLM spec-decode metrics)", "higher", analysed=True),
    Metric("accept_rate_token_weighted", "ratio", "mean", "sum of accepted / sum of drafted tokens over the cell's "
           "requests (aiperf's token-weighted acceptance; llama.cpp timings.draft_n*, SGLang spec_tokens_details)",
           "higher", analysed=True),
    Metric("accept_rate_request_weighted", "ratio", "mean", "mean over the cell's requests of each request's accepted "
           "/ drafted (aiperf's request-weighted acceptance)", "higher", analysed=True),
    Metric("request_accept_rate_p10", "ratio", "p10", "10th percentile over requests of accepted / drafted", "higher", analysed=True),
    Metric("request_accept_rate_p50", "ratio", "median", "median over requests of accepted / drafted", "higher", analysed=True),
    Metric("request_accept_rate_p90", "ratio", "p90", "90th percentile over requests of accepted / drafted", "higher", analysed=True),
    # -- quality beside speed (issue 37): the accuracy set (measure/accuracy.py) and its comparisons at
    # collect (results/agreement.py answer_rows) -------------------------------------------------------------
    Metric("accuracy", "ratio", "mean", "share of the accuracy set's questions (GSM8K test, a seeded subset) "
           "whose last number in the greedy reply equals the reference after `#### `, as lm-evaluation-harness's "
           "gsm8k flexible-extract; n the questions, ci_low/ci_high the Wilson score 95% interval (InferenceX "
           "reports GSM8K with an interval after every sweep)", "higher"),
    Metric("accuracy_invalid", "ratio", "mean", "share of the accuracy set's replies holding no answer: no number, "
           "or cut off at max_tokens (the stream's finish_reason \"length\": its last number is an intermediate "
           "step); counted wrong in accuracy; our own", "lower"),
    Metric("answer_agreement", "ratio", "mean", "share of the accuracy set's questions a speculative launch "
           "answers with the same extracted answer as its no-spec launch; our own, far more sensitive than "
           "accuracy at small n", "higher"),
    Metric("accuracy_below_reference", "ratio", "single", "1 where the launch answers worse than its no-spec launch "
           "on the same questions by the exact McNemar test on the flips (p < 0.05, more right-to-wrong than "
           "wrong-to-right), else 0: What to run leaves it out; our own", "lower"),
    Metric("answer_flips", "ratio", "mean", "share of the accuracy set's questions one launch answers right and the "
           "other wrong (Dutta et al. 2024, arXiv 2407.09141: flips hide under equal accuracy); its note gives the "
           "count for the worse and the exact McNemar p", "lower"),
    Metric("perplexity", "ratio", "mean", "exp(mean negative log-likelihood) of the divergence text's actual tokens, "
           "scored as llama-perplexity scores (second half of each chunk); ci_low/ci_high by the delta method as "
           "its printout", "lower"),
    Metric("mean_kld", "nats", "mean", "KL(reference || launch) of the next-token distributions per position of the "
           "divergence text, llama-perplexity's --kl-divergence \"Mean KLD\": exact over the full vocabulary where both "
           "sides were scored by llama-perplexity, else a lower bound over the union of both top-k lists with each "
           "unknown probability at its most favourable (results/divergence.py kld_bound; the note says which, with k "
           "and the tail mass); ci_low/ci_high the t interval over the text's chunk means", "lower"),
    Metric("kld_p99", "nats", "p99", "99th percentile of the per-position KLD (exact or the same bound, as mean_kld's "
           "note says), as llama-perplexity's \"99.0% KLD\"", "lower"),
    Metric("same_top_token", "ratio", "mean", "share of positions whose most likely next token is the reference's, "
           "llama-perplexity's \"Same top p\"; ci_low/ci_high the wider of the t interval over the text's chunk shares "
           "and the Wilson interval over positions", "higher"),
    Metric("kld_tail_mass", "probability", "mean", "the mass a divergence row's KLD could not see: 0 where it is exact "
           "(full vocabulary), else the larger of the two sides' mean mass outside the tokens they returned (top-k "
           "and the actual token); our own, after vLLM RFC 35962's ask for the tail beside a top-k KLD", "lower"),
    Metric("quality_beyond_limit", "ratio", "single", "1 where the launch's divergence from the node's quality "
           "reference is beyond the node's quality_limit (mean KLD above its mean_kld, or same top token under its "
           "same_top_token), else 0: flagged in the verdict and What to run; our own", "lower"),
    Metric("rms_delta_p", "probability", "single", "root mean square of p(launch) - p(reference) of the actual next "
           "token over the positions, llama-perplexity's \"RMS Δp\"", "lower"),
    Metric("perplexity_ratio", "ratio", "single", "PPL(launch) / PPL(reference) on the same positions, "
           "llama-perplexity's \"Mean PPL(Q)/PPL(base)\" (the exp of the mean log ratio), each side's mean NLL from "
           "its exact source: llama-perplexity's printed PPL (float logits), or a server's returned log-probabilities", "lower"),
    Metric("cross_stack_answer_agreement", "ratio", "mean", "answer_agreement between two no-spec launches of one "
           "weights family (across stacks, nodes and quantizations) on the same questions; its note says whether "
           "their accuracy intervals overlap; our own", "higher"),
    Metric("agreement_noise_floor", "ratio", "mean", "a no-spec launch's greedy probe outputs sent two at a time "
           "(concurrency 2) against the same prompts sent alone, mean common prefix / the alone output's length as "
           "output_agreement: the disagreement its own batch shape causes; a variant is charged only beyond it "
           "(analysis.correctness NOISE_MARGIN); our own", "higher"),
    Metric("paired_prompts_identical", "ratio", "mean", "a speculative launch's cell against its no-spec launch of the "
           "same round (results/pairing.py): the share of requests, paired by repeat, conversation and turn, whose prompt "
           "(salt included, sha256) is identical; 1 where the texts are paired, as What to run's paired gain needs; our own",
           "higher", analysed=True),
    Metric("paired_replies_identical", "ratio", "mean", "of those requests with identical prompts, the share whose whole "
           "reply (sha256 of reasoning and content) is identical to no-spec's: greedy speculative decoding is lossless "
           "up to numerics (vLLM docs, \"Lossless guarantees of Speculative Decoding\"); its note says where they "
           "diverged; our own", "higher", analysed=True),
    Metric("energy_j_per_token_steady", "J/token", "mean", "NVML nvmlDeviceGetTotalEnergyConsumption deltas over the "
           "steady windows (ML.ENERGY's steady state), interpolated at their edges from the bracketing samples, the launch's "
           "GPUs only / the output tokens inside them; no value where a sample gap exceeds 2 s (the note says)", "lower"),
    Metric("power_w_steady", "W", "mean", "mean of NVML nvmlDeviceGetPowerUsage readings (each a 1-second trailing "
           "average) inside the steady windows, summed over the launch's GPUs", "lower"),
    Metric("energy_j_per_response_steady", "J/response", "mean", "NVML nvmlDeviceGetTotalEnergyConsumption deltas over the "
           "steady windows, interpolated at their edges from the bracketing samples / the responses' worth of output tokens "
           "in them (ML.ENERGY's energy per response)", "lower"),
)


def names(**flags) -> tuple[str, ...]:
    """The metrics whose fields equal the given ones (group="cell", rate=True), in the registry's order."""
    return tuple(m.name for m in METRICS.values() if all(getattr(m, k) == v for k, v in flags.items()))


def units(group: str) -> dict[str, str]:
    return {m.name: m.unit for m in METRICS.values() if m.group == group}


HEADLINE = tuple(m for m in METRICS.values() if m.headline is not None)
# A cell with any of these above 0 ran on a GPU slowed by something other than its own cap: its speed is not
# the stack's (flagged in its note, marked in the headline, left out of What to run and the cap analyses).
SLOWDOWN_METRICS = ("clock_event_share_thermal", "clock_event_share_hw_slowdown", "clock_event_share_power_brake")
# A cell with this above 0 ran on a host busy outside its launch (analysis.hoststate).
HOST_BUSY_METRIC = "host_busy"
