"""Capabilities the README promises (the upstream request functions the conformance tests load, podman,
Chromium, SLURM): a test that needs one calls `require`. Where the capability is missing it skips, so a
developer's machine without podman still runs the rest; under CI (STACKBENCH_CI=1, set by .ci/run) it fails
instead, naming the capability: a CI run that skipped what the README promises would pass without checking it."""

from __future__ import annotations

import os

import pytest

CI_VARIABLE = "STACKBENCH_CI"


def in_ci() -> bool:
    """Whether this run is CI's: STACKBENCH_CI set to anything but empty or 0."""
    return os.environ.get(CI_VARIABLE, "").strip() not in ("", "0")


def require(capability: str, problem: str | None) -> None:
    """Go on where `problem` is None (the capability is there); else skip the test saying what is missing
    and why, or, under CI, fail it with the same words."""
    if problem is None:
        return
    said = f"{capability} is missing: {problem}"
    if in_ci():
        pytest.fail(f"{said} ({CI_VARIABLE}=1: the README promises {capability}, so CI fails rather than skips)",
                    pytrace=False)
    pytest.skip(said)
