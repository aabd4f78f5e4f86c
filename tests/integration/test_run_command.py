"""`remediation-operator run` refuses bad settings with a message naming the flag, and says
clearly when it has no cluster to talk to (no traceback, nothing started): a malformed
kubeconfig, an API server that does not answer, or a metrics port already taken each end the
process with one JSON log line and exit code 1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from remediation_emulator import apiserver
from remediation_operator.handlers import process
from tests.integration.conftest import ROOT, free_port


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


def only_line(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """A fatal start-up error is ONE JSON log line (and nothing else, no traceback)."""
    output = (result.stdout + result.stderr).strip().splitlines()
    assert "Traceback" not in result.stderr
    assert len(output) == 1, output
    line: dict[str, object] = json.loads(output[0])
    assert line["level"] == "error"
    return line


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("apiVersion: v1\nclusters: [\n", "while parsing"),
        ("hello world\n", "not a kubeconfig"),
        ("apiVersion: v1\nkind: Config\ncurrent-context: x\ncontexts: []\n", "x"),
        (
            "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
            "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1',"
            " certificate-authority-data: '!!not-base64'}}]\n"
            "users: [{name: u, user: {token: abc}}]\n",
            "base64",
        ),
    ],
)
def test_a_malformed_kubeconfig_is_one_line_and_exit_1(
    tmp_path: Path, text: str, says: str
) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(text)
    result = run("--metrics-address", "127.0.0.1:0", env=dict(os.environ, KUBECONFIG=str(config)))
    assert result.returncode == 1
    line = only_line(result)
    assert line["event"] == "no_cluster_credentials"
    assert str(config) in str(line["error"])
    assert says in str(line["error"])


def test_an_unreachable_api_server_at_start_is_one_line_and_exit_1(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    config = tmp_path / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    began = time.monotonic()
    result = run("--metrics-address", "127.0.0.1:0", env=dict(os.environ, KUBECONFIG=str(config)))
    assert result.returncode == 1
    line = only_line(result)
    assert line["event"] == "api_unreachable"
    assert f"127.0.0.1:{port}" in str(line["error"])
    assert time.monotonic() - began < process.API_WAIT.total_seconds() + 20


def test_a_metrics_port_in_use_is_one_line_and_exit_1(tmp_path: Path) -> None:
    api = apiserver.run_in_thread()
    try:
        config = api.write_kubeconfig(tmp_path / "kubeconfig")
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            result = run(
                "--metrics-address",
                f"127.0.0.1:{port}",
                env=dict(os.environ, KUBECONFIG=str(config)),
            )
    finally:
        api.stop()
    assert result.returncode == 1
    line = only_line(result)
    assert line["event"] == "metrics_address_unavailable"
    assert f"127.0.0.1:{port}" in str(line["error"])
    assert "--metrics-address" in str(line["error"])
