"""The plan's types, typed configs at the bottom of the package (engines, serve and measure read them): a
node, its launches (one per distinct server configuration), their workloads and loads, and the models they
run. plan/expand.py makes them from the config files."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import asdict, dataclass, field

from stackbench.config.loader import load_schema
from stackbench.config.speculative import NO_SPEC


@dataclass(frozen=True)
class Model:
    name: str
    path: str  # a GGUF file or a Hugging Face directory
    quant: str
    prepare: str | None  # recipe the pipeline uses to make it, None if the node supplies the file
    # The checkpoint family these files are a quantization or copy of, as the node states it (never guessed
    # from names): collect compares the greedy outputs of launches that name the same one across stacks.
    weights: str | None = None
    # The checkpoint's name as its publisher and the posts write it ("RedHatAI/Qwen3.8-27B-INT4"): the rows'
    # `model`, so a post's row and a measured one name one checkpoint alike; None: the node's key.
    checkpoint: str | None = None

    @property
    def identity(self) -> dict:
        """The model's part of a launch fingerprint: `weights` and `checkpoint` are left out, since they are
        statements about the files (for pairing launches, for naming them), not something the server's figures
        depend on; stating them re-measures nothing."""
        return {k: v for k, v in asdict(self).items() if k not in ("weights", "checkpoint")}

    @property
    def label(self) -> str:
        """The name the rows carry in `model`."""
        return self.checkpoint or self.name


@dataclass(frozen=True)
class Load:
    """A workload's load and SLO settings (src/stackbench/schemas/workload.schema.yaml documents each)."""

    requests_per_stream: int = 1
    knee_fraction: float = 0.10
    rates: tuple[float, ...] = ()
    arrival: str = "poisson"  # poisson | constant | gamma
    burstiness: float = 1.0
    requests: int | None = None
    duration_s: float | None = None
    seed: int = 0
    input_tokens: tuple[int, int] | None = None  # synthetic prompt lengths, uniform in [low, high]
    output_tokens: tuple[int, int] | None = None  # synthetic output lengths (max_tokens), uniform in [low, high]
    slo_ttft_s: float | None = None
    slo_tpot_ms: float | None = None
    slo_min_attainment: float = 0.9

    @property
    def has_slo(self) -> bool:
        return self.slo_ttft_s is not None or self.slo_tpot_ms is not None

    @property
    def identity(self) -> dict | None:
        """What enters a cell's fingerprint: nothing for the defaults, so cells of workloads without a load
        section keep the fingerprints they were measured under."""
        return None if self == Load() else asdict(self)


# Workload fields added after cells were measured: in a cell's fingerprint only where set.
OPTIONAL_IDENTITY = ("probes", "accuracy", "divergence", "thinking", "reasoning_effort", "prompt_tokens_target", "ladder", "method_scale", "tool",
                     "prompts_from", "prompts_file", "texts")


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str
    prompts: tuple[str, ...]
    output_tokens: int
    prompt_tokens: int | None
    turns: int
    salt: bool
    concurrency: tuple[int, ...]  # the file's own list, else the node's
    load: Load = Load()
    own_concurrency: bool = False  # the file names its list: a run's concurrency does not replace it
    probes: dict | None = None  # kind probe: smoke questions, cache request, needle (workload.schema.yaml)
    accuracy: dict | None = None  # kind accuracy: dataset, n, seed; the plan adds the questions asked (`items`)
    divergence: dict | None = None  # kind divergence: the text and its cut; the plan adds the text's file and the reference
    thinking: bool | None = None  # chat_template_kwargs.enable_thinking per request; None: the server's default
    reasoning_effort: str | None = None  # the request's reasoning_effort (low | medium | high); None: not sent
    tool: dict | None = None  # a tool schema sent as the request's `tools` (measure/toolcall.py); None: none
    prompt_tokens_target: int | None = None  # prompts sized to about this many of the served model's tokens
    ladder: tuple[int, ...] = ()  # kind ladder: one cell per prompt length (tokens of the served model)
    method_scale: str | None = None  # the node runs this method reduced ("output 64 of 512"); None: as written
    not_for_ranking: bool = False  # a behaviour shown, not a typical figure: never a headline cell (report only)
    prompts_from: tuple[dict, ...] = ()  # public prompt sets the class draws from (models/promptsets.py)
    prompts_file: str | None = None  # the owner's own traffic, a JSONL of chat-completions bodies
    # The class's texts (models/promptsets.py) where they are not `prompts`: a prompts_file's at load, a set's
    # once the plan has its file (plan/launchspec.py with_questions), so a cell's fingerprint moves with them.
    texts: tuple[dict, ...] = ()

    @property
    def identity(self) -> dict:
        """The workload's part of a cell's fingerprint; its load enters the cell's on its own (see
        launchspec.Cell.identity), so workloads without a load section keep their fingerprints; the
        optional fields enter only where set, for the same reason."""
        doc = {k: v for k, v in asdict(self).items() if k not in ("load", "own_concurrency", "not_for_ranking", *OPTIONAL_IDENTITY)}
        return {**doc, **{k: getattr(self, k) for k in OPTIONAL_IDENTITY if getattr(self, k) not in (None, ())}}

    def levels(self, launch: Launch) -> tuple[int, ...]:
        """The concurrency levels this workload runs at on a launch: its own list, else the run's, else the
        node's."""
        return self.concurrency if self.own_concurrency or not launch.concurrency else launch.concurrency


ONCE_SUFFIX = "--once"  # a configuration's launch of its one-off sets (Launch.once): after every round, judged in none
# Between a stack and a run's label, in the launch's name (<stack config>+<label>--<variant>) and in its rows' stack
# column (<engine>+<label>): a character none of the shipped stack, engine or variant names holds.
LABEL_JOIN = "+"


def labelled(name: str, label: str | None) -> str:
    """A stack's or engine's name with a run's label (runs[].label) where it has one."""
    return name if label is None else f"{name}{LABEL_JOIN}{label}"


def configuration_name(stack_config: str, variant: str, label: str | None = None) -> str:
    """A server configuration's name, the first replicate's run folder: <stack config>[+<label>]--<variant>."""
    return f"{labelled(stack_config, label)}--{variant}"


@dataclass(frozen=True)
class Launch:
    """One server launch: everything that needs a restart to change."""

    node: str
    stack_config: str
    engine: str
    variant: str
    spec_method: str
    spec_engine_type: str | None
    spec_tokens: int | None
    spec_extra: dict  # engine-specific speculative settings (SGLang eagle_topk, vLLM prompt_lookup_max, ...)
    server_args: dict
    model: Model
    draft_model: Model | None
    launch_mode: str
    launch_target: str | None  # binary, image or URL, by mode
    env_name: str  # native mode: the environment made from envs/<env_name>.txt
    container_cli: str  # image mode: docker or podman
    context_len: int
    bind_host: str
    env: dict = field(default_factory=dict)
    tp: int = 1  # tensor-parallel size, as the engine reads it from server_args (its adapter's tp_size)
    workloads: tuple[str, ...] = ()  # the workloads this launch measures (the run's, else the node's)
    concurrency: tuple[int, ...] = ()  # the run's concurrency levels; empty: each workload's (see Workload.levels)
    probes_off: str | None = None  # why this launch runs no probe set (the node or run set probes: null)
    accuracy_off: str | None = None  # why this launch runs no accuracy set (accuracy: null)
    power_caps_w: tuple[float, ...] = ()  # the caps its cells sweep (the run's, else the node's)
    repeats: int | None = None  # measured repeats per cell (the run's); None: the config's measure.repeats
    replicate: int = 1  # which fresh server process of this configuration (node `launches`); round k runs replicate k
    once: bool = False  # the launch of the configuration's one-off workloads, after What to run's rounds (expand.one_offs_apart)
    # The configuration's one-off workloads whose deciding points every round repeats (the long-context use's: a
    # ladder's longest prompt that fits, long-prefill; expand.long_context_deciding). A later round's launch, and a
    # first-round one whose one-offs run apart (`apart`), run only those points of them; the --once launch the rest.
    deciding: tuple[str, ...] = ()
    apart: bool = False  # a first-round launch whose one-off sets run on the configuration's --once launch
    label: str | None = None  # the run's label (runs[].label): two runs of one stack file told apart; None: unlabelled

    @property
    def speculates(self) -> bool:
        """Whether it runs speculative decoding; else it is the no-spec baseline its speculative variants are judged against."""
        return self.spec_method != NO_SPEC

    @property
    def configuration(self) -> str:
        """The server configuration, the same for every replicate of it; a labelled run's carries its label."""
        return configuration_name(self.stack_config, self.variant, self.label)

    @property
    def stack(self) -> str:
        """Its rows' stack column (results/store.py): the engine, with the run's label where it has one, so two
        runs of one stack stand apart wherever the analysis and the report group rows by stack."""
        return labelled(self.engine, self.label)

    @property
    def name(self) -> str:
        """The launch's run folder: the first replicate keeps the configuration's name, so adding replicates
        re-measures none that exist."""
        if self.once:
            return self.configuration + ONCE_SUFFIX
        return self.configuration if self.replicate == 1 else f"{self.configuration}--r{self.replicate}"


@dataclass(frozen=True)
class Measure:
    """The run's measure settings (config.schema.yaml `measure` documents each and holds its default): how every
    cell is driven and repeated. Built from the validated config (`of`), so a misspelt key is refused at load by
    the schema, in one line naming the file and the field; a launch spec carries it (plan/launchspec.py)."""

    repeats: int
    target_rel_ci: float | None  # None: exactly `repeats` (measure/precision.py)
    max_repeats: int
    stop_saturated: bool
    order_seed: int
    text_seed: int
    texts_across_rounds: str  # new | same
    warmup_requests: int
    client_processes: int | str  # a count, or "auto"
    ready_timeout_s: float
    request_timeout_s: float
    stall_timeout_s: float
    keep_failed: bool
    spread_flag_ratio: float

    @classmethod
    def of(cls, cfg: dict) -> Measure:
        """From a validated top-level config (config/loader.py fills in the schema's defaults)."""
        return cls(**cfg["measure"])

    @property
    def most_repeats(self) -> int:
        """The most repeats a cell may get: `repeats`, or up to `max_repeats` under a target (measure/precision.py)."""
        return self.repeats if self.target_rel_ci is None else max(self.repeats, self.max_repeats)


@dataclass(frozen=True)
class GpuIdle:
    """When a launch's GPUs count as idle and how long to wait for it (node.schema.yaml `gpu_idle`)."""

    max_used_mib: float
    wait_s: float
    release_wait_s: float


@dataclass(frozen=True)
class HostIdle:
    """When the host's CPUs count as busy outside a launch, how long to wait for them and what then
    (node.schema.yaml `host_idle`, host/hostload.py)."""

    busy_share: float
    window_s: float
    wait_s: float
    on_busy: str  # refuse | flag

    @classmethod
    def from_schema(cls) -> HostIdle:
        """The schema's defaults: a node built without the field (a test's, or a plan from before it) gets them."""
        fields = load_schema("node")["properties"]["hardware"]["properties"]["host_idle"]["properties"]
        return cls(**{name: spec["default"] for name, spec in fields.items()})


@dataclass(frozen=True)
class Rental:
    """What a GPU node costs and how fast it fetches models (node.schema.yaml `rental`): the rehearsal's budget prices
    the real run's GPU-node hours, the builds and the model downloads with it."""

    gpu_hour_usd: float | None
    download_gbps: float
    gpus: int = 1  # hardware.gpu.count, at least one: a GPU-node hour is this many GPU-hours

    @property
    def node_hour_usd(self) -> float | None:
        return None if self.gpu_hour_usd is None else self.gpu_hour_usd * self.gpus

    @classmethod
    def of(cls, node_doc: dict) -> Rental:
        """From a validated node document (defaults filled)."""
        return cls(**node_doc["rental"], gpus=max(node_doc["hardware"]["gpu"]["count"], 1))


@dataclass(frozen=True)
class Decision:
    """What to run's sequential rule for a node (node.schema.yaml `launches` and `decide`): the first look's
    round, the budget's most rounds and minutes, and the smallest gain worth switching for; `horizons`, each
    stack's horizon as its first look fixed it (a stack not named: `most`)."""

    first: int
    most: int
    min_gain: float
    budget_minutes: float | None
    horizons: dict[str, int] | None = None

    def of_stack(self, stack: str) -> Decision:
        """The rule one stack's sequence runs under: its own horizon, fixed at its first look (docs/what-to-run.md)."""
        return dataclasses.replace(self, most=(self.horizons or {}).get(stack, self.most), horizons=None)

    @classmethod
    def of(cls, node_doc: dict) -> Decision:
        """From a validated node document (defaults filled): the first look after `launches` rounds, at least two
        (a paired interval needs two), the last at `decide.most_launches` (null: the first is the last), the rest
        from `decide`."""
        decide = node_doc["decide"]
        return cls(first=max(2, node_doc["launches"]), most=max(decide["most_launches"] or 0, node_doc["launches"]),
                   min_gain=decide["min_gain"], budget_minutes=decide["budget_minutes"])


@dataclass(frozen=True)
class Slurm:
    """Where the node's measure jobs go under the SLURM profile (node.schema.yaml `slurm` documents each)."""

    partition: str | None = None
    constraint: str | None = None
    gpu_model: str | None = None
    runtime_min: int = 240
    cpus: int | None = None
    mem_mb: int | None = None
    slurm_extra: str | None = None


@dataclass(frozen=True)
class Node:
    name: str
    file: str
    gpu_model: str
    gpu_count: int
    gpu_devices: tuple[str, ...]  # the GPUs this node's launches use (indices or UUIDs); empty = the first count
    gpu_memory_gib: float | None
    bandwidth_gbs: float | None
    cpu_threads: int | None
    os: str
    power_caps_w: tuple[float, ...]
    api_key_env: str | None
    lock_dir: str | None  # host-wide GPU locks and records (host/locks.py); null: the default folder
    gpu_idle: GpuIdle  # checked before every launch on its GPUs, awaited after (host/gpustate.py)
    allow_queueing: bool  # cells may exceed a server's concurrent slots
    workloads: tuple[Workload, ...]
    launches: tuple[Launch, ...]
    prepared_models: tuple[Model, ...] = ()  # the node's models the pipeline makes (a `prepare` recipe), used or not
    quality_reference: Model | None = None  # the model every launch's divergence is measured from (node `quality_reference`)
    # The largest divergence from quality_reference the node's owner accepts (node `quality_limit`: mean_kld,
    # same_top_token; either null: not judged); a launch beyond it is flagged in the verdict. None: not judged.
    quality_limit: dict | None = None
    slurm: Slurm = Slurm()
    decision: Decision | None = None  # What to run's sequential rule (analysis/decide.py)
    later_rounds: tuple[Launch, ...] = ()  # rounds past `launches`, launched only while a cell is undecided
    client_cpus: tuple[int, ...] | None = None  # the measuring process's cores; the server gets the rest (host/affinity.py)
    interconnect: str = "none"  # between the node's GPUs: none | pcie | nvlink (a TP launch's all-reduces)
    host_idle: HostIdle = field(default_factory=HostIdle.from_schema)  # checked before every launch, watched per cell
    compute_capability: str | None = None  # hardware.gpu.compute_capability ("9.0"): the file's, else host/boards.py's
    # The board's power (NVML's default limit), settable (min, max) W and dense tensor peaks in TFLOPS by math format,
    # as the file states them, else as host/boards.py knows the model (boards.gpu_facts); None: a CPU node.
    board_power_w: float | None = None
    power_limit_w: tuple[float, float | None] | None = None  # the highest None where the boards differ
    tensor_tflops: dict | None = None

    @property
    def configured_gpus(self) -> tuple[str, ...]:
        """The GPUs as the config names them (hardware.gpu.devices, else indices 0..count-1); the measure
        job names them by UUID where NVML sees them."""
        return self.gpu_devices or tuple(str(i) for i in range(self.gpu_count))


def from_json(kind, value):
    """A plan type back from its JSON form (what asdict and json.dumps made of it): dataclasses field by
    field, lists as the tuples they were, so a field added to a type needs no reader of its own."""
    if value is None:
        return None
    if typing.get_origin(kind) in (types.UnionType, typing.Union):
        return from_json(next(arg for arg in typing.get_args(kind) if arg is not type(None)), value)
    if dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        return kind(**{f.name: from_json(hints[f.name], value[f.name]) for f in dataclasses.fields(kind) if f.name in value})
    if typing.get_origin(kind) is tuple:
        args = typing.get_args(kind)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_json(args[0], item) for item in value)
        return tuple(from_json(arg, item) for arg, item in zip(args, value))
    return value
