"""Cells and launches on a busy host (analysis/hoststate.py), from rows made by hand (test data): a cell is busy
where any launch replicate of it was, and the launches' list names the processes for the report's first lines."""

import numpy as np
import pandas as pd

from stackbench.analysis import hoststate
from stackbench.analysis.common import CELL

LOOP = "HOST BUSY during the cell, not the stack's speed: processes outside the launch used 100% of the 2 cores " \
       "(highest 2 s; busy at >= 25%; load average 2.10 per core): busyloop (pid 4242) 50%, busyloop (pid 4243) 49%"


def row(metric: str, value, replicate: int = 1, workload: str = "code", concurrency=1.0, note=None, status="ok",
        reason=None, variant: str = "nospec") -> dict:
    return {"source": "measured", "ref": f"local-cpu/llamacpp--{variant}--r{replicate}@x", "node": "local-cpu",
            "stack": "llamacpp", "variant": variant, "replicate": replicate, "spec_method": "none", "spec_tokens": np.nan,
            "power_cap_w": np.nan, "workload": workload, "concurrency": concurrency, "request_rate": np.nan,
            "metric": metric, "value": value, "note": note, "status": status, "reason": reason}


def results() -> pd.DataFrame:
    rows = []
    for replicate in (1, 2):
        for workload in ("code", "prose"):
            busy = replicate == 2 and workload == "code"
            rows += [row("decode_tps", 20.0, replicate, workload),
                     row("host_outside_cpu_share_peak", 1.0 if busy else 0.02, replicate, workload),
                     row("host_busy", 1.0 if busy else 0.0, replicate, workload, note=LOOP if busy else "quiet")]
    # The launch's own rows (workload "server") never flag a cell; a launch refused on a busy host has no figures.
    rows.append(row("host_busy", 1.0, 2, "server", np.nan, note="HOST BUSY before the launch: busyloop (pid 4242) 50%"))
    rows += [row("cell_status", np.nan, 1, workload, status="host_busy", variant="ngram",
                 reason="host busy after waiting 10 s (host_idle.wait_s): processes outside the launch used 99% of the 2 "
                        "cores (highest 2 s; busy at >= 25%; load average 2.00 per core): stress-ng (pid 77) 98%")
             for workload in ("code", "prose")]
    return pd.DataFrame(rows)


def test_a_cell_is_busy_where_any_of_its_launch_replicates_was_and_says_which():
    frame = results()
    cells = frame[(frame["metric"] == "decode_tps") & (frame["replicate"] == 1)]  # What to run's row: replicate 1
    busy = hoststate.busy_of(cells, frame)
    by_workload = dict(zip(cells["workload"], busy))
    assert by_workload["prose"] == "" and by_workload["code"] == ("replicate 2: host busy during the cell: processes "
                                                                  "outside the launch up to 100% of the cores "
                                                                  "(busyloop (pid 4242), busyloop (pid 4243))")
    assert list(busy.index) == list(cells.index)
    # Per launch, as slowed_of: replicate 1's own code cell was quiet.
    own = hoststate.busy_of(cells, frame, every_replicate=False)
    assert set(own) == {""}
    assert set(hoststate.busy_of(cells, frame[frame["metric"] != "host_busy"])) == {""}


def test_without_notes_the_reason_states_the_outside_share():
    frame = results().drop(columns=["note", "reason"])  # the analysis frame leaves notes out
    cells = frame[(frame["metric"] == "decode_tps") & (frame["workload"] == "code")]
    assert set(hoststate.busy_of(cells, frame)) == {"replicate 2: host busy: processes outside the launch up to 100% of the cores"}


def test_the_busy_launches_name_their_cells_and_processes_for_the_report():
    launches = hoststate.busy_launches(results())
    assert list(launches.columns) == [*hoststate.LAUNCH_KEY, "refused", "cells", "cell_list", "processes"]
    flagged = launches[~launches["refused"]].iloc[0]
    assert (flagged["variant"], flagged["replicate"], flagged["cells"], flagged["cell_list"]) == ("nospec", 2, 1, "code c1")
    assert flagged["processes"] == "busyloop (pid 4242), busyloop (pid 4243)"
    refused = launches[launches["refused"]].iloc[0]
    assert (refused["variant"], refused["cells"], refused["cell_list"], refused["processes"]) == \
        ("ngram", 2, "code c1, prose c1", "stress-ng (pid 77)")
    lines = hoststate.busy_lines(results())
    assert lines == ["local-cpu llamacpp nospec (replicate 2): host busy in 1 cell, left out (code c1): "
                     "busyloop (pid 4242), busyloop (pid 4243)",
                     "local-cpu llamacpp ngram (replicate 1): refused on a busy host in 2 cells, left out "
                     "(code c1, prose c1): stress-ng (pid 77)"]
    quiet = results()
    quiet = quiet[(quiet["metric"] != "host_busy") & (quiet["status"] == "ok")]
    assert hoststate.busy_launches(quiet).empty and hoststate.busy_lines(quiet) == []


def test_cells_are_named_as_the_report_names_them():
    frame = pd.DataFrame([{c: np.nan for c in CELL} | {"workload": "code", "concurrency": 4.0},
                          {c: np.nan for c in CELL} | {"workload": "chat", "request_rate": 2.0, "power_cap_w": 300.0}])
    assert list(hoststate.cell_label(frame)) == ["code c4", "chat 2 req/s 300 W"]
