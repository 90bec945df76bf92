"""The whole run loop (launch spec, external launcher, cell runner, rows) against the synthetic engine, a
TEST DOUBLE whose timing is known in advance: reasoning streamed first, 3 tokens per chunk, vLLM
speculative counters. The figures must come back within a few percent of what it was built to emit."""

import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml

from stackbench import launchspec, measure, plan, store
from synthetic_engine import Timing

ROOT = Path(__file__).resolve().parents[1]
TIMING = Timing(ttft_s=0.25, interval_s=0.03, tokens_per_chunk=3, reasoning_tokens=30, content_tokens=30, spec_tokens=3)


@pytest.fixture
def engine_url():
    """The test double in its own process, so its timing does not share a GIL with the client's."""
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in asdict(TIMING).items() if v is not None]
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("synthetic_engine.py")), "--port", "0", *flags],
                            stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def external_spec(tmp_path: Path, url: str) -> launchspec.LaunchSpec:
    for name in ("configs", "workflow/schemas"):
        shutil.copytree(ROOT / name, tmp_path / name)
    (tmp_path / "configs/nodes/external-double.yaml").write_text(yaml.safe_dump({
        "description": "the synthetic engine (test double) reached as an external vLLM server",
        "hardware": {"gpu": {"model": "none", "count": 0}}, "concurrency": [1], "workloads": ["code"],
        "models": {"served": {"hf_dir": "/not/ours", "quant": "NVFP4"}},
        "runs": [{"stack": "vllm-cpu", "model": "served", "variants": ["nospec"], "launch": {"mode": "external", "url": url}}]}))
    cfg = plan.load_run_config(tmp_path, {"nodes": ["external-double"], "measure": {"repeats": 3, "warmup_requests": 1}})
    node = plan.load_node("external-double", cfg, tmp_path)
    return launchspec.build(cfg, node, node.launches[0])


def test_external_launch_measures_reasoning_multi_token_chunks_and_acceptance(engine_url, tmp_path):
    spec = external_spec(tmp_path, engine_url)
    results = store.read_results(measure.LaunchRun(spec, tmp_path / "run").run())
    cell = results[(results["workload"] == "code") & (results["status"] == "ok")].set_index("metric")
    value = cell["value"]

    # First reasoning token, not first content (that would be 0.55 s later). The double sends a role-only
    # chunk the moment it has the request, so TTFT - TTFC is its prefill time with the client's connect
    # and send (tens of ms on this loaded 2-core machine) taken out.
    assert value["ttft_s"] - value["ttfc_s"] == pytest.approx(TIMING.ttft_s, rel=0.1)  # sleeps overshoot under load
    assert value["ttft_s"] < TIMING.ttft_s + 0.1
    assert value["decode_tps"] == pytest.approx(TIMING.decode_tps, rel=0.05)  # all tokens over the whole decode span
    assert value["itl_p50_ms"] == pytest.approx(TIMING.itl_ms, rel=0.05)  # per token: chunk gap / 3
    assert value["icl_p50_ms"] == pytest.approx(TIMING.interval_s * 1000, rel=0.05)  # per chunk, by its own name
    assert value["accept_len"] == pytest.approx(TIMING.accept_len, rel=0.02)  # 1 + accepted / drafts
    assert value["tpot_ms"] == pytest.approx(TIMING.itl_ms, rel=0.05)
    assert "fewer than" in cell.loc["tpot_ms", "note"]  # 3 requests: a rough percentile, and it says so
    assert set(cell["counted_text"]) == {"content,reasoning"} or set(cell["counted_text"]) == {"reasoning+content"}
    assert set(cell["launch_mode"]) == {"external"}
    # The pipeline did not set the context, TP or quantization of a server it did not start.
    assert set(cell["quant"]) == {"unknown"} and cell["engine_image"].iloc[0].startswith("external")
