"""`remediation-operator run` refuses bad settings with a message naming the flag, and says
clearly when it has no cluster to talk to (no traceback, nothing started)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remediation_operator", "run", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env or dict(os.environ),
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--lease-duration", "15 seconds"], "--lease-duration"),
        (["--retry-period", "12s"], "--retry-period < --renew-deadline < --lease-duration"),
    ],
)
def test_bad_flags_are_named(args: list[str], flag: str) -> None:
    result = run(*args)
    assert result.returncode == 2
    assert flag in result.stderr


def test_no_credentials_is_a_clear_error(tmp_path: Path) -> None:
    env = dict(os.environ, KUBECONFIG=str(tmp_path / "missing"), HOME=str(tmp_path))
    result = run("--metrics-address", "127.0.0.1:0", env=env)
    assert result.returncode == 1
    assert "no_cluster_credentials" in result.stderr
    assert "Traceback" not in result.stderr
