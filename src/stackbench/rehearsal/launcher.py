"""A rehearsal's launches: the stand-in engine behind the argv the real run would start, on a simulated
host of the node's GPUs.

The real launcher builds the command exactly as a real run would; the stand-in receives what follows the
executable (native mode: the argv after the binary; image mode: the container's command after the image,
its entrypoint first; no container is started). Model files are not looked for: a rehearsal runs where
the node's checkpoints are not. The stand-in's start-up lines and pace come from `engine_facts`: the
model's geometry (configs/models, else the model's own files), its quantization's bits per weight, the
node's GPU memory and bandwidth, the launch's TP size, slots, context and KV dtype.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from stackbench.config.model import Launch, Node
from stackbench.config.rehearsal import STANDIN_VERSION, lock_dir
from stackbench.host import boards
from stackbench.models import geometry
from stackbench.models.formats import BITS_PER_WEIGHT, KV_DTYPE_BYTES
from stackbench.rehearsal import calibration, simgpu, standin
from stackbench.rehearsal.formats import formats_for
from stackbench.serve import launchers
from stackbench.serve.process import NotRunnable, ProcessLauncher

GIB = 2**30
REASONING_TOKENS = 64  # a stand-in with a reasoning parser thinks this many tokens first (at most half the output)


def gpu_state(node: str) -> Path:
    return lock_dir(node) / "simulated-gpus.json"


def simulated_host(node: Node, time_scale: float = 1.0) -> simgpu.NvmlDouble | None:
    """The node's GPUs and more on a simulated host, its power averaged over NVML's second at the rehearsal's time
    scale; None on a CPU node."""
    if not node.gpu_count:
        return None
    return simgpu.simulated_host(node.gpu_model, node.gpu_count, node.gpu_memory_gib, gpu_state(node.name),
                                 average_s=simgpu.POWER_AVERAGE_S / time_scale, board_w=node.board_power_w,
                                 limits_w=node.power_limit_w, bandwidth_gbs=node.bandwidth_gbs)


def model_figures(launch: Launch, root: Path = Path(".")) -> dict:
    """The model's geometry: a configs/models entry matching its path or weights family, else its own files."""
    names = f"{launch.model.path} {launch.model.weights or ''} {launch.model.name}".lower()
    for found in geometry.load_published_geometries(root):
        if any(pattern in names for pattern in found.match):
            return dict(found.figures)
    if Path(launch.model.path).exists():
        read = geometry.read_geometry(launch.model.path)
        return {"attention_layers": read.attention_layers, "kv_heads": read.kv_heads, "key_length": read.key_length,
                "value_length": read.value_length, "weight_bytes": read.weight_bytes, "layers": read.layers}
    raise NotRunnable(f"rehearsal: no geometry for model {launch.model.name} ({launch.model.path}): add a "
                      "configs/models/<name>.yaml whose match names it")


def bits_per_weight(quant: str) -> float:
    label = quant.split("(")[0].strip().lower().replace("-", "_")
    if label not in BITS_PER_WEIGHT:
        raise NotRunnable(f"rehearsal: no bits per weight known for quant {quant!r} (models/formats.py BITS_PER_WEIGHT)")
    return BITS_PER_WEIGHT[label]


def compute_capability(node: Node) -> str | None:
    """The node's GPU compute capability (its file's, else host/boards.py's: Node.compute_capability); None for a
    CPU node."""
    return node.compute_capability if node.gpu_count else None


def compute_facts(node: Node, launch: Launch, params: float, bpw: float) -> dict:
    """How the checkpoint's math runs on the node's GPU: the prefill's compute roofline and the decode step's
    ridge (standin.prefill_roofline_tps, ridge_tokens) from the tensor peak of the format its matmuls run in
    (host/boards.py TENSOR_TFLOPS), and the decode's kernel share where an FP4 checkpoint is unpacked
    (standin.UNPACKED_FP4_SHARE), each with what it rests on (`compute_basis`)."""
    capability = compute_capability(node)
    unpacked = boards.fp4_unpacked(capability, launch.model.quant)
    kernel = {"kernel_share": standin.UNPACKED_FP4_SHARE, "fp4_unpacked": True} if unpacked else {}
    unpacking = (f"; {launch.model.quant} unpacked to BF16 (no FP4 tensor cores on sm_{str(capability).replace('.', '')}): "
                 f"decode at {standin.UNPACKED_FP4_SHARE:.2f} of the step share (rehearsal/standin.py UNPACKED_FP4_SHARE)"
                 if unpacked else "")
    peak = boards.tensor_tflops(node.tensor_tflops, capability, launch.model.quant) if node.gpu_count else None
    if peak is None:
        return {**kernel, "compute_basis": f"prefill {standin.PREFILL_PER_DECODE:g}x decode: no "
                f"{boards.math_format(capability, launch.model.quant).upper()} tensor peak known for "
                f"{node.gpu_model or 'a CPU node'} (hardware.gpu.tensor_tflops, host/boards.py TENSOR_TFLOPS)"
                f"{unpacking}", "prefill_per_decode": True}
    tflops, fmt = peak
    tp = max(launch.tp, 1)
    return {**kernel, "prefill_roofline_tps": standin.prefill_roofline_tps(tflops, params, tp),
            "ridge_tokens": standin.ridge_tokens(tflops, node.bandwidth_gbs or 0.0, bpw),
            "compute_basis": f"prefill at {calibration.PREFILL_SHARE:g} of {tflops:g} TFLOPS {fmt.upper()} x TP {tp} "
                             f"(host/boards.py TENSOR_TFLOPS, rehearsal/calibration.py PREFILL_SHARE){unpacking}"}


def engine_facts(node: Node, launch: Launch, adapter) -> dict:
    """What the stand-in prints at start-up and paces itself by, sized from geometry, quantization and
    the node's GPUs. A KV pool that does not fit is left negative: the stand-in then refuses to start, as
    the engine would."""
    figures = model_figures(launch)
    bpw = bits_per_weight(launch.model.quant)
    weight_bytes = figures.get("weight_bytes") or figures["params_b"] * 1e9 * bpw / 8
    params = figures["params_b"] * 1e9 if figures.get("params_b") else weight_bytes * 8 / bpw
    devices = max(node.gpu_count, 1)
    tp = launch.tp  # 1 where the engine splits layers: one GPU reads at a time
    kv_dtype = str(launch.server_args.get(adapter.kv_dtype_arg) or adapter.default_kv_dtype)
    if kv_dtype not in KV_DTYPE_BYTES:
        raise NotRunnable(f"rehearsal: no byte width known for KV dtype {kv_dtype!r} (models/formats.py KV_DTYPE_BYTES)")
    kv_bytes = KV_DTYPE_BYTES[kv_dtype]
    layers = int(figures.get("attention_layers") or figures.get("layers"))
    per_token = geometry.kv_bytes_per_token(layers, figures["kv_heads"], figures["key_length"], figures["value_length"],
                                            kv_bytes, kv_bytes, tp)
    slots = adapter.concurrent_slots(launch)
    slot_count = slots.count if slots else 1
    memory_gib = node.gpu_memory_gib or 0.0
    weights_gib_per_gpu = weight_bytes / GIB / (tp if tp > 1 else devices)
    if adapter.gpu_memory_share is None:  # a pool of the context, split into a stream per slot unless unified
        streams = 1 if adapter.request_context(launch) == launch.context_len else slot_count
        pool_tokens = launch.context_len
        kv_gib = pool_tokens * per_token / GIB
    else:
        flag, default = adapter.gpu_memory_share
        kv_gib = memory_gib * float(launch.server_args.get(flag) or default) - weights_gib_per_gpu
        pool_tokens = int(kv_gib * GIB / per_token)
        streams = 1
    return {"engine": launch.engine, "model_path": launch.model.path, "served_model_name": launch.model.name,
            "quant": launch.model.quant, "tp": launch.tp, "devices": devices, "bpw": bpw,
            "weights_mib": weight_bytes / 2**20, "weights_gib_per_gpu": weights_gib_per_gpu,
            "free_after_weights_gib": memory_gib - weights_gib_per_gpu,
            "free_after_pool_gib": memory_gib - weights_gib_per_gpu - max(kv_gib, 0.0),
            "kv_cache_gib": kv_gib, "kv_cache_mib": kv_gib * 1024, "kv_pool_tokens": pool_tokens, "kv_dtype": kv_dtype,
            "attention_layers": layers, "layers": int(figures.get("layers") or layers), "slots": slot_count,
            "streams": streams, "context_len": launch.context_len,
            "ctx_per_slot": adapter.request_context(launch),
            "attention_backend": launch.server_args.get("attention_backend"),
            "reasoning_tokens": REASONING_TOKENS if adapter.reasoning_parser_arg and launch.server_args.get(adapter.reasoning_parser_arg) else 0,
            "spec_tokens": launch.spec_tokens if launch.speculates else 0,
            "roofline_decode_tps": standin.roofline_decode_tps(node.bandwidth_gbs or 0.0, weight_bytes, tp),
            # TP's all-reduces per decode step over the node's interconnect, or why they are not modeled
            **dict(zip(("allreduce_s_per_step", "tp_cost"),
                       standin.allreduce_s_per_step(int(figures.get("layers") or layers), tp,
                                                    getattr(node, "interconnect", None)))),
            # what each token of KV in use adds to a decode step's bytes, against the weights (Pace.slowdown)
            "kv_share_per_token": per_token * tp / weight_bytes, **compute_facts(node, launch, params, bpw)}


def pinned(launch: Launch, root: Path = Path(".")) -> str | None:
    """What the real run starts, as pinned: a native environment's first requirement (envs/<env>.txt, e.g.
    vllm==0.33.0), an image's reference; None for a binary or a URL."""
    if launch.launch_mode == "image":
        return launch.launch_target
    requirements = root / "envs" / f"{launch.env_name}.txt"
    if launch.launch_mode != "native" or launch.launch_target or not requirements.exists():
        return None
    lines = [line.split("#")[0].strip() for line in requirements.read_text().splitlines()]
    return next((line for line in lines if line), None)


def answer_key(node: Node, launch: Launch) -> dict[str, str]:
    """The launch's accuracy questions (as the spec carries them) -> reference: the stand-in answers a stated
    share of them right (standin.accuracy_answer)."""
    return {item["question"]: item["reference"] for w in node.workloads
            if w.name in launch.workloads and w.accuracy for item in w.accuracy.get("items", ())}


class StandinLauncher(ProcessLauncher):
    """The stand-in as a process group, started with the argv the launch's real launcher builds."""

    def __init__(self, launch: Launch, adapter, env_info: dict, out_dir: Path, threads: int | None,
                 gpu_devices: list[str] | None, node: Node, rehearsal: dict):
        super().__init__(launch, adapter, out_dir, threads)
        self.mode = launch.launch_mode
        self.node, self.rehearsal, self.envs_dir = node, rehearsal, Path(rehearsal["envs_dir"])
        self.gpu_devices = gpu_devices
        self.real = launchers.open_launcher(launch, adapter, env_info.get("stands_in_for") or {}, out_dir, threads,
                                            gpu_devices)
        self.facts_path = out_dir / "standin_facts.json"
        self.argv_path = out_dir / "standin_argv.json"
        self.scale_path = out_dir / "standin_time_scale"  # the current cell's time scale (set_cell_time_scale)

    def _prepare(self) -> None:
        if self.launch.launch_mode == "external":
            raise NotRunnable("rehearsal: external launches are not rehearsed yet (the stand-in would have to take the URL's port)")
        if not self.node.bandwidth_gbs:
            raise NotRunnable(f"rehearsal: {self.node.file}: hardware.gpu.bandwidth_gbs is needed to pace the stand-in")
        formats_for(self.launch.engine)  # an engine whose formats the stand-in cannot write is not rehearsed
        host = simulated_host(self.node)
        # The pace fitted to a seed post where one measured this engine and method, else the method's fit on another
        # engine (calibration.priced), else the shape.
        fit = calibration.priced(self.adapter.engine_label, self.launch.spec_method, self.launch.spec_tokens) \
            if self.launch.speculates else None
        facts = {**engine_facts(self.node, self.launch, self.adapter), "time_scale": self.rehearsal["time_scale"],
                 "accept_rate": fit[1] if fit else self.rehearsal["accept_rate"],
                 "step_share": fit[0] if fit else standin.ROOFLINE_SHARE, "calibrated": bool(fit and fit[2]),
                 "priced_as": fit[3] if fit else None,
                 "pinned": pinned(self.launch),
                 "gpu_uuids": list(self.gpu_devices or []),
                 "argv_out": str(self.argv_path), "envs_dir": str(self.envs_dir), "answers": answer_key(self.node, self.launch),
                 "time_scale_file": str(self.scale_path)}
        if host is not None:
            facts.update(gpu_state=str(gpu_state(self.node.name)), host_gpus=host.count, demand_mw=host.demand_mw,
                         idle_mw=host.idle_mw, uuid_prefix=host.uuid_prefix, memory_bound_share=host.memory_bound_share)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.facts_path.write_text(json.dumps(facts, indent=1))

    def set_cell_time_scale(self, reply_tokens: int, streams: int) -> float:
        """The time scale of the next cell, of `streams` streams whose shortest reply has `reply_tokens` tokens
        (standin.cell_time_scale), handed to the stand-in, which reads it at each request; returned for its figures."""
        scale = standin.cell_time_scale(json.loads(self.facts_path.read_text()), self.rehearsal["time_scale"], reply_tokens,
                                        streams)
        tmp = self.scale_path.with_suffix(".tmp")
        tmp.write_text(repr(scale))
        tmp.replace(self.scale_path)
        return scale

    def engine_argv(self, host: str, port: int | str) -> list[str]:
        """What the real run passes the engine: after the binary, or the container's command after the image."""
        argv = self.real.server_argv(host, port)
        if self.launch.launch_mode == "image":
            entrypoint = argv[argv.index("--entrypoint") + 1]
            return [entrypoint, *argv[argv.index(self.launch.launch_target) + 1:]]
        return argv[1:]

    def server_argv(self, host: str, port: int | str) -> list[str]:
        return [sys.executable, "-m", "stackbench.rehearsal.standin", "--rehearsal", str(self.facts_path), "--",
                *self.engine_argv(host, port)]

    def _env(self) -> dict:
        env = super()._env()
        if self.gpu_devices:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_devices)
        return env

    def identity(self) -> dict:
        real = {"native": "native build", "image": f"image {self.launch.launch_target}"}.get(self.mode, self.mode)
        return {"launch_mode": self.mode, "engine_version": STANDIN_VERSION,
                "engine_image": f"REHEARSAL: stand-in engine for {real}, simulated GPUs, time x{self.rehearsal['time_scale']:g} "
                                "(less for a cell of short replies or many streams: standin.cell_time_scale), each cell once"}
