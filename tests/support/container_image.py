"""A small local container image holding the pipeline-built llama-server and the shared libraries `ldd`
says it needs, laid out like llama.cpp's official server image (/app/llama-server, libraries beside it).
No registry is reachable from the test machines, so the image is imported from a root folder and then
used by its digest, as a pinned image would be."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

from test_tools import installed_for_tests

IMAGE_NAME = "localhost/stackbench-llamacpp-test"
LDD_LINE = re.compile(r"^\s*(?:(?P<name>\S+) => )?(?P<path>/\S+) \(0x[0-9a-f]+\)$")


def shared_libraries(binary: Path) -> list[Path]:
    """Every library the dynamic loader resolves for the binary, the loader itself included."""
    listing = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    found = [LDD_LINE.match(line) for line in listing.splitlines()]
    missing = [line for line in listing.splitlines() if "not found" in line]
    if missing:
        raise RuntimeError(f"{binary}: ldd cannot resolve {missing[0].strip()}")
    return [Path(m["path"]) for m in found if m]


def build_llamacpp_image(cli: str, llama_server: Path, work: Path) -> str:
    """Import the image and return it pinned by digest (name@sha256:...)."""
    root = work / "root"
    app = root / "app"
    app.mkdir(parents=True)
    shutil.copy(llama_server, app / "llama-server")
    (root / "tmp").mkdir()
    for library in shared_libraries(llama_server):
        # The ELF interpreter must sit at its fixed path; the rest are found through LD_LIBRARY_PATH=/app.
        dest = root / library.relative_to("/") if "ld-linux" in library.name else app / library.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(library.resolve(), dest)
    archive = work / "root.tar"
    tag = f"{IMAGE_NAME}:test-{os.getpid()}"  # this test process's own: a second suite on the machine imports its own
    with tarfile.open(archive, "w") as tar:
        tar.add(root, arcname=".")
    subprocess.run([cli, "import", "--change", 'ENTRYPOINT ["/app/llama-server"]', "--change", "ENV LD_LIBRARY_PATH=/app",
                    str(archive), tag], capture_output=True, text=True, check=True)
    digest = subprocess.run([cli, "image", "inspect", "--format", "{{.Digest}}", tag],
                            capture_output=True, text=True, check=True).stdout.strip()
    return f"{IMAGE_NAME}@{digest}"


def container_engine_problem(cli: str) -> str | None:
    """Why no container can run here (the reason a test is skipped with), or None when one can."""
    if installed_for_tests(cli) is None:
        return f"{cli} is not installed (setup.sh installs podman when run as root on Debian)"
    probe = subprocess.run([cli, "info"], capture_output=True, text=True)
    if probe.returncode != 0:
        lines = (probe.stderr or probe.stdout).strip().splitlines() or ["no output"]
        return f"`{cli} info` fails: {lines[-1]}"
    return None
