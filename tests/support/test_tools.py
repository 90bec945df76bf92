"""Programs only some tests need (Chromium, podman), which setup.sh installs in the background: a test
asking for one waits until that install has finished (it holds .venv/test-tools.lock), then looks it up."""

from __future__ import annotations

import fcntl
import shutil
import time

from paths import ROOT

INSTALL_LOCK = ROOT / ".venv/test-tools.lock"
WAIT_S = 900  # an apt install of Chromium and podman on a slow mirror


def installed_for_tests(*names: str) -> str | None:
    """The path of the first of `names` on PATH once setup.sh's background install is done; None when
    none is there (the install failed, or setup was not run as root on Debian)."""
    if INSTALL_LOCK.exists():
        deadline = time.monotonic() + WAIT_S
        with open(INSTALL_LOCK) as handle:
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        break  # still installing: the caller skips, saying what is missing
                    time.sleep(2)
    return next(filter(None, map(shutil.which, names)), None)
