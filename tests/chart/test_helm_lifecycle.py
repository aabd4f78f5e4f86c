"""Install, upgrade and uninstall exactly as docs/install.md says, with the shipped Helm, on a
real kube-apiserver: an installation of the previous chart (CRDs from its `crds/`, an older
CRD schema and older defaults) is upgraded with the "Upgrade" section's commands, and the new
CRD field and the new default arrive while the user's own value stays; then "Uninstall".

Real: kube-apiserver + etcd (tests/e2e/control_plane.py; skipped without the binaries), the
shipped helm (.venv/bin/helm), kubectl, the charts. Faked: the previous chart version is a copy
of today's chart with one CRD field removed, an older diagnostics image tag and version 0.0.9 (the
repository has no released chart to download). No operator pod runs (the server has no
kubelet); what is checked is what Helm and the API server did.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.chart import chart_check
from tests.e2e.control_plane import RealCluster

ROOT = chart_check.ROOT
INSTALL_DOC = ROOT / "docs" / "install.md"
NAMESPACE = "remediation-system"
POLICIES_CRD = "remediationpolicies.remediation.gpuops.io"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
REMOVED_FIELD = "startupGrace"
OLD_DIAGNOSE_TAG = "4.2.2-1-ubuntu22.04"


def commands(section: str) -> Iterator[str]:
    """The helm and kubectl commands of one `## section` of docs/install.md, in order, with
    continuation lines joined and trailing comments dropped."""
    text = INSTALL_DOC.read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    for block in re.findall(r"```console\n(.*?)```", body, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line.startswith(("helm ", "kubectl ")):
                yield line


def previous_chart(tmp: Path) -> Path:
    chart = tmp / "remediation-operator"
    shutil.copytree(chart_check.CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["version"] = "0.0.9"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    values = chart / "values.yaml"
    values.write_text(
        values.read_text().replace("tag: 4.2.3-1-ubuntu22.04", f"tag: {OLD_DIAGNOSE_TAG}")
    )
    crd_file = chart / "crds" / f"{POLICIES_CRD}.yaml"
    crd = yaml.safe_load(crd_file.read_text())
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        del spec["properties"][REMOVED_FIELD]
    crd_file.write_text(yaml.safe_dump(crd))
    return chart


class Shell:
    def __init__(self, cluster: RealCluster, helm: str) -> None:
        self.env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig))
        self.helm = helm

    def __call__(self, command: str) -> str:
        argv = shlex.split(command)
        if argv[0] == "helm":
            argv[0] = self.helm
        result = subprocess.run(
            argv, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=180, check=False
        )
        assert result.returncode == 0, f"{command}\n{result.stdout}{result.stderr}"
        return result.stdout


def clean_up(cluster: RealCluster, shell: Shell) -> None:
    """Both releases and the namespace gone (waiting for the namespace controller), today's
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
    for name in (NAMESPACE, f"{NAMESPACE}-executors"):
        cluster.admin.delete(f"/api/v1/namespaces/{name}")
        cluster.admin.wait_for(
            lambda name=name: cluster.admin.find(f"/api/v1/namespaces/{name}") is None,
            within=120,
            what=f"namespace {name} deleted",
        )
    cluster.admin.apply_crds(sorted((ROOT / "crds").glob("*.yaml")))


def chart_version() -> str:
    return str(yaml.safe_load((chart_check.CHART / "Chart.yaml").read_text())["version"])


def spec_fields(cluster: RealCluster) -> set[str]:
    crd = cluster.admin.get(CRD_PATH + POLICIES_CRD)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return set(schema["properties"]["spec"]["properties"])


def diagnose_image(cluster: RealCluster) -> str:
    config_map = cluster.admin.get(
        f"/api/v1/namespaces/{NAMESPACE}/configmaps/remediation-operator-job-templates"
    )
    job = yaml.safe_load(config_map["data"]["diagnose.yaml"])
    return str(job["spec"]["template"]["spec"]["containers"][0]["image"])


def test_install_upgrade_and_uninstall_as_documented(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not on PATH")
    tools = chart_check.Tools.find()
    shell = Shell(real_cluster, tools.helm)
    old = previous_chart(tmp_path)
    try:
        # The previous chart, installed the way its documentation said (CRDs from crds/).
        shell(f"kubectl create namespace {NAMESPACE}")
        shell(
            f"helm install remediation-operator {old} --namespace {NAMESPACE}"
            " --set defaultPolicy.enabled=true"
        )
        assert REMOVED_FIELD not in spec_fields(real_cluster)
        assert diagnose_image(real_cluster).endswith(OLD_DIAGNOSE_TAG)

        # Today's "Upgrade" section, literally: adopt the CRDs, upgrade CRDs, upgrade release.
        upgrade = list(commands("Upgrade"))
        adopt = [c for c in upgrade if c.startswith(("kubectl annotate crd", "kubectl label crd"))]
        helm = [c for c in upgrade if c.startswith("helm upgrade")]
        assert len(adopt) == 2, upgrade
        assert len(helm) == 2, upgrade
        for command in adopt + helm:
            shell(command)

        assert REMOVED_FIELD in spec_fields(real_cluster), "the CRD upgrade did not arrive"
        crd = real_cluster.admin.get(CRD_PATH + POLICIES_CRD)
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert diagnose_image(real_cluster).endswith(":4.2.3-1-ubuntu22.04"), "new default kept out"
        policy = "/apis/remediation.gpuops.io/v1alpha1/remediationpolicies/gpu-default"
        assert real_cluster.admin.get(policy)["spec"]["mode"] == "DryRun", "user value lost"
        history = shell(f"helm history remediation-operator -n {NAMESPACE} -o yaml")
        assert [r["chart"] for r in yaml.safe_load(history)] == [
            "remediation-operator-0.0.9",
            f"remediation-operator-{chart_version()}",
        ]

        # "Uninstall", step 4: both releases go; the chart's default policy goes with the
        # operator's release, the CRDs stay (keep).
        uninstall = [c for c in commands("Uninstall") if c.startswith("helm uninstall")]
        assert len(uninstall) == 2, uninstall
        for command in uninstall:
            shell(command)
        assert real_cluster.admin.find(policy) is None
        assert real_cluster.admin.find(CRD_PATH + POLICIES_CRD) is not None
    finally:
        clean_up(real_cluster, shell)


def test_a_fresh_install_and_the_enforce_upgrade_as_documented(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not on PATH")
    tools = chart_check.Tools.find()
    shell = Shell(real_cluster, tools.helm)
    policy = "/apis/remediation.gpuops.io/v1alpha1/remediationpolicies/gpu-default"
    deployment = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/remediation-operator"
    try:
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
    finally:
        clean_up(real_cluster, shell)


def test_notes_warn_when_the_cluster_would_refuse_the_executor_jobs(
    real_cluster: RealCluster,
) -> None:
    """A restricted executor namespace and a missing RuntimeClass are named at install time
    (the chart's NOTES look them up), not discovered when the first GPU reset is refused."""
    tools = chart_check.Tools.find()
    shell = Shell(real_cluster, tools.helm)
    executors = f"{NAMESPACE}-executors"
    try:
        for name, level in ((NAMESPACE, "restricted"), (executors, "restricted")):
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
            " --set jobTemplates.diagnose.runtimeClassName=nvidia"
        )
        assert f'executor namespace {executors} enforces Pod Security "restricted"' in notes
        assert f"kubectl label namespace {executors} --overwrite" in notes
        assert 'RuntimeClass "nvidia" does not exist' in notes

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
            " --reset-then-reuse-values --set jobTemplates.diagnose.runtimeClassName="
        )
        assert "WARNING" not in quiet
    finally:
        clean_up(real_cluster, shell)
