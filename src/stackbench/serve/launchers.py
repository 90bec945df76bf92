"""Launchers: how a server comes to exist for a launch, the same for every engine.

Three modes, one interface (Launcher): native (the pipeline-built binary in its own process group),
image (the engine's container image through docker or podman) and external (a server somebody else
started, which we only reach and ask about itself). Every launcher stops what it started on every exit
path; the engine adapter supplies the rest (argv, health path, its image's entrypoint and version
command, what a running server says about itself), so no engine name appears here.

A server process runs in its own session (process group) so that its workers go down with it.
ServerProcess.stop() sends SIGTERM to the whole group, waits, then SIGKILLs the group and reaps, even
when the leader already died and left children behind.

Longer than 250 lines: three launch modes behind one interface share the process-group lifecycle, the
port retry and the model-file checks; the container mode's CLI details (GPU flags per CLI, ulimits,
stale-container removal, digest and in-image version) are the largest part.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import re
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Protocol

import httpx

from stackbench import plan
from stackbench.serve.hostlocks import ServerRecord, run_record

log = logging.getLogger("stackbench.serve.launchers")

# A port taken between choosing it and the server binding it: the server exits saying so, and the launch
# is retried on a fresh port (llama.cpp: "couldn't bind HTTP server socket"; Python servers: errno 98).
BIND_FAILURE = re.compile(r"couldn't bind|address already in use", re.IGNORECASE)
PORT_ATTEMPTS = 3


class ServerError(RuntimeError):
    """The server could not be started or stopped; the message says what the log showed."""


class ServerExited(ServerError):
    def __init__(self, code: int, log_tail: str):
        self.code = code
        self.log_tail = log_tail
        last = log_tail.strip().splitlines()[-1] if log_tail.strip() else "(empty log)"
        super().__init__(f"server exited with code {code} before it was ready; last log line: {last}")


class ReadyTimeout(ServerError):
    pass


class NotRunnable(ServerError):
    """The launch cannot start on this node (model file, environment, image or container CLI missing):
    its cells are not run."""


_LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1  # prctl(2)


def _die_with(parent_pid: int):
    """Runs in the child before exec: the kernel SIGKILLs the server when the process that started it
    dies, however it dies (OOM killer, SIGKILL, a lost session). It fires when the starting *thread* ends,
    so servers are started from the measure job's main thread. An engine's own worker processes follow
    their leader (SGLang's kill_itself_when_parent_died, vLLM's engine-core death pipe); whatever is
    left of the group is stopped at the next start from the server's record (hostlocks)."""

    def set_pdeathsig() -> None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # the parent died before the prctl took effect
            os._exit(1)

    return set_pdeathsig


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class ServerProcess:
    """Context manager: start on enter, always stop on exit."""

    die_with_parent = True  # tests switch it off to play a build from before it existed

    def __init__(self, argv: list[str], log_path: Path, base_url: str, health_path: str,
                 env: dict | None = None, grace_s: float = 10.0):
        if not argv or not isinstance(argv, list):
            raise ValueError("argv must be a non-empty list; servers are never started through a shell")
        self.argv = argv
        self.log_path = Path(log_path)
        self.base_url = base_url
        self.health_url = base_url + health_path
        self.env = {**os.environ, **(env or {})}
        self.grace_s = grace_s
        self.process: subprocess.Popen | None = None
        self._log = None
        self._log_start = 0  # where this process's output begins in the (appended) log file

    @property
    def pgid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> ServerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self._log_start = self._log.tell()
        try:
            self.process = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=self.env, start_new_session=True,
                                            preexec_fn=_die_with(os.getpid()) if self.die_with_parent else None)
        except OSError as err:
            self._log.close()
            raise ServerError(f"cannot start {self.argv[0]}: {err.strerror}") from err
        return self

    def log_text(self) -> str:
        """This process's output only: the file keeps earlier launches' logs (port retries, restarts,
        reruns of the launch), whose start-up lines must not be read as this server's."""
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(self._log_start)
                return handle.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, timeout_s: float, poll_s: float = 0.25) -> float:
        """Poll the health endpoint until it answers 200; return the seconds it took."""
        started = time.monotonic()
        deadline = started + timeout_s
        with httpx.Client(timeout=2.0) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise ServerExited(code, self.log_tail())
                try:
                    if client.get(self.health_url).status_code == 200:
                        return time.monotonic() - started
                except httpx.HTTPError:
                    pass  # not listening yet, or answering 503 while loading
                if time.monotonic() > deadline:
                    raise ReadyTimeout(f"server not ready after {timeout_s:.0f} s at {self.health_url}; "
                                       f"last log line: {self.log_tail(1) or '(empty log)'}")
                time.sleep(poll_s)

    def stop(self) -> None:
        if self.process is None:
            return
        pgid = self.process.pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass  # the whole group is already gone
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline and _group_alive(pgid):
            self.process.poll()
            time.sleep(0.05)
        if _group_alive(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self._log:
            self._log.close()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    """True while any process of the group exists (zombies of our own child are reaped by poll())."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(group_members(pgid))


def group_members(pgid: int) -> list[int]:
    """Live processes in a process group; tests use it to prove nothing was left behind."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


class Launcher(Protocol):
    """One server for one launch: what the run loop calls, whatever the mode."""

    mode: str  # "native" | "image" | "external"
    base_url: str  # set once started
    argv: list[str]  # what was run ([] for external)
    record_paths: list[Path]  # where a started server's record goes (hostlocks.ServerRecord); unused for external

    def start(self, ready_timeout_s: float) -> float:
        """Start and wait until ready (a bind failure retries on a fresh port); return seconds to ready.
        Raises NotRunnable, ServerExited or ReadyTimeout."""

    def alive(self) -> bool: ...

    def stop(self) -> None:
        """Idempotent; safe before start and after a failed start."""

    def log_text(self) -> str: ...

    def identity(self) -> dict:
        """Basis facts the launcher knows: launch_mode, engine_version, engine_image (external: also
        context_len, tp, quant as the server reports them)."""


def open_launcher(launch: plan.Launch, adapter, env_info: dict, out_dir: Path,
                  threads: int | None, gpu_devices: list[str] | None) -> Launcher:
    """The launcher for the launch's mode. `gpu_devices` (indices or UUIDs) limit the server to the
    launch's GPUs; None or empty: no GPU flags (a CPU node)."""
    if launch.launch_mode == "external":
        return ExternalLauncher(launch, adapter)
    if launch.launch_mode == "image":
        return ImageLauncher(launch, adapter, Path(out_dir), threads, gpu_devices, launch.container_cli)
    return NativeLauncher(launch, adapter, env_info, Path(out_dir), threads, gpu_devices)


PORT_PLACEHOLDER = "<port>"  # chosen free at each start


def server_command(launch: plan.Launch, adapter, env_info: dict, threads: int | None,
                   gpu_devices: list[str] | None) -> str:
    """The command line a launch's measure job runs, shell-quoted, built by the launcher's own server_argv
    without starting anything; an external launch is `external <url>`."""
    if launch.launch_mode == "external":
        return f"external {launch.launch_target}"
    launcher = open_launcher(launch, adapter, env_info, Path("."), threads, gpu_devices)
    return shlex.join(launcher.server_argv(launch.bind_host, PORT_PLACEHOLDER))


def _check_model_files(launch: plan.Launch) -> None:
    for model in (launch.model, launch.draft_model):
        if model is not None and not Path(model.path).exists():
            raise NotRunnable(f"model file missing: {model.path} (models.{model.name} in configs/nodes/{launch.node}.yaml)")


class _ProcessLauncher:
    """A server we start as a process group (native binary, or a container CLI in the foreground)."""

    def __init__(self, launch: plan.Launch, adapter, out_dir: Path, threads: int | None):
        self.launch, self.adapter, self.out_dir, self.threads = launch, adapter, out_dir, threads
        self.base_url = ""
        self.argv: list[str] = []
        self.server: ServerProcess | None = None
        self.log_path = out_dir / "server.log"
        # Where the running server's record goes: its run folder, and beside each GPU lock (LaunchRun adds those).
        self.record_paths = [run_record(out_dir)]

    @property
    def pgid(self) -> int | None:
        return self.server.pgid if self.server else None

    def _prepare(self) -> None:
        """Checks and one-time work before the first spawn; raises NotRunnable."""
        _check_model_files(self.launch)

    def server_argv(self, host: str, port: int | str) -> list[str]:
        """The command that starts a server listening on host:port (a port placeholder for server_command)."""
        raise NotImplementedError

    def _env(self) -> dict:
        return dict(self.launch.env)

    def start(self, ready_timeout_s: float) -> float:
        self._prepare()
        started = time.monotonic()
        host = self.launch.bind_host
        attempt = 1
        while True:
            port = free_port(host)
            self.argv = self.server_argv(host, port)
            self.base_url = f"http://{host}:{port}"
            self.server = ServerProcess(self.argv, self.log_path, self.base_url, self.adapter.health_path, env=self._env())
            self.server.start()
            record = ServerRecord.of(self.server.pgid, self.argv, self.launch.node, self.launch.name)
            for path in self.record_paths:
                record.write(path)
            try:
                self.server.wait_ready(ready_timeout_s)
                return time.monotonic() - started
            except ServerExited as err:
                self.stop()
                if attempt == PORT_ATTEMPTS or not BIND_FAILURE.search(err.log_tail):
                    raise
                log.warning("port %d taken (%s); retrying on another port", port, err)
                attempt += 1
            except BaseException:
                self.stop()
                raise

    def alive(self) -> bool:
        return self.server is not None and self.server.alive()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()  # its record stays: it says what ran, and a dead pid never matches again

    def log_text(self) -> str:
        return self.server.log_text() if self.server else ""


class NativeLauncher(_ProcessLauncher):
    """The pipeline-built engine (or the node's own binary) as a local process group."""

    mode = "native"

    def __init__(self, launch: plan.Launch, adapter, env_info: dict, out_dir: Path, threads: int | None,
                 gpu_devices: list[str] | None):
        super().__init__(launch, adapter, out_dir, threads)
        self.env_info = env_info
        self.gpu_devices = gpu_devices
        self.binary = launch.launch_target or env_info.get("server")

    def _prepare(self) -> None:
        if not self.binary:
            raise NotRunnable(f"engine environment {self.launch.env_name} not built (no server in its ready.json); "
                              "run `snakemake --cores 1 report`")
        super()._prepare()

    def server_argv(self, host: str, port: int | str) -> list[str]:
        return self.adapter.argv(self.launch, self.binary, host, port, self.threads)

    def _env(self) -> dict:
        env = super()._env()
        if self.gpu_devices:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_devices)
        return env

    def identity(self) -> dict:
        return {"launch_mode": self.mode, "engine_version": self.env_info.get("version", "unknown"),
                "engine_image": "none (native build)"}


CLI_TIMEOUT_S = 120
PULL_TIMEOUT_S = 3600
def container_ulimits() -> list[str]:
    """This process's own open-file and process limits, passed explicitly.

    Rootful podman otherwise asks for nofile=1048576 and a huge nproc, which runc may not set above the
    host's limits ("error setting rlimits for ready process: operation not permitted"); on the test
    machine nproc is also refused above kernel.pid_max.
    """
    nofile_soft, nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nproc_soft, nproc_hard = resource.getrlimit(resource.RLIMIT_NPROC)
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        pid_max = nproc_hard
    nproc_cap = min(value for value in (nproc_hard, pid_max) if value != resource.RLIM_INFINITY)
    nproc_soft = nproc_cap if nproc_soft == resource.RLIM_INFINITY else min(nproc_soft, nproc_cap)
    nofile_hard = nofile_soft if nofile_hard == resource.RLIM_INFINITY else nofile_hard
    return ["--ulimit", f"nofile={nofile_soft}:{nofile_hard}", "--ulimit", f"nproc={nproc_soft}:{nproc_cap}"]


def gpu_flags(cli: str, devices: list[str] | None) -> list[str]:
    """Only the launch's GPUs: docker's --gpus (its value is CSV, so a list needs the inner quotes),
    podman's CDI device names. The measure job names GPUs by UUID where NVML sees them, which a CDI spec
    holds when made by `nvidia-ctk cdi generate` 1.15 or newer (index and UUID names by default); an
    older toolkit names indices only unless given `--device-name-strategy=uuid`."""
    if not devices:
        return []
    if cli == "podman":
        return [flag for device in devices for flag in ("--device", f"nvidia.com/gpu={device}")]
    return ["--gpus", f'"device={",".join(devices)}"']


def container_name(launch: plan.Launch) -> str:
    """One name per launch, so a container left by a hard death is found and removed at the next start."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"stackbench-{launch.node}-{launch.name}")


class ImageLauncher(_ProcessLauncher):
    """The engine's container image, run in the foreground by docker or podman: host network and IPC,
    model folders mounted read-only at their real paths, only the launch's GPUs. The log is the
    container's output as the CLI streams it; the container is removed (`rm -f`) on every stop."""

    mode = "image"

    def __init__(self, launch: plan.Launch, adapter, out_dir: Path, threads: int | None,
                 gpu_devices: list[str] | None, cli: str = "docker"):
        super().__init__(launch, adapter, out_dir, threads)
        self.cli, self.image, self.gpu_devices = cli, launch.launch_target, gpu_devices
        self.name = container_name(launch)
        self.digest = self.engine_version = "unknown"

    def _run_cli(self, *args: str, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
        return subprocess.run([self.cli, *args], capture_output=True, text=True, timeout=timeout)

    def _prepare(self) -> None:
        if shutil.which(self.cli) is None:
            raise NotRunnable(f"container CLI {self.cli!r} not found on PATH "
                              f"(runs.launch.container_cli in configs/nodes/{self.launch.node}.yaml)")
        super()._prepare()
        self._remove_container()  # a leftover of ours from a hard death holds the name
        inspected = self._run_cli("image", "inspect", self.image)
        if inspected.returncode != 0:
            pulled = self._run_cli("pull", self.image, timeout=PULL_TIMEOUT_S)
            if pulled.returncode != 0:
                raise NotRunnable(f"image {self.image} not present and not pullable: {_last_line(pulled)} "
                                  f"(runs.launch.image in configs/nodes/{self.launch.node}.yaml)")
        self.digest = self._image_digest()
        self.engine_version = self._version_inside()

    def _image_digest(self) -> str:
        """The repository digest (what `image@sha256:...` pins), else the local image ID."""
        found = self._run_cli("image", "inspect", "--format", "{{json .RepoDigests}} {{.Id}}", self.image)
        if found.returncode != 0:
            return "unknown"
        repo_digests, image_id = found.stdout.strip().rsplit(" ", 1)
        digests = re.findall(r'"([^"]+@sha256:[0-9a-f]+)"', repo_digests)
        pinned = next((d for d in digests if d.split("@")[1] in self.image), digests[0] if digests else None)
        return pinned or f"{self.image} (image id {image_id})"

    def _version_inside(self) -> str:
        command = list(self.adapter.image_version_command)
        try:
            done = self._run_cli("run", "--rm", "--name", f"{self.name}-version", "--network", "none",
                                 *container_ulimits(), "--entrypoint", command[0], self.image, *command[1:])
        except subprocess.TimeoutExpired:
            return "unknown"
        text = done.stdout + done.stderr
        if done.returncode != 0:
            log.warning("engine version not readable inside %s: %s", self.image, _last_line(done))
            return "unknown"
        return self.adapter.version_from_output(text)

    def server_argv(self, host: str, port: int | str) -> list[str]:
        launch = _with_real_model_paths(self.launch)
        native = self.adapter.argv(launch, "<native binary>", host, port, self.threads)
        # Python engines start natively as `<python> -m <module>`: the image's entrypoint replaces all three.
        engine_args = native[3:] if native[1:2] == ["-m"] else native[1:]
        entrypoint = list(self.adapter.image_entrypoint)
        mounts = [flag for folder in _model_folders(launch) for flag in ("-v", f"{folder}:{folder}:ro")]
        # The values stay in the environment of the CLI process, never on its command line.
        env_flags = [flag for key in sorted(self.launch.env) for flag in ("-e", key)]
        return [self.cli, "run", "--rm", "--name", self.name, "--network", "host", "--ipc", "host",
                *container_ulimits(), *gpu_flags(self.cli, self.gpu_devices), *mounts, *env_flags,
                "--entrypoint", entrypoint[0], self.image, *entrypoint[1:], *engine_args]

    def stop(self) -> None:
        super().stop()  # SIGTERM reaches the container through the CLI's signal proxy
        if self.server is not None:
            self._remove_container()

    def _remove_container(self) -> None:
        """`rm -f` our containers: the server's, and the version probe's should an interrupt have orphaned it.
        One name per call: podman 4.3 `rm -f a b` left `a` in place when `b` did not exist."""
        for name in (self.name, f"{self.name}-version"):
            removed = self._run_cli("rm", "-f", name)
            if removed.returncode != 0 and "no such container" not in removed.stderr.lower():
                log.warning("%s rm -f %s: %s", self.cli, name, _last_line(removed))

    def identity(self) -> dict:
        return {"launch_mode": self.mode, "engine_version": self.engine_version, "engine_image": self.digest}


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = (done.stderr or done.stdout or "").strip().splitlines()
    return lines[-1] if lines else f"exit code {done.returncode}"


def _with_real_model_paths(launch: plan.Launch) -> plan.Launch:
    """Model paths made absolute with symlinks resolved: the container sees the same path we mount."""
    def real(model):
        return dataclasses.replace(model, path=str(Path(model.path).resolve())) if model else None
    return dataclasses.replace(launch, model=real(launch.model), draft_model=real(launch.draft_model))


def _model_folders(launch: plan.Launch) -> list[str]:
    """A GGUF file's folder, or a Hugging Face model folder itself (also while absent, as
    `stackbench commands` shows it on a machine without the files)."""
    folders = set()
    for model in (launch.model, launch.draft_model):
        if model is not None:
            path = Path(model.path)
            folders.add(str(path.parent if path.is_file() or path.suffix == ".gguf" else path))
    return sorted(folders)


class ExternalLauncher:
    """A server somebody else started: reached and asked about itself, never started or stopped by us."""

    mode = "external"

    def __init__(self, launch: plan.Launch, adapter, probe_timeout_s: float = 5.0):
        self.launch, self.adapter = launch, adapter
        self.base_url = launch.launch_target.rstrip("/")
        self.argv: list[str] = []
        self.record_paths: list[Path] = []
        self.probe_timeout_s = probe_timeout_s
        self.reported = {"engine_version": "unknown", "context_len": None, "tp": None, "quant": "unknown"}

    def _healthy(self, client: httpx.Client) -> bool:
        try:
            return client.get(self.base_url + self.adapter.health_path).status_code == 200
        except httpx.HTTPError:
            return False

    def start(self, ready_timeout_s: float, poll_s: float = 0.5) -> float:
        started = time.monotonic()
        with httpx.Client(timeout=self.probe_timeout_s) as client:
            while not self._healthy(client):
                if time.monotonic() - started > ready_timeout_s:
                    raise ReadyTimeout(f"external server not ready after {ready_timeout_s:.0f} s at "
                                       f"{self.base_url}{self.adapter.health_path}")
                time.sleep(poll_s)
            ready_s = time.monotonic() - started
            self.reported.update(self.adapter.self_report(client, self.base_url))
        return ready_s

    def alive(self) -> bool:
        with httpx.Client(timeout=self.probe_timeout_s) as client:
            return self._healthy(client)

    def stop(self) -> None:
        pass  # not ours to stop

    def log_text(self) -> str:
        return ""  # the log is on the machine that started the server

    def identity(self) -> dict:
        return {"launch_mode": self.mode, "engine_image": "external endpoint", **self.reported}
