"""`remediation-operator sandbox` as a user runs it: a subprocess, kubectl, the official client."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from remediation_operator import cli

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "names": {
            "kind": "Widget",
            "plural": "widgets",
            "singular": "widget",
            "listKind": "WidgetList",
        },
        "scope": "Cluster",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def wait_for(path: Path, process: subprocess.Popen[str], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not path.exists():
        if process.poll() is not None:
            pytest.fail(f"sandbox exited early with {process.returncode}: {process.stderr}")
        if time.monotonic() > deadline:
            pytest.fail(f"no kubeconfig at {path} within {within}s")
        time.sleep(0.05)


@dataclass(frozen=True)
class Sandbox:
    process: subprocess.Popen[str]
    kubeconfig: Path
    home: Path


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """One `sandbox` subprocess for this module; the last test stops it with SIGINT."""
    tmp_path = tmp_path_factory.mktemp("sandbox")
    crds = tmp_path / "crds"
    crds.mkdir()
    (crds / "widgets.yaml").write_text(yaml.safe_dump(WIDGET_CRD))
    kubeconfig = tmp_path / "out" / "kubeconfig"
    command = [
        sys.executable, "-m", "remediation_operator.cli", "sandbox", "--nodes", "2",
        "--speed", "fast", "--kubeconfig", str(kubeconfig), "--crds", str(crds),
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(kubeconfig, process)
        yield Sandbox(process, kubeconfig, tmp_path)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


def test_the_official_client_accepts_the_kubeconfig_and_sees_the_fleet(sandbox: Sandbox) -> None:
    # The file is complete when it appears (written to a temp file, then renamed).
    assert yaml.safe_load(sandbox.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    api = k8s_config.new_client_from_config(config_file=str(sandbox.kubeconfig))  # type: ignore[no-untyped-call]
    nodes = k8s_client.CoreV1Api(api).list_node().items
    names = sorted(str(n.metadata.name) for n in nodes if n.metadata is not None)
    assert names == ["gpu-0000", "gpu-0001"]
    claims: Any = k8s_client.CustomObjectsApi(api).list_cluster_custom_object(
        "karpenter.sh", "v1", "nodeclaims"
    )
    assert len(claims["items"]) == 2


def test_kubectl_gets_nodes_and_the_applied_crds(sandbox: Sandbox) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (Debian package `kubectl`); nothing to check")
    env = {
        "KUBECONFIG": str(sandbox.kubeconfig),
        "PATH": "/usr/bin:/bin",
        "HOME": str(sandbox.home),
    }
    shown = subprocess.run(
        [kubectl, "get", "nodes", "-o", "name"], env=env, capture_output=True, text=True,
        timeout=30, check=True,
    )  # fmt: skip
    assert shown.stdout.split() == ["node/gpu-0000", "node/gpu-0001"]
    widgets = subprocess.run(
        [kubectl, "get", "widgets"], env=env, capture_output=True, text=True, timeout=30,
        check=True,
    )  # fmt: skip
    assert "No resources found" in widgets.stderr


def test_sigint_stops_the_sandbox_cleanly(sandbox: Sandbox) -> None:
    sandbox.process.send_signal(signal.SIGINT)
    out, err = sandbox.process.communicate(timeout=20)
    assert sandbox.process.returncode == 0, err
    assert f"export KUBECONFIG={sandbox.kubeconfig}" in out
    assert not sandbox.kubeconfig.exists()  # a kubeconfig for a stopped server is removed


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--nodes", "-1"], "--nodes: must not be negative"),
        (["--crds", "/nonexistent/crds"], "--crds /nonexistent/crds: not a directory"),
        (["--port", "70000"], "--port: must be between 0 and 65535"),
    ],
)
def test_bad_options_are_refused_with_the_option_named(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = cli.main(["sandbox", "--kubeconfig", str(tmp_path / "kc"), *arguments])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "kc").exists()
