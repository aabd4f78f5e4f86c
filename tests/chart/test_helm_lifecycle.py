"""Install and uninstall exactly as docs/install.md says, with Helm 3 and Helm 4, on a real
kube-apiserver: the "Install" section (CRD chart, operator chart, the default policy in DryRun),
the "Roll out a policy gradually" upgrade to Enforce, the NOTES' own commands, "Uninstall".
The upgrade from the previous release is tests/e2e/test_upgrade.py.

Real: kube-apiserver + etcd (tests/e2e/control_plane.py; skipped without the binaries), helm
v3.17 and v4.1 (scripts/install_helm.py), kubectl, the charts. No operator pod runs (the server
has no kubelet); what is checked is what Helm and the API server did.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.chart.documented import (
    CRD_NAMES,
    CRD_PATH,
    ROOT,
    Shell,
    commands,
    crd,
    empty_cluster,
    helm,
    owned_by_the_crd_release,
)
from tests.e2e.control_plane import RealCluster

NAMESPACE = "remediation-system"
NAMESPACES = (NAMESPACE, f"{NAMESPACE}-executors", f"{NAMESPACE}-node-problem-detector")


def clean_up(cluster: RealCluster, shell: Shell) -> None:
    """Both releases and the namespaces gone (waiting for the namespace controller), today's
    CRDs back: the server is shared with the other e2e tests."""
    subprocess.run(
        [
            shell.helm,
            "uninstall",
            "remediation-operator",
            "remediation-operator-crd",
            *("-n", NAMESPACE, "--ignore-not-found"),
        ],
        env=shell.env,
        capture_output=True,
        check=False,
        timeout=120,
    )
    for name in NAMESPACES:
        cluster.admin.delete(f"/api/v1/namespaces/{name}")
        cluster.admin.wait_for(
            lambda name=name: cluster.admin.find(f"/api/v1/namespaces/{name}") is None,
            within=120,
            what=f"namespace {name} deleted",
        )
    cluster.admin.apply_crds(sorted((ROOT / "crds").glob("*.yaml")))


@pytest.mark.parametrize("major", ["helm3", "helm4"])
def test_a_fresh_install_and_the_enforce_upgrade_as_documented(
    real_cluster: RealCluster, major: str
) -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not on PATH")
    shell = Shell(real_cluster, helm(major))
    policy = "/apis/remediation.gpuops.io/v1alpha1/remediationpolicies/gpu-default"
    deployment = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/remediation-operator"
    try:
        empty_cluster(real_cluster)
        install = list(commands("Install"))
        steps = [c for c in install if c.startswith(("kubectl create", "kubectl label", "helm "))]
        assert [c.split()[:2] for c in steps] == [
            ["kubectl", "create"],
            ["kubectl", "label"],
            ["helm", "install"],
            ["helm", "install"],
            ["helm", "upgrade"],  # "Roll out a policy gradually": switch to Enforce
        ], steps
        notes = ""
        for command in steps[:4]:
            notes = shell(command)
        namespace = real_cluster.admin.get(f"/api/v1/namespaces/{NAMESPACE}")
        assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == (
            "restricted"
        )
        executors = real_cluster.admin.get(f"/api/v1/namespaces/{NAMESPACE}-executors")
        assert executors["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == (
            "privileged"
        )
        assert real_cluster.admin.get(policy)["spec"]["mode"] == "DryRun"
        shell("kubectl get rpol,rem")
        # The CRDs are the CRD chart's, as the page says, whatever Helm's major: the operator
        # chart has no crds/ that Helm 4 would re-apply over them (issue 25).
        for name in CRD_NAMES:
            assert owned_by_the_crd_release(crd(real_cluster, name)), crd(real_cluster, name)

        # The NOTES' own upgrade line, with the chart path filled in.
        [line] = [
            x.strip()
            for x in notes.splitlines()
            if x.strip().startswith("helm upgrade") and "<chart>" in x and "defaultPolicy" in x
        ]
        shell(line.replace("<chart>", "charts/remediation-operator"))
        assert real_cluster.admin.get(policy)["spec"]["mode"] == "Enforce"
        image = real_cluster.admin.get(deployment)["spec"]["template"]["spec"]["containers"][0]
        assert image["image"].startswith("registry.example.com/remediation-operator:"), (
            "--reset-then-reuse-values kept the user's image.repository"
        )
        shell(steps[4])  # the docs' own Enforce upgrade: idempotent
        assert real_cluster.admin.get(policy)["spec"]["mode"] == "Enforce"

        for command in (c for c in commands("Uninstall") if c.startswith("helm uninstall")):
            shell(command)
        assert real_cluster.admin.find(policy) is None
        assert real_cluster.admin.find(deployment) is None
        assert all(real_cluster.admin.find(CRD_PATH + name) for name in CRD_NAMES), "kept"
    finally:
        clean_up(real_cluster, shell)


def test_notes_warn_when_the_cluster_would_refuse_the_executor_jobs(
    real_cluster: RealCluster,
) -> None:
    """A restricted executor namespace and a missing RuntimeClass are named at install time
    (the chart's NOTES look them up), not discovered when the first GPU reset is refused."""
    shell = Shell(real_cluster, helm("helm4"))
    executors = f"{NAMESPACE}-executors"
    npd = f"{NAMESPACE}-node-problem-detector"
    try:
        for name, level in (
            (NAMESPACE, "restricted"),
            (executors, "restricted"),
            (npd, "baseline"),
        ):
            real_cluster.admin.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": name,
                        "labels": {"pod-security.kubernetes.io/enforce": level},
                    },
                }
            )
        notes = shell(
            f"helm install remediation-operator charts/remediation-operator -n {NAMESPACE}"
            " --set executors.namespace.create=false"
            " --set nodeProblemDetector.enabled=true"
            " --set nodeProblemDetector.namespace.create=false"
        )
        assert f'node-problem-detector namespace {npd} enforces Pod Security "baseline"' in notes
        assert f"node-problem-detector runs in namespace {npd}" in notes
        assert f'executor namespace {executors} enforces Pod Security "restricted"' in notes
        assert f"kubectl label namespace {executors} --overwrite" in notes

        real_cluster.admin.apply(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": executors,
                    "labels": {"pod-security.kubernetes.io/enforce": "privileged"},
                },
            }
        )
        quiet = shell(
            f"helm upgrade remediation-operator charts/remediation-operator -n {NAMESPACE}"
            " --reset-then-reuse-values"
            " --set nodeProblemDetector.enabled=false"
        )
        assert "WARNING" not in quiet
    finally:
        clean_up(real_cluster, shell)
