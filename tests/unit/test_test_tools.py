"""setup.sh installs the test-only programs in the background; a test asking for one waits for that install."""

import subprocess
import threading
import time
from types import SimpleNamespace

import test_tools


def test_a_test_waits_for_the_background_install_then_finds_the_program(tmp_path, monkeypatch):
    lock = tmp_path / "test-tools.lock"
    lock.touch()
    monkeypatch.setattr(test_tools, "INSTALL_LOCK", lock)
    # Stands in for setup.sh's install: holds the lock as the apt-get subshell does, until the test lets go.
    holder = subprocess.Popen(["flock", str(lock), "sh", "-c", "echo held; read line"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    released = threading.Event()

    def let_go():
        released.set()
        holder.stdin.close()  # the holder's read ends, and with it the lock

    try:
        assert holder.stdout.readline() == "held\n"
        threading.Timer(0.5, let_go).start()
        assert test_tools.installed_for_tests("no-such-program-here", "sh").endswith("/sh")
        assert released.is_set()  # it returned only once the holder had let go
    finally:
        holder.stdin.close()  # a second close is a no-op: here for a test that failed before the timer let go
        holder.wait(timeout=10)


def test_without_an_install_in_progress_a_missing_program_is_none_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(test_tools, "INSTALL_LOCK", tmp_path / "never-made.lock")
    slept = []
    monkeypatch.setattr(test_tools, "time", SimpleNamespace(monotonic=time.monotonic, sleep=slept.append))
    assert test_tools.installed_for_tests("no-such-program-here") is None
    assert slept == []  # no wait for an install that is not running
