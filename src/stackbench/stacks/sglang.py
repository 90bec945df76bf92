"""SGLang's server (formats of 0.5.23 and older 0.4/0.5 builds; research/server_metrics.md section B).

SGLang has no CPU build reachable from our CI machines: this adapter is built and tested against the
engine's real formats and runs for real wherever a GPU node is configured.
"""

from __future__ import annotations

import re

from .. import prometheus
from ..plan import Launch
from .base import ServerFacts, SpecCounters, render_flags

# "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 123456, K size: 5.66 GB, V size: 5.66 GB"
# older builds have no "dtype: ..," part; MLA pools print a single "KV size".
KV_POOL = re.compile(r"KV Cache is allocated\.(?: dtype: (?P<dtype>\S+),)? #tokens: (?P<tokens>\d+), "
                     r"(?:K size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB|KV size: (?P<kv>[\d.]+) GB)")
MAX_TOTAL = re.compile(r"max_total_num_tokens=(?P<tokens>\d+)(?:.*?max_running_requests=(?P<running>\d+))?"
                       r"(?:.*?context_len=(?P<ctx>\d+))?")
POOL_END = re.compile(r"Memory pool end\. avail mem=(?P<gb>[\d.]+) GB")
WEIGHTS = re.compile(r"Load weight end\..*?mem usage=(?P<gb>[\d.]+) GB")
MAMBA = re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: (?P<slots>\d+), conv_state size: (?P<conv>[\d.]+)\s*GB, "
                   r"ssm_state size: (?P<ssm>[\d.]+)\s*GB")
CAPPED = re.compile(r"max_running_requests is capped to (?P<n>\d+)")
ALGORITHMS = {"mtp": "EAGLE", "eagle": "EAGLE", "dflash": "DFLASH", "dspark": "DSPARK", "ngram": "NGRAM", "draft": "STANDALONE"}


class SglangAdapter:
    engine = "sglang"
    engine_label = "SGLang"
    health_path = "/health_generate"
    version_path = "/server_info"

    def parse_version(self, reply: dict) -> str:
        return str(reply.get("version", "unknown"))

    def argv(self, launch: Launch, binary: str, host: str, port: int, threads: int | None) -> list[str]:
        argv = [binary, "-m", "sglang.launch_server", "--model-path", launch.model.path,
                "--served-model-name", launch.model.name, "--host", host, "--port", str(port),
                "--context-length", str(launch.context_len), "--enable-metrics"]
        argv += render_flags(launch.server_args)
        if launch.spec_method != "none":
            argv += ["--speculative-algorithm", launch.spec_engine_type or ALGORITHMS[launch.spec_method]]
            if launch.draft_model is not None:
                argv += ["--speculative-draft-model-path", launch.draft_model.path]
            if launch.spec_method == "dflash":
                argv += ["--speculative-num-draft-tokens", str(launch.spec_tokens)]
            elif launch.spec_tokens:
                argv += ["--speculative-num-steps", str(launch.spec_tokens)]
            argv += render_flags({f"speculative_{k}": v for k, v in launch.spec_extra.items()})
        return argv

    def request_extras(self, launch: Launch, output_tokens: int) -> dict:
        extras = {"ignore_eos": True, "min_tokens": output_tokens}
        if launch.spec_method != "none":
            extras["return_spec_tokens_details"] = True
        return extras

    def parse_log(self, text: str) -> ServerFacts:
        facts = ServerFacts()
        pool = KV_POOL.search(text)
        if pool:
            facts.kv_pool_tokens = int(pool["tokens"])
            gb = float(pool["kv"]) if pool["kv"] else float(pool["k"]) + float(pool["v"])
            facts.kv_cache_mib = gb * 1e9 / 2**20  # SGLang's "GB" is 1e9 bytes
            if pool["dtype"]:
                facts.kv_dtype = pool["dtype"].removeprefix("torch.")
        total = MAX_TOTAL.search(text)
        if total:
            # The scheduler's figure is canonical; it wins over the pool line.
            facts.kv_pool_tokens = int(total["tokens"])
            if total["running"]:
                facts.slots = int(total["running"])
            if total["ctx"]:
                facts.n_ctx = int(total["ctx"])
        end = POOL_END.search(text)
        if end:
            facts.extra["mem_free_after_pool_gb"] = float(end["gb"])
        weights = WEIGHTS.search(text)
        if weights:
            facts.model_mib = float(weights["gb"]) * 1e9 / 2**20
        mamba = MAMBA.search(text)
        if mamba:
            facts.extra["mamba_cache_slots"] = int(mamba["slots"])
            facts.extra["mamba_state_gb"] = float(mamba["conv"]) + float(mamba["ssm"])
        capped = CAPPED.search(text)
        if capped:
            facts.extra["max_running_requests_capped"] = int(capped["n"])
        return facts

    def spec_counters(self, metrics_text: str) -> SpecCounters | None:
        """Acceptance from counters, never from the 40-step sglang:spec_accept_length gauge.

        SGLang counts verify calls and generated tokens; each verify call emits the accepted drafts
        plus one bonus token, so accepted = generated - verify calls and 1 + accepted/verify = generated/verify.
        """
        samples = prometheus.parse(metrics_text)
        verify = prometheus.value(samples, "sglang:spec_verify_calls_total")
        if verify is None:
            return None
        generated = prometheus.value(samples, "sglang:generation_tokens_total") or 0.0
        return SpecCounters(drafts=verify, accepted=max(0.0, generated - verify))

    def server_timings(self, final_chunk: dict) -> dict:
        details = (final_chunk.get("sglext") or {}).get("spec_tokens_details")
        if isinstance(details, list):
            details = details[0] if details else None
        if not details:
            return {}
        keep = ("spec_accept_length", "spec_accept_rate", "spec_verify_ct", "spec_num_correct_drafts", "spec_num_proposed_drafts")
        return {f"server_{k}": details[k] for k in keep if k in details}
