"""llama.cpp `llama-server` (formats of tag b11434; research/server_metrics.md section A)."""

from __future__ import annotations

import re

from ..plan import Launch
from .base import ServerFacts, SpecCounters, counters_from_metrics, render_flags

# llama_kv_cache: size =  144.00 MiB (  4096 cells,  30 layers,  2/2 seqs), K (f16):   72.00 MiB, V (f16):   72.00 MiB
KV_CACHE = re.compile(
    r"llama_kv_cache: size =\s*(?P<mib>[\d.]+) MiB \(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers,"
    r"\s*(?P<seqs>\d+)/(?P<seqs_max>\d+) seqs\), K \((?P<k>\w+)\):\s*[\d.]+ MiB, V \((?P<v>\w+)\):\s*[\d.]+ MiB"
)
MODEL_BUFFER = re.compile(r"load_tensors:\s+(?P<buffer>\S+) model buffer size =\s*(?P<mib>[\d.]+) MiB")
N_CTX = re.compile(r"llama_context: n_ctx\s+=\s*(?P<n>\d+)")
KV_UNIFIED = re.compile(r"llama_context: kv_unified\s+=\s*(?P<unified>true|false)")
N_SLOTS = re.compile(r"initializing, n_slots = (?P<slots>\d+), n_ctx_slot = (?P<ctx>\d+)")

SPEC_TYPES = {"draft": "draft-simple", "ngram": "ngram-simple", "mtp": "draft-mtp", "eagle": "draft-eagle3",
              "dflash": "draft-dflash", "dspark": "draft-dspark"}


class LlamaCppAdapter:
    engine = "llamacpp"
    engine_label = "llama.cpp"
    health_path = "/health"

    def argv(self, launch: Launch, binary: str, host: str, port: int, threads: int | None) -> list[str]:
        args = dict(launch.server_args)
        verbosity = args.pop("log_verbosity", None)
        if threads and "threads" not in args:
            args["threads"] = threads
        argv = [binary, "--model", launch.model.path, "--host", host, "--port", str(port),
                "--ctx-size", str(launch.context_len)]
        if verbosity is not None:
            argv += ["-lv", str(verbosity)]
        argv += render_flags(args)
        if launch.spec_method != "none":
            argv += ["--spec-type", launch.spec_engine_type or SPEC_TYPES[launch.spec_method]]
            if launch.draft_model is not None:
                argv += ["--spec-draft-model", launch.draft_model.path]
            if launch.spec_tokens:
                argv += ["--spec-draft-n-max", str(launch.spec_tokens)]
        return argv

    def request_extras(self, launch: Launch, output_tokens: int) -> dict:
        # Fixed output length: llama-server honours ignore_eos; n_predict mirrors max_tokens.
        return {"ignore_eos": True, "n_predict": output_tokens, "cache_prompt": True}

    def parse_log(self, text: str) -> ServerFacts:
        """KV pool and memory from the start-up log (needs -lv 4 for the llama_kv_cache size line).

        Without a unified KV cache each of the N sequences gets its own `cells`, so the pool holds
        cells x N tokens (the MiB figure covers all of them). The first cache is the target model's; a
        draft model prints its own lines after it.
        """
        facts = ServerFacts()
        kv = list(KV_CACHE.finditer(text))
        unified = [m["unified"] == "true" for m in KV_UNIFIED.finditer(text)]
        for index, match in enumerate(kv[:2]):
            seqs = 1 if (unified[index] if index < len(unified) else True) else int(match["seqs_max"])
            tokens, mib = int(match["cells"]) * seqs, float(match["mib"])
            if index == 0:
                facts.kv_pool_tokens, facts.kv_cache_mib = tokens, mib
                facts.kv_dtype = match["k"] if match["k"] == match["v"] else f"K {match['k']} / V {match['v']}"
                facts.extra["kv_layers"] = int(match["layers"])
            else:
                facts.extra["draft_kv_pool_tokens"], facts.extra["draft_kv_cache_mib"] = tokens, mib
        target_part = text[: kv[0].start()] if kv else text
        buffers = [float(m["mib"]) for m in MODEL_BUFFER.finditer(target_part)]
        if buffers:
            facts.model_mib = sum(buffers)
        ctx = N_CTX.search(text)
        if ctx:
            facts.n_ctx = int(ctx["n"])
        slots = N_SLOTS.search(text)
        if slots:
            facts.slots = int(slots["slots"])
        return facts

    def spec_counters(self, metrics_text: str) -> SpecCounters | None:
        return counters_from_metrics(metrics_text, "llamacpp")

    def server_timings(self, final_chunk: dict) -> dict:
        """llama.cpp puts `timings` on the last streamed chunk."""
        timings = final_chunk.get("timings") or {}
        keep = ("prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms",
                "predicted_per_second", "cache_n", "draft_n", "draft_n_accepted")
        return {f"server_{k}": timings[k] for k in keep if k in timings}
