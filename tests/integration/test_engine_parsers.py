"""Every shipped node's server commands, checked by the pinned engines themselves: SGLang 0.5.23's and vLLM
0.32's own argument parsers (run in the pipeline-built CPU environments, which import them without a GPU)
and the built llama-server's --help. An unknown flag or a value outside a flag's choices fails here, before
anyone spends GPU hours on a command the engine refuses. In the integration lane: it builds those
environments through the workflow, as the vLLM and SGLang CPU tests do."""

import json
import re
import subprocess

import pytest
from helpers import build_in_root
from paths import ROOT

from stackbench.engines import ADAPTERS
from stackbench.plan import expand

pytestmark = pytest.mark.integration
PORT = 30000

# Runs in the engine's own environment: parses each argv with the engine's parser, prints the failures.
SGLANG_CHECK = """
import argparse, contextlib, io, json, sys
from sglang.srt.server_args import ServerArgs
failures = []
for name, argv in json.load(sys.stdin):
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args(argv)
    except SystemExit:
        failures.append([name, err.getvalue().strip().splitlines()[-1]])
print(json.dumps(failures))
"""
VLLM_CHECK = """
import contextlib, io, json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
failures = []
for name, argv in json.load(sys.stdin):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    except SystemExit:
        failures.append([name, err.getvalue().strip().splitlines()[-1]])
print(json.dumps(failures))
"""


def every_launch(engine: str) -> list[tuple[str, list[str]]]:
    """(node/launch, the engine's own flags) for every launch of that engine in configs/nodes."""
    cfg = expand.load_run_config(ROOT, {"nodes": [], "stacks": "all"})
    out = []
    for path in sorted((ROOT / "configs/nodes").glob("*.yaml")):
        node = expand.load_node(path.stem, cfg, ROOT)
        for launch in node.launches:
            if launch.engine == engine and launch.launch_mode != "external":
                flags = ADAPTERS[engine].engine_flags(launch, launch.bind_host, PORT, node.cpu_threads)
                out.append((f"{node.name}/{launch.name}", flags))
    return out


def parse_in(env: str, script: str, argvs: list) -> list:
    python = ROOT / f".envs/{env}/venv/bin/python"
    done = subprocess.run([str(python), "-c", script], input=json.dumps(argvs), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_sglang_command_parses_with_sglang_0_5_23():
    build_in_root(".envs/sglang-cpu/ready.json")
    launches = every_launch("sglang")
    assert len(launches) >= 6  # rtx5090, 2x3090-nvlink, 4xa6000-tp2/-tp4 and the CPU node
    assert parse_in("sglang-cpu", SGLANG_CHECK, launches) == []


def test_every_vllm_command_parses_with_vllm_0_32():
    build_in_root(".envs/vllm-cpu/ready.json")
    launches = every_launch("vllm")
    assert len(launches) >= 4  # rtx5090's three (vllm serve, positional model) and the CPU node's
    assert parse_in("vllm-cpu", VLLM_CHECK, launches) == []


def test_every_llamacpp_flag_is_one_the_built_llama_server_knows(llamacpp_env):
    known = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", subprocess.run(
        [llamacpp_env["server"], "--help"], capture_output=True, text=True, timeout=60).stdout))
    launches = every_launch("llamacpp")
    assert len(launches) >= 5
    unknown = {name: [f for f in flags if f.startswith("-") and f not in known] for name, flags in launches}
    assert {name: flags for name, flags in unknown.items() if flags} == {}


def test_the_sglang_check_catches_a_flag_the_engine_does_not_know():
    build_in_root(".envs/sglang-cpu/ready.json")
    name, flags = every_launch("sglang")[0]
    failures = parse_in("sglang-cpu", SGLANG_CHECK, [[name, [*flags, "--speculative-num-stepz", "3"]]])
    assert failures and "unrecognized arguments: --speculative-num-stepz" in failures[0][1]


def test_the_vllm_check_catches_an_unknown_flag_and_a_value_outside_its_choices():
    build_in_root(".envs/vllm-cpu/ready.json")
    name, flags = every_launch("vllm")[0]
    failures = parse_in("vllm-cpu", VLLM_CHECK, [[name, [*flags, "--max-num-seqz", "4"]],
                                                 [name, [*flags, "--kv-cache-dtype", "bogus"]]])
    assert "unrecognized arguments: --max-num-seqz" in failures[0][1]
    assert "argument --kv-cache-dtype: invalid choice: 'bogus'" in failures[1][1]
