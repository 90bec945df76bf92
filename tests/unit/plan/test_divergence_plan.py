"""How the divergence pass is planned on the default node (configs/nodes/local-cpu.yaml): once per served model
and engine, by its no-spec launch, with the text's file and the quality reference in its workload."""

from __future__ import annotations

from pathlib import Path

from paths import ROOT

from stackbench.plan import expand, launchspec


def test_the_no_spec_launch_scores_the_text_and_its_speculative_launches_do_not():
    cfg = expand.load_run_config(ROOT)
    node = expand.load_node("local-cpu", {**cfg, "stacks": "all"}, ROOT)
    scoring = {l.name: "divergence" in l.workloads for l in node.launches if l.replicate == 1}
    assert scoring["llamacpp--nospec"] and scoring["vllm-cpu--nospec"] and scoring["sglang-cpu--nospec"]
    assert not scoring["llamacpp--ngram-n8"] and not scoring["vllm-cpu--ngram-n3"]
    assert not any("divergence" in l.workloads for l in node.launches if l.replicate > 1)  # not a judged workload


def test_the_spec_carries_the_text_and_the_reference_and_the_reference_file_is_an_input():
    cfg = expand.load_run_config(ROOT)
    node = expand.load_node("local-cpu", cfg, ROOT)
    launch = next(l for l in node.launches if l.name == "llamacpp--nospec")
    spec = launchspec.build(cfg, node, launch)
    scoring = next(w for w in spec.node.workloads if w.name == "divergence").divergence
    assert scoring["reference"] == {"model": "smollm2-135m-q4-1", "path": "data/models/smollm2-135m-q4-1.gguf",
                                    "quant": "Q4_1", "scorable_by_tool": True}
    assert Path(scoring["dataset_file"]).name == "gsm8k.jsonl" and "4 x 512 tokens" in scoring["text_id"]
    needed = launchspec.inputs(node, launch, cfg["paths"])
    assert needed["quality_reference"] == "data/models/smollm2-135m-q4-1.gguf.sha256.json"
    assert needed["dataset_gsm8k"].endswith("gsm8k.jsonl")
