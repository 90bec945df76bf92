"""Server lifecycle, the same for every engine: one process group, a log file, readiness, teardown.

The server runs in its own session (process group) so that its workers go down with it. stop() sends
SIGTERM to the whole group, waits, then SIGKILLs the group and reaps, even when the leader already
died and left children behind.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx


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


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


class ServerProcess:
    """Context manager: start on enter, always stop on exit."""

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

    @property
    def pgid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> "ServerProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
        except OSError as err:
            self._log.close()
            raise ServerError(f"cannot start {self.argv[0]}: {err.strerror}") from err
        return self

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
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

    def __enter__(self) -> "ServerProcess":
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


class ExternalServer:
    """A server somebody else launched: measured, never started or stopped by us."""

    process = None
    pgid = None

    def __init__(self, base_url: str, health_path: str):
        self.base_url = base_url.rstrip("/")
        self.health_url = self.base_url + health_path

    def start(self) -> "ExternalServer":
        return self

    def alive(self) -> bool:
        return True

    def wait_ready(self, timeout_s: float, poll_s: float = 0.5) -> float:
        started = time.monotonic()
        with httpx.Client(timeout=5.0) as client:
            while True:
                try:
                    if client.get(self.health_url).status_code == 200:
                        return time.monotonic() - started
                except httpx.HTTPError:
                    pass
                if time.monotonic() - started > timeout_s:
                    raise ReadyTimeout(f"external server not ready after {timeout_s:.0f} s at {self.health_url}")
                time.sleep(poll_s)

    def log_text(self) -> str:
        return ""

    def stop(self) -> None:
        pass


def container_argv(image: str, engine_argv: list[str], name: str, port: int, mounts: list[str], env: dict) -> list[str]:
    """`docker run` for an engine image pinned by digest: GPUs, host IPC, the port, read-only model mounts.

    The engine's own argv follows the image, with its first element as the entrypoint, so images with
    and without an ENTRYPOINT (vllm/vllm-openai, lmsysorg/sglang) start the same way.
    """
    argv = ["docker", "run", "--rm", "--name", name, "--gpus", "all", "--ipc", "host", "--network", "host"]
    for path in mounts:
        argv += ["-v", f"{path}:{path}:ro"]
    for key in sorted(env):
        argv += ["-e", key]  # the value is passed through the environment, never on the command line
    return argv + ["--entrypoint", engine_argv[0], image, *engine_argv[1:]]
