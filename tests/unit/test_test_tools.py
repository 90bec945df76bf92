"""setup.sh installs the test-only programs in the background; a test asking for one waits for that install."""

import subprocess
import time

import test_tools


def test_a_test_waits_for_the_background_install_then_finds_the_program(tmp_path, monkeypatch):
    lock = tmp_path / "test-tools.lock"
    lock.touch()
    monkeypatch.setattr(test_tools, "INSTALL_LOCK", lock)
    # Stands in for setup.sh's install: holds the lock as the apt-get subshell does, then lets go.
    holder = subprocess.Popen(["flock", str(lock), "sleep", "1.5"])
    try:
        time.sleep(0.3)
        started = time.monotonic()
        assert test_tools.installed_for_tests("no-such-program-here", "sh").endswith("/sh")
        assert time.monotonic() - started > 0.8  # it waited for the holder
    finally:
        holder.wait()


def test_without_an_install_in_progress_a_missing_program_is_none_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(test_tools, "INSTALL_LOCK", tmp_path / "never-made.lock")
    started = time.monotonic()
    assert test_tools.installed_for_tests("no-such-program-here") is None
    assert time.monotonic() - started < 1
