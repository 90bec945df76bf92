"""What one host shares between launches: its GPUs, and the servers started on them.

- A GPU is held by one launch at a time: an exclusive `flock` on `<lock dir>/<gpu>.lock`, taken for every
  GPU of the launch (in sorted order, so two launches never hold one GPU each and wait for the other)
  before a server starts or a power limit is read. The kernel frees the lock when the holder dies, however
  it dies, so a stale lock file never blocks; the file's text only names the holder (node, launch, pid)
  for the message of a launch that waits.
- Power-cap state is per GPU (`<gpu>.powercap.json`, see powercap.PowerCapper), so a leftover of one
  GPU never blocks a launch on others.
- A server we start leaves a record (pid, start time, command) in its run folder and beside the lock of
  every GPU it uses. A record whose process is still alive with the same start time and command is a
  leftover of a launch that died hard: the next start of that launch, or of any launch taking those
  GPUs, stops its process group. A record that does not match (pid reused, process gone) is dropped.

The lock directory is `$STACKBENCH_LOCK_DIR`, else the node's `hardware.lock_dir`, else
/var/tmp/stackbench-locks (absolute and per host, so every checkout and every cwd finds it).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

log = logging.getLogger("stackbench.host.locks")
DEFAULT_LOCK_DIR = Path("/var/tmp/stackbench-locks")
WAIT_POLL_S = 0.5
STOP_GRACE_S = 10.0


def lock_dir(node_lock_dir: str | None = None) -> Path:
    override = os.environ.get("STACKBENCH_LOCK_DIR") or node_lock_dir
    return Path(override) if override else DEFAULT_LOCK_DIR


def file_stem(gpu_id: str) -> str:
    """A GPU's id (UUID, or index where NVML did not name it) as a file name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"gpu-{gpu_id}")


@dataclass(frozen=True)
class Holder:
    node: str
    launch: str
    pid: int

    def __str__(self) -> str:
        return f"node {self.node}, launch {self.launch}, pid {self.pid}"


class GpuLocks:
    """Context manager: hold every GPU of a launch, waiting (and saying for whom) while another launch
    holds one; released on exit, and by the kernel if this process dies."""

    def __init__(self, gpu_ids: Sequence[str], directory: Path, holder: Holder,
                 on_wait: Callable[[str], None] = log.info, poll_s: float = WAIT_POLL_S):
        self.gpu_ids = sorted(set(gpu_ids))
        self.directory, self.holder, self.on_wait, self.poll_s = Path(directory), holder, on_wait, poll_s
        self._fds: list[int] = []

    def path(self, gpu_id: str) -> Path:
        return self.directory / f"{file_stem(gpu_id)}.lock"

    def __enter__(self) -> GpuLocks:
        if self.gpu_ids:
            self.directory.mkdir(parents=True, exist_ok=True)
        try:
            for gpu_id in self.gpu_ids:
                self._fds.append(self._take(gpu_id))
        except BaseException:
            self._release()
            raise
        return self

    def _take(self, gpu_id: str) -> int:
        fd = os.open(self.path(gpu_id), os.O_RDWR | os.O_CREAT, 0o666)
        said = None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                held_by = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another launch"
                if held_by != said:  # once per holder, not once per poll
                    self.on_wait(f"waiting for GPU {gpu_id}: held by {_holder_text(held_by)}")
                    said = held_by
                time.sleep(self.poll_s)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(asdict(self.holder)).encode(), 0)
        return fd

    def _release(self) -> None:
        for fd in self._fds:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        self._fds = []

    def __exit__(self, *exc) -> None:
        self._release()


def _holder_text(text: str) -> str:
    try:
        return str(Holder(**json.loads(text)))
    except (ValueError, TypeError):
        return text


# -- servers we started ---------------------------------------------------------------------------------
def run_record(run_dir: Path) -> Path:
    """Where a launch's server record lives in its run folder."""
    return Path(run_dir) / "server_process.json"


def gpu_record(directory: Path, gpu_id: str) -> Path:
    """Where the record of the server using a GPU lives, beside that GPU's lock."""
    return Path(directory) / f"{file_stem(gpu_id)}.server_process.json"


@dataclass(frozen=True)
class ServerRecord:
    """Enough to recognise our server later: a pid alone may have been reused by then."""

    pid: int  # also the process group: servers start in a session of their own
    create_time: float  # psutil's, seconds since the epoch
    argv: tuple[str, ...]
    node: str
    launch: str

    @classmethod
    def of(cls, pid: int, argv: Sequence[str], node: str, launch: str) -> ServerRecord:
        return cls(pid, psutil.Process(pid).create_time(), tuple(argv), node, launch)

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**asdict(self), "argv": list(self.argv)}))
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> ServerRecord | None:
        try:
            doc = json.loads(path.read_text())
            return cls(**{**doc, "argv": tuple(doc["argv"])})
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def running(self) -> bool:
        """Still this process: same pid, same start time, same command."""
        try:
            process = psutil.Process(self.pid)
            return (abs(process.create_time() - self.create_time) < 0.01 and process.status() != psutil.STATUS_ZOMBIE
                    and self._same_command(process))
        except psutil.Error:
            return False

    def _same_command(self, process: psutil.Process) -> bool:
        """The command line as started, or, for a server that retitles itself (setproctitle), the same
        executable file."""
        if tuple(process.cmdline()) == self.argv:
            return True
        started = shutil.which(self.argv[0]) if self.argv else None
        return started is not None and os.path.realpath(started) == os.path.realpath(process.exe())


def stop_leftover(path: Path, grace_s: float = STOP_GRACE_S) -> str | None:
    """Stop the server a record names if it is verifiably ours and still running; drop the record.
    Returns what was stopped, for the log and run.json, or None."""
    record = ServerRecord.read(path)
    path.unlink(missing_ok=True)
    if record is None or not record.running():
        return None
    _stop_group(record.pid, grace_s)
    what = f"stopped a leftover server of {record.node}/{record.launch} (pid {record.pid}: {' '.join(record.argv)})"
    log.warning("%s, recorded in %s", what, path)
    return what


def _stop_group(pgid: int, grace_s: float) -> None:
    members = [p for p in psutil.process_iter(["pid"]) if _pgid(p.pid) == pgid]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        _, alive = psutil.wait_procs(members, timeout=grace_s if sig == signal.SIGTERM else 5)
        if not alive:
            return


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None
