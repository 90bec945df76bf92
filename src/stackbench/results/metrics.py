"""The metric registry: one entry per metric a row of the results can carry, with its unit, the statistic its
row carries, the upstream definition it follows and which direction is better, grouped by the step that writes
it (GROUPS). measure/summary.py computes its cell and load figures from here, every writer takes its unit from
here, the analyses and charts read their rate metrics, the report what it loads and charts, and the headline its
columns (a metric with `headline` set is shown there, in this table's order).

A name is spelt once, here. Writers go through `checked` (summary.Figure, the row makers, `row_fields`), so an
unregistered name raises where it is written; readers take names from `M` (M.looping), so a misspelt one
raises AttributeError instead of selecting nothing. Metrics made by an index (a draft position, a histogram
bin, a post's stream) are one Family entry each.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

# Which step writes a metric (Metric.group): summary.cell_figures and load_figures compute every "cell" and
# "load" entry, in this table's order.
GROUPS = {
    "cell": "the summary's per-cell figure over the client's requests, median over repeats",
    "load": "an open- or closed-loop load figure (both medians over repeats, spread_over \"repeats\", with the "
            "median's 95% order-statistic interval, estimators.median_interval, from 6 repeats)",
    "latency": "a percentile over the cell's requests, tokens or chunk gaps (summary.percentile_figures)",
    "sweep": "a figure of a workload's whole concurrency sweep (summary.knee_figure)",
    "window": "the measured window's GPU telemetry and the host's load outside the launch, per cell or per launch",
    "client": "the load client's own load over the measured window, and the server's token rate beside it "
              "(measure/clientload.py)",
    "speculation": "draft acceptance, from the engine's /metrics counters or its per-request draft counts",
    "probe": "a correctness probe of the launch or a check of a cell's outputs (measure/probes.py, summary)",
    "quality": "quality beside speed: the accuracy set, and comparisons between launches made at collect",
    "fact": "a fact of the launch's setup: the server's start-up log, the model's files, the node, NVML's limits",
    "status": "a row that carries a status or provenance, no figure",
    "published": "a figure only a post states (data/published), in the post's own unit",
}


@dataclass(frozen=True)
class Headline:
    title: str
    cell: str  # "single": concurrency 1; "single-or-unset": 1 or not stated; "highest": the variant's highest; "any"
    scale: float = 1.0  # display unit: TTFT is stored in s, read in ms


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str | None  # the unit every writer gives its rows; None where the writer states it (tokens or words)
    stat: str  # the statistic the row carries
    definition: str  # what it measures, after which upstream definition
    better: str | None  # "higher", "lower", or None for a fact of the setup
    group: str = "fact"  # which step writes it: a key of GROUPS
    ttft_included: str = "no"  # the row's ttft_included: whether the time to first token is inside the figure
    rate: bool = False  # an output-token rate (spread, power sweet spot, power chart)
    analysed: bool = False  # an analysis reads it: the report loads its rows into pandas
    charted: bool = False  # the report's charts read it
    headline: Headline | None = None


@dataclass(frozen=True)
class Family:
    """Metrics made by an index, one entry for them all: member(i) is the metric of index i (prefix + i)."""

    prefix: str
    unit: str
    stat: str
    definition: str  # of the member with index i
    better: str | None
    group: str

    def member(self, index: int) -> str:
        return f"{self.prefix}{index}"

    def holds(self, name: str) -> bool:
        return name.startswith(self.prefix) and name[len(self.prefix):].isdigit()


def _entries(*metrics: Metric) -> dict[str, Metric]:
    return {m.name: m for m in metrics}


# The engine's own per-request figures under one name for every engine (Adapter.server_timings writes them into a
# request's record, measure reads them, the request files keep them as columns that results/pairing.py reads).
SERVER_PROMPT_PROCESSED = "server_prompt_processed"  # prompt tokens the engine computed (cache hits excluded)
SERVER_PROMPT_CACHED = "server_prompt_cached"  # prompt tokens reused from the prefix cache
SERVER_PREFILL_TPS = "server_prefill_tps"
SERVER_DECODE_TPS = "server_decode_tps"
SERVER_SPEC_DRAFTED = "server_spec_drafted_tokens"  # draft tokens proposed for this request
SERVER_SPEC_ACCEPTED = "server_spec_accepted_tokens"  # of those, accepted by the target model
KWH_J = 3.6e6  # joules in a kilowatt-hour: energy figures are J, a run's or a plan's total is said in kWh
PERCENTILES = (50, 90, 99)  # a latency distribution's percentiles, as vLLM bench serve reports them


def percentile_name(distribution: str, q: int, unit: str, median: str | None = None) -> str:
    """The metric of a latency distribution's q-th percentile, `<distribution>_p<q>_<unit>`; its median is
    `median` where that has a name of its own (tpot_ms, vLLM's "Median TPOT")."""
    return median if q == 50 and median else f"{distribution}_p{q}_{unit}"


def _percentiles(distribution: str, unit: str, definition: str, median: str | None = None) -> list[Metric]:
    """The entries of a latency distribution's PERCENTILES (summary.percentile_figures writes them)."""
    return [Metric(percentile_name(distribution, q, unit, median), unit, "median" if q == 50 else f"p{q}",
                   f"{definition}; the {q}th percentile (numpy's linear interpolation, as vLLM bench serve)", "lower",
                   "latency") for q in PERCENTILES]


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
    # -- latency distributions (summary.percentile_figures): over every request, token or chunk gap of the cell --
    *_percentiles("tpot", "ms", "TPOT per request as vLLM benchmarks/serve.py: (E2EL - TTFT) / (output tokens - 1), "
                  "with its TTFT and E2EL (first and last chunk with choices); over the cell's requests", median="tpot_ms"),
    *_percentiles("itl", "ms", "per-token ITL as SGLang bench_serving's native backend (async_request_sglang_generate): "
                  "each chunk's gap / the tokens it carries; over the cell's tokens"),
    *_percentiles("icl", "ms", "inter-chunk latency: the gap between SSE chunks with choices, whatever each carries "
                  "(vLLM benchmarks/serve.py's ITL, named apart from the per-token ITL); over the cell's chunk gaps"),
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
    Metric("knee_concurrency", "streams", "single", "the last concurrency of a workload's sweep whose aggregate "
           "throughput (aggregate_tps_steady where every level has it, else aggregate_tps) rose by more than "
           "knee_fraction over the level below, and below the first whose slo_attainment falls under the SLO's minimum; "
           "our own", None, "sweep", "yes"),
    # -- written by other steps, read by the report -------------------------------------------------------
    Metric("accept_len", "ratio", "mean", "1 + accepted / drafts from the engine's /metrics spec-decode counter "
           "deltas, pooled over the cell", "higher", "speculation", analysed=True, charted=True, headline=Headline("accept len", "single-or-unset")),
    Metric("kv_pool_tokens", "tokens", "single", "the KV pool's size in tokens, from the server's start-up log",
           "higher", "fact", analysed=True, headline=Headline("KV pool tokens", "any")),
    Metric("vram_mib", "MiB", "peak", "NVML nvmlDeviceGetMemoryInfo used, peak over the measured window, summed over the "
           "launch's GPUs", "lower", "window", headline=Headline("VRAM MiB", "any")),
    Metric("power_w", "W", "mean", "mean of NVML nvmlDeviceGetPowerUsage readings, each NVML's own 1-second trailing "
           "average (Ampere and newer), sampled every 0.5 s in the measured window, summed over the launch's GPUs: the "
           "node's total (gpu_count says over how many)", "lower", "window",
           headline=Headline("power W, all GPUs", "single-or-unset")),
    Metric("power_w_per_gpu", "W", "mean", "per GPU: the same readings as power_w, each GPU's own mean, the highest of "
           "the launch's GPUs (the figure a per-GPU power limit bounds; each GPU's in the note); equal to power_w on one "
           "GPU", "lower", "window", headline=Headline("power W per GPU", "single-or-unset")),
    Metric("power_p95_w", "W", "p95", "95th percentile of the same readings as power_w: of NVML's 1-second trailing "
           "averages, so no peak shorter than a second shows", "lower", "window"),
    Metric("energy_j_per_token", "J/token", "mean", "NVML nvmlDeviceGetTotalEnergyConsumption delta over the measured "
           "window, the launch's GPUs only / its output tokens (reasoning included); the integral of the sampled power "
           "beside it in the note", "lower", "window", analysed=True, headline=Headline("J/token", "single-or-unset")),
    Metric("energy_j_per_token_per_gpu", "J/token", "mean", "per GPU: energy_j_per_token (the launch's GPUs together) "
           "/ the launch's GPU count, each GPU's share of a token's energy", "lower", "window"),
    # -- GPU state over the measured window (telemetry.clock_state): the worst of the launch's GPUs, each GPU's
    # own value in the note. A slowdown share above 0 flags the cell (summary.slowdown_note) -----------------
    Metric("clock_event_share_thermal", "ratio", "single", "share of NVML samples whose nvmlDeviceGetCurrentClocksEventReasons "
           "has SW or HW thermal slowdown (nvmlClocksEventReasonSwThermalSlowdown | HwThermalSlowdown)", "lower", "window", analysed=True),
    Metric("clock_event_share_hw_slowdown", "ratio", "single", "share of NVML samples with nvmlClocksEventReasonHwSlowdown",
           "lower", "window", analysed=True),
    Metric("clock_event_share_power_brake", "ratio", "single", "share of NVML samples with "
           "nvmlClocksEventReasonHwPowerBrakeSlowdown (an external power brake signal)", "lower", "window", analysed=True),
    Metric("clock_event_share_sw_power_cap", "ratio", "single", "share of NVML samples with nvmlClocksEventReasonSwPowerCap: "
           "the power limit held the clocks (expected on a capped cell)", None, "window"),
    Metric("sm_clock_mhz", "MHz", "median", "median of NVML nvmlDeviceGetClockInfo(NVML_CLOCK_SM) samples in the measured "
           "window; the lowest GPU's", None, "window"),
    Metric("gpu_temp_max_c", "C", "peak", "highest NVML nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU) sample in the "
           "measured window, over the launch's GPUs", "lower", "window"),
    Metric("memory_release_s", "s", "single", "seconds from a server's stop (SIGTERM to its process group, SIGKILL after "
           "the grace period) until every GPU of the launch ran no compute process and held <= gpu_idle.max_used_mib "
           "(NVML nvmlDeviceGetComputeRunningProcesses, nvmlDeviceGetMemoryInfo); the longest of the launch's stops", "lower", "fact"),
    # -- the host's CPUs outside the launch (host/hostload.py), over the cell (warm-up included) or, on the
    # launch's own rows, over the window_s before its last server start. host_busy above 0 flags the cell -----------
    Metric("host_outside_cpu_share", "ratio", "mean", "CPU seconds the host spent outside the launch (psutil.cpu_times "
           "user + nice + system + steal, minus the psutil cpu_times of the launch's processes: this client and its "
           "descendants, the server's tree, the pipeline's ancestors) / (wall seconds x logical cores), sampled once a "
           "second; the busiest outside processes in the note; our own", "lower", "window"),
    Metric("host_outside_cpu_share_peak", "ratio", "peak", "host_outside_cpu_share over the busiest host_idle.window_s "
           "stretch of the window: what host_idle.busy_share is held to", "lower", "window", analysed=True),
    Metric("host_load_per_core", "ratio", "peak", "highest 1-minute load average (os.getloadavg) sampled in the window "
           "/ the host's logical cores; counts the launch's own processes too", "lower", "window"),
    Metric("host_busy", "ratio", "single", "1 where the host was busy outside the launch (host_outside_cpu_share_peak "
           ">= host_idle.busy_share) during the cell, or before its launch under host_idle.on_busy: flag; else 0. Its "
           "note names the processes; a flagged cell is never judged", "lower", "window", analysed=True),
    # -- the load client's own load over the measured window (measure/clientload.py). client_saturated above 0
    # flags the cell: its speed is the client's, not the stack's (analysis.clientstate) -----------------------
    Metric("client_loop_lag_p50_ms", "ms", "median", "the client's event-loop lag: a task on the loop sleeps 10 ms at a "
           "time and each wake-up's lateness is a sample, the wait a chunk arriving then has behind the loop's other work "
           "before it is stamped (asyncio's epoll timeouts round up to the next millisecond: an idle loop reads up to "
           "1 ms); the median over the measured window, as Node.js monitorEventLoopDelay; our own", "lower", "client"),
    Metric("client_loop_lag_p99_ms", "ms", "p99", "the same samples' 99th percentile (numpy's linear interpolation)",
           "lower", "client", analysed=True),
    Metric("client_cpu_share", "ratio", "mean", "CPU seconds of the client's event-loop thread (time.thread_time) / "
           "the measured window's wall seconds, the busiest process's where the client runs several: 1 is one core "
           "busy all the time, all one loop can use; our own", "lower", "client", analysed=True),
    Metric("client_saturated", "ratio", "single", "1 where the client was the bottleneck of the cell: its loop "
           "thread's CPU share >= 0.9, its loop lag p50 above half the cell's median inter-chunk gap and above 10 ms, or "
           "its lag p99 above them while the loop was busy at least half a core (measure/clientload.py says why "
           "those); else 0. Its note says which; a flagged cell is never judged; our own",
           "lower", "client", analysed=True),
    Metric("server_generated_tps", "tok/s", "mean", "the engine's own generated-token counter (vLLM and SGLang "
           "generation_tokens_total, llama.cpp tokens_predicted_total) delta between the cell's /metrics scrapes "
           "before and after its repeats / the seconds between them", "higher", "client"),
    Metric("client_received_tps", "tok/s", "mean", "output tokens of the cell's requests (usage.completion_tokens, "
           "as decode_tps counts them) / the same seconds as server_generated_tps, beside it", "higher", "client"),
    Metric("kv_bytes_per_token", "B", "single", "KV cache MiB / pool tokens, both from the start-up log", None, "fact", analysed=True),
    Metric("kv_cache_mib", "MiB", "single", "the KV cache's size, from the start-up log", None, "fact", analysed=True),
    Metric("vram_free_mib", "MiB", "single", "GPU memory left free after loading, as the post states it", None, "published", analysed=True),
    Metric("mem_free_after_pool_gb", "GiB", "single", "memory left after the KV pool: SGLang's start-up log (\"Memory pool "
           "end. avail mem\", its GB are GiB), or as the post states it (in its unit)", None, "fact", analysed=True),
    Metric("model_mib", "MiB", "single", "the weights' size in memory, from the start-up log", None, "fact", analysed=True),
    Metric("load_gib", "GiB", "single", "the loaded model's size, as the post states it", None, "published", analysed=True),
    Metric("host_mem_bandwidth_gbs", "GB/s", "peak", "best of 5 numpy copies of 256 MiB (bytes read + written): the "
           "CPU decode roofline", None, "fact", analysed=True),
    Metric("gpu_mem_bandwidth_gbs", "GB/s", "single", "the GPU's memory bandwidth, from the node config", None, "fact", analysed=True),
    # -- the server's start-up log (RowMaker.server_rows: every number its adapter parsed) and the launch ------
    Metric("server_slots", "slots", "single", "requests the server runs at once, from its start-up log (llama.cpp "
           "n_slots, SGLang max_running_requests)", None),
    Metric("weights_file_mib", "MiB", "single", "the weights file's size (llama.cpp print_info: file size): the bytes one "
           "decode step reads", None),
    Metric("weights_bpw", "bits/weight", "single", "bits per weight of the weights file (llama.cpp print_info: file "
           "size ... BPW)", None),
    Metric("offloaded_layers", "layers", "single", "layers offloaded to the GPU (llama.cpp offloaded N/M layers: N; 0 on "
           "a CPU build)", None),
    Metric("model_layers", "layers", "single", "the model's layers as llama.cpp counts them (offloaded N/M layers: M)", None),
    Metric("server_context_tokens", "tokens", "single", "the context length the server runs with, from its start-up "
           "log or /metrics", None),
    Metric("kv_layers", "layers", "single", "layers with a KV cache, from the start-up log (llama.cpp's KV buffer "
           "line)", None),
    Metric("swa_kv_pool_tokens", "tokens", "single", "the sliding-window KV cache's cells, from llama.cpp's start-up "
           "log (kv_pool_tokens is the full-attention cache's)", None),
    Metric("swa_kv_cache_mib", "MiB", "single", "the sliding-window KV cache's size (inside kv_cache_mib), from "
           "llama.cpp's start-up log", None),
    Metric("draft_kv_pool_tokens", "tokens", "single", "the draft model's KV pool, from its own section of llama.cpp's "
           "start-up log", None),
    Metric("draft_kv_cache_mib", "MiB", "single", "the draft model's KV cache size, from its section of the log", None),
    Metric("draft_model_mib", "MiB", "single", "the draft model's weights in memory, from its section of the log", None),
    Metric("repack_mib", "MiB", "single", "llama.cpp's CPU_REPACK buffer: weights repacked for the CPU's kernels, "
           "outside model_mib", None),
    Metric("mamba_cache_slots", "slots", "single", "SGLang's mamba state slots (\"Mamba Cache is allocated. "
           "max_mamba_cache_size\")", None),
    Metric("mamba_state_gb", "GiB", "single", "SGLang's mamba conv_state + ssm_state size (the log's GB are GiB)", None),
    Metric("max_running_requests_capped", "count", "single", "the running requests SGLang capped itself to "
           "(\"max_running_requests is capped to N\")", None),
    Metric("kv_max_concurrency", "x", "single", "vLLM's \"Maximum concurrency for N tokens per request\": the KV pool / "
           "the context length", None),
    Metric("num_spec_tokens_logged", "count", "single", "the speculative tokens per step vLLM's start-up log states", None),
    Metric("block_size", "count", "single", "vLLM's KV cache block size in tokens (vllm:cache_config_info)", None),
    Metric("ready_s", "s", "single", "launch to the first health 200 of the launch's first server start", "lower"),
    Metric("power_limit_found_w", "W", "single", "NVML nvmlDeviceGetPowerManagementLimit at the launch's start, the "
           "highest of its GPUs: the limit its uncapped cells run at", None),
    Metric("power_limit_default_w", "W", "single", "NVML nvmlDeviceGetPowerManagementDefaultLimit, the highest of the "
           "launch's GPUs: the stock limit a post measured without a cap", None),
    Metric("max_input_tokens", "tokens", "single", "the longest prompt the engine takes, as its rejection of a longer "
           "one states it", "higher"),
    # -- the model's geometry (models/geometry.py): from the served files, or configs/models for published launches --
    Metric("geometry_layers", "layers", "single", "the model's layers (GGUF block_count, config.json num_hidden_layers)", None),
    Metric("geometry_attention_layers", "layers", "single", "full-attention layers: K and V for every token", None),
    Metric("geometry_swa_layers", "layers", "single", "sliding-window attention layers", None),
    Metric("geometry_linear_layers", "layers", "single", "recurrent layers (mamba, GDN) with a fixed state per sequence", None),
    Metric("geometry_kv_heads", "heads", "single", "KV heads per attention layer", None),
    Metric("geometry_key_length", "elements", "single", "elements per key head", None),
    Metric("geometry_value_length", "elements", "single", "elements per value head", None),
    Metric("geometry_mtp_layers", "layers", "single", "multi-token-prediction layers (each one full-attention layer "
           "when it drafts)", None),
    Metric("geometry_sliding_window", "tokens", "single", "the sliding window's length", None),
    Metric("geometry_weight_mib", "MiB", "single", "the tensor data in the model's files", None),
    Metric("geometry_params_b", "billion parameters", "single", "parameters, as configs/models states them: the "
           "roofline's fallback where no weight bytes are reported", None),
    # -- acceptance per request (measure/acceptance.py, from each adapter's per-request draft counts) and energy
    # per response (summary.steady_response_energy); request_accept_rate_bin<i> is read by its prefix ----------
    Metric("accept_rate", "ratio", "mean", "accepted / draft tokens from the engine's /metrics spec-decode counter "
           "deltas, pooled over the cell (vLLM spec-decode metrics)", "higher", "speculation", analysed=True),
    Metric("accept_rate_token_weighted", "ratio", "mean", "sum of accepted / sum of drafted tokens over the cell's "
           "requests (aiperf's token-weighted acceptance; llama.cpp timings.draft_n*, SGLang spec_tokens_details)",
           "higher", "speculation", analysed=True),
    Metric("accept_rate_request_weighted", "ratio", "mean", "mean over the cell's requests of each request's accepted "
           "/ drafted (aiperf's request-weighted acceptance)", "higher", "speculation", analysed=True),
    Metric("request_accept_rate_p10", "ratio", "p10", "10th percentile over requests of accepted / drafted", "higher", "speculation", analysed=True),
    Metric("request_accept_rate_p50", "ratio", "median", "median over requests of accepted / drafted", "higher", "speculation", analysed=True),
    Metric("request_accept_rate_p90", "ratio", "p90", "90th percentile over requests of accepted / drafted", "higher", "speculation", analysed=True),
    Metric("spec_drafts", "tokens", "single", "the server's draft counter's delta over the cell (verify steps); 0 "
           "where a speculating server drafted nothing (analysis.decide: it did not speculate)", None, "speculation"),
    Metric("spec_draft_tokens", "tokens", "single", "drafted tokens, the server's counter's delta over the cell", None,
           "speculation"),
    Metric("spec_accepted_tokens", "tokens", "single", "accepted draft tokens, the server's counter's delta over the cell",
           None, "speculation"),
    # -- correctness probes (measure/probes.py, one probe cell per launch) and checks of every cell's outputs ----
    Metric("smoke_score", "ratio", "mean", "share of the smoke questions whose answer meets its rule (the workload "
           "file's); our own", "higher", "probe"),
    Metric("cache_consistent", "ratio", "single", "1 where the same request sent cold then hot answers the same, long "
           "enough and without looping (seed 004's cold-then-hot regression); our own", "higher", "probe"),
    Metric("needle_pass", "ratio", "single", "1 where the passphrase placed at the probe's depth of the haystack is in "
           "the answer; our own", "higher", "probe"),
    Metric("needle_hot_consistent", "ratio", "mean", "share of the needle request's hot runs answered word for word as "
           "cold (seed 004's hot-cache regressions); our own", "higher", "probe"),
    Metric("needle_tail_pass", "ratio", "single", "1 where another question after the needle's cached haystack is "
           "answered by its rule (seed 004's partial prefix hit); our own", "higher", "probe"),
    Metric("recall_score", "ratio", "mean", "share of the facts stated over several turns of one conversation answered "
           "back by their rules (seed 004's multi-turn regression); our own", "higher", "probe"),
    Metric("recall_consistent", "ratio", "single", "1 where the last recall request sent again answers word for word "
           "the same; our own", "higher", "probe"),
    Metric("regression_score", "ratio", "mean", "share of the regression checks run that passed (needle, its hot runs "
           "each one check, its tail, cache, recall: seed 004's \"regression 6/6\"); our own", "higher", "probe"),
    Metric("output_len_ok", "ratio", "mean", "share of the cell's requests whose server-reported completion_tokens equal "
           "the max_tokens asked and, where chunks are tokens, the client's chunk count within one; our own", "higher",
           "probe"),
    Metric("repetition_ratio", "ratio", "median", "share of an output's word 4-grams that repeat an earlier one, median "
           "over the cell's requests (correctness.repetition_ratio); our own", "lower", "probe"),
    Metric("looping", "ratio", "mean", "share of the cell's outputs whose repetition_ratio is above "
           "correctness.LOOP_THRESHOLD: reported for every variant alike, never a verdict (loops_charged is); our own",
           "lower", "probe"),
    Metric("tool_call_ok", "ratio", "mean", "share of the requests whose answer is a complete call of the tool schema's "
           "function with arguments that parse as a JSON object; our own", "higher", "probe"),
    # -- quality beside speed (issue 37): the accuracy set (measure/accuracy.py) and its comparisons at
    # collect (results/agreement.py answer_rows) -------------------------------------------------------------
    Metric("accuracy", "ratio", "mean", "share of the accuracy set's questions (GSM8K test, a seeded subset) "
           "whose last number in the greedy reply equals the reference after `#### `, as lm-evaluation-harness's "
           "gsm8k flexible-extract; n the questions, ci_low/ci_high the Wilson score 95% interval (InferenceX "
           "reports GSM8K with an interval after every sweep)", "higher", "quality"),
    Metric("accuracy_invalid", "ratio", "mean", "share of the accuracy set's replies holding no answer: no number, "
           "or cut off at max_tokens (the stream's finish_reason \"length\": its last number is an intermediate "
           "step); counted wrong in accuracy; our own", "lower", "quality"),
    Metric("answer_agreement", "ratio", "mean", "share of the accuracy set's questions a speculative launch "
           "answers with the same extracted answer as its no-spec launch; our own, far more sensitive than "
           "accuracy at small n", "higher", "quality"),
    Metric("accuracy_below_reference", "ratio", "single", "1 where the launch answers worse than its no-spec launch "
           "on the same questions by the exact McNemar test on the flips (p < 0.05, more right-to-wrong than "
           "wrong-to-right), else 0: What to run leaves it out; our own", "lower", "quality"),
    Metric("answer_flips", "ratio", "mean", "share of the accuracy set's questions one launch answers right and the "
           "other wrong (Dutta et al. 2024, arXiv 2407.09141: flips hide under equal accuracy); its note gives the "
           "count for the worse and the exact McNemar p", "lower", "quality"),
    Metric("perplexity", "ratio", "mean", "exp(mean negative log-likelihood) of the divergence text's actual tokens, "
           "scored as llama-perplexity scores (second half of each chunk); ci_low/ci_high by the delta method as "
           "its printout", "lower", "quality"),
    Metric("mean_kld", "nats", "mean", "KL(reference || launch) of the next-token distributions per position of the "
           "divergence text, llama-perplexity's --kl-divergence \"Mean KLD\": exact over the full vocabulary where both "
           "sides were scored by llama-perplexity, else a lower bound over the union of both top-k lists with each "
           "unknown probability at its most favourable (results/divergence.py kld_bound; the note says which, with k "
           "and the tail mass); ci_low/ci_high the t interval over the text's chunk means", "lower", "quality"),
    Metric("kld_p99", "nats", "p99", "99th percentile of the per-position KLD (exact or the same bound, as mean_kld's "
           "note says), as llama-perplexity's \"99.0% KLD\"", "lower", "quality"),
    Metric("same_top_token", "ratio", "mean", "share of positions whose most likely next token is the reference's, "
           "llama-perplexity's \"Same top p\"; ci_low/ci_high the wider of the t interval over the text's chunk shares "
           "and the Wilson interval over positions", "higher", "quality"),
    Metric("kld_tail_mass", "probability", "mean", "the mass a divergence row's KLD could not see: 0 where it is exact "
           "(full vocabulary), else the larger of the two sides' mean mass outside the tokens they returned (top-k "
           "and the actual token); our own, after vLLM RFC 35962's ask for the tail beside a top-k KLD", "lower", "quality"),
    Metric("quality_beyond_limit", "ratio", "single", "1 where the launch's divergence from the node's quality "
           "reference is beyond the node's quality_limit (mean KLD above its mean_kld, or same top token under its "
           "same_top_token), else 0: flagged in the verdict and What to run; our own", "lower", "quality"),
    Metric("rms_delta_p", "probability", "single", "root mean square of p(launch) - p(reference) of the actual next "
           "token over the positions, llama-perplexity's \"RMS Δp\"", "lower", "quality"),
    Metric("perplexity_ratio", "ratio", "single", "PPL(launch) / PPL(reference) on the same positions, "
           "llama-perplexity's \"Mean PPL(Q)/PPL(base)\" (the exp of the mean log ratio), each side's mean NLL from "
           "its exact source: llama-perplexity's printed PPL (float logits), or a server's returned log-probabilities", "lower", "quality"),
    Metric("cross_stack_answer_agreement", "ratio", "mean", "answer_agreement between two no-spec launches of one "
           "weights family (across stacks, nodes and quantizations) on the same questions; its note says whether "
           "their accuracy intervals overlap; our own", "higher", "quality"),
    # -- greedy probe outputs compared at collect (results/agreement.py) ---------------------------------------
    Metric("output_agreement", "ratio", "mean", "a speculative launch's greedy probe outputs against its no-spec "
           "launch's: mean common prefix / the reference's length, token by token where both stream one token per "
           "chunk, else word by word; our own", "higher", "quality"),
    Metric("first_divergence_token", None, "single", "the earliest position, over the probe prompts, where a "
           "speculative launch's greedy output differs from its no-spec launch's, in tokens or words as compared "
           "(the row's unit); none where identical", "higher", "quality"),
    Metric("loops_charged", "ratio", "mean", "share of the probe prompts whose greedy output loops where the no-spec "
           "launch's on the same prompt does not (agreement.charged_loops): the one loop verdict; our own", "lower",
           "quality"),
    Metric("cross_stack_agreement", "ratio", "mean", "output_agreement between two no-spec launches of one weights "
           "family across stacks and nodes (the report's matrix per family); our own", "higher", "quality"),
    Metric("cross_stack_divergence", None, "single", "first_divergence_token between two no-spec launches of one "
           "weights family, in tokens or words as compared (the row's unit)", "higher", "quality"),
    Metric("agreement_noise_floor", "ratio", "mean", "a no-spec launch's greedy probe outputs sent two at a time "
           "(concurrency 2) against the same prompts sent alone, mean common prefix / the alone output's length as "
           "output_agreement: the disagreement its own batch shape causes; a variant is charged only beyond it "
           "(analysis.correctness NOISE_MARGIN); our own", "higher", "probe"),
    Metric("paired_prompts_identical", "ratio", "mean", "a speculative launch's cell against its no-spec launch of the "
           "same round (results/pairing.py): the share of requests, paired by repeat, conversation and turn, whose prompt "
           "(salt included, sha256) is identical; 1 where the texts are paired, as What to run's paired gain needs; our own",
           "higher", "quality", analysed=True),
    Metric("paired_replies_identical", "ratio", "mean", "of those requests with identical prompts, the share whose whole "
           "reply (sha256 of reasoning and content) is identical to no-spec's: greedy speculative decoding is lossless "
           "up to numerics (vLLM docs, \"Lossless guarantees of Speculative Decoding\"); its note says where they "
           "diverged; our own", "higher", "quality", analysed=True),
    Metric("text_gain", "ratio", "single", "one text's paired gain (results/pairing.py): a speculative launch's decode "
           "rate on one request (decode_tps: tokens after the first over first text to the last chunk, the inverse of "
           "vLLM's TPOT) / its no-spec launch's on the same prompt in the same round; table_title and row_label name the "
           "text's prompt set and row; our own", "higher", "quality", analysed=True),
    Metric("text_accept_rate", "ratio", "single", "one text's acceptance on a speculative launch: accepted / drafted "
           "tokens of that request, from the engine's per-request counts (llama.cpp timings.draft_n_accepted / "
           "draft_n, SGLang spec_num_correct_drafts / spec_num_proposed_drafts; measure/acceptance.py)", "higher",
           "quality", analysed=True),
    Metric("energy_j_per_token_steady", "J/token", "mean", "NVML nvmlDeviceGetTotalEnergyConsumption deltas over the "
           "steady windows (ML.ENERGY's steady state), interpolated at their edges from the bracketing samples, the launch's "
           "GPUs only / the output tokens inside them; no value where a sample gap exceeds 2 s (the note says)", "lower", "window"),
    Metric("power_w_steady", "W", "mean", "mean of NVML nvmlDeviceGetPowerUsage readings (each a 1-second trailing "
           "average) inside the steady windows, summed over the launch's GPUs", "lower", "window"),
    Metric("energy_j_per_response_steady", "J/response", "mean", "NVML nvmlDeviceGetTotalEnergyConsumption deltas over the "
           "steady windows, interpolated at their edges from the bracketing samples / the responses' worth of output tokens "
           "in them (ML.ENERGY's energy per response)", "lower", "window"),
    # -- rows that carry a status, not a figure -------------------------------------------------------------
    Metric("cell_status", "status", "single", "the row of a cell that produced no figure (failed, rejected, not run, "
           "skipped, gpu_busy): its status and reason, no value", None, "status"),
    Metric("bundle_manifest", "rows", "single", "one row per result bundle read at collect (results/bundle.py): its "
           "rows, its provenance in the note, or why it was refused", None, "status"),
    # -- figures only a post states (data/published), in the post's unit ----------------------------------------
    Metric("avail_mem_gb", "GB", "single", "memory SGLang saw available at profiling, as the post states it", None, "published"),
    Metric("kv_pool_gb", "GB", "single", "the KV pool's size, as the post states it", None, "published"),
    Metric("kv_budget_gb", "GB", "single", "memory left for the KV pool after the mamba state, as the post states it",
           None, "published"),
    Metric("mem_slack_gb", "GB", "single", "memory left unassigned, as the post states it", None, "published"),
    Metric("mem_preload_gb", "GB", "single", "memory available before the weights loaded, as the post states it", None,
           "published"),
    Metric("mem_reserve_mb", "MB", "single", "memory SGLang reserves, as the post states it", None, "published"),
    Metric("mem_fraction_static", "ratio", "single", "SGLang's mem_fraction_static, as the post states it", None, "published"),
    Metric("kv_bytes_per_token_unscaled", "B", "single", "the KV cell size before the draft's (EAGLE) scaling, as the "
           "post states it", None, "published"),
    Metric("draft_layers", "layers", "single", "the draft's layers, as the post states them", None, "published"),
    Metric("draft_load_gb", "GB", "single", "GPU memory the draft model's load took, as the post states it", None, "published"),
    Metric("draft_vocab_layer_gb", "GB", "single", "one of the draft's vocab layers (embed_tokens, lm_head), as the post "
           "states it", None, "published"),
    Metric("model_size_gb", "GB", "single", "a checkpoint's size on disk, as the post states it", None, "published"),
    Metric("weights_per_gpu_gb", "GB", "single", "the weights held on each GPU, as the post states them", None, "published"),
    Metric("vram_gb", "GB", "single", "GPU memory in use, the launch's cards together, as the post states it", "lower",
           "published"),
    Metric("prefill_s", "s", "single", "a long prompt's prefill time, as the post states it", "lower", "published"),
    Metric("spec_speedup", "ratio", "single", "a speculative launch's decode rate / its no-spec launch's, as the post "
           "states it", "higher", "published"),
    Metric("relative_decode", "ratio", "single", "one launch's decode rate / another's, as the post states it without "
           "their absolute rates", "higher", "published"),
    Metric("relative_aggregate", "ratio", "single", "one launch's aggregate rate / another's, as the post states it "
           "without their absolute rates", "higher", "published"),
    Metric("mamba_ratio", "ratio", "single", "a mamba-ratio calculator's ratio r, as the post computes it", None, "published"),
    Metric("spec_state_slots", "slots", "single", "the speculative state slots D a mamba-ratio calculator reserves, as "
           "the post computes them", None, "published"),
)


# Metrics made by an index, each family one entry: a draft position, a histogram bin, a post's stream.
ACCEPT_RATE_POS = Family("accept_rate_pos", "ratio", "mean", "accepted drafts at draft position i (from 1) / drafts, "
                         "pooled over the cell from the engine's /metrics per-position counter deltas (vLLM "
                         "spec_decode_num_accepted_tokens_per_pos)", "higher", "speculation")
REQUEST_ACCEPT_RATE_BIN = Family("request_accept_rate_bin", "requests", "single", "the cell's requests whose accepted / "
                                 "drafted is in [i/10, (i+1)/10), the last bin holding 1.0 (measure/acceptance.py)", None,
                                 "speculation")
DECODE_TPS_STREAM = Family("decode_tps_stream", "tok/s", "single", "stream i's decode rate at concurrency above 1, as the "
                           "post states it (seed 000's \"90.9 + 79.2\")", "higher", "published")
FAMILIES = (ACCEPT_RATE_POS, REQUEST_ACCEPT_RATE_BIN, DECODE_TPS_STREAM)

# Every registered name as an attribute, M.looping == "looping": a misspelt one raises AttributeError.
M = SimpleNamespace(**{name: name for name in METRICS})


class UnknownMetric(ValueError):
    """A metric name the registry does not hold: a row under it would be read by nothing."""


def checked(name: str) -> str:
    """`name`, where the registry holds it (an entry, or a member of a Family); else UnknownMetric. Every writer
    calls it (summary.Figure, the row makers, row_fields), so an unregistered name fails where it is written."""
    if name in METRICS or any(family.holds(name) for family in FAMILIES):
        return name
    raise UnknownMetric(f"metric {name!r} is not in the registry (results/metrics.py): add its entry, with its unit "
                        "and definition, before writing rows under it")


def unit_of(name: str) -> str | None:
    """The unit every row of `name` carries (None where its writer states it); UnknownMetric for a name not held."""
    checked(name)
    entry = METRICS.get(name) or next(family for family in FAMILIES if family.holds(name))
    return entry.unit


def row_fields(name: str) -> dict[str, str | None]:
    """The fields of a results row the registry fixes: the metric, checked, and its unit."""
    return {"metric": name, "unit": unit_of(name)}


def names(**flags) -> tuple[str, ...]:
    """The metrics whose fields equal the given ones (group="cell", rate=True), in the registry's order."""
    return tuple(m.name for m in METRICS.values() if all(getattr(m, k) == v for k, v in flags.items()))


def units(group: str) -> dict[str, str]:
    return {m.name: m.unit for m in METRICS.values() if m.group == group}


def registry_markdown() -> str:
    """The registry as docs/metrics.md shows it (`stackbench docs-metrics` writes it there): per writing step (GROUPS),
    one row per entry and per Family (its member `<prefix><i>`), in this table's order."""
    def cell(text) -> str:
        return "" if text is None else str(text).replace("|", "\\|")

    entries = [(m.name, m) for m in METRICS.values()] + [(f"{f.prefix}<i>", f) for f in FAMILIES]
    parts = []
    for group, said in GROUPS.items():
        rows = [f"| `{name}` | {cell(e.unit) or 'stated by the row'} | {e.stat} | {cell(e.better) or 'neither'} | "
                f"{cell(e.definition)} |" for name, e in entries if e.group == group]
        parts += [f"### {group}", "", f"{said[0].upper()}{said[1:]}.", "",
                  "| metric | unit | statistic | better | definition |", "| --- | --- | --- | --- | --- |", *rows, ""]
    return "\n".join(parts)


HEADLINE = tuple(m for m in METRICS.values() if m.headline is not None)
# A cell with any of these above 0 ran on a GPU slowed by something other than its own cap: its speed is not
# the stack's (flagged in its note, marked in the headline, left out of What to run and the cap analyses).
SLOWDOWN_METRICS = (M.clock_event_share_thermal, M.clock_event_share_hw_slowdown, M.clock_event_share_power_brake)
# A cell with this above 0 ran on a host busy outside its launch (analysis.hoststate).
GEOMETRY_PREFIX = "geometry_"  # the model's geometry facts (models/geometry.py), each an entry above
