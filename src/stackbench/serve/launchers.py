"""Launchers: how a server comes to exist for a launch, the same for every engine.

Three modes, one interface (Launcher): native (the pipeline-built binary in its own process group),
image (the engine's container image through docker or podman) and external (a server somebody else
started, which we only reach and ask about itself). Every launcher stops what it started on every exit
path; the engine adapter supplies the rest (argv, health path, its image's entrypoint and version
command, what a running server says about itself), so no engine name appears here.

The process group's lifecycle is serve/process.py; the container CLI's details are serve/container.py.
"""

from __future__ import annotations

import logging
import shlex
import time
from pathlib import Path
from typing import Protocol

import httpx

from stackbench.config.model import Launch
from stackbench.serve.container import ImageLauncher
from stackbench.serve.process import NotRunnable, ProcessLauncher, ReadyTimeout, ServerError

log = logging.getLogger("stackbench.serve.launchers")


def native_argv(adapter, launch: Launch, binary: str, host: str, port: int | str, threads: int | None) -> list[str]:
    """The native server command: the engine's own start command and its flags for this launch."""
    return [*adapter.native_command(binary), *adapter.engine_flags(launch, host, port, threads)]


class Launcher(Protocol):
    """One server for one launch: what the run loop calls, whatever the mode."""

    mode: str  # "native" | "image" | "external"
    owns_gpus: bool  # it starts the server on the launch's GPUs: they are checked idle before and awaited after
    base_url: str  # set once started
    argv: list[str]  # what was run ([] for external)
    record_paths: list[Path]  # where a started server's record goes (locks.ServerRecord); unused for external

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


def open_launcher(launch: Launch, adapter, env_info: dict, out_dir: Path,
                  threads: int | None, gpu_devices: list[str] | None) -> Launcher:
    """The launcher for the launch's mode. `gpu_devices` (indices or UUIDs) limit the server to the
    launch's GPUs; None or empty: no GPU flags (a CPU node)."""
    if launch.launch_mode == "external":
        return ExternalLauncher(launch, adapter)
    if launch.launch_mode == "image":
        return ImageLauncher(launch, adapter, Path(out_dir), threads, gpu_devices, launch.container_cli)
    return NativeLauncher(launch, adapter, env_info, Path(out_dir), threads, gpu_devices)


PORT_PLACEHOLDER = "<port>"  # chosen free at each start


def server_command(launch: Launch, adapter, env_info: dict, threads: int | None,
                   gpu_devices: list[str] | None) -> str:
    """The command line a launch's measure job runs, shell-quoted, built by the launcher's own server_argv
    without starting anything, after the variables the engine needs natively (NAME=value, as a shell takes
    them); an external launch is `external <url>`. The node's and run's env are not printed (they may hold
    secrets)."""
    if launch.launch_mode == "external":
        return f"external {launch.launch_target}"
    launcher = open_launcher(launch, adapter, env_info, Path("."), threads, gpu_devices)
    needed = adapter.native_env(launch, threads) if launch.launch_mode == "native" else {}
    return shlex.join([*(f"{k}={v}" for k, v in needed.items()), *launcher.server_argv(launch.bind_host, PORT_PLACEHOLDER)])


class NativeLauncher(ProcessLauncher):
    """The pipeline-built engine (or the node's own binary) as a local process group."""

    mode = "native"

    def __init__(self, launch: Launch, adapter, env_info: dict, out_dir: Path, threads: int | None,
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
        return native_argv(self.adapter, self.launch, self.binary, host, port, self.threads)

    def _env(self) -> dict:
        env = {**self.adapter.native_env(self.launch, self.threads), **super()._env()}
        if self.gpu_devices:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_devices)
        return env

    def identity(self) -> dict:
        return {"launch_mode": self.mode, "engine_version": self.env_info.get("version", "unknown"),
                "engine_image": "none (native build)"}


class ExternalLauncher:
    """A server somebody else started: reached and asked about itself, never started or stopped by us."""

    mode = "external"
    owns_gpus = False  # somebody else's server: its GPUs are busy by design and not ours to wait for

    def __init__(self, launch: Launch, adapter, probe_timeout_s: float = 5.0):
        self.launch, self.adapter = launch, adapter
        self.base_url = launch.launch_target.rstrip("/")
        self.argv: list[str] = []
        self.record_paths: list[Path] = []
        self.probe_timeout_s = probe_timeout_s
        self.reported = {"engine_version": "unknown", "context_len": None, "tp": None, "quant": "unknown"}

    def _health_status(self, client: httpx.Client) -> int | None:
        """The health route's HTTP status; None when no server answered."""
        try:
            return client.get(self.base_url + self.adapter.health_path).status_code
        except httpx.HTTPError:
            return None

    def _answers(self, client: httpx.Client) -> None:
        """Something listens at the URL: a refused connection or a name that does not resolve will not turn
        into a server by waiting out ready_timeout_s, so the launch is refused at once, before any cell, naming
        the URL and where it is set. A server that answers, even with an error, is waited for as it readies."""
        try:
            client.get(self.base_url + self.adapter.health_path)
        except (httpx.ConnectError, httpx.ConnectTimeout) as err:
            raise NotRunnable(f"external server at {self.base_url}: nothing answers ({err}); start it or fix "
                              f"configs/nodes/{self.launch.node}.yaml runs[] (stack {self.launch.stack_config}) "
                              "launch.url") from None
        except httpx.HTTPError:
            pass  # it answered, then broke off: a server still starting

    def start(self, ready_timeout_s: float, poll_s: float = 0.5) -> float:
        started = time.monotonic()
        with httpx.Client(timeout=self.probe_timeout_s) as client:
            self._answers(client)
            while (status := self._health_status(client)) != 200:
                # A server that answers but has no such route will never be ready: another engine than the
                # stack's, or the URL is wrong. Waiting out ready_timeout_s (600 s by default) would not help.
                if status == 404:
                    raise ServerError(f"external server at {self.base_url} has no route {self.adapter.health_path} "
                                      f"(HTTP 404): not the {self.adapter.engine_label} server its stack names, or the URL is wrong")
                if time.monotonic() - started > ready_timeout_s:
                    raise ReadyTimeout(f"external server not ready after {ready_timeout_s:.0f} s at "
                                       f"{self.base_url}{self.adapter.health_path}")
                time.sleep(poll_s)
            ready_s = time.monotonic() - started
            self.reported.update(self.adapter.self_report(client, self.base_url))
        return ready_s

    def alive(self) -> bool:
        with httpx.Client(timeout=self.probe_timeout_s) as client:
            return self._health_status(client) == 200

    def stop(self) -> None:
        pass  # not ours to stop

    def log_text(self) -> str:
        return ""  # the log is on the machine that started the server

    def identity(self) -> dict:
        return {"launch_mode": self.mode, "engine_image": "external endpoint", **self.reported}
