"""A capability the README promises that is missing skips a test on a developer's machine and fails it under
CI (STACKBENCH_CI=1): tests/support/capabilities.py."""

import os
import subprocess
import sys

import pytest
from capabilities import CI_VARIABLE, require
from paths import SUPPORT

MISSING = "no-such-capability-4f1c"  # named so that nothing here provides it

NEEDS_IT = f"""
from capabilities import require


def test_needs_a_missing_capability():
    require("{MISSING}", "not installed on this machine")
"""


def test_a_present_capability_lets_the_test_go_on(monkeypatch):
    monkeypatch.setenv(CI_VARIABLE, "1")
    assert require("podman", None) is None


@pytest.mark.parametrize("value", ["", "0"])
def test_outside_ci_a_missing_capability_skips_naming_it(monkeypatch, value):
    monkeypatch.setenv(CI_VARIABLE, value)
    with pytest.raises(pytest.skip.Exception, match=f"^{MISSING} is missing: not installed on this machine$"):
        require(MISSING, "not installed on this machine")


def test_under_ci_a_missing_capability_fails_naming_it(monkeypatch):
    monkeypatch.setenv(CI_VARIABLE, "1")
    with pytest.raises(pytest.fail.Exception, match=f"^{MISSING} is missing: not installed on this machine .{CI_VARIABLE}=1"):
        require(MISSING, "not installed on this machine")


def run_pytest(tmp_path, ci: bool) -> subprocess.CompletedProcess:
    """pytest in a subprocess on a one-test file that requires the missing capability; its own rootdir and
    no ini options (no xdist workers, none of this suite's addopts)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_needs_it.py").write_text(NEEDS_IT)
    env = {k: v for k, v in os.environ.items() if k != CI_VARIABLE}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # none of the installed plugins is needed: a quicker start
    env["PYTHONPATH"] = os.pathsep.join([str(SUPPORT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if ci:
        env[CI_VARIABLE] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rsf", "-p", "no:cacheprovider", "test_needs_it.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_ci_run_missing_a_promised_capability_fails_and_names_it(tmp_path):
    done = run_pytest(tmp_path, ci=True)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]  # 1: tests failed
    assert "1 failed" in done.stdout and f"{MISSING} is missing: not installed on this machine" in done.stdout


def test_the_same_run_outside_ci_skips_and_names_it(tmp_path):
    done = run_pytest(tmp_path, ci=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "1 skipped" in done.stdout and f"{MISSING} is missing: not installed on this machine" in done.stdout
