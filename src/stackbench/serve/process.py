"""A server as a process group: start, wait until ready, stop the whole group on every exit path.

A server process runs in its own session (process group) so that its workers go down with it, and dies
with the process that started it (PR_SET_PDEATHSIG). ServerProcess.stop() sends SIGTERM to the whole
group, waits, then SIGKILLs the group and reaps, even when the leader already died and left children.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from stackbench.config.model import Launch
from stackbench.host.locks import ServerRecord, run_record


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

log = logging.getLogger("stackbench.serve.process")


_LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1  # prctl(2)


def _die_with(parent_pid: int):
    """Runs in the child before exec: the kernel SIGKILLs the server when the process that started it
    dies, however it dies (OOM killer, SIGKILL, a lost session). It fires when the starting *thread* ends,
    so servers are started from the measure job's main thread. An engine's own worker processes follow
    their leader (SGLang's kill_itself_when_parent_died, vLLM's engine-core death pipe); whatever is
    left of the group is stopped at the next start from the server's record (host/locks.py)."""

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


# A port taken between choosing it and the server binding it: the server exits saying so, and the launch
# is retried on a fresh port (llama.cpp: "couldn't bind HTTP server socket"; Python servers: errno 98).
BIND_FAILURE = re.compile(r"couldn't bind|address already in use", re.IGNORECASE)
PORT_ATTEMPTS = 3


def _check_model_files(launch: Launch) -> None:
    for model in (launch.model, launch.draft_model):
        if model is not None and not Path(model.path).exists():
            raise NotRunnable(f"model file missing: {model.path} (models.{model.name} in configs/nodes/{launch.node}.yaml)")


class ProcessLauncher:
    """A server we start as a process group (native binary, or a container CLI in the foreground)."""

    owns_gpus = True

    def __init__(self, launch: Launch, adapter, out_dir: Path, threads: int | None):
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
            self.server = ServerProcess(self.argv, self.log_path, self.base_url, self.adapter.health_path, env=self._env(),
                                        grace_s=self.adapter.stop_grace_s)
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
