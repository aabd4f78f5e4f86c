"""docs/install.md's commands, as the tests that run them read them, and a shell to run them.

The install, upgrade, rollback and uninstall tests run the page's own console blocks, so the
page cannot drift from what was tested: a changed command changes the test.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.control_plane import RealCluster

ROOT = Path(__file__).resolve().parents[2]
INSTALL_DOC = ROOT / "docs" / "install.md"
COMMANDS = ("helm ", "kubectl ", "remediation-operator ")


def commands(section: str, doc: Path = INSTALL_DOC) -> Iterator[str]:
    """The helm, kubectl and remediation-operator commands of one `## section` (its `###`
    subsections included) of `doc`, in order, with continuation lines joined and trailing
    comments dropped."""
    text = doc.read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    for block in re.findall(r"```console\n(.*?)```", body, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line.startswith(COMMANDS):
                yield re.sub(r"\s+", " ", line)


class Shell:
    """Runs a documented command against `cluster` with the given helm binary, from `cwd`
    (the repository, or a recorded release's copy of it)."""

    def __init__(self, cluster: RealCluster, helm: str, cwd: Path = ROOT) -> None:
        self.env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig))
        self.helm = helm
        self.cwd = cwd

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        argv = shlex.split(command)
        if argv[0] == "helm":
            argv[0] = self.helm
        elif argv[0] == "remediation-operator":  # this checkout's, whatever PATH says
            argv[:1] = [sys.executable, "-m", "remediation_operator"]
        return subprocess.run(
            argv,
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def __call__(self, command: str) -> str:
        result = self.run(command)
        assert result.returncode == 0, f"{command}\n{result.stdout}{result.stderr}"
        return result.stdout


HELM_BINARIES = {"helm3": "helm3", "helm4": "helm"}
"""Where `make e2e` puts each major (scripts/install_helm.py --major 3 / 4) in the venv."""


def helm(major: str) -> str:
    """The path of `major` ("helm3" or "helm4") in this virtualenv; pytest.skip if absent."""
    path = Path(sys.executable).parent / HELM_BINARIES[major]
    if not path.is_file():
        number = major.removeprefix("helm")
        pytest.skip(f"{path} missing: run `make e2e` (scripts/install_helm.py --major {number})")
    return str(path)


CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
CRD_NAMES = ("remediationpolicies.remediation.gpuops.io", "remediations.remediation.gpuops.io")


def empty_cluster(cluster: RealCluster) -> None:
    """An empty cluster as the install page starts from: no CRDs of ours (deleting them
    deletes every policy and Remediation; the tests re-apply today's CRDs when done), and no
    cluster-scoped RBAC object named like the chart's (other e2e tests apply the rendered
    ClusterRole and binding by hand, and Helm refuses to adopt an object it did not make)."""
    rbac = "/apis/rbac.authorization.k8s.io/v1/"
    for kind in ("clusterroles", "clusterrolebindings"):
        for item in cluster.admin.get(rbac + kind)["items"]:
            name = item["metadata"]["name"]
            if name.startswith("remediation-operator"):
                cluster.admin.delete(f"{rbac}{kind}/{name}")
    for name in CRD_NAMES:
        cluster.admin.delete(CRD_PATH + name)
    for name in CRD_NAMES:
        cluster.admin.wait_for(
            lambda name=name: cluster.admin.find(CRD_PATH + name) is None,
            within=60,
            what=f"CRD {name} deleted",
        )


def crd(cluster: RealCluster, name: str = CRD_NAMES[0]) -> dict[str, Any]:
    found: dict[str, Any] = cluster.admin.get(CRD_PATH + name)
    return found


def owned_by_the_crd_release(found: dict[str, Any]) -> bool:
    """The CRD chart's marks on a live CRD: kept on uninstall, owned by its release."""
    metadata = found["metadata"]
    annotations = metadata.get("annotations") or {}
    labels = metadata.get("labels") or {}
    return (
        annotations.get("helm.sh/resource-policy") == "keep"
        and annotations.get("meta.helm.sh/release-name") == "remediation-operator-crd"
        and labels.get("app.kubernetes.io/managed-by") == "Helm"
        and labels.get("app.kubernetes.io/part-of") == "remediation-operator"
    )
