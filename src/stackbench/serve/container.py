"""Image mode: the engine's container image, run in the foreground by docker or podman.

The container CLI's details live here: GPU flags per CLI, explicit ulimits, one container name per launch
(so a leftover of a hard death is removed at the next start), the image's digest and the engine's
version read inside it. The engine's adapter supplies its image's entrypoint and version command.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import resource
import shutil
import subprocess
from pathlib import Path

from stackbench.config.model import Launch
from stackbench.serve.process import NotRunnable, ProcessLauncher

log = logging.getLogger("stackbench.serve.container")


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


def container_name(launch: Launch) -> str:
    """One name per launch, so a container left by a hard death is found and removed at the next start."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"stackbench-{launch.node}-{launch.name}")


class ImageLauncher(ProcessLauncher):
    """The engine's container image, run in the foreground by docker or podman: host network and IPC,
    model folders mounted read-only at their real paths, only the launch's GPUs. The log is the
    container's output as the CLI streams it; the container is removed (`rm -f`) on every stop."""

    mode = "image"

    def __init__(self, launch: Launch, adapter, out_dir: Path, threads: int | None,
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
        engine_args = self.adapter.engine_flags(launch, host, port, self.threads)
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


def _with_real_model_paths(launch: Launch) -> Launch:
    """Model paths made absolute with symlinks resolved: the container sees the same path we mount."""
    def real(model):
        return dataclasses.replace(model, path=str(Path(model.path).resolve())) if model else None
    return dataclasses.replace(launch, model=real(launch.model), draft_model=real(launch.draft_model))


def _model_folders(launch: Launch) -> list[str]:
    """A GGUF file's folder, or a Hugging Face model folder itself (also while absent, as
    `stackbench commands` shows it on a machine without the files)."""
    folders = set()
    for model in (launch.model, launch.draft_model):
        if model is not None:
            path = Path(model.path)
            folders.add(str(path.parent if path.is_file() or path.suffix == ".gguf" else path))
    return sorted(folders)
