"""Old name of stackbench.launchers, kept only until measure.py calls open_launcher; delete it then.

ExternalServer and container_argv are the pre-launcher versions measure.py still imports.
"""

import time

import httpx

from .launchers import ReadyTimeout, ServerError, ServerExited, ServerProcess, free_port, group_members  # noqa: F401

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
