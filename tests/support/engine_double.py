"""The ENGINE DOUBLE for tests whose claim is about our process handling (a taken port, SIGTERM, SIGINT,
SIGKILL, an orphan, a changed workload, a crash restart, a power-cap sweep), not about llama-server: a
script installed as the pipeline-built llama-server (`.envs/llamacpp/ready.json` names it) that serves
stackbench.rehearsal.standin in llama.cpp's formats on the --host/--port it is given. It answers each chat
request with exactly its max_tokens (one token a chunk, every ENGINE_DOUBLE_INTERVAL_S seconds, 0.005
by default; the signal tests slow it so that a cell is in flight when the signal lands), and a port
it cannot bind makes it exit 1 with the OS's "Address already in use", as a Python engine server does.
It is started through a small native executable (WRAPPER, compiled with cc) so that, like llama-server, the
process the launcher records runs exactly the recorded command line (host/locks.ServerRecord matches a
leftover server by it; a `#!` script would show its interpreter instead). Every other piece (plan,
launcher, process group, run loop, store, Snakemake) is the real one.

`double_ci_repo` is ci_repo's node (tests/conftest.py: code and json at c1 and c2, two repeats, the probes)
with this double installed and two model files that only need to exist."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import CI_NODE, write_ci_node

ENGINE_SCRIPT = """\
# TEST DOUBLE standing in for llama-server (tests/support/engine_double.py): serves
# stackbench.rehearsal.standin in llama.cpp's formats on the --host/--port it is given, ignores other flags.
import argparse, os, sys
from stackbench.rehearsal.standin import StandinEngine, Timing
parser = argparse.ArgumentParser()
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, default=0)
args, _ = parser.parse_known_args()
timing = Timing(engine="llamacpp", ttft_s=0.05, interval_s=float(os.environ.get("ENGINE_DOUBLE_INTERVAL_S", "0.005")),
                tokens_per_chunk=1, reasoning_tokens=0, spec_tokens=0, prompt_tokens=0, cached_prompt_tokens=0,
                follow_request=1, capacity=4)
print("engine test double (not llama-server) starting", flush=True)
try:
    engine = StandinEngine(timing, args.port, args.host)
except OSError as err:
    print(f"engine test double: cannot listen on {args.host}:{args.port}: {err}", flush=True)
    sys.exit(1)
with engine:
    print(f"engine test double listening on {engine.base_url}", flush=True)
    engine.thread.join()
"""


# The native executable: runs `<python> <script> <its own arguments>` as its child, passes SIGTERM and SIGINT
# on, exits as the child did; the child dies with it (PR_SET_PDEATHSIG), as one engine process would.
WRAPPER = r"""
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
static pid_t child;
static void forward(int sig) { if (child > 0) kill(child, sig); }
int main(int argc, char **argv) {
    char **args = calloc(argc + 2, sizeof(char *));
    args[0] = PYTHON; args[1] = SCRIPT;
    for (int i = 1; i < argc; i++) args[i + 1] = argv[i];
    signal(SIGTERM, forward); signal(SIGINT, forward);
    child = fork();
    if (child == 0) { prctl(PR_SET_PDEATHSIG, SIGKILL); execv(PYTHON, args); _exit(127); }
    int status;
    while (waitpid(child, &status, 0) < 0) {}
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    signal(WTERMSIG(status), SIG_DFL);
    raise(WTERMSIG(status));
    return 1;
}
"""


def install_engine(repo: Path, version: str = "b1-double") -> Path:
    """Install the double as `repo`'s llama.cpp environment (a real folder, not the shared .envs)."""
    folder = repo / "engine-double.d"
    folder.mkdir()
    (folder / "server.py").write_text(ENGINE_SCRIPT)
    (folder / "wrapper.c").write_text(WRAPPER)
    script = repo / "engine-double"
    subprocess.run(["cc", "-O1", "-o", str(script), f'-DPYTHON="{sys.executable}"', f'-DSCRIPT="{folder / "server.py"}"',
                    str(folder / "wrapper.c")], check=True, capture_output=True)
    install_ready(repo, script, version)
    return script


def install_ready(repo: Path, server: Path, version: str) -> None:
    """`server` as the repo copy's llama.cpp environment: its ready.json, newer than every file under envs/ (copied
    with their old times), so Snakemake takes the environment as built."""
    ready = repo / ".envs/llamacpp/ready.json"
    ready.parent.mkdir(parents=True, exist_ok=True)
    ready.write_text(json.dumps({"engine": "llamacpp", "server": str(server), "version": version,
                                 "requirements": f"engine test double {version}"}))
    newest = max(p.stat().st_mtime for p in (repo / "envs").iterdir())
    os.utime(ready, (max(newest + 10, os.stat(ready).st_mtime),) * 2)


def double_ci_repo(repo: Path) -> Path:
    """ci_repo's node, config and workloads on the engine double (no llama.cpp build, no model preparation)."""
    install_engine(repo)
    models = repo / "double-models"
    models.mkdir()
    node = json.loads(json.dumps(CI_NODE))
    node["description"] = "integration-test node on the engine test double"
    for name, quant in (("smollm2-135m-q4km", "Q4_K_M"), ("smollm2-135m-q4-1", "Q4_1")):
        (models / f"{name}.gguf").write_bytes(b"model file stand-in: the engine double loads nothing")
        node["models"][name] = {"gguf": str(models / f"{name}.gguf"), "quant": quant}
    return write_ci_node(repo, node)
