"""A preflight on the GPU machine, before the real run (`stackbench preflight --node N`): one line per check,
with what to do where it fails. It changes nothing it does not put back: the cap check sets one cap through
host/powercap.py, reads it back and restores the limit it found (a state file guards it as a launch's).

The checks read NVML through telemetry.NvmlGpus (the real pynvml, or rehearsal/simgpu.py's double, which
`--simulated` uses on a machine without GPUs) and the node as plain facts (Expected): the CLI loads the
node file (plan/) and hands them over, so this module sits in host/ beside what it checks.

- gpus: the selected GPUs are the node file's model, count and memory;
- board: what NVML reports of the board (its default and settable power limits, memory, the bandwidth its bus
  width and memory clock give, and its clocks) against the facts the node file plans with (hardware.gpu, the
  file's or host/boards.py's), each disagreement named with the value to set;
- idle: no compute process on them and memory at or under gpu_idle.max_used_mib (host/gpustate.py);
- driver: the driver and its CUDA version, and the compute capability the CUDA builds are made for;
- caps: every planned cap inside NVML's limits, and one set, read back and restored with this user's rights
  (or: caps will be skipped, and the report will say so);
- p2p: peer-to-peer reads between the GPUs each tensor-parallel launch uses (NCCL's fast path), and NVLink
  where the node says so;
- engines: each launch's environment built (its ready.json), binary present, image pulled, or external URL answering;
- models: each model's files where the node says, and free disk beside the engine environments.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stackbench.host import boards, gpustate, telemetry
from stackbench.host.powercap import PowerCapper

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"
MEMORY_TOLERANCE = 0.06  # NVML's total is the board's less what the driver reserves: 24 GiB reads ~23.6
MIN_FREE_GIB = 30.0  # beside the engine environments: a CUDA build or an engine's wheels, and its caches
POWER_TOLERANCE_W = 1.0  # NVML's limits are whole watts on every board seen; a node file may round them
BANDWIDTH_TOLERANCE = 0.05  # bus width x memory clock against a spec sheet's rounded figure (a 4090's 1,008 GB/s)


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | FAIL | skip
    found: str
    todo: str = ""  # what to do; empty where nothing is to be done

    def text(self) -> str:
        return f"{self.status:<4} {self.name}: {self.found}" + (f"; do: {self.todo}" if self.todo else "")


@dataclass(frozen=True)
class Engine:
    """What one launch runs and where it comes from, as the plan says (the CLI fills it)."""

    launch: str
    mode: str  # native | image | external
    target: str | None  # the ready.json (native, pipeline-built), binary, image or URL
    container_cli: str = "docker"
    built_by: str = ""  # native, pipeline-built: the command that builds it


@dataclass(frozen=True)
class Expected:
    """The node file's facts the checks compare with the machine."""

    file: str
    gpu_model: str
    gpu_count: int
    memory_gib: float | None = None
    compute_capability: str | None = None
    board_power_w: float | None = None  # the facts the plan and rehearsal rest on (Node, boards.gpu_facts)
    power_limit_w: tuple[float, float | None] | None = None
    bandwidth_gbs: float | None = None
    interconnect: str = "pcie"
    devices: tuple[str, ...] = ()
    max_used_mib: float = 1024.0
    caps_w: tuple[float, ...] = ()
    tp_sizes: tuple[int, ...] = ()
    engines: tuple[Engine, ...] = ()
    models: tuple[tuple[str, str], ...] = ()  # (models.<key>, path)
    envs_dir: str = ".envs"


@dataclass
class Machine:
    """How the checks reach this machine: NVML (None: the real pynvml), the environment that selects GPUs, the
    lock dir for the cap check's restore state, and the tools outside Python (tests pass doubles)."""

    nvml: object = None
    environ: Mapping[str, str] | None = None
    state_dir: Path | None = None
    run: Callable[[list[str]], int] = field(default=lambda argv: subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False).returncode)
    which: Callable[[str], str | None] = shutil.which
    disk_free_gib: Callable[[Path], float] = field(default=lambda path: shutil.disk_usage(path).free / 2**30)
    reaches: Callable[[str], str | None] = field(default=lambda url: nothing_answers(url))


def nothing_answers(url: str) -> str | None:
    """Why nothing answers at `url` (connection refused, a name that does not resolve, no connection in 5 s); None
    where something does, whatever it answers (serve/launchers.py ExternalLauncher refuses the same at start)."""
    import httpx

    try:
        httpx.get(url, timeout=5)
    except (httpx.ConnectError, httpx.ConnectTimeout) as err:
        return str(err)
    except httpx.HTTPError:
        pass
    return None


def check_gpus(gpus: telemetry.NvmlGpus, want: Expected) -> Check:
    names = sorted({info.name for info in gpus.info})
    memory = [gpus.nvml.nvmlDeviceGetMemoryInfo(h).total / 2**30 for h in gpus.handles]
    found = f"{len(gpus.info)}x {', '.join(names)}, {min(memory):.1f} GiB each ({gpus.source})"
    if names != [want.gpu_model]:
        return Check("gpus", FAIL, found, f"set hardware.gpu.model to {names[0]!r} in {want.file}, or select the "
                                          "node's GPUs (hardware.gpu.devices or CUDA_VISIBLE_DEVICES)")
    if want.memory_gib and min(memory) < want.memory_gib * (1 - MEMORY_TOLERANCE):
        return Check("gpus", FAIL, found, f"hardware.gpu.memory_gib says {want.memory_gib:g}: set it to what the "
                                          f"GPU has ({min(memory):.0f}) in {want.file}")
    return Check("gpus", OK, found + f", as {want.file} says")


def board_reading(nvml, handle) -> dict:
    """What NVML reports of one board: board power (its default limit) and settable range in W, memory in GiB,
    peak bandwidth in GB/s (boards.memory_bandwidth_gbs; None where NVML does not say), max SM and memory clocks."""
    low, high = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
    return {"board_power_w": nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) / 1000,
            "power_limit_w": (low / 1000, high / 1000),
            "memory_gib": nvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30,
            "bandwidth_gbs": boards.memory_bandwidth_gbs(nvml, handle),
            "clocks_mhz": (nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM),
                           nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM))}


def board_disagreements(reading: dict, want: Expected) -> list[str]:
    """Where the node file's board facts disagree with NVML's reading (board_reading): one phrase each, naming the
    field and the value to set. Memory is read as the gpus check reads it (NVML's total is the board's less the
    driver's reserve); a fact the file does not hold is not compared."""
    out = []
    if want.board_power_w and abs(reading["board_power_w"] - want.board_power_w) > POWER_TOLERANCE_W:
        out.append(f"hardware.gpu.board_power_w says {want.board_power_w:g} W, NVML's default limit is "
                   f"{reading['board_power_w']:g} W")
    if want.power_limit_w and any(b is not None and abs(a - b) > POWER_TOLERANCE_W
                                  for a, b in zip(reading["power_limit_w"], want.power_limit_w)):
        low, high = reading["power_limit_w"]
        said = "-".join("?" if w is None else f"{w:g}" for w in want.power_limit_w)
        out.append(f"hardware.gpu.power_limit_w says {said} W, NVML accepts {low:g}-{high:g} W: set [{low:g}, {high:g}]")
    if want.memory_gib and reading["memory_gib"] > want.memory_gib * (1 + MEMORY_TOLERANCE):
        out.append(f"hardware.gpu.memory_gib says {want.memory_gib:g}, NVML reads {reading['memory_gib']:.1f} GiB")
    if want.bandwidth_gbs and reading["bandwidth_gbs"] and \
            abs(reading["bandwidth_gbs"] - want.bandwidth_gbs) > BANDWIDTH_TOLERANCE * want.bandwidth_gbs:
        out.append(f"hardware.gpu.bandwidth_gbs says {want.bandwidth_gbs:g}, NVML's bus width and memory clock give "
                   f"{reading['bandwidth_gbs']:g} GB/s")
    return out


def check_board(gpus: telemetry.NvmlGpus, want: Expected) -> Check:
    try:
        reading = board_reading(gpus.nvml, gpus.handles[0])
    except (gpus.nvml.NVMLError, AttributeError) as err:
        return Check("board", SKIP, f"NVML cannot say ({err})", "compare with `nvidia-smi -q -d POWER,MEMORY,CLOCK`")
    low, high = reading["power_limit_w"]
    sm, memory = reading["clocks_mhz"]
    found = (f"NVML: board power {reading['board_power_w']:g} W, limits {low:g}-{high:g} W, "
             f"{reading['memory_gib']:.1f} GiB, {reading['bandwidth_gbs'] or '?'} GB/s, max clocks SM {sm} / memory "
             f"{memory} MHz")
    disagree = board_disagreements(reading, want)
    if disagree:
        return Check("board", WARN, found + "; " + "; ".join(disagree),
                     f"set them in {want.file}: the rehearsal's pace, power and caps rest on the file's facts")
    return Check("board", OK, found + f", as {want.file} says")


def check_idle(gpus: telemetry.NvmlGpus, want: Expected) -> Check:
    busy = gpustate.busy(gpus, want.max_used_mib)
    if busy:
        return Check("idle", FAIL, "; ".join(busy), "stop those processes or wait for them (the run waits "
                                                    "gpu_idle.wait_s, then marks its cells gpu_busy)")
    return Check("idle", OK, f"no compute process, memory at or under {want.max_used_mib:g} MiB on each GPU")


def check_driver(gpus: telemetry.NvmlGpus, want: Expected) -> Check:
    n = gpus.nvml
    try:
        driver = n.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        cuda = n.nvmlSystemGetCudaDriverVersion()
    except (n.NVMLError, AttributeError) as err:
        return Check("driver", FAIL, f"driver version unreadable ({err})", "check the driver with nvidia-smi")
    major, minor = n.nvmlDeviceGetCudaComputeCapability(gpus.handles[0])
    found = f"driver {driver}, CUDA {cuda // 1000}.{cuda % 1000 // 10}, compute capability {major}.{minor}"
    if want.compute_capability and want.compute_capability != f"{major}.{minor}":
        return Check("driver", FAIL, found, f"hardware.gpu.compute_capability says {want.compute_capability}: set "
                                            f"{major}.{minor} in {want.file} (llama.cpp's CUDA build is made for it)")
    return Check("driver", OK, found)


def check_caps(gpus: telemetry.NvmlGpus, want: Expected, state_dir: Path | None) -> Check:
    if not want.caps_w:
        return Check("caps", SKIP, "the node plans no power cap")
    for cap in sorted(set(want.caps_w)):
        outside = [i for i in gpus.info if not i.min_limit_w <= cap <= i.max_limit_w]
        if outside:
            info = outside[0]
            return Check("caps", FAIL, f"{cap:g} W is outside GPU {info.index}'s range {info.min_limit_w:g}-"
                                       f"{info.max_limit_w:g} W (NVML)",
                         f"drop it from power_caps_w in {want.file}, or state the range as hardware.gpu.power_limit_w")
    cap = min(want.caps_w)
    capper = PowerCapper(gpus, **({"state_dir": state_dir} if state_dir else {}), settle_s=0.0)
    with capper:
        found_w = dict(capper.found)
        result = capper.apply(cap)
    back = {info.uuid: gpus.limit_w(info.uuid) for info in gpus.info}
    if any(abs(back[u] - w) > 0.5 for u, w in found_w.items()):
        return Check("caps", FAIL, f"limits not restored: {back} W, found {found_w} W",
                     "set them back by hand (nvidia-smi -i <GPU> -pl <W>)")
    limits = "/".join(f"{w:g}" for w in sorted(set(found_w.values())))
    if not result.applied:
        return Check("caps", WARN, f"{cap:g} W could not be set: {result.reason}",
                     "run the measure jobs as a user who may set limits (root, or sudo nvidia-smi -pl works), "
                     "or the capped cells run at the stock limit and the report says caps were skipped")
    return Check("caps", OK, f"{cap:g} W set and read back on {len(gpus.info)} GPUs, restored to {limits} W")


def _p2p_index(n, name: str) -> int:
    value = getattr(n, name)
    return value[0] if isinstance(value, tuple) else value  # nvidia-ml-py writes NVML_P2P_CAPS_INDEX_READ as (0,)


def check_p2p(gpus: telemetry.NvmlGpus, want: Expected) -> Check:
    group = max((tp for tp in want.tp_sizes if tp > 1), default=1)
    if group < 2:
        return Check("p2p", SKIP, "no launch uses tensor parallelism")
    n, handles, info = gpus.nvml, gpus.handles[:group], gpus.info[:group]
    pairs = [(a, b) for a in range(group) for b in range(a + 1, group)]
    try:
        read = {(a, b): n.nvmlDeviceGetP2PStatus(handles[a], handles[b], _p2p_index(n, "NVML_P2P_CAPS_INDEX_READ"))
                for a, b in pairs}
        nvlink = {(a, b): n.nvmlDeviceGetP2PStatus(handles[a], handles[b], _p2p_index(n, "NVML_P2P_CAPS_INDEX_NVLINK"))
                  for a, b in pairs} if want.interconnect == "nvlink" else {}
    except (n.NVMLError, AttributeError) as err:
        return Check("p2p", SKIP, f"NVML cannot say ({err})", "check with `nvidia-smi topo -p2p r`")
    gpus_named = ", ".join(str(i.index) for i in info)
    no_link = [f"{info[a].index}-{info[b].index}" for (a, b), status in nvlink.items() if status != n.NVML_P2P_STATUS_OK]
    if no_link:
        return Check("p2p", FAIL, f"the node says interconnect nvlink, NVML sees no NVLink between GPUs {', '.join(no_link)}",
                     f"seat the bridge, or set hardware.interconnect to pcie in {want.file}")
    no_p2p = [f"{info[a].index}-{info[b].index}" for (a, b), status in read.items() if status != n.NVML_P2P_STATUS_OK]
    if no_p2p:
        return Check("p2p", WARN, f"no peer-to-peer reads between GPUs {', '.join(no_p2p)} (TP {group} on GPUs {gpus_named})",
                     "NCCL's all-reduce goes through host memory, slower at TP: expected on GeForce cards; "
                     "if a TP launch hangs at start, run it with NCCL_P2P_DISABLE=1")
    return Check("p2p", OK, f"peer-to-peer reads between GPUs {gpus_named} (TP {group})"
                 + (", over NVLink" if nvlink else ""))


def check_engines(want: Expected, machine: Machine) -> list[Check]:
    checks = []
    for engine in want.engines:
        name = f"engine {engine.launch}"
        if engine.mode == "external":
            why = machine.reaches(str(engine.target))
            checks.append(Check(name, FAIL, f"external server {engine.target}: nothing answers ({why})",
                                f"start it, or fix the run's launch.url in {want.file}") if why else
                          Check(name, OK, f"external server {engine.target} answers (started by its owner)"))
        elif engine.mode == "image":
            if machine.which(engine.container_cli) is None:
                checks.append(Check(name, FAIL, f"{engine.container_cli} not found", f"install {engine.container_cli}"))
            elif machine.run([engine.container_cli, "image", "inspect", str(engine.target)]) != 0:
                checks.append(Check(name, FAIL, f"image {engine.target} not on this machine",
                                    f"{engine.container_cli} pull {engine.target}"))
            else:
                checks.append(Check(name, OK, f"image {engine.target} present"))
        elif engine.built_by:
            if Path(str(engine.target)).exists():
                checks.append(Check(name, OK, f"environment built ({engine.target})"))
            else:
                checks.append(Check(name, FAIL, f"environment not built ({engine.target} missing)", engine.built_by))
        elif not Path(str(engine.target)).exists():
            checks.append(Check(name, FAIL, f"binary {engine.target} missing", "fix the run's launch.binary"))
        else:
            checks.append(Check(name, OK, f"binary {engine.target}"))
    return checks


def check_models(want: Expected, machine: Machine) -> list[Check]:
    checks = []
    for key, path in want.models:
        if Path(path).exists():
            checks.append(Check(f"model {key}", OK, path))
        else:
            checks.append(Check(f"model {key}", FAIL, f"{path} not found",
                                f"put the files there or set {key}'s path (gguf or hf_dir) in {want.file}"))
    where = Path(want.envs_dir)
    while not where.exists() and where != where.parent:
        where = where.parent
    free = machine.disk_free_gib(where)
    if free < MIN_FREE_GIB:
        checks.append(Check("disk", WARN, f"{free:.0f} GiB free at {where}",
                            f"free at least {MIN_FREE_GIB:g} GiB for the engine environments and their caches"))
    else:
        checks.append(Check("disk", OK, f"{free:.0f} GiB free at {where}"))
    return checks


def preflight(want: Expected, machine: Machine) -> list[Check]:
    """Every check, in order; the GPU checks are skipped, saying why, where the GPUs cannot be opened."""
    checks = []
    try:
        gpus, why = telemetry.open_gpus(want.gpu_count, machine.nvml, want.devices or None, machine.environ)
    except ValueError as err:
        gpus, why = None, str(err)
    if gpus is None:
        checks.append(Check("gpus", FAIL, why, "install the NVIDIA driver and nvidia-ml-py, or select the node's "
                                               "GPUs (hardware.gpu.devices, CUDA_VISIBLE_DEVICES)")
                      if want.gpu_count else Check("gpus", SKIP, "a CPU node"))
        checks += [Check(name, SKIP, "no GPU to check") for name in ("board", "idle", "driver", "caps", "p2p")]
    else:
        idle = check_idle(gpus, want)
        # A cap is never set on a GPU another process is using.
        caps = check_caps(gpus, want, machine.state_dir) if idle.status != FAIL else \
            Check("caps", SKIP, "the GPUs are busy: no limit touched", "run the preflight again once they are idle")
        checks += [check_gpus(gpus, want), check_board(gpus, want), idle, check_driver(gpus, want), caps,
                   check_p2p(gpus, want)]
    return [*checks, *check_engines(want, machine), *check_models(want, machine)]
