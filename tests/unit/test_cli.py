"""The CLI's own work over the package (cli.py): What to run's rule read from the node and its looks, never from the
command line; the workflow's rule timings from Snakemake's benchmark files."""

import dataclasses
import json
import re

import pytest
from paths import ROOT
from snakemake.benchmark import BenchmarkRecord, write_benchmark_records

from stackbench import cli
from stackbench.plan import expand


def test_the_cli_reads_each_looks_rule_from_the_node_and_the_look_before_never_from_the_command_line(repo_copy, monkeypatch):
    """round-verdict and report take no rule on their command line (issue 68): the first look runs under the node
    file's rule over its first rounds, a later look under the one the look before wrote, the report under the
    latest look's, else the node file's."""
    monkeypatch.chdir(repo_copy)
    node = expand.load_plan(repo_copy, {"nodes": ["local-cpu"], "launches": 2})[1][0]
    assert cli.node_decision("local-cpu", launches=2) == node.decision
    rounds = repo_copy / "data/runs/local-cpu/rounds"
    assert cli.reported_rules(["local-cpu"], repo_copy / "data/runs", 2) == {"local-cpu": node.decision}
    fixed = dataclasses.replace(node.decision, horizons={"llamacpp": 3})
    rounds.mkdir(parents=True)
    (rounds / "round-2.json").write_text(json.dumps({"rule": dataclasses.asdict(fixed)}))
    assert cli.look_rule(rounds / "round-2.json") == fixed
    assert cli.reported_rules(["local-cpu"], repo_copy / "data/runs") == {"local-cpu": fixed}
    parser = cli.build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["round-verdict", "p.parquet", "--node", "n", "--round", "2", "--out", "o", "--provisional", "p",
                           "--rule", "{}"])


def _benchmark(path, seconds):
    path.parent.mkdir(parents=True, exist_ok=True)
    write_benchmark_records([BenchmarkRecord(running_time=seconds)], str(path), extended_fmt=False)


def test_timings_gives_each_rules_jobs_and_wall_time_from_its_benchmark_files(tmp_path, capsys):
    folder = tmp_path / "logs/benchmarks"
    _benchmark(folder / "measure/local-cpu/llamacpp--nospec.tsv", 190.4)
    _benchmark(folder / "measure/local-cpu/llamacpp--ngram-n8.tsv", 61)
    _benchmark(folder / "collect.tsv", 4.2)
    _benchmark(folder / "report.tsv", 12.6)
    lines = cli.rule_timings(folder)
    assert "measure: 2 job(s), 4 min 11 s (longest 3 min 10 s)" in lines
    assert "collect: 1 job(s), 4 s" in lines and "report: 1 job(s), 13 s" in lines
    assert lines[-1].startswith("the run: ") and lines[-1].endswith("(4 jobs)")
    assert cli.main(["timings", "--dir", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err.startswith(f"config error: {tmp_path / 'none'}: no benchmark files; run the workflow")


def test_every_rule_with_outputs_writes_a_benchmark_file_and_no_rule_without_one_does():
    """The workflow's rules (workflow/rules/*.smk) each name a `benchmark:` under the folder `stackbench timings` reads,
    except a rule without outputs (rehearse): Snakemake takes a benchmark file for an output, so once written the rule
    would read as up to date and a second rehearsal would run nothing."""
    text = "\n".join(p.read_text() for p in sorted((ROOT / "workflow/rules").glob("*.smk")))
    bodies = re.findall(r"^( *)(?:rule|checkpoint) (\w+):\n((?:\1 {4}.*\n|\n)*)", text, flags=re.MULTILINE)
    # A rule made from another with `use rule ... as` keeps the other's outputs.
    derived = re.findall(r"^\s*use rule (\w+) as (\w+)", text, flags=re.MULTILINE)
    with_outputs = {name for _, name, body in bodies if re.search(r"^\s+output:", body, re.MULTILINE)}
    with_outputs |= {name for base, name in derived if base in with_outputs}
    benchmarks = re.findall(r"^\s*benchmark:\n\s*f\"\{BENCHMARKS\}/(\w+)", text, flags=re.MULTILINE)
    assert len(with_outputs) > 10 and "rehearse" in {name for _, name, _ in bodies}
    assert sorted(benchmarks) == sorted(with_outputs)
