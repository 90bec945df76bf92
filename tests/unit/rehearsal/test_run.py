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
