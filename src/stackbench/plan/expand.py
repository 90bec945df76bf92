"""Expand the configs into the experiment plan: one Launch per distinct server configuration.

node x stack variant (x speculative depth) = one server launch; the client-side axes (workload,
concurrency, power cap, repeat) loop inside it. Cross-file references (a node naming a stack, model or
workload that does not exist) are checked here, before Snakemake plans any job.

The cross-file checks (unknown names, TP above the GPU count, caps outside the GPU's range, runs not
measured alike, flags the pipeline sets, streams over a server's slots) sit with the expansion they guard.
"""

from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path

from stackbench.config import ConfigError, load_file, load_schema, rehearsal, validate
from stackbench.config.kinds import KINDS
from stackbench.config.model import Decision, GpuIdle, HostIdle, Launch, Load, Measure, Model, Node, Slurm, Workload
from stackbench.config.speculative import NEEDS_DRAFT_MODEL, TAKES_DRAFT_MODEL
from stackbench.engines import ADAPTERS, adapter_for
from stackbench.engines.base import FlagConflict, NotLaunchable, flag_name
from stackbench.host import boards
from stackbench.models import promptsets, recipes
from stackbench.plan import probeset

CONFIG_DIR = Path("configs")
PLACEHOLDER_START = "<"  # a model path init-node left to fill in: "<path to the model's GGUF file>"
REPLICATE_SUFFIX = re.compile(r"--r(\d+)$")  # Launch.name of a replicate after the first
# The shortest reply a GPU node's judged cell is timed over without a warning: a GPU decodes 48 tokens in well under
# a second, so start-up of the stream and speculation's ramp weigh in the rate; the seed posts time 512-2,048.
SHORT_REPLY_TOKENS = 256


def load_run_config(root: Path = Path("."), given: dict | None = None) -> dict:
    """The top-level config: read from configs/config.yaml, or as Snakemake merged it with --config."""
    if given is None:
        return rehearsal.apply(load_file(root / CONFIG_DIR / "config.yaml", "config"))
    return rehearsal.apply(validate(dict(given), load_schema("config"), "configs/config.yaml (with --config overrides)"))


def load_workload(name: str, node_concurrency: list[int], root: Path, where: str) -> Workload:
    path = root / CONFIG_DIR / "workloads" / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in (root / CONFIG_DIR / "workloads").glob("*.yaml"))
        raise ConfigError(f"{where}: unknown workload {name!r}; known: {', '.join(known)}")
    doc = load_file(path, "workload")
    for kind in (k for k in KINDS.values() if k.own_field):
        if (doc["kind"] == kind.name) != (doc[kind.own_field] not in (None, [])):
            raise ConfigError(f"{path}: {kind.own_field}: {kind.own_field_is}required with kind {kind.name} and only "
                              f"there (kind is {doc['kind']!r})")
    given = [key for key in ("prompts", "prompts_from", "prompts_file") if doc[key]]
    if len(given) != 1:
        raise ConfigError(f"{path}: give exactly one of prompts, prompts_from and prompts_file (it gives "
                          f"{', '.join(given) or 'none'})")
    if given[0] != "prompts" and (not KINDS[doc["kind"]].draws or doc["prompt_tokens_target"] or doc["load"]["input_tokens"]):
        raise ConfigError(f"{path}: {given[0]}: its texts are sent as they are: a kind that draws (single), without "
                          "prompt_tokens_target or load.input_tokens")
    try:
        texts = promptsets.read_prompts_file(root / doc["prompts_file"], str(path)) if doc["prompts_file"] else ()
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return Workload(
        name=name,
        kind=doc["kind"],
        prompts=tuple(doc["prompts"]),
        output_tokens=doc["output_tokens"],
        prompt_tokens=doc["prompt_tokens"],
        turns=doc["turns"],
        salt=doc["salt"],
        concurrency=tuple(doc["concurrency"] or node_concurrency),
        load=_load(doc, path),
        own_concurrency=bool(doc["concurrency"]),
        probes=doc["probes"],
        accuracy=doc["accuracy"],
        divergence=doc["divergence"],
        thinking=doc["thinking"],
        reasoning_effort=doc["reasoning_effort"],
        tool=doc["tool"],
        prompt_tokens_target=doc["prompt_tokens_target"],
        ladder=tuple(doc["ladder"]),
        not_for_ranking=doc["not_for_ranking"],
        prompts_from=tuple(doc["prompts_from"]),
        prompts_file=doc["prompts_file"],
        texts=tuple(texts),
    )


# How a scaled field reads in method_scale: "output 64 of 512".
SCALE_WORDS = {"output_tokens": "output", "prompt_tokens_target": "prompt"}


def _scaled(workload: Workload, scale: dict, where: str) -> Workload:
    """A workload as the node's `scale` reduces it, named in its method_scale; as written where not scaled."""
    changes = scale.get(workload.name)
    if not changes:
        return workload
    if "prompt_tokens_target" in changes and workload.prompt_tokens_target is None:
        raise ConfigError(f"{where}: scale.{workload.name}.prompt_tokens_target: the workload sets none to scale")
    said = ", ".join(f"{SCALE_WORDS[k]} {v} of {getattr(workload, k)}" for k, v in changes.items())
    return dataclasses.replace(workload, **changes, method_scale=said)


def _load(doc: dict, path: Path) -> Load:
    """A workload file's load and slo sections, checked."""
    load, slo = doc["load"], doc["slo"]
    if load["rates"] and load["requests"] is None and load["duration_s"] is None:
        raise ConfigError(f"{path}: load.rates: an open-loop run needs load.requests or load.duration_s")
    for key in ("input_tokens", "output_tokens"):
        if load[key] is not None and load[key][0] > load[key][1]:
            raise ConfigError(f"{path}: load.{key}: low {load[key][0]} is above high {load[key][1]}")
    return Load(**{**load, "rates": tuple(load["rates"]),
                   **{k: tuple(load[k]) if load[k] else None for k in ("input_tokens", "output_tokens")}},
                slo_ttft_s=slo["ttft_s"], slo_tpot_ms=slo["tpot_ms"], slo_min_attainment=slo["min_attainment"])


def _model(node_name: str, doc: dict, key: str, where: str, models_dir: str) -> Model:
    if key not in doc["models"]:
        raise ConfigError(f"{where}: unknown model {key!r}; the node's models are: {', '.join(sorted(doc['models'])) or 'none'}")
    spec = doc["models"][key]
    if "prepare" in spec:
        path = recipes.model_path(models_dir, key, spec["prepare"])
    elif "gguf" in spec or "hf_dir" in spec:
        path = spec.get("gguf") or spec["hf_dir"]
    else:
        raise ConfigError(f"{where}: models.{key}: give one of gguf, hf_dir or prepare")
    return Model(name=key, path=path, quant=spec["quant"], prepare=spec.get("prepare"), weights=spec.get("weights"),
                 checkpoint=spec.get("checkpoint"))


def _expand_variants(stack_doc: dict) -> list[tuple[str, dict]]:
    """One entry per server launch: a variant, or each point of its speculative sweep.

    `sweep_tokens: [2, 4]` names the launches <name>-n2, <name>-n4; a `sweep` of settings names them by
    their values in order, e.g. SGLang EAGLE steps/topk/draft tokens -> <name>-3-1-4.
    """
    out = []
    for variant in stack_doc["variants"]:
        spec = variant["spec"]
        base_extra = spec.get("extra", {})
        points = [{"tokens": n} for n in spec.get("sweep_tokens", [])] + spec.get("sweep", [])
        if not points:
            out.append((variant["name"], {**variant, "spec": {**spec, "extra": base_extra}}))
        for point in points:
            extra = {**base_extra, **point.get("extra", {})}
            tokens = point.get("tokens", spec.get("tokens"))
            suffix = f"n{tokens}" if not point.get("extra") else "-".join(str(v) for v in [tokens, *extra.values()])
            out.append((f"{variant['name']}-{suffix}", {**variant, "spec": {**spec, "tokens": tokens, "extra": extra}}))
    return out


def load_node(name: str, cfg: dict, root: Path = Path(".")) -> Node:
    path = root / CONFIG_DIR / "nodes" / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in (root / CONFIG_DIR / "nodes").glob("*.yaml"))
        raise ConfigError(f"configs/config.yaml: nodes: no node config {path} (known: {', '.join(known)})")
    doc = load_file(path, "node")
    where = str(path)
    for key, spec in doc["models"].items():
        for kind in ("gguf", "hf_dir"):
            if spec.get(kind, "").startswith(PLACEHOLDER_START):
                raise ConfigError(f"{where}: models.{key}.{kind}: {spec[kind]!r} is a placeholder; set the model's path")
    # The node's workloads, then any a run names that the node does not: each file is read once.
    named = {w: f"{where}: workloads[{i}]" for i, w in enumerate(doc["workloads"])}
    for i, run in enumerate(doc["runs"]):
        for j, w in enumerate(run["workloads"] or ()):
            named.setdefault(w, f"{where}: runs[{i}].workloads[{j}]")
    for w, w_where in probeset.named(doc, where).items():
        named.setdefault(w, w_where)
    workloads = tuple(_scaled(load_workload(w, doc["concurrency"], root, w_where), doc["scale"], where)
                      for w, w_where in named.items())
    unknown = sorted(set(doc["scale"]) - set(named))
    if unknown:
        raise ConfigError(f"{where}: scale.{unknown[0]}: not a workload of this node ({', '.join(named)})")
    kinds = {w.name: w.kind for w in workloads}
    launches: list[Launch] = []
    for i, run in enumerate(doc["runs"]):
        run_where = f"{where}: runs[{i}]"
        # The accuracy set before the probes: the probes' cache check wants to come last.
        run_workloads, accuracy_off = probeset.launch_workloads(tuple(run["workloads"] or doc["workloads"]),
                                                                probeset.probe_set(doc, run, "accuracy"), kinds,
                                                                run_where, "accuracy")
        run_workloads, _ = probeset.launch_workloads(run_workloads, probeset.probe_set(doc, run, "divergence"), kinds,
                                                     run_where, "divergence")
        run_workloads, probes_off = probeset.launch_workloads(run_workloads, probeset.probe_set(doc, run), kinds, run_where)
        stack_path = root / CONFIG_DIR / "stacks" / f"{run['stack']}.yaml"
        if not stack_path.exists():
            known = sorted(p.stem for p in (root / CONFIG_DIR / "stacks").glob("*.yaml"))
            raise ConfigError(f"{run_where}.stack: unknown stack {run['stack']!r}; known: {', '.join(known)}")
        stack_doc = load_file(stack_path, "stack")
        model = _model(name, doc, run["model"], f"{run_where}.model", cfg["paths"]["models"])
        draft = _model(name, doc, run["draft_model"], f"{run_where}.draft_model", cfg["paths"]["models"]) if "draft_model" in run else None
        variants = _expand_variants(stack_doc)
        wanted = run.get("variants")
        if wanted:
            unknown = sorted(set(wanted) - {v for v, _ in variants})
            if unknown:
                raise ConfigError(f"{run_where}.variants: unknown variant(s) {', '.join(unknown)}; "
                                  f"{run['stack']} has {', '.join(v for v, _ in variants)}")
            variants = [(v, d) for v, d in variants if v in wanted]
        launch = run["launch"]
        run_launches = []
        adapter = _adapter(stack_doc["engine"], f"{stack_path}: engine")
        for variant_name, variant in variants:
            spec = variant["spec"]
            server_args = {**stack_doc["server_args"], **variant["server_args"], **run["server_args"]}
            if spec["method"] in NEEDS_DRAFT_MODEL and draft is None:
                raise ConfigError(f"{run_where}.draft_model: variant {variant_name!r} speculates with a draft model "
                                  f"({spec['method']}); name one")
            run_launches.append(Launch(
                node=name,
                stack_config=run["stack"],
                engine=stack_doc["engine"],
                variant=variant_name,
                spec_method=spec["method"],
                spec_engine_type=spec.get("engine_type"),
                spec_tokens=spec["tokens"],
                spec_extra=dict(spec["extra"]),
                server_args=server_args,
                tp=adapter.tp_size(server_args),
                model=model,
                draft_model=draft if spec["method"] in TAKES_DRAFT_MODEL else None,
                launch_mode=launch["mode"],
                launch_target=launch.get("binary") or launch.get("image") or launch.get("url"),
                env_name=launch.get("env") or _default_env(adapter, doc, f"{run_where}.launch.env"),
                container_cli=launch.get("container_cli", "docker"),
                context_len=doc["context_len"] if run["context_len"] is None else run["context_len"],
                bind_host=doc["bind_host"],
                env={**doc["env"], **run["env"]},
                workloads=run_workloads,
                probes_off=probes_off,
                accuracy_off=accuracy_off,
                concurrency=tuple(run["concurrency"] or ()),
                power_caps_w=tuple(doc["power_caps_w"] if run["power_caps_w"] is None else run["power_caps_w"]),
                repeats=run["repeats"],
                label=run["label"],
            ))
        _check_flags(run_launches, adapter, where, i)
        if not doc["allow_queueing"]:
            _check_slots(run_launches, adapter, {w.name: w for w in workloads}, where, i)
        launches += run_launches
    launches = _divergence_once(launches, kinds)
    _check_hardware(doc, launches, where)
    _check_measured_alike(launches, where)
    names = [l.name for l in launches]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"{where}: runs: launch {duplicates[0]!r} appears twice; each server configuration is "
                          "listed once (replicates of it come from `launches`); two runs of one stack (two checkpoints, "
                          "two TP sizes) each take a `label` (runs[].label) to stand apart")
    chosen = _chosen_stacks(doc, cfg["stacks"], where)
    replicates = cfg["launches"] or doc["launches"]
    decision = Decision.of({**doc, "launches": replicates})
    run = rehearsal.selected(cfg)
    # Every round the sequence may reach (What to run's rule, docs/what-to-run.md): the first `launches` rounds are
    # planned; each later one only as the checkpoint after the round before asks.
    rounds = run.rounds(replicates, decision.most)
    measure = Measure.of(cfg)
    most_repeats = max(measure.most_repeats, *(l.repeats or 0 for l in launches))
    for workload in (w for w in workloads if w.prompts_file):
        try:
            promptsets.check_enough(workload, rounds if measure.texts_across_rounds == "new" else 1, most_repeats, where)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    by_name = {w.name: w for w in workloads}
    measured = [l for l in launches if l.stack_config in chosen]
    if doc["long_context_rounds"] == "every":  # the long-context use decided on as many launches as the rest
        measured = long_context_deciding(measured, by_name)
    every = interleaved_rounds(measured, rounds, by_name, f"{measure.order_seed}/{name}")
    if rounds > replicates:  # a sequence of looks: its first comes before the one-off sets
        every = one_offs_apart(every, by_name)
    launches = [l for l in every if l.replicate <= replicates]
    gpu = doc["hardware"]["gpu"]
    board = boards.gpu_facts(gpu, where)  # the file's facts, else the tables'; one line where one is missing
    return Node(
        name=name,
        file=where,
        gpu_model=gpu["model"],
        gpu_count=gpu["count"],
        gpu_devices=tuple(str(d) for d in gpu.get("devices") or ()),
        gpu_memory_gib=board["memory_gib"],
        bandwidth_gbs=board["bandwidth_gbs"],
        compute_capability=board["compute_capability"],
        board_power_w=board["board_power_w"],
        power_limit_w=board["power_limit_w"],
        tensor_tflops=board["tensor_tflops"],
        cpu_threads=doc["hardware"]["cpu_threads"],
        client_cpus=tuple(doc["hardware"]["client_cpus"]) if doc["hardware"]["client_cpus"] else None,
        interconnect=doc["hardware"]["interconnect"],
        quality_limit=doc["quality_limit"],
        os=run.node_os(doc["os"]),
        power_caps_w=tuple(doc["power_caps_w"]),
        api_key_env=doc["api_key_env"],
        lock_dir=doc["hardware"]["lock_dir"],
        gpu_idle=GpuIdle(**doc["hardware"]["gpu_idle"]),
        host_idle=HostIdle(**doc["hardware"]["host_idle"]),
        allow_queueing=doc["allow_queueing"],
        workloads=workloads,
        launches=tuple(launches),
        prepared_models=tuple(_model(name, doc, key, f"{where}: models.{key}", cfg["paths"]["models"])
                              for key, spec in doc["models"].items() if "prepare" in spec),
        slurm=Slurm(**doc["slurm"]),
        decision=decision,
        later_rounds=tuple(l for l in every if l.replicate > replicates),
        quality_reference=(_model(name, doc, doc["quality_reference"], f"{where}: quality_reference", cfg["paths"]["models"])
                           if doc["quality_reference"] else None),
    )


def _divergence_once(launches: list[Launch], kinds: dict[str, str]) -> list[Launch]:
    """The divergence pass scores a prompt, which speculation never touches: where the node has a no-spec launch
    of the same engine, environment and model, that launch scores the text, and the speculative ones skip it."""
    def served(launch: Launch) -> tuple:
        return launch.engine, launch.env_name, launch.launch_mode, launch.launch_target, launch.model.name

    scored = {served(l) for l in launches if not l.speculates}
    return [dataclasses.replace(l, workloads=tuple(w for w in l.workloads if kinds[w] != "divergence"))
            if l.speculates and served(l) in scored else l for l in launches]


def judged_workload(workload: Workload) -> bool:
    """A workload What to run decides on (a content class at the node's concurrency levels), the part of a
    launch a replicate repeats; probes, the accuracy set and one-off sweeps (load, Poisson, ladder, long
    prefill, multi-turn) stay on the first replicate, but a replicate repeats the long-context use's deciding
    points too (long_context_deciding)."""
    return workload.kind == "single" and not workload.load.rates and not workload.own_concurrency \
        and not workload.ladder and not workload.not_for_ranking


def short_reply_warnings(node: Node) -> list[str]:
    """A line per workload a GPU node judges on replies under SHORT_REPLY_TOKENS, naming the node, workload and
    reply length (a CPU node's short replies are its budget's choice)."""
    if not node.gpu_count:
        return []
    launched = {name for launch in node.launches for name in launch.workloads}
    return [f"node {node.name}: workload {w.name} is judged on {w.output_tokens}-token replies, under the "
            f"{SHORT_REPLY_TOKENS} a GPU's decode rate needs (the seed posts time 512-2,048): list gpu-code and "
            f"gpu-chat in {node.file}'s workloads instead, or a copy of {w.name} with output_tokens of 512 or more"
            for w in node.workloads
            if w.name in launched and judged_workload(w) and w.output_tokens < SHORT_REPLY_TOKENS]


def unpaired_cap_warnings(node: Node) -> list[str]:
    """A line per speculative configuration that sweeps a cap no no-spec run of its engine and model sweeps: What
    to run pairs a gain at one cap only, so those capped cells would not be judged (analysis.decide.not_judged).
    The plan warns rather than add the caps itself: a cap sweep is the owner's cost to choose."""
    first = [l for l in node.launches if l.replicate == 1 and not l.once]
    out = []
    for launch in (l for l in first if l.speculates and l.power_caps_w):
        nospec = [l for l in first if not l.speculates and (l.engine, l.model.name) == (launch.engine, launch.model.name)]
        swept = {cap for l in nospec for cap in l.power_caps_w}
        missing = [cap for cap in launch.power_caps_w if cap not in swept]
        if missing:
            pair = f"the no-spec run {nospec[0].stack_config}" if nospec else f"a no-spec run of {launch.model.name}"
            out.append(f"node {node.name}: {launch.configuration} sweeps {'/'.join(f'{c:g}' for c in missing)} W, which "
                       f"{pair} does not: those capped cells have no no-spec at their cap to pair with and are not "
                       f"judged; give {pair} the same power_caps_w in {node.file} (docs/what-to-run.md)")
    return out


def replicate_of(launch_name: str) -> int:
    """The replicate a launch's name carries (Launch.name: <configuration>--r<k>; 1 without a suffix)."""
    match = REPLICATE_SUFFIX.search(launch_name)
    return int(match[1]) if match else 1


def per_launch_check(workload: Workload) -> bool:
    """A workload every first-round launch runs once for itself, to compare variants by what they answer: probes,
    the accuracy set, the divergence text (a kind that is not measured in repeats)."""
    return KINDS[workload.kind].runs != "repeats"


def long_context_deciding(launches: list[Launch], workloads: dict[str, Workload]) -> list[Launch]:
    """`launches` (first-round ones) with Launch.deciding set: each one-off workload that stands for the long-context
    use (a kind with deciding points that fit the launch's context, KINDS deciding_points: a ladder's longest prompt,
    long-prefill) where What to run can judge it, that is where a no-spec and a speculative launch of the same
    engine and model both run it at the same points. Its rounds then repeat those points like the judged
    workloads, so the use is decided on as many launches as chat and coding; one that only a no-spec runs
    decides nothing and stays a one-off."""
    def standing(launch: Launch) -> dict[str, tuple]:
        return {name: points for name in launch.workloads if not judged_workload(workloads[name])
                and not workloads[name].not_for_ranking
                and (points := KINDS[workloads[name].kind].deciding_points(workloads[name], launch.context_len))}

    sides: dict[tuple, set[bool]] = {}
    for launch in launches:
        for name, points in standing(launch).items():
            sides.setdefault((launch.engine, launch.model.name, name, points), set()).add(not launch.speculates)
    return [dataclasses.replace(launch, deciding=tuple(name for name, points in standing(launch).items()
                                                       if sides[launch.engine, launch.model.name, name, points] == {True, False}))
            for launch in launches]


def launch_points(workload: Workload, launch: Launch) -> tuple[int | None, ...]:
    """The points (prompt lengths) of a workload a launch runs: every one, but of a workload the rounds repeat at
    its deciding points (Launch.deciding) a round's launch runs those only, unless it is a first round's that
    keeps its one-off sets, and the --once launch the rest."""
    kind = KINDS[workload.kind]
    if workload.name not in launch.deciding or (launch.replicate == 1 and not launch.once and not launch.apart):
        return kind.points(workload)
    chosen = kind.deciding_points(workload, launch.context_len)
    return tuple(point for point in kind.points(workload) if (point in chosen) != launch.once)


def repeated_cell(workload: Workload, point: int | None, deciding: tuple[str, ...], context_len: int | None) -> bool:
    """Whether a later round of a configuration repeats this cell (a point of one of its workloads): a judged
    workload's, or a deciding point of one its rounds repeat (its launches' `deciding` and `context_len`)."""
    return judged_workload(workload) or (workload.name in deciding
                                         and point in KINDS[workload.kind].deciding_points(workload, context_len))


def one_offs_apart(ordered: list[Launch], workloads: dict[str, Workload]) -> list[Launch]:
    """`ordered` with a first-round launch's one-off sets (load sweeps, Poisson rates, a ladder's lengths but its
    deciding one, multi-turn: neither judged, repeated nor a per-launch check) moved onto a launch of their own
    (Launch.once), after every round, where they hold more cells than its round's cells: What to run's first look
    then waits only for the launches it judges (docs/what-to-run.md), at the price of one more server start,
    which a lone long-prefill cell is not worth."""
    def cells(launch: Launch, names) -> int:  # uncapped: a cell per concurrency and prompt length, and per request rate
        return sum(len(launch_points(workloads[w], launch)) * len(workloads[w].levels(launch))
                   + len(workloads[w].load.rates) for w in names)

    kept, apart = [], []
    for launch in ordered:
        once = dataclasses.replace(launch, once=True)
        one_off = tuple(w for w in launch.workloads if not judged_workload(workloads[w])
                        and not per_launch_check(workloads[w]) and launch_points(workloads[w], once))
        rounds = dataclasses.replace(launch, apart=True, workloads=tuple(w for w in launch.workloads
                                                                         if w not in one_off or w in launch.deciding))
        judged = [w for w in rounds.workloads if not per_launch_check(workloads[w])]
        if launch.replicate != 1 or cells(once, one_off) <= cells(rounds, judged):
            kept.append(launch)
            continue
        kept.append(rounds)
        apart.append(dataclasses.replace(once, workloads=one_off))
    return kept + apart


def interleaved_rounds(launches: list[Launch], replicates: int, workloads: dict[str, Workload], seed: str) -> list[Launch]:
    """Every launch `replicates` times, in the order they run: round k holds replicate k of every launch, so a
    slow drift of the host spreads over all variants instead of reading as a difference between them. Round 1
    keeps the config's order (its launches carry the one-off workloads); each later one repeats the judged
    workloads and the deciding points of Launch.deciding, shuffled by a seed of its own (derived from `seed`,
    the config's measure.order_seed and the node)."""
    ordered = list(launches)
    for replicate in range(2, replicates + 1):
        again = [dataclasses.replace(l, replicate=replicate, workloads=tuple(
            w for w in l.workloads if judged_workload(workloads[w]) or w in l.deciding)) for l in launches]
        random.Random(f"{seed}/round-{replicate}").shuffle(again)
        ordered += [l for l in again if l.workloads]
    return ordered


def _chosen_stacks(doc: dict, asked: list[str] | str | None, where: str) -> set[str]:
    """The stacks this run measures on the node: the command line's (--config stacks=...), else the node's
    default_stacks; `all` is every stack its runs name. The whole node file is checked whichever are chosen."""
    have = list(dict.fromkeys(run["stack"] for run in doc["runs"]))
    field, wanted = ("configs/config.yaml (or --config): stacks", asked) if asked is not None else \
        (f"{where}: default_stacks", doc["default_stacks"])
    if wanted == "all":
        return set(have)
    missing = [name for name in wanted if name not in have]
    if missing:
        raise ConfigError(f"{field}: {missing[0]!r} is not a stack of {where}; its stacks: {', '.join(have)}")
    return set(wanted)


def prepared_model(nodes: list[Node], key: str) -> Model:
    """The model the pipeline makes under this name (the first node that names it with a recipe)."""
    for node in nodes:
        for model in node.prepared_models:
            if model.name == key:
                return model
    raise ConfigError(f"no node config prepares a model named {key!r}")


def _adapter(engine: str, where: str):
    if engine not in ADAPTERS:
        raise ConfigError(f"{where}: no adapter for engine {engine!r}; known: {', '.join(sorted(ADAPTERS))}")
    return ADAPTERS[engine]


def _default_env(adapter, doc: dict, where: str) -> str:
    """The environment a native launch runs in (the engine's, or a build flavour for the node's GPUs)."""
    try:
        return adapter.default_env(doc["hardware"]["gpu"])
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None


def _check_measured_alike(launches: list[Launch], where: str) -> None:
    """Runs on one node are measured alike: a reasoning parser makes an engine stream thinking apart
    (delta.reasoning_content), which changes what is timed, so it is on for all of them or for none."""
    flags = {l.name: adapter_for(l.engine).reasoning_parser_arg for l in launches}
    parsers = {name: launch.server_args.get(flags[name]) for name, launch in ((l.name, l) for l in launches) if flags[name]}
    if len({bool(p) for p in parsers.values()}) > 1:
        without = sorted(name for name, p in parsers.items() if not p)
        named = ", ".join(sorted({flag for flag in flags.values() if flag}))
        raise ConfigError(f"{where}: runs: a reasoning parser ({named}) is set on some runs but not on "
                          f"{', '.join(without)}; set it on every run of the node or on none")


def _check_flags(launches: list[Launch], adapter, where: str, run: int) -> None:
    """Render every launch's flags once now: a flag the pipeline sets itself (port, model, context) given
    in server_args would be passed twice, so it stops here, naming the key. Another engine's spelling of
    an argument (the adapter's foreign_args) would reach the engine as a flag it rejects: it stops here too."""
    for launch in launches:
        for key, own in adapter.foreign_args.items():
            if key in launch.server_args:
                raise ConfigError(f"{where}: runs[{run}] ({launch.name}): server_args.{key} becomes {flag_name(key)}, "
                                  f"which {adapter.engine_label} does not take; it takes {flag_name(own)} "
                                  f"(server_args.{own}; the run's, its stack's or its variant's)")
        try:
            adapter.engine_flags(launch, launch.bind_host, 0, None)
        except FlagConflict as err:
            raise ConfigError(f"{where}: runs[{run}] ({launch.name}): server_args.{err} (the run's, its stack's or "
                              "its variant's)") from None
        except NotLaunchable as err:  # an engine only its owner starts: nothing to render for an external launch
            if launch.launch_mode != "external":
                raise ConfigError(f"{where}: runs[{run}].launch.mode ({launch.name}): {err}") from None


def _check_slots(launches: list[Launch], adapter, workloads: dict[str, Workload], where: str, run: int) -> None:
    """A cell with more streams than the server runs at once measures its queue, not the engine: refused
    unless the node says queueing is intended (allow_queueing)."""
    for launch in launches:
        slots = adapter.concurrent_slots(launch)
        if slots is None:
            continue
        highest, name = max((c, name) for name in launch.workloads for c in workloads[name].levels(launch))
        if highest > slots.count:
            workload = workloads[name]
            if workload.own_concurrency and workload.kind == "accuracy":  # its own list: the run's cannot lower it
                field = f"runs[{run}].accuracy"
                raise ConfigError(f"{where}: runs[{run}] ({launch.name}): workload {name} (kind {workload.kind}) runs at "
                                  f"concurrency {highest} by its own list (configs/workloads/{name}.yaml), above the "
                                  f"server's {slots.count} concurrent requests ({slots.flag}); give this run a "
                                  f"{workload.kind} workload whose concurrency is at most {slots.count} ({field}: a copy of {name}.yaml "
                                  f"with concurrency: [{slots.count}]), "
                                  f"raise {slots.flag}, or set allow_queueing: true")
            raise ConfigError(f"{where}: runs[{run}] ({launch.name}): concurrency {highest} exceeds the "
                              f"server's {slots.count} concurrent requests ({slots.flag}); give the run its own list "
                              f"(runs[{run}].concurrency), raise {slots.flag}, or set allow_queueing: true")


def _check_hardware(doc: dict, launches: list[Launch], where: str) -> None:
    """Impossible combinations fail here, before any job: a TP size above the GPU count, a cap outside
    the GPU's accepted range."""
    gpu = doc["hardware"]["gpu"]
    for launch in launches:
        if gpu["count"] and launch.tp > gpu["count"]:
            raise ConfigError(f"{where}: runs (launch {launch.name}): tp_size {launch.tp} needs {launch.tp} GPUs; "
                              f"hardware.gpu.count is {gpu['count']}")
    lists = [("power_caps_w", doc["power_caps_w"])] + [(f"runs[{i}].power_caps_w", run.get("power_caps_w") or [])
                                                       for i, run in enumerate(doc["runs"])]
    for field_name, caps in lists:
        for index, cap in enumerate(caps):
            if not gpu["count"]:
                continue  # a CPU node records why no cap was applied
            why = boards.cap_error(gpu["model"], cap, gpu["power_limit_w"])
            if why:
                raise ConfigError(f"{where}: {field_name}[{index}]: {why}")


def load_plan(root: Path = Path("."), given: dict | None = None) -> tuple[dict, list[Node]]:
    cfg = load_run_config(root, given)
    return cfg, [load_node(n, cfg, root) for n in cfg["nodes"]]


def find_launch(nodes: list[Node], node: str, launch: str) -> tuple[Node, Launch]:
    for candidate in nodes:
        if candidate.name == node:
            for item in candidate.launches + candidate.later_rounds:
                if item.name == launch:
                    return candidate, item
    raise KeyError(f"no launch {launch!r} on node {node!r}")


