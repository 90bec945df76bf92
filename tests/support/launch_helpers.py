"""Launch objects for launcher tests, and an engine adapter test double (not a real engine: it starts a
small Python HTTP server, because these tests are about process handling)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import httpx
import yaml
from paths import ROOT

from stackbench.config.model import Launch, Model
from stackbench.engines import ADAPTERS
from stackbench.host import locks
from stackbench.plan import expand, launchspec

DOUBLE_SERVER = textwrap.dedent("""
    import http.server, json, os, sys
    mode, port, env_out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    seen = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}
    seen.update({k: v for k, v in os.environ.items() if k == "DOUBLE_ENGINE_NEEDS"})
    open(env_out, "a").write(json.dumps(seen) + "\\n")
    if mode == "bind-fails-once" and not os.path.exists(env_out + ".failed"):
        open(env_out + ".failed", "w").close()
        print("error: couldn't bind HTTP server socket, hostname: 127.0.0.1, port:", port, flush=True); sys.exit(1)
    if mode == "exit":
        print("fatal: cannot load model", flush=True); sys.exit(3)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b'{"status":"ok"}')
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


def spec_workload(name: str, kind: str = "single", per_stream: int = 1) -> dict:
    """A workload as a launch spec writes it (launch.json's node.workloads), for hand-built spec files."""
    return {"name": name, "kind": kind, "prompts": [], "output_tokens": 32, "prompt_tokens": None, "turns": 1,
            "salt": False, "concurrency": [1], "load": {"requests_per_stream": per_stream}}


def make_launch(engine: str = "llamacpp", model_path: str = "/models/q", **overrides) -> Launch:
    """The one Launch builder of the tests: a launch as the plan makes it (its TP size read by the engine's
    adapter), for tests that need one without config files. Defaults: seed 000's context, one model."""
    fields = dict(node="n", stack_config=engine, engine=engine, variant="nospec", spec_method="none",
                  spec_engine_type=None, spec_tokens=None, spec_extra={}, server_args={},
                  model=Model(name="qwen38", path=model_path, quant="Q4_K_M", prepare=None), draft_model=None,
                  launch_mode="native", launch_target=None, env_name=engine, context_len=131072,
                  bind_host="127.0.0.1", container_cli="docker")
    fields.update(overrides)
    if "tp" not in overrides and engine in ADAPTERS:
        fields["tp"] = ADAPTERS[engine].tp_size(fields["server_args"])
    return Launch(**fields)


class DoubleAdapter:
    """Test double of an engine adapter: its command starts DOUBLE_SERVER in the given mode."""

    engine = "llamacpp"
    engine_label = "test double"
    health_path = "/health"
    stop_grace_s = 10.0

    def __init__(self, tmp_path: Path, mode: str, needs: dict | None = None):
        self.script = tmp_path / "double_server.py"
        self.script.write_text(DOUBLE_SERVER)
        self.mode, self.env_out = mode, tmp_path / "spawns.jsonl"
        self.needs = needs or {}  # what native_env answers (the double server records DOUBLE_ENGINE_NEEDS)

    def native_command(self, binary):
        return [binary, str(self.script)]

    def engine_flags(self, launch, host, port, threads):
        return [self.mode, str(port), str(self.env_out)]

    def native_env(self, launch, threads):
        return dict(self.needs)

    def spawns(self) -> list[str]:
        return self.env_out.read_text().splitlines() if self.env_out.exists() else []


PYTHON = sys.executable


LLAMACPP_READY = ROOT / ".envs/llamacpp/ready.json"
TEST_MODEL = ROOT / "data/models/smollm2-135m-q4-1.gguf"


def chat(base_url: str, max_tokens: int = 8) -> dict:
    """One real completion request; returns the OpenAI-style reply."""
    reply = httpx.post(base_url + "/v1/chat/completions", timeout=120,
                       json={"model": "tiny", "max_tokens": max_tokens, "temperature": 0,
                             "messages": [{"role": "user", "content": "Name a colour."}]})
    reply.raise_for_status()
    return reply.json()


def one_launch_spec(repo: Path, node_name: str, node_doc: dict, out_dir: Path) -> Path:
    """Add the node to a repository copy and write its first launch's spec where the plan step would."""
    (repo / "configs/nodes" / f"{node_name}.yaml").write_text(yaml.safe_dump(node_doc))
    (repo / "configs/workloads/code.yaml").write_text(yaml.safe_dump({"prompts": ["Write a Python hello world."], "output_tokens": 16}))
    config = yaml.safe_load((repo / "configs/config.yaml").read_text())
    config.update(nodes=[node_name], measure={"repeats": 1, "warmup_requests": 1})
    (repo / "configs/config.yaml").write_text(yaml.safe_dump(config))
    cfg = expand.load_run_config(repo)
    node = expand.load_node(node_name, cfg, repo)
    return launchspec.write(launchspec.build(cfg, node, node.launches[0]), out_dir / "launch.json")


def measure_argv(spec: Path, out_dir: Path) -> list[str]:
    """`stackbench measure` as the workflow's measure rule runs it: the real run loop, signals included."""
    return [sys.executable, "-m", "stackbench.cli", "measure", "--spec", str(spec), "--out-dir", str(out_dir)]


def measured_one_launch(repo: Path, node_name: str, node_doc: dict, out_dir: Path):
    """The node's first launch measured through `stackbench measure` (one_launch_spec, measure_argv): its rows."""
    import subprocess

    from stackbench.results import store

    done = subprocess.run(measure_argv(one_launch_spec(repo, node_name, node_doc, out_dir), out_dir), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return store.read_results(out_dir / "cells.parquet")


def one_model_node(launch: dict, server_args: dict | None = None) -> dict:
    """A CPU node with one llama.cpp launch of the test model, one short workload at concurrency 1."""
    return {"hardware": {"gpu": {"model": "none", "count": 0}, "cpu_threads": 2}, "context_len": 1024,
            "concurrency": [1], "workloads": ["code"], "accuracy": None,
            "models": {"smollm2-135m-q4-1": {"gguf": str(TEST_MODEL), "quant": "Q4_1"}},
            "runs": [{"stack": "llamacpp", "model": "smollm2-135m-q4-1", "variants": ["nospec"],
                      "server_args": {"parallel": 1, **(server_args or {})}, "launch": launch}]}


def server_pid(run_dir: Path) -> int:
    """The pid (and process group) of the server a launch started, from its record (locks.ServerRecord)."""
    return json.loads(locks.run_record(run_dir).read_text())["pid"]
